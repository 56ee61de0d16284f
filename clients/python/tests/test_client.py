"""agentjail_client against a real `agentjail serve` (started here, on a
unix socket and on a loopback port, with a temp config and store), plus
a stub HTTP server for what the real one cannot be made to answer on
demand (a 5xx, an answer that never comes).

Collected by tests/integration/test_python_client.py (so scripts/test.sh
runs and counts them); on their own: `python3 -m pytest clients/python/tests`
with AJ_BIN set as for the integration tests."""
import http.server
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for p in (os.path.join(REPO, "clients", "python"), os.path.join(REPO, "tests", "integration"),
          os.path.join(REPO, "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from conftest import must_skip, new_tag, pids_with, root_only, wait_for  # noqa: E402
from test_server import TOKEN_A, TOKEN_B, Server  # noqa: E402

import agentjail_client as aj  # noqa: E402


def _need_root():
    root_only("agentjail serve runs (and is tested) as root only")

ESCAPE = ("import ctypes, os\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "r = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER
          "print(r, os.strerror(ctypes.get_errno()))\n")


def _start(extra=None, unix=False):
    _need_root()
    tmp = tempfile.mkdtemp(prefix="ajtest-pyc-")
    listen = "unix:" + os.path.join(tmp, "api.sock") if unix else "127.0.0.1:0"
    try:
        s = Server(tmp, extra=extra, listen=listen)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    s.url = "unix:" + s.unix if s.unix else "http://127.0.0.1:%d" % s.port
    return s


def _stop(s):
    try:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.err()
    finally:
        shutil.rmtree(s.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def srv():
    """One server on a unix socket for the tests that need no special limits.
    No warm pool: its parked sandboxes would outlive each test, which the
    suite's leak check (conftest.no_leaks) counts; the servers of `tight`
    have one."""
    s = _start(unix=True, extra={"pool_size": 0})
    yield s
    _stop(s)


@pytest.fixture
def tight():
    """A server on a loopback port with small limits (started per test)."""
    started = []

    def start(**extra):
        s = _start(extra=extra)
        started.append(s)
        return s
    yield start
    for s in started:
        _stop(s)


# ---- runs ---------------------------------------------------------------------------------------

def test_run_returns_the_record(srv):
    c = aj.Client(srv.url, TOKEN_A, timeout=10)
    r = c.run(language="python", code="import sys; print(6 * 7); print('e', file=sys.stderr)")
    assert isinstance(r, aj.Run)
    assert (r.status, r.exit_code, r.stdout, r.stderr) == ("ok", 0, "42\n", "e\n"), r
    assert r.ok and not r.stdout_truncated and not r.stderr_truncated and r.stdout_bytes == 3
    assert len(r.id) == 32 and r.result["status"] == "ok" and r.events == [] and not r.escape_attempted
    r = c.run(language="bash", code="echo out; exit 3")
    assert (r.status, r.exit_code, r.ok) == ("nonzero_exit", 3, False), r
    r = c.run(argv=["sh", "-c", 'echo "$GREETING"; cat'], env={"GREETING": "hello"}, stdin="from stdin\n")
    assert r.stdout == "hello\nfrom stdin\n", r
    # The record, as GET answers it later.
    again = c.get_run(r.id)
    assert again.raw == r.raw


def test_the_run_timeout_is_not_the_http_timeout(srv):
    # The HTTP timeout (1 s) is shorter than the run (killed at its own 2.5 s):
    # the client waits for the run, which ends `timeout`, not a RequestTimeout.
    c = aj.Client(srv.url, TOKEN_A, timeout=1)
    r = c.run(argv=["sleep", "30"], timeout=2.5)
    assert r.status == "timeout", r
    # Positive control: within its timeout the same client's run is ok.
    assert c.run(argv=["true"], timeout=2.5).status == "ok"


def test_escape_attempt_in_the_result(srv):
    c = aj.Client(srv.url, TOKEN_A)
    r = c.run(language="python", code=ESCAPE)
    assert r.stdout.startswith("-1 "), r  # refused
    assert r.escape_attempted and r.escape_attempts[0]["syscall"] == "unshare"
    assert r.summary()["refused"][0]["args"] == ["CLONE_NEWUSER"], r.summary()
    # Positive control: the same interpreter without the call is clean.
    r = c.run(language="python", code="import ctypes; print(0)")
    assert r.ok and not r.escape_attempted and "refused" not in r.summary()


def test_limits_and_network_only_tighten(srv):
    c = aj.Client(srv.url, TOKEN_A)
    r = c.run(language="sh", code="head -c 5000 /dev/zero", limits={"output": 1000}, network="none")
    assert r.status == "output_limit", r
    # Positive control: under the limit.
    r = c.run(language="sh", code="head -c 500 /dev/zero", limits={"output": 1000}, network="none")
    assert r.ok and r.stdout_bytes == 500, r
    with pytest.raises(aj.BadRequest) as e:
        c.run(argv=["true"], limits={"memory": "lots"})
    assert e.value.message.startswith("limits.memory:"), e.value.message


def test_https_with_a_ca_file(tight):
    _need_root()
    if not shutil.which("openssl"):
        must_skip("openssl makes the test's certificate (scripts/deps.sh test)")
    from test_server_tenants import make_cert
    d = tempfile.mkdtemp(prefix="ajtest-pyc-tls-")
    try:
        cert, key = make_cert(d)
        other, _ = make_cert(d, "other")
        s = tight(tls={"cert": cert, "key": key})
        url = "https://localhost:%d" % s.port
        r = aj.Client(url, TOKEN_A, cafile=cert).run(language="sh", code="echo over tls")
        assert r.ok and r.stdout == "over tls\n", r
        # A client that trusts another certificate refuses this server.
        with pytest.raises(aj.TransportError) as e:
            aj.Client(url, TOKEN_A, cafile=other).run(argv=["true"])
        assert isinstance(e.value.__cause__, ssl.SSLCertVerificationError), repr(e.value.__cause__)
        with pytest.raises(ValueError):
            aj.Client("http://localhost:%d" % s.port, TOKEN_A, cafile=cert)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_start_stream_callbacks_then_wait_and_kill(srv):
    c = aj.Client(srv.url, TOKEN_A)
    tag = new_tag()
    # The payload writes, tries an escape, says "ready" and then waits: the
    # callbacks get its output while it is still running (the test kills it
    # from the callback), so the output was streamed, not buffered to the end.
    h = c.start(language="python", code="import os, sys\n"
                "print(0, flush=True)\nprint('err', file=sys.stderr, flush=True)\n" + ESCAPE +
                "print('ready', flush=True)\nos.execvp('sleep', ['sleep', '%s'])\n" % tag)
    assert isinstance(h, aj.RunHandle) and len(h.id) == 32
    got, live_at_ready = [], []

    def on_stdout(t):
        got.append(("out", t))
        if "ready" in "".join(x for k, x in got if k == "out") and not live_at_ready:
            live_at_ready.append(h.get().status)
            assert wait_for(lambda: pids_with(tag), 10), "the payload never got to sleep"
            h.kill()
    r = h.stream(on_stdout=on_stdout, on_stderr=lambda t: got.append(("err", t)),
                 on_event=lambda e: got.append(("event", e["syscall"])),
                 on_start=lambda s: got.append(("start", s["id"])))
    assert live_at_ready == ["running"], live_at_ready
    assert got[0] == ("start", h.id)
    out = "".join(t for k, t in got if k == "out")
    assert out.startswith("0\n-1 ") and out.endswith("ready\n"), got
    assert [t for k, t in got if k == "err"] == ["err\n"]
    assert ("event", "unshare") in got
    assert r.id == h.id and r.status == "signaled" and r.signal == signal.SIGKILL, r
    assert r.stdout == out and r.escape_attempted and not pids_with(tag)
    # wait() on an ended run replays its record; the stream of another tenant's run is 404.
    assert h.wait().raw == r.raw
    with pytest.raises(aj.NotFound) as e:
        aj.RunHandle(aj.Client(srv.url, TOKEN_B), h.id).wait()
    assert e.value.message.startswith("no run ")
    # run() with callbacks streams too and returns the Run.
    out = []
    r = c.run(language="sh", code="echo a; echo b", on_stdout=out.append)
    assert "".join(out) == "a\nb\n" and r.stdout == "a\nb\n" and r.ok
    # wait(timeout) gives up without touching the run; kill() ends it.
    tag = new_tag()
    h = c.start(argv=["sleep", tag])
    assert wait_for(lambda: pids_with(tag), 10), "the payload never started"
    with pytest.raises(aj.WaitTimeout):
        h.wait(timeout=0.3)
    assert h.get().live and pids_with(tag)
    r = h.kill()
    assert r.status == "signaled" and r.signal == signal.SIGKILL, r
    assert not pids_with(tag)
    assert h.wait().status == "signaled"


# ---- errors -------------------------------------------------------------------------------------

def test_errors_are_typed_with_the_servers_message(srv, tight):
    c = aj.Client(srv.url, TOKEN_A)
    with pytest.raises(aj.BadRequest) as e:
        c.run(language="cobol", code="x")
    assert e.value.status == 400 and e.value.message.startswith("language:"), e.value.message
    with pytest.raises(aj.BadRequest) as e:
        c.run(argv=["true"], extra={"colour": "blue"})
    assert "unknown field 'colour'" in e.value.message and e.value.body == {"error": e.value.message}
    with pytest.raises(aj.Unauthorized) as e:
        aj.Client(srv.url, "not-a-token").run(argv=["true"])
    assert e.value.status == 401 and "Bearer" in e.value.message
    with pytest.raises(aj.NotFound) as e:
        c.get_run("0" * 32)
    assert e.value.status == 404 and e.value.message.startswith("no run ")
    with pytest.raises(aj.NotFound):
        c.kill_run("0" * 32)
    # Bad input the client can see itself is refused before any request.
    for bad in (dict(code="x"), dict(language="python", code="1", argv=["true"]), dict(argv="ls -l")):
        with pytest.raises((ValueError, TypeError)):
            c.run(**bad)
    # 413, on a server with a small body limit (over TCP this time).
    s = tight(max_body_bytes=2048, max_runs_per_minute=2)
    t = aj.Client(s.url, TOKEN_A)
    with pytest.raises(aj.TooLarge) as e:
        t.run(argv=["true"], stdin="x" * 4000)
    assert e.value.status == 413 and "larger" in e.value.message
    # 429 with Retry-After: two runs a minute, the third is refused ...
    assert t.run(argv=["true"], stdin="x" * 1000).ok and t.run(argv=["true"]).ok
    with pytest.raises(aj.RateLimited) as e:
        t.run(argv=["true"])
    assert e.value.status == 429 and "rate" in e.value.message
    assert isinstance(e.value.retry_after, int) and 1 <= e.value.retry_after <= 31, e.value.retry_after
    # ... and a Retry-After beyond max_retry_wait is not slept on: raised at
    # once, one more 429 on the server (no retry was sent).
    before = s.metrics()["agentjail_http_429_total"]
    with pytest.raises(aj.RateLimited):
        aj.Client(s.url, TOKEN_A, retries=3, max_retry_wait=0.5).run(argv=["true"])
    assert s.metrics()["agentjail_http_429_total"] == before + 1
    # The other tenant has its own bucket.
    assert aj.Client(s.url, TOKEN_B).run(argv=["true"]).ok


def test_retry_on_429_honours_retry_after(tight):
    s = tight(max_runs_per_tenant=1)
    c = aj.Client(s.url, TOKEN_A)
    # One run holds the tenant's only slot.
    tag = new_tag()
    hold = c.start(argv=["sleep", tag])
    assert wait_for(lambda: pids_with(tag), 10), "the payload never started"
    # Without retries: 429, Retry-After 1.
    with pytest.raises(aj.RateLimited) as e:
        c.run(argv=["true"])
    assert e.value.retry_after == 1 and "too many runs" in e.value.message
    # With retries: it waits as told and gets through once the slot is free
    # (freed here once the server has refused it at least once).
    got = {}
    t = threading.Thread(target=lambda: got.update(r=aj.Client(s.url, TOKEN_A, retries=30).run(argv=["true"])))
    t.start()
    assert wait_for(lambda: s.metrics()["agentjail_http_429_total"] >= 2, 20)
    assert t.is_alive()
    assert hold.kill().status == "signaled"
    t.join(60)
    assert not t.is_alive() and got["r"].ok, got


class _Stub(http.server.BaseHTTPRequestHandler):
    """Answers 503 with the server's JSON error, 502 with text, or never."""
    release = threading.Event()

    def log_message(self, *a):
        pass

    # What the SSE reader must cope with beyond what agentjail sends today:
    # comments (keep-alives), CRLF line ends, a data field over two lines,
    # an event type it does not know, and (under /cut/) a stream that ends
    # before its exit event.
    SSE = (b": keep-alive\r\n\r\n"
           b"event: start\r\ndata: {\"id\": \"r1\"}\r\n\r\n"
           b"event: stdout\ndata: {\"data\":\ndata:  \"a\\nb\"}\n\n"
           b"event: future\ndata: {}\n\n"
           b": keep-alive\n\n")
    EXIT = b'event: exit\ndata: {"id": "r1", "status": "ok", "stdout": "a\\nb"}\n\n'

    def do_GET(self):
        body = self.SSE + (b"" if self.path.startswith("/cut/") else self.EXIT)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/hang/"):
            self.release.wait(30)
            return
        code, ctype, body = ((503, "application/json", b'{"error": "shutting down"}') if self.path.startswith("/json/")
                             else (502, "text/plain", b"bad gateway\n"))
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_against_a_stub_5xx_timeouts_sse_and_retry_after():
    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    t = threading.Thread(target=stub.serve_forever, daemon=True)
    t.start()
    try:
        url = "http://127.0.0.1:%d" % stub.server_address[1]
        c = aj.Client(url + "/json", "tok", timeout=5)
        with pytest.raises(aj.ServerError) as e:
            c.start(argv=["true"])
        assert e.value.status == 503 and e.value.message == "shutting down"
        with pytest.raises(aj.ServerError) as e:
            aj.Client(url + "/text", "tok").start(argv=["true"])
        assert e.value.status == 502 and e.value.message == "bad gateway"
        # The SSE reader, on a stream with every field kind.
        out = []
        r = aj.RunHandle(aj.Client(url, "tok"), "r1").stream(on_stdout=out.append)
        assert out == ["a\nb"] and r.status == "ok" and r.stdout == "a\nb"
        with pytest.raises(aj.TransportError) as e:
            aj.RunHandle(aj.Client(url + "/cut", "tok"), "r1").wait()
        assert "before the exit event" in str(e.value)
        # An answer that never comes: the HTTP timeout (0.3 s here) ends the wait.
        with pytest.raises(aj.RequestTimeout):
            aj.Client(url + "/hang", "tok", timeout=0.3).start(argv=["true"])
    finally:
        _Stub.release.set()
        stub.shutdown()
        stub.server_close()
    # Nothing listening: a TransportError (an OSError too).
    with pytest.raises(aj.TransportError):
        aj.Client(url, "tok", timeout=2).run(argv=["true"])
    with pytest.raises(ValueError):
        aj.Client("ftp://x", "tok")
    # Retry-After in both of HTTP's forms.
    import email.utils
    from agentjail_client._transport import parse_retry_after
    assert parse_retry_after("7") == 7 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0  # in the past: now
    assert 50 <= parse_retry_after(email.utils.formatdate(time.time() + 60, usegmt=True)) <= 61


# ---- sessions and files -------------------------------------------------------------------------

def _session_gone(s):
    """The server ended it: its record says so and its files answer 410."""
    if s.info()["status"] != "deleted":
        return False
    try:
        s.read_file("x.txt")
    except aj.Gone:
        return True
    return False


def test_session_files_round_trip(srv):
    import hashlib
    c = aj.Client(srv.url, TOKEN_A)
    blob = bytes(range(256)) * 40
    with c.session(ttl=120, workspace_quota="4M") as s:
        assert s.id in c.list_sessions() and s.info()["status"] == "live"
        assert s.write_file("in/data.bin", blob) == {"path": "in/data.bin", "bytes": len(blob)}
        s.write_file("x.txt", "héllo\n")
        assert s.read_file("in/data.bin") == blob
        assert s.read_file("/workspace/x.txt") == "héllo\n".encode()
        # Streamed both ways: from a file object (a regular file: its length;
        # a BytesIO: chunked) and into one.
        import io
        with tempfile.TemporaryFile() as f:
            f.write(b"head" + blob)
            f.seek(4)
            assert s.write_file("streamed.bin", f)["bytes"] == len(blob)
        assert s.write_file("chunked.bin", io.BytesIO(blob))["bytes"] == len(blob)
        sink = io.BytesIO()
        assert s.read_file("chunked.bin", out=sink) == len(blob) and sink.getvalue() == blob
        assert s.read_file("streamed.bin") == blob
        # A run sees the workspace at /workspace (its working directory), and
        # what it writes stays for the next run, a fresh sandbox.
        r = s.run(language="python", code="import hashlib\n"
                  "d = open('in/data.bin', 'rb').read()\n"
                  "open('/workspace/out.txt', 'w').write(hashlib.sha256(d).hexdigest())\n"
                  "print(len(d))\n")
        assert r.ok and r.stdout == "%d\n" % len(blob) and r.session == s.id, r
        digest = hashlib.sha256(blob).hexdigest()
        assert s.read_file("out.txt").decode() == digest
        r = s.run(language="sh", code="cat out.txt; ln -s /etc/passwd /workspace/link")
        assert r.ok and r.stdout == digest, r
        entries = {e["name"]: e for e in s.list_files()}
        assert {"in", "x.txt", "out.txt", "link"} <= set(entries), entries
        assert entries["in"]["type"] == "dir" and entries["out.txt"]["size"] == len(digest)
        assert [e["name"] for e in s.list_files("in")] == ["data.bin"]
        # A link a run planted is never followed; the same read of a file is fine.
        with pytest.raises(aj.Forbidden) as e:
            s.read_file("link")
        assert "link" in e.value.message
        with pytest.raises(aj.BadRequest):
            s.read_file("../../etc/passwd")
        assert s.delete_file("x.txt")["deleted"] is True
        with pytest.raises(aj.NotFound):
            s.read_file("x.txt")
        # One run at a time per session: 409 with the server's reason.
        h = s.start(argv=["sleep", "30"])
        with pytest.raises(aj.Conflict) as e:
            s.run(argv=["true"])
        assert "in flight" in e.value.message
        assert h.kill().status == "signaled"
        # Over the quota: 507 for a file, workspace_full for a run.
        with pytest.raises(aj.WorkspaceFull):
            s.write_file("big.bin", b"\0" * (5 << 20))
        r = s.run(language="sh", code="head -c 6000000 /dev/zero > big.bin")
        assert r.status == "workspace_full", r
        # Another tenant sees none of it.
        other = aj.Client(srv.url, TOKEN_B)
        with pytest.raises(aj.NotFound):
            other.get_session(s.id).read_file("out.txt")
        assert s.id not in other.list_sessions()
    assert s.closed and s.raw["status"] == "deleted"
    assert _session_gone(s) and s.id not in c.list_sessions()


def test_session_is_closed_when_the_block_raises(srv):
    c = aj.Client(srv.url, TOKEN_A)
    with pytest.raises(ZeroDivisionError):
        with c.session() as s:
            s.write_file("x.txt", "x")
            assert s.read_file("x.txt") == b"x"  # positive control: it is live here
            1 / 0
    assert s.closed
    assert _session_gone(s), "the session outlived the block that raised"


def test_one_shot_files_and_outputs(srv):
    c = aj.Client(srv.url, TOKEN_A)
    r = c.run(language="python", code="import json\n"
              "d = json.load(open('in/args.json'))\n"
              "open('out.txt', 'w').write(str(sum(d)))\n"
              "open('raw.bin', 'wb').write(bytes(range(256)))\n",
              files={"in/args.json": "[1, 2, 3]"}, outputs=["out.txt", "raw.bin", "missing.txt"])
    assert r.ok, r
    assert r.outputs == {"out.txt": b"6", "raw.bin": bytes(range(256))}, r.outputs
    assert "missing.txt" in r.output_errors and not r.outputs_truncated
    assert r.summary()["outputs"]["out.txt"] == "6"
    # Bad input named by the server: base64 the client did not make.
    with pytest.raises(aj.BadRequest) as e:
        c.run(argv=["true"], extra={"files": {"a.txt": "***"}})
    assert "a.txt" in e.value.message


# ---- the example ----------------------------------------------------------------------------------

def test_example_agent_loop(srv):
    sys.path.insert(0, os.path.join(REPO, "clients", "python", "examples"))
    try:
        import agent_loop
    finally:
        sys.path.pop(0)
    c = aj.Client(srv.url, TOKEN_A)
    modes = [False]
    try:
            modes.append(True)
    except pytest.skip.Exception:
        pass
    for use_session in modes:
        msgs = agent_loop.agent(c, use_session=use_session)
        tools = [json.loads(m["content"]) for m in msgs if m["role"] == "tool"]
        assert [t["status"] for t in tools] == ["ok", "ok", "ok"], tools
        assert tools[1]["refused"][0]["syscall"] == "unshare", tools[1]
        final = msgs[-1]
        assert final["role"] == "assistant" and "tool_call" not in final
        assert "65796" in final["content"] and "confirmed" in final["content"], final
        assert "refused unshare(CLONE_NEWUSER)" in final["content"], final
    # As a script: the transcript as JSON lines, exit status 0.
    import subprocess
    p = subprocess.run([sys.executable, os.path.join(REPO, "clients", "python", "examples", "agent_loop.py"),
                        "--session"], env=dict(os.environ, AGENTJAIL_URL=srv.url, AGENTJAIL_TOKEN=TOKEN_A),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert lines[-1]["role"] == "assistant" and "65796" in lines[-1]["content"], lines[-1]
