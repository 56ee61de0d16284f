"""`agentjail serve` with several tenants: each tenant's caps, policy and
host uids hold for it alone; per-request limits only tighten; TLS; the
events log; per-tenant metrics; slow clients do not starve others. A real
server on a loopback port, driven over real sockets; each denial has its
positive control next to it."""
import http.client
import json
import os
from concurrent.futures import ThreadPoolExecutor
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, IS_ROOT, cgroup_limits_only, new_tag, pids_with, wait_for
from srvhelp import TOKENS, serving, sha


def root_server():
    if not IS_ROOT:
        pytest.skip("a running server is tested as root (per-run host uids, as test_server.py)")


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="ajtest-srvt-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server(tmp):
    yield from serving(tmp, before=lambda kw: root_server())


def policy_file(tmp, name, policy):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(dict({"version": 1}, **policy), f)
    return path


def bad_config(tmp, cfg):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        f.write(cfg if isinstance(cfg, str) else json.dumps(cfg, indent=1))
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentjail serve: " + path + ":"), p.stderr
    return lines[0]


# ---- caps ------------------------------------------------------------------------------------------

def test_a_tenant_cannot_pass_its_caps_and_the_other_is_unaffected(server):
    s = server(extra={"max_runs": 8, "max_runs_per_tenant": 4},
               tenants={"a": {"max_runs": 1, "max_runs_per_minute": 3, "max_timeout": 5, "pool_size": 0}})
    tag = new_tag()
    status, _, first = s.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202, first
    # a: its one run at a time is taken.
    status, resp, j = s.run({"argv": ["true"]})
    assert status == 429 and resp.getheader("Retry-After") == "1" and "too many runs at once" in j["error"], j
    # b: the same moment, two runs at once, then more.
    status, _, jb = s.run({"argv": ["sleep", tag], "wait": False}, tenant="b")
    assert status == 202, jb
    for _ in range(3):
        status, _, j = s.run({"argv": ["true"]}, tenant="b")
        assert status == 200 and j["status"] == "ok", j
    # a: its timeout bound is 5 s, b's the server's.
    status, _, j = s.run({"argv": ["true"], "timeout": 6})
    assert status == 400 and j["error"].startswith("timeout:") and "5 s" in j["error"], j
    status, _, j = s.run({"argv": ["true"], "timeout": 6}, tenant="b")
    assert status == 200 and j["status"] == "ok", j
    # a: its rate, 3 a minute (the refused one above took a token too).
    assert s.request("DELETE", "/v1/runs/" + first["id"])[0] == 200
    status, _, j = s.run({"argv": ["true"]})
    assert status == 200 and j["status"] == "ok", j
    status, resp, j = s.run({"argv": ["true"]})
    assert status == 429 and "this minute" in j["error"] and int(resp.getheader("Retry-After")) > 1, j
    for _ in range(2):
        status, _, j = s.run({"argv": ["true"]}, tenant="b")
        assert status == 200, j
    assert s.request("DELETE", "/v1/runs/" + jb["id"], tenant="b")[0] == 200
    assert not pids_with(tag)

    m = s.metrics()
    assert m['agentjail_tenant_runs_by_status_total{tenant="a",status="ok"}'] == 1
    assert m['agentjail_tenant_runs_by_status_total{tenant="a",status="signaled"}'] == 1
    assert m['agentjail_tenant_runs_by_status_total{tenant="b",status="ok"}'] == 6
    assert m['agentjail_tenant_runs_by_status_total{tenant="b",status="signaled"}'] == 1
    assert m['agentjail_runs_finished_total{status="ok"}'] == 7  # the first slice's name, all tenants
    assert m["agentjail_http_429_total"] == 2
    assert m["agentjail_runs_queued"] == 0 and m["agentjail_runs_running"] == 0
    assert m['agentjail_tenant_runs_queued{tenant="a"}'] == 0
    assert m["agentjail_sessions_live"] == 0 and m["agentjail_net_denials_total"] == 0
    # a has no pool (pool_size 0), b has its own.
    assert 'agentjail_tenant_pool_ready{tenant="a"}' not in m
    assert m['agentjail_tenant_pool_runs_total{tenant="b",kind="warm"}'] + \
        m['agentjail_tenant_pool_runs_total{tenant="b",kind="cold"}'] == 7
    assert m["agentjail_pool_runs_total{kind=\"warm\"}"] + m["agentjail_pool_runs_total{kind=\"cold\"}"] == 7


# ---- policies ------------------------------------------------------------------------------------

LOOPBACK_TCP = ("import socket\n"
                "try:\n"
                "    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
                "    c = socket.create_connection(s.getsockname(), timeout=5); a, _ = s.accept()\n"
                "    c.sendall(b'ping'); print(a.recv(4).decode())\n"
                "except OSError as e:\n"
                "    print('refused', e.errno)\n")


def test_tenant_policy_tightens_and_the_kernel_holds_it(server, tmp):
    none = policy_file(tmp, "none.json", {"network": {"mode": "none"}})
    s = server(tenants={"a": {"policy": none}})
    # a: network none, in the kernel: no loopback to talk over.
    status, _, j = s.run({"language": "python", "code": LOOPBACK_TCP})
    assert status == 200 and j["stdout"].startswith("refused"), j
    assert j["result"]["layers"]["landlock_net"] is True
    # b (the server's policy, loopback): the same code talks to itself.
    status, _, jb = s.run({"language": "python", "code": LOOPBACK_TCP}, tenant="b")
    assert status == 200 and jb["stdout"] == "ping\n", jb
    assert j["policy_sha256"] != jb["policy_sha256"]
    # A request may tighten b's network to none (and the kernel holds it) ...
    status, _, j = s.run({"language": "python", "code": LOOPBACK_TCP, "network": "none"}, tenant="b")
    assert status == 200 and j["stdout"].startswith("refused"), j
    # ... but not loosen a's; nothing runs.
    status, _, j = s.run({"language": "python", "code": LOOPBACK_TCP, "network": "loopback"})
    assert status == 400 and j["error"].startswith("network:") and "looser" in j["error"], j
    status, _, j = s.run({"argv": ["true"], "network": "wifi"}, tenant="b")
    assert status == 400 and j["error"].startswith("network:"), j
    # Asking for what the tenant has is fine.
    status, _, j = s.run({"language": "python", "code": LOOPBACK_TCP, "network": "loopback"}, tenant="b")
    assert status == 200 and j["stdout"] == "ping\n", j


def test_a_looser_tenant_policy_or_overlapping_uids_stop_the_server(tmp):
    """Config errors: one located line, exit 2, nothing started (no root needed)."""
    tight = policy_file(tmp, "tight.json", {"network": {"mode": "none"}, "limits": {"memory": "512M"}})
    loose = policy_file(tmp, "loose.json", {"network": {"mode": "loopback"}, "limits": {"memory": "1G"}})
    base = {"listen": "127.0.0.1:0", "store": os.path.join(tmp, "s", "runs.db"), "policy": tight}
    line = bad_config(tmp, dict(base, tenants={"a": {"token_sha256": sha("x"), "policy": loose}}))
    assert "tenants.a.policy: looser than the server's policy" in line, line
    assert "network.mode: A none, B loopback (B is weaker" in line and "limits.memory" in line, line
    # Two tenants given overlapping ranges; and one inside the automatic share of another.
    line = bad_config(tmp, dict(base, tenants={
        "a": {"token_sha256": sha("x"), "uid_base": 3000000000, "uid_count": 1000},
        "b": {"token_sha256": sha("y"), "uid_base": 3000000500, "uid_count": 1000}}))
    assert re.search(r":\d+:\d+: tenants\.a\.uid_base: its host uid range 3000000000\.\.3000000999 overlaps tenant b's",
                     line), line
    # Given ranges that leave the automatic ones nothing of the server policy's.
    line = bad_config(tmp, dict(base, tenants={
        "a": {"token_sha256": sha("x")},
        "b": {"token_sha256": sha("y"), "uid_base": 1610612736, "uid_count": 65536}}))
    assert re.search(r":\d+:\d+: tenants\.a: no host uids are left for its automatic range", line), line
    line = bad_config(tmp, dict(base, tenants={"a": {"token_sha256": sha("x"), "uid_base": 3000000000}}))
    assert "tenants.a.uid_count: uid_base and uid_count go together" in line, line
    line = bad_config(tmp, dict(base, max_timeout=60, tenants={"a": {"token_sha256": sha("x"), "max_timeout": 61}}))
    assert "tenants.a.max_timeout: is more than the server's max_timeout" in line, line
    line = bad_config(tmp, dict(base, tenants={"a": {"token_sha256": sha("x")}, "b": {"token_sha256": sha("x")}}))
    assert "tenants.b.token_sha256: the same token as tenant a's" in line, line
    line = bad_config(tmp, dict(base, tenants={"a": {"token_sha256": sha("x"), "max_runs": 17}}))
    assert "tenants.a.max_runs: is more than the server's max_runs (16)" in line, line
    line = bad_config(tmp, dict(base, tenants={"a": {"token_sha256": sha("x"), "policy": "/nonexistent.json"}}))
    assert "tenants.a.policy: " in line and "/nonexistent.json" in line, line
    line = bad_config(tmp, dict(base, events_log=os.path.join(tmp, "no", "such", "dir.jsonl"),
                                tenants={"a": {"token_sha256": sha("x")}}))
    assert re.search(r":\d+:\d+: events_log: /.*/no/such/dir.jsonl: No such file or directory", line), line
    line = bad_config(tmp, dict(base, events_log=tmp, tenants={"a": {"token_sha256": sha("x")}}))
    assert "events_log: " in line, line


def test_tenants_get_disjoint_host_uid_ranges(server):
    # a's range lies inside the server policy's (1610612736 + 65536), and
    # so do the workspace owners' uids: b's automatic range is made around
    # both.
    lo = 1610612736 + 1000
    s = server(tenants={"a": {"uid_base": lo, "uid_count": 100}},
               extra={"sessions": {"workspace_uids": "1610612736:1000"}})
    tag = new_tag()
    ids = {}
    for t in ("a", "b"):
        status, _, j = s.run({"argv": ["sleep", tag], "wait": False}, tenant=t)
        assert status == 202, j
        ids[t] = j["id"]
    assert wait_for(lambda: len(pids_with(tag)) == 2, 10), pids_with(tag)
    # Seen from the host: each run's process has a uid of its tenant's range.
    uids = set()
    for pid in pids_with(tag):
        with open("/proc/%d/status" % pid) as f:
            uids.add(int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)))
    a_uids = {u for u in uids if lo <= u < lo + 100}
    # b's: the rest of the server policy's range (1610612736 + 65536).
    b_uids = {u for u in uids if lo + 100 <= u < 1610612736 + 65536}
    assert len(a_uids) == 1 and len(b_uids) == 1, uids
    got = {}
    for t in ("a", "b"):
        status, _, j = s.request("DELETE", "/v1/runs/" + ids[t], tenant=t)
        assert status == 200, j
        got[t] = j["result"]["host_uid"]
    assert got["a"] in a_uids and got["b"] in b_uids, (got, uids)
    assert not pids_with(tag)
    # Both came from their tenant's warm pool: a parked sandbox has its
    # tenant's uid already.
    m = s.metrics()
    assert m['agentjail_tenant_pool_runs_total{tenant="a",kind="warm"}'] == 1, m
    assert m['agentjail_tenant_pool_runs_total{tenant="b",kind="warm"}'] == 1, m


# ---- per-request limits --------------------------------------------------------------------------

def test_request_limits_only_tighten(server, tmp):
    small = policy_file(tmp, "small.json", {"limits": {"memory": "256M", "output": "1M", "cpu_time": "20s"}})
    s = server(tenants={"a": {"policy": small, "max_timeout": 30}})
    # Looser than a's policy: 400 naming the field, nothing runs.
    for limits, field in (({"memory": "512M"}, "limits.memory"), ({"output": 2 << 20}, "limits.output"),
                          ({"cpu_time": 21}, "limits.cpu_time"), ({"timeout": "31s"}, "limits.timeout"),
                          ({"memory": -1}, "limits.memory"), ({"disk": 1}, "limits.disk"),
                          ({"memory": "lots"}, "limits.memory")):
        status, _, j = s.run({"argv": ["true"], "limits": limits})
        assert status == 400 and j["error"].startswith(field + ":"), (limits, j)
    status, _, j = s.run({"argv": ["true"], "limits": "1G"})
    assert status == 400 and j["error"].startswith("limits:"), j
    # b's policy is the server's (2G): 512M tightens it there.
    status, _, j = s.run({"argv": ["true"], "limits": {"memory": "512M"}}, tenant="b")
    assert status == 200 and j["status"] == "ok", j
    # Tighter: the kernel ends the run at the request's limit.
    status, _, j = s.run({"language": "sh", "code": "head -c 5000 /dev/zero", "limits": {"output": 1000}})
    assert status == 200 and j["status"] == "output_limit", j
    status, _, j = s.run({"argv": ["sleep", "30"], "limits": {"timeout": 0.5}})
    assert status == 200 and j["status"] == "timeout", j
    # Positive controls: the same commands under their limits.
    status, _, j = s.run({"language": "sh", "code": "head -c 500 /dev/zero", "limits": {"output": 1000}})
    assert status == 200 and j["status"] == "ok" and j["stdout_bytes"] == 500, j
    cgroup_limits_only("a memory limit needs a cgroup")
    hog = "b = bytearray(200 << 20); print(len(b))"
    status, _, j = s.run({"language": "python", "code": hog, "limits": {"memory": "64M"}})
    assert status == 200 and j["status"] == "memory_limit", j
    status, _, j = s.run({"language": "python", "code": hog, "limits": {"memory": "250M"}})
    assert status == 200 and j["status"] == "ok" and j["stdout"] == str(200 << 20) + "\n", j


# ---- TLS ---------------------------------------------------------------------------------------------

def make_cert(tmp, name="srv", cn="localhost"):
    cert, key = os.path.join(tmp, name + ".crt"), os.path.join(tmp, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=" + cn, "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_serves_https_with_the_configured_certificate(server, tmp):
    if not shutil.which("openssl"):
        pytest.skip("openssl makes the test's certificate")
    cert, key = make_cert(tmp)
    s = server(extra={"tls": {"cert": cert, "key": key}}, tls_ca=cert)
    status, _, j = s.request("GET", "/healthz", tenant=None)
    assert status == 200 and j == {"status": "ok"}, j
    status, _, j = s.run({"language": "sh", "code": "echo over tls"})
    assert status == 200 and j["stdout"] == "over tls\n", j
    # A client that trusts another certificate refuses this server.
    other, _ = make_cert(tmp, "other")
    ctx = ssl.create_default_context(cafile=other)
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as raw:
            ctx.wrap_socket(raw, server_hostname="localhost")
    # Plain HTTP to the TLS port gets no HTTP answer.
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        c.request("GET", "/healthz")
        c.getresponse().read()
    c.close()


def test_bad_tls_files_are_located_config_errors(server, tmp):
    if not shutil.which("openssl"):
        pytest.skip("openssl makes the test's certificate")
    cert, key = make_cert(tmp)
    _, other_key = make_cert(tmp, "other")
    garbage = os.path.join(tmp, "garbage.pem")
    with open(garbage, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    base = {"listen": "127.0.0.1:0", "store": os.path.join(tmp, "s", "runs.db"),
            "tenants": {"a": {"token_sha256": sha("x")}}}
    for tls, where in (({"cert": os.path.join(tmp, "missing.crt"), "key": key}, "tls.cert: "),
                       ({"cert": garbage, "key": key}, "tls.cert: "),
                       ({"cert": cert, "key": garbage}, "tls.key: "),
                       ({"cert": cert, "key": other_key}, "tls.key: "),
                       ({"cert": cert}, "tls: needs both"),
                       ({"cert": cert, "key": key, "ca": cert}, "tls.ca: unknown key")):
        line = bad_config(tmp, dict(base, tls=tls))
        assert re.search(r"\.json:\d+:\d+: " + re.escape(where), line), (tls, line)
    # Control: the same certificate and key, as a pair, serve HTTPS (each
    # refusal above is the file or key at fault, not the files of the test).
    s = server(extra={"tls": {"cert": cert, "key": key}}, tls_ca=cert)
    status, _, j = s.request("GET", "/healthz", tenant=None)
    assert status == 200 and j == {"status": "ok"}, j


# ---- the events log --------------------------------------------------------------------------------

def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_events_log_has_every_runs_events_with_tenant_and_id_and_reopens_on_sighup(server, tmp):
    log = os.path.join(tmp, "events.jsonl")
    s = server(extra={"events_log": log})
    escape = "import ctypes; print(ctypes.CDLL(None).unshare(0x10000000))"
    status, _, ja = s.run({"language": "python", "code": escape})
    assert status == 200 and ja["result"]["events"]["escape_attempt"] >= 1, ja
    status, _, jb = s.run({"argv": ["true"]}, tenant="b")
    assert status == 200, jb
    assert os.stat(log).st_mode & 0o777 == 0o600
    lines = read_lines(log)
    by_run = {}
    for ev in lines:
        by_run.setdefault((ev["tenant"], ev["run_id"]), []).append(ev["type"])
    assert set(by_run) == {("a", ja["id"]), ("b", jb["id"])}, by_run
    a_types = by_run[("a", ja["id"])]
    assert a_types[0] == "start" and a_types[-1] == "exit" and "escape_attempt" in a_types, a_types
    assert a_types.count("escape_attempt") == ja["result"]["events"]["escape_attempt"]
    assert by_run[("b", jb["id"])] == ["start", "exit"]  # positive control: no escape, no such event
    esc = next(e for e in lines if e["type"] == "escape_attempt")
    assert esc["syscall"] == "unshare" and esc["sandbox_id"] == ja["result"]["sandbox_id"]
    # Appended as the runner processes them: the escape attempt is there
    # while its run is still going.
    status, _, jl = s.run({"language": "python", "code": escape + "\nimport time; time.sleep(1000)", "wait": False})
    assert status == 202, jl
    assert wait_for(lambda: any(e["run_id"] == jl["id"] and e["type"] == "escape_attempt" for e in read_lines(log)),
                    20), read_lines(log)
    status, _, j = s.request("GET", "/v1/runs/" + jl["id"])
    assert j["status"] == "running", j
    assert s.request("DELETE", "/v1/runs/" + jl["id"])[0] == 200
    assert [e["type"] for e in read_lines(log) if e["run_id"] == jl["id"]][-1] == "exit"
    lines = read_lines(log)
    # logrotate: the file is moved away, SIGHUP, new lines go to a new file.
    os.rename(log, log + ".1")
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "events_log reopened" in s.err(), 10), s.err()
    status, _, jc = s.run({"argv": ["true"]})
    assert status == 200, jc
    assert [e["run_id"] for e in read_lines(log)] == [jc["id"], jc["id"]]
    assert len(read_lines(log + ".1")) == len(lines)
    assert os.stat(log).st_mode & 0o777 == 0o600
    assert s.proc.poll() is None  # SIGHUP is not the end of the server


# ---- slow clients ----------------------------------------------------------------------------------

def test_slow_clients_do_not_starve_others(server):
    """Slowloris: one address holds connections open sending a header a
    byte at a time; it gets max_connections_per_ip of them, no more, and
    each is closed after connection_timeout idle seconds; another client
    is served meanwhile."""
    s = server(extra={"max_connections": 8, "max_connections_per_ip": 3, "connection_timeout": 2})
    # A quiet stream is not an idle connection: keep-alives come within
    # half the timeout, and the exit arrives after 3 s of silence.
    status, _, j = s.run({"language": "sh", "code": "sleep 3; echo late", "wait": False})
    assert status == 202, j
    c = s.conn(30)
    c.request("GET", "/v1/runs/%s/stream" % j["id"], headers={"Authorization": "Bearer " + TOKENS["a"]})
    body = c.getresponse().read().decode()
    c.close()
    assert ": keep-alive" in body and "event: exit" in body and '"late\\n"' in body, body
    slow = []
    for _ in range(3):
        c = socket.socket()
        c.bind(("127.0.0.2", 0))
        c.settimeout(30)
        c.connect(("127.0.0.1", s.port))
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        slow.append(c)
    # The fourth from the same address is closed without an answer.
    extra = socket.socket()
    extra.bind(("127.0.0.2", 0))
    extra.settimeout(30)
    extra.connect(("127.0.0.1", s.port))
    try:
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = extra.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    extra.close()
    assert got == b"", got
    # Another client is served while they hang on.
    for _ in range(3):
        status, _, j = s.request("GET", "/healthz", tenant=None, timeout=30)
        assert status == 200 and j == {"status": "ok"}
    # The idle ones are closed by the server (connection_timeout).
    for c in slow:
        try:
            assert c.recv(100) == b""
        except ConnectionResetError:
            pass
        c.close()
    # Positive control: that address is served again, once the server has
    # counted the closed ones out (their closing reaches the client before
    # the server's count of the address drops: a try in between is reset).
    def served_again():
        c = socket.socket()
        c.bind(("127.0.0.2", 0))
        c.settimeout(30)
        data = b""
        try:
            c.connect(("127.0.0.1", s.port))
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while True:
                k = c.recv(4096)
                if not k:
                    break
                data += k
        except (ConnectionResetError, BrokenPipeError):
            pass
        c.close()
        return data.startswith(b"HTTP/1.1 200")
    assert wait_for(served_again, 10)


# ---- the uid leases tenants rely on ------------------------------------------------------------

def test_overlapping_uid_ranges_never_lease_the_same_uid(tmp):
    """Tenants' ranges are disjoint, but a host also has `agentjail run`s
    with other ranges: a uid's lease is the uid's, whatever range it came
    from. A run holds uid X from range X:1; a run of range X-1:2 then gets
    X-1 (X is taken), never X."""
    if not IS_ROOT:
        pytest.skip("host uids per run are root mode's")
    from conftest import run_aj
    x = 3900000001
    tag = new_tag()
    first = subprocess.Popen([AJ_BIN, "run", "--uid-range", "%d:1" % x, "--", "sleep", tag],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: pids_with(tag), 20)
        with open("/proc/%d/status" % pids_with(tag)[0]) as f:
            assert int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)) == x
        for _ in range(3):  # the start slot is random: each try must avoid X
            r = run_aj(["--uid-range", "%d:2" % (x - 1)], ["true"])
            assert r.returncode == 0, r.stderr
            assert r.result["host_uid"] == x - 1, r.result
    finally:
        first.kill()
        first.wait()
    assert wait_for(lambda: not pids_with(tag), 20)
    # Positive control: with X free again, it is handed out.
    r = run_aj(["--uid-range", "%d:1" % x], ["true"])
    assert r.returncode == 0 and r.result["host_uid"] == x, (r.stderr, r.result)


# ---- sessions are the tenant's too ------------------------------------------------------------------

def test_session_runs_have_the_tenants_policy_and_uids_and_are_counted(server, tmp):
    if tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2]) < (6, 3):
        pytest.skip("sessions need id-mapped tmpfs mounts (Linux 6.3)")
    none = policy_file(tmp, "none.json", {"network": {"mode": "none"}})
    s = server(tenants={"a": {"policy": none, "uid_base": 3000000000, "uid_count": 100}})
    sids = {}
    for t in ("a", "b"):
        status, _, j = s.request("POST", "/v1/sessions", {}, tenant=t)
        assert status == 201, j
        sids[t] = j["id"]
    m = s.metrics()
    assert m["agentjail_sessions_live"] == 2 and m['agentjail_tenant_sessions_live{tenant="a"}'] == 1, m
    recs = {}
    for t in ("a", "b"):
        status, _, recs[t] = s.request("POST", "/v1/sessions/%s/runs" % sids[t],
                                       {"language": "python", "code": LOOPBACK_TCP}, tenant=t)
        assert status == 200, recs[t]
    # a's session run: a's uids and a's network (none, the kernel says so) ...
    assert 3000000000 <= recs["a"]["result"]["host_uid"] < 3000000100, recs["a"]["result"]
    assert recs["a"]["stdout"].startswith("refused"), recs["a"]
    # ... b's (positive control): neither.
    assert not 3000000000 <= recs["b"]["result"]["host_uid"] < 3000000100
    assert recs["b"]["stdout"] == "ping\n", recs["b"]
    for t in ("a", "b"):
        assert s.request("DELETE", "/v1/sessions/" + sids[t], tenant=t)[0] == 200
    m = s.metrics()
    assert m["agentjail_sessions_live"] == 0 and m['agentjail_tenant_sessions_live{tenant="a"}'] == 0, m


PROXY_PROBE = r"""
import os, urllib.error, urllib.request
print(os.environ.get("HTTP_PROXY"))
try:
    urllib.request.urlopen("http://other.example/", timeout=20)
    print("reached")
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("error", type(e).__name__)
"""


def test_a_proxy_mode_policy_runs_warm_through_its_own_egress_proxy_and_counts_denials(server, tmp):
    """A server whose policy is network.mode proxy: its warm pool parks
    each sandbox with its own egress proxy (docs/network.md), so a run is
    warm and still has a proxy of its own; a host outside the allow-list
    is a 403 and a net_denied event in the record and in the metrics. A
    request's "network": "none" drops the whole network group (allow-list,
    caps, secrets) and gets no proxy."""
    pol = policy_file(tmp, "proxy.json", {"network": {"mode": "proxy", "allow": ["allowed.test:80"]}})
    s = server(extra={"policy": pol, "pool_size": 1})
    assert "its runs start cold" not in s.err(), s.err()
    status, _, j = s.run({"language": "python", "code": PROXY_PROBE})
    assert status == 200 and j["stdout"].splitlines() == ["http://127.0.0.1:3128", "403"], j
    assert s.metrics()['agentjail_tenant_pool_runs_total{tenant="a",kind="warm"}'] == 1
    denied = [e for e in j["events"] if e["type"] == "net_denied"]
    assert len(denied) == 1 and denied[0]["host"] == "other.example", j["events"]
    m = s.metrics()
    assert m["agentjail_net_denials_total"] == 1, m
    assert m['agentjail_tenant_net_denials_total{tenant="a"}'] == 1, m
    # Tightened to none: no proxy variable, no route, no proxy started.
    status, _, j = s.run({"language": "python", "code": PROXY_PROBE, "network": "none"})
    assert status == 200 and j["stdout"].splitlines() == ["None", "error URLError"], j
    assert not [e for e in j["events"] if e["type"].startswith("net_")], j["events"]


def test_a_proxy_mode_tenant_needs_two_uids_per_run(server, tmp):
    """A proxy-mode run leases two host uids (its own and its egress
    proxy's): a range that covers max_runs + pool_size once stops the
    server with the reason; twice is enough, and its runs start (warm,
    each with a proxy: both uids leased at once)."""
    pol = policy_file(tmp, "proxy2.json", {"network": {"mode": "proxy", "allow": ["allowed.test:80"]}})
    base = {"listen": "127.0.0.1:0", "store": os.path.join(tmp, "s", "runs.db"), "policy": pol,
            "max_runs": 2, "max_runs_per_tenant": 2, "pool_size": 1}
    line = bad_config(tmp, dict(base, tenants={
        "a": {"token_sha256": sha("x"), "uid_base": 3000000000, "uid_count": 5}}))
    assert "tenants.a.uid_count: its uid range has 5 uids, fewer than 2 x (max_runs + pool_size" in line, line
    assert "(6): each proxy-mode run also leases one for its egress proxy" in line, line
    s = server(extra={"policy": pol, "max_runs": 2, "max_runs_per_tenant": 2, "pool_size": 1},
               tenants={"a": {"uid_base": 3000000000, "uid_count": 6}})
    with ThreadPoolExecutor(2) as ex:
        got = list(ex.map(lambda _: s.run({"language": "python", "code": PROXY_PROBE}), range(2)))
    for status, _, j in got:
        assert status == 200 and j["stdout"].splitlines() == ["http://127.0.0.1:3128", "403"], j
