#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. unit tests (cmocka) of the release and the ASan/UBSan build;
#   2. integration + escape tests (pytest, real kernel) against the release
#      build as root, then the compatibility check (tests/compat with
#      AJ_COMPAT=1, ~5 min: release build, as root, here only), then as
#      nobody (setpriv), then against the ASan/UBSan build as root;
#   3. in qemu, on Debian 12's stock 6.1 and 6.12 kernels with pure cgroup v2
#      (below; AJ_VM=0 leaves it out).
# Ends with one line "N passed, N failed" covering every suite.
# Env: AJ_LEAK_RUNS (runs in the leak test, default 1000 here),
#      AJ_QUICK=1 (skip the ASan and nobody passes), AJ_VM=0 (skip the VM part),
#      AJ_COMPAT=0 (skip the compatibility check). AJ_HEAVY=1 is set for the release
#      root pass only: tests marked heavy_only (image builds, loads) run there once.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh must run as root (it also runs every suite as nobody itself)" >&2
  exit 2
fi
scripts/deps.sh test
scripts/build.sh --with-asan || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

out=$(mktemp -d /tmp/ajtest-run.XXXXXX)
chmod 1777 "$out"   # the nobody pass writes its report here too
trap 'rm -rf "$out"' EXIT
export AJ_LEAK_RUNS=${AJ_LEAK_RUNS:-1000}
compat=${AJ_COMPAT:-1}
unset AJ_COMPAT   # only the compat pass below runs tests/compat's heavy tests
status=0

unit() { # build dir
  local dir=$1 t
  for t in "$dir"/tests/test-unit-*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    echo "== unit: $t"
    CMOCKA_MESSAGE_OUTPUT=TAP "$t" > "$out/$(basename "$dir")-$(basename "$t").tap" 2>&1 || status=1
    cat "$out/$(basename "$dir")-$(basename "$t").tap"
  done
}

pytest_as() { # name, bin dir, runner prefix...
  local name=$1 dir=$2; shift 2
  echo "== pytest: $name"
  echo "$name" >> "$out/expected-reports"
  AJ_BIN="$root/$dir/agentjail" AJ_HELPERS="$root/build/tests" \
    "$@" /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs \
    --junitxml="$out/$name.xml" tests/ || status=1
}

unit build
unit build-asan
echo "== build rules: include rules, forbidden includes, installed library"
{
  if python3 tools/check-includes.py --self-test . > "$out/include-rules.log" 2>&1; then
    echo "ok 1 - include rules hold and the checker refuses each kind of violation"
  else
    echo "not ok 1 - include rules: $(tr '\n' ' ' < "$out/include-rules.log")"
  fi
} > "$out/include-rules.tap"
tests/build/forbidden-include.sh build > "$out/forbidden-include.tap" 2>&1 || status=1
tests/build/install.sh build > "$out/install.tap" 2>&1 || status=1
if tools/tidy.sh build > "$out/tidy.log" 2>&1; then
  echo "ok 1 - clang-tidy: no new findings" > "$out/tidy.tap"
else
  { echo "not ok 1 - clang-tidy: new findings (tools/tidy.sh)"; sed 's/^/# /' "$out/tidy.log"; } > "$out/tidy.tap"
  status=1
fi
for f in include-rules forbidden-include install tidy; do cat "$out/$f.tap"; done
echo "== fuzz: policy parser (${AJ_FUZZ_SECONDS:-20}s)"
if tests/fuzz/run.sh "${AJ_FUZZ_SECONDS:-20}" > "$out/fuzz.log" 2>&1; then
  echo "ok 1 - fuzz_policy: no findings" > "$out/fuzz.tap"
else
  echo "not ok 1 - fuzz_policy: see the log below" > "$out/fuzz.tap"
  tail -40 "$out/fuzz.log"
  status=1
fi
cat "$out/fuzz.tap"
pytest_as root build env AJ_HEAVY=1
# issue 13's compatibility check: the fast subsets of CPython's suite, Debian's
# package suites and the agent workloads, bare (as nobody) and in the sandbox;
# fails on a sandbox-only failure not in docs/compatibility.md's allowed list.
# Once, as root (its bare runs become nobody), against the release build.
if [ "$compat" != 0 ]; then
  echo "== pytest: compat (AJ_COMPAT=1 tests/compat)"
  echo compat >> "$out/expected-reports"
  AJ_COMPAT=1 AJ_BIN="$root/build/agentjail" AJ_HELPERS="$root/build/tests" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs --junitxml="$out/compat.xml" tests/compat || status=1
fi
if [ "${AJ_QUICK:-0}" != 1 ]; then
  pytest_as nobody build setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp AJ_LEAK_RUNS=100
  pytest_as asan build-asan env AJ_LEAK_RUNS=50 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fi

# 3. the same binaries on Debian 12's stock kernels in qemu, pure cgroup v2 (scripts/vm-test.sh,
#    docs/testing-vms.md): the full pass on 6.1, the kernel-feature pass on 6.12. AJ_VM=0 skips.
if [ "${AJ_VM:-1}" != 0 ]; then
  for spec in 6.1:full 6.12:--features; do
    k=${spec%%:*} arg=${spec#*:}
    tag=vm$(echo "$k" | tr -d .)
    echo "== VM: Debian kernel $k, pure cgroup v2 ($arg)"
    echo "$tag-root" >> "$out/expected-reports"
    [ "$arg" = full ] && printf '%s\n' "$tag-nobody" "$tag-nobody-nodeleg" >> "$out/expected-reports"
    scripts/vm-test.sh --kernel "$k" --timeout "${AJ_VM_TIMEOUT:-2100}" --out "$out/$tag" -- \
      scripts/vm-suite.sh "$([ "$arg" = full ] || echo "$arg")" || status=1
    cp "$out/$tag"/*.xml "$out/$tag"/*.tap "$out/" 2>/dev/null
  done
fi

/usr/bin/python3 - "$out" <<'PY'
import glob, os, re, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
passed = failed = skipped = 0
for tap in glob.glob(os.path.join(out, "*.tap")):
    for line in open(tap, errors="replace"):
        if re.match(r"^ok \d+", line): passed += 1
        elif re.match(r"^not ok \d+", line): failed += 1
expected = open(os.path.join(out, "expected-reports")).read().split() \
    if os.path.exists(os.path.join(out, "expected-reports")) else []
for name in expected:
    if not os.path.exists(os.path.join(out, name + ".xml")):
        print("pytest pass %r wrote no report: counted as a failure" % name)
        failed += 1
for xml in glob.glob(os.path.join(out, "*.xml")):
    for suite in ET.parse(xml).getroot().iter("testsuite"):
        t, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        passed += t - f - e - s; failed += f + e; skipped += s
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
rc=$?
[ $status -ne 0 ] && rc=1
exit $rc
