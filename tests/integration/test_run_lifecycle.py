"""`agentjail run` lifecycle: timeouts, signals, supervisor death, leaks,
degraded mode. Processes are identified by a unique sleep duration
(`sleep 1000.<tag>`), so other agentjail runs on the host do not confuse the
checks, and anything a failing test leaves behind is killed by pid.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import nouserns, ppid, wait_for, new_tag, pids_with, AJ_BIN, IS_ROOT, run_aj, foreign_mount, tmp_entries

LEAK_RUNS = int(os.environ.get("AJ_LEAK_RUNS", "50"))
NS_LAYERS = ("user_namespace", "pid_namespace", "mount_namespace", "network_namespace",
             "ipc_namespace", "uts_namespace", "cgroup_namespace", "time_namespace")




def start(args, cmd, result=None, out=subprocess.PIPE):
    full = [AJ_BIN, "run"] + (["--result", result] if result else []) + args + ["--"] + cmd
    return subprocess.Popen(full, stdout=out, stderr=out, text=True)


# ---- timeout ------------------------------------------------------------------

def test_timeout_kills_payload():
    t = time.monotonic()
    r = run_aj(["--timeout", "1"], ["sleep", "100"])
    elapsed = time.monotonic() - t
    assert r.returncode == 137, r
    assert r.result["status"] == "timeout" and r.result["exit_code"] == 137, r
    assert r.result["signal"] == 9
    assert elapsed < 5, elapsed
    assert 900 <= r.result["wall_ms"] < 5000, r.result
    # Control: a payload that finishes in time is not touched.
    r = run_aj(["--timeout", "5s"], ["sleep", "0.1"])
    assert r.returncode == 0 and r.result["status"] == "ok", r
    r = run_aj(["--timeout", "300ms"], ["sleep", "100"])
    assert r.returncode == 137 and r.result["wall_ms"] < 3000, r


def test_timeout_kills_double_forked_daemon(reaper):
    tag = new_tag()
    reaper.append(tag)
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res = os.path.join(d, "r.json")
        t = time.monotonic()
        p = start(["--timeout", "2"], ["sh", "-c", "(setsid sleep %s &) ; sleep 100" % tag], res)
        # Control: the daemon exists and this scan sees it.
        assert wait_for(lambda: pids_with(tag), 5), "daemon never seen"
        out, err = p.communicate(timeout=30)
        elapsed = time.monotonic() - t
        result = json.load(open(res))
    assert p.returncode == 137, (out, err)
    assert result["status"] == "timeout", result
    assert elapsed < 6, elapsed
    assert wait_for(lambda: not pids_with(tag), 2), "daemon survived: %r" % pids_with(tag)


def test_payload_exit_kills_background_processes(reaper):
    tag = new_tag()
    reaper.append(tag)
    p = start([], ["sh", "-c", "(setsid sleep %s &); sleep 0.3; exit 4" % tag])
    assert wait_for(lambda: pids_with(tag), 5), "daemon never seen"
    p.communicate(timeout=30)
    assert p.returncode == 4
    assert wait_for(lambda: not pids_with(tag), 2), "daemon survived the payload"


# ---- signals --------------------------------------------------------------------

def test_sigterm_to_agentjail(reaper):
    tag = new_tag()
    reaper.append(tag)
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res = os.path.join(d, "r.json")
        p = start([], ["sleep", tag], res)
        assert wait_for(lambda: pids_with(tag), 5), "payload never seen"
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
        result = json.load(open(res))
    # The run ends and the result is written; then agentjail dies of the
    # SIGTERM itself (it used to swallow it and exit 143; a shell shows 143
    # either way).
    assert p.returncode == -15
    assert result["status"] == "signaled" and result["signal"] == 15, result
    assert result["exit_code"] == 143
    assert wait_for(lambda: not pids_with(tag), 2), "payload survived SIGTERM of agentjail"


def test_supervisor_sigkill_kills_sandbox(reaper):
    tag = new_tag()
    reaper.append(tag)
    # No pipes: a surviving sandbox would hold them open.
    p = start([], ["sleep", tag], out=subprocess.DEVNULL)
    pids = wait_for(lambda: pids_with(tag), 5)
    assert pids, "payload never seen"
    init = ppid(pids[0])
    with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
        assert int(f.read().split()[0]) == init  # the payload's parent is the supervisor's child
    p.kill()
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL
    left = wait_for(lambda: not pids_with(tag) and not os.path.exists("/proc/%d" % init), 5)
    assert left, "sandbox outlived its supervisor: payload %r, init %d alive=%s" % (
        pids_with(tag), init, os.path.exists("/proc/%d" % init))


# ---- leaks ----------------------------------------------------------------------

def snapshot():
    with open("/proc/self/mountinfo") as f:
        mounts = [line for line in f.read().splitlines() if not foreign_mount(line)]
    fds = sorted(os.listdir("/proc/self/fd"))
    try:
        run_dir = sorted(os.listdir("/run/agentjail"))
    except FileNotFoundError:
        run_dir = None
    except PermissionError:
        run_dir = "unreadable"
    tmp = tmp_entries(prefixes=("agentjail", "aj-", ".aj"))
    return mounts, fds, run_dir, tmp


def check_nothing_left(before, tag):
    assert wait_for(lambda: not pids_with(tag), 2), "processes left: %r" % pids_with(tag)
    after = snapshot()
    assert after[0] == before[0], "mount table changed"
    assert after[1] == before[1], "test process fds changed: %r -> %r" % (before[1], after[1])
    if IS_ROOT:
        # The uid lock, and the registry of writable bind sources (kept
        # across runs on purpose: docs/security-model.md §10).
        assert set(after[2]) <= {"uids.lock", "writable-binds"} and "uids.lock" in after[2], after[2]
    else:
        # Rootless runs never touch it.
        assert after[2] == before[2]
    left = tmp_entries(before[3], prefixes=("agentjail", "aj-", ".aj"))
    assert not left, "temp files left: %r" % left


def test_sequential_runs_leave_nothing(reaper):
    tag = new_tag()
    reaper.append(tag)
    before = snapshot()
    t = time.monotonic()
    for i in range(LEAK_RUNS):
        # Each run leaves a background process behind for the sandbox to kill.
        r = run_aj([], ["sh", "-c", "sleep %s & echo $?" % tag])
        assert r.returncode == 0 and r.stdout == "0\n", (i, r)
    check_nothing_left(before, tag)
    assert time.monotonic() - t < max(60, LEAK_RUNS * 0.5)


def test_setup_error_leaves_nothing(reaper):
    tag = new_tag()
    reaper.append(tag)
    before = snapshot()
    for _ in range(5):
        r = run_aj(["--workdir", "/nonexistent-ajtest"], ["sleep", tag])
        assert r.returncode == 125, r
    check_nothing_left(before, tag)


# ---- degraded mode ----------------------------------------------------------------

def test_namespaces_refused_fails_with_diagnosis():
    r = run_aj([], ["true"], prefix=nouserns())
    assert r.returncode == 125, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    msg = lines[0]
    assert "seccomp" in msg and "Docker" in msg, msg
    assert "fix:" in msg and "--allow-degraded" in msg, msg
    assert r.result["status"] == "setup_error" and r.result["exit_code"] == 125, r.result
    # Control: the same command without the filter runs.
    assert run_aj([], ["true"]).returncode == 0


@pytest.fixture
def secret_and_public():
    d = tempfile.mkdtemp(prefix="ajtest-degr-")
    os.chmod(d, 0o755)
    os.mkdir(os.path.join(d, "pub"))
    os.chmod(os.path.join(d, "pub"), 0o755)
    for name, text in (("secret", "top secret\n"), ("pub/p", "public\n")):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(d, name), 0o644)  # DAC lets every uid read both
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_allow_degraded_runs_loudly():
    r = run_aj(["--allow-degraded"], ["sh", "-c", "echo ran"], prefix=nouserns())
    assert r.returncode == 0, r
    assert r.stdout == "ran\n"
    assert "DEGRADED" in r.stderr, r.stderr
    assert "user_namespace" in r.stderr and "mount_namespace" in r.stderr, r.stderr
    res = r.result
    assert res["degraded"] is True and res["status"] == "ok", res
    for name in NS_LAYERS + ("private_root",):
        assert res["layers"][name] is False, (name, res["layers"])
    for name in ("landlock_fs", "seccomp", "no_new_privs", "rlimits"):
        assert res["layers"][name] is True, (name, res["layers"])
    # As an ordinary user without a user namespace the bounding set cannot
    # be emptied (no CAP_SETPCAP): the result must say so, not claim it.
    assert res["layers"]["capabilities_dropped"] is IS_ROOT, res["layers"]
    # Control: without the filter the same flags give a full sandbox.
    q = run_aj(["--allow-degraded"], ["true"])
    assert q.result["degraded"] is False and "DEGRADED" not in q.stderr, q
    assert all(q.result["layers"][n] for n in NS_LAYERS), q.result


def test_degraded_landlock_confines_filesystem(secret_and_public):
    d = secret_and_public
    pub = os.path.join(d, "pub")
    cmd = ["sh", "-c", 'cat "$1/p"; echo "pub=$?"; cat "$2" 2>/dev/null; echo "secret=$?"',
           "sh", pub, os.path.join(d, "secret")]
    r = run_aj(["--allow-degraded", "--bind-ro", pub], cmd, prefix=nouserns())
    assert r.returncode == 0, r
    assert r.result["degraded"] is True
    assert "top secret" not in r.stdout, r
    assert r.stdout.splitlines() == ["public", "pub=0", "secret=1"], r
    # Control: the same files through the host's cat (no sandbox) are readable.
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.stdout.splitlines() == ["public", "pub=0", "top secret", "secret=0"], p
