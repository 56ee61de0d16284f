"""The sandbox side (src/lib/run/child.c, between clone and execve) calls
nothing that may malloc or lock: tools/check-child-calls.py follows every
call from child.c.o through the built static libraries. The self-test is
its control: a malloc two calls deep fails the same check."""
import os
import subprocess
import sys

import json

from conftest import AJ_BIN, AJ_HELPERS, must_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "tools", "check-child-calls.py")


def sanitized(build):
    """Whether a meson build dir was built with sanitizers (b_sanitize)."""
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            opts = json.load(f)
    except OSError:
        return False
    return any(o["name"] == "b_sanitize" and o["value"] not in ("none", "") for o in opts)


# The object code that runs between clone and exec. A sanitizer build's
# child.c.o calls the sanitizer runtime on every access (the compiler adds
# that, not our code), so the check reads the release build the helpers come
# from (AJ_HELPERS, build/tests) when AJ_BIN is the ASan/UBSan build.
BUILD = os.path.dirname(AJ_BIN)
if sanitized(BUILD):
    BUILD = os.path.dirname(AJ_HELPERS)
LIBS = ["src/lib/run/libajrun.a", "src/lib/isolate/libajisolate.a", "src/lib/detect/libajdetect.a",
        "src/lib/base/libajbase.a", "src/lib/policy/libajpolicy.a"]


def test_child_object_calls_only_async_signal_safe_functions():
    libs = [os.path.join(BUILD, l) for l in LIBS]
    assert not sanitized(BUILD), "no unsanitized build to check: %s" % BUILD
    if not all(os.path.exists(l) for l in libs):
        must_skip("static libraries not found next to AJ_BIN: %s" % BUILD)
    p = subprocess.run([sys.executable, CHECK] + libs, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every outside call allowed" in p.stdout, p.stdout


def test_the_check_fails_on_a_malloc():
    p = subprocess.run([sys.executable, CHECK, "--self-test", os.environ.get("CC", "cc")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "forbidden on the sandbox side: malloc" in p.stdout, p.stdout
