"""Shared pytest fixtures: locate the binaries, run agentjail, check leaks.

Environment:
  AJ_BIN       agentjail binary (default: build/agentjail)
  AJ_HELPERS   directory with aj-try and aj-nouserns (default: build/tests)
  AJ_MUST_WORK=1  turn every skip into a failure (CI)
"""
import json
import os
import signal
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AJ_BIN = os.path.abspath(os.environ.get("AJ_BIN", os.path.join(ROOT, "build", "agentjail")))
AJ_HELPERS = os.path.abspath(os.environ.get("AJ_HELPERS", os.path.join(ROOT, "build", "tests")))
IS_ROOT = os.geteuid() == 0


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


def _ours(pid):
    """A descendant of this test process, or an orphan (reparented to pid 1:
    what a supervisor that died without killing its sandbox leaves).
    Other users' agentjail runs on the same machine are not ours."""
    me = os.getpid()
    p = pid
    for _ in range(64):
        pp = ppid(p)
        if pp == me:
            return True
        if pp <= 1:
            return pp == 1 and p == pid
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


def _snapshot():
    mounts = open("/proc/self/mountinfo").read().count("agentjail")
    procs = {pid for pid in agentjail_pids() if _ours(pid)}
    tmp = {n for n in os.listdir("/tmp") if n.startswith("agentjail")}
    return mounts, procs, tmp


@pytest.fixture(autouse=True)
def no_leaks():
    """After every test: no agentjail mounts, processes or temp dirs remain."""
    before = _snapshot()
    yield
    after = _snapshot()
    assert after[0] <= before[0], "agentjail mounts leaked into the host namespace"
    assert not (after[1] - before[1]), "agentjail processes left running: %r" % (after[1] - before[1])
    assert not (after[2] - before[2]), "agentjail temp dirs left in /tmp: %r" % (after[2] - before[2])


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
