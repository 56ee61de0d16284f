#!/usr/bin/env bash
# Build agentjail and run the demo: a Python payload that tries the first
# moves of a container escape, inside the default sandbox. Run as root on
# Debian 12 (installs build dependencies with apt when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
scripts/build.sh
tmp=$(mktemp -d /tmp/ajdemo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# On a pure cgroup v2 host with systemd, run inside a delegated scope so
# the sandbox gets its memory, pids and cpu limits (a login shell's own
# scope is not delegated: the run would say the limits are missing).
wrap=()
if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null &&
   ! grep -q ' - cgroup ' /proc/self/mountinfo; then
  wrap=(systemd-run --scope --quiet -p Delegate=yes --)
fi
echo "+ AWS_SECRET_ACCESS_KEY=demo-not-a-real-key ${wrap[*]}${wrap[*]:+ }build/agentjail run --bind-ro $(pwd)/examples:/demo --timeout 30s --events $tmp/events.jsonl --result $tmp/result.json -- python3 /demo/escape_attempt.py"
set +e
AWS_SECRET_ACCESS_KEY=demo-not-a-real-key "${wrap[@]}" build/agentjail run --bind-ro "$(pwd)/examples:/demo" \
  --timeout 30s --events "$tmp/events.jsonl" --result "$tmp/result.json" -- python3 /demo/escape_attempt.py
rc=$?
set -e
echo
echo "what the security team sees ($tmp/events.jsonl):"
python3 - "$tmp/events.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] == "escape_attempt":
        print("  %-15s %-9s %-18s %s %s" % (e["type"], e["severity"], e["syscall"], e.get("technique", ""),
                                           json.dumps(e.get("args", []))[:60]))
    elif e["type"] == "canary":
        print("  %-15s %-9s %-18s %s %s" % (e["type"], e["severity"], e["decoy"], e.get("technique", ""), e["path"]))
PY
echo
echo "result ($tmp/result.json):"
python3 - "$tmp/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  status=%s exit_code=%s wall_ms=%s mode=%s host_uid=%s landlock_abi=%s" % (
    r["status"], r["exit_code"], r["wall_ms"], r["mode"], r["host_uid"], r["landlock_abi"]))
print("  layers applied: " + ", ".join(k for k, v in sorted(r["layers"].items()) if v))
missing = [k for k, v in sorted(r["layers"].items()) if not v]
print("  layers missing: " + (", ".join(missing) if missing else "none"))
print("  events: " + ", ".join("%s=%d" % (k, v) for k, v in sorted(r["events"].items()) if v))
print("  policy sha256: " + r["policy_sha256"])
PY
exit $rc
