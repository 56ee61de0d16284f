"""Refusals that must not crash harmless programs, and debuggers (issue 13,
items 6 and 7).

- socket() calls the filter does not allow, and that are no escape attempt,
  answer what a kernel without the family, type or protocol answers
  (EPROTONOSUPPORT, ESOCKTNOSUPPORT, EAFNOSUPPORT, EINVAL), never ENOSYS;
  mknod of a directory or a non-existent type likewise (EPERM, EINVAL).
- memfd_create without flags works and gives a sealed, non-executable memfd.
- /tmp and /dev/shm are sized by the memory limit unless --tmp-size says.
- ptrace (strace, gdb) works between the payload's own processes; init and
  anything outside stay refused, with an event.

Each sandbox outcome is compared with the same call on the host (the
control), or with the condition lifted.
"""
import errno
import json
import os
import shutil
import subprocess

import pytest

from conftest import CG_LIMITS, IS_ROOT, cgroup_limits_only, must_skip, run_aj

PY = "/usr/bin/python3"

# socket(family, type, protocol) calls a harmless program makes: CPython's
# test_socket probes SCTP and SEQPACKET; libraries probe MPTCP. (UDP-Lite,
# which it uses too, is allowed: ALLOWED_CASES.)
SOCKET_CASES = [
    ("AF_INET", "SOCK_DGRAM", 132),       # a dgram protocol past UDP, not UDP-Lite
    ("AF_INET6", "SOCK_DGRAM", 137),      # the one just past UDP-Lite
    ("AF_INET", "SOCK_STREAM", 132),      # IPPROTO_SCTP
    ("AF_INET6", "SOCK_STREAM", 132),
    ("AF_INET", "SOCK_SEQPACKET", 132),   # SCTP one-to-many
    ("AF_INET6", "SOCK_SEQPACKET", 132),
    ("AF_INET", "SOCK_SEQPACKET", 0),
    ("AF_INET", "SOCK_STREAM", 262),      # IPPROTO_MPTCP
    ("AF_INET", "SOCK_DGRAM", 1),         # ICMP ping socket
    ("AF_INET", "SOCK_STREAM", 17),       # a protocol of another type
    ("AF_INET", "SOCK_RDM", 0),
    ("AF_INET", 12, 0),                   # no such type
    ("AF_NETLINK", "SOCK_RAW", 15),       # NETLINK_KOBJECT_UEVENT
    ("AF_NETLINK", "SOCK_RAW", 31),       # no such netlink protocol
    ("AF_NETLINK", "SOCK_RAW", 40),
    (0, "SOCK_STREAM", 0),                # AF_UNSPEC
    (47, "SOCK_STREAM", 0),               # past the last family
]
ALLOWED_CASES = [
    ("AF_INET", "SOCK_STREAM", 0), ("AF_INET", "SOCK_STREAM", 6),
    ("AF_INET", "SOCK_DGRAM", 0), ("AF_INET", "SOCK_DGRAM", 17),
    ("AF_INET6", "SOCK_STREAM", 6), ("AF_INET6", "SOCK_DGRAM", 17),
    ("AF_INET", "SOCK_DGRAM", 136), ("AF_INET6", "SOCK_DGRAM", 136),  # IPPROTO_UDPLITE
    ("AF_UNIX", "SOCK_SEQPACKET", 0), ("AF_NETLINK", "SOCK_RAW", 0),
]

SOCKET_SCRIPT = r"""
import errno, json, socket, sys
out = []
for fam, typ, proto in json.loads(sys.argv[1]):
    fam = getattr(socket, fam) if isinstance(fam, str) else fam
    typ = getattr(socket, typ) if isinstance(typ, str) else typ
    try:
        socket.socket(fam, typ, proto).close()
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode.get(e.errno, str(e.errno)))
print(json.dumps(out))
"""


def socket_outcomes(cases, inside):
    cmd = [PY, "-c", SOCKET_SCRIPT, json.dumps(cases)]
    if inside:
        r = run_aj([], cmd)
        assert r.returncode == 0, r
        return json.loads(r.stdout.strip().splitlines()[-1]), r
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p
    return json.loads(p.stdout), None


def test_refused_sockets_answer_like_a_kernel_without_the_protocol():
    inside, r = socket_outcomes(SOCKET_CASES + ALLOWED_CASES, True)
    host, _ = socket_outcomes(SOCKET_CASES + ALLOWED_CASES, False)
    n = len(SOCKET_CASES)
    for case, got, control in zip(SOCKET_CASES, inside[:n], host[:n]):
        assert got != "ENOSYS", (case, got)
        assert got != "ok", (case, got)
        if control not in ("ok", "EACCES"):
            # The host kernel refuses it too (module absent): same answer.
            assert got == control, (case, got, control)
        else:
            # The host has it (MPTCP, uevents; ICMP ping, EACCES outside
            # ping_group_range): the answer of a kernel without it.
            assert got in ("EPROTONOSUPPORT", "ESOCKTNOSUPPORT"), (case, got)
    # Positive control: the ordinary sockets are made, inside and out.
    assert inside[n:] == ["ok"] * len(ALLOWED_CASES), inside[n:]
    assert host[n:] == ["ok"] * len(ALLOWED_CASES), host[n:]
    # None of these is an escape attempt.
    assert r.result["events"].get("escape_attempt", 0) == 0 and not r.result["escape_attempted"], r.result


MKNOD_SCRIPT = r"""
import errno, json, os, stat, sys
d = sys.argv[1]
out = []
for mode in (stat.S_IFDIR, stat.S_IFLNK, 0o030000, stat.S_IFIFO):
    p = os.path.join(d, "n%o" % mode)
    try:
        os.mknod(p, mode | 0o600)
        os.unlink(p)
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(json.dumps(out))
"""


def test_mknod_other_types_answer_like_the_kernel(tmp_path):
    r = run_aj([], [PY, "-c", MKNOD_SCRIPT, "/tmp"])
    assert r.returncode == 0, r
    inside = json.loads(r.stdout.strip().splitlines()[-1])
    d = tmp_path / "m"
    d.mkdir()
    p = subprocess.run([PY, "-c", MKNOD_SCRIPT, str(d)], capture_output=True, text=True, timeout=30)
    host = json.loads(p.stdout)
    assert host == ["EPERM", "EINVAL", "EINVAL", "ok"], host
    assert inside == host, (inside, host)


# ---- debuggers: seccomp.allow_ptrace / --allow-ptrace ------------------------------

PTRACE_SCRIPT = r"""
import ctypes, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def call(req, pid):
    r = libc.ptrace(req, pid, None, None)
    return "ok" if r == 0 else os.strerror(ctypes.get_errno())
out = {}
kid = os.fork()
if kid == 0:
    time.sleep(30)
    os._exit(0)
out["seize_child"] = call(0x4206, kid)          # PTRACE_SEIZE
os.kill(kid, signal.SIGKILL)
os.waitpid(kid, 0)
out["seize_init"] = call(0x4206, int(sys.argv[1]))
print(json.dumps(out))
"""



def test_strace_traces_a_child_with_allow_ptrace():
    if not shutil.which("strace"):
        must_skip("strace is not installed (apt-get install strace)")
    cmd = ["strace", "-f", "-e", "trace=execve", "/bin/true"]
    r = run_aj(["--allow-ptrace"], cmd)
    assert r.returncode == 0, r
    assert 'execve("/bin/true"' in r.stderr and "+++ exited with 0 +++" in r.stderr, r
    # Positive control: the default policy refuses it.
    r = run_aj([], cmd)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r
    # And on the host it works (the tool is sound).
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and 'execve("/bin/true"' in p.stderr, p


def test_gdb_runs_a_program_with_allow_ptrace():
    if not shutil.which("gdb"):
        must_skip("gdb is not installed (apt-get install gdb)")
    cmd = ["gdb", "-batch", "-ex", "run", "-ex", "info registers rip", "--args", "/bin/sh", "-c", "kill -SEGV $$"]
    r = run_aj(["--allow-ptrace"], cmd, timeout=120)
    assert "SIGSEGV" in r.stdout and "rip" in r.stdout, r
    r = run_aj([], cmd, timeout=120)
    assert "SIGSEGV" not in r.stdout, r


def test_ptrace_of_init_refused_and_reported():
    r = run_aj(["--allow-ptrace"], [PY, "-c", PTRACE_SCRIPT, "1"])
    assert r.returncode == 0, r
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["seize_child"] == "ok", out                     # positive control
    assert out["seize_init"] == "Operation not permitted", out
    assert r.result["events"].get("escape_attempt", 0) == 1 and r.result["escape_attempted"], r.result
    # Without the option a child cannot be traced either (and is reported).
    r = run_aj([], [PY, "-c", PTRACE_SCRIPT, "1"])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"seize_child": "Operation not permitted", "seize_init": "Operation not permitted"}, out
    # Host control: the same process can seize its own child there.
    p = subprocess.run([PY, "-c", PTRACE_SCRIPT, str(os.getpid())], capture_output=True, text=True, timeout=60)
    assert json.loads(p.stdout)["seize_child"] == "ok", p


def test_traceme_under_init_does_not_end_the_run():
    """A child of init that calls PTRACE_TRACEME (an anti-debugging check)
    makes init its tracer; its next signal must not end the run."""
    script = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "print('traceme', libc.ptrace(0, 0, None, None))\n"
              "os.kill(os.getpid(), 28)\nprint('still running')\n")
    r = run_aj(["--allow-ptrace"], [PY, "-c", script])
    assert r.returncode == 0 and "traceme 0" in r.stdout and "still running" in r.stdout, r


# ---- /tmp and /dev/shm sized by the memory limit ---------------------------------

FILL_SCRIPT = r"""
import errno, os, sys
path, mib = sys.argv[1], int(sys.argv[2])
chunk = b"x" * (1 << 20)
done = 0
try:
    with open(path, "wb") as f:
        for done in range(1, mib + 1):
            f.write(chunk)
            f.flush()
    print("wrote", mib)
except OSError as e:
    print("stopped", done, errno.errorcode[e.errno])
"""


def fill(args, path, mib):
    r = run_aj(args, [PY, "-c", FILL_SCRIPT, path, str(mib)], timeout=120)
    return r, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def test_dev_shm_holds_200M_under_a_2G_memory_limit():
    """joblib memory-maps arrays in /dev/shm: the default must hold ordinary
    data. With a 2G limit, /tmp and /dev/shm get half of it each."""
    cgroup_limits_only("the default size follows the memory limit a cgroup enforces")
    r, last = fill(["--memory", "2G"], "/dev/shm/big", 200)
    assert r.returncode == 0 and last == "wrote 200", r
    r = run_aj(["--memory", "2G"], ["df", "-k", "/tmp", "/dev/shm"])
    sizes = [int(l.split()[1]) for l in r.stdout.splitlines()[1:]]
    assert sizes == [1 << 20, 1 << 20], r.stdout
    # Positive control: an explicit --tmp-size still bounds it.
    r, last = fill(["--memory", "2G", "--tmp-size", "64M"], "/dev/shm/big", 200)
    assert last.startswith("stopped") and last.endswith("ENOSPC"), r
    assert int(last.split()[1]) <= 65, r


def test_auto_tmp_size_stays_within_the_memory_limit():
    cgroup_limits_only("the default size follows the memory limit a cgroup enforces")
    # Half of 256M: the write stops at the tmpfs size, inside the limit.
    r, last = fill(["--memory", "256M"], "/dev/shm/big", 200)
    assert last.startswith("stopped") and last.endswith("ENOSPC"), r
    assert 100 <= int(last.split()[1]) <= 129, r
    # A tmpfs larger than the limit is still bounded by the cgroup: its
    # pages are charged to it (the write fails or the writer is killed).
    r, last = fill(["--memory", "256M", "--tmp-size", "1G"], "/dev/shm/big", 400)
    assert last != "wrote 400", r


def test_tmp_size_without_memory_limit_keeps_64M(tmp_path):
    """Where no cgroup bounds memory, a bigger tmpfs would be host memory."""
    pol = tmp_path / "nomem.json"
    pol.write_text('{"version": 1, "limits": {"memory": null}}')
    os.chmod(tmp_path, 0o755)
    os.chmod(pol, 0o644)
    r = run_aj(["--policy", str(pol)], ["df", "-k", "/tmp", "/dev/shm"])
    assert r.returncode == 0, r
    sizes = [int(l.split()[1]) for l in r.stdout.splitlines()[1:]]
    assert sizes == [65536, 65536], r.stdout


# ---- memfd_create without flags: sealed by vm.memfd_noexec -----------------------

MEMFD_SCRIPT = r"""
import os, fcntl, errno, json
out = {}
print(os.getpid(), flush=True)
try:
    fd = os.memfd_create("x")
except OSError as e:
    print(json.dumps({"create": errno.errorcode[e.errno]}))
    raise SystemExit(0)
out["create"] = "ok"
out["exec_sealed"] = bool(fcntl.fcntl(fd, 1034) & 0x20)   # F_GET_SEALS & F_SEAL_EXEC
with open("/bin/true", "rb") as f:
    os.write(fd, f.read())
pid = os.fork()
if pid == 0:
    try:
        os.execve(fd, ["true"], {})
    except OSError as e:
        os._exit(100 + e.errno)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["fexecve"] = "ok" if code == 0 else errno.errorcode.get(code - 100, str(code))
try:
    os.memfd_create("y", 0x10)  # MFD_EXEC
    out["mfd_exec"] = "ok"
except OSError as e:
    out["mfd_exec"] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def test_plain_memfd_create_is_sealed_not_refused():
    if not os.path.exists("/proc/sys/vm/memfd_noexec"):
        pytest.skip("not applicable: no vm.memfd_noexec (Linux before 6.3): memfd_create without MFD_NOEXEC_SEAL stays EPERM")
    r = run_aj([], [PY, "-c", MEMFD_SCRIPT])
    assert r.returncode == 0, r
    # init sets the sysctl itself: no helper process took a pid of the
    # sandbox's namespace, the payload is pid 2 (init's first child).
    assert r.stdout.splitlines()[0] == "2", r.stdout
    inside = json.loads(r.stdout.strip().splitlines()[-1])
    if not IS_ROOT:
        # Only the host's root can write the pid namespace's sysctl: a
        # rootless run keeps the refusal (docs/security-model.md).
        assert inside == {"create": "EPERM"}, inside
        return
    assert inside == {"create": "ok", "exec_sealed": True, "fexecve": "EACCES", "mfd_exec": "EPERM"}, inside
    # Control: on this host (vm.memfd_noexec=0) the same memfd executes.
    with open("/proc/sys/vm/memfd_noexec") as f:
        if f.read().strip() != "0":
            must_skip("vm.memfd_noexec is not 0 on the host: no executable memfd for the control")
    p = subprocess.run([PY, "-c", MEMFD_SCRIPT], capture_output=True, text=True, timeout=30)
    assert json.loads(p.stdout.splitlines()[-1]) == {"create": "ok", "exec_sealed": False, "fexecve": "ok",
                                                     "mfd_exec": "ok"}, p
    # The host's own value is untouched by the run.
    with open("/proc/sys/vm/memfd_noexec") as f:
        assert f.read().strip() == "0"


def test_allow_ptrace_has_no_effect_in_degraded_mode():
    """Without a pid namespace a pid names any process of the uid: the
    debugging calls stay refused whatever the policy says."""
    from conftest import nouserns
    r = run_aj(["--allow-degraded", "--allow-ptrace"], [PY, "-c", PTRACE_SCRIPT, "1"], prefix=nouserns())
    assert r.returncode == 0 and r.result["degraded"] is True, r
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"seize_child": "Operation not permitted", "seize_init": "Operation not permitted"}, out
