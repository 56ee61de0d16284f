#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/startup.sh -- what a sandbox costs per run, start to teardown.
#
# WHAT IS MEASURED
#   Wall time of one complete run of /bin/true: spawn, sandbox setup, exec,
#   exit, teardown, reaped by the harness. Measured as perf_counter_ns()
#   around os.posix_spawn() + os.waitpid() in a small Python loop (no
#   subprocess module, no shell), stdin/stdout/stderr on /dev/null, for:
#     bare      fork+exec of /bin/true: the floor, the harness's own overhead
#     bwrap     bwrap --unshare-all --die-with-parent --new-session, /usr
#               bound read-only, /bin /lib /lib64 /sbin as symlinks into
#               usr (or read-only binds where they are real directories),
#               --proc /proc --dev /dev --tmpfs /tmp
#     agentjail build/agentjail run -- /bin/true (its default policy)
#     firejail  firejail --quiet --noprofile --net=none /bin/true (if installed)
#   All candidates run in the same invocation, in interleaved rounds (each
#   round runs every candidate once, in a shuffled order), after a short
#   warm-up, so that CPU frequency changes, cache state and background noise
#   are spread over all of them instead of landing on one.
#
# HOW TO READ IT
#   median    typical cost of one run, in ms
#   p95       95th percentile (nearest rank): the slow tail
#   x bare    median / bare median: total cost relative to a plain exec
#   x bwrap   median / bwrap median: the comparison that matters -- bwrap
#             does roughly the same namespace + mount work, so agentjail at
#             ~1x bwrap means its extra layers (seccomp, Landlock, rlimits,
#             cgroup) are cheap; much more than 1x is worth a profile.
#   A candidate that is missing or whose trial run fails is listed as
#   skipped, with the reason. Failed runs during timing are counted and
#   shown; their times are still recorded.
#
#   This is a benchmark, not a test: it never fails because of a time. It
#   exits non-zero only for a usage error or when python3 is missing.
#   Numbers from a loaded or virtualised host are noisy; compare ratios
#   from the same invocation, not absolute times across machines.
#
# USAGE
#   bench/startup.sh [-n N] [--json FILE] [--agentjail PATH]
#     -n N            runs per candidate (default 200)
#     --json FILE     also write the raw samples (ns) and the summary as JSON
#     --agentjail P   the binary to time (default: build/agentjail in the repo)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

n=200
json=""
aj="$repo/build/agentjail"

usage() {
    sed -n '/^# USAGE/,/^# *--agentjail/p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
    -n)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        n=$2; shift 2 ;;
    --json)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        json=$2; shift 2 ;;
    --agentjail)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        aj=$2; shift 2 ;;
    -h|--help)
        usage; exit 0 ;;
    *)
        echo "startup.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

case "$n" in
''|*[!0-9]*|0) echo "startup.sh: -n wants a positive integer, got '$n'" >&2; exit 2 ;;
esac

# bwrap is the reference point; install it if we can.
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "startup.sh: installing bubblewrap" >&2
        apt-get install -y bubblewrap >/dev/null 2>&1 ||
            echo "startup.sh: apt-get install bubblewrap failed; bwrap will be skipped" >&2
    else
        echo "startup.sh: bwrap missing and cannot apt-get install it; it will be skipped" >&2
    fi
fi

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
[ -n "$py" ] || { echo "startup.sh: python3 not found" >&2; exit 2; }

# The timing loop. Kept to posix_spawn + waitpid so the harness adds as
# little as possible to each sample (bare shows what it does add).
exec "$py" -c '
import json, os, platform, random, shutil, sys, time
sys.path.insert(0, sys.argv[-1])
from benchlib import Candidates, keep_runnable, measure, run_once, summarise

n, json_path, aj = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TRUE = "/bin/true"

def bwrap_argv(path):
    argv = [path, "--unshare-all", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    return argv + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", TRUE]

C = Candidates()
add = C.add

add("bare", [TRUE])
p = shutil.which("bwrap")
add("bwrap", bwrap_argv(p) if p else None, None if p else "not installed")
if os.access(aj, os.X_OK):
    add("agentjail", [aj, "run", "--", TRUE])
else:
    add("agentjail", None, "%s not built" % aj)
p = shutil.which("firejail")
add("firejail", [p, "--quiet", "--noprofile", "--net=none", TRUE] if p else None,
    None if p else "not installed (optional)")

keep_runnable(C)
cands, skipped = C.cands, C.skipped
samples, fails, warm = measure(cands, n)

summary = summarise(cands, samples, fails)

def ratio(name, ref):
    if ref not in summary:
        return "-"
    return "%.2fx" % (summary[name]["median_ns"] / summary[ref]["median_ns"])

print("startup: /bin/true, %d runs each, interleaved (%s, kernel %s, %d CPUs)"
      % (n, platform.node(), platform.release(), os.cpu_count() or 0))
print("%-10s %10s %10s %10s %8s %8s %7s" %
      ("candidate", "median ms", "p95 ms", "min ms", "x bare", "x bwrap", "failed"))
for name, _ in cands:
    s = summary[name]
    print("%-10s %10.3f %10.3f %10.3f %8s %8s %7d" %
          (name, s["median_ns"] / 1e6, s["p95_ns"] / 1e6, s["min_ns"] / 1e6,
           ratio(name, "bare"), ratio(name, "bwrap"), s["failed"]))
for name, why in skipped:
    print("%-10s skipped: %s" % (name, why))

if json_path:
    doc = {"benchmark": "startup", "payload": TRUE, "runs": n, "warmup": warm,
           "host": {"node": platform.node(), "kernel": platform.release(),
                    "cpus": os.cpu_count()},
           "commands": {name: argv for name, argv in cands},
           "skipped": dict(skipped), "summary": summary, "samples_ns": samples}
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("raw samples written to %s" % json_path)
' "$n" "$json" "$aj" "$here"
