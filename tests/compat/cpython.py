#!/usr/bin/env python3
"""CPython's own regression suite, bare and inside agentjail, module by module.

For every module it runs `python3 -m test -v --junit-xml F MODULE` once per mode:

  bare     as nobody (65534), empty environment but PATH and HOME=/tmp, on the host
  default  agentjail run (default profile) with large limits (see LIMITS below)
  python   agentjail run --profile python with the same limits

and compares test by test. A test "fails only in the sandbox" when it passed
bare and, in a sandbox mode, failed, errored, or did not run because the module
crashed or timed out. Tests skipped only in the sandbox are listed separately.

Limits are large so they are not the cause: memory 4G, pids 4096, no CPU-time
or output limit, open files as bare, file size 16G. /tmp and /dev/shm keep the
profile's size (that is part of what is measured).

Usage:
  tests/compat/cpython.py --fast                      # ~10 quick modules (CI)
  tests/compat/cpython.py --all --resume              # every module (bare + each mode: ~40 min on 2 cores)
  tests/compat/cpython.py test_os test_socket ...     # these modules
Options: --modes bare,default,python  --timeout SEC (per module and mode)
  --out DIR (default build-compat/cpython): results.json, results.md, logs/
  --aj PATH (default $AJ_BIN or build/agentjail)  --resources all,-network,...
Needs root (it runs bare as nobody) and libpython3.11-testsuite
(scripts/deps.sh compat installs it).
Exit status: 0 when it ran (whatever it found), 2 on bad usage, 1 on setup error.
"""
import argparse
import concurrent.futures
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = ["test_os", "test_socket", "test_subprocess", "test_tempfile", "test_shutil",
        "test_signal", "test_pty", "test_mmap", "test_select", "test_threading"]
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"   # the sandbox's
PY = "/usr/bin/python3"   # the interpreter the Debian test suite belongs to, in every mode
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# no internet here; cpu/largefile only make modules slow; gui/audio need hardware
RESOURCES = "all,-network,-urlfetch,-largefile,-cpu,-gui,-audio"
SANDBOX_MODES = ("default", "python")

# Heuristic first guess at the layer behind a failure, from its message (the
# report keeps the message; docs/compatibility.md holds the checked verdicts).
CAUSES = [
    ("pty", r"/dev/ptmx|/dev/pts|openpty|out of pty|ptsname|/dev/tty\b|No such device or address.*tty|pty\.|grantpt"),
    ("ptrace", r"ptrace|PTRACE"),
    ("memfd", r"memfd"),
    ("socket-family", r"UDPLITE|UDPLite|SCTP|SEQPACKET|Protocol not supported|Address family not supported|AF_ALG|AF_PACKET|AF_NETLINK|CAN_|RDS|TIPC|VSOCK|QIPCRTR"),
    ("seccomp-enosys", r"Function not implemented|ENOSYS"),
    ("etc", r"/etc/"),
    ("tmp-size", r"No space left on device|ENOSPC"),
    ("readonly-fs", r"Read-only file system|EROFS"),
    ("network", r"Connection refused|Network is unreachable|Cannot assign requested address|ENETUNREACH|getaddrinfo|Name or service not known|Temporary failure in name resolution"),
    ("ids", r"getpwuid|getgrgid|KeyError: .(getpwnam|getgrnam|uid|gid)|name not found|unknown user|group"),
    ("signals-or-pidns", r"setsid|setpgid|killpg|ProcessLookupError|ESRCH|pid namespace"),
    ("rlimit", r"RLIMIT|Too many open files|EMFILE|Resource temporarily unavailable|File too large|EFBIG"),
    ("permission", r"Operation not permitted|EPERM|Permission denied|EACCES"),
]


def cause_of(text):
    for name, rx in CAUSES:
        if re.search(rx, text or ""):
            return name
    return "unclassified"


def list_all_modules():
    out = subprocess.run([PY, "-m", "test", "--list-tests"],
                         capture_output=True, text=True, check=True).stdout
    return [l.strip() for l in out.splitlines() if l.strip().startswith("test_")]


def parse_junit(path):
    """{test id: (status, message)} from regrtest's --junit-xml, or None."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = {}
    rank = {"fail": 3, "xfail": 2, "pass": 1, "skip": 0}
    for tc in root.iter("testcase"):
        # a subtest is recorded as "ID (params)": it counts for its test, a
        # failing subtest failing it
        name = (tc.get("name") or "").split(" ", 1)[0]
        if not name:    # regrtest writes a nameless testcase for some failing subtests
            continue
        status, msg = "pass", ""
        for kind in ("error", "failure"):
            el = tc.find(kind)
            if el is not None:
                status = "fail"
                msg = (el.get("message") or el.text or "").strip()
        el = tc.find("skipped")
        if el is not None and status == "pass":
            status, msg = "skip", (el.text or "").strip()
        if tc.find("output") is not None and status == "pass":
            status = "xfail"
        if name not in tests or rank[status] > rank[tests[name][0]]:
            tests[name] = (status, msg)
    return tests


V_ID = re.compile(r"^(\w+) \(((?:test|[\w]+)\.[\w.]+)\)")
V_RES = re.compile(r"(?:^|\.\.\. )(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$")


def parse_verbose(text):
    """Fallback when no junit file was written (the module crashed or timed
    out): the per-test lines of unittest's verbose output that completed."""
    tests, cur = {}, None
    for line in text.splitlines():
        m = V_ID.match(line)
        if m:
            cur = m.group(2)
            if not cur.endswith("." + m.group(1)):
                cur = cur + "." + m.group(1)
        r = V_RES.search(line)
        if r and cur and cur not in tests:
            word = r.group(1)
            tests[cur] = ({"ok": "pass", "FAIL": "fail", "ERROR": "fail", "expected failure": "xfail",
                           "unexpected success": "fail"}.get(word, "skip"), word)
            cur = None
    # the reasons: the last line of each "ERROR: name (id) ..." section
    for m in re.finditer(r"^(?:ERROR|FAIL): \w+ \(([\w.]+)\)[^\n]*\n-+\n(.*?)(?=^={20,}|^-{20,}\n)",
                         text, re.M | re.S):
        tid, body = m.group(1), m.group(2).strip().splitlines()
        if tid in tests and tests[tid][0] == "fail" and body:
            tests[tid] = ("fail", body[-1])
    return tests


def tail(text, n=1500):
    text = text or ""
    return text[-n:]


def write_policy(path, open_files):
    pol = {"version": 1,
           "limits": {"memory": "4G", "pids": 4096, "cpu_time": None, "output": None,
                      "file_size": "16G", "open_files": open_files}}
    with open(path, "w") as f:
        json.dump(pol, f)


def run_one(args, module, mode, workdir):
    """Run one module in one mode; return a dict with tests and diagnostics."""
    d = os.path.join(workdir, module, mode)
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, "out")      # the only place the run writes junit to
    if os.path.exists(out):
        shutil.rmtree(out)
    os.mkdir(out)
    os.chmod(out, 0o777)
    rt = ["-m", "test", "-v", "-u", args.resources]
    env = None
    if mode == "bare":
        cmd = NOBODY + ["env", "-i", "PATH=" + PATH, "HOME=/tmp", PY] + rt + [
            "--junit-xml", os.path.join(out, "junit.xml"), module]
        cwd = "/tmp"
    else:
        cmd = [args.aj, "run", "--policy", args.policy, "--timeout", "%ds" % args.timeout,
               "--bind-rw", out + ":/aj-out", "--result", os.path.join(d, "result.json"),
               "--events", os.path.join(d, "events.jsonl")]
        if mode != "default":
            cmd[2:2] = ["--profile", mode]
        cmd += ["--", PY] + rt + ["--junit-xml", "/aj-out/junit.xml", module]
        cwd = "/"
    for p in ("result.json", "events.jsonl"):
        if os.path.exists(os.path.join(d, p)):
            os.unlink(os.path.join(d, p))
    t0 = time.monotonic()
    timed_out = False
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                            env=env, start_new_session=True, stdin=subprocess.DEVNULL)
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
    tests = parse_junit(os.path.join(out, "junit.xml"))
    source = "junit"
    verbose = parse_verbose(text)
    if tests is None:
        tests, source = verbose, "verbose"
    else:
        # regrtest's junit leaves out tests whose subtests failed: the verbose
        # output has them, and the ERROR/FAIL sections say why
        for tid, st in verbose.items():
            if tid not in tests:
                tests[tid] = st
    result, events = None, {}
    try:
        with open(os.path.join(d, "result.json")) as f:
            result = json.load(f)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(d, "events.jsonl")) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("type") in ("start", "exit"):
                    continue
                what = ev.get("syscall") or ev.get("path") or ev.get("destination") or ""
                if ev.get("syscall") == "socket" and ev.get("args"):
                    what += "(%s)" % ev["args"][0]
                key = "%s:%s" % (ev.get("type"), what)
                events[key] = events.get(key, 0) + 1
    except OSError:
        pass
    status = result.get("status") if result else None
    if mode != "bare" and not timed_out and (result is None or status == "setup_error"):
        raise SystemExit("cpython.py: agentjail did not run %s (rc %d): %s" % (module, proc.returncode, text[-500:]))
    if mode == "bare":
        status = "timeout" if timed_out else ("ok" if proc.returncode == 0 else "exit %d" % proc.returncode)
    crash = None
    i = text.find("crashed -- Traceback")
    if i >= 0:   # the exception lines of regrtest's "test_x crashed" traceback
        crash = " / ".join(l.strip() for l in text[i:].splitlines()[1:80]
                           if re.match(r"^[\w.]*(Error|Exception|Exit)\b", l))[:600]
    return {"module": module, "mode": mode, "rc": proc.returncode, "crash": crash, "wall_s": round(wall, 1),
            "timed_out": timed_out or status == "timeout", "status": status, "source": source,
            "tests": tests, "tail": tail(text), "events": events}


def compare(bare, sb):
    """Tests that pass bare and fail (or never ran) in the sandbox run."""
    only, skipped_only = [], []
    crash_reason = None
    if sb["source"] != "junit" or sb["timed_out"] or sb.get("crash"):
        crash_reason = "module %s in the sandbox (status %s, rc %s): %s" % (
            "timed out" if sb["timed_out"] else "crashed", sb["status"], sb["rc"],
            sb.get("crash") or sb["tail"][-400:].strip())
    errors_mod = [m for tid, (s, m) in sb["tests"].items()
                  if s == "fail" and not re.search(r"\.test\w*$", tid)]
    for tid, (s, _m) in sorted(bare["tests"].items()):
        if s != "pass":
            continue
        got = sb["tests"].get(tid)
        if got is None:
            reason = crash_reason or (errors_mod[0] if errors_mod else
                                      "did not run in the sandbox: " + sb["tail"][-300:].strip())
            only.append({"test": tid, "why": reason[-600:], "cause": cause_of(reason), "kind": "notrun"})
        elif got[0] == "fail":
            only.append({"test": tid, "why": got[1][-600:], "cause": cause_of(got[1]), "kind": "fail"})
        elif got[0] == "skip":
            skipped_only.append({"test": tid, "why": got[1][-300:]})
    return only, skipped_only


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--modes", default="bare,default,python")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "build-compat", "cpython"))
    ap.add_argument("--aj", default=os.environ.get("AJ_BIN", os.path.join(ROOT, "build", "agentjail")))
    ap.add_argument("--resources", default=RESOURCES)
    ap.add_argument("--exclude", default="", help="comma-separated modules to leave out")
    ap.add_argument("--resume", action="store_true",
                    help="keep the modules OUT/results.json already has (same modes) and run the rest")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("cpython.py: run as root (the bare runs are as nobody)", file=sys.stderr)
        return 1
    if not os.path.isdir("/usr/lib/python3.11/test/libregrtest"):
        print("cpython.py: CPython's test suite is missing: scripts/deps.sh compat "
              "(apt-get install libpython3.11-testsuite)", file=sys.stderr)
        return 1
    modes = args.modes.split(",")
    if modes[0] != "bare" or any(m not in SANDBOX_MODES for m in modes[1:]):
        print("cpython.py: --modes must be bare followed by any of %s" % ",".join(SANDBOX_MODES),
              file=sys.stderr)
        return 2
    mods = list(args.modules)
    if args.fast:
        mods += FAST
    if args.all:
        mods += list_all_modules()
    excl = set(filter(None, args.exclude.split(",")))
    mods = [m for m in dict.fromkeys(mods) if m not in excl]
    if not mods:
        ap.print_usage(sys.stderr)
        return 2
    args.aj = os.path.abspath(args.aj)
    args.out = os.path.abspath(args.out)
    if len(modes) > 1 and not os.access(args.aj, os.X_OK):
        print("cpython.py: %s is not an executable agentjail (--aj or AJ_BIN)" % args.aj, file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    # the sandbox's host uid must reach OUT/logs/MODULE/MODE/out to bind it
    os.chmod(args.out, os.stat(args.out).st_mode | 0o055)
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)
    args.policy = os.path.join(args.out, "limits.json")
    write_policy(args.policy, resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    def one_module(m):
        runs = {mode: run_one(args, m, mode, logs) for mode in modes}
        b = runs["bare"]
        entry = {"module": m, "bare": {"status": b["status"], "wall_s": b["wall_s"],
                                       "pass": sum(1 for s, _ in b["tests"].values() if s == "pass"),
                                       "total": len(b["tests"])}}
        for mode in modes[1:]:
            only, sk = compare(b, runs[mode])
            r = runs[mode]
            entry[mode] = {"status": r["status"], "wall_s": r["wall_s"], "source": r["source"],
                           "pass": sum(1 for s, _ in r["tests"].values() if s == "pass"),
                           "fail_only_in_sandbox": only, "skip_only_in_sandbox": sk,
                           "events": r["events"]}
        print("%-28s bare %4d/%-4d %s" % (m, entry["bare"]["pass"], entry["bare"]["total"],
              " ".join("%s: -%d" % (mo, len(entry[mo]["fail_only_in_sandbox"])) for mo in modes[1:])),
              flush=True)
        return entry

    t0 = time.monotonic()
    done = {}
    if args.resume and os.path.exists(os.path.join(args.out, "results.json")):
        with open(os.path.join(args.out, "results.json")) as f:
            prev = json.load(f)
        if prev["summary"]["modes"] == modes:
            done = {e["module"]: e for e in prev["modules"] if e["module"] in mods}
    todo = [m for m in mods if m not in done]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(one_module, m): m for m in todo}
        for fut in concurrent.futures.as_completed(futs):
            done[futs[fut]] = fut.result()
            # written after every module, so a run cut short still reports
            write_reports(args, modes, [done[m] for m in mods if m in done], mods, t0)
    print(json.dumps(write_reports(args, modes, [done[m] for m in mods], mods, t0), indent=1))
    return 0


def write_reports(args, modes, entries, mods, t0):
    summary = {"python_version": subprocess.run([PY, "-c", "import sys; print(sys.version.split()[0])"],
                                               capture_output=True, text=True).stdout.strip(), "agentjail": args.aj, "modes": modes,
               "pending": [m for m in mods if m not in {e["module"] for e in entries}],
               "resources": args.resources, "timeout_s": args.timeout,
               "wall_s": round(time.monotonic() - t0), "modules": len(entries),
               "passed_bare": sum(e["bare"]["pass"] for e in entries)}
    for mode in modes[1:]:
        by_cause = {}
        for e in entries:
            for t in e[mode]["fail_only_in_sandbox"]:
                by_cause[t["cause"]] = by_cause.get(t["cause"], 0) + 1
        summary[mode] = {"fail_only_in_sandbox": sum(by_cause.values()), "by_cause": by_cause,
                         "skip_only_in_sandbox": sum(len(e[mode]["skip_only_in_sandbox"]) for e in entries)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"summary": summary, "modules": entries}, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(render_md(summary, entries, modes))
    return summary


def render_md(summary, entries, modes):
    md = ["# CPython regression suite: bare vs agentjail", "",
          "Python %s, %d modules, resources `%s`, %d s per module and mode, %d s in all." % (
              summary["python_version"], summary["modules"], summary["resources"], summary["timeout_s"],
              summary["wall_s"]), "",
          ("Not run yet (the run was cut short): %s." % " ".join(summary["pending"]))
          if summary["pending"] else "All modules ran.", "",
          "Tests passing bare: **%d**." % summary["passed_bare"], ""]
    for mode in modes[1:]:
        s = summary[mode]
        md.append("- `%s`: **%d** fail only in the sandbox (%s); %d skipped only in the sandbox." % (
            mode, s["fail_only_in_sandbox"],
            ", ".join("%s %d" % kv for kv in sorted(s["by_cause"].items(), key=lambda kv: -kv[1])) or "none",
            s["skip_only_in_sandbox"]))
    md += ["", "| module | bare pass | " + " | ".join("%s fail-only" % m for m in modes[1:]) + " |",
           "|---|---:|" + "---:|" * (len(modes) - 1)]
    for e in entries:
        md.append("| %s | %d | %s |" % (e["module"], e["bare"]["pass"], " | ".join(
            "%d (%s)" % (len(e[m]["fail_only_in_sandbox"]), e[m]["status"]) for m in modes[1:])))
    for mode in modes[1:]:
        md += ["", "## Failing only in `%s`" % mode, "", "| module | test | cause | why |", "|---|---|---|---|"]
        for e in entries:
            for t in e[mode]["fail_only_in_sandbox"]:
                why = re.sub(r"\s+", " ", t["why"]).strip()[-220:].replace("|", "\\|")
                md.append("| %s | %s | %s | %s |" % (e["module"], t["test"].split(".", 2)[-1], t["cause"], why))
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
