"""agentjail inside a container, reproduced on the host without Docker.

tests/helpers/aj-container confines agentjail the way `docker run` does:
a seccomp profile in Docker's JSON format (Docker's default as moby ships
it, deploy/docker/moby-default.json, or the profile agentjail ships,
deploy/docker/seccomp.json), Docker's capability set changed by
--cap-add/--cap-drop, a read-only /proc/sys (runc's readonly paths), and
--user. Each test asserts the run works (degraded, with the missing layers
named) or fails with the message that names the cause and the docker flag
that fixes it, with a positive control that differs in that one condition.
tests/integration/test_docker.py runs the same cases in a real Docker.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import AJ_BIN, IS_ROOT, ROOT, helper, must_skip, root_only

DEFAULT_PROFILE = os.path.join(ROOT, "deploy", "docker", "moby-default.json")
SHIPPED_PROFILE = os.path.join(ROOT, "deploy", "docker", "seccomp.json")
ROOT_CAPS = ["--cap-drop", "ALL", "--cap-add", "SETUID,SETGID,LEASE"]
HOST = ["--cap-add", "ALL"]  # no container: every capability, no filter


def ctr(confine, aj_args, cmd=("/bin/true",), timeout=60):
    """agentjail run AJ_ARGS -- CMD under aj-container CONFINE. Returns
    (returncode, stdout, stderr, result or None)."""
    path = helper("aj-container")
    if not os.access(path, os.X_OK):
        must_skip("aj-container not built: " + path)
    d = tempfile.mkdtemp(prefix="ajtest-ctr-")
    try:
        os.chmod(d, 0o777)  # --user 65534 writes its result here
        res = os.path.join(d, "result.json")
        env = dict(os.environ, HOME="/tmp")
        p = subprocess.run([path] + list(confine) + ["--", AJ_BIN, "run", "--result", res] + list(aj_args) +
                           ["--"] + list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
        result = None
        if os.path.exists(res):
            with open(res) as f:
                result = json.load(f)
        return p.returncode, p.stdout, p.stderr, result
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_docker_default_profile_fails_naming_seccomp_and_a_fix_that_works():
    rc, _, err, _ = ctr(["--profile", DEFAULT_PROFILE], [])
    assert rc == 125, err
    assert "seccomp filter on agentjail refuses them" in err, err
    # The fix it names is the one that works (test_shipped_profile_* and
    # tests/integration/test_docker.py), not seccomp=unconfined alone.
    assert "--security-opt seccomp=deploy/docker/seccomp.json --security-opt systempaths=unconfined" in err, err
    # Positive control: the same helper without the profile.
    rc, _, err, _ = ctr(HOST, [])
    assert rc == 0, err


def test_degraded_works_under_docker_default_profile_with_missing_layers_named():
    rc, out, err, res = ctr(["--profile", DEFAULT_PROFILE], ["--allow-degraded"],
                            ["/bin/sh", "-c", "echo AJTEST-DEGRADED-RAN"])
    assert rc == 0, err
    assert out.strip() == "AJTEST-DEGRADED-RAN"
    assert res["degraded"] is True and res["status"] == "ok"
    # Docker's profile refuses keyctl: no fresh keyring, named as missing.
    assert res["layers"]["fresh_keyring"] is False
    assert re.search(r"missing layers:.* fresh_keyring", err), err
    # What degraded mode promises still holds.
    for layer in ("seccomp", "landlock_fs", "no_new_privs", "rlimits"):
        assert res["layers"][layer] is True, layer
    # Positive control: on the host a degraded-capable run keeps its keyring.
    rc, _, err, res = ctr(HOST, ["--allow-degraded"])
    assert rc == 0, err
    assert res["degraded"] is False and res["layers"]["fresh_keyring"] is True


def test_degraded_payload_still_cannot_use_the_keyring_it_keeps():
    # The keyring is missing as a layer, but the payload cannot reach it:
    # Docker's filter (inherited) and ours both refuse keyctl.
    probe = ("import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); "
             "r=l.syscall(250, 0, -3, 0); print(r, ctypes.get_errno())")  # KEYCTL_GET_KEYRING_ID, session
    if not os.path.exists("/usr/bin/python3"):
        must_skip("python3 not at /usr/bin/python3")
    rc, out, err, res = ctr(["--profile", DEFAULT_PROFILE], ["--allow-degraded"], ["/usr/bin/python3", "-c", probe])
    assert rc == 0, err
    r, e = out.split()
    assert r == "-1" and int(e) in (1, 38), out  # EPERM or ENOSYS
    # Positive control: the same call outside any sandbox works.
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert p.stdout.split()[0] != "-1", p.stdout


def test_read_only_proc_sys_names_systempaths_unconfined():
    # seccomp=unconfined alone (no profile) and --cap-add SYS_ADMIN: both
    # meet a read-only /proc/sys.
    for confine in (["--ro-proc-sys"], ["--ro-proc-sys", "--profile", DEFAULT_PROFILE, "--cap-add", "SYS_ADMIN"]):
        if not IS_ROOT:
            pytest.skip("as root only: making /proc/sys read-only needs a mount namespace")
        rc, _, err, _ = ctr(confine, [])
        assert rc == 125, (confine, err)
        assert "/proc/sys is mounted read-only" in err, err
        assert "--security-opt systempaths=unconfined" in err, err
    # Positive control: the same with /proc/sys writable.
    rc, _, err, _ = ctr(["--profile", SHIPPED_PROFILE] + ROOT_CAPS, [])
    assert rc == 0, err


def test_root_without_setuid_setgid_names_the_caps_and_rootless():
    root_only("--cap-drop ALL as root")
    rc, _, err, _ = ctr(["--profile", SHIPPED_PROFILE, "--cap-drop", "ALL"], [])
    assert rc == 125, err
    assert "lacks CAP_SETUID/CAP_SETGID" in err, err
    assert "--cap-add SETUID --cap-add SETGID" in err and "--user 1000" in err, err
    # Positive controls: both ways the message names.
    rc, _, err, res = ctr(["--profile", SHIPPED_PROFILE, "--cap-drop", "ALL", "--user", "65534"], [])
    assert rc == 0, err
    assert res["mode"] == "rootless" and res["layers"]["user_namespace"] is True
    assert res["layers"]["per_run_host_uid"] is False  # by design rootless
    rc, _, err, res = ctr(["--profile", SHIPPED_PROFILE] + ROOT_CAPS, [])
    assert rc == 0, err
    assert res["layers"]["per_run_host_uid"] is True


def test_network_namespace_helper_needs_no_sys_ptrace():
    # Root without CAP_SYS_PTRACE (Docker's default set lacks it): the
    # helper used to setns() on init's pidfd after init switched to the
    # run's host uid, and failed in most runs with a wrong diagnosis.
    root_only("the race needs root mode (init changes its host uid)")
    fails = []
    for _ in range(10):
        rc, _, err, res = ctr(["--profile", SHIPPED_PROFILE] + ROOT_CAPS, [])
        if rc != 0:
            fails.append(err)
        else:
            assert res["layers"]["network_namespace"] is True
    assert not fails, fails[:2]


def test_missing_cap_lease_fails_the_run_unless_allowed():
    root_only("a root without CAP_LEASE")
    no_lease = ["--profile", SHIPPED_PROFILE, "--cap-drop", "ALL", "--cap-add", "SETUID,SETGID"]
    rc, out, err, res = ctr(no_lease, [], ["/bin/sh", "-c", "echo AJTEST-SHOULD-NOT-MATTER"])
    assert rc == 125, err
    assert "lacks CAP_LEASE" in err and "--cap-add LEASE" in err and "--allow-no-decoys" in err, err
    assert res["status"] == "setup_error" and res["layers"]["decoys"] is False
    # Allowed by flag, and by the policy key: runs, decoys named missing.
    rc, _, err, res = ctr(no_lease, ["--allow-no-decoys"])
    assert rc == 0, err
    assert res["layers"]["decoys"] is False
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ajtest-pol-") as f:
        json.dump({"version": 1, "degraded": {"without_decoys": True}}, f)
        f.flush()
        rc, _, err, res = ctr(no_lease, ["--policy", f.name])
    assert rc == 0, err
    assert res["layers"]["decoys"] is False
    # Positive control: with CAP_LEASE the decoys are armed.
    rc, _, err, res = ctr(["--profile", SHIPPED_PROFILE] + ROOT_CAPS, [])
    assert rc == 0, err
    assert res["layers"]["decoys"] is True


def test_without_decoys_is_a_checked_policy_key():
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="ajtest-pol-") as f:
        json.dump({"version": 1, "degraded": {"without_decoys": "yes"}}, f)
        f.flush()
        p = subprocess.run([AJ_BIN, "run", "--policy", f.name, "--", "/bin/true"], capture_output=True, text=True)
    assert p.returncode == 2 and "degraded.without_decoys" in p.stderr and "expected a boolean" in p.stderr, p.stderr


def test_shipped_profile_is_generated_from_dockers_default():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-docker-seccomp.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(DEFAULT_PROFILE) as f:
        dflt = json.load(f)
    with open(SHIPPED_PROFILE) as f:
        shipped = json.load(f)
    assert shipped["defaultAction"] == dflt["defaultAction"] == "SCMP_ACT_ERRNO"
    added = shipped["syscalls"][-1]
    assert added["action"] == "SCMP_ACT_ALLOW" and "includes" not in added
    assert set(added["names"]) == {"clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root",
                                   "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "mount_setattr",
                                   "sethostname", "keyctl"}


def _allowed(profile, caps):
    """Names a profile allows without conditions on arguments, and names
    with some argument-conditioned allow rule, for a container with CAPS."""
    with open(profile) as f:
        p = json.load(f)
    free, cond = set(), set()
    for rule in p["syscalls"]:
        if rule["action"] != "SCMP_ACT_ALLOW":
            continue
        inc, exc = rule.get("includes", {}), rule.get("excludes", {})
        if inc.get("arches") and "amd64" not in inc["arches"]:
            continue
        if "amd64" in exc.get("arches", []):
            continue
        if any(c not in caps for c in inc.get("caps", [])) or any(c in caps for c in exc.get("caps", [])):
            continue
        (cond if rule.get("args") else free).update(rule["names"])
    return free, cond


def test_every_call_agentjail_makes_is_allowed_by_the_shipped_profile():
    if not shutil.which("strace"):
        must_skip("strace not installed")
    root_only("traces the root-mode run (uid map, cgroups); the rootless calls are a subset")
    with tempfile.TemporaryDirectory(prefix="ajtest-strace-") as d:
        log = os.path.join(d, "trace")
        p = subprocess.run(["strace", "-f", "-qq", "-o", log, AJ_BIN, "run", "--network", "loopback",
                            "--memory", "64M", "--pids", "50", "--", "/bin/sh", "-c", "echo ok"],
                           capture_output=True, text=True, timeout=120,
                           # LeakSanitizer cannot run under ptrace (the ASan build)
                           env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
        names = set()
        with open(log) as f:
            for line in f:
                m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", line)
                if m and m.group(1) not in ("exit", "resumed"):
                    names.add(m.group(1))
    assert {"clone3", "mount", "pivot_root", "keyctl", "setns"} & names, names
    for caps in ([], ["CAP_SETUID", "CAP_SETGID", "CAP_LEASE"]):
        free, cond = _allowed(SHIPPED_PROFILE, caps)
        # socket is allowed for every family but AF_VSOCK: agentjail uses
        # AF_UNIX and AF_NETLINK only.
        missing = sorted(n for n in names if n not in free and n not in (cond & {"socket", "personality"}))
        assert not missing, (caps, missing)
        # Positive control: Docker's default refuses some of these calls. (setns is no longer
        # among them for a plain run: the network namespace comes with clone3, no helper joins.)
        dfree, dcond = _allowed(DEFAULT_PROFILE, caps)
        assert {"unshare", "mount", "pivot_root", "keyctl"} <= names - dfree - dcond


def _verify(confine):
    probe = os.path.join(os.path.dirname(AJ_BIN), "agentjail-probe")
    if not os.path.exists(probe):
        must_skip("agentjail-probe not built next to %s" % AJ_BIN)
    env = dict(os.environ, AGENTJAIL_PROBE=probe, HOME="/tmp")
    p = subprocess.run([helper("aj-container")] + confine + ["--", AJ_BIN, "verify", "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None, p.stderr


def test_verify_checks_the_cgroup_limits():
    # Docker mounts the cgroup hierarchy read-only: the run goes on without
    # the default memory and pids limits, and verify used to match anyway.
    root_only("the runs of root get a cgroup on this host; nobody's never do (the positive control)")
    rc, rep, err = _verify(["--cap-add", "ALL", "--ro-cgroup"])
    assert rc == 1, err
    bad = {c["protection"] for c in rep["checks"] if not c["ok"]}
    assert {"layer.cgroup", "layer.memory_limit", "layer.pids_limit"} <= bad, bad
    assert rep["result"]["layers"]["memory_limit"] is False
    # Positive control: the same with the hierarchy writable.
    rc, rep, err = _verify(["--cap-add", "ALL"])
    assert rc == 0, err
    rows = {c["protection"]: c for c in rep["checks"]}
    assert rows["layer.memory_limit"]["ok"] and "read back" in rows["layer.memory_limit"]["observed"]
    assert rows["layer.pids_limit"]["ok"]


def _check(confine):
    p = subprocess.run([helper("aj-container")] + confine + ["--", AJ_BIN, "check", "--json"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME="/tmp"))
    rep = json.loads(p.stdout)
    return p.returncode, {f["id"]: f for f in rep["findings"]}


def test_check_tries_a_real_sandbox_and_says_what_run_will_do():
    # Under Docker's default profile every host setting check reads looks
    # fine, and run failed: run.trial builds a sandbox and reports it.
    rc, f = _check(["--profile", DEFAULT_PROFILE])
    assert rc == 1
    t = f["run.trial"]
    assert t["status"] == "fail", t
    assert "seccomp filter on agentjail refuses them" in t["value"], t
    assert "--allow-degraded would run, without:" in t["value"] and "fresh_keyring" in t["value"], t
    assert "seccomp=deploy/docker/seccomp.json" in t["recommendation"], t
    if IS_ROOT:
        # Root without CAP_LEASE: the decoys.
        rc, f = _check(["--profile", SHIPPED_PROFILE, "--cap-drop", "ALL", "--cap-add", "SETUID,SETGID"])
        assert f["run.trial"]["status"] == "fail" and "CAP_LEASE" in f["run.trial"]["value"], f["run.trial"]
    # Positive control: the host itself (nobody here has no cgroup: warn).
    rc, f = _check(HOST)
    assert f["run.trial"]["status"] == ("ok" if IS_ROOT else "warn"), f["run.trial"]


def test_explicit_limit_in_a_read_only_cgroupfs_points_root_at_deploy_doc():
    root_only("root is the case where 'run as root' is no fix")
    rc, _, err, _ = ctr(HOST + ["--ro-cgroup"], ["--memory", "64M"])
    assert rc == 125, err
    assert "needs a writable cgroup" in err and "/sys/fs/cgroup is mounted read-only" in err, err
    # Positive control: writable hierarchy, the limit holds.
    rc, _, err, res = ctr(HOST, ["--memory", "64M"])
    assert rc == 0, err
    assert res["layers"]["memory_limit"] is True
