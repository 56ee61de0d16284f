#!/usr/bin/env python3
"""Cost of agentjail-egress: the same client, the same upstream, directly and
through the proxy, in one run (ratios, never pass/fail). Root (it makes two
network namespaces: tests/egress/eghelp.py).

  latency      N sequential HTTP requests, one connection each (the proxy
               carries one request per connection): p50/p90 per request,
               direct vs proxied, and requests/s. Python raw-socket client.
  throughput   a download of --mb MB with curl: plain HTTP directly vs
               through the proxy; HTTPS directly vs through a CONNECT tunnel
               (not intercepted) vs through the TLS-terminating path (a
               brokered host: TLS to the client with a minted leaf, TLS
               re-originated to the upstream).

The proxy listens on TCP 127.0.0.1:3128 inside its namespace for this (the
contract's unix socket plus the in-sandbox relay are the sandbox side's;
their cost is not in these numbers). Goals (issue 16): tunnel >= 0.8x
direct, added p50 < 1 ms.

Usage: bench/egress.py [--requests N] [--mb MB] [--rounds R] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "egress"))
import eghelp  # noqa: E402

CLIENT = r'''
import socket, sys, time, json
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "direct":
    addr, req = ("11.1.1.2", 80), b"GET /lat HTTP/1.1\r\nHost: public.test\r\nConnection: close\r\n\r\n"
elif mode == "proxy_ip":
    addr, req = ("127.0.0.1", 3128), b"GET http://11.1.1.2/lat HTTP/1.1\r\nHost: public.test\r\n\r\n"
else:
    addr, req = ("127.0.0.1", 3128), b"GET http://public.test/lat HTTP/1.1\r\nHost: public.test\r\n\r\n"
times = []
t_all = time.perf_counter()
for i in range(n):
    t0 = time.perf_counter()
    s = socket.create_connection(addr)
    s.sendall(req)
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    times.append(time.perf_counter() - t0)
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
print(json.dumps({"times": times, "total": time.perf_counter() - t_all}))
'''


def latency(env, mode, n):
    r = subprocess.run(["ip", "netns", "exec", env.ns_p, sys.executable, "-c", CLIENT, mode, str(n)],
                       capture_output=True, text=True, check=True)
    d = json.loads(r.stdout)
    t = sorted(d["times"])
    return {"p50_ms": 1000 * t[len(t) // 2], "p90_ms": 1000 * t[int(len(t) * 0.9)],
            "req_per_s": n / d["total"]}


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def download(env, url, proxy, extra=()):
    cmd = ["ip", "netns", "exec", env.ns_p, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{speed_download}",
           "--noproxy", "" if proxy else "*", "--resolve", "public.test:80:11.1.1.2",
           "--resolve", "public.test:443:11.1.1.2", "--resolve", "api.brokered.test:443:11.1.1.2"]
    if proxy:
        cmd += ["-x", "http://127.0.0.1:3128"]
    r = subprocess.run(cmd + list(extra) + [url], capture_output=True, text=True, check=True)
    code, speed = r.stdout.split()
    assert code == "200", r.stdout + r.stderr
    return float(speed) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/egress.py needs root (it creates network namespaces)")
    env = eghelp.Env()
    p = None
    try:
        cfg = {"allow": ["public.test", "*.brokered.test", "11.1.1.2"],
               "secrets": [{"id": "bench", "hosts": ["api.brokered.test"], "header": "Authorization",
                            "value": "bench-real-value", "placeholder": "bench-placeholder"}],
               "upstream_ca_pem": env.ca_pem}
        p = eghelp.Proxy(env, cfg, tcp_port=3128)
        run_ca = os.path.join(env.dir, "run-ca.pem")
        with open(run_ca, "w") as f:
            f.write(p.ca_pem)
        size = a.mb * 1024 * 1024
        res = {"direct": [], "proxy": [], "proxy_ip": [], "http_direct": [], "http_proxy": [], "tls_direct": [],
               "tls_tunnel": [], "tls_terminated": []}
        cpu = {"http_proxy": [], "tls_tunnel": [], "tls_terminated": []}
        latency(env, "direct", 100)  # warm both paths
        latency(env, "proxy", 100)
        for _ in range(a.rounds):
            res["direct"].append(latency(env, "direct", a.requests))
            res["proxy"].append(latency(env, "proxy", a.requests))
            res["proxy_ip"].append(latency(env, "proxy_ip", a.requests))
            u = "http://public.test/bytes/%d" % size
            res["http_direct"].append(download(env, u, False))
            c0 = cpu_s(p.pid())
            res["http_proxy"].append(download(env, u, True))
            cpu["http_proxy"].append(cpu_s(p.pid()) - c0)
            u = "https://public.test/bytes/%d" % size
            res["tls_direct"].append(download(env, u, False, ["--cacert", env.ca_pem_path]))
            c0 = cpu_s(p.pid())
            res["tls_tunnel"].append(download(env, u, True, ["--cacert", env.ca_pem_path]))
            cpu["tls_tunnel"].append(cpu_s(p.pid()) - c0)
            c0 = cpu_s(p.pid())
            res["tls_terminated"].append(download(env, "https://api.brokered.test/bytes/%d" % size, True,
                                                  ["--cacert", run_ca]))
            cpu["tls_terminated"].append(cpu_s(p.pid()) - c0)
        med = lambda xs: statistics.median(xs)
        out = {
            "requests": a.requests, "mb": a.mb, "rounds": a.rounds,
            "p50_direct_ms": med([r["p50_ms"] for r in res["direct"]]),
            "p50_proxy_ms": med([r["p50_ms"] for r in res["proxy"]]),
            "p90_direct_ms": med([r["p90_ms"] for r in res["direct"]]),
            "p90_proxy_ms": med([r["p90_ms"] for r in res["proxy"]]),
            "rps_direct": med([r["req_per_s"] for r in res["direct"]]),
            "rps_proxy": med([r["req_per_s"] for r in res["proxy"]]),
            "p50_proxy_ip_ms": med([r["p50_ms"] for r in res["proxy_ip"]]),
            "rps_proxy_ip": med([r["req_per_s"] for r in res["proxy_ip"]]),
        }
        for k in ("http_direct", "http_proxy", "tls_direct", "tls_tunnel", "tls_terminated"):
            out[k + "_MBps"] = med(res[k])
        for k in cpu:
            out[k + "_proxy_cpu_ms_per_100MB"] = 1000 * med(cpu[k]) * 100 / a.mb
        out["load_average"] = os.getloadavg()[0]
        out["added_p50_ms"] = out["p50_proxy_ms"] - out["p50_direct_ms"]
        out["rps_ratio"] = out["rps_proxy"] / out["rps_direct"]
        out["http_ratio"] = out["http_proxy_MBps"] / out["http_direct_MBps"]
        out["tunnel_ratio"] = out["tls_tunnel_MBps"] / out["tls_direct_MBps"]
        out["terminated_ratio"] = out["tls_terminated_MBps"] / out["tls_direct_MBps"]
        print("latency, %d requests x %d rounds (median of rounds):" % (a.requests, a.rounds))
        print("  direct   p50 %.3f ms  p90 %.3f ms  %.0f req/s" % (out["p50_direct_ms"], out["p90_direct_ms"],
                                                                  out["rps_direct"]))
        print("  proxied  p50 %.3f ms  p90 %.3f ms  %.0f req/s" % (out["p50_proxy_ms"], out["p90_proxy_ms"],
                                                                  out["rps_proxy"]))
        print("  proxied, literal address (no DNS): p50 %.3f ms  %.0f req/s" % (out["p50_proxy_ip_ms"],
                                                                           out["rps_proxy_ip"]))
        print("  added p50 %.3f ms (goal < 1 ms); req/s ratio %.2f" % (out["added_p50_ms"], out["rps_ratio"]))
        print("throughput, %d MB download (MB/s, median of rounds):" % a.mb)
        print("  http   direct %.0f  proxied %.0f  ratio %.2f" % (out["http_direct_MBps"], out["http_proxy_MBps"],
                                                                 out["http_ratio"]))
        print("  https  direct %.0f  tunnel %.0f (ratio %.2f, goal >= 0.8)  TLS-terminating %.0f (ratio %.2f)" % (
            out["tls_direct_MBps"], out["tls_tunnel_MBps"], out["tunnel_ratio"], out["tls_terminated_MBps"],
            out["terminated_ratio"]))
        print("proxy CPU per 100 MB (independent of other load): http %.0f ms, tunnel %.0f ms, "
              "TLS-terminating %.0f ms" % (out["http_proxy_proxy_cpu_ms_per_100MB"],
                                           out["tls_tunnel_proxy_cpu_ms_per_100MB"],
                                           out["tls_terminated_proxy_cpu_ms_per_100MB"]))
        print("load average during the run: %.1f on %d CPUs" % (out["load_average"], os.cpu_count()))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        if p:
            p.stop()
        env.close()


if __name__ == "__main__":
    main()
