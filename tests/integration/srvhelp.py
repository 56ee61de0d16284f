"""The test server of the test_server*.py files: one real `agentjail serve`
with a temp config and store, tenants "a" and "b", driven over real HTTP
(a loopback port, a unix socket, or HTTPS checked against a test CA).
Not a test module (pytest collects test_*.py only)."""
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time

import conftest
from conftest import wait_for

TOKEN_A, TOKEN_B = "token-of-tenant-a", "token-of-tenant-b"
TOKENS = {"a": TOKEN_A, "b": TOKEN_B}
_DEFAULT = object()


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Server:
    """One `agentjail serve` process; stderr goes to a file.

    extra: top-level config keys; tenants: each tenant's own keys beside its
    token ({"a": {"max_runs": 1}}); store: another server's store (a
    restart); tls_ca: speak HTTPS and verify the server against this file.
    bin: the binary to start (default: conftest's AJ_BIN, read at start so
    that a test may point it at a wrapper)."""

    def __init__(self, tmp, extra=None, listen="127.0.0.1:0", store=None, tenants=None, tls_ca=None, bin=None):
        self.tmp = tmp
        self.tls_ca = tls_ca
        self.store = store or os.path.join(tmp, "state", "runs.db")
        ts = {n: dict({"token_sha256": sha(TOKENS[n])}, **((tenants or {}).get(n, {}))) for n in TOKENS}
        cfg = {"listen": listen, "store": self.store, "tenants": ts}
        cfg.update(extra or {})
        self.config = os.path.join(tmp, "server.json")
        with open(self.config, "w") as f:
            json.dump(cfg, f, indent=2)
        self.errpath = os.path.join(tmp, "server.err.%d" % time.monotonic_ns())
        self.errf = open(self.errpath, "w")
        self.proc = subprocess.Popen([bin or conftest.AJ_BIN, "serve", "--config", self.config],
                                     stdout=subprocess.DEVNULL, stderr=self.errf)
        # Generous: warm pools are prepared before "ready", slow under ASan
        # or in a loaded CI; a server that never gets there is killed, not left.
        ready = wait_for(lambda: "serve: ready" in self.err() or self.proc.poll() is not None, 120)
        if not ready or self.proc.poll() is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.errf.close()
            raise AssertionError("server did not start: " + self.err())
        m = re.search(r"listening on (unix:\S+|[0-9.]+:(\d+))", self.err())
        assert m, self.err()
        self.unix = m.group(1)[5:] if m.group(1).startswith("unix:") else None
        self.port = int(m.group(2)) if not self.unix else None

    def err(self):
        with open(self.errpath) as f:
            return f.read()

    def conn(self, timeout=60):
        if self.unix:
            return UnixConnection(self.unix, timeout=timeout)
        if self.tls_ca:
            ctx = ssl.create_default_context(cafile=self.tls_ca)  # verifies the chain and the name
            return http.client.HTTPSConnection("localhost", self.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, token=TOKEN_A, raw=None, timeout=60, tenant=_DEFAULT):
        """(status, response, JSON or text). The bearer token is token, or
        that of tenant ("a", "b") when given; None: no Authorization."""
        if tenant is not _DEFAULT:
            token = TOKENS[tenant] if tenant else None
        c = self.conn(timeout)
        headers = {}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        resp = c.getresponse()
        text = resp.read().decode()
        c.close()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, resp, (json.loads(text) if ctype.startswith("application/json") else text)

    def run(self, body, token=TOKEN_A, tenant=_DEFAULT):
        return self.request("POST", "/v1/runs", body, token=token, tenant=tenant)

    def metrics(self):
        status, _, text = self.request("GET", "/metrics", token=None)
        assert status == 200
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = int(float(value)) if float(value).is_integer() else float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.errf.close()
        return rc


def serving(tmp, before=None, check=None):
    """The body of a `server` fixture (`yield from serving(tmp)`): yields
    start(**kw), which makes a Server in tmp (before(kw) first: it may skip
    the test or change kw); afterwards every server still running is
    stopped and must exit 0, and check(server) runs on each."""
    servers = []

    def start(**kw):
        if before:
            before(kw)
        s = Server(tmp, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.err()
        if check:
            check(s)
