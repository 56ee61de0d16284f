"""agentjail-egress, the run's egress proxy, started directly with the
contract's fds (tests/egress/eghelp.py): real curl, Python urllib and raw
sockets through it, to real HTTP/HTTPS servers in a network namespace the
test made, names answered by a test resolver. Root only (namespaces).

Each refusal has its positive control: the same client, the same server,
an allowed name or address, and it works."""
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import IS_ROOT, heavy_only, must_skip

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "egress"))
import eghelp  # noqa: E402


REAL = "ghp_REALsecretVALUE0123456789abcdefABCD"
PLACE = "ghp_PLACEHOLDERzzzzzzzzzzzzzzzzzzzzzzzz"

BASE_ALLOW = ["public.test", "public.test:8080", "*.public.test", "GET,HEAD nonbroker.test",
              "*.brokered.test", "11.1.1.2", "[::ffff:10.0.0.1]", "10.0.0.1", "v6.test",
              "loop.test", "ten.test", "meta.test", "ula.test", "mapped.test", "nat64.test", "own.test",
              "mixed.test", "rebind.test", "twoaddr.test:8080", "refused.test:8080"]


@pytest.fixture(scope="module")
def env():
    if not IS_ROOT:
        pytest.skip("needs root: creates network namespaces (ip netns)")
    if not os.path.exists(eghelp.egress_bin()):
        must_skip("agentjail-egress not built at %s" % eghelp.egress_bin())
    import shutil
    for tool in ("ip", "curl", "openssl", "git"):
        if not shutil.which(tool):
            must_skip("%s is not installed (scripts/deps.sh test)" % tool)
    e = eghelp.Env()
    yield e
    e.close()


@pytest.fixture
def proxy(env):
    started = []

    def start(config=None, **kw):
        cfg = {"allow": BASE_ALLOW, "deny": ["x.public.test"], "allow_ranges": []}
        cfg.update(config or {})
        p = eghelp.Proxy(env, cfg, **kw)
        started.append(p)
        return p
    yield start
    for p in started:
        if p.ctl_w is not None:
            rc = p.stop()
            assert rc == 0, "the proxy did not exit 0 on control EOF: %r %s" % (rc, p.stderr())


def curl(p, url, *args, timeout=30):
    cmd = ["curl", "-sS", "-x", p.url, "--noproxy", "", "-o", "-", "-D", "/dev/stderr",
           "-w", "\n%{http_code}", url] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body, r.stderr


def events_of(p, type_, **match):
    return [e for e in p.events if e["type"] == type_ and all(e.get(k) == v for k, v in match.items())]


def ups(env, path):
    return [r for r in env.upstream_requests() if r["path"] == path]


# ---- allowed and refused -----------------------------------------------------------------


def test_allowed_host_curl_and_urllib(env, proxy):
    p = proxy()
    code, body, _ = curl(p, "http://public.test/curl-ok")
    assert code == 200 and body.startswith("ok GET /curl-ok")
    ev = p.wait_event(lambda e: e["type"] == "net_allowed" and e.get("host") == "public.test")
    assert ev["address"] == "11.1.1.2" and ev["method"] == "GET" and ev["port"] == 80
    assert ev["bytes_in"] > 0 and ev["bytes_out"] > 0 and "duration_ms" in ev
    # The upstream saw an origin-form request with Connection: close, no proxy headers.
    rec = ups(env, "/curl-ok")[0]
    hdrs = {k.lower(): v for k, v in rec["headers"]}
    assert rec["local"] == "11.1.1.2:80" and hdrs["host"] == "public.test"
    assert hdrs["connection"] == "close" and "proxy-connection" not in hdrs

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": p.url, "https": p.url}))
    with opener.open("http://public.test:8080/urllib-ok", timeout=30) as r:
        assert r.status == 200 and r.read().startswith(b"ok GET /urllib-ok")
    # HTTPS through CONNECT: not intercepted (the server's own certificate,
    # verified by the client against the test CA).
    ctx = ssl.create_default_context(cafile=env.ca_pem_path)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": p.url}),
                                         urllib.request.HTTPSHandler(context=ctx))
    with opener.open("https://public.test/urllib-tls", timeout=30) as r:
        assert r.status == 200
    assert ups(env, "/urllib-tls")[0]["tls"] is True
    code, _, _ = curl(p, "https://public.test/curl-tls", "--cacert", env.ca_pem_path)
    assert code == 200
    ev = p.wait_event(lambda e: e["type"] == "net_allowed" and e.get("method") == "CONNECT")
    assert ev["host"] == "public.test" and ev["port"] == 443 and "inspected" not in ev


def test_refused_hosts_ports_methods(env, proxy):
    p = proxy()
    before = len(env.dns_queries())
    for url, why in [("http://other.test/x", "other.test:80 is not in the allow list"),
                     ("http://public.test:8081/x", "public.test:8081 is not in the allow list"),
                     ("http://x.public.test/x", 'denied by "x.public.test"')]:
        code, body, hdrs = curl(p, url)
        assert code == 403, (url, body)
        assert "X-Agentjail-Reason: " + why in hdrs, hdrs
        p.wait_event(lambda e: e["type"] == "net_denied" and why in e.get("reason", ""))
    # A denied name is never looked up.
    names = {q["name"] for q in env.dns_queries()[before:]}
    assert "other.test" not in names and "x.public.test" not in names
    # Positive controls: a sibling of the denied name, and the allowed port.
    assert curl(p, "http://a.public.test/sibling")[0] == 200
    assert curl(p, "http://public.test:8080/port-ok")[0] == 200
    # Method restriction: GET allowed, POST refused, and CONNECT (a tunnel
    # the proxy cannot look into) refused for a method-restricted entry.
    assert curl(p, "http://nonbroker.test/get-ok")[0] == 200
    code, _, hdrs = curl(p, "http://nonbroker.test/post", "-d", "x=1")
    assert code == 403 and "method POST not allowed" in hdrs
    assert not ups(env, "/post")
    ev = p.wait_event(lambda e: e["type"] == "net_denied" and e.get("method") == "POST")
    assert ev["host"] == "nonbroker.test"
    s = p.connect()
    out = eghelp.raw_request(s, b"CONNECT nonbroker.test:443 HTTP/1.1\r\nHost: nonbroker.test:443\r\n\r\n")
    s.close()
    assert out.startswith(b"HTTP/1.1 403")
    # https:// in absolute form is not forwarded in clear.
    s = p.connect()
    out = eghelp.raw_request(s, b"GET https://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n")
    s.close()
    assert out.startswith(b"HTTP/1.1 400")


DENIED_NAMES = [("loop.test", "loopback 127.0.0.1", "127.0.0.1"),
                ("ten.test", "rfc1918 10.0.0.1", "10.0.0.1"),
                ("meta.test", "link_local 169.254.169.254", "169.254.169.254"),
                ("ula.test", "ula fd00:ec2::254", "fd00:ec2::254"),
                ("mapped.test", "ipv4_mapped rfc1918 10.0.0.1", "::ffff:10.0.0.1"),
                ("nat64.test", "nat64 rfc1918 10.0.0.1", "64:ff9b::a00:1"),
                ("own.test", "own_address 11.1.1.1", "11.1.1.1"),
                ("mixed.test", "rfc1918 10.0.0.1", "10.0.0.1")]


def test_deny_floor_names_and_literals(env, proxy):
    p = proxy()
    for name, why, addr in DENIED_NAMES:
        code, body, hdrs = curl(p, "http://%s/floor" % name)
        assert code == 403 and why in hdrs, (name, hdrs)
        ev = p.wait_event(lambda e: e["type"] == "net_denied" and e.get("host") == name)
        assert ev["address"] == addr and why in ev["reason"]
    for lit, why in [("10.0.0.1", "rfc1918"), ("[::ffff:10.0.0.1]", "ipv4_mapped rfc1918")]:
        code, _, hdrs = curl(p, "http://%s/floor-literal" % lit)
        assert code == 403 and why in hdrs, (lit, hdrs)
    # CONNECT is checked the same way.
    s = p.connect()
    out = eghelp.raw_request(s, b"CONNECT meta.test:443 HTTP/1.1\r\n\r\n")
    s.close()
    assert out.startswith(b"HTTP/1.1 403") and b"link_local" in out
    # The traps (reachable from the proxy's namespace) saw nothing.
    assert not [r for r in env.upstream_requests() if r["path"].startswith("/floor")]
    # Positive controls: a public name and a public literal, same servers;
    # an IPv6 upstream.
    assert curl(p, "http://public.test/floor-control")[0] == 200
    assert curl(p, "http://11.1.1.2/floor-literal-control")[0] == 200
    assert curl(p, "http://v6.test/floor-v6-control")[0] == 200
    assert ups(env, "/floor-v6-control")[0]["local"] == "2a00:11::2:80"


def test_allow_ranges_opt_back_in(env, proxy):
    """The trap is reachable: with allow_ranges the same names get through."""
    p = proxy({"allow_ranges": ["10.0.0.0/8", "fd00:ec2::/32"]})
    assert curl(p, "http://ten.test/optin")[0] == 200
    assert curl(p, "http://mapped.test/optin-mapped")[0] == 200
    assert curl(p, "http://ula.test/optin-ula")[0] == 200
    assert ups(env, "/optin")[0]["local"] == "10.0.0.1:80"
    assert ups(env, "/optin-ula")[0]["local"] == "fd00:ec2::254:80"
    # ... and nothing wider.
    assert curl(p, "http://meta.test/optin-meta")[0] == 403


def test_rebinding_never_dials_private(env, proxy):
    p = proxy()
    before = len(env.upstream_requests())
    # The resolver answers the first A query with a public address, then a
    # private one: each request is resolved once, checked, and the checked
    # address is the one dialled.
    assert curl(p, "http://rebind.test/rebind-1")[0] == 200
    code, _, hdrs = curl(p, "http://rebind.test/rebind-2")
    assert code == 403 and "rfc1918 10.0.0.1" in hdrs
    seen = env.upstream_requests()[before:]
    assert [r["local"] for r in seen if r["path"].startswith("/rebind")] == ["11.1.1.2:80"]
    qs = [q for q in env.dns_queries() if q["name"] == "rebind.test" and q["type"] == 1]
    assert len(qs) >= 2  # it did ask twice (once per request), and the second answer was refused


def test_dials_checked_addresses_in_order(env, proxy):
    """A refused first address: the next checked one (no new lookup); none
    answering: 502 and a net_allowed event saying so."""
    p = proxy()
    before = len([q for q in env.dns_queries() if q["name"] == "twoaddr.test"])
    code, body, _ = curl(p, "http://twoaddr.test:8080/second-address")
    assert code == 200, body
    assert ups(env, "/second-address")[0]["local"] == "11.1.1.2:8080"
    ev = p.wait_event(lambda e: e["type"] == "net_allowed" and e.get("host") == "twoaddr.test")
    assert ev["address"] == "11.1.1.2"
    # One lookup (A and AAAA) for the request: the fallback did not resolve again.
    assert len([q for q in env.dns_queries() if q["name"] == "twoaddr.test"]) - before == 2
    code, _, hdrs = curl(p, "http://refused.test:8080/nobody-home")
    assert code == 502 and "could not connect to 11.1.1.3 port 8080" in hdrs
    p.wait_event(lambda e: e["type"] == "net_allowed" and e.get("host") == "refused.test"
                 and "could not connect" in e.get("reason", ""))


# ---- caps ---------------------------------------------------------------------------------


def test_cap_connections(env, proxy):
    p = proxy({"caps": {"max_connections": 2}})
    held = [p.connect(), p.connect()]
    for s in held:
        s.sendall(b"GET http://public.test/hold HTTP/1.1\r\n")  # an unfinished head: held open
    s = p.connect()
    out = eghelp.raw_request(s, b"")
    s.close()
    assert out.startswith(b"HTTP/1.1 503") and b"max_connections" in out
    p.wait_event(lambda e: e["type"] == "net_cap" and "max_connections" in e["reason"])
    for s in held:
        s.close()
    # Positive control: with the held ones gone, a request goes through
    # (the slots are released when the proxy sees the close: retry until then).
    for _ in range(200):
        code = curl(p, "http://public.test/after-cap")[0]
        if code == 200:
            break
        time.sleep(0.05)
    assert code == 200


def test_cap_bytes_in_and_out(env, proxy):
    p = proxy({"caps": {"max_bytes_in": 300000, "max_bytes_out": 200000}})
    assert curl(p, "http://public.test/bytes/1000")[0] == 200  # positive control
    r = subprocess.run(["curl", "-sS", "-x", p.url, "--noproxy", "", "-o", "-", "http://public.test/bytes/5000000"],
                       capture_output=True, timeout=60)
    assert r.returncode != 0 and len(r.stdout) < 300000
    p.wait_event(lambda e: e["type"] == "net_cap" and e["reason"] == "cap max_bytes_in")
    # The cap is per run: the next request is refused at once.
    code, _, hdrs = curl(p, "http://public.test/after-bytes")
    assert code == 503 and "max_bytes_in" in hdrs
    # Bytes out: a body larger than the cap never fully reaches the upstream.
    p2 = proxy({"caps": {"max_bytes_out": 100000}})
    s = p2.connect()
    body = b"y" * 500000
    try:
        eghelp.raw_request(s, b"POST http://public.test/big-post HTTP/1.1\r\nHost: public.test\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    s.close()
    p2.wait_event(lambda e: e["type"] == "net_cap" and e["reason"] == "cap max_bytes_out")
    assert all(r["body_len"] < 100000 for r in ups(env, "/big-post"))


def test_cap_duration_and_rate(env, proxy):
    p = proxy({"caps": {"max_connection_seconds": 1, "max_requests_per_second": 1}})
    s = p.connect()
    out = eghelp.raw_request(s, b"CONNECT public.test:443 HTTP/1.1\r\n\r\n", timeout=30)
    s.close()
    # The tunnel opened, then was closed by the cap (not left hanging).
    assert out.startswith(b"HTTP/1.1 200")
    p.wait_event(lambda e: e["type"] == "net_cap" and e["reason"] == "cap max_connection_seconds")
    # Requests per second: a burst on parallel connections.
    socks = [p.connect() for _ in range(12)]
    t0 = time.monotonic()
    for s in socks:
        s.sendall(b"GET http://public.test/rate HTTP/1.1\r\nHost: public.test\r\n\r\n")
    outs = [eghelp.raw_request(s, b"") for s in socks]
    elapsed = time.monotonic() - t0
    for s in socks:
        s.close()
    ok = sum(o.startswith(b"HTTP/1.1 200") for o in outs)
    limited = sum(o.startswith(b"HTTP/1.1 429") for o in outs)
    assert ok + limited == 12
    # At most 1 per second window started, whatever the machine's speed;
    # 12 requests inside fewer than 11 windows must meet a refusal.
    assert ok <= int(elapsed) + 2
    if elapsed < 10:
        assert limited >= 1
    p.wait_event(lambda e: e["type"] == "net_cap" and "max_requests_per_second" in e["reason"])


# ---- brokering ----------------------------------------------------------------------------


def broker_config(env):
    return {"secrets": [{"id": "gh", "hosts": ["api.brokered.test", "bad.brokered.test"],
                         "header": "Authorization", "format": "Bearer {}", "value": REAL,
                         "placeholder": PLACE}],
            "upstream_ca_pem": env.ca_pem}


def test_brokering(env, proxy, tmp_path):
    p = proxy(broker_config(env))
    assert "BEGIN CERTIFICATE" in p.ca_pem
    ca = tmp_path / "run-ca.pem"
    ca.write_text(p.ca_pem)
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(ca)], capture_output=True,
                          text=True, check=True).stdout
    assert "Permitted:" in text and "DNS:api.brokered.test" in text and "CA:TRUE" in text
    assert "Excluded:" in text and "IP:0.0.0.0/0.0.0.0" in text
    # HTTPS to the brokered host: terminated with the run CA, re-originated
    # to the real upstream (verified against upstream_ca_pem); the header
    # gets the real value there and only there.
    code, body, _ = curl(p, "https://api.brokered.test/brokered", "--cacert", str(ca),
                         "-H", "Authorization: Bearer " + PLACE, "-H", "X-Other: " + PLACE)
    assert code == 200, body
    rec = ups(env, "/brokered")[0]
    hdrs = dict(rec["headers"])
    assert rec["tls"] and hdrs["Authorization"] == "Bearer " + REAL
    assert hdrs["X-Other"] == PLACE  # another header: unchanged
    p.wait_event(lambda e: e["type"] == "secret_used" and e["secret"] == "gh")
    p.wait_event(lambda e: e["type"] == "secret_misdirected" and e["where"] == "header X-Other")
    ev = p.wait_event(lambda e: e["type"] == "net_allowed" and e.get("inspected"))
    assert ev["method"] == "GET" and ev["tunnel"] == "CONNECT"
    # Plain HTTP to the brokered host is replaced too.
    assert curl(p, "http://api.brokered.test/brokered-plain", "-H", "Authorization: Bearer " + PLACE)[0] == 200
    assert dict(ups(env, "/brokered-plain")[0]["headers"])["Authorization"] == "Bearer " + REAL
    # The placeholder sent to a host that is not the secret's: unchanged, and an event.
    n = len(p.events)
    assert curl(p, "http://nonbroker.test/misdirected", "-H", "Authorization: Bearer " + PLACE)[0] == 200
    assert dict(ups(env, "/misdirected")[0]["headers"])["Authorization"] == "Bearer " + PLACE
    ev = p.wait_event(lambda e: e["type"] == "secret_misdirected" and e["host"] == "nonbroker.test", start=n)
    assert ev["secret"] == "gh"
    # The upstream's certificate is verified: bad.brokered.test is not in
    # its certificate, so the proxy refuses to send anything there.
    code, _, hdrs = curl(p, "https://bad.brokered.test/bad-cert", "--cacert", str(ca),
                         "-H", "Authorization: Bearer " + PLACE)
    assert code != 200 and not ups(env, "/bad-cert")
    # A tunnel to a host that is not brokered is not intercepted: the run CA does not verify it.
    code, _, _ = curl(p, "https://public.test/not-intercepted", "--cacert", str(ca))
    assert code == 0 and not ups(env, "/not-intercepted")
    assert curl(p, "https://public.test/not-intercepted2", "--cacert", env.ca_pem_path)[0] == 200
    # Suspend: the next brokered request goes out without the credential.
    n = len(p.events)
    p.control("suspend")
    ev = p.wait_event(lambda e: e["type"] == "credentials_suspended", start=n)
    assert ev["secrets"] == ["gh"]
    code, _, _ = curl(p, "https://api.brokered.test/after-suspend", "--cacert", str(ca),
                      "-H", "Authorization: Bearer " + PLACE)
    assert code == 200
    assert dict(ups(env, "/after-suspend")[0]["headers"])["Authorization"] == "Bearer " + PLACE
    rc = p.stop()
    assert rc == 0
    # The real value appears in no event and nowhere on stderr.
    assert REAL not in json.dumps(p.events) and REAL not in p.stderr()


def test_placeholder_in_a_plain_request_body(env, proxy, tmp_path):
    """A placeholder in the body of a plain-HTTP request to a host that is
    not its secret's: sent as is, and a secret_misdirected event ("body"),
    also past the first reads of a large body and in a chunked one. Controls:
    the same body without it, and with it to the secret's own host: no
    event."""
    p = proxy(broker_config(env))

    def post(url, body, *more):
        f = tmp_path / "body"
        f.write_bytes(body)
        return curl(p, url, "--data-binary", "@" + str(f), *more)

    def body_events(host):
        return [e for e in p.events if e["type"] == "secret_misdirected" and e["where"] == "body" and
                e["host"] == host]

    # Control: no placeholder, no event (a request's events all come before
    # its closing net_allowed).
    n = len(p.events)
    assert post("http://public.test/clean", b"token=nothing-here")[0] == 200
    p.wait_event(lambda e: e["type"] == "net_allowed" and e["host"] == "public.test", start=n)
    assert not body_events("public.test")
    # Control: to the secret's own host the body goes as is, no event.
    n = len(p.events)
    assert post("http://api.brokered.test/own", b"token=" + PLACE.encode())[0] == 200
    p.wait_event(lambda e: e["type"] == "net_allowed" and e["host"] == "api.brokered.test", start=n)
    assert not body_events("api.brokered.test")
    assert ups(env, "/own")[0]["body_len"] == len("token=" + PLACE)
    # Elsewhere: the event, the body unchanged.
    n = len(p.events)
    assert post("http://public.test/leak", b"token=" + PLACE.encode())[0] == 200
    ev = p.wait_event(lambda e: e["type"] == "secret_misdirected" and e["where"] == "body", start=n)
    assert ev["secret"] == "gh" and ev["host"] == "public.test" and ev["method"] == "POST", ev
    assert ups(env, "/leak")[0]["body_len"] == len("token=" + PLACE)
    # Far into a large body (past the first reads), and in a chunked one.
    n = len(p.events)
    assert post("http://public.test/leak-big", b"x" * 700001 + PLACE.encode() + b"y" * 3)[0] == 200
    p.wait_event(lambda e: e["type"] == "secret_misdirected" and e["where"] == "body", start=n)
    n = len(p.events)
    assert post("http://public.test/leak-chunked", b"a=" + PLACE.encode(), "-H", "Transfer-Encoding: chunked")[0] \
        == 200
    p.wait_event(lambda e: e["type"] == "secret_misdirected" and e["where"] == "body", start=n)
    assert REAL not in json.dumps(p.events)


def test_handoff_serves_handed_sockets_and_refuses_others(env, proxy):
    """--handoff-fd, as agentjail's relay uses it: a connected stream socket
    handed over is served like an accepted one; anything else handed over
    is closed; the hand-off's EOF leaves the proxy serving its listen
    socket."""
    p = proxy(handoff=True)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    # Not a stream socket: closed by the proxy, nothing served.
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    socket.send_fds(p.handoff, [b"\0"], [udp.fileno()])
    udp.close()
    # A connection, handed over as the relay does: the client talks to the proxy.
    cli = socket.create_connection(srv.getsockname(), timeout=20)
    acc, _ = srv.accept()
    socket.send_fds(p.handoff, [b"\0"], [acc.fileno()])
    acc.close()
    out = eghelp.raw_request(cli, b"GET http://public.test/handed HTTP/1.1\r\nHost: public.test\r\n\r\n")
    cli.close()
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert ups(env, "/handed")
    p.wait_event(lambda e: e["type"] == "net_allowed" and e["host"] == "public.test")
    # The hand-off's end: the proxy goes on serving its listen socket.
    p.handoff.close()
    assert curl(p, "http://public.test/after-handoff")[0] == 200
    srv.close()


def test_brokering_urllib_and_no_ca_without_secrets(env, proxy, tmp_path):
    p = proxy(broker_config(env))
    ca = tmp_path / "run-ca.pem"
    ca.write_text(p.ca_pem)
    ctx = ssl.create_default_context(cafile=str(ca))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": p.url}),
                                         urllib.request.HTTPSHandler(context=ctx))
    req = urllib.request.Request("https://api.brokered.test/urllib-brokered",
                                 headers={"Authorization": "Bearer " + PLACE})
    with opener.open(req, timeout=30) as r:
        assert r.status == 200
    assert dict(ups(env, "/urllib-brokered")[0]["headers"])["Authorization"] == "Bearer " + REAL
    # Without secrets: nothing on the CA fd, nothing terminated.
    p2 = proxy()
    assert p2.ca_pem == ""


def make_pip_index(www):
    """A simple index with one pure-Python wheel (METADATA, WHEEL, RECORD)."""
    import zipfile
    os.makedirs(os.path.join(www, "files"), exist_ok=True)
    whl = "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(www, "files", whl), "w") as z:
        z.writestr("demo_pkg/__init__.py", "X = 1\n")
        z.writestr("demo_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        z.writestr("demo_pkg-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("demo_pkg-1.0.dist-info/RECORD", "")
    for d, body in [("simple", '<a href="demo-pkg/">demo-pkg</a>'),
                    ("simple/demo-pkg", '<a href="../../files/%s">%s</a>' % (whl, whl))]:
        os.makedirs(os.path.join(www, d), exist_ok=True)
        with open(os.path.join(www, d, "index.html"), "w") as f:
            f.write("<html><body>%s</body></html>" % body)
    return whl


def make_git_repo(www):
    src = os.path.join(www, "src-repo")
    git = lambda *a, cwd=None: subprocess.run(["git"] + list(a), cwd=cwd, check=True, capture_output=True,
                                              env={"PATH": os.environ["PATH"], "HOME": www,
                                                   "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    git("init", "-q", "-b", "main", src)
    with open(os.path.join(src, "README"), "w") as f:
        f.write("through the egress proxy\n")
    git("add", "README", cwd=src)
    git("commit", "-q", "-m", "one", cwd=src)
    git("clone", "-q", "--bare", src, os.path.join(www, "git", "repo.git"))


def test_real_clients_requests_pip_git(env, proxy, tmp_path):
    """python3-requests, pip download from a simple index, git clone over
    smart HTTP: through a CONNECT tunnel, and git also through the
    brokering path with the placeholder in http.extraHeader."""
    if not os.path.exists(os.path.join(env.www, "git", "repo.git")):
        make_pip_index(env.www)
        make_git_repo(env.www)
    p = proxy(broker_config(env))
    ca = tmp_path / "run-ca.pem"
    ca.write_text(p.ca_pem)
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    proxied = dict(clean, https_proxy=p.url, http_proxy=p.url, HTTPS_PROXY=p.url, HTTP_PROXY=p.url)
    # requests (Debian's python3-requests, with /usr/bin/python3)
    code = ("import requests, sys; r = requests.get('https://public.test/requests-ok', verify=sys.argv[1], "
            "timeout=30); print(r.status_code)")
    r = subprocess.run(["/usr/bin/python3", "-c", code, env.ca_pem_path], capture_output=True, text=True,
                       env=proxied, timeout=60)
    if "No module named 'requests'" in r.stderr:
        must_skip("python3-requests is not installed (scripts/deps.sh test)")
    assert r.stdout.strip() == "200", r.stderr
    assert ups(env, "/requests-ok")[0]["tls"]
    # pip download from the simple index, over the tunnel
    r = subprocess.run(["/usr/bin/python3", "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                        "--no-cache-dir", "--index-url", "https://public.test/simple/", "--cert", env.ca_pem_path,
                        "-d", str(tmp_path / "dl"), "demo-pkg"], capture_output=True, text=True, env=proxied,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.listdir(tmp_path / "dl") == ["demo_pkg-1.0-py3-none-any.whl"]
    # git clone over smart HTTP, over the tunnel
    r = subprocess.run(["git", "clone", "-q", "https://public.test/git/repo.git", str(tmp_path / "c1")],
                       capture_output=True, text=True, env=dict(proxied, GIT_SSL_CAINFO=env.ca_pem_path),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c1" / "README").read_text() == "through the egress proxy\n"
    # ... and to the brokered host: the proxy terminates TLS (the run CA)
    # and the upstream sees the real token.
    n = len(env.upstream_requests())
    r = subprocess.run(["git", "-c", "http.extraHeader=Authorization: Bearer " + PLACE, "clone", "-q",
                        "https://api.brokered.test/git/repo.git", str(tmp_path / "c2")],
                       capture_output=True, text=True, env=dict(proxied, GIT_SSL_CAINFO=str(ca)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c2" / "README").exists()
    seen = [dict(x["headers"]).get("Authorization") for x in env.upstream_requests()[n:]
            if x["path"].startswith("/git/")]
    assert seen and all(v == "Bearer " + REAL for v in seen), seen
    # The client's token is still the placeholder: nothing of the real value came back.
    assert REAL not in r.stdout + r.stderr


# ---- robustness ---------------------------------------------------------------------------


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fds_come_back(p, fds0):
    """The proxy's fds are back to fds0: closed connections are released once it sees them."""
    for _ in range(100):
        if fd_count(p.pid()) <= fds0:
            break
        time.sleep(0.05)
    assert fd_count(p.pid()) <= fds0


def test_malformed_huge_slow_abrupt(env, proxy):
    p = proxy()
    fds0 = fd_count(p.pid())
    cases = [
        (b"GARBAGE\r\n\r\n", b"HTTP/1.1 400"),
        (b"GET http://public.test/ HTTP/9.9\r\n\r\n", b"HTTP/1.1 505"),
        (b"GET /relative HTTP/1.1\r\nHost: public.test\r\n\r\n", b"HTTP/1.1 400"),
        (b"GET http://pub lic.test/ HTTP/1.1\r\n\r\n", b"HTTP/1.1 400"),
        (b"CONNECT public.test HTTP/1.1\r\n\r\n", b"HTTP/1.1 400"),
        (b"GET http://public.test/ HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n", b"HTTP/1.1 431"),
        (b"GET http://public.test/ HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(200)) + b"\r\n",
         b"HTTP/1.1 431"),
        (b"POST http://public.test/smuggle HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
         b"HTTP/1.1 400"),
    ]
    for req, want in cases:
        s = p.connect()
        try:
            out = eghelp.raw_request(s, req)
        except (BrokenPipeError, ConnectionResetError):
            out = b"(reset)"
        s.close()
        assert out.startswith(want), (req[:60], out[:200])
    # Targets: no path, a query without a path, a fragment (never sent).
    for req, path in [(b"GET http://public.test HTTP/1.1\r\n\r\n", "/"),
                      (b"GET http://public.test?q=target-1 HTTP/1.1\r\n\r\n", "/?q=target-1"),
                      (b"GET http://public.test/t2?x=1#frag HTTP/1.1\r\n\r\n", "/t2?x=1")]:
        s = p.connect()
        assert eghelp.raw_request(s, req).startswith(b"HTTP/1.1 200")
        s.close()
        assert ups(env, path), path
    # A head trickled in small pieces still parses.
    s = p.connect()
    for piece in [b"GET http://pub", b"lic.test/trick", b"le HTTP/1.1\r", b"\nHost: public.test\r\n", b"\r", b"\n"]:
        s.sendall(piece)
    assert eghelp.raw_request(s, b"").startswith(b"HTTP/1.1 200")
    s.close()
    # A request pipelined behind an allowed one is not carried to that upstream.
    s = p.connect()
    out = eghelp.raw_request(s, b"GET http://public.test/first HTTP/1.1\r\nHost: public.test\r\n\r\n"
                                b"GET http://other.test/second HTTP/1.1\r\nHost: other.test\r\n\r\n")
    s.close()
    assert out.startswith(b"HTTP/1.1 200") and not ups(env, "/second")
    # Abrupt disconnects: mid-head, mid-body, mid-tunnel, before the answer.
    for req in [b"GET http://public.test/abrupt HTTP/1.1\r\nHo",
                b"POST http://public.test/abrupt-body HTTP/1.1\r\nContent-Length: 1000\r\n\r\nabc",
                b"CONNECT public.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01",
                b"GET http://public.test/bytes/10000000 HTTP/1.1\r\n\r\n"]:
        s = p.connect()
        s.sendall(req)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST
    # Slow clients: one holding a half-sent head, one not reading a large
    # response; others are served meanwhile.
    slow = p.connect()
    slow.sendall(b"GET http://public.test/slow HTTP/1.1\r\n")
    stuck = p.connect()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"GET http://public.test/bytes/20000000 HTTP/1.1\r\nHost: public.test\r\n\r\n")
    for i in range(5):
        assert curl(p, "http://public.test/meanwhile-%d" % i)[0] == 200
    slow.close()
    stuck.close()
    # Still alive, still serving, and the fds come back (closed connections
    # are released once the proxy sees them: a few retries at most).
    assert p.proc.poll() is None
    assert curl(p, "http://public.test/after-abuse")[0] == 200
    fds_come_back(p, fds0)


def test_a_client_still_sending_reads_its_refusal(env, proxy):
    """A refused request whose client is still sending (a 1 MiB head, sent
    in one go, refused once 64 KiB arrived): the proxy reads and drops the
    rest before it closes, so the client's send completes and it reads the
    431 and an orderly end, not a reset. Bounded: a client that keeps
    sending past 4 MiB is cut off, and the proxy's fds come back."""
    p = proxy()
    fds0 = fd_count(p.pid())
    for size in (100000, 1 << 20, 3 << 20):
        s = p.connect()
        out = eghelp.raw_request(s, b"GET http://public.test/ HTTP/1.1\r\nX: " + b"a" * size + b"\r\n\r\n")
        s.close()
        assert out.startswith(b"HTTP/1.1 431") and b"exceeds 64 KiB" in out, (size, out[:200])
    # The bound: a client that never stops is cut off (a reset or EPIPE while it sends).
    s = p.connect()
    s.settimeout(20)
    sent, cut = 0, False
    try:
        s.sendall(b"GET http://public.test/ HTTP/1.1\r\nX: ")
        while sent < (64 << 20):
            s.sendall(b"a" * 65536)
            sent += 65536
    except (BrokenPipeError, ConnectionResetError):
        cut = True
    s.close()
    assert cut and sent < (32 << 20), sent
    # The control: the proxy still serves, and its fds come back.
    assert curl(p, "http://public.test/after-refusals")[0] == 200
    fds_come_back(p, fds0)


def test_out_of_fds_recovers(env, proxy):
    """RLIMIT_NOFILE reached: accepting pauses (no spin, no crash) and
    resumes once connections close."""
    p = proxy(nofile=40)
    held = []
    for _ in range(40):
        s = p.connect()
        s.sendall(b"GET http://public.test/held HTTP/1.1\r\n")
        held.append(s)
    # Beyond the limit: the connection waits in the backlog (not answered yet).
    extra = p.connect()
    extra.sendall(b"GET http://public.test/after-emfile HTTP/1.1\r\nHost: public.test\r\n\r\n")
    for s in held:
        s.close()
    out = eghelp.raw_request(extra, b"")
    extra.close()
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert p.proc.poll() is None


def test_least_privilege_and_exit(env, proxy):
    p = proxy()
    status = open("/proc/%d/status" % p.pid()).read()
    assert "\nNoNewPrivs:\t1" in status and "\nSeccomp:\t2" in status
    # Control EOF: exit 0 at once, even with a connection open.
    s = p.connect()
    s.sendall(b"GET http://public.test/x HTTP/1.1\r\n")
    assert p.stop() == 0
    s.close()


@pytest.mark.parametrize("cfg,msg", [
    ({"allow": [], "bogus": 1}, 'unknown key "bogus"'),
    ({"allow": ["bad host"]}, '"allow"[0]'),
    ({"allow": [], "allow_ranges": ["10.0.0.1/8"]}, "host bits"),
    ({"allow": [], "caps": {"max_connections": -1}}, "caps.max_connections"),
    ({"allow": [], "secrets": [{"id": "x", "hosts": ["h.test"], "header": "Authorization",
                                "value": "SECRET-VALUE-9", "placeholder": "short"}]}, "placeholder"),
    ({"allow": [], "secrets": [{"id": "x", "hosts": ["10.1.2.3"], "header": "Authorization",
                                "value": "SECRET-VALUE-9", "placeholder": "placeholder-1"}]}, "not an IP address"),
])
def test_bad_config_exits_2(cfg, msg):
    """No namespaces needed: runs as any user."""
    if not os.path.exists(eghelp.egress_bin()):
        must_skip("agentjail-egress not built at %s" % eghelp.egress_bin())
    r_, w_ = os.pipe()
    os.write(w_, json.dumps(cfg).encode())
    os.close(w_)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fds = [r_, lsock.fileno()] + [os.open("/dev/null", os.O_RDWR) for _ in range(3)]
    r = subprocess.run([eghelp.egress_bin(), "--config-fd", str(fds[0]), "--listen-fd", str(fds[1]),
                        "--events-fd", str(fds[2]), "--control-fd", str(fds[3]), "--ca-out-fd", str(fds[4])],
                       pass_fds=fds, capture_output=True, text=True, timeout=30)
    for fd in fds:
        if fd != lsock.fileno():
            os.close(fd)
    lsock.close()
    assert r.returncode == 2 and msg in r.stderr, (r.returncode, r.stderr)
    assert "SECRET-VALUE-9" not in r.stderr


def test_many_requests_no_growth(env, proxy):
    heavy_only("10,000 requests through the proxy")
    p = proxy()

    def rss():
        for line in open("/proc/%d/status" % p.pid()):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    def batch(n, path):
        for i in range(n):
            s = p.connect()
            out = eghelp.raw_request(s, b"GET http://public.test/%s HTTP/1.1\r\nHost: public.test\r\n\r\n"
                                     % path.encode())
            s.close()
            assert out.startswith(b"HTTP/1.1 200")
    batch(500, "warm")
    fds0, rss0 = fd_count(p.pid()), rss()
    batch(10000, "many")
    fds_come_back(p, fds0)
    assert rss() < rss0 + 8192, (rss0, rss())


def test_setup_failure_exits_1():
    """A listen fd that is not listening (a setup failure, not a bad config): exit 1, one line."""
    if not os.path.exists(eghelp.egress_bin()):
        must_skip("agentjail-egress not built at %s" % eghelp.egress_bin())
    r_, w_ = os.pipe()
    os.write(w_, json.dumps({"allow": ["public.test"], "resolver": "127.0.0.1:53"}).encode())
    os.close(w_)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound nowhere, not listening
    fds = [r_, sock.fileno()] + [os.open("/dev/null", os.O_RDWR) for _ in range(3)]
    r = subprocess.run([eghelp.egress_bin(), "--config-fd", str(fds[0]), "--listen-fd", str(fds[1]),
                        "--events-fd", str(fds[2]), "--control-fd", str(fds[3]), "--ca-out-fd", str(fds[4])],
                       pass_fds=fds, capture_output=True, text=True, timeout=30)
    for fd in fds:
        if fd != sock.fileno():
            os.close(fd)
    sock.close()
    assert r.returncode == 1 and "not a listening socket" in r.stderr, (r.returncode, r.stderr)
    # Positive control: the same config with a listening socket starts, and exits 0 on control EOF.
    r_, w_ = os.pipe()
    os.write(w_, json.dumps({"allow": ["public.test"], "resolver": "127.0.0.1:53"}).encode())
    os.close(w_)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind("\0ajeg-%d" % os.getpid())
    lsock.listen(1)
    ctl_r, ctl_w = os.pipe()
    ca_r, ca_w = os.pipe()
    ev = os.open("/dev/null", os.O_RDWR)
    fds = [r_, lsock.fileno(), ev, ctl_r, ca_w]
    proc = subprocess.Popen([eghelp.egress_bin(), "--config-fd", str(r_), "--listen-fd", str(lsock.fileno()),
                             "--events-fd", str(ev), "--control-fd", str(ctl_r), "--ca-out-fd", str(ca_w)],
                            pass_fds=fds, stderr=subprocess.PIPE, text=True)
    for fd in (r_, ev, ctl_r, ca_w):
        os.close(fd)
    assert os.read(ca_r, 100) == b""  # no secrets: the CA fd closes empty, once confined
    os.close(ca_r)
    os.close(ctl_w)
    assert proc.wait(30) == 0, proc.stderr.read()
    proc.stderr.close()
    lsock.close()
