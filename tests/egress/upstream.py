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
Paths: /bytes/N streams N bytes; anything else answers "ok PATH".
"""
import json
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = None
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
