"""Escape test suite: every technique an attacker's code would try, run inside
the default sandbox, must be BLOCKED with a kernel outcome (exit 1 and the
errno the layer gives, or death by SIGSYS -> 159).

The same probes also run directly on the host (the *control*): most of them
must report PERMITTED there, which proves each probe can fail.  Probes are in
tests/helpers/aj-try.c; every one is harmless even as root on the host.

Runs as root and as nobody:
  python3 -m pytest tests/escape
  setpriv --reuid=65534 --regid=65534 --clear-groups python3 -m pytest -p no:cacheprovider tests/escape
"""
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import termios

import pytest

from conftest import AJ_BIN, IS_ROOT, etc_allowed_paths, helper, must_skip, root_only, run_aj, try_args

SIGSYS_EXIT = 128 + signal.SIGSYS  # 159
SIGSYS = "SIGSYS"
SLEEPER_COMM = "ajesc-sleep"
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "GITHUB_TOKEN",
              "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
# Host paths the default sandbox may show as mount roots (DESIGN: read-only
# /usr and the merged-/usr links, generated /etc with the host's ld.so.cache
# and ssl/certs, minimal /dev nodes from devtmpfs, and /etc/alternatives,
# which Debian's /usr/bin symlinks point into).
ALLOWED_ROOTS = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/libx32", "/sbin",
                 "/null", "/zero", "/full", "/random", "/urandom", "/tty"] + etc_allowed_paths()
# Write-opens of /proc and /sys files: refused, read-only, absent, or masked
# (None: the probe found /dev/null bound over the file).
PROC_WRITE_BLOCKED = {"EACCES", "EROFS", "EPERM", "ENOENT", None}


def _sysctl(path, default=None):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


# ---------------------------------------------------------------------------
# Host-side resources, created once per module.
# ---------------------------------------------------------------------------

class Host:
    """Everything the techniques aim at: secrets, a sleeper, listeners, shm."""

    def __init__(self):
        self.token = secrets.token_hex(12)
        self.base = tempfile.mkdtemp(prefix="ajesc-", dir="/tmp")
        os.chmod(self.base, 0o755)  # root mode: the sandbox's host uid must traverse
        self.secret = os.path.join(self.base, "secret.txt")
        self._write(self.secret, "AJESC-SECRET-%s\n" % self.token, 0o600)
        # A directory that IS bound in the positive controls.
        self.bound = self._mkdir("bound", 0o755)
        self.public = os.path.join(self.bound, "public.txt")
        self._write(self.public, "AJESC-PUBLIC-%s\n" % self.token, 0o644)
        # A writable dir (bound rw) holding a symlink to the host secret.
        self.rw = self._mkdir("rw", 0o777)
        os.symlink(self.secret, os.path.join(self.rw, "link"))
        # World-writable dir that is bound read-only: only the bind blocks.
        self.ro = self._mkdir("ro", 0o777)
        self.env = dict(os.environ, **{k: "ajesc-%s-%s" % (k.lower(), self.token)
                                       for k in SECRET_ENV})
        self.sleeper = None
        self.tcp = self.abstract_sock = None
        self.shm_id = None
        self.fds = []
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _mkdir(self, name, mode):
        path = os.path.join(self.base, name)
        os.mkdir(path)
        os.chmod(path, mode)
        return path

    @staticmethod
    def _write(path, text, mode):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def _start(self):
        # A host process owned by the test: a copy of sleep, so that even the
        # write-open of its /proc/PID/exe targets only the test's own file.
        sleep_copy = os.path.join(self.base, SLEEPER_COMM)
        shutil.copy(shutil.which("sleep") or "/bin/sleep", sleep_copy)
        os.chmod(sleep_copy, 0o755)
        self.sleeper = subprocess.Popen([sleep_copy, "120"])
        # Listeners on the host's loopback and abstract namespace.
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.port = self.tcp.getsockname()[1]
        self.abstract = "ajesc-%s" % self.token
        self.abstract_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract_sock.bind("\0" + self.abstract)
        self.abstract_sock.listen(64)
        # A SysV shared memory segment in the host's IPC namespace.
        libc = ctypes.CDLL(None, use_errno=True)
        self._libc = libc
        libc.syscall.restype = ctypes.c_long
        for _ in range(20):
            key = secrets.randbelow(2 ** 30) + 0x10000
            shm_id = libc.shmget(ctypes.c_int(key), ctypes.c_size_t(4096),
                                 ctypes.c_int(0o1000 | 0o2000 | 0o600))  # IPC_CREAT|IPC_EXCL
            if shm_id >= 0:
                self.shm_key, self.shm_id = key, shm_id
                break
        else:
            raise OSError(ctypes.get_errno(), "shmget")
        # The session keyring this process (and so agentjail) inherits.
        serial = libc.syscall(ctypes.c_long(250), ctypes.c_long(0), ctypes.c_long(-3),
                              ctypes.c_long(0))  # keyctl(GET_KEYRING_ID, SESSION, 0)
        self.keyring = serial if serial > 0 else None
        # Descriptors to leak: a host directory and a host file.
        self.leak_dir = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY)
        self.leak_file = os.open(self.secret, os.O_RDONLY)
        self.fds += [self.leak_dir, self.leak_file]
        # Every filesystem device of the host (maj:min), for the mount table check.
        with open("/proc/self/mountinfo") as f:
            self.host_devs = sorted({line.split()[2] for line in f})
        self.aj_try_real = os.path.realpath(helper("aj-try"))

    def close(self):
        if self.sleeper is not None:
            self.sleeper.kill()
            self.sleeper.wait()
        for s in (self.tcp, self.abstract_sock):
            if s is not None:
                s.close()
        if self.shm_id is not None:
            self._libc.shmctl(ctypes.c_int(self.shm_id), ctypes.c_int(0), None)  # IPC_RMID
        for fd in self.fds:
            os.close(fd)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def host():
    if not os.path.exists(helper("aj-try")):
        must_skip("aj-try not built at %s (ninja -C build)" % helper("aj-try"))
    h = Host()
    yield h
    h.close()


@pytest.fixture(scope="module")
def aj(host):
    if not os.access(AJ_BIN, os.X_OK):
        must_skip("agentjail not built at %s" % AJ_BIN)
    return host


# ---------------------------------------------------------------------------
# The techniques.
# ---------------------------------------------------------------------------

class T:
    """One technique.

    argv(h, inside) -> probe argv; blocked: errno names accepted as BLOCKED
    inside the sandbox (None = blocked with no errno), or SIGSYS; aj(h) -> extra
    agentjail flags; kw(h) -> run options (env, pass_fds, tty); host: whether
    the control on the host must report PERMITTED ("any" user, "root" only, or
    None: depends on the host's kernel/config); control=False: sandbox only.
    """

    def __init__(self, id, argv, blocked, host=None, aj=None, kw=None, control=True):
        self.id = id
        self.argv = argv if callable(argv) else (lambda h, inside, a=argv: list(a))
        self.blocked = blocked
        self.host = host
        self.aj = aj or (lambda h: [])
        self.kw = kw or (lambda h: {})
        self.control = control

    def __repr__(self):
        return self.id


EPERM = {"EPERM"}
IO_URING_OPEN = _sysctl("/proc/sys/kernel/io_uring_disabled", 0) == 0
NO_YAMA = _sysctl("/proc/sys/kernel/yama/ptrace_scope", 0) == 0


def _pid(h):
    return str(h.sleeper.pid)


TECHNIQUES = [
    # --- secrets -------------------------------------------------------------
    T("secret-abs-path", lambda h, i: ["read", h.secret], {"ENOENT", "EACCES"}, host="any"),
    T("secret-proc-root", lambda h, i: ["read", ("/proc/1/root" if i else "/proc/%s/root" % _pid(h))
                                        + h.secret], {"ENOENT", "EACCES"}, host="any"),
    T("env-secrets", ["env"] + list(SECRET_ENV), {None}, host="any", kw=lambda h: {"env": h.env}),
    T("environ-of-other-procs", lambda h, i: ["environ-scan", h.token], {None}, host="any",
      kw=lambda h: {"env": h.env}),
    T("symlink-tmp-to-host-secret", lambda h, i: ["symlink-read", "%s/ajesc-link" % ("/tmp" if i else h.base),
                                                  h.secret], {"ENOENT", "EACCES"}, host="any"),
    T("symlink-tmp-to-etc-shadow", ["symlink-read", "/tmp/ajesc-shadow", "/etc/shadow"],
      {"ENOENT", "EACCES"}, control=False),
    T("symlink-in-rw-bind", lambda h, i: ["read", "/work-rw/link" if i else h.rw + "/link"],
      {"ENOENT", "EACCES"}, host="any", aj=lambda h: ["--bind-rw", h.rw + ":/work-rw"]),
    # With decoys off, nothing of a container runtime is there. (With them
    # on, the socket and token are decoys: tests/integration/test_detection.py.)
    T("runtime-sockets", ["runtime-sockets"], {None}, aj=lambda h: ["--no-decoys"]),
    T("mountinfo-host-paths", lambda h, i: ["mountinfo", ",".join(h.host_devs), h.aj_try_real]
      + ALLOWED_ROOTS, {None}, host="any"),
    # --- host processes ------------------------------------------------------
    T("host-pids-visible", ["pids", "5"], {None}, host="any"),
    T("host-pid-kill0", lambda h, i: ["pid-visible", _pid(h), SLEEPER_COMM], {"ESRCH", None}, host="any"),
    T("host-pid-ptrace", lambda h, i: ["ptrace-attach", _pid(h), SLEEPER_COMM], {"EPERM", "ESRCH", None},
      host="any" if NO_YAMA else None),
    T("ptrace-traceme", ["ptrace-traceme"], EPERM, host="any"),
    T("process_vm_readv", ["process_vm_readv"], EPERM, host="any"),
    # --- runtime descriptors and binaries -------------------------------------
    T("leaked-fds", ["fds", "secret.txt"], {None}, host="any",
      kw=lambda h: {"pass_fds": (h.leak_dir, h.leak_file)}),
    T("cwd-outside-root", ["cwd"], {None}),
    T("proc-self-exe-write", ["exe-write", "self"], {"EACCES", "EROFS", "EPERM", "ENOENT"}, host="root"),
    T("proc-1-exe-write", lambda h, i: ["exe-write", "1" if i else _pid(h)],
      {"EACCES", "EROFS", "EPERM", "ENOENT"}, host="any"),
    # --- terminal ------------------------------------------------------------
    T("tiocsti", ["tiocsti"], EPERM, host="root", kw=lambda h: {"tty": True}),
    T("tiocsti-seccomp-layer", ["tiocsti-filter"], EPERM, host="any"),
    T("tioclinux", ["tioclinux"], EPERM, host="any", kw=lambda h: {"tty": True}),
    T("tioccons", ["tioccons"], EPERM, host="any"),
    T("tiocsetd-line-discipline", ["tiocsetd"], EPERM, host="any"),
    # --- network -------------------------------------------------------------
    T("abstract-unix-host", lambda h, i: ["abstract-connect", h.abstract], {"EPERM", "ECONNREFUSED"},
      host="any"),
    T("tcp-host-loopback", lambda h, i: ["tcp-connect", "127.0.0.1", str(h.port)],
      {"EACCES", "EPERM", "ECONNREFUSED", "ENETUNREACH"}, host="any"),
    T("tcp-bind-network-none", ["tcp-self"], {"EACCES", "EPERM", "EADDRNOTAVAIL", "ENETUNREACH"},
      host="any", aj=lambda h: ["--network", "none"]),
    T("host-interfaces", ["netdevs"], {None}),
    T("socket-raw", ["socket-raw"], {"EPERM", "EACCES", "EAFNOSUPPORT"}, host="root"),
    T("socket-packet", ["socket-packet"], {"EPERM", "EACCES", "EAFNOSUPPORT"}, host="root"),
    T("socket-vsock", ["socket-vsock"], {"EPERM", "EACCES", "EAFNOSUPPORT"}),
    # --- kernel interfaces in /proc and /sys -------------------------------------
    T("core-pattern-write", ["write-open", "/proc/sys/kernel/core_pattern"], PROC_WRITE_BLOCKED, host="root"),
    T("sysrq-trigger-write", ["write-open", "/proc/sysrq-trigger"], PROC_WRITE_BLOCKED),
    T("cgroup-release-agent", ["release-agent"], {"ENOENT", "EACCES", "EROFS", "EPERM"}),
    T("proc-kcore", ["read", "/proc/kcore"], {"ENOENT", "EACCES", "EPERM", None}),
    T("proc-kallsyms", ["kallsyms"], {None, "ENOENT", "EACCES", "EPERM"},
      host="root" if _sysctl("/proc/sys/kernel/kptr_restrict", 0) < 2 else None),
    T("dangerous-devices", ["devices"], {None}),
    T("rlimit-core-raise", ["rlimit-core"], {None, "EPERM"}),
    # --- credentials -----------------------------------------------------------
    T("capabilities", ["caps"], {None}, host="root"),
    T("no-new-privs", ["nnp"], {None}, host="any"),
    T("seccomp-mode", ["seccomp"], {None, "EPERM"}, host="any"),
    T("euid-root", ["euid"], {None}, host="root"),
    T("setuid0", ["setuid0"], {"EPERM", "EINVAL"}, host="root"),
    T("sethostname", ["sethostname"], EPERM, host="root"),
    # --- namespaces ------------------------------------------------------------
    T("unshare-user-caps", ["unshare", "user"], EPERM),
    T("unshare-mnt", ["unshare", "mnt"], EPERM, host="root"),
    T("unshare-net", ["unshare", "net"], EPERM, host="root"),
    T("clone-newuser", ["clone", "user"], EPERM),
    T("clone3-newuser", ["clone3", "user"], {"ENOSYS"}),
    T("setns", ["setns"], EPERM, host="root"),
    # --- mount family ------------------------------------------------------------
    T("mount", ["mount"], EPERM, host="root"),
    T("umount2", ["umount2"], EPERM, host="root"),
    T("pivot_root", ["pivot_root"], EPERM, host="root"),
    T("chroot", ["chroot"], EPERM, host="root"),
    T("open_tree", ["open_tree"], EPERM, host="root"),
    T("move_mount", ["move_mount"], EPERM, host="root"),
    T("fsopen", ["fsopen"], EPERM, host="root"),
    T("fsconfig", ["fsconfig"], EPERM, host="any"),
    T("fsmount", ["fsmount"], EPERM, host="root"),
    T("fspick", ["fspick"], EPERM, host="root"),
    T("mount_setattr", ["mount_setattr"], EPERM, host="root"),
    T("open_by_handle_at", ["open_by_handle_at"], EPERM, host="root"),
    T("name_to_handle_at", ["name_to_handle_at"], EPERM, host="any"),
    # --- kernel attack surface ---------------------------------------------------
    T("bpf", ["bpf"], EPERM, host="any"),  # bpf(invalid cmd): EINVAL for anyone, only a filter says EPERM
    T("perf_event_open", ["perf_event_open"], EPERM, host="any"),
    T("io_uring_setup", ["io_uring_setup"], EPERM, host="any" if IO_URING_OPEN else None),
    T("userfaultfd", ["userfaultfd"], EPERM, host="root"),
    T("keyctl", ["keyctl"], EPERM, host="any"),
    T("add_key", ["add_key"], EPERM, host="any"),
    T("request_key", ["request_key"], EPERM, host="any"),
    T("session-keyring-shared", lambda h, i: ["proc-keys", str(h.keyring or 0)],
      {None, "ENOENT", "EACCES", "EPERM"}, host="any"),
    T("sysv-shm-host", lambda h, i: ["shm", str(h.shm_key)], {"ENOENT", "EPERM", "EACCES"}, host="any"),
    T("kexec_load", ["kexec_load"], EPERM),
    T("kexec_file_load", ["kexec_file_load"], EPERM),
    T("init_module", ["init_module"], EPERM),
    T("finit_module", ["finit_module"], EPERM),
    T("delete_module", ["delete_module"], EPERM),
    T("reboot", ["reboot"], EPERM, host="root"),
    T("swapon", ["swapon"], EPERM, host="root"),
    T("swapoff", ["swapoff"], EPERM, host="root"),
    T("acct", ["acct"], EPERM, host="root"),
    T("quotactl", ["quotactl"], EPERM, host="any"),
    T("iopl", ["iopl"], EPERM),
    T("ioperm", ["ioperm"], EPERM),
    T("modify_ldt", ["modify_ldt"], EPERM),
    T("personality-addr-no-randomize", ["personality", "addr_no_randomize"], EPERM, host="any"),
    T("personality-linux32", ["personality", "linux32"], EPERM, host="any"),
    T("clock_settime", ["clock_settime"], EPERM, host="any"),
    T("settimeofday", ["settimeofday"], EPERM, host="root"),
    T("syslog", ["syslog"], EPERM, host="root"),
    T("mknod-char-device", lambda h, i: ["mknod", "/tmp" if i else h.base], EPERM, host="root"),
    T("x32-abi", ["x32"], SIGSYS),
    T("i386-int80", ["int80"], SIGSYS),
    # --- writable locations ------------------------------------------------------
    # /tmp is executable by default (docs/security-model.md, W^X); the policy
    # that asks for noexec_tmp gets it from both the mount and Landlock.
    T("exec-from-tmp", lambda h, i: ["exec-copy", "/tmp" if i else h.base], {"EACCES", "EPERM"},
      aj=lambda h: ["--noexec-tmp"]),
    T("write-ro-bind", lambda h, i: ["create", "/ro/ajesc-new" if i else h.ro + "/ajesc-new"],
      {"EROFS", "EACCES"}, host="any", aj=lambda h: ["--bind-ro", h.ro + ":/ro"]),
]
CONTROL_TECHNIQUES = [t for t in TECHNIQUES if t.control]


# ---------------------------------------------------------------------------
# Running a probe in the sandbox or on the host.
# ---------------------------------------------------------------------------

def _probe_json(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if not lines:
        return None
    return json.loads(lines[-1])


class _Tty:
    """A pty pair owned by the test; the probe gets the slave as stdin."""

    def __enter__(self):
        self.master, self.slave = os.openpty()
        return self

    def __exit__(self, *exc):
        os.close(self.master)
        os.close(self.slave)


def sandbox(h, t, extra_args=(), argv=None):
    """Run technique t in the default sandbox (plus extra_args)."""
    kw = t.kw(h)
    args = try_args() + t.aj(h) + list(extra_args)
    cmd = ["/opt/aj-try"] + (argv if argv is not None else t.argv(h, True))
    pass_fds = tuple(kw.get("pass_fds", ()))
    if kw.get("tty"):
        with _Tty() as tty:
            # run_aj has no stdin parameter: a tiny exec wrapper puts the pty on fd 0.
            prefix = [sys.executable, "-c", "import os, sys; os.dup2(%d, 0); os.close(%d); "
                      "os.execv(sys.argv[1], sys.argv[1:])" % (tty.slave, tty.slave)]
            return run_aj(args, cmd, pass_fds=pass_fds + (tty.slave,), env=kw.get("env"),
                          prefix=prefix)
    return run_aj(args, cmd, pass_fds=pass_fds, env=kw.get("env"))


class HostRun:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.probe = _probe_json(proc.stdout)

    def __repr__(self):
        return "HostRun(rc=%r, stdout=%r, stderr=%r)" % (self.returncode, self.stdout, self.stderr)


def on_host(h, t, binary=None, prefix=()):
    """Run technique t directly on the host: the control, no sandbox."""
    kw = t.kw(h)
    cmd = list(prefix) + [binary or helper("aj-try")] + t.argv(h, False)
    opts = dict(capture_output=True, text=True, timeout=30, env=kw.get("env"),
                pass_fds=tuple(kw.get("pass_fds", ())), cwd=h.base)
    if kw.get("tty"):
        with _Tty() as tty:
            return HostRun(subprocess.run(cmd, stdin=tty.slave, **opts))
    return HostRun(subprocess.run(cmd, stdin=subprocess.DEVNULL, **opts))


def assert_blocked(t, r):
    """The probe ran inside the sandbox and was refused with an expected outcome."""
    assert r.returncode != 125, "agentjail setup error for %s: %r" % (t.id, r)
    if t.blocked == SIGSYS:
        assert r.returncode == SIGSYS_EXIT, "%s: expected death by SIGSYS (159): %r" % (t.id, r)
        assert r.result is not None, r
        assert r.result["status"] == "signaled" and r.result["signal"] == signal.SIGSYS, r
        return
    out = _probe_json(r.stdout)
    assert out is not None, "%s: probe printed no verdict: %r" % (t.id, r)
    assert not out["permitted"], "ESCAPE: %s is permitted inside the sandbox: %s" % (t.id, out)
    assert r.returncode == 1, r
    assert out["errno"] in t.blocked, "%s: blocked, but with %s (expected one of %s): %s" % (
        t.id, out["errno"], sorted(map(str, t.blocked)), out)
    assert r.result is not None, r
    assert r.result["status"] == "nonzero_exit" and r.result["exit_code"] == 1, r.result


def assert_permitted(r, what):
    out = _probe_json(r.stdout)
    assert out is not None, "%s: probe printed no verdict: %r" % (what, r)
    assert out["permitted"] and r.returncode == 0, "%s: expected PERMITTED: %r" % (what, r)
    return out


# ---------------------------------------------------------------------------
# Every technique is blocked inside the default sandbox.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("t", TECHNIQUES, ids=lambda t: t.id)
def test_blocked_in_sandbox(aj, t):
    if t.id == "session-keyring-shared" and aj.keyring is None:
        must_skip("the test process has no session keyring to compare against")
    r = sandbox(aj, t)
    if t.blocked == SIGSYS and r.returncode == 128 + signal.SIGSEGV:
        # A kernel without the 32-bit entry point (ia32_emulation=0, or
        # IA32_EMULATION off) faults the instruction before any syscall
        # filter sees it. Accepted only when the same probe on the host
        # dies the same way: then no process here can use that ABI at all.
        c = on_host(aj, t)
        assert c.returncode == -signal.SIGSEGV, \
            "%s: SIGSEGV in the sandbox but not on the host (%r): %r" % (t.id, c, r)
        assert r.result["status"] == "signaled" and r.result["signal"] == signal.SIGSEGV, r
        return
    assert_blocked(t, r)


# The network techniques again in network.mode "proxy" (docs/network.md):
# lo is up with the relay on 127.0.0.1:3128 and the egress proxy
# (agentjail-egress beside AJ_BIN) runs outside; none of them gets further
# than in the default sandbox.
NETWORK_TECHNIQUES = [t for t in TECHNIQUES if t.id in (
    "abstract-unix-host", "tcp-host-loopback", "host-interfaces", "socket-raw", "socket-packet", "socket-vsock")]


def _egress_env():
    if not os.access(os.path.join(os.path.dirname(AJ_BIN), "agentjail-egress"), os.X_OK):
        must_skip("agentjail-egress not built beside %s" % AJ_BIN)
    env = dict(os.environ)
    env.pop("AGENTJAIL_EGRESS", None)
    return env


@pytest.mark.parametrize("t", NETWORK_TECHNIQUES, ids=lambda t: t.id)
def test_network_blocked_in_proxy_mode(aj, t):
    assert len(NETWORK_TECHNIQUES) == 6
    r = run_aj(try_args() + t.aj(aj) + ["--network", "proxy", "--allow", "example.com"],
               ["/opt/aj-try"] + t.argv(aj, True), env=_egress_env())
    assert r.result and r.result.get("network", {}).get("mode") == "proxy", r
    assert_blocked(t, r)


def test_environment_is_only_path_and_home(aj):
    """Nothing ambient: the environment inside is PATH and HOME=/tmp, no more."""
    r = run_aj(try_args(), ["/opt/aj-try", "env", "HOME", "PATH"], env=aj.env)
    out = assert_permitted(r, "env")
    names = set(out["detail"].split("vars: ", 1)[1].rstrip(") ").split())
    assert names <= {"PATH", "HOME"}, "unexpected variables inside: %s" % out["detail"]
    r = run_aj(try_args(), ["/opt/aj-try", "grep", "/proc/self/environ", "HOME=/tmp"])
    assert_permitted(r, "HOME=/tmp")


def test_host_loopback_unreachable_with_loopback_network(aj):
    """--network loopback gives a private lo: the host's listener stays unreachable."""
    r = run_aj(try_args() + ["--network", "loopback"],
               ["/opt/aj-try", "tcp-connect", "127.0.0.1", str(aj.port)])
    out = _probe_json(r.stdout)
    assert out is not None and not out["permitted"], "ESCAPE: host loopback reachable: %r" % r
    assert out["errno"] in {"ECONNREFUSED", "EACCES", "EPERM"}, out


def test_setuid_root_binary_gives_no_privilege(aj):
    """A root-owned setuid copy of the probe, bound in, runs with the caller's ids."""
    if not IS_ROOT:
        root_only("needs root to create a root-owned setuid binary")
    suid_dir = os.path.join(aj.base, "suid")
    os.makedirs(suid_dir, exist_ok=True)
    os.chmod(suid_dir, 0o755)
    binary = os.path.join(suid_dir, "aj-try")
    shutil.copy(helper("aj-try"), binary)
    os.chown(binary, 0, 0)
    os.chmod(binary, 0o4755)
    assert os.stat(binary).st_mode & stat.S_ISUID
    # Control: on the host, the copy run as nobody really gets euid 0.
    if os.statvfs(suid_dir).f_flag & os.ST_NOSUID:
        must_skip("%s is on a nosuid mount: cannot run the setuid control" % suid_dir)
    ctl = on_host(aj, T("euid", ["euid"], None), binary=binary,
                  prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    out = assert_permitted(ctl, "setuid control on the host")
    assert "euid=0" in out["detail"], out
    # Inside: no privilege, and the bind is nosuid.
    bind = ["--bind-ro", suid_dir + ":/opt/suid"]
    r = run_aj(try_args() + bind, ["/opt/suid/aj-try", "euid"])
    assert_blocked(T("setuid-euid", ["euid"], {None}), r)
    r = run_aj(try_args() + bind, ["/opt/aj-try", "suid-mount", "/opt/suid/aj-try"])
    assert_blocked(T("setuid-nosuid-mount", ["suid-mount"], {None}), r)


def test_root_owned_file_in_bind_unreadable(aj):
    """A 0600 root file bound in stays unreadable: the sandbox is not host root."""
    if not IS_ROOT:
        root_only("needs root: as another user the bound file would be the caller's own")
    d = os.path.join(aj.base, "rootonly")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    Host._write(os.path.join(d, "secret"), "AJESC-ROOTONLY\n", 0o600)
    Host._write(os.path.join(d, "public"), "AJESC-PUBLIC-ROOT\n", 0o644)
    bind = ["--bind-ro", d + ":/data"]
    r = run_aj(try_args() + bind, ["/opt/aj-try", "read", "/data/secret"])
    assert_blocked(T("root-only-file", ["read"], {"EACCES"}), r)
    r = run_aj(try_args() + bind, ["/opt/aj-try", "read", "/data/public"])
    assert "AJESC-PUBLIC-ROOT" in assert_permitted(r, "public file next to it")["detail"]


# ---------------------------------------------------------------------------
# Positive controls inside the sandbox: the same probes succeed where the
# policy allows it, so a blocked verdict above is not a broken probe.
# ---------------------------------------------------------------------------

def test_positive_bound_file_readable(aj):
    r = run_aj(try_args() + ["--bind-ro", aj.bound + ":/data"], ["/opt/aj-try", "read", "/data/public.txt"])
    assert "AJESC-PUBLIC" in assert_permitted(r, "read a bound file")["detail"]


def test_positive_symlink_inside_sandbox(aj):
    r = run_aj(try_args() + ["--bind-ro", aj.bound + ":/data"],
               ["/opt/aj-try", "symlink-read", "/tmp/ajesc-ok", "/data/public.txt"])
    assert "AJESC-PUBLIC" in assert_permitted(r, "symlink to a bound file")["detail"]


def test_positive_rw_bind_writable(aj):
    r = run_aj(try_args() + ["--bind-rw", aj.rw + ":/work-rw"], ["/opt/aj-try", "create", "/work-rw/ajesc-new"])
    assert_permitted(r, "create in a rw bind")
    assert not os.path.exists(os.path.join(aj.rw, "ajesc-new"))  # the probe removed it


def test_positive_env_explicitly_passed(aj):
    r = run_aj(try_args() + ["--env-pass", "AWS_SECRET_ACCESS_KEY", "--env", "AJESC_SET=1"],
               ["/opt/aj-try", "env", "AWS_SECRET_ACCESS_KEY", "AJESC_SET"], env=aj.env)
    out = assert_permitted(r, "env-pass")
    assert "AWS_SECRET_ACCESS_KEY" in out["detail"] and "AJESC_SET" in out["detail"], out


def test_positive_loopback_network(aj):
    r = run_aj(try_args() + ["--network", "loopback"], ["/opt/aj-try", "tcp-self"])
    assert_permitted(r, "TCP over a private loopback")


def test_positive_abstract_socket_inside(aj):
    r = run_aj(try_args(), ["/opt/aj-try", "abstract-self"])
    assert_permitted(r, "abstract unix socket within the sandbox")


def test_positive_sandbox_pids_visible(aj):
    r = run_aj(try_args(), ["/opt/aj-try", "pid-visible", "1"])
    assert_permitted(r, "the sandbox's own pid 1")


def test_positive_runtime_socket_detected(aj):
    path = os.path.join(aj.base, "fake-docker.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        r = run_aj(try_args() + ["--no-decoys", "--bind-ro", path + ":/run/docker.sock"],
                   ["/opt/aj-try", "runtime-sockets"])
    finally:
        s.close()
        os.unlink(path)
    assert "/run/docker.sock" in assert_permitted(r, "a bound docker.sock")["detail"]


def test_positive_mountinfo_detects_unnamed_bind(aj):
    r = run_aj(try_args() + ["--bind-ro", aj.bound + ":/data"],
               ["/opt/aj-try", "mountinfo", ",".join(aj.host_devs), aj.aj_try_real] + ALLOWED_ROOTS)
    assert os.path.realpath(aj.bound) in assert_permitted(r, "an unnamed bind")["detail"]


# ---------------------------------------------------------------------------
# Control: the same probes directly on the host (no sandbox).  Most must be
# PERMITTED there, or the tests above could not fail.
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def control(host):
    cache = {}

    def get(t):
        if t.id not in cache:
            cache[t.id] = on_host(host, t)
        return cache[t.id]
    return get


@pytest.mark.parametrize("t", CONTROL_TECHNIQUES, ids=lambda t: t.id)
def test_control_on_host(host, control, t):
    if t.id == "session-keyring-shared" and host.keyring is None:
        must_skip("the test process has no session keyring")
    r = control(t)
    if r.returncode < 0:  # a signal: the kernel killed it (e.g. no IA32 emulation)
        assert t.blocked == SIGSYS, "control %s died of signal %d: %r" % (t.id, -r.returncode, r)
        return
    assert r.returncode in (0, 1) and r.probe is not None, "control %s: bad run %r" % (t.id, r)
    assert r.probe["permitted"] == (r.returncode == 0), r
    if t.host == "any" or (t.host == "root" and IS_ROOT):
        assert r.probe["permitted"], "control %s should be PERMITTED on the host: %r" % (t.id, r)


def test_control_majority_permitted(host, control):
    """The suite can fail: on the host most techniques work."""
    permitted, denied = [], []
    for t in CONTROL_TECHNIQUES:
        if t.id == "session-keyring-shared" and host.keyring is None:
            continue
        r = control(t)
        (permitted if r.returncode == 0 else denied).append(t.id)
    share = len(permitted) / (len(permitted) + len(denied))
    floor = 0.60 if IS_ROOT else 0.35
    assert share >= floor, "only %d%% permitted on the host (need %d%%); denied: %s" % (
        share * 100, floor * 100, denied)


def test_control_tiocsti_injects_into_own_pty(host):
    """As root the host's TIOCSTI really pushes input into the test's pty."""
    if not IS_ROOT:
        root_only("TIOCSTI on a non-controlling tty needs CAP_SYS_ADMIN")
    with _Tty() as tty:
        attrs = termios.tcgetattr(tty.slave)
        attrs[3] &= ~termios.ICANON  # non-canonical: the char is readable at once
        termios.tcsetattr(tty.slave, termios.TCSANOW, attrs)
        p = subprocess.run([helper("aj-try"), "tiocsti"], stdin=tty.slave, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, p
        os.set_blocking(tty.slave, False)
        assert os.read(tty.slave, 16) == b" "
