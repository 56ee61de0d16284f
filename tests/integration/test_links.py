"""Links a sandbox plants: the supervisor never follows them.

A payload with a writable bind (--bind-rw WS) can leave symlinks, FIFOs or
directories of its choosing in WS, and they outlive the run. The supervisor
then works as root (or as the caller) on host paths: the result file, the
events file, the next run's bind sources, the alert hook's cwd. Each test
plants what an attacker would, in a first run, and asserts the kernel-level
outcome of the second: a file the test made is unchanged, a secret is not
read, the run is refused with exit status 2 and a message naming the cause.
Each refusal has a positive control (the same thing without the plant works).

Runs as root and as nobody:
  python3 -m pytest -p no:cacheprovider tests/integration/test_links.py
  setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \\
      python3 -m pytest -p no:cacheprovider tests/integration/test_links.py
"""
import json
import os
import stat
import subprocess

import pytest

from conftest import AJ_BIN, IS_ROOT, root_only, try_args

TRY = "/opt/aj-try"
ORIG = "root's file, must stay as it is\n"

# The openat2 path, and the O_NOFOLLOW walk kernels before 5.6 get.
RESOLVERS = [pytest.param({}, id="openat2"),
             pytest.param({"AGENTJAIL_TEST_NO_OPENAT2": "1"}, id="nofollow-walk")]


def aj(args, cmd, env_extra=None, timeout=60, cwd=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([AJ_BIN, "run"] + list(args) + ["--"] + list(cmd), capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


@pytest.fixture
def ws(hostdir):
    """A workspace every per-run host uid can write, and a file of the
    caller's (root's, as root) next to it that nothing may touch."""
    w = os.path.join(hostdir, "ws")
    os.mkdir(w)
    os.chmod(w, 0o777)
    target = os.path.join(hostdir, "target")
    with open(target, "w") as f:
        f.write(ORIG)
    os.chmod(target, 0o644)
    return w, target


def plant(w, script, env_extra=None):
    """Run 1: the payload, with WS bound writable at /ws, runs script."""
    r = aj(["--bind-rw", "%s:/ws" % w], ["sh", "-c", script], env_extra)
    assert r.returncode == 0, r
    return r


def read(path):
    with open(path) as f:
        return f.read()


# ---- the result file ---------------------------------------------------------------

@pytest.mark.parametrize("env_extra", RESOLVERS)
def test_result_over_planted_symlink_is_refused_and_the_target_untouched(ws, env_extra):
    w, target = ws
    plant(w, "ln -s %s /ws/result.json" % target)
    assert os.path.islink(os.path.join(w, "result.json"))
    res = os.path.join(w, "result.json")
    r = aj(["--result", res], ["true"], env_extra)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r
    assert read(target) == ORIG  # not written through the link
    assert os.path.islink(res)   # nor the link destroyed
    # No temporary file is left beside it.
    assert sorted(os.listdir(w)) == ["result.json"], os.listdir(w)


def test_result_control_plain_path_is_written(ws):
    w, target = ws
    res = os.path.join(w, "fresh.json")
    r = aj(["--result", res], ["sh", "-c", "exit 3"])
    assert r.returncode == 3, r
    assert json.loads(read(res))["exit_code"] == 3


@pytest.mark.parametrize("env_extra", RESOLVERS)
def test_result_through_a_planted_directory_link_is_refused(ws, env_extra):
    w, target = ws
    other = os.path.join(os.path.dirname(w), "other")
    os.mkdir(other)
    plant(w, "ln -s %s /ws/out" % other)
    r = aj(["--result", os.path.join(w, "out", "r.json")], ["true"], env_extra)
    assert r.returncode == 2, r
    assert "symlink" in r.stderr and "realpath" in r.stderr, r.stderr
    assert os.listdir(other) == []


# ---- the events file ----------------------------------------------------------------

@pytest.mark.parametrize("env_extra", RESOLVERS)
def test_events_into_planted_symlink_are_refused_and_target_unchanged(ws, env_extra):
    w, target = ws
    plant(w, "ln -s %s /ws/events.jsonl" % target)
    r = aj(["--events", os.path.join(w, "events.jsonl")] + try_args(),
           ["sh", "-c", "%s mount '$(touch /tmp/x)'; echo ran" % TRY], env_extra)
    assert r.returncode == 2, r
    assert "symlink" in r.stderr and "events.jsonl" in r.stderr, r.stderr
    assert "ran" not in r.stdout  # refused before anything started
    assert read(target) == ORIG


def test_events_control_plain_file_gets_the_events(ws):
    w, target = ws
    ev = os.path.join(w, "events.jsonl")
    for _ in range(2):  # created, then appended to
        r = aj(["--events", ev], ["true"])
        assert r.returncode == 0, r
    types = [json.loads(line)["type"] for line in read(ev).splitlines()]
    assert types == ["start", "exit", "start", "exit"], types
    assert os.stat(ev).st_mode & 0o777 == 0o600


def test_events_into_planted_fifo_are_refused_without_blocking(ws):
    w, target = ws
    plant(w, "mkfifo /ws/events.jsonl")
    r = aj(["--events", os.path.join(w, "events.jsonl")], ["true"], timeout=20)
    assert r.returncode == 2 and "FIFO" in r.stderr, r


# ---- output paths inside a writable bind of the run ----------------------------------

@pytest.mark.parametrize("flag", ["--result", "--events"])
def test_output_inside_the_runs_writable_bind_is_refused(ws, flag):
    w, target = ws
    os.mkdir(os.path.join(w, "sub"))
    # Named through ".." and a doubled slash: compared by identity, not by text.
    parent = os.path.dirname(w)
    spelled = os.path.join(parent, "sub0", "..", os.path.basename(w)) + "//sub/out.json"
    os.mkdir(os.path.join(parent, "sub0"))
    for path in (os.path.join(w, "out.json"), spelled):
        r = aj(["--bind-rw", "%s:/ws" % w, flag, path], ["sh", "-c", "touch /ws/ran"])
        assert r.returncode == 2, (path, r)
        assert "--bind-rw %s" % w in r.stderr and "/ws" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(w, "ran"))
        assert not os.path.exists(path)
    # Control: the same run with the file outside the bind.
    out = os.path.join(parent, "out.json")
    r = aj(["--bind-rw", "%s:/ws" % w, flag, out], ["sh", "-c", "touch /ws/ran"])
    assert r.returncode == 0, r
    assert os.path.exists(os.path.join(w, "ran")) and os.path.getsize(out) > 0


def test_output_inside_a_read_only_bind_is_allowed(ws):
    w, target = ws
    out = os.path.join(w, "r.json")
    r = aj(["--bind-ro", "%s:/ws" % w, "--result", out], ["true"])
    assert r.returncode == 0, r
    assert json.loads(read(out))["status"] == "ok"


# ---- bind sources ---------------------------------------------------------------------

@pytest.fixture
def secret(hostdir):
    """A host directory with a secret file a run's uid could read if it were bound."""
    d = os.path.join(hostdir, "secret")
    os.mkdir(d)
    os.chmod(d, 0o755)
    with open(os.path.join(d, "key"), "w") as f:
        f.write("TOPSECRET\n")
    os.chmod(os.path.join(d, "key"), 0o644)
    return d


@pytest.mark.parametrize("env_extra", RESOLVERS)
def test_bind_source_swapped_for_a_symlink_is_refused(ws, secret, env_extra):
    w, target = ws
    plant(w, "ln -s %s /ws/data" % secret)
    for extra in ([], ["--allow-bind-inside-writable"]):  # a symlink is refused regardless
        r = aj(extra + ["--bind-ro", "%s/data:/data" % w], ["cat", "/data/key"], env_extra)
        assert r.returncode == 2, r
        assert "TOPSECRET" not in r.stdout
        assert "symlink" in r.stderr and "realpath" in r.stderr and "%s/data" % w in r.stderr, r.stderr
    # A symlink higher up the path too.
    r = aj(["--bind-ro", "%s/data/../secret:/data" % w], ["cat", "/data/key"], env_extra)
    assert r.returncode == 2 and "TOPSECRET" not in r.stdout, r


@pytest.mark.parametrize("env_extra", RESOLVERS)
def test_bind_source_control_real_directory_binds(hostdir, env_extra):
    d = os.path.join(hostdir, "ws2", "data")
    os.makedirs(d)
    os.chmod(os.path.dirname(d), 0o755)
    os.chmod(d, 0o755)
    with open(os.path.join(d, "f"), "w") as f:
        f.write("public\n")
    os.chmod(os.path.join(d, "f"), 0o644)
    r = aj(["--bind-ro", "%s:/data" % d], ["cat", "/data/f"], env_extra)
    assert r.returncode == 0 and r.stdout == "public\n", r


def test_bind_inside_a_registered_writable_bind_is_refused_unless_allowed(ws, hostdir):
    w, target = ws
    plant(w, "true")  # WS is now a writable bind source of a run
    sub = os.path.join(w, "sub")
    os.mkdir(sub)  # made by the test, not the sandbox: only the registry knows
    os.chmod(sub, 0o755)
    with open(os.path.join(sub, "f"), "w") as f:
        f.write("data\n")
    os.chmod(os.path.join(sub, "f"), 0o644)
    r = aj(["--bind-ro", "%s:/data" % sub], ["cat", "/data/f"])
    assert r.returncode == 2 and r.stdout == "", r
    assert "lies inside %s" % w in r.stderr, r.stderr
    assert "allow_bind_inside_writable" in r.stderr and "--allow-bind-inside-writable" in r.stderr, r.stderr
    # Allowed by flag, and by the policy key.
    r = aj(["--allow-bind-inside-writable", "--bind-ro", "%s:/data" % sub], ["cat", "/data/f"])
    assert r.returncode == 0 and r.stdout == "data\n", r
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"allow_bind_inside_writable": True,
                                                "binds": [{"host": sub, "sandbox": "/data"}]}}, f)
    r = aj(["--policy", pol], ["cat", "/data/f"])
    assert r.returncode == 0 and r.stdout == "data\n", r
    # The workspace itself binds again (a session's workspace across runs).
    r = aj(["--bind-rw", "%s:/ws" % w], ["cat", "/ws/sub/f"])
    assert r.returncode == 0 and r.stdout == "data\n", r


def test_bind_inside_the_same_runs_writable_bind_is_refused(ws):
    w, target = ws
    sub = os.path.join(w, "fresh")
    os.mkdir(sub)
    r = aj(["--bind-rw", "%s:/ws" % w, "--bind-ro", "%s:/data" % sub], ["true"])
    assert r.returncode == 2 and "lies inside %s" % w in r.stderr, r


def test_registry_is_a_private_file_of_the_supervisor(ws):
    w, target = ws
    plant(w, "true")
    if IS_ROOT:
        state = "/run/agentjail"
    elif os.environ.get("XDG_RUNTIME_DIR", "").startswith("/"):
        state = os.path.join(os.environ["XDG_RUNTIME_DIR"], "agentjail")
    else:
        state = os.path.join(os.environ["HOME"], ".local/state/agentjail")
    reg = os.path.join(state, "writable-binds")
    st = os.lstat(reg)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600, st
    assert os.stat(state).st_mode & 0o077 == 0
    ino = os.stat(w).st_ino
    lines = [line.split(" ", 4) for line in read(reg).splitlines()]
    assert any(int(f[1]) == ino and f[4] == w for f in lines), lines


def made_elsewhere(ws, hostdir, script):
    # A directory a sandbox made (script, in /ws/made), moved out of every registered bind into a
    # directory of root's: the host directory it now lies in.
    root_only("run uids exist in root mode only")
    w, _target = ws
    plant(w, "mkdir /ws/made && " + script)
    moved = os.path.join(hostdir, "elsewhere")
    os.mkdir(moved)
    os.rename(os.path.join(w, "made"), os.path.join(moved, "made"))
    return moved


def test_bind_made_by_a_sandbox_elsewhere_is_refused(ws, hostdir):
    moved = made_elsewhere(ws, hostdir, "echo x > /ws/made/f")
    r = aj(["--bind-ro", "%s/made:/data" % moved], ["cat", "/data/f"])
    assert r.returncode == 2 and r.stdout == "", r
    assert "owned by host uid" in r.stderr and "--allow-bind-inside-writable" in r.stderr, r.stderr
    r = aj(["--allow-bind-inside-writable", "--bind-ro", "%s/made:/data" % moved], ["cat", "/data/f"])
    assert r.returncode == 0 and r.stdout == "x\n", r


def test_bind_made_by_a_sandbox_beside_a_clean_one_is_refused(ws, hostdir):
    # The resolve checks a directory once for all the binds it holds (the /etc view's dozens):
    # each source in it is still checked itself, whichever comes first.
    moved = made_elsewhere(ws, hostdir, "echo x > /ws/made/f && echo y > /ws/made/g")
    with open(os.path.join(moved, "clean"), "w") as f:
        f.write("c\n")
    os.rename(os.path.join(moved, "made", "g"), os.path.join(moved, "g"))  # a sandbox's file, in a root dir
    # Positive control: the clean file of that directory alone binds.
    r = aj(["--bind-ro", "%s/clean:/c" % moved], ["cat", "/c"])
    assert r.returncode == 0 and r.stdout == "c\n", r
    for binds in (["clean", "made"], ["clean", "g"], ["made", "clean"]):
        args = []
        for i, name in enumerate(binds):
            args += ["--bind-ro", "%s/%s:/b%d" % (moved, name, i)]
        r = aj(args, ["true"])
        assert r.returncode == 2 and "owned by host uid" in r.stderr, (binds, r)
        bad = [n for n in binds if n != "clean"][0]
        assert "%s/%s" % (moved, bad) in r.stderr, (binds, r.stderr)


def test_policy_key_is_typed_dumped_and_diffed(hostdir):
    bad = os.path.join(hostdir, "bad.json")
    with open(bad, "w") as f:
        f.write('{"version": 1,\n "filesystem": {"allow_bind_inside_writable": "yes"}}\n')
    r = subprocess.run([AJ_BIN, "policy", "check", bad], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert "%s:2:" % bad in r.stderr and "filesystem.allow_bind_inside_writable" in r.stderr, r.stderr
    good = os.path.join(hostdir, "good.json")
    with open(good, "w") as f:
        json.dump({"version": 1, "filesystem": {"allow_bind_inside_writable": True}}, f)
    d = subprocess.run([AJ_BIN, "policy", "show", good], capture_output=True, text=True)
    assert d.returncode == 0 and json.loads(d.stdout)["filesystem"]["allow_bind_inside_writable"] is True, d
    base = os.path.join(hostdir, "base.json")
    with open(base, "w") as f:
        json.dump({"version": 1}, f)
    d = subprocess.run([AJ_BIN, "policy", "diff", base, good], capture_output=True, text=True)
    assert "filesystem.allow_bind_inside_writable" in d.stdout and "B is weaker" in d.stdout, d


# ---- the alert hook ----------------------------------------------------------------------

def test_alert_hook_does_not_run_from_the_callers_cwd(ws, hostdir):
    """The caller runs agentjail from its workspace, bound writable; the
    hook is a relative command. The payload swaps in its own script: it
    must not run on the host."""
    w, target = ws
    marker = os.path.join(hostdir, "pwned")
    good = os.path.join(w, "alert.sh")
    with open(good, "w") as f:
        f.write("#!/bin/sh\ntrue\n")
    os.chmod(good, 0o777)
    os.chmod(w, 0o777)
    payload = ("printf '#!/bin/sh\\ntouch %s\\n' > /ws/alert.sh; %s mount; true" % (marker, TRY))
    r = aj(["--bind-rw", "%s:/ws" % w, "--alert-cmd", "./alert.sh"] + try_args(), ["sh", "-c", payload], cwd=w)
    assert r.returncode == 0, r
    assert not os.path.exists(marker)
    # Control: an absolute hook runs.
    r = aj(["--bind-rw", "%s:/ws" % w, "--alert-cmd", "%s/alert.sh" % w] + try_args(), ["sh", "-c", payload],
           cwd=w)
    assert r.returncode == 0, r
    assert os.path.exists(marker)


# ---- the registry's upkeep ------------------------------------------------------------------

def _as_caller_with_home(home):
    """Run agentjail rootless with its state directory under home: as
    nobody when the suite runs as root, so the test owns the registry and
    the host's /run/agentjail is left alone."""
    if IS_ROOT:
        os.chown(home, 65534, 65534)
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return []


def test_registry_is_compacted_and_keeps_live_entries(hostdir):
    home = os.path.join(hostdir, "home")
    os.mkdir(home, 0o700)
    prefix = _as_caller_with_home(home)
    live = os.path.join(hostdir, "live")
    new = os.path.join(hostdir, "new")
    for d in (live, new):
        os.mkdir(d, 0o777)
        os.chmod(d, 0o777)
    env = dict(os.environ, HOME=home)
    env.pop("XDG_RUNTIME_DIR", None)

    def run(args, cmd):
        return subprocess.run(prefix + [AJ_BIN, "run"] + args + ["--"] + cmd, capture_output=True, text=True,
                              env=env, timeout=60)

    r = run(["--bind-rw", "%s:/ws" % live], ["true"])
    assert r.returncode == 0, r
    reg = os.path.join(home, ".local/state/agentjail/writable-binds")
    first = read(reg)
    assert first.endswith(" %s\n" % live), first
    # 8,000 entries of directories that are gone (330 KB): past the 256 KB threshold.
    with open(reg, "a") as f:
        for i in range(8000):
            f.write("1 %d 1700000000 0 /nonexistent/ws-%d\n" % (100000 + i, i))
    r = run(["--bind-rw", "%s:/ws" % new], ["true"])
    assert r.returncode == 0, r
    lines = read(reg).splitlines()
    assert [line.split(" ", 4)[4] for line in lines] == [live, new], lines[:5]
    assert [n for n in os.listdir(os.path.dirname(reg))] == ["writable-binds"]  # no temp file left
    # The live entry still protects: a directory inside it is refused.
    os.mkdir(os.path.join(live, "sub"), 0o755)
    r = run(["--bind-ro", "%s/sub:/d" % live], ["true"])
    assert r.returncode == 2 and "lies inside %s" % live in r.stderr, r


def test_registry_not_ours_alone_is_refused(hostdir):
    home = os.path.join(hostdir, "home")
    os.mkdir(home, 0o700)
    prefix = _as_caller_with_home(home)
    ws = os.path.join(hostdir, "w")
    os.mkdir(ws)
    os.chmod(ws, 0o777)
    env = dict(os.environ, HOME=home)
    env.pop("XDG_RUNTIME_DIR", None)
    cmd = prefix + [AJ_BIN, "run", "--bind-rw", "%s:/ws" % ws, "--", "true"]
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    reg = os.path.join(home, ".local/state/agentjail/writable-binds")
    os.chmod(reg, 0o666)  # someone else could rewrite it
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "writable-binds is not a private file" in r.stderr, r
    os.chmod(reg, 0o600)
    os.chmod(os.path.dirname(reg), 0o777)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "must be a directory owned by uid" in r.stderr, r


def test_degraded_mode_bind_source_symlink_is_refused(ws, secret):
    """Without namespaces a bind is a Landlock rule on the host path: the
    planted link must not widen it to the secret directory."""
    from conftest import nouserns
    w, target = ws
    plant(w, "ln -s %s /ws/data" % secret)
    cmd = nouserns() + [AJ_BIN, "run", "--allow-degraded", "--bind-ro", "%s/data" % w, "--",
                        "cat", "%s/data/key" % w]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "TOPSECRET" not in r.stdout, r
    assert "symlink" in r.stderr, r.stderr
    # Control: the secret directory itself, named, is readable in degraded mode.
    cmd = nouserns() + [AJ_BIN, "run", "--allow-degraded", "--bind-ro", secret, "--", "cat", "%s/key" % secret]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "TOPSECRET\n", r


def test_report_output_over_planted_symlink_is_refused(ws):
    """`agentjail report --output` into a workspace a run wrote."""
    w, target = ws
    plant(w, "ln -s %s /ws/report.md" % target)
    golden = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")
    out = os.path.join(w, "report.md")
    r = subprocess.run([AJ_BIN, "report", "--profile", "default", "--output", out,
                        "--probe-json", os.path.join(golden, "probe-clean.json"),
                        "--check-json", os.path.join(golden, "check-host.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not a regular file" in r.stderr, r
    assert read(target) == ORIG and os.path.islink(out)
    # Control: a plain path gets the report.
    out2 = os.path.join(w, "report2.md")
    r = subprocess.run([AJ_BIN, "report", "--profile", "default", "--output", out2,
                        "--probe-json", os.path.join(golden, "probe-clean.json"),
                        "--check-json", os.path.join(golden, "check-host.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and read(out2).startswith("#"), r


def test_bind_source_swapped_during_setup_never_binds_the_link_target(hostdir, secret):
    """A racer swaps the bind source between a real directory and a
    symlink to a secret directory (renameat2 RENAME_EXCHANGE: atomic), as a
    concurrent run could in its workspace. Whatever instant each lookup
    lands on, the secret is never bound: the run binds the real directory,
    or is refused (exit 2)."""
    import ctypes
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("libc without renameat2")
    d = os.path.join(hostdir, "race")
    os.mkdir(d, 0o755)
    real = os.path.join(d, "data")
    os.mkdir(real, 0o755)
    with open(os.path.join(real, "key"), "w") as f:
        f.write("public\n")
    os.chmod(os.path.join(real, "key"), 0o644)
    alt = os.path.join(d, "alt")
    os.symlink(secret, alt)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    stop = threading.Event()
    swaps = [0]

    def racer():
        a, b = real.encode(), alt.encode()
        while not stop.is_set():
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                swaps[0] += 1

    t = threading.Thread(target=racer, daemon=True)
    t.start()
    outcomes = []
    try:
        # 40 runs, and more (up to 200) until both outcomes were seen.
        while len(outcomes) < 40 or (len(set(outcomes)) < 2 and len(outcomes) < 200):
            r = aj(["--bind-ro", "%s:/data" % real], ["cat", "/data/key"])
            assert "TOPSECRET" not in r.stdout, r
            assert r.returncode in (0, 2), r
            if r.returncode == 0:
                assert r.stdout == "public\n", r
            outcomes.append(r.returncode)
    finally:
        stop.set()
        t.join()
    assert swaps[0] > 100, swaps
    # Both outcomes happen: the race is real, and the real directory binds.
    assert 0 in outcomes and 2 in outcomes, outcomes


def test_result_never_replaces_a_symlink_or_device(tmp_path):
    """Only a regular file at the result path is replaced: the operator's
    own /dev/stdout-like symlink (or a FIFO) is neither written through nor
    destroyed; --result - prints on stdout instead."""
    target = tmp_path / "target"
    target.write_text("keep\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (link, fifo):
        r = subprocess.run([AJ_BIN, "run", "--result", str(p), "--", "true"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and "not a regular file" in r.stderr and "--result -" in r.stderr, r
    assert os.path.islink(link) and target.read_text() == "keep\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # Control: stdout gets the result after the payload's own output, and a
    # regular file at the path is replaced.
    r = subprocess.run([AJ_BIN, "run", "--result", "-", "--", "echo", "payload"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("payload\n"), r
    assert json.loads(r.stdout.split("\n", 1)[1])["status"] == "ok", r.stdout
    reg = tmp_path / "reg.json"
    reg.write_text("old")
    r = subprocess.run([AJ_BIN, "run", "--result", str(reg), "--", "true"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and json.loads(reg.read_text())["status"] == "ok", r
