#!/usr/bin/env bash
# Sandboxes per second with C concurrent clients (default 2), each running
# start+run+teardown of /bin/true back to back for D seconds (default 5):
# bare fork+exec, bwrap (comparable flags, as in startup.sh), agentjail cold
# (`agentjail run`) and agentjail-warm (CLIENTS processes each holding a
# pool: build/bench/aj-pool-bench throughput), all in the same invocation,
# one after the other. A benchmark, not a test: it never fails because of a
# number.
#
# USAGE
#   bench/throughput.sh [-c CLIENTS] [-d SECONDS] [--agentjail PATH]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
clients=2
secs=5
aj="$repo/build/agentjail"

while [ $# -gt 0 ]; do
    case "$1" in
    -c) [ $# -ge 2 ] || exit 2; clients=$2; shift 2 ;;
    -d) [ $# -ge 2 ] || exit 2; secs=$2; shift 2 ;;
    --agentjail) [ $# -ge 2 ] || exit 2; aj=$2; shift 2 ;;
    -h|--help) sed -n '/^# USAGE/,/^# *bench/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "throughput.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$clients" "$secs"; do
    case "$v" in ''|*[!0-9]*|0) echo "throughput.sh: -c and -d want positive integers" >&2; exit 2 ;; esac
done

exec /usr/bin/python3 -c '
import os, shutil, sys, time
sys.path.insert(0, sys.argv[4])
from benchlib import Candidates, bwrap_argv, keep_runnable, run_once

clients, secs, aj = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
TRUE = "/bin/true"
C = Candidates()
C.add("bare", [TRUE])
bw = shutil.which("bwrap")
if bw:
    C.add("bwrap", bwrap_argv(bw, [TRUE]))
else:
    C.add("bwrap", None, "not installed")
C.add("agentjail", [aj, "run", "--", TRUE], None if os.access(aj, os.X_OK) else "%s not built" % aj)
keep_runnable(C)

def client(argv, end, wfd):
    n = fails = 0
    while time.monotonic() < end:
        _, code = run_once(argv)
        n += 1
        fails += code != 0
    os.write(wfd, ("%d %d\n" % (n, fails)).encode())
    os._exit(0)

rows = {}
for name, argv in C.cands:
    r, w = os.pipe()
    end = time.monotonic() + secs
    t0 = time.monotonic()
    pids = []
    for _ in range(clients):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            client(argv, end, w)
        pids.append(pid)
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)
    elapsed = time.monotonic() - t0
    data = os.read(r, 4096).decode().split()
    os.close(r)
    n = sum(int(x) for x in data[0::2])
    fails = sum(int(x) for x in data[1::2])
    rows[name] = (n / elapsed, fails)

# The warm path: CLIENTS processes, each with its own pool (aj-pool-bench).
import json, subprocess
pb = os.path.join(os.path.dirname(aj), "bench", "aj-pool-bench")
if os.access(pb, os.X_OK):
    out = subprocess.run([pb, "throughput", str(int(secs)), str(clients), TRUE], capture_output=True, text=True)
    if out.returncode == 0:
        w = json.loads(out.stdout)
        rows["agentjail-warm"] = (w["warm_per_s"], w["warm_failed"])
    else:
        C.skipped.append(("agentjail-warm", "aj-pool-bench failed: " + out.stderr.strip()[-200:]))
else:
    C.skipped.append(("agentjail-warm", "%s not built" % pb))

print("throughput: /bin/true, %d clients, %.0f s each (%d CPUs)" % (clients, secs, os.cpu_count() or 0))
print("%-15s %12s %8s %8s %7s" % ("candidate", "runs/s", "x bare", "x bwrap", "failed"))
for name, (rate, fails) in rows.items():
    xb = "%.2fx" % (rate / rows["bare"][0]) if "bare" in rows else "-"
    xw = "%.2fx" % (rate / rows["bwrap"][0]) if "bwrap" in rows else "-"
    print("%-15s %12.1f %8s %8s %7d" % (name, rate, xb, xw, fails))
for name, why in C.skipped:
    print("%-15s skipped: %s" % (name, why))
' "$clients" "$secs" "$aj" "$here"
