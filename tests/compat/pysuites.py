#!/usr/bin/env python3
"""The test suites Debian ships inside Python packages, bare and inside agentjail.

Suites (each a pytest run of the tests inside the installed package):

  simplejson  python3-simplejson   simplejson/tests
  bs4         python3-bs4          bs4/tests
  pyflakes    python3-pyflakes     pyflakes/test
  mpmath      python3-mpmath       mpmath/tests

For every suite and mode it runs
`python3 -m pytest -p no:cacheprovider --junit-xml F --pyargs PACKAGE.TESTS` once:

  bare     as nobody (65534), empty environment but PATH and HOME=/tmp, cwd /tmp
  default  agentjail run (default profile) with the large limits of cpython.py
  python   agentjail run --profile python with the same limits

and compares test by test, as cpython.py does: a test "fails only in the
sandbox" when it passed bare and, in the sandbox, failed, errored, or did not
run (the run crashed or timed out; such tests get the run's end as reason).

Usage:
  tests/compat/pysuites.py            # every suite (~2 min, mpmath most of it)
  tests/compat/pysuites.py --fast     # simplejson, bs4, pyflakes (seconds; CI)
  tests/compat/pysuites.py bs4 mpmath
Options: --modes bare,default[,python]  --timeout SEC (per suite and mode)
  --out DIR (default build-compat/pysuites): results.json, results.md, logs/
  --aj PATH (default $AJ_BIN or build/agentjail)
Needs root (it runs bare as nobody) and the packages above plus python3-pytest
(scripts/deps.sh compat installs them).
Exit status: 0 when it ran (whatever it found), 2 on bad usage, 1 on setup error.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from cpython import NOBODY, PATH, PY, SANDBOX_MODES, cause_of, tail, write_policy  # noqa: E402

# suite: (Debian package, tests package)
SUITES = {
    "simplejson": ("python3-simplejson", "simplejson.tests"),
    "bs4": ("python3-bs4", "bs4.tests"),
    "pyflakes": ("python3-pyflakes", "pyflakes.test"),
    "mpmath": ("python3-mpmath", "mpmath.tests"),
}
FAST = ["simplejson", "bs4", "pyflakes"]


def parse_junit(path, prefix):
    """{test id: (status, message)} from pytest's --junit-xml, or None. The id
    is CLASSNAME.NAME without the tests package (test_dump.TestDump.test_x)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = {}
    for tc in root.iter("testcase"):
        cls = tc.get("classname") or ""
        if cls.startswith(prefix + "."):
            cls = cls[len(prefix) + 1:]
        tid = (cls + "." if cls else "") + (tc.get("name") or "")
        status, msg = "pass", ""
        for kind in ("error", "failure"):
            el = tc.find(kind)
            if el is not None:
                status = "fail"
                msg = (el.get("message") or el.text or "").strip()
        el = tc.find("skipped")
        if el is not None and status == "pass":
            status = "xfail" if el.get("type") == "pytest.xfail" else "skip"
            msg = (el.get("message") or "").strip()
        if tid not in tests or status == "fail":
            tests[tid] = (status, msg)
    return tests


def events_of(path):
    events = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("type") in ("start", "exit"):
                    continue
                key = "%s:%s" % (ev.get("type"), ev.get("syscall") or ev.get("path") or ev.get("destination") or "")
                events[key] = events.get(key, 0) + 1
    except OSError:
        pass
    return events


def run_one(args, suite, mode):
    d = os.path.join(args.out, "logs", suite, mode)
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, "out")      # the only place the run writes junit to
    if os.path.exists(out):
        shutil.rmtree(out)
    os.mkdir(out)
    os.chmod(out, 0o777)
    for p in ("result.json", "events.jsonl"):
        if os.path.exists(os.path.join(d, p)):
            os.unlink(os.path.join(d, p))
    pkg = SUITES[suite][1]
    pt = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "-o", "junit_family=xunit1"]
    if mode == "bare":
        cmd = NOBODY + ["env", "-i", "PATH=" + PATH, "HOME=/tmp", PY] + pt + [
            "--junit-xml", os.path.join(out, "junit.xml"), "--pyargs", pkg]
    else:
        cmd = [args.aj, "run", "--policy", args.policy, "--timeout", "%ds" % args.timeout,
               "--bind-rw", out + ":/aj-out", "--result", os.path.join(d, "result.json"),
               "--events", os.path.join(d, "events.jsonl")]
        if mode != "default":
            cmd[2:2] = ["--profile", mode]
        cmd += ["--", PY] + pt + ["--junit-xml", "/aj-out/junit.xml", "--pyargs", pkg]
    t0 = time.monotonic()
    timed_out = False
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/tmp",
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        stdout, _ = proc.communicate(timeout=args.timeout + 30)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
    wall = time.monotonic() - t0
    text = stdout.decode("utf-8", "replace")
    with open(os.path.join(d, "output.txt"), "w") as f:
        f.write(text)
    tests = parse_junit(os.path.join(out, "junit.xml"), pkg)
    result = None
    try:
        with open(os.path.join(d, "result.json")) as f:
            result = json.load(f)
    except (OSError, ValueError):
        pass
    status = result.get("status") if result else None
    if mode != "bare" and not timed_out and (result is None or status == "setup_error"):
        raise SystemExit("pysuites.py: agentjail did not run %s (rc %d): %s" % (suite, proc.returncode, text[-500:]))
    if mode == "bare":
        status = "timeout" if timed_out else ("ok" if proc.returncode == 0 else "exit %d" % proc.returncode)
    return {"rc": proc.returncode, "status": status, "wall_s": round(wall, 1),
            "timed_out": timed_out or status == "timeout", "junit": tests is not None,
            "tests": tests or {}, "tail": tail(text), "events": events_of(os.path.join(d, "events.jsonl"))}


def compare(bare, sb):
    only, skipped_only = [], []
    crash = None
    if not sb["junit"] or sb["timed_out"]:
        crash = "run %s in the sandbox (status %s, rc %s): %s" % (
            "timed out" if sb["timed_out"] else "wrote no junit", sb["status"], sb["rc"], sb["tail"][-400:].strip())
    for tid, (s, _m) in sorted(bare["tests"].items()):
        if s != "pass":
            continue
        got = sb["tests"].get(tid)
        if got is None:
            why = crash or "did not run in the sandbox: " + sb["tail"][-300:].strip()
            only.append({"test": tid, "why": why[-600:], "cause": cause_of(why), "kind": "notrun"})
        elif got[0] == "fail":
            only.append({"test": tid, "why": got[1][-600:], "cause": cause_of(got[1]), "kind": "fail"})
        elif got[0] == "skip":
            skipped_only.append({"test": tid, "why": got[1][-300:]})
    return only, skipped_only


def count(tests, what):
    return sum(1 for s, _ in tests.values() if s == what)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suites", nargs="*")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--modes", default="bare,default")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", default=os.path.join(ROOT, "build-compat", "pysuites"))
    ap.add_argument("--aj", default=os.environ.get("AJ_BIN", os.path.join(ROOT, "build", "agentjail")))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("pysuites.py: run as root (the bare runs are as nobody)", file=sys.stderr)
        return 1
    modes = args.modes.split(",")
    if modes[0] != "bare" or any(m not in SANDBOX_MODES for m in modes[1:]):
        print("pysuites.py: --modes must be bare followed by any of %s" % ",".join(SANDBOX_MODES), file=sys.stderr)
        return 2
    suites = list(args.suites) + (FAST if args.fast else [])
    suites = list(dict.fromkeys(suites or list(SUITES)))
    bad = [s for s in suites if s not in SUITES]
    if bad:
        print("pysuites.py: unknown suite %s (known: %s)" % (" ".join(bad), " ".join(SUITES)), file=sys.stderr)
        return 2
    missing = [SUITES[s][0] for s in suites
               if subprocess.run([PY, "-c", "import " + SUITES[s][1]], capture_output=True).returncode != 0]
    if subprocess.run([PY, "-c", "import pytest"], capture_output=True).returncode != 0:
        missing.append("python3-pytest")
    if missing:
        print("pysuites.py: missing %s: scripts/deps.sh compat" % " ".join(missing), file=sys.stderr)
        return 1
    args.aj = os.path.abspath(args.aj)
    args.out = os.path.abspath(args.out)
    if len(modes) > 1 and not os.access(args.aj, os.X_OK):
        print("pysuites.py: %s is not an executable agentjail (--aj or AJ_BIN)" % args.aj, file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    # the sandbox's host uid must reach OUT/logs/SUITE/MODE/out to bind it
    os.chmod(args.out, os.stat(args.out).st_mode | 0o055)
    args.policy = os.path.join(args.out, "limits.json")
    write_policy(args.policy, resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    t0 = time.monotonic()
    entries = []
    for s in suites:
        runs = {m: run_one(args, s, m) for m in modes}
        b = runs["bare"]
        e = {"suite": s, "package": SUITES[s][0],
             "bare": {"status": b["status"], "wall_s": b["wall_s"], "pass": count(b["tests"], "pass"),
                      "fail": count(b["tests"], "fail"), "total": len(b["tests"])}}
        for m in modes[1:]:
            r = runs[m]
            only, sk = compare(b, r)
            e[m] = {"status": r["status"], "wall_s": r["wall_s"], "pass": count(r["tests"], "pass"),
                    "fail": count(r["tests"], "fail"), "total": len(r["tests"]),
                    "fail_only_in_sandbox": only, "skip_only_in_sandbox": sk, "events": r["events"]}
        print("%-12s bare %4d/%-4d %s" % (s, e["bare"]["pass"], e["bare"]["total"], " ".join(
            "%s: %d pass, -%d" % (m, e[m]["pass"], len(e[m]["fail_only_in_sandbox"])) for m in modes[1:])),
            flush=True)
        entries.append(e)
    summary = {"modes": modes, "suites": len(entries), "wall_s": round(time.monotonic() - t0),
               "agentjail": args.aj, "passed_bare": sum(e["bare"]["pass"] for e in entries)}
    for m in modes[1:]:
        summary[m] = {"pass": sum(e[m]["pass"] for e in entries),
                      "fail_only_in_sandbox": sum(len(e[m]["fail_only_in_sandbox"]) for e in entries),
                      "skip_only_in_sandbox": sum(len(e[m]["skip_only_in_sandbox"]) for e in entries)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"summary": summary, "suites": entries}, f, indent=1, sort_keys=True)
    md = ["# Debian's package test suites: bare vs agentjail", "",
          "%d suites, %d s in all. Tests passing bare: **%d**." % (len(entries), summary["wall_s"],
                                                                  summary["passed_bare"]), "",
          "| suite | package | bare pass / fail / total | " + " | ".join(
              "%s pass / fail-only / skip-only" % m for m in modes[1:]) + " |",
          "|---|---|---|" + "---|" * (len(modes) - 1)]
    for e in entries:
        md.append("| %s | %s | %d / %d / %d | %s |" % (
            e["suite"], e["package"], e["bare"]["pass"], e["bare"]["fail"], e["bare"]["total"], " | ".join(
                "%d / **%d** / %d" % (e[m]["pass"], len(e[m]["fail_only_in_sandbox"]),
                                      len(e[m]["skip_only_in_sandbox"])) for m in modes[1:])))
    for m in modes[1:]:
        md += ["", "## Failing only in `%s`" % m, "", "| suite | test | cause | why |", "|---|---|---|---|"]
        for e in entries:
            for t in e[m]["fail_only_in_sandbox"]:
                why = re.sub(r"\s+", " ", t["why"]).strip()[-220:].replace("|", "\\|")
                md.append("| %s | %s | %s | %s |" % (e["suite"], t["test"], t["cause"], why))
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
