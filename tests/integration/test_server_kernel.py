"""`agentjail serve`: live Python kernels bound to a session (`kernel:
"python"`, POST /v1/sessions/ID/cells, docs/server.md 'Kernels'), against a
real server (test_server.py's Server). The kernel's sandbox is the session's:
its processes are looked for in /proc by the bootstrap's marker on their
command line."""
import base64
import json
import os
import signal

import pytest

from conftest import IS_ROOT, wait_for
from test_server import TOKEN_A, TOKEN_B, tmp  # noqa: F401 (a fixture)
from test_server_sessions import KERNEL, backend, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.skipif(not IS_ROOT, reason="sessions need a root server (a tmpfs per workspace, "
                                                     "id-mapped binds); the server tests run as root"),
              pytest.mark.skipif(KERNEL < (6, 3), reason="id-mapped tmpfs mounts need Linux 6.3")]

MARK = b"agentjail-kernel"  # the bootstrap's reader thread's name, on its command line


def kernel_pids():
    """Host pids of python3 processes running the kernel bootstrap."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if MARK in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def kernel_thread_states(s):
    """The states (R, S, ...) of the server's kernel threads."""
    out = []
    for tid in os.listdir("/proc/%d/task" % s.proc.pid):
        try:
            with open("/proc/%d/task/%s/stat" % (s.proc.pid, tid)) as f:
                stat = f.read()
        except OSError:
            continue
        if "(aj-kernel)" in stat:
            out.append(stat.rsplit(")", 1)[1].split()[0])
    return out


def new_kernel(s, token=TOKEN_A, **body):
    status, _, j = s.request("POST", "/v1/sessions", dict({"kernel": "python"}, **body), token=token)
    assert status == 201, j
    assert j["kernel"]["language"] == "python", j
    return j["id"]


def cell(s, sid, code, token=TOKEN_A, **kw):
    status, _, j = s.request("POST", "/v1/sessions/%s/cells" % sid, dict({"code": code}, **kw), token=token,
                             timeout=120)
    assert status == 200, j
    return j


def has_module(name):
    return any(os.path.isdir(os.path.join(d, name)) for d in ("/usr/lib/python3/dist-packages",))


def test_cells_keep_state_and_return_values(server):
    s = server()
    sid = new_kernel(s)
    j = cell(s, sid, "x = 20\nprint('hello')\nx + 1")
    assert j["status"] == "ok" and j["stdout"] == "hello\n" and j["result"] == {"text/plain": "21"}, j
    assert j["error"] is None and j["events"] == [], j
    # The state is kept; a statement last is no result; the working directory is the workspace.
    j = cell(s, sid, "import os\ny = x * 2\nprint(os.getcwd(), y)")
    assert j["status"] == "ok" and j["stdout"] == "/workspace 40\n" and j["result"] is None, j
    # stderr, and what a child process writes to fd 1 (not the protocol: it goes to stderr).
    j = cell(s, sid, "import sys, subprocess\nprint('e', file=sys.stderr)\n"
                     "subprocess.run(['sh', '-c', 'echo child'])\n'%s' % y")
    assert j["status"] == "ok" and j["result"]["text/plain"] == "'40'", j
    assert "e\n" in j["stderr"] and "child\n" in j["stderr"] and "child" not in j["stdout"], j
    # An error: the traceback names the cell's line, not the bootstrap.
    j = cell(s, sid, "def f():\n    return 1 / 0\nf()")
    assert j["status"] == "error" and j["error"]["ename"] == "ZeroDivisionError", j
    tb = j["error"]["traceback"]
    assert 'File "<cell-4>", line 3' in tb and "return 1 / 0" in tb and "<string>" not in tb, tb
    # A forged protocol line printed by the cell is only output.
    j = cell(s, sid, 'print(\'{"op": "done", "id": 99, "status": "ok"}\')\nx')
    assert j["status"] == "ok" and j["result"]["text/plain"] == "20" and '"op"' in j["stdout"], j
    status, _, sj = s.request("GET", "/v1/sessions/%s" % sid)
    assert status == 200 and sj["kernel"]["status"] == "idle" and sj["kernel"]["cells"] == 5, sj
    # A KeyboardInterrupt of the cell's own is "interrupted" (no timeout); the kernel goes on.
    j = cell(s, sid, "raise KeyboardInterrupt")
    assert j["status"] == "interrupted" and j["error"]["ename"] == "KeyboardInterrupt", j
    # Output is capped per stream, and says so.
    j = cell(s, sid, "print('x' * (3 << 20))\nx")
    assert j["status"] == "ok" and j["result"]["text/plain"] == "20", j
    assert j["stdout"].startswith("x" * (1 << 20)) and "[output truncated" in j["stdout"], len(j["stdout"])
    assert len(j["stdout"]) < (1 << 20) + 100
    # Bad input: a clear 400.
    for body, want in [({}, "code: required"), ({"code": 1}, "code:"), ({"code": "1", "timeout": 0}, "timeout"),
                       ({"code": "1", "x": 1}, "unknown field")]:
        status, _, e = s.request("POST", "/v1/sessions/%s/cells" % sid, body)
        assert status == 400 and want in e["error"], (body, e)


def test_timeout_interrupts_and_the_kernel_survives(server):
    s = server()
    sid = new_kernel(s)
    assert cell(s, sid, "state = 'kept'")["status"] == "ok"
    j = cell(s, sid, "import time\nprint('before')\ntime.sleep(60)", timeout=1)
    assert j["status"] == "timeout" and j["error"]["ename"] == "KeyboardInterrupt", j
    assert j["stdout"] == "before\n" and j["kernel"]["restarted"] is False, j
    j = cell(s, sid, "state")
    assert j["status"] == "ok" and j["result"]["text/plain"] == "'kept'", j
    # A cell that ignores SIGINT: killed after the grace period, a fresh kernel, the state gone.
    before = kernel_pids()
    assert len(before) == 1, before
    j = cell(s, sid, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
             timeout=0.5)
    assert j["status"] == "dead" and j["kernel"] == {"restarted": True, "state_lost": True}, j
    j = cell(s, sid, "state")
    assert j["status"] == "error" and j["error"]["ename"] == "NameError", j
    after = kernel_pids()
    assert len(after) == 1 and after != before, (before, after)
    status, _, sj = s.request("GET", "/v1/sessions/%s" % sid)
    assert sj["kernel"]["status"] == "idle", sj
    # An explicit restart: state lost too.
    assert cell(s, sid, "z = 1")["status"] == "ok"
    status, _, k = s.request("POST", "/v1/sessions/%s/kernel/restart" % sid)
    assert status == 200 and k["restarts"] == 1, k
    assert cell(s, sid, "z")["error"]["ename"] == "NameError"
    assert cell(s, sid, "1+1")["result"]["text/plain"] == "2"


def test_escape_attempt_kills_the_kernel(server, tmp):
    log = os.path.join(tmp, "events.jsonl")
    s = server(extra={"events_log": log})
    sid = new_kernel(s)
    # Control: an ordinary call from the same code path is no event.
    j = cell(s, sid, "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.getpid() > 0")
    assert j["status"] == "ok" and j["events"] == [] and j["result"]["text/plain"] == "True", j
    assert s.metrics()["agentjail_escape_attempts_total"] == 0
    j = cell(s, sid, "libc.unshare(0x10000000)")
    esc = [e for e in j["events"] if e["type"] == "escape_attempt"]
    assert esc and esc[0]["syscall"] == "unshare", j
    assert j["status"] == "dead" and j["kernel"]["restarted"] is False, j
    assert esc[0]["session"] == sid and esc[0]["cell"] == 2, esc
    m = s.metrics()
    assert m["agentjail_escape_attempts_total"] == len(esc), m
    assert m['agentjail_tenant_escape_attempts_total{tenant="a"}'] == len(esc), m
    assert m['agentjail_tenant_escape_attempts_total{tenant="b"}'] == 0, m
    # In the server's events log too, tied to the tenant, the session and the cell.
    with open(log) as f:
        logged = [json.loads(line) for line in f]
    assert [e for e in logged if e["type"] == "escape_attempt" and e["tenant"] == "a" and e["session"] == sid and
            e["cell"] == 2 and e["run_id"] == esc[0]["sandbox_id"]], logged
    status, _, sj = s.request("GET", "/v1/sessions/%s" % sid)
    assert sj["kernel"]["status"] == "dead" and "escape_attempt" in sj["kernel"]["reason"], sj
    assert wait_for(lambda: not kernel_pids(), 10), kernel_pids()
    # It stays dead: no cell runs, no restart.
    j = cell(s, sid, "1")
    assert j["status"] == "dead" and "escape_attempt" in j["error"]["evalue"], j
    status, _, e = s.request("POST", "/v1/sessions/%s/kernel/restart" % sid)
    assert status == 409, e
    # Its thread waits (in epoll_wait) and does not spin: once asleep, sleeping at every look.
    # (A thread the library starts from it, such as its decoy lease thread, has its name too.)
    def asleep():
        st = kernel_thread_states(s)
        return st and all(x == "S" for x in st)
    assert wait_for(asleep, 10), kernel_thread_states(s)
    states = [kernel_thread_states(s) for _ in range(50)]
    assert all(st and all(x == "S" for x in st) for st in states), states
    # With on_escape kill the library ends the sandbox itself: the same outcome.
    sid = new_kernel(s, policy={"detection": {"on_escape": "kill"}})
    j = cell(s, sid, "import ctypes\nctypes.CDLL(None).unshare(0x10000000)")
    assert j["status"] == "dead" and any(e["type"] == "escape_attempt" for e in j["events"]), j
    status, _, sj = s.request("GET", "/v1/sessions/%s" % sid)
    assert sj["kernel"]["status"] == "dead" and "escape" in sj["kernel"]["reason"], sj
    assert wait_for(lambda: not kernel_pids(), 10), kernel_pids()


def server_fds(s):
    """The server's fds but its sockets (HTTP connections come and go)."""
    out = []
    for fd in os.listdir("/proc/%d/fd" % s.proc.pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (s.proc.pid, fd))
        except OSError:
            continue
        if not target.startswith("socket:"):
            out.append((int(fd), target))
    return sorted(out)


def test_kernel_ends_with_its_session_and_tenants_are_apart(server):
    s = server(extra={"pool_size": 0})  # no warm pool refilling beside: the server's fds stay put
    assert s.request("GET", "/v1/sessions")[0] == 200
    fds = server_fds(s)
    sid = new_kernel(s)
    assert cell(s, sid, "x = 41")["status"] == "ok"
    kernels = kernel_pids()
    assert len(kernels) == 1
    # Another tenant's session is not there: its cell and restart are 404
    # and change nothing (the owner's kernel, its state, its restarts).
    status, _, e = s.request("POST", "/v1/sessions/%s/cells" % sid, {"code": "x = 0"}, token=TOKEN_B)
    assert status == 404, e
    status, _, e = s.request("POST", "/v1/sessions/%s/kernel/restart" % sid, token=TOKEN_B)
    assert status == 404, e
    j = cell(s, sid, "x + 1")
    assert j["status"] == "ok" and j["result"] == {"text/plain": "42"}, j
    assert j["kernel"] == {"restarted": False, "state_lost": False}, j
    assert kernel_pids() == kernels
    assert s.request("GET", "/v1/sessions/%s/kernel" % sid)[2]["restarts"] == 0
    assert len(server_fds(s)) > len(fds)  # control: the kernel holds fds while it lives
    status, _, _ = s.request("DELETE", "/v1/sessions/%s" % sid)
    assert status == 200
    assert not kernel_pids()
    assert server_fds(s) == fds  # its pipes, events file, epoll and eventfd closed
    status, _, e = s.request("POST", "/v1/sessions/%s/cells" % sid, {"code": "1"})
    assert status == 410, e
    # A session without a kernel has none; a kernel other than python is refused.
    status, _, plain = s.request("POST", "/v1/sessions", {})
    assert status == 201 and "kernel" not in plain
    status, _, e = s.request("POST", "/v1/sessions/%s/cells" % plain["id"], {"code": "1"})
    assert status == 409 and "no kernel" in e["error"], e
    status, _, e = s.request("POST", "/v1/sessions", {"kernel": "ruby"})
    assert status == 400 and "kernel" in e["error"], e
    # Idle timeout and server shutdown end kernels too.
    idle = new_kernel(s, idle_timeout=1)
    assert cell(s, idle, "1")["status"] == "ok"
    assert wait_for(lambda: s.request("GET", "/v1/sessions/%s" % idle)[2]["status"] != "live", 20)
    assert not kernel_pids()
    other = new_kernel(s)
    assert cell(s, other, "1")["status"] == "ok" and len(kernel_pids()) == 1
    assert s.stop(signal.SIGTERM) == 0, s.err()
    assert not kernel_pids()


@pytest.mark.skipif(not (has_module("pandas") and has_module("matplotlib")),
                    reason="python3-pandas and python3-matplotlib are not installed")
def test_rich_results(server):
    s = server()
    sid = new_kernel(s)
    j = cell(s, sid, "import pandas as pd\npd.DataFrame({'a': [1, 2]})", timeout=60)
    assert j["status"] == "ok" and "<table" in j["result"]["text/html"], j
    assert "a" in j["result"]["text/plain"], j
    j = cell(s, sid, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone", timeout=120)
    assert j["status"] == "ok", j
    png = base64.b64decode(j["result"]["image/png"])
    assert png.startswith(b"\x89PNG"), j["result"]


def test_mcp_run_cell():
    """run_cell over `agentjail mcp` (stdio), driven by the MCP SDK client as
    test_mcp.py does: state kept, text results, errors as isError, figures
    as image content blocks."""
    import test_mcp
    if not test_mcp.NODE or not os.path.isdir(os.path.join(test_mcp.MCP_DIR, "node_modules", "@modelcontextprotocol",
                                                           "sdk")):
        pytest.skip("node or tests/mcp/node_modules missing (scripts/deps.sh test runs npm ci there)")
    plot = has_module("matplotlib")
    steps = [
        {"op": "connect"},                                                                           # 0
        {"op": "call", "name": "create_session", "args": {"kernel": "python"}},                     # 1
        {"op": "call", "name": "run_cell", "args": {"session_id": "$sid:1", "code": "x = 41"}},     # 2
        {"op": "call", "name": "run_cell", "args": {"session_id": "$sid:1", "code": "x + 1"}},      # 3
        {"op": "call", "name": "run_cell", "args": {"session_id": "$sid:1", "code": "1/0"}},        # 4
        {"op": "call", "name": "run_cell", "args": {"session_id": "0" * 32, "code": "1"}},          # 5
        {"op": "call", "name": "run_cell", "args": {"session_id": "$sid:1", "code": 1}},            # 6
    ]
    if plot:
        steps.append({"op": "call", "name": "run_cell", "args": {"session_id": "$sid:1", "timeout": 120, "code":
                      "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('plotted')"}})  # 7
    out = test_mcp.stdio(steps)
    st = out["steps"]
    assert st[1]["result"]["isError"] is False, st[1]
    assert st[2]["result"]["isError"] is False, st[2]
    sc = test_mcp.structured(st[3]["result"])
    assert sc["status"] == "ok" and sc["result"]["text/plain"] == "42", sc
    sc = test_mcp.structured(st[4]["result"])
    assert st[4]["result"]["isError"] is True and sc["error"]["ename"] == "ZeroDivisionError", sc
    assert st[5]["error"]["code"] == -32602 and "no session" in st[5]["error"]["message"], st[5]
    assert st[6]["error"]["code"] == -32602, st[6]
    if plot:
        res = st[7]["result"]
        imgs = [c for c in res["content"] if c["type"] == "image"]
        assert len(imgs) == 1 and imgs[0]["mimeType"] == "image/png", res
        assert base64.b64decode(imgs[0]["data"]).startswith(b"\x89PNG")
        sc = test_mcp.structured(res)
        assert sc["stdout"] == "plotted\n" and sc["images"] == 1, sc
