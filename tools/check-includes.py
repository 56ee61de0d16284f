#!/usr/bin/env python3
"""The include rules of the layout (STYLE.md §1, README "Layout").

Each group under src/lib/ is compiled with an include path that lists only
the groups it may use, so most forbidden includes do not compile. This
adds what an include path cannot say:

  - inside src/lib/isolate/ one kernel layer never includes another
    (mount.c does not include aj_seccomp.h): only run/ combines layers;
  - inside src/lib/detect/ a module includes its own header and the audit
    writer's (events are how detection reports), no other;
  - the public headers in include/ include only each other and system
    headers, never jansson (no library type leaks into the interface);
  - examples/ (embedders) include only the public headers;
  - src/server/ includes only the public headers and its own: the
    server is a client of the library's public API, nothing inside it;
  - nothing outside src/cli/ includes the CLI's header.

Usage: check-includes.py [--stamp FILE] [--self-test] SOURCE_ROOT
Exit 1 with one line per violation ("FILE:LINE: ... (rule)").
"""
import os
import re
import sys
import tempfile

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# Which groups a group may include (besides itself, handled per group).
GROUPS = {
    "include": {"include"},
    "src/lib/base": {"include", "src/lib/base"},
    "src/lib/policy": {"include", "src/lib/base", "src/lib/policy"},
    "src/lib/isolate": {"include", "src/lib/base", "src/lib/policy", "src/lib/isolate"},
    "src/lib/detect": {"include", "src/lib/base", "src/lib/policy", "src/lib/detect"},
    "src/lib/run": {"include", "src/lib/base", "src/lib/policy", "src/lib/isolate", "src/lib/detect",
                    "src/lib/run"},
    "src/assess": {"include", "src/lib/base", "src/lib/policy", "src/lib/isolate", "src/lib/detect",
                   "src/lib/run", "src/assess", "src/probe"},
    "src/probe": {"include", "src/lib/base", "src/probe"},
    "src/cli": {"include", "src/lib/base", "src/lib/policy", "src/lib/isolate", "src/lib/detect",
                "src/lib/run", "src/assess", "src/server", "src/cli"},
    "src/server": {"include", "src/server"},
    "src/egress": {"include", "src/egress"},
    "examples": {"include"},
}
# Headers several modules of a group share on purpose.
SHARED_IN_GROUP = {"src/lib/detect": {"aj_audit.h"}}
# Groups whose modules are layers: each may include only its own header.
ONE_MODULE_PER_FILE = {"src/lib/isolate", "src/lib/detect"}


def group_of(rel):
    for g in sorted(GROUPS, key=len, reverse=True):
        if rel == g or rel.startswith(g + "/"):
            return g
    return None


def header_index(root):
    """Project header name -> group (names are unique across the tree)."""
    idx = {}
    for g in GROUPS:
        d = os.path.join(root, g)
        if not os.path.isdir(d):
            continue
        for dirpath, _, files in os.walk(d):
            for f in files:
                if f.endswith(".h"):
                    idx.setdefault(f, group_of(os.path.relpath(os.path.join(dirpath, f), root)))
    return idx


def module_of(filename):
    """cgroup_v2.c and aj_cgroup_backend.h are both of module "cgroup"."""
    stem = os.path.splitext(os.path.basename(filename))[0]
    stem = stem[3:] if stem.startswith("aj_") else stem
    return stem.split("_")[0]


def check(root):
    idx = header_index(root)
    bad = []
    for g in GROUPS:
        d = os.path.join(root, g)
        if not os.path.isdir(d):
            continue
        for dirpath, _, files in os.walk(d):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                with open(path, errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        kind, name = m.groups()
                        base = os.path.basename(name)
                        if g == "include" and base.startswith("jansson"):
                            bad.append("%s:%d: public header includes %s (no library type in the "
                                       "public interface)" % (rel, n, name))
                            continue
                        if kind == "<":
                            continue
                        hg = idx.get(base)
                        if hg is None:
                            continue  # generated or local to a test: not a project header
                        if hg not in GROUPS[g]:
                            bad.append("%s:%d: %s (%s) may not include %s (%s)" % (rel, n, rel, g, name, hg))
                        elif base == "cli.h" and g != "src/cli":
                            bad.append("%s:%d: only src/cli includes cli.h" % (rel, n))
                        elif hg == g and g in ONE_MODULE_PER_FILE:
                            own = module_of(f)
                            if module_of(base) != own and base not in SHARED_IN_GROUP.get(g, ()):
                                bad.append("%s:%d: %s is one layer; it may not include another layer's "
                                           "header %s (only src/lib/run combines layers)" % (rel, n, f, name))
    return bad


def self_test():
    """The checker must refuse each kind of violation and accept the allowed
    forms (a positive control for every rule)."""
    cases = [
        ("src/lib/isolate/mount.c", '#include "aj_seccomp.h"\n', True),   # layer -> layer
        ("src/lib/isolate/mount.c", '#include "aj_notify.h"\n', True),    # isolate -> detect
        ("src/lib/isolate/mount.c", '#include "aj_cli_only.h"\n', True),  # -> cli
        ("src/lib/detect/decoy.c", '#include "aj_mount.h"\n', True),      # detect -> isolate
        ("src/lib/base/util.c", '#include "aj_policy_x.h"\n', True),      # base -> policy
        ("include/agentjail.h", '#include <jansson.h>\n', True),          # jansson in public
        ("examples/embed.c", '#include "aj_util.h"\n', True),             # embedder -> internal
        ("src/lib/isolate/mount.c", '#include "aj_mount.h"\n#include "aj_policy_x.h"\n'
                                    '#include "aj_util.h"\n#include "aj_error.h"\n', False),
        ("src/lib/detect/decoy.c", '#include "aj_decoy.h"\n#include "aj_audit.h"\n', False),
        ("src/lib/run/sandbox.c", '#include "aj_mount.h"\n#include "aj_notify.h"\n', False),
        ("examples/embed.c", '#include "agentjail.h"\n#include <stdio.h>\n', False),
        ("src/server/http.c", '#include "aj_util.h"\n', True),           # server -> lib internal
        ("src/server/http.c", '#include "aj_policy_x.h"\n', True),       # server -> lib internal
        ("src/server/http.c", '#include "aj_cli_only.h"\n', True),       # server -> cli
        ("src/server/http.c", '#include "agentjail.h"\n#include "srv.h"\n', False),
    ]
    headers = {"include/agentjail.h": "", "include/aj_error.h": "",
               "src/lib/base/aj_util.h": "", "src/lib/policy/aj_policy_x.h": "",
               "src/lib/isolate/aj_mount.h": "", "src/lib/isolate/aj_seccomp.h": "",
               "src/lib/detect/aj_notify.h": "", "src/lib/detect/aj_audit.h": "",
               "src/lib/detect/aj_decoy.h": "", "src/cli/aj_cli_only.h": "",
               "src/server/srv.h": ""}
    failures = 0
    for i, (rel, text, want_bad) in enumerate(cases, 1):
        with tempfile.TemporaryDirectory() as d:
            for h, body in headers.items():
                os.makedirs(os.path.join(d, os.path.dirname(h)), exist_ok=True)
                with open(os.path.join(d, h), "w") as fh:
                    fh.write(body)
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "a") as fh:
                fh.write(text)
            got = check(d)
            if bool(got) != want_bad:
                failures += 1
                print("self-test %d: %s with %r: expected %s, got %r" %
                      (i, rel, text, "a violation" if want_bad else "none", got))
    return failures


def main(argv):
    stamp = None
    do_self_test = False
    args = []
    it = iter(argv)
    for a in it:
        if a == "--stamp":
            stamp = next(it)
        elif a == "--self-test":
            do_self_test = True
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    status = 0
    if do_self_test and self_test():
        status = 1
    bad = check(args[0])
    for b in bad:
        print(b)
    if bad:
        print("include rules: %d violation(s); see tools/check-includes.py" % len(bad))
        status = 1
    if status == 0 and stamp:
        with open(stamp, "w") as fh:
            fh.write("ok\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
