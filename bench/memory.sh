#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/memory.sh -- what a sandbox costs in memory.
#
# WHAT IS MEASURED
#   per run     peak RSS of the process tree of one `agentjail run -- /bin/true`
#               (the supervisor, the sandbox's init and the payload: wait4's
#               ru_maxrss is the largest of them), next to bwrap's and a bare
#               /bin/true's, median of N runs each, spawned from a small C
#               harness (aj-pool-bench peak): exec carries the spawner's
#               high-water mark into ru_maxrss, so a big spawner (Python)
#               would hide every figure under its own.
#   per pooled  memory held by one idle sandbox of a warm pool (parked: every
#               layer applied, waiting for a command): the proportional set
#               size (PSS) of its two processes, the memory its cgroup is
#               charged (kernel objects and the tmpfs root included, when a
#               memory cgroup is available), and the supervisor's own RSS
#               before and after preparing the pool
#               (build/bench/aj-pool-bench memory K).
#   A benchmark, not a test: it never fails because of a number.
#
# USAGE
#   bench/memory.sh [-n N] [-k K] [--agentjail PATH]
#     -n N   runs per candidate for the per-run figure (default 50)
#     -k K   sandboxes in the pool for the per-pooled figure (default 8)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
n=50
k=8
aj="$repo/build/agentjail"

while [ $# -gt 0 ]; do
    case "$1" in
    -n) [ $# -ge 2 ] || exit 2; n=$2; shift 2 ;;
    -k) [ $# -ge 2 ] || exit 2; k=$2; shift 2 ;;
    --agentjail) [ $# -ge 2 ] || exit 2; aj=$2; shift 2 ;;
    -h|--help) sed -n '/^# USAGE/,/^# *-k/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$n" "$k"; do
    case "$v" in ''|*[!0-9]*|0) echo "memory.sh: -n and -k want positive integers" >&2; exit 2 ;; esac
done

exec /usr/bin/python3 -c '
import json, os, shutil, subprocess, sys
sys.path.insert(0, sys.argv[4])
from benchlib import bwrap_argv

n, k, aj = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
TRUE = "/bin/true"

pb = os.path.join(os.path.dirname(aj), "bench", "aj-pool-bench")
if not os.access(pb, os.X_OK):
    print("memory.sh: %s not built (meson compiles it with agentjail)" % pb, file=sys.stderr)
    sys.exit(2)

def peak_kb(argv):
    out = subprocess.run([pb, "peak", str(n)] + argv, capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None

cands = [("bare", [TRUE])]
bw = shutil.which("bwrap")
if bw:
    cands.append(("bwrap", bwrap_argv(bw, [TRUE])))
if os.access(aj, os.X_OK):
    cands.append(("agentjail", [aj, "run", "--", TRUE]))

print("memory: peak RSS of one run of /bin/true (largest process of the tree, median of %d)" % n)
print("%-10s %12s %8s" % ("candidate", "peak KiB", "x bare"))
base = None
floor = None
for name, argv in cands:
    m = peak_kb(argv)
    if not m:
        print("%-10s failed" % name)
        continue
    floor = m["floor_kb"]
    base = base or m["median_kb"]
    print("%-10s %12d %7.2fx" % (name, m["median_kb"], m["median_kb"] / base))
print()
out = subprocess.run([pb, "memory", str(k)], capture_output=True, text=True)
if out.returncode != 0:
    print("pooled: skipped (aj-pool-bench failed: %s)" % out.stderr.strip()[-200:])
    sys.exit(0)
m = json.loads(out.stdout)
print("memory: one idle pooled sandbox (pool of %d, %d found)" % (m["pooled"], m["processes_found"]))
print("  PSS of its processes (init + parked payload): %6d KiB" % m["per_sandbox_pss_kb"])
cg = m["per_sandbox_cgroup_kb"]
print("  charged to its memory cgroup:                 %s" % ("%6d KiB" % cg if cg >= 0 else "   n/a (no memory cgroup)"))
print("  supervisor RSS before / with the pool:        %6d / %d KiB" %
      (m["supervisor_rss_before_kb"], m["supervisor_rss_with_pool_kb"]))
' "$n" "$k" "$aj" "$here"
