"""Issue 12, the supervisor under pressure: the event budget, the output
relay, 64-bit deadlines, signals, and the caller's terminal.

- A payload that loops on unshare(CLONE_NEWUSER) (or connects to the decoy
  socket in a loop) gets at most --event-budget events of its own, then one
  events_suppressed summary a second; the result still counts every attempt,
  exactly, and the events file stays under its byte cap.
- The relay of stdout/stderr never blocks the supervisor: a reader that
  stalls does not suspend --timeout, a reader that is gone does not kill
  agentjail with SIGPIPE, and the caller's pipe is not made non-blocking.
- A timeout_ms above INT_MAX (library only: the CLI stops at 7 days) still
  leaves the run its timed checks (here the cpu-time limit).
- The payload starts with default dispositions and no blocked signal,
  whatever the caller ignored or blocked (CLI and pool); a SIGTERM that
  ends the run is the caller's: the CLI dies of it after writing the
  result, a library caller finds it pending.
- A terminal on the caller's side never reaches the payload: output still
  arrives, through the supervisor.

Runs as root and as nobody:
  python3 -m pytest -p no:cacheprovider tests/integration/test_relay.py
"""
import fcntl
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, cgroup_limits_only, helper, must_skip, run_aj, try_args, wait_for

TRY = "/opt/aj-try"
BYTES_PER_EVENT = 4096
SUMMARY_BYTES = 1024 * 1024
RESERVE_BYTES = 64 * 1024


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def probe_detail(run):
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    assert line, run
    return json.loads(line[-1])["detail"]


def librun():
    path = helper("aj-librun")
    if not os.access(path, os.X_OK):
        must_skip("aj-librun helper not built: " + path)
    return path


# ---- the event budget ------------------------------------------------------------------


def flood(tmp_path, budget, threads, ms):
    ev = str(tmp_path / "ev.jsonl")
    r = run_aj(["--events", ev, "--event-budget", str(budget)] + try_args(),
               [TRY, "unshare-flood", str(threads), str(ms)], timeout=120)
    assert r.result is not None, r
    m = re.search(r"attempts=(\d+) permitted=(\d+)", probe_detail(r))
    assert m, r
    assert int(m.group(2)) == 0, "unshare(CLONE_NEWUSER) was permitted in the sandbox: %r" % r
    return r, int(m.group(1)), ev


def test_event_flood_is_budgeted_and_counted(tmp_path):
    """unshare in a loop from 6 threads for 3 s: thousands of attempts. The
    events file holds at most the budget's worth of escape_attempt events
    plus about one summary a second; the result counts every attempt."""
    budget = 100
    r, attempts, ev = flood(tmp_path, budget, 6, 3000)
    assert attempts > 5 * budget, "the flood made too few attempts to test the budget: %d" % attempts
    events = read_events(ev)
    esc = [e for e in events if e["type"] == "escape_attempt"]
    summ = [e for e in events if e["type"] == "events_suppressed"]
    assert len(esc) <= budget, "%d escape_attempt events past a budget of %d" % (len(esc), budget)
    assert len(esc) == budget, "fewer events than the budget allows: %d" % len(esc)
    wall_s = r.result["wall_ms"] / 1000.0
    assert 1 <= len(summ) <= int(wall_s) + 3, "summaries: %d in %.1f s" % (len(summ), wall_s)
    final = summ[-1]
    assert final["final"] is True and events[-1]["type"] == "exit", events[-3:]
    assert all(not s["final"] for s in summ[:-1]), summ
    # Exact accounting: written + suppressed == attempts == the result's count.
    assert r.result["events"]["escape_attempt"] == attempts, (r.result["events"], attempts)
    assert final["suppressed_total"] == attempts - len(esc), (final, attempts)
    assert sum(s["suppressed"].get("escape_attempt", 0) for s in summ) == attempts - len(esc), summ
    assert sum(s["syscalls"].get("unshare", 0) for s in summ) == attempts - len(esc), summ
    assert r.result["escape_attempted"] is True
    cap = budget * BYTES_PER_EVENT + SUMMARY_BYTES + RESERVE_BYTES
    assert os.path.getsize(ev) <= cap, (os.path.getsize(ev), cap)


def test_below_the_budget_every_attempt_is_an_event(tmp_path):
    """Positive control: with a budget above the flood, each attempt is its
    own escape_attempt event and nothing is summarised."""
    r, attempts, ev = flood(tmp_path, 1000000, 1, 200)
    events = read_events(ev)
    esc = [e for e in events if e["type"] == "escape_attempt"]
    assert attempts > 0 and len(esc) == attempts, (len(esc), attempts)
    assert all(e["syscall"] == "unshare" for e in esc)
    assert not [e for e in events if e["type"] == "events_suppressed"]
    assert r.result["events"]["escape_attempt"] == attempts


def test_decoy_connects_count_against_the_budget(tmp_path):
    """Connecting to the decoy docker.sock in a loop: at most the budget's
    canary events; the result counts more. Control: a large budget writes
    one canary per counted connect."""
    out = {}
    for budget in (5, 100000):
        ev = str(tmp_path / ("ev%d.jsonl" % budget))
        r = run_aj(["--events", ev, "--event-budget", str(budget)] + try_args(), [TRY, "decoy-flood", "60"])
        assert r.result is not None, r
        events = read_events(ev)
        canaries = [e for e in events if e["type"] == "canary"]
        out[budget] = (len(canaries), r.result["events"]["canary"], events)
    small, large = out[5], out[100000]
    assert small[0] <= 5 and small[1] > 5, small[:2]
    assert [e for e in small[2] if e["type"] == "events_suppressed" and e["suppressed"].get("canary")], small[2][-3:]
    assert large[0] == large[1] > 5, large[:2]


def test_event_budget_flag_and_policy_key(tmp_path):
    """--event-budget and detection.event_budget set the same field; bad
    values are refused with exit 2 and a message naming the key."""
    for bad in ("0", "-1", "abc", "1000001"):
        r = run_aj(["--event-budget", bad], ["/bin/true"])
        assert r.returncode == 2 and "--event-budget" in r.stderr, (bad, r)
    pol = tmp_path / "p.json"
    pol.write_text(json.dumps({"version": 1, "detection": {"event_budget": 3}}))
    ev = str(tmp_path / "ev.jsonl")
    r = run_aj(["--policy", str(pol), "--events", ev] + try_args(), [TRY, "unshare-flood", "1", "300"])
    esc = [e for e in read_events(ev) if e["type"] == "escape_attempt"]
    assert len(esc) == 3 and r.result["events"]["escape_attempt"] > 3, (len(esc), r.result["events"])
    pol.write_text(json.dumps({"version": 1, "detection": {"event_budget": "many"}}))
    r = run_aj(["--policy", str(pol)], ["/bin/true"])
    assert r.returncode == 2 and "detection.event_budget" in r.stderr, r
    pol.write_text(json.dumps({"version": 1, "detection": {"event_budget": 7}}))
    dump = subprocess.run([AJ_BIN, "policy", "show", str(pol)], capture_output=True, text=True)
    assert dump.returncode == 0 and json.loads(dump.stdout)["detection"]["event_budget"] == 7, dump
    other = tmp_path / "q.json"
    other.write_text(json.dumps({"version": 1}))
    diff = subprocess.run([AJ_BIN, "policy", "diff", str(pol), str(other)], capture_output=True, text=True)
    assert "detection.event_budget: A 7, B 1000" in diff.stdout, diff


# ---- the output relay ------------------------------------------------------------------


def test_stalled_reader_does_not_suspend_the_timeout(tmp_path):
    """`agentjail --timeout 2 -- yes | (a reader that never reads)`: the run
    ends near its timeout with status timeout (it ran until the reader quit
    before), and the caller's pipe is still blocking. Control: the same
    timeout on `sleep` with no output, measured here."""
    res = str(tmp_path / "r.json")
    t0 = time.monotonic()
    ctl = run_aj(["--timeout", "2"], ["sleep", "100"])
    control_s = time.monotonic() - t0
    assert ctl.result["status"] == "timeout", ctl
    r, w = os.pipe()
    try:
        t0 = time.monotonic()
        p = subprocess.Popen([AJ_BIN, "run", "--result", res, "--output-limit", "10M", "--timeout", "2", "--", "yes"],
                             stdout=w, stderr=subprocess.PIPE)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail("agentjail still running 60 s into a 2 s timeout: the relay blocked on the stalled reader")
        elapsed = time.monotonic() - t0
        flags = fcntl.fcntl(w, fcntl.F_GETFL)
    finally:
        os.close(r)
        os.close(w)
    with open(res) as f:
        result = json.load(f)
    assert result["status"] == "timeout", result
    assert elapsed < control_s + 5, (elapsed, control_s)
    assert not flags & os.O_NONBLOCK, "agentjail left the caller's pipe non-blocking"


def test_closed_reader_is_not_a_sigpipe_death(tmp_path):
    """stdout is a pipe whose read end is closed: agentjail itself must not
    die of SIGPIPE (it did, with no result and no exit event). The run goes
    on, counted, to its output limit; result and exit event are written.
    Control: the same run with a live reader delivers the output."""
    res, ev = str(tmp_path / "r.json"), str(tmp_path / "ev.jsonl")
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([AJ_BIN, "run", "--result", res, "--events", ev, "--output-limit", "1M", "--timeout", "20",
                            "--", "yes"], stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    assert p.returncode != -signal.SIGPIPE, "agentjail died of SIGPIPE"
    with open(res) as f:
        result = json.load(f)
    assert result["status"] == "output_limit", result
    assert p.returncode == result["exit_code"], (p.returncode, result["exit_code"])
    events = read_events(ev)
    assert events[-1]["type"] == "exit" and events[-1]["status"] == "output_limit", events[-2:]
    ctl = run_aj(["--output-limit", "1M"], ["sh", "-c", "yes | head -c 100000"])
    assert ctl.result["status"] == "ok" and len(ctl.stdout) == 100000, ctl.result


def test_reader_that_quits_mid_run_is_not_waited_for(tmp_path):
    """`agentjail -- yes | (sleep 1)`: the reader quits, unread, while the
    relay's buffer is full and it waits for the pipe to take more. The run
    goes on to its output limit at once (the relay once kept waiting, not
    reading the payload, until the timeout); the result says output_limit."""
    res = str(tmp_path / "r.json")
    reader = subprocess.Popen(["sleep", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        p = subprocess.run([AJ_BIN, "run", "--result", res, "--output-limit", "50M", "--timeout", "30", "--", "yes"],
                           stdout=reader.stdin, stderr=subprocess.PIPE, timeout=90)
    finally:
        reader.stdin.close()
        reader.wait()
    assert p.returncode != -signal.SIGPIPE, "agentjail died of SIGPIPE"
    with open(res) as f:
        result = json.load(f)
    assert result["status"] == "output_limit", result
    assert result["stdout_truncated"] is True, result


# ---- 64-bit deadlines ------------------------------------------------------------------


@pytest.mark.parametrize("timeout_ms", [3000000000, 2000000000])
def test_huge_timeout_keeps_the_timed_checks(timeout_ms):
    """timeout_ms = 3e9 (above INT_MAX) once made poll's timeout negative:
    no cgroup check ever ran. The payload spreads its CPU over short-lived
    processes (0.3 s each), so the per-process RLIMIT_CPU backstop never
    fires and only the supervisor's periodic check of the cgroup's usage
    ends it at --cpu-time 1s. 2e9 (below INT_MAX) is the control."""
    cgroup_limits_only("--cpu-time needs a cgroup (test_limits checks it fails closed without one)")
    burn = "while :; do (while :; do :; done) & sleep 0.3; kill $!; wait $! 2>/dev/null; done"
    try:
        p = subprocess.run([librun(), "--timeout-ms", str(timeout_ms), "--cpu-time", "1s", "--", "sh", "-c", burn],
                           capture_output=True, text=True, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("the cpu-time limit never fired with timeout_ms=%d" % timeout_ms)
    out = json.loads(p.stdout)
    assert out["status"] == "cpu_limit", (out, p.stderr)


# ---- signals -----------------------------------------------------------------------------


def sig_fields(text):
    f = dict(re.findall(r"^(Sig\w+):\s+([0-9a-f]+)$", text, re.M))
    assert "SigIgn" in f and "SigBlk" in f, text
    return int(f["SigIgn"], 16), int(f["SigBlk"], 16)


def ignore_and_block():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def test_payload_does_not_inherit_ignored_or_blocked_signals():
    """agentjail started with SIGINT and SIGTERM ignored and SIGUSR1 blocked
    (nohup, a server's thread): the payload's /proc/self/status shows
    SigIgn and SigBlk 0. Control: a host process started the same way
    shows them set."""
    ctl = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, preexec_fn=ignore_and_block)
    ign, blk = sig_fields(ctl.stdout)
    assert ign & (1 << (signal.SIGINT - 1)) and blk & (1 << (signal.SIGUSR1 - 1)), (hex(ign), hex(blk))
    p = subprocess.run([AJ_BIN, "run", "--", "cat", "/proc/self/status"], capture_output=True, text=True,
                       preexec_fn=ignore_and_block, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sig_fields(p.stdout) == (0, 0), p.stdout


def test_pooled_payload_does_not_inherit_the_pool_creators_signals():
    """A pool created by a thread that ignores SIGINT/SIGTERM and blocks
    SIGUSR1: its payloads still start with SigIgn and SigBlk 0."""
    p = subprocess.run([librun(), "--ignore-signals", "--block-usr1", "--pool", "--", "cat", "/proc/self/status"],
                       capture_output=True, text=True, timeout=60)
    assert '"status": "ok"' in p.stdout, (p.stdout, p.stderr)
    assert sig_fields(p.stdout) == (0, 0), p.stdout


def test_sigterm_ends_the_run_and_then_the_cli():
    """SIGTERM to agentjail mid-run: the run ends (status signaled, signal
    15), the result is written, and agentjail then dies of the SIGTERM
    itself (it used to swallow it and exit 143)."""
    with tempfile.TemporaryDirectory() as d:
        res, ev = os.path.join(d, "r.json"), os.path.join(d, "ev.jsonl")
        p = subprocess.Popen([AJ_BIN, "run", "--result", res, "--events", ev, "--", "sleep", "60"])
        assert wait_for(lambda: os.path.exists(ev) and '"start"' in open(ev).read(), 30), "the run never started"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        with open(res) as f:
            result = json.load(f)
    assert result["status"] == "signaled" and result["signal"] == signal.SIGTERM, result
    assert p.returncode == -signal.SIGTERM, p.returncode


def test_library_caller_finds_the_sigterm_pending():
    """A library caller that blocks SIGTERM (as a server does): after the
    run that SIGTERM ended, SIGTERM is pending for it, not drained away."""
    p = subprocess.Popen([librun(), "--block-signals", "--", "sleep", "60"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    res = json.loads(out)
    assert res["status"] == "signaled" and res["signal"] == signal.SIGTERM, res
    assert signal.SIGTERM in res["pending"], res


# ---- the caller's terminal ----------------------------------------------------------------


def run_on_pty(args, feed=None, stdout_pty=True):
    """agentjail with stdin, stdout and stderr on a fresh pty (its
    controlling terminal; stdout a pipe unless stdout_pty); feed is typed
    after a second. Returns (terminal output, stdout pipe output, exit
    status, the pty slave's (st_dev, st_rdev), its termios before and
    after)."""
    import pty
    import select
    import termios
    master, slave = pty.openpty()
    st = os.fstat(slave)
    before = termios.tcgetattr(slave)

    def ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(args, stdin=slave, stdout=slave if stdout_pty else subprocess.PIPE, stderr=slave,
                         preexec_fn=ctty)
    out = b""
    end = time.monotonic() + 60
    fed = feed is None
    start = time.monotonic()
    while time.monotonic() < end:
        if not fed and time.monotonic() - start > 1.0:
            os.write(master, feed)
            fed = True
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    piped = p.stdout.read().decode(errors="replace") if not stdout_pty else ""
    p.wait(timeout=30)
    after = termios.tcgetattr(slave)
    os.close(slave)
    os.close(master)
    return out.decode(errors="replace"), piped, p.returncode, (st.st_dev, st.st_rdev), before, after


def tty_fds(text):
    """fd -> (isatty, (st_dev, st_rdev)) from aj-try tty-info's detail."""
    return {int(fd): (tty == "1", (os.makedev(int(dmaj), int(dmin)), os.makedev(int(rmaj), int(rmin))))
            for fd, tty, rmaj, rmin, dmaj, dmin in re.findall(r"fd(\d)=tty:(\d),rdev:(\d+):(\d+),dev:(\d+):(\d+)", text)}


def test_payload_never_gets_the_callers_terminal():
    """agentjail on a pty: the payload's fds 0-2 are a terminal of its own
    (a private devpts instance: not the caller's device), so nothing it does
    to them (TIOCSTI is refused anyway) reaches the caller's terminal; its
    output arrives on the caller's pty, and what is typed there reaches it.
    The caller's terminal settings are the same after the run. Control: a
    host process on the same kind of pty has the pty itself as fds 0-2, and
    its TIOCSTI works."""
    out, _, rc, dev, _, _ = run_on_pty([helper("aj-try"), "tty-info"])
    fds = tty_fds(out)
    assert fds.get(0) == (True, dev), out
    try:
        legacy = open("/proc/sys/dev/tty/legacy_tiocsti").read().strip() != "0"
    except OSError:
        legacy = True  # before 6.2: TIOCSTI always there
    if legacy or os.geteuid() == 0:
        assert "sti0=ok" in out, out
    out, _, rc, dev, before, after = run_on_pty([AJ_BIN, "run"] + try_args() + ["--", TRY, "tty-info"])
    assert '"probe":"tty-info"' in out, out  # the output reached the caller's terminal
    fds = tty_fds(out)
    assert len(fds) == 3, out
    for fd, (tty, d) in fds.items():
        assert d != dev, "payload fd %d is the caller's pty: %s" % (fd, out)
        assert tty, "payload fd %d is not a terminal (it gets a pty of its own): %s" % (fd, out)
    assert "sti0=ok" not in out and "sti1=ok" not in out and "sti2=ok" not in out, out
    assert before == after, "the caller's terminal settings changed: %r -> %r" % (before, after)
    # Input typed on the caller's terminal reaches the payload, echoed by its pty.
    out, _, rc, _, before, after = run_on_pty([AJ_BIN, "run", "--", "sh", "-c", "read x; echo got:$x"],
                                              feed=b"hello\r")
    assert "got:hello" in out and rc == 0, out
    assert before == after


def test_terminal_stdin_with_piped_stdout_is_dev_null():
    """stdin a terminal, stdout a pipe (not interactive): the payload's
    stdin is /dev/null (character device 1:3), never the caller's pty."""
    out, piped, rc, dev, _, _ = run_on_pty([AJ_BIN, "run"] + try_args() + ["--", TRY, "tty-info"], stdout_pty=False)
    fds = tty_fds(piped)
    assert fds and fds[0] == (False, (fds[0][1][0], os.makedev(1, 3))), piped
    assert all(d != dev for _, d in fds.values()), piped
