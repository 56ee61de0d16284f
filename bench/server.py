#!/usr/bin/python3
"""Bounded load on `agentjail serve` over loopback, next to bare spawning and
`agentjail run` cold, all measured in the same invocation (issue 15's
Performance section). A benchmark, not a test: it never fails because of
a number.

For each command (`python3 -c 'print(1)'` and `sh -c true`) and each
concurrency C (1, 2, 8 by default), C client processes run back to back
for D seconds (after a warm-up) each of:

  bare       posix_spawn + waitpid of the command (what the harness alone costs)
  cold       posix_spawn of `agentjail run -- COMMAND` (a cold sandbox per run)
  server     POST /v1/runs {"language": "python", "code": "print(1)"} (or
             {"argv": ["sh", "-c", "true"]}) with wait: true, over a kept-alive
             HTTP/1.1 connection per client to a server this script starts
             on 127.0.0.1 (temp config and store; a warm pool of POOL)

and reports p50/p99 latency and runs/s per candidate, and the server's
ratios against the goals: p50 within 1.3x of bare python spawning, python
runs/s at least 0.7x of bare spawning on the same cores.

USAGE
  bench/server.py [-d SECONDS] [-r ROUNDS] [-w WARM] [-c 1,2,8] [--gap MS] [--pool N] [--runner-threads N]
                  [--agentjail PATH] [--json]
Needs root (the server runs each run as its own host uid).
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import random
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import spawn_actions, spawn_env  # noqa: E402

TOKEN = "bench-token"
GOAL_P50 = 1.3    # server p50 at most this x bare python spawn
GOAL_RATE = 0.7   # server python runs/s at least this x bare


def pct(xs, q):
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[max(0, -(-q * len(s) // 100) - 1)]  # nearest rank


class Server:
    def __init__(self, aj, pool, max_runs, runner_threads=None, interp=None):
        self.tmp = tempfile.mkdtemp(prefix="ajbench-srv-")
        cfg = {"listen": "127.0.0.1:0", "store": os.path.join(self.tmp, "state", "runs.db"),
               "tenants": {"bench": {"token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}},
               "pool_size": pool, "max_runs": max_runs, "max_runs_per_tenant": max_runs,
               "max_connections": 64}
        if runner_threads is not None:
            cfg["runner_threads"] = runner_threads
        if interp is not None:
            cfg["interpreters"] = [{"language": "python", "preload": [], "pool": interp}] if interp else []
        path = os.path.join(self.tmp, "server.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.errpath = os.path.join(self.tmp, "server.err")
        self.errf = open(self.errpath, "w")
        # In a session of its own, as a service runs (and so in a scheduler
        # autogroup of its own, apart from this script's load clients).
        self.proc = subprocess.Popen([aj, "serve", "--config", path], stdout=subprocess.DEVNULL, stderr=self.errf,
                                     start_new_session=True)
        end = time.monotonic() + 20
        while time.monotonic() < end and "serve: ready" not in self.err() and self.proc.poll() is None:
            time.sleep(0.02)
        m = re.search(r"listening on [0-9.]+:(\d+)", self.err())
        if self.proc.poll() is not None or "serve: ready" not in self.err() or not m:
            err = self.err()
            self.stop()
            raise RuntimeError("the server did not start: " + err.strip()[-500:])
        self.port = int(m.group(1))

    def err(self):
        with open(self.errpath) as f:
            return f.read()

    def pool_counts(self):
        """(warm, cold) runs so far, from /metrics."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        # Plain pool and warm interpreters (a python run takes one of those
        # where the server keeps them).
        got = {}
        for metric in ("pool", "interp"):
            for kind, n in re.findall(r'^agentjail_%s_runs_total\{kind="(\w+)"\} (\d+)' % metric, text, re.M):
                got[kind] = got.get(kind, 0) + int(n)
        return got.get("warm", 0), got.get("cold", 0)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errf.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def spawn_op(argv):
    # Each spawned run in a session of its own (setsid), as every sandbox's
    # payload is: with the scheduler's autogroups on (a group per session,
    # /proc/sys/kernel/sched_autogroup_enabled), runs that shared this
    # script's session would share one group's CPU between them while each
    # sandbox got a whole group's share, which under contention made bare
    # spawning look slower than sandboxing.
    def op():
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, spawn_env(), file_actions=spawn_actions(), setsid=True)
        _, st = os.waitpid(pid, 0)
        return time.perf_counter_ns() - t0, os.waitstatus_to_exitcode(st) == 0, None
    return op


def http_op(port, body):
    data = json.dumps(body).encode()
    headers = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
    conn = [None]

    def op():
        t0 = time.perf_counter_ns()
        for attempt in (0, 1):
            try:
                if conn[0] is None:
                    conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn[0].request("POST", "/v1/runs", body=data, headers=headers)
                resp = conn[0].getresponse()
                out = resp.read()
                break
            except (OSError, http.client.HTTPException):
                # The server closes a connection now and then (idle, or its own
                # choice): reconnect once, counted in this request's time.
                conn[0].close()
                conn[0] = None
                if attempt:
                    return time.perf_counter_ns() - t0, False, None
        ns = time.perf_counter_ns() - t0
        rec = json.loads(out)
        ok = resp.status == 200 and rec.get("status") == "ok"
        # Where the time went: the server's own accepted-to-ended span and
        # the sandbox's wall time (start to teardown), both in ms.
        split = None
        if ok:
            split = (rec["ended_ms"] - rec["created_ms"], (rec.get("result") or {}).get("wall_ms", 0))
        return ns, ok, split
    return op


def load(make_op, clients, secs, warm, gap=0.0):
    """clients processes, each running its op back to back: warm seconds
    not counted, then secs measured. Returns (latencies ns, fails, the
    server's (accepted-to-ended ms, sandbox wall ms) per run)."""
    tmp = tempfile.mkdtemp(prefix="ajbench-load-")
    start = time.monotonic() + 0.2
    t_measure, t_end = start + warm, start + warm + secs
    pids = []
    for i in range(clients):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                op = make_op()
                while time.monotonic() < start:
                    time.sleep(0.001)
                lat, fails, splits = [], 0, []
                while True:
                    now = time.monotonic()
                    if now >= t_end:
                        break
                    ns, ok, split = op()
                    if now >= t_measure and time.monotonic() <= t_end:
                        lat.append(ns)
                        fails += not ok
                        if split:
                            splits.append(split)
                    if gap:
                        time.sleep(gap)
                with open(os.path.join(tmp, str(i)), "w") as f:
                    json.dump({"lat": lat, "fails": fails, "splits": splits}, f)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    lat, fails, splits = [], 0, []
    for i in range(clients):
        try:
            with open(os.path.join(tmp, str(i))) as f:
                d = json.load(f)
        except (OSError, ValueError):
            fails += 1
            continue
        lat += d["lat"]
        fails += d["fails"]
        splits += d["splits"]
    shutil.rmtree(tmp, ignore_errors=True)
    return lat, fails, splits


def main():
    p = argparse.ArgumentParser(description="agentjail serve under bounded load, next to bare spawning")
    p.add_argument("-d", type=float, default=5.0, help="measured seconds per candidate and cell (default 5)")
    p.add_argument("-w", type=float, default=0.3, help="warm-up seconds before each measured slice (default 0.3)")
    p.add_argument("-r", dest="rounds", type=int, default=5, help="rounds per cell, candidates interleaved (default 5)")
    p.add_argument("-c", default="1,2,8", help="concurrencies (default 1,2,8)")
    p.add_argument("--gap", type=float, default=0.0,
                   help="ms each client idles between its calls (default 0: back to back; runs/s then "
                        "counts the idle time too)")
    p.add_argument("--pool", type=int, default=None, help="the server's pool_size (default: the largest concurrency)")
    p.add_argument("--runner-threads", type=int, default=None,
                   help="the server's runner_threads (default: its own, one per CPU)")
    p.add_argument("--interpreters", type=int, default=None,
                   help="the server's warm python interpreters: pool N (0: none; default: the server's default)")
    p.add_argument("--agentjail", default=os.path.join(REPO, "build", "agentjail"))
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    a = p.parse_args()
    conc = [int(x) for x in a.c.split(",")]
    if os.geteuid() != 0:
        sys.exit("bench/server.py: needs root (agentjail serve runs each run as its own host uid)")
    if not os.access(a.agentjail, os.X_OK):
        sys.exit("bench/server.py: %s not built (scripts/build.sh)" % a.agentjail)
    # The binaries the sandbox runs (its PATH), not a shim of this shell.
    sys_path = "/usr/local/bin:/usr/bin:/bin"
    py, sh = shutil.which("python3", path=sys_path), shutil.which("sh", path=sys_path)
    commands = [("python", [py, "-c", "print(1)"], {"language": "python", "code": "print(1)"}),
                ("sh", [sh, "-c", "true"], {"argv": ["sh", "-c", "true"]})]
    pool = a.pool if a.pool is not None else max(conc)
    load_before = os.getloadavg()
    srv = Server(a.agentjail, pool, max(16, max(conc)), a.runner_threads, a.interpreters)
    rows = []
    pool_seen = [0, 0]  # the server's warm/cold run counts at the last cell's end
    try:
        for cname, argv, body in commands:
            # Sanity: each candidate runs once, successfully.
            for what, op in (("bare", spawn_op(argv)), ("cold", spawn_op([a.agentjail, "run", "--"] + argv)),
                             ("server", http_op(srv.port, body))):
                ns, ok, _ = op()
                if not ok:
                    raise RuntimeError("%s %s: the trial run failed" % (what, cname))
            for c in conc:
                cands = [("bare", lambda argv=argv: spawn_op(argv)),
                         ("cold", lambda argv=argv: spawn_op([a.agentjail, "run", "--"] + argv)),
                         ("server", lambda body=body: http_op(srv.port, body))]
                # Rounds, each candidate in a shuffled order per round, so that
                # the machine's other load falls on all of them alike.
                acc = {name: ([], 0, []) for name, _ in cands}
                for _ in range(a.rounds):
                    random.shuffle(cands)
                    for name, make in cands:
                        lat, fails, splits = load(make, c, a.d / a.rounds, a.w, a.gap / 1000.0)
                        acc[name] = (acc[name][0] + lat, acc[name][1] + fails, acc[name][2] + splits)
                warm, cold = srv.pool_counts()
                for name in ("bare", "cold", "server"):
                    lat, fails, splits = acc[name]
                    rows.append({"command": cname, "clients": c, "candidate": name, "n": len(lat),
                                 "failed": fails, "p50_ms": pct(lat, 50) / 1e6, "p99_ms": pct(lat, 99) / 1e6,
                                 "runs_per_s": len(lat) / a.d})
                    if splits:
                        rows[-1]["server_p50_ms"] = pct([x[0] for x in splits], 50)
                        rows[-1]["sandbox_p50_ms"] = pct([x[1] for x in splits], 50)
                        rows[-1]["pool_warm"], rows[-1]["pool_cold"] = warm - pool_seen[0], cold - pool_seen[1]
                    print("  %-6s c=%d %-6s n=%5d p50 %7.2f ms  p99 %7.2f ms  %7.1f runs/s  failed %d"
                          % (cname, c, name, len(lat), rows[-1]["p50_ms"], rows[-1]["p99_ms"],
                             rows[-1]["runs_per_s"], fails), file=sys.stderr, flush=True)
                pool_seen[:] = [warm, cold]
    finally:
        srv.stop()

    def row(cmd, c, cand):
        return next(r for r in rows if (r["command"], r["clients"], r["candidate"]) == (cmd, c, cand))

    print("agentjail serve under load: %d CPUs, %.1f s per candidate and cell in %d interleaved rounds "
          "(+%.1f s warm-up each), %s, pool_size %d, kernel %s"
          % (os.cpu_count() or 0, a.d, a.rounds, a.w,
             "%.0f ms between calls" % a.gap if a.gap else "calls back to back", pool, os.uname().release))
    print("load average before %.2f, after %.2f (1 min): other work on the machine shares its CPUs"
          % (load_before[0], os.getloadavg()[0]))
    print("%-7s %3s %-7s %7s %9s %9s %9s %8s %8s %6s" % ("command", "c", "cand", "n", "p50 ms", "p99 ms",
                                                        "runs/s", "p50 xb", "rate xb", "failed"))
    for r in rows:
        b = row(r["command"], r["clients"], "bare")
        print("%-7s %3d %-7s %7d %9.2f %9.2f %9.1f %7.2fx %7.2fx %6d" % (
            r["command"], r["clients"], r["candidate"], r["n"], r["p50_ms"], r["p99_ms"], r["runs_per_s"],
            r["p50_ms"] / b["p50_ms"], r["runs_per_s"] / b["runs_per_s"], r["failed"]))
    print("where the server's time goes (p50, ms): HTTP round trip / accepted-to-ended in the server / "
          "the sandbox's own wall time (start to teardown); runs that found a parked sandbox (warm) or not")
    for r in rows:
        if "server_p50_ms" in r:
            print("  %-6s c=%d: %7.2f / %5d / %5d   warm %d, cold %d" % (
                r["command"], r["clients"], r["p50_ms"], r["server_p50_ms"], r["sandbox_p50_ms"],
                r["pool_warm"], r["pool_cold"]))
    print("goals (python, server against bare spawning at the same concurrency):")
    for c in conc:
        s, b = row("python", c, "server"), row("python", c, "bare")
        x50, xr = s["p50_ms"] / b["p50_ms"], s["runs_per_s"] / b["runs_per_s"]
        print("  c=%d: p50 %.2fx bare (goal <= %.1fx: %s); runs/s %.2fx bare (goal >= %.1fx: %s)" % (
            c, x50, GOAL_P50, "met" if x50 <= GOAL_P50 else "MISSED", xr, GOAL_RATE,
            "met" if xr >= GOAL_RATE else "MISSED"))
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
