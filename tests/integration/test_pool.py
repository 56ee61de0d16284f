"""The warm pool (aj_pool_*), driven by the aj-pool helper as a server
would: pooled sandboxes enforce what cold ones do, each is used exactly
once, and nothing of one run (files, processes, environment, ids) is
visible to the next. Runs as root and as nobody (scripts/test.sh)."""
import glob
import json
import os
import subprocess

import pytest

from conftest import AJ_HELPERS, children, comm, IS_ROOT, must_skip, new_tag, pids_with, root_only, run_aj, wait_for

AJ_POOL = os.path.join(AJ_HELPERS, "aj-pool")


def pool(cmds, size=2, profile=None, timeout=120, outdir=None, events=None, pass_env=(), env=None):
    """Run cmds (lists) through one pool; return (runs, summary)."""
    if not os.path.exists(AJ_POOL):
        must_skip("aj-pool helper not built")
    argv = [AJ_POOL, "--size", str(size)]
    for name in pass_env:
        argv += ["--pass", name]
    if profile:
        argv += ["--profile", profile]
    if outdir:
        argv += ["--outdir", outdir]
    if events:
        argv += ["--events", events]
    argv.append("--")
    for i, c in enumerate(cmds):
        if i:
            argv.append(":::")
        argv += c
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
    assert lines and "pool" in lines[-1], (proc.returncode, proc.stdout, proc.stderr)
    return lines[:-1], lines[-1], proc


@pytest.fixture
def outdir(tmp_path):
    os.chmod(tmp_path, 0o755)
    return str(tmp_path)


def out(outdir, i, ext="out"):
    with open(os.path.join(outdir, "%d.%s" % (i, ext))) as f:
        return f.read()


def test_pooled_runs_report_like_cold_runs(outdir):
    cmds = [["/bin/echo", "hello"], ["/bin/sh", "-c", "echo to-err >&2; exit 3"], ["/nonexistent-command"]]
    runs, summary, proc = pool(cmds, outdir=outdir)
    # The same commands cold (`agentjail run`): same status, exit code, output.
    for i, cmd in enumerate(cmds):
        cold = run_aj([], cmd)
        got = runs[i]["result"]
        assert (got["status"], got["exit_code"]) == (cold.result["status"], cold.result["exit_code"]), (i, cold)
        assert out(outdir, i) == cold.stdout, (i, cold)
        if got["status"] != "setup_error":  # agentjail's own message goes to its stderr, not the payload's
            assert out(outdir, i, "err") == cold.stderr, (i, cold)
    # The pool starts with two parked sandboxes; the third run takes a
    # refilled one, or runs cold if the refill is still under way.
    assert runs[0]["warm"] and runs[1]["warm"], runs
    assert runs[0]["rc"] == 0 and runs[0]["result"]["status"] == "ok"
    assert out(outdir, 0) == "hello\n"
    assert runs[1]["result"]["status"] == "nonzero_exit" and runs[1]["result"]["exit_code"] == 3
    assert out(outdir, 1, "err") == "to-err\n"
    # A command that does not exist: the sandbox reports it, as a cold run does.
    assert runs[2]["result"]["status"] == "setup_error" and runs[2]["result"]["exit_code"] == 127
    assert summary["pool"]["warm_runs"] + summary["pool"]["cold_runs"] == 3
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False


def test_pooled_sandbox_has_every_layer():
    runs, _, _ = pool([["/bin/true"]])
    layers = runs[0]["result"]["layers"]
    missing = [k for k in ("user_namespace", "pid_namespace", "network_namespace", "mount_namespace",
                           "private_root", "seccomp", "landlock_fs", "escape_monitor",
                           "capabilities_dropped", "no_new_privs", "nested_namespaces_refused",
                           "fds_closed", "environment_cleared") if not layers.get(k)]
    assert not missing, missing


def test_pooled_sandbox_enforces_and_detects(outdir, tmp_path):
    ev = tmp_path / "ev"
    ev.mkdir()
    os.chmod(ev, 0o777)
    # The system is read-only (and /tmp, the control, writable) in a pooled
    # sandbox as in a cold one; a user namespace is refused and reported.
    runs, _, _ = pool([["/bin/sh", "-c", "touch /usr/ajtest-x; echo usr=$?; touch /tmp/ajtest-x; echo tmp=$?"],
                       ["/usr/bin/unshare", "-U", "/bin/true"]], outdir=outdir, events=str(ev))
    assert out(outdir, 0) == "usr=1\ntmp=0\n", (out(outdir, 0), out(outdir, 0, "err"))
    assert "Read-only file system" in out(outdir, 0, "err"), out(outdir, 0, "err")
    assert runs[1]["result"]["status"] != "ok"
    events = [json.loads(l) for l in open(ev / "1.jsonl")]
    kinds = [e["type"] for e in events]
    assert "escape_attempt" in kinds, kinds
    assert runs[1]["result"]["escape_attempted"] is True


def test_pooled_sandbox_reports_a_decoy_read_at_once(outdir, tmp_path):
    # The parked sandbox's decoys are leased before its command runs: the
    # very first thing the payload does, reading the service-account token,
    # is recorded as a canary.
    ev = tmp_path / "ev"
    ev.mkdir()
    os.chmod(ev, 0o777)
    runs, _, _ = pool([["/bin/cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]] * 2,
                      outdir=outdir, events=str(ev))
    for i in range(2):
        assert runs[i]["warm"] and runs[i]["result"]["status"] == "ok", runs[i]
        assert out(outdir, i).startswith("eyJ"), out(outdir, i)  # the decoy token was read
        kinds = [e["type"] for e in map(json.loads, open(ev / ("%d.jsonl" % i)))]
        assert "canary" in kinds, kinds


def test_nothing_of_one_run_reaches_the_next(outdir):
    tag = new_tag()
    first = ("echo secret > /tmp/left-behind; echo shm > /dev/shm/left-behind; "
             "export RUN1_MARK=yes; (setsid sleep %s >/dev/null 2>&1 &); "
             "echo $$ > /tmp/pid; sleep 0.2; ls /tmp/left-behind /dev/shm/left-behind; echo $RUN1_MARK; "
             "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done" % tag)
    second = ("ls -A /tmp /dev/shm; echo procs:; for p in /proc/[0-9]*; do "
              "tr '\\0' ' ' < $p/cmdline; echo; done; echo env:; env")
    runs, summary, _ = pool([["/bin/sh", "-c", first], ["/bin/sh", "-c", second]], outdir=outdir)
    assert all(r["warm"] for r in runs)
    # Positive control: the first run did leave all of it behind in its sandbox.
    assert runs[0]["result"]["status"] == "ok", runs[0]
    did = out(outdir, 0)
    assert "/tmp/left-behind" in did and "/dev/shm/left-behind" in did and "yes" in did, did
    assert tag in did, did
    seen = out(outdir, 1)
    assert "left-behind" not in seen and "pid" not in seen.split("procs:")[0], seen
    procs = seen.split("procs:")[1].split("env:")[0]
    assert tag not in procs and "sleep" not in procs, procs
    assert "RUN1_MARK" not in seen.split("env:")[1]
    # The first run's background process died with its sandbox.
    assert wait_for(lambda: not pids_with(tag), 5), pids_with(tag)
    a, b = runs[0]["result"], runs[1]["result"]
    assert a["sandbox_id"] != b["sandbox_id"]
    if IS_ROOT:
        # Root mode: every pooled sandbox has its own host uid as well.
        assert a["host_uid"] != b["host_uid"]


def test_env_pass_values_are_the_requests_own(outdir):
    """env_pass is read when each run starts, not when its sandbox was
    parked: each request sees its own value (tenant A's token never in
    tenant B's run), and a value set before the pool existed is not kept."""
    env = dict(os.environ, AJ_REQ_TOKEN="at-pool-creation")
    cmd = ["/bin/sh", "-c", "echo token=${AJ_REQ_TOKEN-unset}"]
    runs, _, proc = pool([["@AJ_REQ_TOKEN=tenant-a"] + cmd, ["@AJ_REQ_TOKEN=tenant-b"] + cmd,
                          ["@AJ_REQ_TOKEN=tenant-c"] + cmd],
                         size=2, outdir=outdir, pass_env=["AJ_REQ_TOKEN"], env=env)
    assert [r["result"]["status"] for r in runs] == ["ok"] * 3, (runs, proc.stderr)
    assert runs[0]["warm"] and runs[1]["warm"], runs
    assert out(outdir, 0).strip() == "token=tenant-a"
    assert out(outdir, 1).strip() == "token=tenant-b"
    assert out(outdir, 2).strip() == "token=tenant-c"
    # Control: the variable does reach a pooled run through env_pass, and a
    # name not passed does not.
    runs, _, _ = pool([["/bin/sh", "-c", "echo ${AJ_REQ_TOKEN-unset} ${AJ_OTHER-unset}"]], size=1,
                      outdir=outdir, pass_env=["AJ_REQ_TOKEN"], env=dict(env, AJ_OTHER="x"))
    assert out(outdir, 0).strip() == "at-pool-creation unset"


def test_a_parked_sandbox_holds_no_request_data(outdir, tmp_path):
    """While parked, no process of the sandbox holds the caller's
    environment (init and the waiting payload are forks of the caller: their
    environment memory is blanked), and the request's values arrive only
    with the run."""
    if not os.path.exists(AJ_POOL):
        must_skip("aj-pool helper not built")
    wait = str(tmp_path / "go")
    token = "secret-%s" % new_tag()
    env = dict(os.environ, AJ_CALLER_TOKEN=token)
    argv = [AJ_POOL, "--size", "1", "--pass", "AJ_REQ_TOKEN", "--outdir", outdir, "--wait-file", wait, "--",
            "@AJ_REQ_TOKEN=req-value", "/bin/sh", "-c", "echo ${AJ_REQ_TOKEN-unset} ${AJ_CALLER_TOKEN-unset}"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stderr.readline().strip() == "ready"
        def descendants():
            found, todo = [], children(p.pid)
            while todo:
                pid = todo.pop()
                found.append(pid)
                todo += children(pid)
            return found
        # init and the waiting payload (init forks it as the pool returns)
        assert wait_for(lambda: len(descendants()) >= 2, 10), descendants()
        parked = descendants()
        seen = {}
        for pid in parked:
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    seen[pid] = f.read()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass  # as nobody, the parked processes are not dumpable: unreadable
        if not seen:
            root_only("the parked processes' environ is readable only to root")
        # Control: the caller itself has the token in its environment.
        with open("/proc/%d/environ" % p.pid, "rb") as f:
            assert token.encode() in f.read()
        assert seen and all(token.encode() not in v for v in seen.values()), seen
        open(wait, "w").close()
        stdout, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out(outdir, 0).strip() == "req-value unset", stdout


def test_each_pooled_sandbox_is_used_once(outdir):
    # Five runs through a pool of one: five sandboxes, each prepared once.
    runs, summary, _ = pool([["/bin/sh", "-c", "echo $$"]] * 5, size=1, outdir=outdir)
    # Each is pid 1's first child in a pid namespace of its own.
    assert [out(outdir, i) for i in range(5)] == ["2\n"] * 5
    ids = {r["result"]["sandbox_id"] for r in runs}
    assert len(ids) == 5
    assert summary["pool"]["prepared"] >= summary["pool"]["warm_runs"]
    assert summary["pool"]["warm_runs"] + summary["pool"]["cold_runs"] == 5


def test_pool_leaves_nothing_behind(outdir):
    tag = new_tag()
    runs, summary, _ = pool([["/bin/sh", "-c", "sleep %s >/dev/null & sleep 0.2; "
                              "grep -q %s /proc/$!/cmdline && echo STARTED" % (tag, tag)],
                             ["/bin/true"]], size=3, outdir=outdir)
    assert out(outdir, 0) == "STARTED\n"  # the background process did run
    assert summary["children_left"] is False and summary["fds_after"] == summary["fds_before"]
    assert wait_for(lambda: not pids_with(tag), 5)
    # Parked sandboxes of the pool were torn down, not abandoned: no
    # process of the helper survives it, and no cgroup of any run remains.
    left = []
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if open(p, "rb").read().split(b"\0")[0].endswith(b"/aj-pool"):
                left.append(p)
        except OSError:
            pass
    assert not left, left
    for r in runs:
        sid = r["result"]["sandbox_id"][:12]  # cgroup names carry its first 12 digits
        assert not glob.glob("/sys/fs/cgroup/**/agentjail/*%s*" % sid, recursive=True), sid


def test_a_long_command_line_runs_cold(outdir):
    # 70 KiB of arguments: more than a parked payload takes (64 KiB), so
    # the pool runs it cold instead, with the same result.
    args = ["x" * 1000] * 70
    runs, summary, _ = pool([["/bin/sh", "-c", 'echo "$#"', "sh"] + args, ["/bin/echo", "short"]],
                            outdir=outdir)
    assert runs[0]["result"]["status"] == "ok" and runs[0]["warm"] is False
    assert out(outdir, 0) == "70\n"
    assert runs[1]["warm"] is True and out(outdir, 1) == "short\n"
    assert summary["pool"]["cold_runs"] == 1


def test_cold_runs_from_a_multithreaded_caller(outdir):
    # The pool's filler thread makes the caller multithreaded: a cold run
    # here clones init from a process with two threads. glibc's set*id
    # wrappers in the child wait for every thread glibc's copied list
    # names; one caught being created (right after aj_pool_new) never
    # answers, and init hung (about one pool in six, before the sandbox
    # side used the raw system calls). Twenty fresh pools, each starting
    # with a cold run: a regression fails here by timeout.
    args = ["x"] * 4100  # more arguments than a parked payload takes: cold
    for _ in range(20):
        runs, summary, _ = pool([["/bin/sh", "-c", "id -u", "sh"] + args], outdir=outdir, timeout=20)
        assert runs[0]["result"]["status"] == "ok" and summary["pool"]["cold_runs"] == 1


def test_parked_sandboxes_killed_from_outside(outdir, tmp_path):
    # Parked sandboxes can die while they wait (an admin, the OOM killer).
    # The pool notices and every command still runs exactly once: in
    # another parked sandbox, or cold.
    if not os.path.exists(AJ_POOL):
        must_skip("aj-pool helper not built")
    go = tmp_path / "go"
    cmds = []
    for word in ("a", "b", "c", "d"):
        cmds += [":::", "/bin/echo", word]
    proc = subprocess.Popen([AJ_POOL, "--size", "3", "--outdir", outdir, "--wait-file", str(go), "--"] + cmds[1:],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().strip() == "ready"
        # Three inits, each with its payload parked under it (the pool's
        # zygotes, which clone them, are children of the caller too).
        def inits_of(pid):
            return [c for c in children(pid) if comm(c) == "agentjail-init"]
        assert wait_for(lambda: len(inits_of(proc.pid)) == 3 and all(children(i) for i in inits_of(proc.pid)), 10)
        inits = inits_of(proc.pid)
        os.kill(children(inits[0])[0], 9)  # a parked payload
        os.kill(inits[1], 9)                # a sandbox's init
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    runs, summary = lines[:-1], lines[-1]
    assert [r["result"]["status"] for r in runs] == ["ok"] * 4, (runs, err)
    assert [open(os.path.join(outdir, "%d.out" % i)).read() for i in range(4)] == ["a\n", "b\n", "c\n", "d\n"]
    assert summary["pool"]["discarded"] >= 1
    assert summary["pool"]["warm_runs"] + summary["pool"]["cold_runs"] == 4
    assert summary["children_left"] is False


def test_unwritable_events_file_is_the_callers_error(tmp_path):
    # The caller's mistake fails the run clearly; it is not mistaken for a
    # dead sandbox (no silent cold retry), and nothing leaks.
    runs, summary, _ = pool([["/bin/echo", "x"]], events=str(tmp_path / "missing" / "dir"))
    assert runs[0]["rc"] < 0 and runs[0]["result"]["status"] == "setup_error"
    assert summary["pool"]["cold_runs"] == 0 and summary["pool"]["discarded"] == 0
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False


def test_pool_refuses_a_bad_size():
    if not os.path.exists(AJ_POOL):
        must_skip("aj-pool helper not built")
    proc = subprocess.run([AJ_POOL, "--size", "0", "--", "/bin/true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "pool size 0" in proc.stderr


def test_refilled_sandboxes_report_a_decoy_read_at_once(outdir, tmp_path):
    """Sandboxes the filler thread prepares take their decoy leases there;
    a break must still reach the run (it goes to the library's lease
    thread, whoever leased). Before, the break went to the filler thread,
    which never read it: no canary, and the reader hung for the kernel's
    lease-break-time (45 s) before the open went through."""
    import time
    ev = tmp_path / "ev"
    ev.mkdir()
    os.chmod(ev, 0o777)
    t0 = time.monotonic()
    runs, summary, _ = pool([["/bin/cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]] * 4, size=1,
                            outdir=outdir, events=str(ev), timeout=300)
    elapsed = time.monotonic() - t0
    assert summary["pool"]["prepared"] >= 2, summary  # at least one refill took part
    for i in range(4):
        assert runs[i]["result"]["status"] == "ok" and out(outdir, i).startswith("eyJ"), runs[i]
        kinds = [e["type"] for e in map(json.loads, open(ev / ("%d.jsonl" % i)))]
        assert "canary" in kinds, (i, runs[i]["warm"], kinds)
    assert elapsed < 30, "a decoy read waited for the kernel's lease-break-time: %.1f s" % elapsed


def test_an_escape_attempt_in_the_first_run_is_answered(outdir):
    # The first run after aj_pool_new can launch a sandbox whose payload has
    # not handed its seccomp listener over yet: it arrives while the launch
    # waits for READY and must be watched from then on. It was not (rootless,
    # with no cgroup timer to wake the loop, the run hung in the monitored call).
    runs, _, _ = pool([["/usr/bin/unshare", "-U", "/bin/true"], ["/bin/true"]], size=1, outdir=outdir,
                      timeout=60)
    assert runs[0]["warm"] and runs[0]["result"]["escape_attempted"] is True, runs[0]
    assert runs[0]["result"]["status"] == "nonzero_exit", runs[0]
    assert runs[1]["result"]["status"] == "ok" and runs[1]["result"]["escape_attempted"] is False
