#!/usr/bin/python3
"""A minimal stand-in for agentjail-egress, for the sandbox side's tests only
while the real proxy (src/egress/) is not on main: it speaks the contract's
fds (docs/network.md, /work/briefs/egress-contract.md) and nothing more.

  fd 3 config (JSON, read to EOF), fd 4 listening unix socket, fd 5 events
  out, fd 6 control in ("suspend", EOF: exit), fd 7 CA out (PEM when the
  config has secrets).

Per connection: one HTTP/1.1 proxy request. CONNECT host:port or an
absolute-form http:// request; the host (any name) is dialled at 127.0.0.1
(the tests' upstreams listen there); the allow list is matched by exact
host, *.domain or host:port. A brokered secret's placeholder in its header
is replaced by the value for its hosts, unless suspended. Each decision is
an event. Not a proxy for anything but these tests.
"""
import json
import os
import select
import socket
import subprocess
import sys
import threading

LOCK = threading.Lock()
STATE = {"suspended": False}


def event(**kw):
    line = (json.dumps(kw) + "\n").encode()
    with LOCK:
        os.write(5, line)


def allowed(cfg, host, port):
    def match(e):
        e = e.split(" ")[-1]
        h, _, p = e.rpartition(":") if ":" in e else (e, "", "")
        if p and int(p) != port:
            return False
        if h.startswith("*."):
            return host.endswith(h[1:])
        return host == h
    if any(match(e) for e in cfg.get("deny", [])):
        return False
    return any(match(e) for e in cfg.get("allow", []))


def pipe(a, b):
    try:
        while True:
            r, _, _ = select.select([a, b], [], [], 30)
            if not r:
                return
            for s in r:
                d = s.recv(65536)
                if not d:
                    return
                (b if s is a else a).sendall(d)
    except OSError:
        return


def handle(cfg, c):
    try:
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            port = int(port)
            path = None
        else:
            assert target.startswith("http://")
            hp, _, path = target[7:].partition("/")
            path = "/" + path
            host, _, port = hp.partition(":")
            port = int(port or 80)
        if not allowed(cfg, host, port):
            event(type="net_denied", host=host, port=port, method=method, reason="not in network.allow")
            c.sendall(b"HTTP/1.1 403 Forbidden\r\nX-Agentjail-Reason: not allowed\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            socket.inet_aton(host)
            addr = host  # a literal address is dialled as it is
        except OSError:
            addr = "127.0.0.1"
        u = socket.create_connection((addr, port), timeout=10)
        event(type="net_allowed", host=host, port=port, address=addr, method=method)
        if method == "CONNECT":
            c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                u.sendall(rest)
        else:
            out = ["%s %s HTTP/1.1" % (method, path)]
            for h in lines[1:]:
                name, _, val = h.partition(":")
                if name.lower().startswith("proxy-"):
                    continue
                for s in cfg.get("secrets", []):
                    if name.strip().lower() != s["header"].lower() or s["placeholder"] not in val:
                        continue
                    if host in s["hosts"] and not STATE["suspended"]:
                        val = val.replace(s["placeholder"], s["value"])
                        event(type="secret_used", host=host, port=port, secret=s["id"])
                    elif host not in s["hosts"]:
                        event(type="secret_misdirected", host=host, port=port, secret=s["id"])
                out.append("%s:%s" % (name, val))
            u.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rest)
        pipe(c, u)
        u.close()
    except Exception as e:  # noqa: BLE001 - a stand-in: report and go on
        sys.stderr.write("standin: %r\n" % e)
    finally:
        c.close()


def control():
    f = os.fdopen(6, "rb", buffering=0)
    buf = b""
    while True:
        d = f.read(64)
        if not d:
            os._exit(0)
        buf += d
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            if line == b"suspend":
                STATE["suspended"] = True
                event(type="credentials_suspended", secrets=[s["id"] for s in CFG.get("secrets", [])])


def main():
    global CFG
    data = b""
    while True:
        d = os.read(3, 65536)
        if not d:
            break
        data += d
    os.close(3)
    CFG = json.loads(data)
    known = {"run_id", "allow", "deny", "allow_ranges", "resolver", "caps", "secrets", "ca_validity_seconds"}
    if set(CFG) - known:
        sys.stderr.write("unknown keys: %s\n" % sorted(set(CFG) - known))
        sys.exit(2)
    if os.environ.get("STANDIN_DUMP"):
        pass
    if CFG.get("secrets"):
        # (Its filesystem view has no /tmp: the key goes nowhere, the
        # certificate to stdout.)
        p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-nodes", "-keyout", "/dev/null", "-out", "-", "-days", "1", "-subj",
                            "/CN=agentjail standin CA"], check=True, capture_output=True)
        os.write(7, p.stdout)
    os.close(7)
    threading.Thread(target=control, daemon=True).start()
    ls = socket.socket(fileno=4)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=handle, args=(CFG, c), daemon=True).start()


CFG = {}
main()
