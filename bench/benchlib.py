"""Shared timing harness for the bench/ scripts: spawn with posix_spawn and
waitpid only (so the harness adds as little as possible to each sample; the
"bare" candidate shows what it does add), skip candidates that cannot run
here (with the reason), interleave rounds to spread noise, summarise."""
import os
import random
import time

_devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
_fa = [(os.POSIX_SPAWN_DUP2, _devnull, 0), (os.POSIX_SPAWN_DUP2, _devnull, 1),
       (os.POSIX_SPAWN_DUP2, _devnull, 2)]
_env = dict(os.environ)


def spawn_env():
    return _env


def spawn_actions():
    """posix_spawn file actions: stdin, stdout and stderr on /dev/null."""
    return _fa


def bwrap_argv(path, cmd, seccomp_fd=None):
    """bubblewrap with flags comparable to agentjail's defaults: every
    namespace, die-with-parent, a new session, the system read-only, fresh
    /proc, /dev and /tmp (and --seccomp FD when a filter is given)."""
    argv = [path, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"] + list(cmd)


class Candidates:
    def __init__(self):
        self.cands, self.skipped = [], []
        self.extra_fa = {}  # name -> extra posix_spawn file actions (bwrap's --seccomp fd)

    def add(self, name, argv, why_missing=None, extra_fa=()):
        self.extra_fa[name] = list(extra_fa)
        if why_missing:
            self.skipped.append((name, why_missing))
        else:
            self.cands.append((name, argv))


def run_once(argv, extra_fa=()):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, _env, file_actions=_fa + list(extra_fa))
    _, st = os.waitpid(pid, 0)
    return time.perf_counter_ns() - t0, os.waitstatus_to_exitcode(st)


def trial(argv, limit_s=10.0, extra_fa=()):
    """Exit code of one run, or None if it did not finish in limit_s."""
    pid = os.posix_spawn(argv[0], argv, _env, file_actions=_fa + list(extra_fa))
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        got, st = os.waitpid(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(st)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def keep_runnable(c):
    """A candidate that cannot run here is skipped, with its reason, rather
    than timed as a fast failure (or hanging the benchmark)."""
    ok = []
    for name, argv in c.cands:
        try:
            code = trial(argv, extra_fa=c.extra_fa.get(name, ()))
        except OSError as e:
            c.skipped.append((name, "spawn failed: %s" % e))
            continue
        if code is None:
            c.skipped.append((name, "trial run did not finish in 10 s"))
        elif code != 0:
            c.skipped.append((name, "trial run exited %d: %s" % (code, " ".join(argv))))
        else:
            ok.append((name, argv))
    c.cands = ok


def measure(cands, n, warm=10, extra_fa=None):
    """Interleaved, shuffled rounds; returns (samples, fails, warm)."""
    extra_fa = extra_fa or {}
    warm = min(warm, n)
    for _ in range(warm):
        for name, argv in cands:
            run_once(argv, extra_fa.get(name, ()))
    samples = {name: [] for name, _ in cands}
    fails = {name: 0 for name, _ in cands}
    order = list(cands)
    for _ in range(n):
        random.shuffle(order)
        for name, argv in order:
            ns, code = run_once(argv, extra_fa.get(name, ()))
            samples[name].append(ns)
            fails[name] += code != 0
    return samples, fails, warm


def median(xs):
    s = sorted(xs)
    k = len(s)
    return s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2


def p95(xs):
    s = sorted(xs)
    return s[max(0, -(-95 * len(s) // 100) - 1)]  # nearest rank


def summarise(cands, samples, fails):
    return {name: {"n": len(samples[name]), "failed": fails[name], "median_ns": median(samples[name]),
                   "p95_ns": p95(samples[name]), "min_ns": min(samples[name]), "max_ns": max(samples[name])}
            for name, _ in cands}
