#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/limits.sh -- what resource limits cost per run, and what the
# supervisor itself costs in memory.
#
# WHAT IS MEASURED
#   1. Wall time of one complete run of /bin/true (spawn, setup, exec, exit,
#      teardown, reaped), timed as in bench/startup.sh: perf_counter_ns()
#      around os.posix_spawn() + os.waitpid(), stdio on /dev/null, all
#      candidates in interleaved shuffled rounds after a warm-up:
#        bare       /bin/true: the harness's own floor
#        default    agentjail run -- /bin/true: as root, a run cgroup with
#                   the default memory and pids limits (v1 and/or v2 per
#                   controller, whatever the host has) plus v2 tracking
#        limits     agentjail run --memory 256M --pids 128 --cpus 1: one more
#                   controller (cpu) to join and write
#        nocgroup   the default run as nobody through setpriv: no writable
#                   cgroup, so no cgroup at all (rlimits only)
#        default-sp the default run as root through the same setpriv + env
#                   wrapper, so that nocgroup vs default-sp differ in the uid
#                   only
#        sp-bare    /bin/true through the setpriv + env wrapper: its cost
#      Note that nobody also means rootless mode (own uid mapped, no per-run
#      host uid lease), so nocgroup saves a little more than the cgroup work.
#   2. The supervisor's own peak RSS (VmHWM), polled from /proc/PID/status
#      while it runs, and /usr/bin/time -f %M (if installed: the largest RSS
#      of the supervisor and the processes it reaped; not measured with
#      wait4 here, whose ru_maxrss would count this Python harness), for:
#        trivial    agentjail run -- /bin/true
#        flood-cut  agentjail run --output-limit 1M -- head -c 1G /dev/zero
#        flood-all  agentjail run --output-limit 2G -- head -c 1G /dev/zero
#                   (the whole GiB relayed to /dev/null)
#
# HOW TO READ IT
#   median, p95 (nearest rank), min in ms; x nocg = median / nocgroup median
#   (and x default-sp for the setpriv-wrapped pair, the fairer comparison).
#   Peak RSS in KiB, median over the repetitions: a flood must not make the
#   supervisor grow (it relays through a fixed buffer), so flood-* should be
#   close to trivial.
#   This is a benchmark, not a test: it never fails because of a number. It
#   exits non-zero only for a usage error or when python3 is missing.
#   Candidates that cannot run here (not root, no setpriv, limits refused)
#   are listed as skipped with the reason.
#
# USAGE
#   bench/limits.sh [-n N] [-r R] [--json FILE] [--agentjail PATH]
#     -n N            timed runs per candidate (default 200)
#     -r R            repetitions per RSS scenario (default 5)
#     --json FILE     also write the raw samples and the summary as JSON
#     --agentjail P   the binary to measure (default: build/agentjail in the repo)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

n=200
reps=5
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
    -r)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        reps=$2; shift 2 ;;
    --json)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        json=$2; shift 2 ;;
    --agentjail)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        aj=$2; shift 2 ;;
    -h|--help)
        usage; exit 0 ;;
    *)
        echo "limits.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

for v in "$n" "$reps"; do
    case "$v" in
    ''|*[!0-9]*|0) echo "limits.sh: -n and -r want a positive integer, got '$v'" >&2; exit 2 ;;
    esac
done

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
[ -n "$py" ] || { echo "limits.sh: python3 not found" >&2; exit 2; }

exec "$py" -c '
import json, os, platform, random, shutil, sys, time
sys.path.insert(0, sys.argv[-1])
from benchlib import Candidates, keep_runnable, measure, median, run_once, summarise, spawn_env, spawn_actions
env, fa = spawn_env(), spawn_actions()

n, reps, json_path, aj = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
TRUE = "/bin/true"
is_root = os.geteuid() == 0
setpriv = shutil.which("setpriv")
envbin = shutil.which("env") or "/usr/bin/env"

def wrap(uid):
    return [setpriv, "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
            envbin, "HOME=/tmp"]

C = Candidates()
add = C.add

have_aj = os.access(aj, os.X_OK)
no_aj = None if have_aj else "%s not built" % aj
no_sp = None
if not setpriv:
    no_sp = "setpriv not installed"
elif not is_root:
    no_sp = "needs root (setpriv to nobody)"

add("bare", [TRUE])
add("default", [aj, "run", "--", TRUE], no_aj)
add("limits", [aj, "run", "--memory", "256M", "--pids", "128", "--cpus", "1", "--", TRUE], no_aj)
add("nocgroup", wrap(65534) + [aj, "run", "--", TRUE] if not (no_aj or no_sp) else None,
    no_aj or no_sp)
add("default-sp", wrap(0) + [aj, "run", "--", TRUE] if not (no_aj or no_sp) else None,
    no_aj or no_sp)
add("sp-bare", wrap(0) + [TRUE] if not no_sp else None, no_sp)

keep_runnable(C)
cands, skipped = C.cands, C.skipped
samples, fails, warm = measure(cands, n)

summary = summarise(cands, samples, fails)

def ratio(name, ref):
    if ref not in summary or name == "bare" or name == "sp-bare":
        return "-"
    return "%.2fx" % (summary[name]["median_ns"] / summary[ref]["median_ns"])

# ---- supervisor peak RSS ----------------------------------------------------

def hwm_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None

def rss_run(argv):
    """Spawn, poll the supervisor'"'"'s VmHWM until it exits (exec gave it a
    fresh mm: this is agentjail alone), reap."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    peak = None
    while True:
        v = hwm_kb(pid)
        if v is not None:
            peak = v if peak is None else max(peak, v)
        got, st = os.waitpid(pid, os.WNOHANG)
        if got:
            break
    t1 = time.perf_counter_ns()
    return peak, (t1 - t0) / 1e6, os.waitstatus_to_exitcode(st)

# ru_maxrss from our own wait4 would count this Python process (a spawned
# child shares its mm until exec); /usr/bin/time is a small C parent.
gnu_time = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None

def time_run(argv):
    """%M of /usr/bin/time: max RSS of agentjail and what it reaped."""
    import tempfile
    with tempfile.NamedTemporaryFile("r", prefix="ajbench-") as f:
        pid = os.posix_spawn(gnu_time, [gnu_time, "-f", "%M", "-o", f.name] + argv, env,
                             file_actions=fa)
        os.waitpid(pid, 0)
        try:
            return int(f.read().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None

rss_scen = [
    ("trivial", [aj, "run", "--", TRUE]),
    ("flood-cut", [aj, "run", "--output-limit", "1M", "--", "head", "-c", "1G", "/dev/zero"]),
    ("flood-all", [aj, "run", "--output-limit", "2G", "--", "head", "-c", "1G", "/dev/zero"]),
]
rss = {}
if have_aj:
    for name, argv in rss_scen:
        rows = [rss_run(argv) for _ in range(reps)]
        tm = [time_run(argv) for _ in range(reps)] if gnu_time else []
        hw = [r[0] for r in rows if r[0] is not None]
        tm_ok = [x for x in tm if x is not None]
        rss[name] = {"argv": argv, "vmhwm_kb": [r[0] for r in rows], "time_maxrss_kb": tm,
                     "wall_ms": [r[1] for r in rows], "exit": [r[2] for r in rows],
                     "vmhwm_median_kb": median(hw) if hw else None,
                     "time_maxrss_median_kb": median(tm_ok) if tm_ok else None,
                     "wall_median_ms": median([r[1] for r in rows])}

# ---- report -------------------------------------------------------------------

print("limits: /bin/true, %d runs each, interleaved (%s, kernel %s, %d CPUs, %s)"
      % (n, platform.node(), platform.release(), os.cpu_count() or 0,
         "root" if is_root else "uid %d" % os.geteuid()))
print("%-11s %10s %10s %10s %8s %13s %7s" %
      ("candidate", "median ms", "p95 ms", "min ms", "x nocg", "x default-sp", "failed"))
for name, _ in cands:
    s = summary[name]
    print("%-11s %10.3f %10.3f %10.3f %8s %13s %7d" %
          (name, s["median_ns"] / 1e6, s["p95_ns"] / 1e6, s["min_ns"] / 1e6,
           ratio(name, "nocgroup"), ratio(name, "default-sp"), s["failed"]))
for name, why in skipped:
    print("%-11s skipped: %s" % (name, why))
if rss:
    print()
    print("supervisor peak RSS, median of %d runs" % reps)
    print("%-11s %16s %16s %10s %8s" % ("scenario", "VmHWM sup KiB", "time %M KiB",
                                        "wall ms", "exit"))
    for name, _ in rss_scen:
        r = rss[name]
        hw = "-" if r["vmhwm_median_kb"] is None else "%d" % r["vmhwm_median_kb"]
        tm = "-" if r["time_maxrss_median_kb"] is None else "%d" % r["time_maxrss_median_kb"]
        print("%-11s %16s %16s %10.1f %8s" % (name, hw, tm, r["wall_median_ms"],
                                               ",".join(sorted(set(map(str, r["exit"]))))))
    if not gnu_time:
        print("time %M: /usr/bin/time not installed (apt-get install time)")

if json_path:
    doc = {"benchmark": "limits", "payload": TRUE, "runs": n, "rss_reps": reps,
           "host": {"node": platform.node(), "kernel": platform.release(),
                    "cpus": os.cpu_count(), "euid": os.geteuid()},
           "commands": {name: argv for name, argv in cands},
           "skipped": dict(skipped), "summary": summary, "samples_ns": samples, "rss": rss}
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("raw samples written to %s" % json_path)
' "$n" "$reps" "$json" "$aj" "$here"
