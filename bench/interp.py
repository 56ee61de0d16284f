#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Warm interpreters against bare python3 (docs/performance.md, "Warm interpreters").

    bench/interp.py [--runs N] [--seconds S] [--bin build/bench/aj-pool-bench]

Each number comes from build/bench/aj-pool-bench, a process holding a pool of
parked interpreters (aj_pool_run) that spawns bare `python3 -c` itself in the
same rounds, in a random order; between rounds it waits until its pool is full
again (agents think between tool calls; sustained load is the throughput line).

  print(1)   warm p50 vs bare `python3 -c 'print(1)'`               goal <= 0.5x
  pandas     warm p50 vs bare `python3 -c SNIPPET` (imports pandas)  goal <= 0.1x
             warm p50 vs SNIPPET exec'd in this running interpreter  goal <= 1.5x
             (and, for scale, vs the snippet's first exec in a fresh interpreter that
             imported pandas: what any single-use interpreter pays; and the minima;
             and the same with interpreter.warmup set to a warm-up cell, WARMUP; and the snippet's
             first exec in a plain fork of an interpreter that ran WARMUP: a template's child
             without the sandbox; and what reading a present page costs in a fresh fork)
  throughput 2 clients, each with a pool of 2, back to back           goal >= 5x bare
             (and the CPU time each run costs: refill, run, teardown against bare),
             without a warm-up cell and with WARMUP
  memory     PSS of one parked pandas interpreter's sandbox, and of 8

A benchmark, not a test: it prints what it measured and fails only when it
cannot run at all."""
import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNIPPET = """import pandas as pd, numpy as np
df = pd.DataFrame({"k": np.arange(10000) % 10, "v": np.arange(10000, dtype=float)})
print(df.groupby("k")["v"].agg(["sum", "mean", "count"]))
"""
PY = ["--set", "interpreter.language=python"]
PANDAS = PY + ["--set", "interpreter.preload=pandas"]


def bench(binary, args):
    p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit("bench/interp.py: %s %s failed: %s" % (binary, " ".join(args[:4]), p.stderr.strip()))
    return json.loads(p.stdout.strip().splitlines()[-1])


def floor(runs):
    """SNIPPET exec'd in this interpreter, pandas imported already: the floor."""
    import pandas  # noqa: F401
    code = compile(SNIPPET, "<snippet>", "exec")
    times = []
    for _ in range(runs):
        sink = io.StringIO()
        t0 = time.perf_counter_ns()
        with contextlib.redirect_stdout(sink):
            exec(code, {"__name__": "__main__"})
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


# A warm-up cell (interpreter.warmup) for the pandas policy: other data, other operations, the
# same machinery (frames, groupby, reductions, repr) as a data-analysis snippet uses.
WARMUP = """import pandas as pd, numpy as np
w = pd.DataFrame({"a": np.arange(50) % 3, "b": np.linspace(0, 1, 50)})
repr(w.groupby("a")["b"].agg(["min", "max", "size"]))
"""

# A broader warm-up cell: the reductions and printing a data-analysis agent's snippets use most,
# on other data (docs/interpreters.md shows it as an example).
BROAD = """import pandas as pd, numpy as np
w = pd.DataFrame({"g": np.arange(60) % 4, "x": np.linspace(0, 1, 60), "n": np.arange(60)})
for how in ("sum", "mean", "count", "min", "max", "size", "std", "median", "nunique"):
    w.groupby("g")["x"].agg(how)
str(w.groupby("g").agg(["sum", "mean", "count"]))
str(w.groupby("g")["x"].agg(["sum", "mean", "count"]))
str(w.describe())
str(w.sort_values("x").head())
str(w["g"].value_counts())
"""

FIRST = """import contextlib, gc, io, sys, time
import pandas
if len(sys.argv) > 2:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(sys.argv[2], "<warmup>", "exec"), {"__name__": "__warmup__"})
gc.collect()
gc.freeze()
code = compile(sys.argv[1], "<snippet>", "exec")
t0 = time.perf_counter_ns()
with contextlib.redirect_stdout(io.StringIO()):
    exec(code, {"__name__": "__main__"})
print(time.perf_counter_ns() - t0)
"""


def first_exec(script, runs, warmup=()):
    """Median ns of SNIPPET's first exec, as SCRIPT (FIRST or FORKED) prints it, over RUNS fresh
    python3 processes (WARMUP: the warm-up cell each runs first)."""
    times = []
    for _ in range(runs):
        p = subprocess.run(["/usr/bin/python3", "-c", script, SNIPPET] + list(warmup), capture_output=True,
                           text=True, timeout=600)
        times.append(int(p.stdout))
    return statistics.median(times)


def first_floor(runs, warmup=()):
    """SNIPPET's first exec in a fresh interpreter that imported pandas (and froze it, as a
    parked one does): the part of a warm run's time that no single-use interpreter avoids."""
    return first_exec(FIRST, runs, warmup)


FORKED = """import contextlib, gc, io, os, sys, time
import pandas
if len(sys.argv) > 2:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(sys.argv[2], "<warmup>", "exec"), {"__name__": "__warmup__"})
gc.collect()
gc.freeze()
r, w = os.pipe()
if os.fork() == 0:
    time.sleep(0.05)  # parked
    code = compile(sys.argv[1], "<snippet>", "exec")
    t0 = time.perf_counter_ns()
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__main__"})
    os.write(w, str(time.perf_counter_ns() - t0).encode())
    os._exit(0)
os.close(w)
print(int(os.read(r, 64)))
os.wait()
"""


def forked_floor(runs, warmup=()):
    """SNIPPET's first exec in a plain fork of an interpreter that imported pandas (and ran the
    warm-up cell): what a template's child pays with no sandbox, no request and no result around
    it. The lower bound of a warm run with a template."""
    return first_exec(FORKED, runs, warmup)


TOUCH = """import mmap, os, time
n = 64 << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, n, 4096):
    m[i] = 1
def read():
    t, s = time.perf_counter_ns(), 0
    for i in range(0, n, 4096):
        s += m[i]
    return (time.perf_counter_ns() - t) / (n // 4096)
again = min(read() for _ in range(3))
r, w = os.pipe()
if os.fork() == 0:
    os.write(w, ("%f %f" % (read(), read())).encode())
    os._exit(0)
os.close(w)
print(again, os.read(r, 100).decode())
os.wait()
"""


def page_touch():
    """ns per page to read one byte of each page of 64 MiB that is present (written before the
    fork): in the process that wrote it, and in a fresh fork, first and second pass. A fork
    copies the page table, so the child takes no page fault; what its first pass costs beyond
    the second is the machine's (a hypervisor's shadow page tables, say)."""
    p = subprocess.run(["/usr/bin/python3", "-c", TOUCH], capture_output=True, text=True, timeout=600)
    return [float(x) for x in p.stdout.split()]


def ms(ns):
    return "%.1f ms" % (ns / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench", "aj-pool-bench"))
    a = ap.parse_args()
    try:
        import pandas  # noqa: F401
    except ImportError:
        sys.exit("bench/interp.py: python3-pandas is not installed (scripts/deps.sh test)")
    # The helper looks for agentjail-interp.so beside itself (build/bench/), where the build does
    # not put it: without it a pool has no template, and every "template" line would measure one
    # import per interpreter instead.
    so = os.path.join(ROOT, "build", "agentjail-interp.so")
    if not os.environ.get("AGENTJAIL_INTERP_SO") and os.path.exists(so):
        os.environ["AGENTJAIL_INTERP_SO"] = so
    print("interpreter library: %s" % os.environ.get("AGENTJAIL_INTERP_SO", "(beside the helper)"))
    print("load average before: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))

    one = bench(a.bin, ["--gap-ms", "50"] + PY + ["latency", str(a.runs), "/usr/bin/python3", "-c", "print(1)"])
    r = one["warm"]["median_ns"] / one["bare"]["median_ns"]
    print("print(1): warm p50 %s (p95 %s), bare python3 -c p50 %s: %.2fx (goal <= 0.5x), cold fallbacks %d" % (
        ms(one["warm"]["median_ns"]), ms(one["warm"]["p95_ns"]), ms(one["bare"]["median_ns"]), r,
        one["cold_fallbacks"]))

    pd_ = bench(a.bin, ["--gap-ms", "50"] + PANDAS + ["latency", str(a.runs), "/usr/bin/python3", "-c", SNIPPET])
    f = floor(a.runs)
    f1 = first_floor(max(3, a.runs // 3))
    f2 = first_floor(max(3, a.runs // 3), [WARMUP])
    w, b = pd_["warm"]["median_ns"], pd_["bare"]["median_ns"]
    print("pandas snippet: warm p50 %s (p95 %s, min %s), bare python3 -c p50 %s: %.3fx (goal <= 0.1x); "
          "in a running interpreter %s: %.1fx the floor (goal <= 1.5x; minima %.1fx), cold fallbacks %d" % (
              ms(w), ms(pd_["warm"]["p95_ns"]), ms(pd_["warm"]["min_ns"]), ms(b), w / b, ms(f), w / f,
              pd_["warm"]["min_ns"] / f, pd_["cold_fallbacks"]))
    print("  the snippet's first exec in a fresh interpreter with pandas imported: %s (%.1fx the floor); "
          "the warm run is %.1fx that; after one warm-up cell of other pandas code: %s (%.1fx the floor)" % (
              ms(f1), f1 / f, w / f1, ms(f2), f2 / f))
    ff = forked_floor(max(3, a.runs // 3), [WARMUP])
    print("  the snippet's first exec in a plain fork of an interpreter that imported pandas and ran the "
          "warm-up cell (no sandbox, no request): %s (%.1fx the floor)" % (ms(ff), ff / f))
    pt = page_touch()
    print("  reading a present page: %.2f us in the process that wrote it; in a fresh fork %.2f us the first "
          "time, %.2f us the second" % (pt[0] / 1e3, pt[1] / 1e3, pt[2] / 1e3))
    wu = bench(a.bin, ["--gap-ms", "50"] + PANDAS + ["--set", "interpreter.warmup=" + WARMUP] +
               ["latency", str(a.runs), "/usr/bin/python3", "-c", SNIPPET])
    ww = wu["warm"]["median_ns"]
    print("  with interpreter.warmup (that cell): warm p50 %s (p95 %s, min %s), bare p50 %s: %.3fx; %.1fx the floor "
          "(minima %.1fx), cold fallbacks %d" % (
              ms(ww), ms(wu["warm"]["p95_ns"]), ms(wu["warm"]["min_ns"]), ms(wu["bare"]["median_ns"]),
              ww / wu["bare"]["median_ns"], ww / f, wu["warm"]["min_ns"] / f, wu["cold_fallbacks"]))

    br = bench(a.bin, ["--gap-ms", "50"] + PANDAS + ["--set", "interpreter.warmup=" + BROAD] +
               ["latency", str(a.runs), "/usr/bin/python3", "-c", SNIPPET])
    fb = first_floor(max(3, a.runs // 3), [BROAD])
    bw = br["warm"]["median_ns"]
    print("  with a broader warm-up cell (BROAD): warm p50 %s (min %s): %.1fx the floor (minima %.1fx); the "
          "snippet's first exec after it in a fresh interpreter %s (%.1fx the floor)" % (
              ms(bw), ms(br["warm"]["min_ns"]), bw / f, br["warm"]["min_ns"] / f, ms(fb), fb / f))

    # Throughput twice: as the pool comes (a probe that runs `pass` finds the pages to write
    # before a request), and with the warm-up cell a deployment for pandas sets (docs/interpreters.md).
    for label, extra in (("", []), (" with interpreter.warmup", ["--set", "interpreter.warmup=" + WARMUP])):
        tp = bench(a.bin, PANDAS + extra + ["throughput", str(a.seconds), "2", "/usr/bin/python3", "-c", SNIPPET])
        print("pandas snippet%s, 2 clients, %d s: warm %.2f/s, bare %.2f/s: %.2fx (goal >= 5x); failed warm %d "
              "bare %d" % (label, a.seconds, tp["warm_per_s"], tp["bare_per_s"],
                           tp["warm_per_s"] / max(tp["bare_per_s"], 1e-9), tp["warm_failed"], tp["bare_failed"]))
        print("  CPU time per run (client, its sandboxes: refill + run + teardown): warm %.0f ms, bare %.0f ms: "
              "%.2fx, the bound on the throughput ratio once the CPUs are busy" % (
                  tp["warm_cpu_ms_per_run"], tp["bare_cpu_ms_per_run"],
                  tp["bare_cpu_ms_per_run"] / max(tp["warm_cpu_ms_per_run"], 1e-9)))

    for label, extra in (("template", []), ("one import each", ["--set", "interpreter.template=false"])):
        for k in (1, 8):
            m = bench(a.bin, PANDAS + extra + ["memory", str(k)])
            what = "init + reaper + python3" if m.get("template") else "init + python3"
            print("memory (%s), pool of %d parked pandas interpreters: PSS %.1f MiB per sandbox (%s), "
                  "template %.1f MiB, %.1f MiB in all; memory cgroup %.1f MiB per sandbox" % (
                      label, k, m["per_sandbox_pss_kb"] / 1024, what, m.get("template_pss_kb", 0) / 1024,
                      m.get("total_pss_kb", m["per_sandbox_pss_kb"] * k) / 1024, m["per_sandbox_cgroup_kb"] / 1024))
    print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
