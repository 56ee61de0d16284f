#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/startup.sh -- what a sandbox costs per run, start to teardown.
#
# WHAT IS MEASURED
#   Wall time of one complete run of /bin/true, and of python3 -c pass:
#   spawn, sandbox setup, exec, exit, teardown, reaped by the harness. Measured as perf_counter_ns()
#   around os.posix_spawn() + os.waitpid() in a small Python loop (no
#   subprocess module, no shell), stdin/stdout/stderr on /dev/null, for:
#     bare      fork+exec of /bin/true: the floor, the harness's own overhead
#     bwrap     bwrap --unshare-all --die-with-parent --new-session, /usr
#               bound read-only, /bin /lib /lib64 /sbin as symlinks into
#               usr (or read-only binds where they are real directories),
#               --proc /proc --dev /dev --tmpfs /tmp, and --seccomp with a
#               flatpak-like deny-list filter (bench/bwrap_filter.c)
#     nsjail    nsjail -Mo with /usr, /lib, /lib64, /bin bound read-only
#               (only with --nsjail PATH: Debian 12 does not package it)
#     agentjail build/agentjail run -- CMD (its default policy): the cold path
#     firejail  firejail --quiet --noprofile --net=none CMD (if installed)
#   and, from a second harness, the warm path:
#     agentjail-warm  aj_pool_run() from a long-lived process holding a
#               pool (build/bench/aj-pool-bench latency): the start+run+
#               teardown of one command in a pre-initialised sandbox, with
#               10 ms idle between calls for the pool to refill (sustained
#               load is bench/throughput.sh's). Its "x bare" is against a
#               bare posix_spawn from that same process, measured in the
#               same rounds; its "x bwrap" divides by the bwrap median above.
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
#   bench/startup.sh [-n N] [--json FILE] [--agentjail PATH] [--nsjail PATH]
#     -n N            runs per candidate (default 200)
#     --json FILE     also write the raw samples (ns) and the summary as JSON
#     --agentjail P   the binary to time (default: build/agentjail in the repo)
#     --nsjail P      also time this nsjail binary
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

n=200
json=""
aj="$repo/build/agentjail"
nsjail=""

usage() {
    sed -n '/^# USAGE/,/^# *--nsjail/p' "$0" | sed 's/^# \{0,1\}//'
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
    --nsjail)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        nsjail=$2; shift 2 ;;
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

# bwrap's seccomp filter: compiled here with libseccomp, as syscall.sh does.
filter=""
if command -v cc >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if cc -O2 -o "$tmp/bwrap_filter" "$here/bwrap_filter.c" -lseccomp 2>/dev/null &&
        "$tmp/bwrap_filter" "$tmp/bwrap.bpf"; then
        filter="$tmp/bwrap.bpf"
    else
        echo "startup.sh: could not build bwrap's seccomp filter (libseccomp-dev?); bwrap runs without one" >&2
    fi
fi

# The timing loop. Kept to posix_spawn + waitpid so the harness adds as
# little as possible to each sample (bare shows what it does add).
"$py" -c '
import json, os, platform, random, shutil, subprocess, sys, time
sys.path.insert(0, sys.argv[-1])
from benchlib import Candidates, bwrap_argv, keep_runnable, measure, run_once, summarise

n, json_path, aj, nsjail, bpf = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
PAYLOADS = {"true": ["/bin/true"], "python": ["/usr/bin/python3", "-c", "pass"]}

def ratio(summary, name, ref):
    if ref not in summary or name not in summary:
        return "-"
    return "%.2fx" % (summary[name]["median_ns"] / summary[ref]["median_ns"])

doc = {"benchmark": "startup", "runs": n,
       "host": {"node": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()},
       "payloads": {}}
pool_bench = os.path.join(os.path.dirname(aj), "bench", "aj-pool-bench")
for label, cmd in PAYLOADS.items():
    C = Candidates()
    add = C.add
    add("bare", list(cmd))
    p = shutil.which("bwrap")
    fa = [(os.POSIX_SPAWN_OPEN, 3, bpf, os.O_RDONLY, 0)] if bpf else []
    add("bwrap", bwrap_argv(p, cmd, 3 if bpf else None) if p else None, None if p else "not installed", extra_fa=fa)
    if nsjail:
        ns = [nsjail, "-Mo", "--quiet", "-R", "/usr", "-R", "/lib", "-R", "/lib64", "-R", "/bin", "--"] + cmd
        add("nsjail", ns, None if os.access(nsjail, os.X_OK) else "%s is not executable" % nsjail)
    if os.access(aj, os.X_OK):
        add("agentjail", [aj, "run", "--"] + cmd)
    else:
        add("agentjail", None, "%s not built" % aj)
    p = shutil.which("firejail")
    add("firejail", [p, "--quiet", "--noprofile", "--net=none"] + cmd if p else None,
        None if p else "not installed (optional)")
    keep_runnable(C)
    cands, skipped = C.cands, C.skipped
    samples, fails, warm = measure(cands, n, extra_fa=C.extra_fa)
    summary = summarise(cands, samples, fails)

    warm_row = None
    if os.access(pool_bench, os.X_OK):
        pb = subprocess.run([pool_bench, "latency", str(n)] + cmd, capture_output=True, text=True)
        if pb.returncode == 0:
            warm_row = json.loads(pb.stdout)
        else:
            skipped.append(("agentjail-warm", "aj-pool-bench failed: " + pb.stderr.strip()[-200:]))
    else:
        skipped.append(("agentjail-warm", "%s not built" % pool_bench))

    print("startup: %s, %d runs each, interleaved (%s, kernel %s, %d CPUs)"
          % (" ".join(cmd), n, platform.node(), platform.release(), os.cpu_count() or 0))
    print("%-15s %10s %10s %10s %8s %8s %7s" %
          ("candidate", "median ms", "p95 ms", "min ms", "x bare", "x bwrap", "failed"))
    for name, _ in cands:
        s = summary[name]
        print("%-15s %10.3f %10.3f %10.3f %8s %8s %7d" %
              (name, s["median_ns"] / 1e6, s["p95_ns"] / 1e6, s["min_ns"] / 1e6,
               ratio(summary, name, "bare"), ratio(summary, name, "bwrap"), s["failed"]))
    if warm_row:
        w, b = warm_row["warm"], warm_row["bare"]
        xbw = "%.2fx" % (w["median_ns"] / summary["bwrap"]["median_ns"]) if "bwrap" in summary else "-"
        print("%-15s %10.3f %10.3f %10.3f %8s %8s %7d" %
              ("agentjail-warm", w["median_ns"] / 1e6, w["p95_ns"] / 1e6, w["min_ns"] / 1e6,
               "%.2fx" % (w["median_ns"] / b["median_ns"]), xbw, w["failed"]))
        print("  (warm: in-process harness; its own bare spawn median was %.3f ms)" % (b["median_ns"] / 1e6))
    for name, why in skipped:
        print("%-15s skipped: %s" % (name, why))
    print()
    doc["payloads"][label] = {"command": cmd, "warmup": warm,
                              "commands": {name: argv for name, argv in cands},
                              "skipped": dict(skipped), "summary": summary, "warm": warm_row,
                              "samples_ns": samples}

if json_path:
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("raw samples written to %s" % json_path)
' "$n" "$json" "$aj" "$nsjail" "$filter" "$here"
