"""`agentjail check` names the deployment way (docs/deploy.md, "What
agentjail check says"), without Docker: on the host, and under
tests/helpers/aj-container, which confines agentjail the way `docker run`
does (a Docker-format seccomp profile, Docker's capability set changed by
--cap-add/--cap-drop, a read-only /proc/sys or cgroup tree, --user).
test_deploy_image.py shows the same ways in a real Docker (heavy).
"""
import json
import os
import subprocess

from conftest import AJ_BIN, CG_LIMITS, IS_ROOT, ROOT, helper, must_skip, root_only

SHIPPED = os.path.join(ROOT, "deploy", "docker", "seccomp.json")
DEFAULT = os.path.join(ROOT, "deploy", "docker", "moby-default.json")
EVERY_CAPS = ["--cap-drop", "ALL", "--cap-add", "SETUID,SETGID,LEASE"]
CGROUP = "a delegated cgroup (memory, pids)"


def check(confine=None):
    """(exit status, report) of agentjail check --json, under aj-container
    CONFINE when given."""
    prefix = []
    if confine is not None:
        path = helper("aj-container")
        if not os.access(path, os.X_OK):
            must_skip("aj-container not built: " + path)
        prefix = [path] + confine + ["--"]
    p = subprocess.run(prefix + [AJ_BIN, "check", "--json"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HOME="/tmp"))
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def test_host_names_the_way_of_this_user():
    _, rep = check()
    dep, trial = rep["deployment"], rep["trial"]
    assert trial["outcome"] == "ran" and dep["euid"] == os.geteuid()
    if IS_ROOT:
        assert trial["mode"] == "root"
        if CG_LIMITS:
            assert dep["way"] == "every-layer" and dep["missing_for_every_layer"] == [], dep
            assert dep["summary"].startswith("every-layer"), dep
        else:
            assert dep["way"] == "partial" and dep["missing_for_every_layer"] == [CGROUP], dep
    else:
        assert trial["mode"] == "rootless" and "per_run_host_uid" in trial["missing"], trial
        assert dep["way"] == "rootless" and dep["missing_for_every_layer"][0] == "uid 0", dep
        assert (CGROUP in dep["missing_for_every_layer"]) == (not CG_LIMITS), dep
    assert dep["missing_for_rootless"] == [], dep


def test_table_ends_with_the_deployment_line():
    p = subprocess.run([AJ_BIN, "check"], capture_output=True, text=True, timeout=120)
    _, rep = check()
    assert "\ndeployment: %s\n" % rep["deployment"]["summary"] in p.stdout, p.stdout[-600:]


def test_sysroot_snapshot_has_no_deployment(tmp_path):
    # A snapshot says nothing about the process that reads it.
    (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "osrelease").write_text("6.1.0\n")
    p = subprocess.run([AJ_BIN, "check", "--json", "--sysroot", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    rep = json.loads(p.stdout)
    assert "deployment" not in rep and rep["trial"] == {"outcome": "not_run", "mode": None, "missing": []}


def test_rootless_container_names_rootless_and_what_every_layer_needs():
    root_only("aj-container loads a profile without no_new_privs, as runc does: root only")
    _, rep = check(["--profile", SHIPPED, "--cap-drop", "ALL", "--user", "65534"])
    dep = rep["deployment"]
    assert dep["way"] == "rootless" and dep["missing_for_rootless"] == [], dep
    # --cap-drop ALL empties the bounding set: root here could not have them either.
    assert dep["missing_for_every_layer"][:4] == ["uid 0", "CAP_SETUID", "CAP_SETGID", "CAP_LEASE"], dep


def test_every_layer_container_and_its_controls():
    root_only("aj-container loads a profile without no_new_privs, as runc does: root only")
    _, rep = check(["--profile", SHIPPED] + EVERY_CAPS)
    dep = rep["deployment"]
    # What check says must be what a run in the same container gets: with
    # the cgroup limits it enforces, every layer; where this caller's own
    # cgroup cannot take a child there (on cgroup v1, a hierarchy whose
    # root is the caller's, written without CAP_DAC_OVERRIDE), partial
    # naming the cgroup, and the run refuses those limits.
    confine = [helper("aj-container"), "--profile", SHIPPED] + EVERY_CAPS + ["--"]
    run = subprocess.run(confine + [AJ_BIN, "run", "--memory", "64M", "--pids", "64", "--", "true"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME="/tmp"))
    if run.returncode == 0:
        assert dep["way"] == "every-layer" and dep["missing_for_every_layer"] == [], dep
    else:
        assert "needs a writable cgroup" in run.stderr, run.stderr
        assert dep["way"] == "partial" and dep["missing_for_every_layer"] == [CGROUP], dep
    if CG_LIMITS and run.returncode != 0:
        print("cgroup limits work on this host but not in the container: " + run.stderr.strip())
    # The cgroup tree read-only, as Docker mounts it: partial, and it says why.
    _, rep = check(["--profile", SHIPPED, "--ro-cgroup"] + EVERY_CAPS)
    assert rep["deployment"]["way"] == "partial", rep["deployment"]
    assert rep["deployment"]["missing_for_every_layer"] == [CGROUP], rep["deployment"]
    # Without CAP_LEASE: nothing runs, and both lists say so.
    _, rep = check(["--profile", SHIPPED, "--cap-drop", "ALL", "--cap-add", "SETUID,SETGID"])
    dep = rep["deployment"]
    assert dep["way"] == "none" and "CAP_LEASE" in dep["missing_for_every_layer"], dep
    assert dep["missing_for_rootless"] == ["CAP_LEASE for root (or a non-root user: the rootless way)"], dep


def test_masked_proc_and_default_profile_name_what_is_missing():
    root_only("aj-container loads a profile without no_new_privs, as runc does: root only")
    _, rep = check(["--profile", SHIPPED, "--ro-proc-sys", "--cap-drop", "ALL", "--user", "65534"])
    dep = rep["deployment"]
    assert dep["way"] in ("none", "degraded") and len(dep["missing_for_rootless"]) == 1, dep
    assert dep["missing_for_rootless"][0].startswith("an unmasked /proc"), dep
    _, rep = check(["--profile", DEFAULT, "--cap-drop", "ALL", "--user", "65534"])
    dep = rep["deployment"]
    assert dep["way"] == "degraded" and rep["trial"]["outcome"] == "degraded", dep
    assert dep["missing_for_rootless"][0].startswith("a seccomp profile allowing"), dep
