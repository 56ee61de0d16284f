"""agentjail verify: the probe runs inside exactly the declared policy, and
every declared protection is compared with what it observed. A sandbox
weakened on purpose (AGENTJAIL_UNSAFE_SKIP_LAYER) must be caught."""
import json
import os
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, AJ_HELPERS, CG_LIMITS, must_skip

# Without a cgroup for this caller's runs (nobody on this host), the
# declared default limits are not enforced, and verify says so.
CG_ROWS = {"layer.cgroup", "layer.memory_limit", "layer.pids_limit", "layer.cpu_time_limit", "layer.cpu_bandwidth_limit"}

PROBE = os.path.join(os.path.dirname(AJ_BIN), "agentjail-probe")


def verify(*args, env_extra=None):
    if not os.path.exists(PROBE):
        must_skip("agentjail-probe not built next to %s" % AJ_BIN)
    env = dict(os.environ, AGENTJAIL_PROBE=PROBE, **(env_extra or {}))
    return subprocess.run([AJ_BIN, "verify"] + list(args), capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("profile", ["default", "python", "shell"])
def test_verify_passes_on_every_builtin_profile(profile):
    p = verify("--profile", profile)
    if not CG_LIMITS:
        assert p.returncode == 1, p.stdout + p.stderr
        bad = {l.split()[0] for l in p.stdout.splitlines() if "MISMATCH" in l}
        assert bad and bad <= CG_ROWS, p.stdout
        return
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 mismatches" in p.stdout and "MISMATCH" not in p.stdout, p.stdout


def test_verify_json_is_complete():
    p = verify("--json")
    assert p.returncode == (0 if CG_LIMITS else 1), p.stderr
    rep = json.loads(p.stdout)
    assert rep["matches"] is CG_LIMITS
    ids = {c["protection"] for c in rep["checks"]}
    # The families the issue names are all compared, not just listed.
    for want in ("layer.seccomp", "layer.landlock_fs", "layer.user_namespace", "caps.effective",
                 "privileges.no_new_privs", "privileges.seccomp", "namespaces.user", "syscalls.bpf",
                 "syscalls.compat_abi", "filesystem.host_mounts", "devices.mem", "network.interfaces",
                 "processes.host_pids", "runtime.docker_sock"):
        assert want in ids, (want, sorted(ids))
    assert all(c["ok"] or (not CG_LIMITS and c["protection"] in CG_ROWS) for c in rep["checks"])
    assert len(rep["policy_sha256"]) == 64 and rep["result"]["status"] == "ok"


@pytest.mark.parametrize("layer,must_flag", [
    ("seccomp", ["layer.seccomp", "privileges.seccomp", "syscalls.io_uring"]),
    ("landlock", ["layer.landlock_fs"]),
])
def test_verify_catches_a_weakened_sandbox(layer, must_flag):
    p = verify("--json", env_extra={"AGENTJAIL_UNSAFE_SKIP_LAYER": layer})
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["matches"] is False
    bad = {c["protection"] for c in rep["checks"] if not c["ok"]}
    for want in must_flag:
        assert want in bad, (want, sorted(bad))
    # The run itself says what was left out.
    assert rep["result"]["unsafe_skipped_layer"] == layer
    # And the human table names the mismatch.
    p = verify(env_extra={"AGENTJAIL_UNSAFE_SKIP_LAYER": layer})
    assert p.returncode == 1 and "MISMATCH" in p.stdout and "DOES NOT match" in p.stdout, p.stdout


def assert_only_cgroup_mismatches(rep):
    bad = {c["protection"] for c in rep["checks"] if not c["ok"]}
    assert bad <= (set() if CG_LIMITS else CG_ROWS), bad


def test_verify_declared_decoys_off_means_absent():
    with tempfile.TemporaryDirectory(prefix="ajtest-verify-") as d:
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump({"version": 1, "detection": {"decoys": False}}, f)
        p = verify("--policy", path, "--json")
        assert p.returncode == (0 if CG_LIMITS else 1), p.stdout + p.stderr
        assert_only_cgroup_mismatches(json.loads(p.stdout))
        rows = {c["protection"]: c for c in json.loads(p.stdout)["checks"]}
        assert rows["runtime.docker_sock"]["observed"].startswith("absent"), rows["runtime.docker_sock"]
        assert "layer.decoys" not in rows


def test_verify_accepts_a_declared_rw_bind_and_reports_it():
    with tempfile.TemporaryDirectory(prefix="ajtest-verify-") as d:
        os.chmod(d, 0o755)
        work = os.path.join(d, "work")
        os.mkdir(work)
        os.chmod(work, 0o777)
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump({"version": 1, "filesystem": {"binds": [{"host": work, "sandbox": "/work", "mode": "rw"}]}}, f)
        p = verify("--policy", path, "--json")
        assert p.returncode == (0 if CG_LIMITS else 1), p.stdout + p.stderr
        assert_only_cgroup_mismatches(json.loads(p.stdout))
        rows = {c["protection"]: c for c in json.loads(p.stdout)["checks"]}
        assert "/work" in rows["filesystem.host_mounts"]["observed"], rows["filesystem.host_mounts"]


def test_verify_bad_input():
    p = verify("--bogus")
    assert p.returncode == 2 and "verify" in p.stderr
    p = verify("--profile", "nope")
    assert p.returncode == 2 and "unknown profile" in p.stderr
    p = verify("--", "true")
    assert p.returncode == 2
