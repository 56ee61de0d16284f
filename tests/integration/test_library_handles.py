"""The asynchronous interface (aj_sandbox_start / _fd / _process / _wait /
_kill / _free), driven by the aj-handles helper as embedders drive it:

- many runs in flight at once from one thread (one epoll loop over every
  handle's fd and every run's stdout pipe), cold and pooled, each run's
  output captured through a pipe the library made;
- runs from several threads at once, one handle per thread, with decoys
  touched (the lease-break signal must reach no embedder thread);
- a stdin pipe; kill; free while running;
- nothing left behind: processes, cgroups, fds, children.
"""
import glob
import json
import os
import subprocess
import time

import pytest

from conftest import AJ_HELPERS, must_skip, new_tag, pids_with

HELPER = os.path.join(AJ_HELPERS, "aj-handles")
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def handles(args, cmd, timeout=120, env=None):
    if not os.path.exists(HELPER):
        must_skip("aj-handles helper not built")
    p = subprocess.run([HELPER] + list(args) + ["--"] + list(cmd), capture_output=True, text=True,
                       timeout=timeout, env=env)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    assert p.returncode == 0 and lines and "fds_before" in lines[-1], (p.returncode, p.stdout, p.stderr)
    return lines[:-1], lines[-1], p


def no_leftovers(runs, summary):
    assert summary["fds_after"] == summary["fds_before"], summary
    assert summary["children_left"] is False, summary
    for r in runs:
        sid = r["sandbox_id"][:12]  # the run's cgroup names carry its first 12 digits
        assert sid and not glob.glob("/sys/fs/cgroup/**/agentjail/*%s*" % sid, recursive=True), sid


@pytest.mark.parametrize("pool", [None, "2"], ids=["cold", "pool"])
def test_many_runs_at_once_from_one_thread(pool):
    n = 6
    args = (["--pool", pool] if pool else []) + ["loop", str(n)]
    runs, summary, _ = handles(args, ["/bin/sh", "-c", "sleep 1; echo run-$0", "@"])
    assert [r["run"] for r in runs] == list(range(n))
    for r in runs:
        assert r["rc"] == 0 and r["status"] == "ok", r
        assert r["stdout"] == "run-%d " % r["run"], r  # its own output, through its own pipe
        assert r["ms"] >= 1000, r  # each did run its second
        # Woken for its messages, its output, its exit and its timed checks
        # (the cgroup's limits every 20 ms), not spinning: an fd left in the
        # set while nothing is to be done for it reads ready for ever.
        assert r["rounds"] < 500, r
    assert len({r["sandbox_id"] for r in runs}) == n
    # In flight together: six one-second runs took well under six seconds.
    assert summary["wall_ms"] < 1000 * n / 2, summary
    no_leftovers(runs, summary)


def test_runs_from_several_threads(hostdir):
    """Four threads, three runs each, each reading a decoy: every run has
    its canary (the lease break went to the library's own thread; none of
    these threads blocks the signal, and the process lives on)."""
    os.chmod(hostdir, 0o777)
    env = dict(os.environ, AJ_HANDLES_EVENTS=hostdir)
    runs, summary, p = handles(["threads", "4", "3"], ["/bin/sh", "-c", "head -c 3 %s; echo -$0" % TOKEN, "@"],
                               env=env)
    assert len(runs) == 12, p.stderr
    for r in runs:
        assert r["rc"] == 0 and r["status"] == "ok", r
        assert r["stdout"] == "eyJ-%d " % r["run"], r
        kinds = [json.loads(l)["type"] for l in open(os.path.join(hostdir, "%d.jsonl" % r["run"]))]
        assert kinds[0] == "start" and "canary" in kinds and kinds[-1] == "exit", (r["run"], kinds)
    no_leftovers(runs, summary)


def test_runs_from_several_threads_pooled():
    runs, summary, _ = handles(["--pool", "2", "threads", "3", "4"], ["/bin/sh", "-c", "echo p-$0", "@"])
    assert len(runs) == 12 and all(r["status"] == "ok" and r["stdout"] == "p-%d " % r["run"] for r in runs), runs
    no_leftovers(runs, summary)


def test_stdin_pipe():
    runs, summary, _ = handles(["stdin", "hello from the embedder\n"], ["/bin/cat"])
    assert runs[0]["status"] == "ok" and runs[0]["stdout"] == "hello from the embedder ", runs
    no_leftovers(runs, summary)


def test_kill_ends_the_run():
    tag = new_tag()
    t0 = time.monotonic()
    runs, summary, p = handles(["kill"], ["/bin/sh", "-c", "echo up; exec sleep %s" % tag])
    r = runs[0]
    assert r["stdout"] == "up ", r  # it was running when killed
    assert (r["status"], r["signal"], r["exit_code"]) == ("signaled", 15, 143), r
    assert time.monotonic() - t0 < 30
    assert not pids_with(tag)
    no_leftovers(runs, summary)


def test_free_while_running_leaves_nothing():
    tag = new_tag()
    runs, summary, p = handles(["free"], ["/bin/sh", "-c", "echo up; (sleep %s &); exec sleep %s" % (tag, tag)])
    r = runs[0]
    assert r["freed"] is True and r["free_ms"] < 5000, r
    # Free returned with every process of the sandbox reaped or dead: the
    # pid namespace went with its init, the background sleep with it.
    assert not pids_with(tag), pids_with(tag)
    no_leftovers(runs, summary)


def test_lease_signal_is_configurable(hostdir):
    """aj_set_lease_signal before the first sandbox: decoy reads are still
    canaries (with SIGRTMIN+8 now); once the library's thread runs, another
    number is refused (EBUSY) and the same one accepted; SIGTERM is no
    real-time signal (EINVAL)."""
    os.chmod(hostdir, 0o777)
    env = dict(os.environ, AJ_HANDLES_EVENTS=hostdir)
    if not os.path.exists(HELPER):
        must_skip("aj-handles helper not built")
    p = subprocess.run([HELPER, "lease-signal", "8", "--", "/bin/sh", "-c", "head -c 3 %s" % TOKEN],
                       capture_output=True, text=True, timeout=60, env=env)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    run, sets = lines[0], lines[1]
    assert run["status"] == "ok" and run["stdout"] == "eyJ", (run, p.stderr)
    kinds = [json.loads(l)["type"] for l in open(os.path.join(hostdir, "0.jsonl"))]
    assert "canary" in kinds, kinds
    assert sets == {"set_first": 0, "set_other_after": -16, "set_same_after": 0, "set_sigterm": -22}, sets


def test_pool_freed_while_its_runs_go_on():
    """aj_pool_free right after starting pooled runs: they finish as usual
    (each keeps what it needs of the pool), and their cgroups and the
    pool's are all removed."""
    env = dict(os.environ, AJ_HANDLES_FREE_POOL="1")
    runs, summary, _ = handles(["--pool", "3", "loop", "3"], ["/bin/sh", "-c", "sleep 0.5; echo p-$0", "@"], env=env)
    assert [(r["status"], r["stdout"]) for r in runs] == [("ok", "p-%d " % i) for i in range(3)], runs
    no_leftovers(runs, summary)
