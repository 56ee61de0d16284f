#!/usr/bin/env python3
"""Upstream HTTP/HTTPS servers for the egress tests, run inside the test's
"upstream" network namespace.

Usage: upstream.py CONFIG_JSON   (prints "ready")
  {"log": FILE, "http": ["IP:PORT", ...], "https": ["IP:PORT", ...],
   "cert": PEM, "key": PEM}

Every request (and every bare connection) is logged as one JSON line:
{"local": "IP:PORT", "tls": bool, "method", "path", "headers": [[k, v]...],
 "body_len"}. Responses never echo headers (a credential echoed back would
reach the sandbox: the test reads the log instead).
Paths: /bytes/N streams N bytes; /simple/... and /files/... are files under
"www" (a pip simple index); /git/... is git smart HTTP (git http-backend)
over the bare repositories in www/git; anything else answers "ok PATH".
"""
import json
import os
import socket
import subprocess
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = None
CFG = {}
LOCK = threading.Lock()


def log(rec):
    with LOCK:
        LOG.write(json.dumps(rec) + "\n")
        LOG.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _rec(self, body_len):
        local = self.connection.getsockname()
        log({"local": "%s:%d" % (local[0], local[1]), "tls": isinstance(self.connection, ssl.SSLSocket),
             "method": self.command, "path": self.path, "headers": list(self.headers.items()),
             "body_len": body_len})

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self._rec(len(body))
        www = CFG.get("www")
        if www and self.path.startswith("/git/"):
            return self._git(body)
        if www and (self.path.startswith("/simple/") or self.path.startswith("/files/")):
            return self._static(www)
        if self.path.startswith("/bytes/"):
            size = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "HEAD":
                return
            chunk = b"x" * 65536
            left = size
            try:
                while left > 0:
                    k = min(left, len(chunk))
                    self.wfile.write(chunk[:k])
                    left -= k
            except OSError:
                pass
            return
        out = ("ok %s %s %d\n" % (self.command, self.path, len(body))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def _static(self, www):
        rel = self.path.split("?", 1)[0].lstrip("/")
        full = os.path.realpath(os.path.join(www, rel))
        if full.endswith("/") or os.path.isdir(full):
            full = os.path.join(full, "index.html")
        if not full.startswith(os.path.realpath(www) + "/") or not os.path.isfile(full):
            self.send_error(404)
            return
        data = open(full, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if full.endswith(".html") else "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _git(self, body):
        """Smart HTTP through git http-backend (CGI)."""
        path, _, query = self.path.partition("?")
        env = {"GIT_PROJECT_ROOT": os.path.join(CFG["www"], "git"), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path[len("/git"):], "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REMOTE_ADDR": "11.1.1.1"}
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        r = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, data = r.stdout.partition(b"\r\n\r\n")
        status = 200
        hdrs = []
        for line in head.split(b"\r\n"):
            k, _, v = line.decode().partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                hdrs.append((k, v.strip()))
        self.send_response(status)
        for k, v in hdrs:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, addr, tls_ctx=None):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.tls_ctx = tls_ctx
        super().__init__(addr, Handler)

    def get_request(self):
        sock, peer = self.socket.accept()
        if self.tls_ctx:
            # The handshake happens on the first read, in the request's thread.
            sock = self.tls_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, peer

    def handle_error(self, request, client_address):
        pass


def split(hp):
    host, port = hp.rsplit(":", 1)
    return host.strip("[]"), int(port)


def main():
    global LOG
    cfg = json.loads(sys.argv[1])
    CFG.update(cfg)
    LOG = open(cfg["log"], "a")
    servers = []
    for hp in cfg.get("http", []):
        servers.append(Server(split(hp)))
    if cfg.get("https"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg["cert"], cfg["key"])
        for hp in cfg["https"]:
            servers.append(Server(split(hp), ctx))
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin


if __name__ == "__main__":
    main()
