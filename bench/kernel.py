#!/usr/bin/python3
"""A `1+1` cell in a session's live kernel (docs/server.md 'Kernels') against
the floor: the same statement in an already-running python3 that this script
drives over a pipe with the kernel's own protocol (one JSON line each way),
so what is left between the two is the server's part: HTTP over loopback,
the session lookup, the kernel thread's hand-off and its epoll, and the
sandbox's pipes. Issue 18's goal: kernel p50 at most 2 ms above the floor.
A benchmark, not a test: it never fails because of a number.

USAGE
  bench/kernel.py [-n CELLS] [-r ROUNDS] [--agentjail PATH] [--json]
Needs root (sessions: a tmpfs workspace per session).
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOKEN = "bench-token"
GOAL_MS = 2.0

FLOOR = r"""
import json, os, sys
ns = {}
for line in sys.stdin:
    m = json.loads(line)
    v = eval(compile(m["code"], "<cell>", "eval"), ns)
    sys.stdout.write(json.dumps({"op": "done", "id": m["id"], "status": "ok", "stdout": "", "stderr": "",
                                 "result": {"text/plain": repr(v)}, "error": None, "display": []}) + "\n")
    sys.stdout.flush()
"""


def pct(xs, q):
    s = sorted(xs)
    return s[max(0, -(-q * len(s) // 100) - 1)] if s else float("nan")


def floor_samples(n):
    p = subprocess.Popen([sys.executable if os.path.basename(sys.executable).startswith("python3") else "python3",
                          "-c", FLOOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    out = []
    f = p.stdout
    try:
        for i in range(n):
            msg = (json.dumps({"op": "cell", "id": i, "code": "1+1"}) + "\n").encode()
            t0 = time.perf_counter_ns()
            p.stdin.write(msg)
            line = f.readline()
            out.append(time.perf_counter_ns() - t0)
            assert json.loads(line)["result"]["text/plain"] == "2"
    finally:
        p.stdin.close()
        p.wait()
    return out


class Server:
    def __init__(self, aj):
        self.tmp = tempfile.mkdtemp(prefix="ajbench-kernel-")
        cfg = {"listen": "127.0.0.1:0", "store": os.path.join(self.tmp, "state", "runs.db"),
               "tenants": {"a": {"token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}}}
        path = os.path.join(self.tmp, "server.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.errpath = os.path.join(self.tmp, "server.err")
        self.proc = subprocess.Popen([aj, "serve", "--config", path], stdout=subprocess.DEVNULL,
                                     stderr=open(self.errpath, "w"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "serve: ready" not in self.err() and self.proc.poll() is None:
            time.sleep(0.02)
        m = re.search(r"listening on [0-9.]+:(\d+)", self.err())
        if not m:
            raise SystemExit("the server did not start: " + self.err())
        self.conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=60)

    def err(self):
        with open(self.errpath) as f:
            return f.read()

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, json.loads(r.read())

    def stop(self):
        self.conn.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        shutil.rmtree(self.tmp, ignore_errors=True)


def kernel_samples(srv, sid, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        status, j = srv.call("POST", "/v1/sessions/%s/cells" % sid, {"code": "1+1"})
        out.append(time.perf_counter_ns() - t0)
        assert status == 200 and j["result"]["text/plain"] == "2", j
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="cells per round")
    ap.add_argument("-r", type=int, default=5, help="rounds (interleaved)")
    ap.add_argument("--agentjail", default=os.path.join(REPO, "build", "agentjail"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/kernel.py needs root (sessions)")
    srv = Server(a.agentjail)
    try:
        status, j = srv.call("POST", "/v1/sessions", {"kernel": "python"})
        if status != 201:
            raise SystemExit("no kernel session: %s" % j)
        sid = j["id"]
        kernel_samples(srv, sid, 20)  # warm-up (the kernel's start)
        floor_samples(20)
        fl, kn = [], []
        for _ in range(a.r):
            fl += floor_samples(a.n)
            kn += kernel_samples(srv, sid, a.n)
    finally:
        srv.stop()
    res = {name: {"p50_ms": pct(xs, 50) / 1e6, "p99_ms": pct(xs, 99) / 1e6, "n": len(xs)}
           for name, xs in (("floor", fl), ("kernel", kn))}
    res["p50_above_floor_ms"] = res["kernel"]["p50_ms"] - res["floor"]["p50_ms"]
    res["goal_ms"] = GOAL_MS
    if a.json:
        print(json.dumps(res, indent=2))
        return
    for name in ("floor", "kernel"):
        print("%-7s p50 %7.3f ms  p99 %7.3f ms  (n=%d)" % (name, res[name]["p50_ms"], res[name]["p99_ms"],
                                                          res[name]["n"]))
    print("kernel p50 above the floor: %.3f ms (goal: at most %.1f ms): %s" % (
        res["p50_above_floor_ms"], GOAL_MS, "met" if res["p50_above_floor_ms"] <= GOAL_MS else "NOT met"))


if __name__ == "__main__":
    main()
