#!/usr/bin/env bash
# Build the policy-file fuzzer with clang (libFuzzer + ASan + UBSan) into
# build-fuzz/ and run it for SECONDS (default 30). Exit 1 on any crash, leak
# or sanitizer report (libFuzzer writes the input to build-fuzz/crashes/;
# keep it in tests/fuzz/crashes/ as a regression seed). Needs clang and
# libclang-rt-14-dev (or another clang with its fuzzer runtime).
#   tests/fuzz/run.sh          # 30 s, what CI runs
#   tests/fuzz/run.sh 3600     # a long session
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
CC=${CC:-clang}
out=build-fuzz
mkdir -p "$out/corpus" "$out/crashes"

python3 tools/embed-profiles.py "$out/profiles.c" profiles/*.json
# Every file of the policy group (a new one is fuzzed without touching this).
# shellcheck disable=SC2046 # pkg-config output is meant to be split
"$CC" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -D_GNU_SOURCE -std=gnu17 -Iinclude -Isrc/lib/base -Isrc/lib/policy \
    tests/fuzz/fuzz_policy.c src/lib/base/error.c src/lib/base/util.c src/lib/base/hostpath.c \
    src/lib/policy/*.c \
    "$out/profiles.c" $(pkg-config --cflags --libs jansson nettle) -o "$out/fuzz_policy"

# The working corpus grows in build-fuzz/corpus; the seeds stay read-only.
# Crash files named crash-*/leak-*/timeout-*/oom-* land in build-fuzz/crashes/.
status=0
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$out/fuzz_policy" -max_len=4096 -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/crashes/" -print_final_stats=1 \
    "$out/corpus" tests/fuzz/corpus tests/fuzz/crashes || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz_policy: FAILED (exit $status); reproducers:" >&2
    ls -l "$out/crashes/" >&2
    echo "replay one with: $out/fuzz_policy FILE" >&2
    exit 1
fi
echo "fuzz_policy: no findings in ${secs}s"
