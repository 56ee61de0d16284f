#!/usr/bin/env bash
# The build refuses a forbidden include (issue 14): compile one file with the
# exact command ninja uses for a module of a group (from the build's
# compile_commands.json), once including what the group may use (must
# compile: the positive control) and once what it may not (must fail, and
# fail because the header is not on the group's include path).
# Usage: forbidden-include.sh BUILD_DIR   (TAP on stdout)
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/aj-forbidden.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# group module | allowed include | forbidden include | why it is forbidden
cases=(
  "src/lib/isolate/mount.c|aj_policy.h|aj_notify.h|an isolation layer includes detection"
  "src/lib/isolate/seccomp.c|aj_util.h|cli.h|a layer includes the CLI"
  "src/lib/detect/decoy.c|aj_audit.h|aj_mount.h|detection includes an isolation layer"
  "src/lib/base/util.c|aj_error.h|aj_bindreg.h|base includes the policy group"
  "src/lib/policy/model.c|aj_util.h|aj_seccomp.h|the policy group includes a layer"
  "src/lib/run/result.c|aj_mount.h|aj_report.h|libagentjail includes assess (the report)"
)
echo "1..$(( ${#cases[@]} * 2 ))"
n=0
for c in "${cases[@]}"; do
  IFS='|' read -r module ok bad why <<<"$c"
  cmd=$(python3 - "$build/compile_commands.json" "$src/$module" <<'PY'
import json, os, shlex, sys
for e in json.load(open(sys.argv[1])):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f == os.path.normpath(sys.argv[2]):
        print(e["directory"]); print(e["command"]); break
PY
)
  dir=$(sed -n 1p <<<"$cmd"); line=$(sed -n 2p <<<"$cmd")
  for kind in ok bad; do
    n=$((n + 1))
    hdr=$ok; [ $kind = bad ] && hdr=$bad
    if [ -z "$line" ]; then
      echo "not ok $n - $module: not in $build/compile_commands.json"; continue
    fi
    # The probe file sits next to the module, as the module itself does, so
    # "..." includes resolve exactly as they would for it.
    probe="$(dirname "$src/$module")/.aj-include-probe-$$-$n.c"
    printf '#include "%s"\nint aj_include_probe(void);\nint aj_include_probe(void) { return 0; }\n' "$hdr" >"$probe"
    # Same flags, this file in place of the module, object to the temp dir.
    args=$(python3 - "$line" "$src/$module" "$probe" "$tmp/o.o" <<'PY'
import shlex, sys, os
line, module, probe, obj = sys.argv[1:]
a = shlex.split(line)
out = []
skip = False
for i, x in enumerate(a):
    if skip: skip = False; continue
    if x in ("-o", "-MF", "-MQ"):
        out += [x, obj if x == "-o" else obj + ".d"]; skip = True; continue
    if x == "-c": continue
    if os.path.normpath(os.path.join(os.getcwd(), x)) == os.path.normpath(module) or x.endswith(os.path.relpath(module, os.getcwd())):
        continue
    out.append(x)
print(shlex.join(out + ["-c", probe]))
PY
)
    log=$(cd "$dir" && eval "$args" 2>&1); rc=$?
    rm -f "$probe"
    if [ $kind = ok ]; then
      if [ $rc -eq 0 ]; then echo "ok $n - $module may include $hdr"
      else echo "not ok $n - $module should compile with $hdr: $(head -3 <<<"$log" | tr '\n' ' ')"; fi
    else
      if [ $rc -ne 0 ] && grep -q "$hdr: No such file" <<<"$log"; then
        echo "ok $n - $module including $hdr does not compile ($why)"
      else echo "not ok $n - $module including $hdr: expected 'No such file', rc=$rc: $(head -3 <<<"$log" | tr '\n' ' ')"; fi
    fi
  done
done
