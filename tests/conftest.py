"""Shared pytest fixtures: locate the binaries, run agentjail, check leaks.

Environment:
  AJ_BIN       agentjail binary (default: build/agentjail)
  AJ_HELPERS   directory with aj-try and aj-nouserns (default: build/tests)
  AJ_MUST_WORK=1  turn every skip into a failure (CI)
"""
import atexit
import json
import os
import signal
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AJ_BIN = os.path.abspath(os.environ.get("AJ_BIN", os.path.join(ROOT, "build", "agentjail")))
AJ_HELPERS = os.path.abspath(os.environ.get("AJ_HELPERS", os.path.join(ROOT, "build", "tests")))
# The library's test helpers (build/tests/aj-pool, ...) are not beside agentjail-interp.so, which a
# template pool's interpreter loads (docs/interpreters.md, "Templates"): say where it is.
os.environ.setdefault("AGENTJAIL_INTERP_SO", os.path.join(os.path.dirname(AJ_BIN), "agentjail-interp.so"))
IS_ROOT = os.geteuid() == 0

# One TMPDIR per pytest process (each xdist worker too): what this process
# and everything it starts makes through TMPDIR (its tempfile dirs, `agentjail
# mcp`'s private directory) lands in a directory of its own, so the leak
# check below counts there without seeing another test run on the same
# machine. 0755: root mode runs get per-run host uids that must traverse it.
# The name has no "agentjail" in it (the mount check looks for that word).
TEST_TMP = tempfile.mkdtemp(prefix="ajpytest-", dir=os.environ.get("TMPDIR") or "/tmp")
os.chmod(TEST_TMP, 0o755)
os.environ["TMPDIR"] = TEST_TMP
tempfile.tempdir = None
# Marks this pytest process's descendants (the environment is inherited,
# and no sandbox sees it: a run's environment is the policy's): an orphan
# that carries another run's mark is that run's, not ours.
TEST_MARK = os.path.basename(TEST_TMP)
os.environ["AJ_TEST_MARK"] = TEST_MARK


def _remove_test_tmp():
    """The private TMPDIR goes with the process, unless something is still
    mounted under it (never delete through a mount). An atexit function
    registered before pytest's own (its tmp_path cleanup, which lists
    TMPDIR/pytest-of-USER): they run in reverse order, so this one last."""
    import shutil
    try:
        with open("/proc/self/mountinfo") as f:
            if any(line.split()[4].startswith(TEST_TMP + "/") for line in f):
                return
    except OSError:
        return
    shutil.rmtree(TEST_TMP, ignore_errors=True)


atexit.register(_remove_test_tmp)


class Run:
    """Outcome of one `agentjail run`."""

    def __init__(self, proc, result):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.result = result

    def __repr__(self):
        return "Run(rc=%r, stdout=%r, stderr=%r, result=%r)" % (
            self.returncode, self.stdout[-2000:], self.stderr[-2000:], self.result)


def landlock_abi():
    """This kernel's Landlock ABI (0: none)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return r if r > 0 else 0


def degraded_needs_consent():
    """A rootless degraded run before Landlock ABI 6 (no signal scope) is
    refused unless the policy allows it (--allow-unscoped-signals):
    test_surfaces.py tests that refusal; elsewhere run_aj adds the flag to
    degraded runs so that what they test still runs on such kernels."""
    return not IS_ROOT and landlock_abi() < 6


def run_aj(args, cmd, timeout=60, input=None, pass_fds=(), env=None, prefix=(), stdin=None):
    """Run `agentjail run ARGS -- CMD` and return a Run with the parsed result JSON."""
    if "--allow-degraded" in args and "--allow-unscoped-signals" not in args and degraded_needs_consent():
        args = list(args) + ["--allow-unscoped-signals"]
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        res_path = os.path.join(d, "result.json")
        full = list(prefix) + [AJ_BIN, "run", "--result", res_path] + list(args) + ["--"] + list(cmd)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                              input=input, pass_fds=pass_fds, env=env, stdin=stdin)
        result = None
        if os.path.exists(res_path):
            with open(res_path) as f:
                result = json.load(f)
        return Run(proc, result)


def new_tag():
    """A unique argv marker for processes a test starts (`sleep 1000.TAG`)."""
    import random
    return "1000.%06d%03d" % (random.randrange(10 ** 6), os.getpid() % 1000)


def pids_with(tag):
    """Host pids of `sleep TAG` processes (not agentjail's own, whose argv
    holds TAG too)."""
    want = tag.encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].rsplit(b"/", 1)[-1] == b"sleep" and want in argv:
            found.append(int(pid))
    return found


def write(path, text, mode=0o644):
    """A host file with exactly this mode (umask aside)."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def wait_for(pred, timeout):
    """pred() until it is truthy or timeout seconds pass; its last value."""
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return pred()


@pytest.fixture
def hostdir():
    """A host temp dir every host uid can traverse (root mode runs as a per-run uid)."""
    import shutil
    d = tempfile.mkdtemp(prefix="ajtest-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def children(pid):
    """Children of every thread of pid (a pool's filler thread clones too)."""
    import glob
    kids = []
    for t in glob.glob("/proc/%d/task/*/children" % pid):
        try:
            with open(t) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def comm(pid):
    """The process's name, or None once it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def alive(pid):
    """The process exists and has not ended (a zombie, not yet reaped, has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def helper(name):
    return os.path.join(AJ_HELPERS, name)


def nouserns(*flags):
    """Command prefix: run agentjail under aj-nouserns (a host refusing
    namespaces; --net-only: network namespaces only)."""
    path = helper("aj-nouserns")
    if not os.access(path, os.X_OK):
        must_skip("aj-nouserns not built: " + path)
    return [path] + list(flags)


@pytest.fixture
def reaper():
    """Collects tags; after the test, kills whatever still carries one (and
    its parent when that is a leftover sandbox init), so a failure does not
    cascade into the leak checks of later tests."""
    tags = []
    yield tags
    for tag in tags:
        for pid in pids_with(tag):
            parent = ppid(pid)
            for p in (pid, parent):
                if p > 1:
                    try:
                        with open("/proc/%d/cmdline" % p, "rb") as f:
                            argv = f.read()
                        if p == pid or argv.split(b"\0")[0].endswith(b"/agentjail"):
                            os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
        wait_for(lambda: not pids_with(tag), 5)


def try_args():
    """Flags that make /opt/aj-try available inside the sandbox."""
    return ["--bind-ro", "%s:/opt/aj-try" % helper("aj-try")]


_ABI_CACHE = {}


def host_abi_works(probe):
    """Whether the host kernel has the entry point aj-try PROBE ("int80",
    "x32") uses: a kernel booted with ia32_emulation=0 (or built without
    IA32/X32 emulation) faults the instruction with SIGSEGV before any
    filter sees it, on the host and in any sandbox alike."""
    if probe not in _ABI_CACHE:
        p = subprocess.run([helper("aj-try"), probe], capture_output=True, timeout=30)
        _ABI_CACHE[probe] = p.returncode != -signal.SIGSEGV
    return _ABI_CACHE[probe]


def _expect_cgroup_limits():
    """Whether agentjail can give this caller's runs cgroup limits here.
    The runner that set the environment up says so (AJ_EXPECT_CGROUP_LIMITS
    =1 in a delegated cgroup v2 scope, 0 where none is writable); by
    default: root yes, anyone else no (this machine: cgroup v1 as root)."""
    v = os.environ.get("AJ_EXPECT_CGROUP_LIMITS")
    if v in ("0", "1"):
        return v == "1"
    return IS_ROOT


CG_LIMITS = _expect_cgroup_limits()


def cgroup_limits_only(reason):
    if not CG_LIMITS:
        pytest.skip("only where this caller's runs get a cgroup: " + reason)


def must_skip(reason):
    """Skip because this machine lacks something: a failure in CI (AJ_MUST_WORK=1)."""
    if os.environ.get("AJ_MUST_WORK") == "1":
        pytest.fail("skip not allowed with AJ_MUST_WORK=1: " + reason)
    pytest.skip(reason)


def root_only(reason):
    """Skip a check that only means something as root (the suite also runs
    as nobody, where the root pass already covered it)."""
    if not IS_ROOT:
        pytest.skip("as root only: " + reason)


def heavy_only(reason):
    """Skip a slow check (a container image build, a load of thousands of
    requests) outside the one pass that runs them: scripts/test.sh sets
    AJ_HEAVY=1 for the release build's root pass only, to keep CI's time."""
    if os.environ.get("AJ_HEAVY") != "1":
        pytest.skip("heavy, runs in the release root pass only (AJ_HEAVY=1): " + reason)


def ppid(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _mark(pid):
    """The AJ_TEST_MARK in pid's environment: None when it has none (a
    sandbox init blanks its copy) or it cannot be read (another user's)."""
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            env = f.read()
    except OSError:
        return None
    for kv in env.split(b"\0"):
        if kv.startswith(b"AJ_TEST_MARK="):
            return kv[13:].decode(errors="replace")
    return None


def _ours(pid):
    """A descendant of this test process, or an orphan (reparented to pid 1:
    what a supervisor that died without killing its sandbox leaves) that
    carries no other test process's mark. Other users' agentjail runs, and
    other test runs' (their own descendants, or orphans with their mark),
    on the same machine are not ours."""
    me = os.getpid()
    p = pid
    for _ in range(64):
        pp = ppid(p)
        if pp == me:
            return True
        if pp <= 1:
            return pp == 1 and p == pid and _mark(pid) in (None, TEST_MARK)
        p = pp
    return False


def agentjail_pids():
    """Pids whose argv[0] is an agentjail binary: supervisors, and their
    sandbox inits (a fork of the supervisor: same argv0)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if argv0.endswith(b"/agentjail"):
            yield pid


def _holders(path):
    """Pids with something of path open: an fd or a cwd in it, or a unix
    socket bound under it (an egress proxy's listening socket)."""
    socks = set()
    try:
        with open("/proc/net/unix") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) >= 8 and parts[7].startswith(path + "/"):
                    socks.add("socket:[%s]" % parts[6])
    except OSError:
        pass
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            links = [os.readlink("/proc/%s/cwd" % pid)]
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    links.append(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
                except OSError:
                    pass
        except OSError:
            continue
        if any(lk in socks or lk == path or lk.startswith(path + "/") for lk in links):
            found.add(pid)
    return found


def foreign_tmp(path):
    """Whether /tmp/agentjail-* PATH is another test run's (or another
    user's): made by another uid while this one is not root, or held open
    only by processes that are not ours. Those libraries that ignore TMPDIR
    (the egress proxy's socket directory: a socket path has 108 bytes)
    still make theirs in /tmp."""
    try:
        st = os.lstat(path)
    except OSError:
        return True  # gone: nobody's leak
    if not IS_ROOT and st.st_uid != os.geteuid():
        return True
    held = _holders(path)
    return bool(held) and not any(_ours(p) for p in held)


def tmp_entries(before=None, settle=2, prefixes=("agentjail",)):
    """agentjail temp entries this test process is answerable for: every one
    in its own TMPDIR, and those in /tmp that are not another run's. With
    BEFORE (an earlier result), only the new ones, each of /tmp's given up
    to SETTLE seconds to go or to show its holder (another run's directory
    exists unheld between its mkdtemp and its socket's bind, and between
    its close and its rmdir)."""
    own = {os.path.join(TEST_TMP, n) for n in os.listdir(TEST_TMP) if n.startswith(prefixes)}
    shared = {os.path.join("/tmp", n) for n in os.listdir("/tmp") if n.startswith(prefixes)}
    if before is None:
        return own | shared
    return (own - before) | not_foreign(shared - before, settle)


def not_foreign(paths, timeout=2):
    """Those of PATHS (in /tmp) that are not another run's, each given up to
    TIMEOUT seconds to go or to show that it is."""
    import time
    end = time.monotonic() + timeout
    while paths:
        left = {p for p in paths if not foreign_tmp(p)}
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)
    return set()


def foreign_mount(line):
    """Whether a mountinfo line is another pytest process's: mounted under
    its private TMPDIR (a test's ramfs, say)."""
    point = line.split()[4]
    base = os.path.dirname(TEST_TMP) + "/ajpytest-"
    return point.startswith(base) and not (point + "/").startswith(TEST_TMP + "/")


def _mounts():
    """agentjail mounts of this namespace, by mount id (a mount cannot be
    tied to the process that made it: any new one here counts)."""
    with open("/proc/self/mountinfo") as f:
        return {line.split()[0]: line.strip() for line in f if "agentjail" in line}


def _snapshot():
    mounts = _mounts()
    procs = {pid for pid in agentjail_pids() if _ours(pid)}
    return mounts, procs, tmp_entries()


@pytest.fixture(autouse=True)
def no_leaks():
    """After every test: no agentjail mounts, processes or temp dirs remain
    that this test process made (other test runs on the machine aside)."""
    before = _snapshot()
    yield
    mounts = _mounts()
    new_mounts = [mounts[m] for m in mounts if m not in before[0]]
    assert not new_mounts, "agentjail mounts leaked into the host namespace: %r" % new_mounts
    procs = {pid for pid in agentjail_pids() if _ours(pid)} - before[1]
    assert not procs, "agentjail processes left running: %r" % procs
    tmp = tmp_entries(before[2])
    assert not tmp, "agentjail temp dirs left: %r" % tmp


# The host /etc entries the sandbox sees read-only (src/lib/isolate/mount.c,
# etc_allowed; docs/security-model.md): configuration without secrets.
ETC_ALLOWED = [
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
    "services", "protocols", "rpc", "networks", "ethertypes", "gai.conf", "host.conf",
    "mime.types", "mailcap", "magic", "magic.mime", "papersize", "locale.alias",
    "os-release", "debian_version", "lsb-release", "issue",
    "fonts", "matplotlibrc", "java-*", "python3*", "perl", "R", "ImageMagick-*", "gtk-3.0",
    "bash.bashrc", "inputrc", "profile", "vim", "nanorc", "xdg", "manpath.config", "gprofng.rc",
    "gdb", "libnl-3", "iproute2",
]
ETC_GENERATED = {"passwd", "group", "hosts", "hostname", "nsswitch.conf", "resolv.conf"}
# Never visible, whatever the allow-list grows into.
ETC_NEVER = ["shadow", "gshadow", "sudoers", "sudoers.d", "ssh", "machine-id", "ssl/private", "npmrc",
             "environment", "gitconfig", "pip.conf", "krb5.keytab", "docker", "security", "subuid",
             "subgid", "credstore", "wireguard", "NetworkManager", "cron.d", "crontab", "maven"]


def etc_allowed_paths():
    """The allow-listed host /etc entries present on this host."""
    import fnmatch
    out = []
    for name in ETC_ALLOWED:
        if "*" in name:
            out += ["/etc/" + e for e in sorted(os.listdir("/etc")) if fnmatch.fnmatch(e, name)]
        elif os.path.lexists("/etc/" + name):
            out.append("/etc/" + name)
    return out
