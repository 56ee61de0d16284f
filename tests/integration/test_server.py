"""`agentjail serve`: a real server on a loopback port (and one on a unix
socket) with a temp config and store, driven over real HTTP with
http.client. Each denial has its positive control next to it."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, IS_ROOT, alive, children, comm, new_tag, pids_with, wait_for
from srvhelp import TOKEN_A, TOKEN_B, Server, serving, sha  # noqa: F401 (test_server_pg and test_mcp take them from here)

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the server tests run as root (per-run host uids)")


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="ajtest-srv-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server(tmp):
    yield from serving(tmp)


def cgroup_dirs_of(pid):
    """cgroup dirs named for runs of supervisor pid (<pid>.<starttime>.<id>)."""
    found = []
    for dirpath, dirnames, _ in os.walk("/sys/fs/cgroup", onerror=lambda e: None):
        if dirpath.count("/") > 12:
            dirnames[:] = []
            continue
        found += [os.path.join(dirpath, d) for d in dirnames if d.startswith("%d." % pid)]
    return found


# ---- auth ---------------------------------------------------------------------------------------

def test_auth_refuses_missing_and_wrong_tokens(server):
    s = server()
    body = {"language": "sh", "code": "echo hi"}
    for token in (None, "wrong-token", TOKEN_A + "x", ""):
        status, _, j = s.run(body, token=token)
        assert status == 401, (token, j)
        assert "Bearer" in j["error"]
    # Positive control: the right token runs.
    status, _, j = s.run(body)
    assert status == 200, j
    assert j["status"] == "ok" and j["stdout"] == "hi\n"


# ---- runs ------------------------------------------------------------------------------------------

def test_python_and_bash_runs_with_output(server):
    s = server()
    status, _, j = s.run({"language": "python", "code": "import sys; print(6 * 7); print('e', file=sys.stderr)"})
    assert status == 200, j
    assert j["stdout"] == "42\n" and j["stderr"] == "e\n"
    assert j["result"]["status"] == "ok" and j["result"]["layers"]["seccomp"] is True
    assert j["argv"][:2] == ["python3", "-c"] and len(j["id"]) == 32
    assert j["policy_sha256"] == j["result"]["policy_sha256"]
    status, _, j = s.run({"language": "bash", "code": "echo out; echo err >&2; exit 3"})
    assert status == 200, j
    assert j["status"] == "nonzero_exit" and j["exit_code"] == 3
    assert (j["stdout"], j["stderr"]) == ("out\n", "err\n")
    status, _, j = s.run({"argv": ["sh", "-c", "echo $GREETING"], "env": {"GREETING": "hello"}})
    assert status == 200 and j["stdout"] == "hello\n", j
    # Nothing of the server (its sockets, store, epoll, pipes) reaches the payload.
    status, _, j = s.run({"language": "python", "code": "import os; print(sorted(map(int, os.listdir('/proc/self/fd'))))"})
    assert status == 200 and j["stdout"] == "[0, 1, 2, 3]\n", j  # 3: the listing's own
    if shutil.which("node"):
        status, _, j = s.run({"language": "node", "code": "console.log(6 * 7)"})
        assert status == 200 and j["stdout"] == "42\n" and j["argv"][:2] == ["node", "-e"], j
    # Output that is not UTF-8 is text all the same, each bad byte U+FFFD.
    status, _, j = s.run({"language": "python",
                          "code": "import sys; sys.stdout.buffer.write(b'ok\\xff\\xc3\\xa9\\n')"})
    assert status == 200 and j["stdout"] == "ok\ufffd\u00e9\n" and j["stdout_bytes"] == 6, j


def test_stdin_reaches_the_payload(server):
    s = server()
    status, _, j = s.run({"argv": ["cat"], "stdin": "line one\nline two\n"})
    assert status == 200, j
    assert j["stdout"] == "line one\nline two\n"
    # Larger than a pipe: written as the payload reads it.
    big = "0123456789abcdef" * 20000
    status, _, j = s.run({"argv": ["wc", "-c"], "stdin": big})
    assert status == 200, j
    assert j["stdout"].strip() == str(len(big))
    # A NUL is a byte like another in stdin; argv cannot hold one.
    status, _, j = s.run({"argv": ["wc", "-c"], "stdin": "a\u0000b"})
    assert status == 200 and j["stdout"].strip() == "3", j
    status, _, j = s.run({"argv": ["echo", "a\u0000b"]})
    assert status == 400 and j["error"].startswith("argv[1]"), j
    # Without stdin the payload reads /dev/null (EOF at once).
    status, _, j = s.run({"argv": ["wc", "-c"]})
    assert j["stdout"].strip() == "0"


def test_async_run_get_and_delete_kills_it(server):
    s = server()
    tag = new_tag()
    status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202, j
    rid = j["id"]
    assert wait_for(lambda: pids_with(tag), 10), "the payload never started"
    status, _, j = s.request("GET", "/v1/runs/" + rid)
    assert status == 200 and j["status"] == "running" and j["id"] == rid, j
    status, _, j = s.request("DELETE", "/v1/runs/" + rid)
    assert status == 200, j
    assert j["status"] == "signaled" and j["result"]["signal"] == signal.SIGKILL, j
    assert not pids_with(tag), "the killed run's payload is still there"
    # The finished record, now from the store.
    status, _, j2 = s.request("GET", "/v1/runs/" + rid)
    assert status == 200 and j2["status"] == "signaled" and j2["result"] == j["result"]
    assert s.metrics()['agentjail_runs_finished_total{status="signaled"}'] == 1


def start_sleeps(s, n):
    """n `sleep TAG` runs started with wait:false, all running: (tag, their ids)."""
    tag = new_tag()
    ids = []
    for _ in range(n):
        status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
        assert status == 202, j
        ids.append(j["id"])
    assert wait_for(lambda: len(pids_with(tag)) == n, 30), "not every run started"
    return tag, ids


def delete_runs(s, tag, ids):
    """DELETE each run: each ends killed, and no payload of them is left."""
    for rid in ids:
        status, _, j = s.request("DELETE", "/v1/runs/" + rid)
        assert status == 200 and j["status"] == "signaled", j
    assert not pids_with(tag)


def test_pool_refills_while_long_runs_hold_most_of_it(server):
    """Three long runs take three sandboxes of a pool of four. Below half full, the pool
    refills while they run (under sustained load, waiting for runs to end left it empty and
    every run waiting for its own refill); the runs go on undisturbed."""
    s = server(extra={"pool_size": 4})

    def ready():
        return s.metrics().get('agentjail_tenant_pool_ready{tenant="a"}')

    assert wait_for(lambda: ready() == 4, 60), s.metrics()
    tag, ids = start_sleeps(s, 3)
    # They took parked sandboxes (positive control: the pool was drawn down).
    assert s.metrics()['agentjail_pool_runs_total{kind="warm"}'] >= 3, s.metrics()
    assert wait_for(lambda: ready() == 4, 60), s.metrics()
    for rid in ids:
        status, _, j = s.request("GET", "/v1/runs/" + rid)
        assert status == 200 and j["status"] == "running", j
    assert len(pids_with(tag)) == 3
    delete_runs(s, tag, ids)


def writable_memory(pid):
    """The bytes of pid's writable mappings (heap, stacks, anonymous,
    data): where a copy of a request would be. Only pages present
    (pagemap), and no mapping over 1 GiB (a sanitizer's shadow)."""
    import struct
    page = os.sysconf("SC_PAGE_SIZE")
    out = []
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", buffering=0) as mem, \
            open("/proc/%d/pagemap" % pid, "rb", buffering=0) as pagemap:
        for line in maps:
            f = line.split()
            if f[1][:2] != "rw" or (len(f) > 5 and f[5] in ("[vvar]", "[vvar_vclock]", "[vsyscall]")):
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if hi - lo > 1 << 30:
                continue
            pagemap.seek(lo // page * 8)
            bits = struct.unpack("%dQ" % ((hi - lo) // page), pagemap.read((hi - lo) // page * 8))
            for i, v in enumerate(bits):
                if not v >> 63:
                    continue  # not present: never written, nothing of anyone's
                try:
                    mem.seek(lo + i * page)
                    out.append(mem.read(page))
                except OSError:
                    pass  # a guard page, a region that went away
    return b"".join(out)


def pool_inits(server_pid):
    return {p for p in children(server_pid) if comm(p) == "agentjail-init"}


def test_a_refilled_sandboxs_init_holds_no_earlier_request(server):
    """A pool's sandboxes get their init from the pool's zygotes, forked
    before the server took a request: a sandbox prepared while a run is in
    flight holds nothing of it (init used to be a fork of the server at that
    moment: the request's code, another tenant's, in its memory). The
    control: the server's own memory holds the run's code meanwhile."""
    s = server(extra={"pool_size": 4})

    def ready(tenant="a"):
        return s.metrics().get('agentjail_tenant_pool_ready{tenant="%s"}' % tenant)

    # Every pool made (each holds a copy of the server's memory of then).
    assert wait_for(lambda: ready("a") == 4 and ready("b") == 4, 60), s.metrics()
    before = pool_inits(s.proc.pid)
    tag, ids = start_sleeps(s, 3)  # below half full: the pool refills while they run
    marker = tag.encode()  # the requests' argv: in no memory before them
    assert s.metrics()['agentjail_pool_runs_total{kind="warm"}'] >= 3, s.metrics()
    assert wait_for(lambda: ready() == 4, 60), s.metrics()
    running = {int(open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[1]) for p in pids_with(tag)}
    fresh = pool_inits(s.proc.pid) - before - running
    assert fresh, (before, running, pool_inits(s.proc.pid))  # the refill's
    assert marker in writable_memory(s.proc.pid), "the control: the server holds the requests"
    for pid in fresh:
        assert marker not in writable_memory(pid), "init %d holds a copy of a request" % pid
    delete_runs(s, tag, ids)


def test_a_policy_too_large_for_a_zygote_message_still_runs_warm(server, tmp):
    """What init needs of a sandbox goes to the pool's zygote in one message
    of at most 192 KiB. A policy whose environment alone is larger (an
    interpreter's parked sandbox has it before any request; here without a
    template) is cloned by the server itself,
    as before there were zygotes: its warm runs are the same (the control:
    every variable arrives whole)."""
    pol = os.path.join(tmp, "big-env.json")
    big = {"V%03d" % i: "%03d" % i + "x" * 1200 for i in range(200)}
    with open(pol, "w") as f:
        json.dump({"version": 1, "interpreter": {"template": False}, "environment": {"set": big}}, f)
    s = server(extra={"policy": pol, "pool_size": 0,
                      "interpreters": [{"language": "python", "preload": [], "pool": 2}]})
    code = "import os; print(sum(1 for k in os.environ if k[0] == 'V'), len(os.environ['V199']), os.environ['V007'][:3])"
    for _ in range(3):
        status, _, j = s.run({"language": "python", "code": code})
        assert status == 200 and j["stdout"] == "200 1203 007\n", j
    m = s.metrics()
    assert m.get('agentjail_interp_runs_total{kind="warm"}', 0) >= 1, (m, s.err())


def test_zygotes_killed_from_outside_cost_only_speed(server):
    """The pools' zygotes can die (an admin's kill, the OOM killer): runs go
    on, their sandboxes' inits cloned by the server again, and the dead
    zygotes are reaped, not left as zombies."""
    s = server(extra={"pool_size": 2})

    def ready(tenant):
        return s.metrics().get('agentjail_tenant_pool_ready{tenant="%s"}' % tenant)

    def zygotes():
        return [p for p in children(s.proc.pid) if comm(p) == "aj-zygote"]

    assert wait_for(lambda: ready("a") == 2 and ready("b") == 2, 60), s.metrics()
    assert zygotes()  # the control: the pools have them
    for pid in zygotes():
        os.kill(pid, signal.SIGKILL)
    for i in range(6):
        for tenant in ("a", "b"):
            status, _, j = s.run({"argv": ["echo", tenant, str(i)]}, tenant=tenant)
            assert status == 200 and j["status"] == "ok" and j["stdout"] == "%s %d\n" % (tenant, i), j
    assert wait_for(lambda: not zygotes(), 30), [(p, comm(p)) for p in zygotes()]
    m = s.metrics()
    assert m['agentjail_pool_runs_total{kind="warm"}'] >= 2, m


def test_escape_attempt_is_refused_and_counted(server):
    s = server()
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "r = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER: regain capabilities
            "print(r, os.strerror(ctypes.get_errno()))\n")
    status, _, j = s.run({"language": "python", "code": code})
    assert status == 200, j
    assert j["stdout"].startswith("-1 "), j  # refused
    assert j["result"]["events"]["escape_attempt"] >= 1, j["result"]
    assert j["result"]["escape_attempted"] is True
    n = j["result"]["events"]["escape_attempt"]
    # The events themselves are in the record, as the library wrote them.
    esc = [e for e in j["events"] if e["type"] == "escape_attempt"]
    assert len(esc) == n and esc[0]["syscall"] == "unshare" and esc[0]["sandbox_id"] == j["result"]["sandbox_id"]
    # Streamed too, as they happen, and replayed from the store.
    status, _, ja = s.run({"language": "python", "code": "import time\n" + code + "time.sleep(0.5)\n",
                           "wait": False})
    status, events = read_sse(s, ja["id"])
    types = [e[0] for e in events]
    assert "event" in types and types.index("event") < types.index("exit"), types
    assert events[types.index("event")][1]["syscall"] == "unshare"
    status, replay = read_sse(s, ja["id"])
    assert [e[0] for e in replay if e[0] == "event"] == [t for t in types if t == "event"]
    n += sum(t == "event" for t in types)
    # No events file outlives its run.
    assert os.listdir(os.path.join(os.path.dirname(s.store), "events")) == []
    # At most 100 events are kept per run, and the record says so.
    status, _, j = s.run({"language": "python", "code": code.replace("r = libc.unshare", "for _ in range(150): r = libc.unshare")})
    assert status == 200 and len(j["events"]) == 100 and j["events_truncated"] is True, len(j["events"])
    assert j["result"]["events"]["escape_attempt"] == 150
    n += 150
    # Positive control: the same interpreter without the call raises nothing.
    status, _, j = s.run({"language": "python", "code": "import ctypes; print(0)"}, token=TOKEN_B)
    assert j["result"]["events"]["escape_attempt"] == 0 and j["status"] == "ok", j
    assert j["events"] == [] and j["events_truncated"] is False
    m = s.metrics()
    assert m["agentjail_escape_attempts_total"] == n
    assert m['agentjail_tenant_escape_attempts_total{tenant="a"}'] == n
    assert m['agentjail_tenant_escape_attempts_total{tenant="b"}'] == 0
    assert m['agentjail_tenant_runs_finished_total{tenant="b"}'] == 1


def test_timeout_ends_the_run_and_only_tightens(server):
    s = server(extra={"max_timeout": 20})
    t0 = time.monotonic()
    status, _, j = s.run({"argv": ["sleep", "30"], "timeout": 1})
    assert status == 200, j
    assert j["status"] == "timeout", j
    assert time.monotonic() - t0 < 10
    # A timeout above the server's is refused, naming the field; nothing ran.
    status, _, j = s.run({"argv": ["true"], "timeout": 21})
    assert status == 400 and j["error"].startswith("timeout:"), j
    # Positive control: at the bound it runs.
    status, _, j = s.run({"argv": ["true"], "timeout": 20})
    assert status == 200 and j["status"] == "ok", j


def test_output_is_capped_with_a_truncation_flag(server):
    s = server(extra={"max_output_bytes": 1000})
    status, _, j = s.run({"language": "python", "code": "print('x' * 5000)"})
    assert status == 200, j
    assert j["stdout"] == "x" * 1000 and j["stdout_truncated"] is True and j["stdout_bytes"] == 5001
    assert j["stderr_truncated"] is False
    # Positive control: under the cap nothing is cut.
    status, _, j = s.run({"language": "python", "code": "print('x' * 500)"})
    assert j["stdout"] == "x" * 500 + "\n" and j["stdout_truncated"] is False


def test_over_the_concurrency_cap_is_429(server):
    s = server(extra={"max_runs": 3, "max_runs_per_tenant": 2})
    tag = new_tag()
    ids = []
    for _ in range(2):
        status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
        assert status == 202, j
        ids.append(j["id"])
    status, resp, j = s.run({"argv": ["true"]})
    assert status == 429 and resp.getheader("Retry-After") == "1" and "too many" in j["error"], j
    # Another tenant has its own cap; then the server's total (3) is full.
    status, _, jb = s.run({"argv": ["sleep", tag], "wait": False}, token=TOKEN_B)
    assert status == 202, jb
    status, _, j = s.run({"argv": ["true"]}, token=TOKEN_B)
    assert status == 429, j
    assert s.metrics()["agentjail_http_429_total"] == 2
    # Accepted runs start as the runner thread gets to them.
    assert wait_for(lambda: s.metrics()["agentjail_runs_running"] == 3, 10), s.metrics()
    for rid in ids:
        assert s.request("DELETE", "/v1/runs/" + rid)[0] == 200
    assert s.request("DELETE", "/v1/runs/" + jb["id"], token=TOKEN_B)[0] == 200
    # Positive control: with the runs gone there is room again.
    status, _, j = s.run({"argv": ["true"]})
    assert status == 200 and j["status"] == "ok", j
    assert not pids_with(tag)
    # The refused requests left no record; the four accepted runs did.
    import sqlite3
    db = sqlite3.connect("file:%s?mode=ro" % s.store, uri=True)
    rows = db.execute("SELECT status FROM runs ORDER BY created_ms").fetchall()
    db.close()
    assert [r[0] for r in rows] == ["signaled", "signaled", "signaled", "ok"], rows


def test_bad_requests_are_400_with_the_field(server):
    s = server(extra={"max_body_bytes": 4096})
    cases = [
        (b"{not json", "body:1:"),
        (b'{"language": "python", "code": "1", "bogus": {}}', "unknown field 'bogus'"),
        (b'{"argv": "ls"}', "argv:"),
        (b'{"argv": []}', "argv:"),
        (b'{"argv": ["ls", 3]}', "argv[1]"),
        (b'{"language": "cobol", "code": "x"}', "language:"),
        (b'{"language": "python"}', "code:"),
        (b'{"argv": ["ls"], "code": "x", "language": "sh"}', "argv:"),
        (b'{"argv": ["ls"], "timeout": "5"}', "timeout:"),
        (b'{"argv": ["ls"], "wait": 1}', "wait:"),
        (b'{"argv": ["ls"], "env": {"A=B": "x"}}', "env.A=B"),
        (b'[1]', "JSON object"),
    ]
    for raw, want in cases:
        status, _, j = s.request("POST", "/v1/runs", raw=raw)
        assert status == 400 and want in j["error"], (raw, j)
    # What the library refuses in a request is the client's error too.
    status, _, j = s.run({"argv": ["true"], "env": {"BAD NAME": "x"}})
    assert status == 400 and j["error"].startswith("request: environment"), j
    status, _, j = s.request("POST", "/v1/runs", raw=b'{"argv": ["true"], "stdin": "' + b"x" * 8000 + b'"}')
    assert status == 413 and "larger" in j["error"], j
    # The same without a Content-Length (chunked): read to its end, then 413.
    c = s.conn()
    c.putrequest("POST", "/v1/runs")
    c.putheader("Authorization", "Bearer " + TOKEN_A)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for _ in range(4):
        chunk = b"x" * 3000
        c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    assert resp.status == 413 and "larger" in json.loads(resp.read())["error"]
    c.close()
    status, _, j = s.request("GET", "/v1/nothing")
    assert status == 404 and "error" in j
    status, _, j = s.request("PUT", "/v1/runs")
    assert status == 405 and "error" in j
    # Positive control: a well-formed request of the same shape runs.
    status, _, j = s.request("POST", "/v1/runs", raw=b'{"argv": ["true"], "wait": true, "timeout": 5}')
    assert status == 200 and j["status"] == "ok", j
    # The refused environment did reach the library (a run that ended at setup).
    assert s.metrics()['agentjail_runs_finished_total{status="setup_error"}'] == 1
    assert s.metrics()['agentjail_runs_finished_total{status="ok"}'] == 1


def test_tenants_see_only_their_own_runs(server):
    s = server()
    status, _, j = s.run({"argv": ["echo", "a's"]})
    assert status == 200
    rid = j["id"]
    assert s.request("GET", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    assert s.request("DELETE", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    status, _, j = s.request("GET", "/v1/runs/" + rid)  # positive control
    assert status == 200 and j["stdout"] == "a's\n"
    # A live one too: B can neither see nor kill it.
    tag = new_tag()
    status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
    rid = j["id"]
    assert wait_for(lambda: pids_with(tag), 10)
    assert s.request("GET", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    assert s.request("DELETE", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    assert pids_with(tag), "tenant B's DELETE killed tenant A's run"
    assert s.request("DELETE", "/v1/runs/" + rid)[0] == 200
    assert not pids_with(tag)
    assert s.request("GET", "/v1/runs/" + "0" * 32)[0] == 404


def test_record_survives_a_restart_and_the_store_is_private(server, tmp):
    s = server()
    status, _, j = s.run({"language": "sh", "code": "echo kept"})
    assert status == 200
    assert s.stop() == 0
    st = os.stat(s.store)
    assert st.st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(s.store)).st_mode & 0o777 == 0o700
    s2 = server()
    status, _, j2 = s2.request("GET", "/v1/runs/" + j["id"])
    assert status == 200, j2
    assert j2 == j
    assert s2.request("GET", "/v1/runs/" + j["id"], token=TOKEN_B)[0] == 404


def test_sigterm_kills_runs_and_leaves_nothing(server):
    s = server()
    tag = new_tag()
    status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    assert wait_for(lambda: pids_with(tag), 10)
    assert cgroup_dirs_of(s.proc.pid), "positive control: a live run has a cgroup of the server's"
    pid = s.proc.pid
    assert s.stop() == 0, s.err()
    assert not pids_with(tag)
    assert not cgroup_dirs_of(pid), cgroup_dirs_of(pid)
    # The killed run was recorded as it ended.
    s2 = server()
    status, _, j2 = s2.request("GET", "/v1/runs/" + j["id"])
    assert status == 200 and j2["status"] == "signaled" and j2["result"]["signal"] == signal.SIGTERM, j2


def test_unix_socket(server, tmp):
    path = os.path.join(tmp, "aj.sock")
    s = server(listen="unix:" + path)
    assert os.stat(path).st_mode & 0o077 == 0, "the socket is the server owner's alone"
    status, _, j = s.run({"language": "sh", "code": "echo over unix"})
    assert status == 200 and j["stdout"] == "over unix\n", j
    assert s.run({"language": "sh", "code": "true"}, token="nope")[0] == 401
    assert s.stop() == 0
    assert not os.path.exists(path)


@pytest.mark.parametrize("text, where", [
    ('{"listen": "127.0.0.1:0", "store": "/tmp/x.db", "tenants": {"a": {"token_sha256": "%s"}},\n'
     '  "colour": "blue"}' % sha("t"), ":2:3: colour: unknown key"),
    ('{"listen": "127.0.0.1:0",\n "store": "/tmp/x.db",\n "tenants": {"a": {"token_sha256": 5}}}',
     ":3:20: tenants.a.token_sha256: must be a string of 64 hex digits"),
    ('{"listen": "127.0.0.1:0", "store": "/tmp/x.db", "max_runs": "4",\n'
     ' "tenants": {"a": {"token_sha256": "%s"}}}' % sha("t"), ":1:49: max_runs: must be an integer"),
    ('{"listen": "127.0.0.1:0", "store": "/tmp/x.db",\n "tenants": {"a": {"token_sha256": "%s", "x": 1}}}'
     % sha("t"), ":2:104: tenants.a.x: unknown key"),
    ('{"listen": "127.0.0.1:0", "store": "/tmp/x.db", \n "tenants": {}', ":2:14: "),
    ('{"listen": "127.0.0.1:0", "store": "/tmp/x.db", "runner_threads": 65,\n'
     ' "tenants": {"a": {"token_sha256": "%s"}}}' % sha("t"), ":1:49: runner_threads: must be between 0 and 64"),
    ('{"store": "/tmp/x.db", "tenants": {"a\\nb": {"token_sha256": "%s"}}}' % sha("t"),
     ":1:24: tenants.a?b: a tenant name"),  # the key's escape is not matched: "tenants" it is
])
def test_bad_config_is_one_located_line_and_exit_2(tmp, text, where):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentjail serve: " + path + ":"), p.stderr
    assert where in lines[0], lines[0]


def test_good_config_starts(server):
    """Positive control of the config errors: the minimal form of the issue."""
    s = server()
    assert s.metrics()["agentjail_runs_started_total"] == 0


def runner_threads_of(pid):
    names = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return sorted(n for n in names if n.startswith("aj-runner-"))


def test_runner_threads_start_and_kill_each_their_own_runs(server):
    """runner_threads lanes (runner.c): runs in flight together go to
    different threads, each starting its runs and owning their handles;
    a DELETE reaches the thread that owns the run. Cold runs (no pool), so
    each lane clones its sandboxes itself."""
    s = server(extra={"runner_threads": 3, "pool_size": 0, "max_runs": 6},
               tenants={"a": {"max_runs": 6}})
    assert runner_threads_of(s.proc.pid) == ["aj-runner-0", "aj-runner-1", "aj-runner-2"]
    assert s.metrics()["agentjail_runner_threads"] == 3
    tag, ids = start_sleeps(s, 6)
    # Each sandbox's init is cloned by the thread that started its run;
    # /proc shows only the server's pid as its parent, so what is checked
    # here is that runs in flight on three lanes all start and all die.
    delete_runs(s, tag, ids)
    # Positive control: the lanes still run what comes next.
    status, _, j = s.run({"language": "sh", "code": "echo after"})
    assert status == 200 and j["stdout"] == "after\n", j
    m = s.metrics()
    assert m['agentjail_runs_finished_total{status="signaled"}'] == 6 and m["agentjail_runs_running"] == 0, m
    assert s.stop() == 0, s.err()
    # The default: one per CPU (at most 8).
    s2 = server(extra={"pool_size": 0})
    want = min(max(os.cpu_count() or 1, 1), 8)
    assert len(runner_threads_of(s2.proc.pid)) == want and s2.metrics()["agentjail_runner_threads"] == want


def test_sigkilled_server_leaves_its_runs_lost_not_vanished(server):
    s = server()
    tag = new_tag()
    status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    assert wait_for(lambda: pids_with(tag), 10)
    dead = s.proc.pid
    assert cgroup_dirs_of(dead), "positive control: the live run has a cgroup of the server's"
    events_dir = os.path.join(os.path.dirname(s.store), "events")
    assert os.listdir(events_dir) == [j["id"] + ".jsonl"]  # the live run's events file
    s.stop(sig=signal.SIGKILL)
    # The sandbox dies with its supervisor thread (parent-death signal).
    assert wait_for(lambda: not pids_with(tag), 10), "a sandbox outlived its SIGKILLed server"
    s2 = server()
    assert os.listdir(events_dir) == [], "the killed server's events files are removed at start"
    status, _, j2 = s2.request("GET", "/v1/runs/" + j["id"])
    assert status == 200 and j2["status"] == "lost" and "stopped" in j2["error"], j2
    # Positive control: a run that ended before the kill keeps its status.
    status, _, j3 = s2.run({"argv": ["true"]})
    s2.stop(sig=signal.SIGKILL)
    s3 = server()
    assert s3.request("GET", "/v1/runs/" + j3["id"])[2]["status"] == "ok"
    # Its cgroups are gone too (the library removes a dead owner's).
    assert wait_for(lambda: not cgroup_dirs_of(dead), 10), cgroup_dirs_of(dead)


def read_sse(s, rid, token=TOKEN_A):
    """The events of GET /v1/runs/{id}/stream: [(type, data, monotonic time)]."""
    c = s.conn()
    c.request("GET", "/v1/runs/%s/stream" % rid, headers={"Authorization": "Bearer " + token})
    resp = c.getresponse()
    if resp.status != 200:
        body = json.loads(resp.read())
        c.close()
        return resp.status, body
    assert resp.getheader("Content-Type") == "text/event-stream"
    events, typ = [], None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            typ = line[7:]
        elif line.startswith("data: "):
            events.append((typ, json.loads(line[6:]), time.monotonic()))
    c.close()
    return 200, events


def test_stream_sends_output_as_it_comes_then_the_exit(server):
    s = server()
    status, _, j = s.run({"language": "bash", "wait": False,
                          "code": "for i in 1 2 3; do echo $i; sleep 0.4; done; echo é >&2"})
    assert status == 202
    status, events = read_sse(s, j["id"])
    assert status == 200, events
    types = [e[0] for e in events]
    assert types[0] == "start" and types[-1] == "exit" and types.count("exit") == 1, types
    assert events[0][1]["id"] == j["id"]
    out = "".join(e[1]["data"] for e in events if e[0] == "stdout")
    err = "".join(e[1]["data"] for e in events if e[0] == "stderr")
    assert (out, err) == ("1\n2\n3\n", "é\n")
    exit_ev = events[-1][1]
    assert exit_ev["status"] == "ok" and exit_ev["stdout"] == out and exit_ev["result"]["status"] == "ok"
    # Streamed, not buffered to the end: the first line came well before the exit.
    first_out = next(e[2] for e in events if e[0] == "stdout")
    assert events[-1][2] - first_out > 0.6, events
    # A finished run replays the same from the store; another tenant gets 404.
    status, replay = read_sse(s, j["id"])
    assert [e[0] for e in replay] == ["start", "stdout", "stderr", "exit"]
    assert replay[1][1]["data"] == out and replay[2][1]["data"] == err and replay[3][1] == exit_ev
    status, body = read_sse(s, j["id"], token=TOKEN_B)
    assert status == 404 and "error" in body
    status, body = read_sse(s, j["id"], token="nope")
    assert status == 401


def test_sigterm_ends_an_open_stream_with_the_exit(server):
    import threading
    s = server()
    tag = new_tag()
    status, _, j = s.run({"argv": ["sh", "-c", "echo up; exec sleep " + tag], "wait": False})
    assert status == 202
    got = {}
    t = threading.Thread(target=lambda: got.update(r=read_sse(s, j["id"])))
    t.start()
    assert wait_for(lambda: pids_with(tag), 10)
    assert s.stop() == 0, s.err()
    t.join(30)
    assert not t.is_alive()
    status, events = got["r"]
    assert [e[0] for e in events] == ["start", "stdout", "exit"], events
    assert events[-1][1]["status"] == "signaled" and events[-1][1]["result"]["signal"] == signal.SIGTERM
    assert not pids_with(tag)


@pytest.mark.parametrize("pool_size", [0, 2])
def test_bounded_load_leaves_no_fd_or_process_behind(server, pool_size):
    """40 runs from 4 loopback clients (the per-tenant cap): every one
    answers ok, and the server holds no new fd afterwards (with a warm
    pool, parked sandboxes hold fds of their own that change with each
    refill: there the count, once refilled, must not grow)."""
    from concurrent.futures import ThreadPoolExecutor
    s = server(extra={"pool_size": pool_size})
    # The store, the library's threads and anything either opens once.
    assert s.run({"language": "sh", "code": "echo warm"})[0] == 200
    assert s.run({"language": "python", "code": "print('warm')"})[0] == 200

    def fds():
        out = {}
        for fd in os.listdir("/proc/%d/fd" % s.proc.pid):
            try:
                out[int(fd)] = os.readlink("/proc/%d/fd/%s" % (s.proc.pid, fd))
            except OSError:
                pass
        return out

    def settled():
        """The pool full again (its gauge, read live) and the count steady: a refill under
        way holds a sandbox's fds more, which two equal samples alone did not rule out (CI's
        ASan pass measured mid-refill once)."""
        if pool_size:
            def full():
                ready = [v for k, v in s.metrics().items() if k.startswith("agentjail_tenant_pool_ready")]
                return ready and all(v == pool_size for v in ready)
            assert wait_for(full, 30), s.metrics()
        now = fds()
        for _ in range(20):
            time.sleep(0.25)
            again = fds()
            if len(again) == len(now):
                break
            now = again
        return now

    before = settled()

    def client(i):
        out = []
        for k in range(10):
            n = i * 100 + k
            status, _, j = s.run({"language": "python", "code": "print(%d)" % n} if k % 2 else
                                 {"language": "sh", "code": "echo %d" % n})
            out.append((status, j.get("status"), j.get("stdout")))
        return out

    with ThreadPoolExecutor(4) as ex:  # (bounded by each request's own timeout, never by the clock)
        results = [r for rs in ex.map(client, range(4)) for r in rs]
    assert len(results) == 40
    assert all(st == 200 and status == "ok" for st, status, _ in results), results
    assert sorted(int(out) for _, _, out in results) == sorted(i * 100 + k for i in range(4) for k in range(10))
    # No fd the server did not hold before (the warm-up's own connection
    # may still have been open then: fewer is fine).
    def grown():
        now = fds()
        if pool_size:
            return len(now) > len(before)
        return set(now.items()) - set(before.items()) or len(now) > len(before)

    if pool_size:
        settled()
    if not wait_for(lambda: not grown(), 10):
        after = fds()
        pytest.fail("server fds changed: %r" % {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                                                 if before.get(k) != after.get(k)})
    m = s.metrics()
    assert m["agentjail_runs_started_total"] == 42 and m['agentjail_runs_finished_total{status="ok"}'] == 42
    assert m["agentjail_runs_running"] == 0
    buckets = [v for k, v in m.items() if k.startswith("agentjail_run_duration_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == m["agentjail_run_duration_seconds_count"] == 42, m
    assert 0 < m["agentjail_run_duration_seconds_sum"] < 42 * 30
    if pool_size:
        assert m['agentjail_pool_runs_total{kind="warm"}'] >= 1, m
        assert m['agentjail_pool_runs_total{kind="warm"}'] + m['agentjail_pool_runs_total{kind="cold"}'] == 42, m
        # The gauge is read when asked: the pool refills with no run to
        # report it (it used to be the count as of the last run's start).
        def full():
            m = s.metrics()
            ready = [v for k, v in m.items() if k.startswith("agentjail_tenant_pool_ready")]
            return ready and all(v == pool_size for v in ready) and m["agentjail_pool_ready"] == sum(ready)
        assert wait_for(full, 30), {k: v for k, v in s.metrics().items() if "pool" in k}
    else:
        assert not any(k.startswith("agentjail_pool") for k in m), m


def test_config_policy_file_bounds_the_timeout_and_bad_ones_stop_the_server(server, tmp):
    pol = os.path.join(tmp, "policy.json")
    with open(pol, "w") as f:
        f.write('{"version": 1,\n "limits": {"timeout": "5s", "colour": 1}}')
    cfg = os.path.join(tmp, "c.json")
    with open(cfg, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "store": os.path.join(tmp, "r.db"), "policy": pol,
                   "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f)
    p = subprocess.run([AJ_BIN, "serve", "--config", cfg], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and (pol + ":2:") in p.stderr and "colour" in p.stderr, p.stderr
    # Positive control: the policy without the bad key serves, and its
    # tighter timeout is the bound requests are held to.
    with open(pol, "w") as f:
        f.write('{"version": 1, "limits": {"timeout": "5s"}}')
    s = server(extra={"policy": pol})
    status, _, j = s.run({"argv": ["true"], "timeout": 6})
    assert status == 400 and "(5 s)" in j["error"], j
    status, _, j = s.run({"argv": ["sleep", "10"]})
    assert status == 200 and j["status"] == "timeout" and j["result"]["wall_ms"] < 9000, j


def test_healthz_and_readyz(server):
    import sqlite3
    s = server()
    assert s.request("GET", "/healthz", token=None)[:3:2] == (200, {"status": "ok"})
    # Ready once the warm pool is made and filled (503 "warming up" before).
    assert wait_for(lambda: s.request("GET", "/readyz", token=None)[0] == 200, 60)
    assert s.request("GET", "/readyz", token=None)[:3:2] == (200, {"status": "ready"})
    # Another process holding the store's write lock: not ready (after the
    # store's 5 s busy timeout), ready again once it lets go.
    db = sqlite3.connect(s.store, timeout=1)
    db.execute("BEGIN IMMEDIATE")
    status, _, j = s.request("GET", "/readyz", token=None, timeout=20)
    assert status == 503 and "store" in j["error"], j
    db.rollback()
    db.close()
    assert s.request("GET", "/readyz", token=None)[0] == 200
    assert s.request("POST", "/healthz", token=None)[0] == 405


def test_rate_limit_per_tenant_is_429_with_retry_after(server):
    s = server(extra={"max_runs_per_minute": 3})
    for _ in range(3):
        status, _, j = s.run({"argv": ["true"]})
        assert status == 200 and j["status"] == "ok", j
    status, resp, j = s.run({"argv": ["true"]})
    assert status == 429 and "rate" in j["error"], j
    assert 1 <= int(resp.getheader("Retry-After")) <= 21  # one run every 20 s
    # The other tenant has its own bucket.
    status, _, j = s.run({"argv": ["true"]}, token=TOKEN_B)
    assert status == 200 and j["status"] == "ok", j
    assert s.metrics()["agentjail_http_429_total"] == 1


def test_clients_that_leave_mid_upload_or_mid_run_harm_nothing(server):
    s = server()
    body = json.dumps({"argv": ["true"]}).encode()
    # Mid-upload: half a body, then gone.
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) +
                  body[:len(body) // 2])
    # Mid-run: the request is whole, the client leaves while it runs; the
    # run still ends and is recorded, its sandbox gone.
    tag = new_tag()
    body = json.dumps({"argv": ["sh", "-c", "sleep 1 && exec echo " + tag]}).encode()
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.3)
    import sqlite3

    def recorded():
        db = sqlite3.connect("file:%s?mode=ro" % s.store, uri=True)
        rows = db.execute("SELECT status, stdout FROM runs").fetchall()
        db.close()
        return rows
    assert wait_for(lambda: recorded() == [("ok", (tag + "\n").encode())], 15), recorded()
    assert wait_for(lambda: s.metrics()["agentjail_runs_running"] == 0, 5)
    # The server still serves.
    status, _, j = s.run({"language": "sh", "code": "echo still"})
    assert status == 200 and j["stdout"] == "still\n"


def test_retention_removes_old_records_at_start(server):
    import sqlite3
    s = server()
    old = s.run({"language": "sh", "code": "echo old"})[2]["id"]
    new = s.run({"language": "sh", "code": "echo new"})[2]["id"]
    assert s.stop() == 0
    db = sqlite3.connect(s.store)
    db.execute("UPDATE runs SET ended_ms = ended_ms - 40 * 86400 * 1000 WHERE id = ?", (old,))
    db.commit()
    db.close()
    # Without retention nothing goes (positive control) ...
    s2 = server()
    assert s2.request("GET", "/v1/runs/" + old)[0] == 200
    assert s2.stop() == 0
    # ... with 30 days the 40-day-old record goes, the recent one stays.
    s3 = server(extra={"retention_days": 30})
    assert s3.request("GET", "/v1/runs/" + old)[0] == 404
    status, _, j = s3.request("GET", "/v1/runs/" + new)
    assert status == 200 and j["stdout"] == "new\n"
    assert "removed 1 records older than 30 days" in s3.err()


def test_store_in_a_directory_others_can_write_is_refused(server, tmp):
    # The store and its events are reopened by name: a directory another
    # user can write could swap them. Refused before anything starts.
    shared = os.path.join(tmp, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    cfg = os.path.join(tmp, "shared.json")
    with open(cfg, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "store": os.path.join(shared, "runs.db"),
                   "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f)
    p = subprocess.run([AJ_BIN, "serve", "--config", cfg], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "only it can write" in p.stderr, p
    assert not os.path.exists(os.path.join(shared, "runs.db"))
    # Control: the same directory, ours alone, works.
    os.chmod(shared, 0o700)
    s = server(store=os.path.join(shared, "runs.db"))
    assert s.request("GET", "/healthz")[0] == 200


def status_of(pid):
    """/proc/PID/status as a dict, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
    except (OSError, ValueError):
        return None


def test_dead_templates_are_kept_while_their_children_run_then_freed(server):
    """A warm interpreter's run goes on while its template, and each template started after it,
    is killed: more deaths than the pool once kept dead templates for (4; the oldest one was
    freed then, and with its sandbox the reaper of the run still going). A dead template is
    freed (reaped, its sandbox torn down) once nothing it forked is left, not at the pool's end."""
    if not IS_ROOT:
        pytest.skip("templates are root mode's")
    s = server(extra={"pool_size": 0, "interpreters": [{"language": "python", "preload": ["json"], "pool": 1}],
                      "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}})  # one tenant: one template
    pid = s.proc.pid

    def pythons():
        return [k for k in children(pid) if comm(k) == "python3"]

    def template(not_this=None):
        def find():  # a dead one stays a zombie until the pool frees it
            kids = [k for k in pythons() if k != not_this and alive(k)]
            return kids[0] if kids else None
        t = wait_for(find, 60)
        assert t, "no template under the server %d" % pid
        return t

    tmpl = template()
    # The long run waits for SIGUSR1, which it catches (that is how the test finds it), then
    # ends by SIGTERM: no end word of its own (interp_boot.py), so its reaper reports it.
    code = ("import os, signal\n"
            "signal.signal(signal.SIGUSR1, lambda *a: os.kill(os.getpid(), signal.SIGTERM))\n"
            "while True:\n    signal.pause()\n")
    status, _, j = s.run({"language": "python", "code": code, "wait": False})
    assert status == 202, j
    long_id = j["id"]

    def long_status():
        status, _, j = s.request("GET", "/v1/runs/" + long_id)
        assert status == 200, j
        return j["status"]

    def waiting():
        """python3 processes in this server's runs' groups that catch SIGUSR1."""
        found = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            st = status_of(int(p))
            if not st or st["Name"].strip() != "python3" or not int(st["SigCgt"], 16) & (1 << (signal.SIGUSR1 - 1)):
                continue
            try:
                with open("/proc/%s/cgroup" % p) as f:
                    if "/%d." % pid in f.read():
                        found.append(int(p))
            except OSError:
                pass
        return found

    def groups():
        """The sandboxes' groups of this server, each once (v1 has one directory per controller)."""
        return {os.path.basename(d) for d in cgroup_dirs_of(pid)}

    assert wait_for(lambda: len(waiting()) == 1, 30), (long_status(), waiting())
    payload = waiting()[0]
    reaper = int(status_of(payload)["PPid"])
    assert comm(reaper) == "python3", reaper
    for i in range(6):
        os.kill(tmpl, signal.SIGKILL)
        assert wait_for(lambda: not alive(tmpl), 10)
        # A run takes the parked child of the dead template; its refill starts a new one.
        status, _, j = s.run({"language": "python", "code": "print(%d)" % i})
        assert status == 200 and j["status"] == "ok" and j["stdout"] == "%d\n" % i, j
        tmpl = template(not_this=tmpl)
    # Still running, its reaper (a process of the first template's sandbox) with it.
    assert long_status() == "running"
    assert alive(reaper) and int(status_of(payload)["PPid"]) == reaper
    # (The positive control of the groups' count below: the first template's sandbox and the
    # long run's are there too, beside the live template's and its parked child's.)
    assert len(groups()) >= 4, groups()
    os.kill(payload, signal.SIGUSR1)
    assert wait_for(lambda: long_status() not in ("queued", "running"), 60), long_status()
    status, _, j = s.request("GET", "/v1/runs/" + long_id)
    assert status == 200 and j["status"] == "signaled" and j["result"]["signal"] == signal.SIGTERM, j
    # A refill after that frees every dead template (the reaper may still be exiting at the
    # first): none is left, not even as a zombie; the live one (the positive control of the
    # count) stays.
    for i in range(10):
        status, _, j = s.run({"language": "python", "code": "print('last')"})
        assert status == 200 and j["stdout"] == "last\n", j
        if wait_for(lambda: pythons() == [tmpl], 2):
            break
    assert pythons() == [tmpl], [(k, (status_of(k) or {}).get("State")) for k in pythons()]
    assert not alive(reaper)
    # Their sandboxes too: the groups left are the live template's and its parked child's.
    assert wait_for(lambda: len(groups()) == 2, 30), groups()


def test_warm_interpreters_for_python_runs(server, tmp):
    """"interpreters": python runs of a tenant take a parked interpreter with
    the preload imported (docs/interpreters.md); a tenant's own [] turns them
    off (the control: a bare python3, nothing imported)."""
    s = server(extra={"pool_size": 0, "interpreters": [{"language": "python", "preload": ["json"], "pool": 1}],
                      "tenants": {"a": {"token_sha256": sha(TOKEN_A)},
                                  "b": {"token_sha256": sha(TOKEN_B), "interpreters": []}}})
    code = "import sys; print('json' in sys.modules, sys.argv); sys.exit(3)"
    for _ in range(2):
        status, _, j = s.run({"language": "python", "code": code})
        assert status == 200 and j["stdout"] == "True ['-c']\n" and j["exit_code"] == 3, j
        assert j["argv"][:2] == ["python3", "-c"] and j["result"]["layers"]["seccomp"] is True, j
    status, _, j = s.run({"language": "python", "code": code}, token=TOKEN_B)
    assert status == 200 and j["stdout"] == "False ['-c']\n" and j["exit_code"] == 3, j
    # The interpreters' pool in the metrics: a's two python runs (b's went
    # elsewhere), and the parked one counted again once refilled.
    m = s.metrics()
    assert m['agentjail_interp_runs_total{kind="warm"}'] + m['agentjail_interp_runs_total{kind="cold"}'] == 2, m
    assert m['agentjail_interp_runs_total{kind="warm"}'] >= 1, m
    assert wait_for(lambda: s.metrics().get('agentjail_tenant_interp_ready{tenant="a"}') == 1, 30), s.metrics()
    assert 'agentjail_tenant_interp_ready{tenant="b"}' not in m, m
    status, _, j = s.run({"language": "bash", "code": "echo plain"})
    assert status == 200 and j["stdout"] == "plain\n", j
    # Bad entries stop the server with the key named.
    for interp, where in [([{"language": "ruby"}], "interpreters[0].language"),
                          ([{"language": "python", "preload": ["a..b"]}], "interpreters[0].preload[0]"),
                          ([{"language": "python", "pool": 65}], "interpreters[0].pool")]:
        path = os.path.join(tmp, "bad-interp.json")
        with open(path, "w") as f:
            json.dump({"store": os.path.join(tmp, "x.db"), "interpreters": interp,
                       "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f)
        p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and where in p.stderr, (interp, p.stderr)


def test_the_interpreters_warm_up_cell_runs_before_they_park(server, tmp):
    """"interpreters": [{"warmup": CODE}]: each parked interpreter ran the
    cell after the preload (what it changed in a module, every run sees:
    docs/interpreters.md); it replaces the tenant policy's own. The control:
    tenant b's entry without one."""
    cell = "import json\njson.aj_warmed = getattr(json, 'aj_warmed', 0) + 41\naj_cell_name = 1\n"
    own = os.path.join(tmp, "own-warmup.json")
    with open(own, "w") as f:
        json.dump({"version": 1, "interpreter": {"language": "python",
                                                 "warmup": "import json\njson.aj_warmed = 7\n"}}, f)
    entry = {"language": "python", "preload": ["json"], "pool": 1}
    TOKEN_C, TOKEN_D = "token-of-tenant-c", "token-of-tenant-d"
    s = server(extra={"pool_size": 0, "interpreters": [dict(entry, warmup=cell)],
                      "tenants": {"a": {"token_sha256": sha(TOKEN_A)},
                                  "b": {"token_sha256": sha(TOKEN_B), "interpreters": [entry]},
                                  "c": {"token_sha256": sha(TOKEN_C), "policy": own, "interpreters": [entry]},
                                  "d": {"token_sha256": sha(TOKEN_D), "policy": own}}})
    code = "import json; print(getattr(json, 'aj_warmed', None), 'aj_cell_name' in globals())"
    for t in "abcd":
        assert wait_for(lambda: s.metrics().get('agentjail_tenant_interp_ready{tenant="%s"}' % t) == 1, 60), \
            s.metrics()
    # a: the server's entry's cell; b: an entry without one (the control); c: its policy's own;
    # d: its policy's, replaced by the server entry's.
    for token, want in ((TOKEN_A, "41"), (TOKEN_B, "None"), (TOKEN_C, "7"), (TOKEN_D, "41")):
        status, _, j = s.run({"language": "python", "code": code}, token=token)
        assert status == 200 and j["stdout"] == want + " False\n", (want, j)
    m = s.metrics()
    assert m['agentjail_interp_runs_total{kind="warm"}'] == 4, m
    # Bad entries stop the server with the key named.
    for warmup, why in [(5, "must be Python code"), ("", "must be Python code"),
                        ("x" * (64 * 1024 + 1), "at most 65536 bytes")]:
        path = os.path.join(tmp, "bad-warmup.json")
        with open(path, "w") as f:
            json.dump({"store": os.path.join(tmp, "x.db"),
                       "interpreters": [{"language": "python", "warmup": warmup}],
                       "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f)
        p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "interpreters[0].warmup" in p.stderr and why in p.stderr, (warmup, p.stderr)


def test_readyz_waits_for_the_warm_interpreters(server):
    """/readyz is 503 while the warm pools are being filled (pandas takes a
    while to import), then 200; the same server answers /healthz at once."""
    pytest.importorskip("pandas")
    s = server(extra={"pool_size": 0, "interpreters": [{"language": "python", "preload": ["pandas"], "pool": 2}]})
    status, _, j = s.request("GET", "/readyz", token=None)
    assert status == 503 and "warming up" in j["error"], (status, j)
    assert s.request("GET", "/healthz", token=None)[0] == 200
    assert wait_for(lambda: s.request("GET", "/readyz", token=None)[0] == 200, 120)
    m = s.metrics()
    assert m["agentjail_interp_ready"] == sum(v for k, v in m.items() if k.startswith("agentjail_tenant_interp_ready")) > 0, m
    assert all(v == 2 for k, v in m.items() if k.startswith("agentjail_tenant_interp_ready")), m
