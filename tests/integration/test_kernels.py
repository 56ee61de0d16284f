"""Kernels users run: features that older kernels lack, and cgroup v2.

A kernel without a system call is simulated with a seccomp filter that
answers ENOSYS for it (tests/helpers/aj-nouserns --enosys), which is what
the kernel itself answers for a call it predates: agentjail must then fail
with a message naming the feature, or, where the policy allows, run
without the layer and say so in the result. The cgroup v2 tests need a
host with pure cgroup v2 and systemd (the VM suite: scripts/vm-test.sh);
elsewhere they are not applicable and skip.
"""
import json
import os
import shutil
import subprocess

import pytest

from conftest import AJ_BIN, CG_LIMITS, IS_ROOT, helper, run_aj

NO_LANDLOCK = ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"]


def enosys(*calls):
    return (helper("aj-nouserns"), "--enosys", ",".join(calls))


def check_json(prefix=()):
    p = subprocess.run(list(prefix) + [AJ_BIN, "check", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode in (0, 1), p
    return {f["id"]: f for f in json.loads(p.stdout)["findings"]}


# ---- Landlock (5.13) -----------------------------------------------------------------

def test_without_landlock_the_run_fails_closed_naming_the_fix():
    r = run_aj([], ["sh", "-c", "echo ran"], prefix=enosys(*NO_LANDLOCK))
    assert r.returncode == 125 and r.stdout == "", r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Landlock" in lines[0] and "5.13" in lines[0], lines[0]
    assert "degraded.without_landlock" in lines[0] and "--allow-no-landlock" in lines[0], lines[0]
    assert r.result["status"] == "setup_error", r.result
    # Control: the same run on this kernel as it is has Landlock.
    q = run_aj([], ["sh", "-c", "echo ran"])
    assert q.returncode == 0 and q.stdout == "ran\n", q
    assert q.result["layers"]["landlock_fs"] is True, q.result


def test_policy_may_allow_running_without_landlock_and_the_result_says_so(hostdir):
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "degraded": {"without_landlock": True}}, f)
    payload = "touch /usr/x 2>/dev/null && echo usr-writable; echo hi > /tmp/y && cat /tmp/y"
    for args in (["--allow-no-landlock"], ["--policy", pol]):
        r = run_aj(args, ["sh", "-c", payload], prefix=enosys(*NO_LANDLOCK))
        assert r.returncode == 0, (args, r)
        # The other layers still hold: the root is read-only, /tmp writable.
        assert r.stdout == "hi\n", (args, r)
        lay = r.result["layers"]
        assert lay["landlock_fs"] is False and lay["landlock_net"] is False, (args, lay)
        assert lay["landlock_scope"] is False, (args, lay)
        assert lay["seccomp"] and lay["private_root"] and lay["mount_namespace"], (args, lay)
        assert r.result["landlock_abi"] == 0, r.result
    # The policy that allows it says so, and is the weaker one in a diff.
    p = subprocess.run([AJ_BIN, "policy", "show", pol], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["degraded"]["without_landlock"] is True, p
    default = os.path.join(hostdir, "d.json")
    with open(default, "w") as f:
        json.dump({"version": 1}, f)
    d = subprocess.run([AJ_BIN, "policy", "diff", pol, default], capture_output=True, text=True,
                       timeout=30)
    assert "degraded.without_landlock" in d.stdout and "A is weaker" in d.stdout, d


def test_policy_without_landlock_key_is_typed(hostdir):
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        f.write('{"version": 1,\n "degraded": {"without_landlock": "yes"}}\n')
    p = subprocess.run([AJ_BIN, "policy", "check", pol], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    assert "%s:2:" % pol in p.stderr and "degraded.without_landlock" in p.stderr, p.stderr


def test_check_names_a_kernel_without_landlock():
    f = check_json(prefix=enosys(*NO_LANDLOCK))["kernel.layers"]
    assert f["status"] == "fail" and "Landlock" in f["value"], f
    assert "degraded.without_landlock" in f["value"], f
    # Control: this kernel as it is.
    g = check_json()["kernel.layers"]
    with open("/proc/sys/kernel/osrelease") as fh:
        release = fh.read()
    assert g["status"] in ("ok", "warn"), g
    assert "Landlock ABI 0" not in g["value"], (g, release)


# ---- the mount API (5.12) ------------------------------------------------------------

def test_without_mount_setattr_the_run_names_the_kernel_feature():
    r = run_aj([], ["true"], prefix=enosys("mount_setattr"))
    assert r.returncode == 125, r
    msg = r.stderr.strip().splitlines()[-1]
    assert "mount_setattr" in msg and "5.12" in msg, msg
    assert r.result["status"] == "setup_error" and "mount_setattr" in r.result["error"], r.result
    f = check_json(prefix=enosys("mount_setattr"))["kernel.layers"]
    assert f["status"] == "fail" and "mount_setattr" in f["value"], f
    q = run_aj([], ["true"])
    assert q.returncode == 0, q


# ---- cgroups: what check predicts is what a run gets -------------------------------------

def test_check_predicts_the_run_cgroup_limits():
    f = check_json()["cgroup.limits"]
    r = run_aj([], ["true"])
    assert r.returncode == 0, r
    got = {c for c in ("memory", "pids", "cpu") if r.result["cgroup_controllers"][c] != "none"}
    said = set(f["value"].split("(")[0].replace("runs get:", "").split()) - {"no", "limits"}
    # cpu is joined on cgroup v1 only when a run asks for it.
    if r.result["cgroup_controllers"]["cpu"] == "none" and "cpu" in said:
        q = run_aj(["--cpus", "1"], ["true"])
        assert q.returncode == 0, q
        got |= {"cpu"} if q.result["cgroup_controllers"]["cpu"] != "none" else set()
    assert said == got, (f, r.result["cgroup_controllers"])
    assert ({"memory", "pids"} <= got) == CG_LIMITS, (got, CG_LIMITS)
    assert (f["status"] == "fail") == (not CG_LIMITS), f


# ---- cgroup v2 with systemd (the VM suite) --------------------------------------------

def pure_v2():
    with open("/proc/self/mountinfo") as f:
        types = {l.split(" - ")[1].split()[0] for l in f}
    return "cgroup2" in types and "cgroup" not in types


def need_v2_systemd():
    if not pure_v2():
        pytest.skip("not applicable: this host's cgroup controllers are not (only) on v2")
    if not IS_ROOT or not shutil.which("systemd-run") or not os.path.isdir("/run/systemd/system"):
        pytest.skip("not applicable: needs root and systemd as init to make transient units")


def in_scope(cmd, delegate):
    props = ["-p", "Delegate=yes"] if delegate else []
    return subprocess.run(["systemd-run", "--scope", "--quiet"] + props + ["--", "sh", "-c", cmd],
                          capture_output=True, text=True, timeout=120)


def test_v2_not_delegated_cgroup_with_other_processes():
    """Root in a unit that does not delegate, beside another process: the
    caller's cgroup cannot get controllers below it (no internal
    processes). An explicit limit refuses with the cause and the fix; a
    default run goes on in a cgroup without controllers and says so; the
    other process is not moved."""
    need_v2_systemd()
    cmd = ("sleep 60 & s=$!; %s run --memory 64M -- true; echo rc=$?; "
           "%s run --result - -- true | tr -d '\\n'; echo; "
           "cat /proc/$s/cgroup; kill $s" % (AJ_BIN, AJ_BIN))
    p = in_scope(cmd, delegate=False)
    assert "rc=125" in p.stdout, p
    assert "--memory needs the cgroup 'memory' controller" in p.stderr, p.stderr
    assert "other processes" in p.stderr and "Delegate=yes" in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    res = json.loads(lines[1])
    assert res["status"] == "ok" and res["layers"]["cgroup"] is True, res
    assert res["layers"]["memory_limit"] is False and res["layers"]["pids_limit"] is False, res
    assert lines[2].endswith(".scope"), lines   # the sleep stayed where it was
    # Control: the same in a delegated scope gets every limit.
    q = in_scope("sleep 60 & s=$!; %s run --memory 64M --pids 64 --result - -- true; kill $s"
                 % AJ_BIN, delegate=True)
    assert q.returncode == 0, q
    res = json.loads(q.stdout)
    assert res["layers"]["memory_limit"] and res["layers"]["pids_limit"], res


def test_v2_runs_stay_in_the_callers_subtree_and_leave_no_cgroup():
    need_v2_systemd()
    cmd = ("echo self=$(cat /proc/self/cgroup); "
           "%s run --memory 64M --pids 64 --cpus 1 -- cat /proc/self/cgroup; "
           "echo after=$(cat /proc/self/cgroup); "
           "d=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); d=${d%%/agentjail-leaf}; "
           "echo left=$(ls $d)" % AJ_BIN)
    p = in_scope(cmd, delegate=True)
    assert p.returncode == 0, p
    out = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    scope = out["self"].split("::", 1)[1]
    # Inside, the cgroup namespace shows the run's own group as its root.
    assert "0::/" in p.stdout, p.stdout
    # The caller (the shell: every process of a delegated scope) moved into the leaf ...
    assert out["after"].split("::", 1)[1] == scope + "/agentjail-leaf", out
    # ... and the run's dirs are gone: only the leaf and cgroup files remain.
    left = out["left"].split()
    assert "agentjail" not in left and "agentjail-leaf" in left, out


def test_v2_read_only_cgroupfs_runs_without_limits_and_refuses_explicit_ones():
    """As in a container whose /sys/fs/cgroup is mounted read-only (this
    mount only, in a mount namespace of its own: a remount without bind
    would make the one cgroup2 superblock read-only for the whole host)."""
    need_v2_systemd()
    cmd = ("mount -o remount,bind,ro /sys/fs/cgroup || exit 3; "
           "%s run --memory 64M -- true; echo rc=$?; "
           "%s run --result - -- true | tr -d '\\n'; echo" % (AJ_BIN, AJ_BIN))
    p = subprocess.run(["systemd-run", "--scope", "--quiet", "-p", "Delegate=yes", "--",
                        "unshare", "--mount", "--propagation", "private", "sh", "-c", cmd],
                       capture_output=True, text=True, timeout=120)
    assert "rc=125" in p.stdout, p
    assert "--memory needs a writable cgroup" in p.stderr and "Read-only file system" in p.stderr, p.stderr
    res = json.loads(p.stdout.splitlines()[1])
    assert res["status"] == "ok" and res["layers"]["cgroup"] is False, res
    assert res["layers"]["memory_limit"] is False, res


def test_v2_container_cgroup_namespace_root_is_treated_as_delegated():
    """A container with a private cgroup namespace and its own writable
    cgroup2 mount: its "/" is the container's cgroup, which holds the
    container's processes; agentjail moves them into the leaf and the run
    gets every limit."""
    need_v2_systemd()
    cmd = ("umount -l /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup || exit 3; echo self=$(cat /proc/self/cgroup); "
           "sleep 60 & s=$!; %s run --memory 64M --pids 64 --cpus 1 --result - -- true "
           "| tr -d '\\n'; echo; echo sleep=$(cat /proc/$s/cgroup); kill $s" % AJ_BIN)
    p = subprocess.run(["systemd-run", "--scope", "--quiet", "-p", "Delegate=yes", "--",
                        "unshare", "--cgroup", "--mount", "--propagation", "private", "sh", "-c", cmd],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p
    lines = p.stdout.splitlines()
    assert "self=0::/" in lines, lines
    res = json.loads(next(l for l in lines if l.startswith("{")))
    for k in ("cgroup", "memory_limit", "pids_limit", "cpu_bandwidth_limit"):
        assert res["layers"][k] is True, (k, res)
    # The container's other process went into the leaf with it.
    assert "sleep=0::/agentjail-leaf" in lines, lines
