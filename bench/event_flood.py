#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/event_flood.py -- what a flood of escape attempts costs the supervisor.

WHAT IS MEASURED
  The supervisor's own CPU time (utime + stime of the agentjail process,
  all its threads, not its children: it is outside the run's cgroup, so no
  limit of the run bounds it) for three kinds of run of the same length:
    quiet      the payload sleeps: set-up, teardown and an idle loop
    budgeted   the payload calls unshare(CLONE_NEWUSER) in a loop from N
               threads (aj-try unshare-flood), with the default event budget
               (1000): past it each attempt is taken with one ioctl, counted
               and refused; one events_suppressed summary a second
    unbudgeted the same flood with --event-budget 1000000: every attempt is
               built, decoded and written as its own event (what every run
               did before the budget existed)
  With --cpus 0.1 on the run when the host can enforce it (as in the issue's
  report), otherwise without, which the output says.
  The supervisor's time is read from /proc/PID/stat of the exited agentjail
  before it is reaped (waitid WNOWAIT), so the sandbox's CPU (its children)
  is not in it. Also reported: the attempts the payload made, the events
  written and the events file's size.

HOW TO READ IT
  x quiet   supervisor CPU / the quiet run's, from the same invocation.
  ms/1k     supervisor CPU per thousand attempts.
  This is a benchmark, not a test: it never fails because of a time. It
  exits non-zero only for a usage error or when it cannot run agentjail.
  Rounds are interleaved; each number is the median over the rounds.

USAGE
  bench/event_flood.py [-r ROUNDS] [-t SECONDS] [-j THREADS]
                       [--agentjail PATH] [--aj-try PATH]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def supervisor_cpu_ms(argv):
    """Run argv; return (its own utime+stime in ms, its stdout) read from
    its zombie, before the reap."""
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        with open("/proc/%d/stat" % p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        p.wait()
        out.seek(0)
        text = out.read().decode(errors="replace")
    tick = os.sysconf("SC_CLK_TCK")
    # fields[0] is field 3 (state): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) * 1000.0 / tick, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-t", "--seconds", type=float, default=5.0)
    ap.add_argument("-j", "--threads", type=int, default=9)
    ap.add_argument("--agentjail", default=os.path.join(REPO, "build", "agentjail"))
    ap.add_argument("--aj-try", default=None, help="default: tests/aj-try next to the agentjail binary")
    a = ap.parse_args()
    aj = os.path.abspath(a.agentjail)
    try_bin = os.path.abspath(a.aj_try or os.path.join(os.path.dirname(aj), "tests", "aj-try"))
    for path in (aj, try_bin):
        if not os.access(path, os.X_OK):
            print("event_flood: not found or not executable: %s" % path, file=sys.stderr)
            return 2
    ms = int(a.seconds * 1000)
    base = [aj, "run", "--bind-ro", "%s:/opt/aj-try" % try_bin]
    cpus = ["--cpus", "0.1"]
    probe = subprocess.run(base + cpus + ["--", "/bin/true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("note: --cpus 0.1 cannot be enforced here (%s); runs without it" % probe.stderr.strip()[:120])
        cpus = []
    flood = ["/opt/aj-try", "unshare-flood", str(a.threads), str(ms)]
    kinds = [
        ("quiet", [], ["/bin/sleep", "%.3f" % a.seconds]),
        ("budgeted", [], flood),
        ("unbudgeted", ["--event-budget", "1000000"], flood),
    ]
    samples = {k: [] for k, _, _ in kinds}
    with tempfile.TemporaryDirectory(prefix="aj-flood-") as d:
        for rnd in range(a.rounds):
            for name, flags, cmd in kinds:
                ev = os.path.join(d, "%s-%d.jsonl" % (name, rnd))
                res = os.path.join(d, "%s-%d.json" % (name, rnd))
                cpu, text = supervisor_cpu_ms(base + cpus + flags + ["--events", ev, "--result", res, "--"] + cmd)
                m = re.search(r"attempts=(\d+)", text)
                attempts = int(m.group(1)) if m else 0
                if not os.path.exists(ev) or not os.path.exists(res):
                    print("event_flood: the %s run did not start (this agentjail lacks a flag?)" % name,
                          file=sys.stderr)
                    return 1
                with open(ev) as f:
                    lines = sum(1 for _ in f)
                with open(res) as f:
                    counted = json.load(f)["events"]["escape_attempt"]
                samples[name].append((cpu, attempts, counted, lines, os.path.getsize(ev)))
                os.unlink(ev)
    quiet = statistics.median(s[0] for s in samples["quiet"]) or 1.0
    print("event flood: %d threads x %.1f s, %d rounds, supervisor CPU (median)%s"
          % (a.threads, a.seconds, a.rounds, "" if cpus else ", no --cpus"))
    print("%-11s %10s %8s %10s %10s %9s %11s %8s" % ("run", "sup. ms", "x quiet", "attempts", "counted", "lines",
                                                   "file bytes", "ms/1k"))
    for name, _, _ in kinds:
        s = samples[name]
        cpu = statistics.median(x[0] for x in s)
        att = statistics.median(x[1] for x in s)
        print("%-11s %10.0f %8.2f %10.0f %10.0f %9.0f %11.0f %8s" % (
            name, cpu, cpu / quiet, att, statistics.median(x[2] for x in s), statistics.median(x[3] for x in s),
            statistics.median(x[4] for x in s), ("%.1f" % (cpu / att * 1000)) if att else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
