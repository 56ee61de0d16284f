"""struct aj_request, as an embedder fills it (the aj-request helper):

- stdin, stdout and stderr default to /dev/null, never the embedder's own
  0-2 (an MCP server on stdio would otherwise hand its JSON-RPC channel to
  the payload); named fds are used as given;
- the request's environment is added to the policy's (and wins), its
  working directory replaces the policy's;
- per-request limits (timeout, memory, cpu time, output) tighten the
  policy and are enforced; asking for more than the policy allows is
  refused before anything starts (EPERM, exit hint 2), also from a pool;
- the size field: an older caller's shorter struct works, a newer caller's
  longer one works unless it sets a field this library does not know.
"""
import json
import os
import subprocess
import time

import pytest

from conftest import AJ_HELPERS, CG_LIMITS, cgroup_limits_only, must_skip

HELPER = os.path.join(AJ_HELPERS, "aj-request")
EPERM, EINVAL, E2BIG = 1, 22, 7


def request(args, cmd, input=None, timeout=60, **kw):
    if not os.path.exists(HELPER):
        must_skip("aj-request helper not built")
    p = subprocess.run([HELPER] + list(args) + ["--"] + list(cmd), capture_output=True, timeout=timeout,
                       input=input, **kw)
    lines = [l for l in p.stdout.decode(errors="replace").splitlines() if l.startswith('{"rc"')]
    assert p.returncode == 0 and lines, (p.returncode, p.stdout, p.stderr)
    out = json.loads(lines[-1])
    out["stdout"] = p.stdout.decode(errors="replace")
    out["stderr"] = p.stderr.decode(errors="replace")
    return out


@pytest.fixture
def wdir(hostdir):
    os.chmod(hostdir, 0o777)  # the run's own host uid (root mode) writes here
    return hostdir


# What the payload finds on 0, 1 and 2: device numbers (hex major:minor; a
# pipe is 0:0), what reading stdin gives, written to a bind the test reads.
PROBE = ("fds=$(stat -L -c '%t:%T' /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); x=$(cat); "
         "printf '%s' \"$x\" > /w/stdin.txt; printf '%s' \"$fds\" > /w/fds.txt; "
         "echo LEAK-OUT; echo LEAK-ERR >&2")


def test_stdio_defaults_to_dev_null(wdir):
    r = request(["--bind-rw", wdir + ":/w"], ["/bin/sh", "-c", PROBE], input=b"SECRET-INPUT\n")
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r
    # stdin: EOF at once, not the embedder's input.
    assert open(os.path.join(wdir, "stdin.txt")).read() == ""
    # All three are /dev/null (character device 1:3).
    assert open(os.path.join(wdir, "fds.txt")).read().split() == ["1:3"] * 3
    # What the payload wrote to its 1 and 2 did not reach ours.
    assert "LEAK-OUT" not in r["stdout"] and "LEAK-ERR" not in r["stderr"], r


def test_stdio_named_fds_are_used(wdir):
    """Control: the same payload with our 0, 1 and 2 named gets them."""
    r = request(["--bind-rw", wdir + ":/w", "--stdin", "fd:0", "--stdout", "fd:1", "--stderr", "fd:2"],
                ["/bin/sh", "-c", PROBE], input=b"SECRET-INPUT\n")
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r
    assert open(os.path.join(wdir, "stdin.txt")).read() == "SECRET-INPUT"
    assert open(os.path.join(wdir, "fds.txt")).read().split() == ["0:0"] * 3  # our pipes
    assert "LEAK-OUT" in r["stdout"] and "LEAK-ERR" in r["stderr"], r


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
def test_stdio_explicit_file_fds(tmp_path, pool):
    out, err = str(tmp_path / "out"), str(tmp_path / "err")
    r = request((["--pool"] if pool else []) + ["--stdout", "file:" + out, "--stderr", "file:" + err],
                ["/bin/sh", "-c", "echo to-out; echo to-err >&2"])
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r
    assert open(out).read() == "to-out\n" and open(err).read() == "to-err\n"
    if pool:
        assert r["warm"] is True, r


def test_stdio_default_in_a_pooled_run(wdir):
    r = request(["--pool", "--bind-rw", wdir + ":/w"], ["/bin/sh", "-c", PROBE], input=b"SECRET-INPUT\n")
    assert r["rc"] == 0 and r["result"]["status"] == "ok" and r["warm"] is True, r
    assert open(os.path.join(wdir, "stdin.txt")).read() == ""
    assert open(os.path.join(wdir, "fds.txt")).read().split() == ["1:3"] * 3
    assert "LEAK-OUT" not in r["stdout"] and "LEAK-ERR" not in r["stderr"], r


def test_stdio_bad_fd_is_refused():
    r = request(["--stdout", "fd:987"], ["/bin/true"])
    assert r["rc"] < 0 and r["errnum"] == 9 and "stdout" in r["error"], r  # EBADF


def test_stdio_pipe_needs_a_handle():
    """aj_run_ex blocks until the end: nobody could read a pipe it made."""
    r = request(["--stdout", "pipe"], ["/bin/echo", "x"])
    assert r["rc"] < 0 and r["errnum"] == EINVAL and "aj_sandbox_start" in r["error"], r


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
def test_request_environment_is_added_and_wins(pool):
    r = request((["--pool"] if pool else []) +
                ["--stdout", "fd:1", "--policy-env", "A=policy", "--policy-env", "B=policy",
                 "--env", "B=request", "--env", "C=request"],
                ["/bin/sh", "-c", "echo A=$A B=$B C=$C"])
    assert r["rc"] == 0, r
    assert "A=policy B=request C=request" in r["stdout"], r


def test_request_environment_bad_entry_is_refused():
    r = request(["--env", "1BAD=x"], ["/bin/true"])
    assert r["rc"] < 0 and r["error"].startswith("request: "), r
    assert r["result"]["status"] == "setup_error" and r["result"]["exit_code"] == 2, r


def test_request_workdir():
    r = request(["--stdout", "fd:1", "--workdir", "/usr"], ["/bin/pwd"])
    assert r["rc"] == 0 and "/usr\n" in r["stdout"], r
    # Control: the policy's (the default, /tmp).
    r = request(["--stdout", "fd:1"], ["/bin/pwd"])
    assert r["rc"] == 0 and "/tmp\n" in r["stdout"], r
    r = request(["--workdir", "relative"], ["/bin/pwd"])
    assert r["rc"] < 0 and "workdir" in r["error"], r


# ---- per-request limits -------------------------------------------------------------


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
def test_request_timeout_tightens(pool):
    t0 = time.monotonic()
    r = request((["--pool"] if pool else []) + ["--policy-timeout-ms", "60000", "--timeout-ms", "1000"],
                ["/bin/sleep", "30"])
    assert r["rc"] == 0 and r["result"]["status"] == "timeout", r
    assert time.monotonic() - t0 < 20
    if pool:
        assert r["warm"] is True, r  # a timeout is the supervisor's: a parked sandbox takes it
    # Control: the policy's timeout alone lets the same kind of run finish.
    r = request((["--pool"] if pool else []) + ["--policy-timeout-ms", "60000"], ["/bin/sleep", "1"])
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r


def test_request_timeout_where_the_policy_has_none():
    r = request(["--timeout-ms", "500"], ["/bin/sleep", "30"])
    assert r["rc"] == 0 and r["result"]["status"] == "timeout", r


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
def test_request_output_limit_tightens(pool):
    cmd = ["/bin/sh", "-c", "head -c 20000 /dev/zero"]
    r = request((["--pool"] if pool else []) + ["--policy-output-limit", "1000000", "--output-limit", "5000"], cmd)
    assert r["rc"] == 0 and r["result"]["status"] == "output_limit", r
    assert r["result"]["layers"]["output_limit"] is True
    r = request((["--pool"] if pool else []) + ["--policy-output-limit", "1000000"], cmd)
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
def test_request_memory_tightens(pool):
    cgroup_limits_only("a memory limit needs a cgroup")
    hog = ["python3", "-c", "b = bytearray(300 << 20); print(len(b))"]
    r = request((["--pool"] if pool else []) + ["--memory", str(64 << 20)], hog, timeout=120)
    assert r["rc"] == 0 and r["result"]["status"] == "memory_limit", r
    if pool:
        assert r["warm"] is False, r  # a parked sandbox's cgroup has the policy's limit: cold
    # Control: the policy's default (2G) lets it allocate.
    r = request((["--pool"] if pool else []) + ["--stdout", "fd:1"], hog, timeout=120)
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r


def test_request_cpu_time_tightens():
    cgroup_limits_only("cpu time is read from the cgroup")
    r = request(["--cpu-time-ms", "1000"], ["/bin/sh", "-c", "while :; do :; done"], timeout=120)
    assert r["rc"] == 0 and r["result"]["status"] == "cpu_limit", r
    assert r["result"]["layers"]["cpu_time_limit"] is True


@pytest.mark.parametrize("pool", [False, True], ids=["cold", "pool"])
@pytest.mark.parametrize("policy,asked,name", [
    (["--policy-timeout-ms", "5000"], ["--timeout-ms", "10000"], "timeout_ms"),
    (["--policy-output-limit", "1000"], ["--output-limit", "2000"], "output_limit"),
    ([], ["--memory", str(4 << 30)], "memory_max"),  # the default policy's is 2G
    (["--policy-cpu-time-ms", "1000"], ["--cpu-time-ms", "2000"], "cpu_time_ms"),
])
def test_request_cannot_loosen(wdir, pool, policy, asked, name):
    marker = os.path.join(wdir, "ran")
    r = request((["--pool"] if pool else []) + ["--bind-rw", wdir + ":/w"] + policy + asked,
                ["/bin/sh", "-c", "touch /w/ran"])
    assert r["rc"] < 0 and r["errnum"] == EPERM, r
    assert name in r["error"] and "more than the policy allows" in r["error"], r
    assert r["result"]["status"] == "setup_error" and r["result"]["exit_code"] == 2, r
    assert not os.path.exists(marker), "the payload ran despite the refusal"
    # Control: asking for exactly the policy's value runs. A request's
    # memory or cpu-time limit is required, so where this caller's runs get
    # no cgroup (nobody without delegation) the control is the same run
    # without the request's limit.
    same = [asked[0], policy[1] if policy else str(2 << 30)]
    if name in ("memory_max", "cpu_time_ms") and not CG_LIMITS:
        same = []
    r = request((["--pool"] if pool else []) + ["--bind-rw", wdir + ":/w"] + policy + same,
                ["/bin/sh", "-c", "touch /w/ran"])
    assert r["rc"] == 0 and r["result"]["status"] == "ok", r
    assert os.path.exists(marker)


# ---- the size field --------------------------------------------------------------------


def test_request_size_older_caller_reads_as_zero():
    # A caller built when the struct ended after stdio[] (no workdir,
    # events or limits yet): those read as zero, the run works.
    r = request(["--size", "64", "--stdout", "fd:1", "--timeout-ms", "1"], ["/bin/echo", "old"])
    assert r["rc"] == 0 and r["result"]["status"] == "ok" and "old\n" in r["stdout"], r


def test_request_size_too_small_is_refused():
    r = request(["--size", "4"], ["/bin/true"])
    assert r["rc"] < 0 and r["errnum"] == EINVAL and "AJ_REQUEST_INIT" in r["error"], r


def test_request_size_newer_caller():
    # Zero past our struct: nothing we do not know is set, it runs.
    r = request(["--size", "160", "--tail-byte", "0", "--stdout", "fd:1"], ["/bin/echo", "new"])
    assert r["rc"] == 0 and "new\n" in r["stdout"], r
    # A field we do not know is set: refused, not ignored.
    r = request(["--size", "160", "--tail-byte", "1"], ["/bin/true"])
    assert r["rc"] < 0 and r["errnum"] == E2BIG, r
