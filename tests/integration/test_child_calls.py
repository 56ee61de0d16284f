"""The sandbox side (src/lib/run/child.c, between clone and execve) calls
nothing that may malloc or lock: tools/check-child-calls.py follows every
call from child.c.o through the built static libraries. The self-test is
its control: a malloc two calls deep fails the same check."""
import os
import subprocess
import sys

import pytest

from conftest import AJ_BIN, must_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "tools", "check-child-calls.py")
BUILD = os.path.dirname(AJ_BIN)
LIBS = ["src/lib/run/libajrun.a", "src/lib/isolate/libajisolate.a", "src/lib/detect/libajdetect.a",
        "src/lib/base/libajbase.a", "src/lib/policy/libajpolicy.a"]


def test_child_object_calls_only_async_signal_safe_functions():
    libs = [os.path.join(BUILD, l) for l in LIBS]
    if not all(os.path.exists(l) for l in libs):
        must_skip("static libraries not found next to AJ_BIN: %s" % BUILD)
    p = subprocess.run([sys.executable, CHECK] + libs, capture_output=True, text=True, timeout=120)
    if p.returncode == 77:
        pytest.skip("not applicable to a sanitizer build (its runtime is called everywhere): " + p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every outside call allowed" in p.stdout, p.stdout


def test_the_check_fails_on_a_malloc():
    p = subprocess.run([sys.executable, CHECK, "--self-test", os.environ.get("CC", "cc")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "forbidden on the sandbox side: malloc" in p.stdout, p.stdout
