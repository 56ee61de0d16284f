#!/usr/bin/env bash
# clang-tidy (.clang-tidy) over libagentjail, assess, the CLI and the server, with
# warnings as errors for new findings: a finding is new when its file,
# check and message are not in tools/tidy-baseline.txt (as many times).
# Line numbers are left out of the key so that edits elsewhere in a file
# do not turn old findings into new ones.
#   tools/tidy.sh BUILD_DIR            exit 1 and list new findings
#   tools/tidy.sh BUILD_DIR --update   rewrite the baseline (review the diff)
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [--update]}
cd "$(dirname "$0")/.."
root=$(pwd)
baseline=tools/tidy-baseline.txt
raw=$(mktemp /tmp/aj-tidy.XXXXXX)
trap 'rm -f "$raw" "$raw.keys"' EXIT
run-clang-tidy -p "$build" -quiet -j "$(nproc)" "$root/src/(lib|cli|assess|server|egress)/" >"$raw" 2>&1 || true
if grep -q 'error: ' "$raw" && ! grep -q ': warning: ' "$raw"; then
  echo "clang-tidy failed to run:" >&2; grep 'error: ' "$raw" | head >&2; exit 1
fi
# "path:line:col: warning: message [check]" -> "relpath|check|message"
sed 's/\x1b\[[0-9;]*m//g' "$raw" | python3 -c '
import os, re, sys
root = sys.argv[1]
seen = set()
for line in sys.stdin:
    m = re.match(r"^(\S+?):(\d+):\d+: warning: (.*?) \[([\w.,-]+)\]$", line.strip())
    if not m:
        continue
    path = os.path.relpath(os.path.normpath(os.path.join(sys.argv[2], m.group(1))), root)
    key = (path, m.group(2))
    if key + (m.group(4),) in seen:   # a header reported once per includer
        continue
    seen.add(key + (m.group(4),))
    print("%s|%s|%s" % (path, m.group(4), m.group(3)))
' "$root" "$build" | sort >"$raw.keys"
if [ "${2:-}" = --update ]; then
  cp "$raw.keys" "$baseline"
  echo "tidy: baseline rewritten: $(wc -l <"$baseline") findings"
  exit 0
fi
new=$(comm -23 "$raw.keys" <(sort "$baseline"))
if [ -n "$new" ]; then
  echo "tidy: new clang-tidy findings (fix them, or if reviewed as false positives, add to $baseline):"
  echo "$new"
  exit 1
fi
echo "tidy: no new findings ($(wc -l <"$raw.keys") known, in $baseline)"
