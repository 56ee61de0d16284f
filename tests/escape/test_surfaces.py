"""Attack surfaces a security review found open or silent (issue 12):

- degraded mode (no pid namespace) reaching other processes of the same uid
  through prlimit64 / setpriority / sched_setaffinity, and rootless degraded
  runs on a kernel whose Landlock cannot scope signals;
- kernel attack surface refused without an event (rare socket families,
  netlink protocols, listmount/statmount);
- host reconnaissance through /proc (cmdline, boot id, uptime, locks);
- decoys recognisable by their metadata.

Each refusal is checked as a kernel outcome (errno, the victim unchanged,
the file contents) with a positive control that shows the probe can succeed.
Runs as root and as nobody.
"""
import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, IS_ROOT, Run, helper, must_skip, new_tag, run_aj, try_args

TRY = "/opt/aj-try"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/tmp"]


def run_as(prefix, args, cmd, timeout=60):
    """run_aj, with the result and events written to a directory anyone may
    write (the caller may be nobody). Returns (Run, events)."""
    with tempfile.TemporaryDirectory(prefix="ajsurf-") as d:
        os.chmod(d, 0o777)
        res, evp = os.path.join(d, "result.json"), os.path.join(d, "ev.jsonl")
        full = list(prefix) + [AJ_BIN, "run", "--result", res, "--events", evp] + list(args) + ["--"] + list(cmd)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        result = json.load(open(res)) if os.path.exists(res) else None
        evs = events_of(evp) if os.path.exists(evp) else []
    return Run(proc, result), evs


def events_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def escapes(events):
    return [e for e in events if e["type"] == "escape_attempt"]


# ---- degraded mode: other processes of the same uid ---------------------------------

# The payload aims at VICTIM (another process of its uid) and then at itself.
REACH = r"""
import json, os, resource, sys
v = int(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = os.strerror(e.errno)
attempt("prlimit", lambda: resource.prlimit(v, resource.RLIMIT_CPU, (1, 1)))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, v, 7))
attempt("affinity", lambda: os.sched_setaffinity(v, {0}))
attempt("sched_setscheduler", lambda: os.sched_setscheduler(v, os.SCHED_BATCH, os.sched_param(0)))
# Controls: the same calls on itself (pid 0, its pid, its tid).
attempt("self_prlimit", lambda: resource.prlimit(0, resource.RLIMIT_CPU, (500, 500)))
attempt("self_setrlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
attempt("self_nice", lambda: os.nice(1))
attempt("self_setpriority_pid", lambda: os.setpriority(os.PRIO_PROCESS, os.getpid(), 2))
attempt("self_affinity0", lambda: os.sched_setaffinity(0, {0}))
attempt("self_affinity_pid", lambda: os.sched_setaffinity(os.getpid(), {0}))
attempt("self_prlimit_pid", lambda: resource.prlimit(os.getpid(), resource.RLIMIT_CPU, (400, 400)))
out["self_cpu"] = list(resource.getrlimit(resource.RLIMIT_CPU))
print(json.dumps(out))
"""

OTHER = ("prlimit", "setpriority", "affinity", "sched_setscheduler")


def _as_caller():
    """Degraded runs as the caller's own uid need an unprivileged caller:
    as root, agentjail gives the payload a per-run uid, so run it as nobody
    (with the victim as nobody too)."""
    return NOBODY if IS_ROOT else []


def _victim(prefix, tag):
    p = subprocess.Popen(list(prefix) + ["sleep", tag])
    for _ in range(100):
        try:
            with open("/proc/%d/comm" % p.pid) as f:
                if f.read().strip() == "sleep":
                    break
        except OSError:
            pass
        time.sleep(0.02)
    return p


def _victim_state(pid):
    with open("/proc/%d/limits" % pid) as f:
        cpu = [l for l in f if l.startswith("Max cpu time")][0].split()[3:5]
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return {"cpu": cpu, "nice": int(fields[16]), "policy": int(fields[38]),
            "affinity": sorted(os.sched_getaffinity(pid))}


def test_degraded_payload_cannot_reach_another_process_of_its_uid():
    if len(os.sched_getaffinity(0)) < 2:
        must_skip("needs two CPUs to tell an affinity change")
    prefix = _as_caller()
    tag = new_tag()
    victim = _victim(prefix, tag)
    before = _victim_state(victim.pid)
    try:
        r, evs = run_as(list(prefix) + [helper("aj-nouserns")], ["--allow-degraded"],
                        ["python3", "-c", REACH, str(victim.pid)])
        assert r.returncode == 0 and r.result["degraded"] is True, r
        out = json.loads(r.stdout)
        evs = escapes(evs)
        for k in OTHER:
            assert out[k] == os.strerror(1), (k, out)
        # The kernel outcome: the victim is exactly as it was.
        assert _victim_state(victim.pid) == before, before
        assert before["cpu"] == ["unlimited", "unlimited"], before
        # Each attempt reported, with its technique.
        assert sorted({(e["syscall"], e["technique"]) for e in evs}) == sorted(
            {("prlimit64", "T1499"), ("setpriority", "T1499"), ("sched_setaffinity", "T1499"),
             ("sched_setscheduler", "T1499")}), evs
        assert all(e["args"][0] == victim.pid or e["args"][1] == victim.pid for e in evs), evs
        # Positive control: on itself (pid 0, its own pid) each works, silently.
        for k, v in out.items():
            if k.startswith("self_") and k != "self_cpu":
                assert v == "ok", (k, out)
        assert out["self_cpu"] == [400, 400], out
        # Control: the same payload outside the sandbox does change the victim,
        # so the probe can fail.
        p = subprocess.run(list(prefix) + ["python3", "-c", REACH, str(victim.pid)],
                           capture_output=True, text=True, timeout=60)
        host = json.loads(p.stdout)
        assert host["prlimit"] == "ok" and host["affinity"] == "ok", host
        after = _victim_state(victim.pid)
        assert after["cpu"] == ["1", "1"] and after["affinity"] == [0], after
    finally:
        victim.kill()
        victim.wait()


def _unscoped(*extra):
    return list(_as_caller()) + [helper("aj-nouserns")] + list(extra)


def test_rootless_degraded_without_landlock_signal_scope_fails_closed(hostdir):
    """Landlock before ABI 6 cannot keep kill() off the caller's processes."""
    r, _ = run_as(_unscoped("--no-landlock-scope"), ["--allow-degraded"], ["sh", "-c", "echo ran"])
    assert r.returncode == 125 and r.stdout == "", r
    line = r.stderr.strip().splitlines()[-1]
    assert "ABI 6" in line and "degraded.without_signal_scope" in line and "--allow-unscoped-signals" in line, line
    # The policy may allow it, by flag or key; the result then says so.
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "degraded": {"allow": True, "without_signal_scope": True}}, f)
    os.chmod(hostdir, 0o755)
    os.chmod(pol, 0o644)
    for args in (["--allow-degraded", "--allow-unscoped-signals"], ["--policy", pol]):
        q, _ = run_as(_unscoped("--no-landlock-scope"), args, ["sh", "-c", "echo ran"])
        assert q.returncode == 0 and q.stdout == "ran\n", (args, q)
        assert q.result["degraded"] is True and q.result["landlock_abi"] == 5, q.result
        assert q.result["layers"]["landlock_scope"] is False, q.result
    # Control: with scoping available the same degraded run needs no key.
    c, _ = run_as(_unscoped(), ["--allow-degraded"], ["sh", "-c", "echo ran"])
    assert c.returncode == 0 and c.stdout == "ran\n", c
    assert c.result["layers"]["landlock_scope"] is True, c.result
    # The key is part of the policy: dumped, and weaker in a diff.
    d = subprocess.run([AJ_BIN, "policy", "show", pol], capture_output=True, text=True)
    assert d.returncode == 0 and json.loads(d.stdout)["degraded"]["without_signal_scope"] is True, d
