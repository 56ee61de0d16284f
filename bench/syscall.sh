#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/syscall.sh -- what a system call costs inside the sandbox.
#
# WHAT IS MEASURED
#   Nanoseconds per call, measured inside a small C program
#   (bench/syscall_bench.c, compiled here with cc -O2) that times a tight
#   loop of one operation with CLOCK_MONOTONIC after a warm-up:
#     getppid     the cheapest allowed syscall: the seccomp filter's own cost
#     open+close  open(/usr/bin/env) + close: a path walk Landlock checks too
#     stat        stat(/usr/bin/env)
#     unshare     unshare(0x1), an invalid flag: bare, the kernel says EINVAL
#                 at once; inside, every unshare is escape-indicative, so the
#                 filter sends it to the supervisor, which records an
#                 escape_attempt and answers EPERM: one notification round
#                 trip (two context switches, the event built as JSON)
#   for four candidates:
#     bare        the program run directly
#     bwrap       inside bubblewrap with startup.sh's flags and its seccomp
#                 filter (bench/bwrap_filter.c: allow by default, a deny
#                 list), when bwrap and libseccomp-dev are there
#     agentjail   build/agentjail run --bind-ro PROG -- PROG ... (default
#                 policy: seccomp with the escape monitor, Landlock, ...)
#     no-seccomp  the same with AGENTJAIL_UNSAFE_SKIP_LAYER=seccomp, which
#                 leaves the filter (and so the monitor) out: the difference
#                 to agentjail is what the filter costs a benign call
#   Start-up is not in the numbers: the program times its own loop.
#   Rounds are interleaved (each round runs every candidate once, for each
#   operation), and each number is the median over the rounds.
#
# HOW TO READ IT
#   x bare     ns inside / ns bare. For getppid, open+close and stat this is
#              the cost of being sandboxed for a benign call: the filter
#              (a binary tree of comparisons, the same program with or
#              without the monitor: the monitor only changes the action of
#              the escape-indicative rules, which benign calls never reach)
#              plus Landlock on path lookups. Benign calls never go to the
#              supervisor.
#   unshare    the round trip an escape attempt pays. It is paid only by
#              escape-indicative calls, which ordinary programs do not make
#              (tests/integration/test_detection.py checks that Python and
#              shell workloads make none).
#
#   This is a benchmark, not a test: it never fails because of a time. It
#   exits non-zero only for a usage error or when it cannot build or run
#   the program. Numbers from a loaded or virtualised host are noisy;
#   compare ratios from the same invocation.
#
# USAGE
#   bench/syscall.sh [-r ROUNDS] [-s SCALE] [--agentjail PATH]
#     -r ROUNDS       rounds per candidate and operation (default 7)
#     -s SCALE        multiply the iteration counts (default 1: 1e6 getppid,
#                     2e5 open+close and stat, 5e3 unshare)
#     --agentjail P   the binary to time (default: build/agentjail in the repo)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

rounds=7
scale=1
aj="$repo/build/agentjail"

usage() {
    sed -n '/^# USAGE/,/^# *--agentjail/p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
    -r)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        rounds=$2; shift 2 ;;
    -s)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        scale=$2; shift 2 ;;
    --agentjail)
        [ $# -ge 2 ] || { usage >&2; exit 2; }
        aj=$2; shift 2 ;;
    -h|--help)
        usage; exit 0 ;;
    *)
        echo "syscall.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for v in "$rounds" "$scale"; do
    case "$v" in
    ''|*[!0-9]*|0) echo "syscall.sh: -r and -s want positive integers, got '$v'" >&2; exit 2 ;;
    esac
done
[ -x "$aj" ] || { echo "syscall.sh: $aj is not built (ninja -C build)" >&2; exit 2; }
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || { echo "syscall.sh: no C compiler ($cc)" >&2; exit 2; }

# Build into build/bench/ when there is a build dir, else a temp dir.
if [ -d "$repo/build" ] && [ -w "$repo/build" ]; then
    out="$repo/build/bench"
    mkdir -p "$out"
    tmp=""
else
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/ajbench-XXXXXX")
    out=$tmp
fi
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
prog="$out/syscall_bench"
"$cc" -O2 -Wall -o "$prog" "$here/syscall_bench.c"
# bwrap's filter, as startup.sh builds it.
bpf=""
bwrap=$(command -v bwrap || true)
if [ -n "$bwrap" ] && "$cc" -O2 -o "$out/bwrap_filter" "$here/bwrap_filter.c" -lseccomp 2>/dev/null &&
    "$out/bwrap_filter" "$out/bwrap.bpf"; then
    bpf="$out/bwrap.bpf"
fi
chmod 0755 "$prog"
[ -z "$tmp" ] || chmod 0755 "$tmp" # root mode: the sandbox runs as another uid

inside=/opt/syscall_bench
target=/usr/bin/env
ops="getppid openclose stat unshare"
iters() {
    case "$1" in
    getppid) echo $((1000000 * scale)) ;;
    openclose|stat) echo $((200000 * scale)) ;;
    unshare) echo $((5000 * scale)) ;;
    esac
}

# One run: prints "NS ERRNO", or "- -" if the candidate could not run.
run() { # candidate op n
    case "$1" in
    bare) set -- "$2" "$3" "$prog" ;;
    bwrap)
        [ -n "$bpf" ] || { echo "- -"; return; }
        set -- "$2" "$3" "$bwrap" --unshare-all --die-with-parent --new-session --ro-bind /usr /usr \
            --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin \
            --proc /proc --dev /dev --tmpfs /tmp --ro-bind "$prog" "$inside" --seccomp 3 "$inside" ;;
    agentjail) set -- "$2" "$3" "$aj" run --bind-ro "$prog:$inside" -- "$inside" ;;
    no-seccomp) set -- "$2" "$3" env AGENTJAIL_UNSAFE_SKIP_LAYER=seccomp "$aj" run --bind-ro "$prog:$inside" -- "$inside" ;;
    esac
    op=$1 n=$2
    shift 2
    # The program exits 0; a refused or failed run prints nothing usable.
    if [ "$1" = "$bwrap" ]; then
        line=$("$@" "$op" "$n" "$target" 2>/dev/null 3<"$bpf") || true
    else
        line=$("$@" "$op" "$n" "$target" 2>/dev/null) || true
    fi
    set -- $line
    if [ $# -eq 3 ] && [ "$1" = "$op" ]; then echo "$2 $3"; else echo "- -"; fi
}

data=$(mktemp "${TMPDIR:-/tmp}/ajbench-data-XXXXXX")
trap 'cleanup; rm -f "$data"' EXIT INT TERM
cands="bare bwrap agentjail no-seccomp"
r=1
while [ "$r" -le "$rounds" ]; do
    for op in $ops; do
        n=$(iters "$op")
        for c in $cands; do
            echo "$op $c $(run "$c" "$op" "$n") $n" >>"$data"
        done
    done
    r=$((r + 1))
done

printf 'syscall: ns per call, median of %s rounds (%s, kernel %s, %s CPUs, %s)\n' \
    "$rounds" "$(uname -n)" "$(uname -r)" "$(nproc 2>/dev/null || echo '?')" \
    "$( [ "$(id -u)" = 0 ] && echo "root mode" || echo "rootless mode")"
awk -v ops="$ops" '
function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return -1
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    calls[$1] = $5
    if ($3 != "-") { v[$1, $2] = v[$1, $2] " " $3; err[$1, $2] = $4 } else bad[$1, $2]++
}
END {
    label["getppid"] = "getppid"; label["openclose"] = "open+close"; label["stat"] = "stat"; label["unshare"] = "unshare(0x1)"
    printf "%-14s %9s %10s %10s %8s %12s %8s %13s %8s\n", "operation", "calls", "bare ns", "bwrap ns", "x bare",
        "agentjail ns", "x bare", "no-seccomp ns", "x bare"
    n = split(ops, o, " ")
    for (i = 1; i <= n; i++) {
        op = o[i]
        b = median(v[op, "bare"]); w = median(v[op, "bwrap"]); a = median(v[op, "agentjail"]); s = median(v[op, "no-seccomp"])
        printf "%-14s %9d %10s %10s %8s %12s %8s %13s %8s\n", label[op], calls[op],
            b < 0 ? "-" : sprintf("%.1f", b),
            w < 0 ? "-" : sprintf("%.1f", w), (w < 0 || b <= 0) ? "-" : sprintf("%.2fx", w / b),
            a < 0 ? "-" : sprintf("%.1f", a), (a < 0 || b <= 0) ? "-" : sprintf("%.2fx", a / b),
            s < 0 ? "-" : sprintf("%.1f", s), (s < 0 || b <= 0) ? "-" : sprintf("%.2fx", s / b)
    }
    printf "unshare(0x1) answered: bare %s, bwrap %s, agentjail %s, no-seccomp %s (errno numbers: 22 EINVAL, 1 EPERM)\n",
        err["unshare", "bare"] == "" ? "-" : err["unshare", "bare"],
        err["unshare", "bwrap"] == "" ? "-" : err["unshare", "bwrap"],
        err["unshare", "agentjail"] == "" ? "-" : err["unshare", "agentjail"],
        err["unshare", "no-seccomp"] == "" ? "-" : err["unshare", "no-seccomp"]
    for (k in bad) { split(k, kk, SUBSEP); printf "%s under %s: %d run(s) gave no number (refused or failed)\n", kk[1], kk[2], bad[k] }
}' "$data"
