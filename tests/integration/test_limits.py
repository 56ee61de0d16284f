"""Resource limits: what the kernel does to a payload that overreaches.

Fork bomb, memory bomb, CPU time, CPU bandwidth, daemons past a timeout,
output floods, disk fill, file size, open files, supervisor SIGKILL, leaks,
result accounting and bad values. Each limit has a positive control (the
same payload under a budget it fits in, or without the flag). Times are
bounded generously: a slow host may make a run slower, never make a limit
look enforced when it was not.

As root agentjail creates a cgroup per run; as nobody (no writable cgroup
on the hosts this suite runs on) explicit cgroup limits (--memory, --pids,
--cpus, --cpu-time) must fail closed, and that is what is checked there.
--output-limit, --file-size, --open-files and --tmp-size need no cgroup and
are checked in both modes.

Processes are found by a unique sleep duration (`sleep 1000.<tag>`).
Environment: AJ_LEAK_RUNS (default 100) runs for the leftover check.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import agentjail_pids, wait_for, new_tag, pids_with, AJ_BIN, IS_ROOT, CG_LIMITS, \
    cgroup_limits_only, root_only, run_aj

PY = "/usr/bin/python3"
LEAK_RUNS = int(os.environ.get("AJ_LEAK_RUNS", "100"))
CG_ROOT = "/sys/fs/cgroup"
MiB = 1 << 20
LIMIT_LAYERS = ("cgroup", "memory_limit", "pids_limit", "cpu_bandwidth_limit", "cpu_time_limit")
SIGXFSZ = 25


# ---- helpers ------------------------------------------------------------------



def proc_status(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split(None, 1)[1].strip()
    except OSError:
        pass
    return None



def cg_dirs(match, maxdepth=6):
    """Directories under /sys/fs/cgroup (at most MAXDEPTH below it, like
    `find -maxdepth 6`) whose name satisfies MATCH."""
    found = []
    base = CG_ROOT.rstrip("/").count("/")
    for dirpath, dirnames, _ in os.walk(CG_ROOT, onerror=lambda e: None):
        depth = dirpath.rstrip("/").count("/") - base
        for d in dirnames:
            if match(d):
                found.append(os.path.join(dirpath, d))
        if depth + 1 >= maxdepth:
            dirnames[:] = []
    return sorted(found)


def aj_cgroups():
    """agentjail's cgroup dirs but for the leaf it moves its callers into
    (which holds this test while it runs)."""
    return cg_dirs(lambda n: "agentjail" in n and n != "agentjail-leaf")


RUN_NAME = re.compile(r"([0-9]+)\.([0-9]+)\.[0-9a-f]+(?:\.ns[0-9]+)?")


def starttime(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def v2_self():
    """This process's cgroup v2 path as agentjail sees it: a process that
    agentjail moved into the leaf of its cgroup (it moves every process of
    a delegated cgroup there, this test's included) belongs to the parent."""
    path = "/"
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, p = line.rstrip("\n").split(":", 2)
            if hid == "0" and ctrls == "":
                path = p
    head, _, tail = path.rpartition("/")
    if tail == "agentjail-leaf":
        path = head or "/"
    return path


def own_bases():
    """Where agentjail puts the runs this test starts: <hierarchy><the test's
    own cgroup>/agentjail, per hierarchy, with whether that dir is shared
    with other users' runs (own cgroup "/"). Other places under
    /sys/fs/cgroup belong to other users' runs (other cgroups)."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = right.split()
            if fields[0] == "cgroup2":
                mounts.setdefault("", left.split()[4])
            elif fields[0] == "cgroup":
                for c in fields[2].split(","):
                    mounts.setdefault(c, left.split()[4])
    bases = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if hid == "0" and ctrls == "":
                path = v2_self()
            for c in ctrls.split(",") if ctrls else [""]:
                if c in mounts:
                    base = mounts[c] + path.rstrip("/") + "/agentjail"
                    bases[base] = path == "/"
    return bases


def cgroup_leaks():
    """agentjail cgroup dirs nobody will remove, where this test's runs live:
    an "agentjail" base dir with no run in it, or a run dir whose supervisor
    is gone (named <pid>.<starttime>.<id>). In a base shared with other
    users' runs a dead owner's dir is only counted when no other agentjail
    runs (theirs is removed by their next run)."""
    leaks = []
    foreign = None
    for base, shared in own_bases().items():
        try:
            runs = [e for e in os.listdir(base) if os.path.isdir(os.path.join(base, e))]
        except OSError:
            continue
        if not runs:
            leaks.append(base)
        for name in runs:
            m = RUN_NAME.fullmatch(name)
            if m and starttime(int(m.group(1))) == int(m.group(2)):
                continue
            if shared and foreign is None:
                foreign = foreign_runs()
            if not (shared and foreign):
                leaks.append(os.path.join(base, name))
    return sorted(leaks)


def new_leaks(before, timeout=2):
    """Leaks not in BEFORE that persist for TIMEOUT seconds (a shared base
    dir is briefly empty while another user's run starts or ends)."""
    end = time.monotonic() + timeout
    while True:
        cur = [d for d in cgroup_leaks() if d not in before]
        if not cur or time.monotonic() >= end:
            return cur
        time.sleep(0.05)


def foreign_runs():
    """Whether an agentjail process that is not this test's runs on the host
    (another user's, another suite's): shared cgroup dirs may change under us."""
    me = os.getpid()
    for pid in agentjail_pids():
        p = int(pid)
        for _ in range(64):
            p = int(proc_status(p, "PPid") or 0)
            if p == me:
                break
            if p <= 1:
                return True
    return False


def run_cgroups(sup_pid):
    """The run cgroups of the supervisor SUP_PID: <pid>.<starttime>.<id>."""
    return cg_dirs(lambda n: n.startswith("%d." % sup_pid))


def cg_procs(d):
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return f.read().split()
    except OSError:
        return []


def read(path):
    with open(path) as f:
        return f.read().strip()


def host_cgroup_layout():
    """Per controller, where this host provides it to us: 'v2', 'v1' or None,
    and the v2 mount (or None). Read from the kernel, as agentjail does."""
    v2_mount, v1 = None, {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mnt = left.split()[4]
            fstype, opts = right.split()[0], right.split()[2]
            if fstype == "cgroup2" and v2_mount is None:
                v2_mount = mnt
            elif fstype == "cgroup":
                for c in opts.split(","):
                    v1.setdefault(c, mnt)
    v2_ctrls = set()
    if v2_mount:
        self_path = v2_self()
        try:
            v2_ctrls = set(read(os.path.join(v2_mount + self_path.rstrip("/"),
                                             "cgroup.controllers")).split())
        except OSError:
            pass
    layout = {}
    for c in ("memory", "pids", "cpu", "cpuacct"):
        if c != "cpuacct" and c in v2_ctrls:
            layout[c] = "v2"
        elif c in v1:
            layout[c] = "v1"
        else:
            layout[c] = None
    return layout, v2_mount


def raw_run(args, cmd, timeout=60):
    """`agentjail run` with stdout/stderr as bytes in files (a flood must not
    depend on the test reading fast). Returns (exit code, stdout, stderr,
    result, peak RSS of the supervisor in KiB): its VmHWM, polled until it
    exits (exec gave it a fresh mm, so this is agentjail alone)."""
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res_path = os.path.join(d, "r.json")
        with open(os.path.join(d, "out"), "w+b") as out, open(os.path.join(d, "err"), "w+b") as err:
            p = subprocess.Popen([AJ_BIN, "run", "--result", res_path] + args + ["--"] + cmd,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            end = time.monotonic() + timeout
            hwm = None
            while p.poll() is None:
                v = proc_status(p.pid, "VmHWM")
                if v:
                    hwm = max(hwm or 0, int(v.split()[0]))
                if time.monotonic() > end:
                    p.kill()
                    p.wait()
                    pytest.fail("agentjail run did not end in %d s" % timeout)
                time.sleep(0.001)
            out.seek(0)
            err.seek(0)
            o, e = out.read(), err.read()
        result = json.load(open(res_path)) if os.path.exists(res_path) else None
    assert hwm is not None, "the supervisor's VmHWM was never read"
    return p.returncode, o, e, result, hwm


def time_maxrss(args, cmd):
    """/usr/bin/time's %M for the run (agentjail and what it reaped), or
    None if GNU time is not installed. Not measured with our own wait4:
    ru_maxrss would count this pytest process, whose memory a spawned child
    shares until exec."""
    if not os.access("/usr/bin/time", os.X_OK):
        return None
    with tempfile.NamedTemporaryFile("r", prefix="ajtest-time-") as f:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name, AJ_BIN, "run"] + args +
                           ["--"] + cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        assert p.returncode == 137, p
        return int(f.read().split()[-1])


def assert_small_supervisor(hwm, args, cmd):
    """The flood is relayed through a fixed buffer: agentjail stays small."""
    assert hwm < 64 * 1024, "supervisor VmHWM %d KiB" % hwm
    m = time_maxrss(args, cmd)
    assert m is None or m < 64 * 1024, "/usr/bin/time %%M %d KiB" % m


@pytest.fixture(autouse=True)
def no_cgroup_leaks():
    """After every test here: no new agentjail cgroup dir that nobody will
    remove (conftest's no_leaks checks mounts, processes and temp dirs, not
    cgroups). What a failure left is removed after the check so that it
    does not fail later tests too."""
    before = set(cgroup_leaks())
    yield
    new = new_leaks(before)
    for d in sorted(new, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass
    assert not new, "agentjail cgroup dirs left: %r" % new


def need_cgroup_limits():
    cgroup_limits_only("explicit cgroup limits fail closed without a writable cgroup "
                       "(test_explicit_limits_fail_closed_without_cgroup)")


def host_still_forks():
    p = subprocess.run(["sh", "-c", "true & wait; echo forked"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and p.stdout == "forked\n", p


# ---- pids ---------------------------------------------------------------------

FORK_BOMB = ["sh", "-c", "f() { f | f & }; f; sleep 30"]


def test_fork_bomb_hits_pids_limit():
    need_cgroup_limits()
    t = time.monotonic()
    r = run_aj(["--pids", "64", "--timeout", "30"], FORK_BOMB)
    elapsed = time.monotonic() - t
    assert r.returncode == 137, r
    assert r.result["status"] == "pids_limit" and r.result["exit_code"] == 137, r.result
    assert r.result["signal"] == 9, r.result
    # Ended by the limit, far from the 30 s timeout.
    assert elapsed < 10 and r.result["wall_ms"] < 10000, (elapsed, r.result)
    host_still_forks()


def test_python_fork_loop_hits_pids_limit():
    need_cgroup_limits()
    code = ("import os, time\n"
            "n = 0\n"
            "while True:\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(60); os._exit(0)\n"
            "        n += 1\n"
            "    except OSError as e:\n"
            "        print('fork failed after', n, e.errno, flush=True); time.sleep(60)\n")
    r = run_aj(["--pids", "64", "--timeout", "30"], [PY, "-c", code])
    assert r.returncode == 137 and r.result["status"] == "pids_limit", r
    assert r.result["wall_ms"] < 10000, r.result
    host_still_forks()


def test_forking_within_pids_limit_is_ok():
    need_cgroup_limits()
    r = run_aj(["--pids", "64", "--timeout", "30"],
               ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait; echo done"])
    assert r.returncode == 0 and r.stdout == "done\n", r
    assert r.result["status"] == "ok" and r.result["layers"]["pids_limit"] is True, r.result


# ---- memory -------------------------------------------------------------------

MEM_BOMB = "l = []\nwhile True:\n    l.append(bytearray(1 << 20))\n"


def test_memory_bomb_hits_memory_limit():
    need_cgroup_limits()
    r = run_aj(["--memory", "64M", "--timeout", "30"], [PY, "-c", MEM_BOMB])
    assert r.returncode == 137, r
    assert r.result["status"] == "memory_limit" and r.result["signal"] == 9, r.result
    assert r.result["wall_ms"] < 20000, r.result
    # The group's peak: close to the limit, never above it.
    assert 40 * 1024 <= r.result["max_rss_kb"] <= 64 * 1024 + 1024, r.result
    # The host is fine: it forks and allocates.
    host_still_forks()
    p = subprocess.run([PY, "-c", "b = bytearray(128 << 20); print(len(b))"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == "%d\n" % (128 * MiB), p


def test_allocation_within_memory_limit_is_ok():
    need_cgroup_limits()
    code = "l = [bytearray(1 << 20) for _ in range(16)]\nprint(sum(map(len, l)))\n"
    r = run_aj(["--memory", "64M", "--timeout", "30"], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "%d\n" % (16 * MiB), r
    assert r.result["status"] == "ok" and r.result["layers"]["memory_limit"] is True, r.result
    assert 16 * 1024 <= r.result["max_rss_kb"] <= 64 * 1024, r.result


# ---- CPU time -------------------------------------------------------------------

def test_busy_loop_hits_cpu_time_limit():
    need_cgroup_limits()
    t = time.monotonic()
    r = run_aj(["--cpu-time", "1", "--timeout", "30"], ["sh", "-c", "while :; do :; done"])
    elapsed = time.monotonic() - t
    assert r.returncode == 137, r
    assert r.result["status"] == "cpu_limit" and r.result["signal"] == 9, r.result
    # At the budget; the per-process RLIMIT_CPU backstop (2 s) was not needed.
    assert 1000 <= r.result["cpu_ms"] < 1900, r.result
    assert elapsed < 6, elapsed


def test_cpu_time_counts_the_whole_tree():
    need_cgroup_limits()
    # Two busy processes: the tree reaches 1 s long before either does.
    r = run_aj(["--cpu-time", "1", "--timeout", "30"],
               ["sh", "-c", "sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & wait"])
    assert r.returncode == 137 and r.result["status"] == "cpu_limit", r
    # Per process (RLIMIT_CPU) it would be about 2 x 2 s.
    assert 1000 <= r.result["cpu_ms"] < 1900, r.result


def test_short_computation_within_cpu_time_is_ok():
    need_cgroup_limits()
    code = "print(sum(i * i for i in range(200000)))\n"
    r = run_aj(["--cpu-time", "5", "--timeout", "30"], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "%d\n" % sum(i * i for i in range(200000)), r
    assert r.result["status"] == "ok" and r.result["layers"]["cpu_time_limit"] is True, r.result
    assert r.result["cpu_ms"] < 5000, r.result


# ---- CPU bandwidth --------------------------------------------------------------

BUSY_2S = ("import time\n"
           "end = time.monotonic() + 2\n"
           "while time.monotonic() < end: pass\n")


def test_cpus_throttles_bandwidth():
    need_cgroup_limits()
    r = run_aj(["--cpus", "0.25", "--timeout", "30"], [PY, "-c", BUSY_2S])
    assert r.returncode == 0 and r.result["status"] == "ok", r
    assert r.result["layers"]["cpu_bandwidth_limit"] is True, r.result
    share = r.result["cpu_ms"] / r.result["wall_ms"]
    assert share <= 0.35, (share, r.result)
    # Control: the same loop without --cpus gets more than the bound the
    # limited run stayed under (most of a CPU on an idle host; less when
    # other work shares the CPUs, but still clearly above 0.35).
    q = run_aj(["--timeout", "30"], [PY, "-c", BUSY_2S])
    assert q.returncode == 0 and q.result["status"] == "ok", q
    assert q.result["layers"]["cpu_bandwidth_limit"] is False, q.result
    share = q.result["cpu_ms"] / q.result["wall_ms"]
    assert share > 0.38, (share, q.result)


# ---- timeout vs daemons -----------------------------------------------------------

def test_timeout_kills_daemon_that_ignores_sigterm(reaper):
    tag = new_tag()
    reaper.append(tag)
    # setsid + double fork; the daemon ignores TERM (and HUP) and sleeps on.
    payload = ("setsid sh -c 'trap \"\" TERM HUP; (sleep %s &)' ; sleep 100" % tag)
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res = os.path.join(d, "r.json")
        t = time.monotonic()
        p = subprocess.Popen([AJ_BIN, "run", "--result", res, "--timeout", "1", "--",
                              "sh", "-c", payload],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Control: the daemon runs, this scan sees it, and it does ignore TERM.
        pids = wait_for(lambda: pids_with(tag), 5)
        assert pids, "daemon never seen"
        ign = proc_status(pids[0], "SigIgn")
        out, err = p.communicate(timeout=30)
        elapsed = time.monotonic() - t
        result = json.load(open(res))
    assert ign is not None and int(ign, 16) & (1 << (signal.SIGTERM - 1)), ign
    assert p.returncode == 137, (out, err)
    assert result["status"] == "timeout", result
    assert elapsed < 6, elapsed
    assert wait_for(lambda: not pids_with(tag), 2), "daemon survived: %r" % pids_with(tag)


# ---- output ----------------------------------------------------------------------

def test_stdout_flood_is_cut_at_output_limit():
    args, cmd = ["--output-limit", "1M", "--timeout", "30"], ["head", "-c", "1G", "/dev/zero"]
    rc, out, err, res, hwm = raw_run(args, cmd)
    assert rc == 137, (rc, err[-2000:], res)
    assert res["status"] == "output_limit", res
    assert res["stdout_truncated"] is True and res["stderr_truncated"] is False, res
    assert len(out) == MiB and out == bytes(MiB), len(out)
    assert res["wall_ms"] < 20000, res
    assert_small_supervisor(hwm, args, cmd)


def test_stdout_flood_with_yes():
    args, cmd = ["--output-limit", "1M", "--timeout", "30"], ["yes"]
    rc, out, err, res, hwm = raw_run(args, cmd)
    assert rc == 137 and res["status"] == "output_limit", (rc, err[-2000:], res)
    assert res["stdout_truncated"] is True, res
    assert out == b"y\n" * (MiB // 2), len(out)
    assert_small_supervisor(hwm, args, cmd)


def test_stderr_flood_is_cut_at_output_limit():
    args, cmd = ["--output-limit", "1M", "--timeout", "30"], ["sh", "-c", "head -c 1G /dev/zero >&2"]
    rc, out, err, res, hwm = raw_run(args, cmd)
    assert rc == 137, (rc, res)
    assert res["status"] == "output_limit", res
    assert res["stderr_truncated"] is True and res["stdout_truncated"] is False, res
    # agentjail writes nothing of its own on stderr for a limit (the status
    # is in the result): exactly the payload's first MiB.
    assert len(err) == MiB and err == bytes(MiB), (len(err), err[MiB:][:500])
    assert out == b"", out[:200]
    assert_small_supervisor(hwm, args, cmd)


def test_output_within_limit_passes_intact():
    # Exactly at the limit on stdout, just under it on stderr: both whole.
    code = ("import os, sys\n"
            "data = bytes(range(256)) * 4096\n"          # 1 MiB, every byte value
            "sys.stdout.buffer.write(data); sys.stdout.flush()\n"
            "sys.stderr.buffer.write(data[:-1]); sys.stderr.flush()\n")
    rc, out, err, res, _ = raw_run(["--output-limit", "1M", "--timeout", "30"], [PY, "-c", code])
    data = bytes(range(256)) * 4096
    assert rc == 0 and res["status"] == "ok", (rc, err[-2000:], res)
    assert out == data and err == data[:-1], (len(out), len(err))
    assert res["stdout_truncated"] is False and res["stderr_truncated"] is False, res
    assert res["layers"]["output_limit"] is True, res
    # One byte more is over.
    code2 = "import sys\nsys.stdout.buffer.write(bytes(%d)); sys.stdout.flush()\n" % (MiB + 1)
    rc, out, _, res, _ = raw_run(["--output-limit", "1M", "--timeout", "30"], [PY, "-c", code2])
    assert rc == 137 and res["status"] == "output_limit" and len(out) == MiB, (rc, len(out), res)


# ---- files ----------------------------------------------------------------------

def test_tmp_fill_fails_with_enospc():
    cmd = ["sh", "-c", "dd if=/dev/zero of=/tmp/f bs=1M 2>&1; echo dd=$?; stat -c %s /tmp/f"]
    r = run_aj(["--tmp-size", "8M", "--timeout", "30"], cmd)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert "No space left on device" in r.stdout, r
    assert lines[-2] != "dd=0", r
    size = int(lines[-1])
    assert 4 * MiB <= size <= 8 * MiB, size
    # Control: 16 MiB fit in a 32M /tmp.
    cmd = ["sh", "-c", "dd if=/dev/zero of=/tmp/f bs=1M count=16 2>/dev/null; echo dd=$?; "
           "stat -c %s /tmp/f"]
    r = run_aj(["--tmp-size", "32M", "--timeout", "30"], cmd)
    assert r.returncode == 0 and r.stdout.splitlines() == ["dd=0", str(16 * MiB)], r


def test_file_size_limit():
    # dd gets SIGXFSZ (default action: die), the shell reports 128+25.
    cmd = ["sh", "-c", "dd if=/dev/zero of=/tmp/f bs=1M count=2 2>/dev/null; echo dd=$?; "
           "stat -c %s /tmp/f"]
    r = run_aj(["--file-size", "1M"], cmd)
    assert r.returncode == 0, r
    assert r.stdout.splitlines() == ["dd=%d" % (128 + SIGXFSZ), str(MiB)], r
    # Python ignores SIGXFSZ: the write fails with EFBIG instead.
    code = ("import errno\n"
            "try:\n"
            "    with open('/tmp/f', 'wb') as f: f.write(bytes(2 << 20))\n"
            "    print('wrote')\n"
            "except OSError as e:\n"
            "    print(errno.errorcode[e.errno])\n")
    r = run_aj(["--file-size", "1M"], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "EFBIG\n", r
    # Control: the same 2 MiB under --file-size 4M.
    r = run_aj(["--file-size", "4M"], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "wrote\n", r
    r = run_aj(["--file-size", "4M"], cmd)
    assert r.returncode == 0 and r.stdout.splitlines() == ["dd=0", str(2 * MiB)], r


def test_open_files_limit():
    code = ("import errno\n"
            "fs = []\n"
            "try:\n"
            "    for i in range(100): fs.append(open('/dev/null'))\n"
            "    print('opened', len(fs))\n"
            "except OSError as e:\n"
            "    print(errno.errorcode[e.errno], len(fs))\n")
    r = run_aj(["--open-files", "32"], [PY, "-c", code])
    assert r.returncode == 0, r
    what, n = r.stdout.split()
    assert what == "EMFILE" and 20 <= int(n) < 32, r
    # Control: 100 files under --open-files 256.
    r = run_aj(["--open-files", "256"], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "opened 100\n", r


# ---- supervisor SIGKILL -------------------------------------------------------------

@pytest.mark.parametrize("args", [
    [],
    ["--memory", "64M", "--pids", "64", "--cpus", "1", "--cpu-time", "100"],
], ids=["default", "all-limits"])
def test_supervisor_sigkill_leaves_nothing(reaper, args):
    if args:
        need_cgroup_limits()
    tag = new_tag()
    reaper.append(tag)
    before = set(cgroup_leaks())
    p = subprocess.Popen([AJ_BIN, "run"] + args + ["--", "sleep", tag],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    pids = wait_for(lambda: pids_with(tag), 5)
    assert pids, "payload never seen"
    init = int(proc_status(pids[0], "PPid") or 0)
    dirs = run_cgroups(p.pid)
    if CG_LIMITS:
        # Control: the run has cgroups and the payload is in them.
        assert dirs, "no run cgroup for supervisor %d" % p.pid
        assert any(str(pids[0]) in cg_procs(d) for d in dirs), dirs
    p.kill()
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL
    gone = wait_for(lambda: not pids_with(tag) and not os.path.exists("/proc/%d" % init), 2)
    assert gone, "sandbox outlived its supervisor: payload %r, init %d alive=%s" % (
        pids_with(tag), init, os.path.exists("/proc/%d" % init))
    if CG_LIMITS:
        assert wait_for(lambda: not any(cg_procs(d) for d in dirs), 2), \
            {d: cg_procs(d) for d in dirs}
        # Nobody removed them: they stay until the next run starts (any
        # user's run cleans the shared hierarchies, hence the condition) ...
        if not foreign_runs():
            assert run_cgroups(p.pid) == dirs, run_cgroups(p.pid)
    r = run_aj([], ["true"])
    assert r.returncode == 0 and r.result["status"] == "ok", r
    # ... which removes them, and leaves no agentjail dir behind either.
    assert run_cgroups(p.pid) == [], run_cgroups(p.pid)
    assert new_leaks(before) == [], new_leaks(before)


def test_runs_of_another_pid_namespace_are_not_reaped(tmp_path):
    """Stale-run cleanup judges a run cgroup's owner by pid only within its
    own pid namespace: a supervisor in another one (a second container
    sharing the cgroup base) is pid 1 there, which here is a different,
    live process. Its runs must survive a run started here."""
    root_only("needs root to make a pid namespace")
    need_cgroup_limits()
    import random
    tag = "3.%09d" % random.randrange(10 ** 9)  # `sleep 3.xxx`: unique, and it ends
    res = str(tmp_path / "result.json")
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", AJ_BIN, "run", "--result", res,
                          "--pids", "64", "--", "sleep", tag],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        pids = wait_for(lambda: pids_with(tag), 10)
        assert pids, "payload never seen"
        dirs = [d for d in cg_dirs(lambda n: RUN_NAME.fullmatch(n) is not None) if str(pids[0]) in cg_procs(d)]
        assert dirs, "the other namespace's run has no cgroup"
        # A run here cleans up stale runs in the same base ...
        r = run_aj([], ["true"])
        assert r.returncode == 0 and r.result["status"] == "ok", r
        # ... and leaves the other namespace's live run alone.
        assert all(os.path.isdir(d) for d in dirs), dirs
        assert pids_with(tag), "the other namespace's payload was killed"
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(res) as f:
        result = json.load(f)
    assert p.returncode == 0 and result["status"] == "ok", (p.returncode, result, err)


# ---- leftovers ------------------------------------------------------------------

def test_many_limited_runs_leave_nothing(reaper):
    tag = new_tag()
    reaper.append(tag)
    # Rootless: no cgroup limits to ask for (they fail closed); the runs
    # still must leave nothing.
    args = ["--memory", "64M", "--pids", "64"] if CG_LIMITS else []
    before = set(cgroup_leaks())
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    t = time.monotonic()
    for i in range(LEAK_RUNS):
        # Each run leaves a background process for the teardown to kill.
        r = run_aj(args, ["sh", "-c", "sleep %s & echo $?" % tag])
        assert r.returncode == 0 and r.stdout == "0\n", (i, r)
        assert r.result["status"] == "ok", (i, r.result)
        assert r.result["layers"]["memory_limit"] is CG_LIMITS, (i, r.result)
    elapsed = time.monotonic() - t
    assert wait_for(lambda: not pids_with(tag), 2), "processes left: %r" % pids_with(tag)
    # No agentjail cgroup dir at all where our runs were (the shared ones
    # may hold other users' live runs).
    def ours_left():
        return [b for b, shared in own_bases().items()
                if os.path.exists(b) and not (shared and foreign_runs())]
    assert wait_for(lambda: not ours_left(), 2), "cgroup dirs left: %r" % ours_left()
    if not foreign_runs():
        assert aj_cgroups() == [], "cgroup dirs left: %r" % aj_cgroups()
    assert new_leaks(before) == [], "cgroup dirs left: %r" % new_leaks(before)
    with open("/proc/self/mountinfo") as f:
        assert f.read() == mounts, "mount table changed"
    assert elapsed < max(60, LEAK_RUNS * 0.5), elapsed


# ---- result accounting -----------------------------------------------------------

def burners(wait):
    """Two children burn 0.5 s of CPU each. wait: the payload reaps them;
    otherwise it exits while they sleep on, and the teardown kills them
    (only a cgroup still counts what they used)."""
    return ("import os, time\n"
            "r, w = os.pipe()\n"
            "kids = []\n"
            "for _ in range(2):\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        end = time.process_time() + 0.5\n"
            "        while time.process_time() < end: pass\n"
            "        os.write(w, b'x')\n"
            "        if not %r: time.sleep(1000)\n"
            "        os._exit(0)\n"
            "    kids.append(pid)\n"
            "assert len(os.read(r, 1) + os.read(r, 1)) == 2\n"
            "if %r:\n"
            "    for k in kids: os.waitpid(k, 0)\n"
            "print('done')\n") % (wait, wait)


def test_cpu_ms_counts_reaped_children():
    r = run_aj(["--timeout", "30"], [PY, "-c", burners(True)])
    assert r.returncode == 0 and r.stdout == "done\n", r
    assert r.result["cpu_ms"] >= 800, r.result


def test_cpu_ms_counts_killed_children():
    cgroup_limits_only("without a cgroup cpu_ms comes from rusage, which cannot see "
              "processes killed with the namespace")
    r = run_aj(["--timeout", "30"], [PY, "-c", burners(False)])
    assert r.returncode == 0 and r.stdout == "done\n", r
    assert r.result["cpu_ms"] >= 800, r.result


def expected_controllers(args):
    """What cgroup_controllers should say for a root run with ARGS."""
    layout, v2_mount = host_cgroup_layout()
    want = {"memory": True, "pids": True,            # default limits
            "cpu": "--cpus" in args, "cpuacct": v2_mount is None}
    exp = {}
    for c, v in layout.items():
        # A v2 controller is in the run's v2 group anyway; a v1 hierarchy
        # is joined only when the run needs it.
        exp[c] = "v2" if v == "v2" else ("v1" if v == "v1" and want[c] else "none")
    return exp


def test_result_limit_layers_and_controllers_root():
    cgroup_limits_only("rootless runs have no cgroup here")
    layout, v2_mount = host_cgroup_layout()
    r = run_aj([], ["true"])
    assert r.returncode == 0, r
    assert r.result["cgroup_controllers"] == expected_controllers([]), (layout, r.result)
    lay = r.result["layers"]
    assert lay["cgroup"] and lay["memory_limit"] and lay["pids_limit"], lay
    assert not lay["cpu_bandwidth_limit"] and not lay["cpu_time_limit"], lay

    tag = new_tag()
    args = ["--memory", "64M", "--pids", "64", "--cpus", "0.5", "--cpu-time", "100"]
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res = os.path.join(d, "r.json")
        p = subprocess.Popen([AJ_BIN, "run", "--result", res] + args + ["--", "sleep", tag],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: pids_with(tag), 5), "payload never seen"
            # The kernel state behind the layers: the limits are in the files.
            dirs = run_cgroups(p.pid)
            files = {}
            for dd in dirs:
                for name in ("memory.limit_in_bytes", "memory.max", "pids.max",
                             "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.max"):
                    try:
                        files[name] = read(os.path.join(dd, name))
                    except OSError:
                        pass
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)
        result = json.load(open(res))
    assert result["status"] == "signaled" and result["signal"] == 15, result
    assert result["cgroup_controllers"] == expected_controllers(args), (layout, result)
    for name in LIMIT_LAYERS:
        assert result["layers"][name] is True, (name, result["layers"])
    mem = files.get("memory.max", files.get("memory.limit_in_bytes"))
    assert mem == str(64 * MiB), files
    assert files.get("pids.max") == "64", files
    if "cpu.max" in files:
        assert files["cpu.max"] == "50000 100000", files
    else:
        assert (files.get("cpu.cfs_quota_us"), files.get("cpu.cfs_period_us")) == \
            ("50000", "100000"), files


@pytest.mark.parametrize("flag,value,controller", [
    ("--memory", "64M", "memory"),
    ("--pids", "64", "pids"),
    ("--cpus", "1", "cpu"),
    ("--cpu-time", "5", None),
])
def test_explicit_limits_fail_closed_without_cgroup(flag, value, controller):
    if CG_LIMITS:
        pytest.skip("only without a writable cgroup: this caller has one "
                    "(test_result_limit_layers_and_controllers_root)")
    r = run_aj([flag, value], ["sh", "-c", "echo ran"])
    assert r.returncode == 125, r
    assert r.stdout == "", r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    msg = lines[0]
    assert flag in msg and "cgroup" in msg, msg
    if controller:
        assert "'%s' controller" % controller in msg, msg
    # The fix: a delegated unit (named exactly where systemd can give one), or root.
    assert "Delegate=yes" in msg or ("run as root" in msg and "delegated cgroup" in msg), msg
    assert r.result["status"] == "setup_error" and r.result["exit_code"] == 125, r.result
    assert flag in r.result["error"], r.result
    for name in LIMIT_LAYERS:
        assert r.result["layers"][name] is False, (name, r.result["layers"])
    # Control: the same run without the flag goes ahead, on rlimits only.
    q = run_aj([], ["sh", "-c", "echo ran"])
    assert q.returncode == 0 and q.stdout == "ran\n", q
    assert q.result["status"] == "ok", q.result
    for name in LIMIT_LAYERS:
        assert q.result["layers"][name] is False, (name, q.result["layers"])
    assert set(q.result["cgroup_controllers"].values()) == {"none"}, q.result


# ---- bad values ------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [
    ("--memory", "1x"),
    ("--pids", "0"),
    ("--cpus", "0"),
    ("--cpus", "abc"),
    ("--cpu-time", "-1"),
    ("--output-limit", "0"),
])
def test_bad_limit_values(flag, value):
    r = run_aj([flag, value], ["sh", "-c", "echo ran"])
    assert r.returncode == 2, r
    assert r.stdout == "" and r.result is None, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "'%s'" % value in lines[0], r.stderr


@pytest.mark.parametrize("flag,value", [
    ("--memory", "4M"), ("--pids", "2"), ("--cpus", "0.01"), ("--cpu-time", "1ms"),
    ("--output-limit", "1"),
])
def test_smallest_limit_values_parse(flag, value):
    """Control for the bad values: the smallest accepted value of each flag
    gets past the command line (the run may then fail closed as nobody, or
    hit the limit, but not exit 2)."""
    r = run_aj([flag, value, "--timeout", "10"], ["true"])
    assert r.returncode != 2, r
