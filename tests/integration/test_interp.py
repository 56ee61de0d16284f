"""Warm interpreters (docs/interpreters.md): a pool of a policy that names
an interpreter parks sandboxes whose python3 has imported the preload;
`python3 -c CODE` / `python3 SCRIPT` runs take one. Driven by the aj-pool
helper as a server would, compared with bare `python3` run cold in the same
policy (`agentjail run -- python3 ...`): the same output, exit status and
tracebacks; nothing of one run reaches the next; every layer is on the
parked interpreter as the host sees it; an escape attempt from one is
refused and reported; nothing is left behind. Runs as root and as nobody."""
import json
import os
import subprocess
import textwrap
import time

import pytest

from conftest import AJ_BIN, AJ_HELPERS, IS_ROOT, children, comm, must_skip, new_tag, root_only, run_aj, wait_for

AJ_POOL = os.path.join(AJ_HELPERS, "aj-pool")
INTERP = ["--set", "interpreter.language=python", "--set", "interpreter.preload=json"]
# The two ways a pool parks interpreters (docs/interpreters.md): forks of one template
# (interpreter.template, the default, root mode) and one import per interpreter.
NO_TEMPLATE = ["--set", "interpreter.template=false"]


@pytest.fixture(params=["template", "import"])
def mode(request):
    """Extra pool arguments for each way of parking; the template only exists in root mode."""
    if request.param == "template" and not IS_ROOT:
        pytest.skip("templates are root mode's (docs/interpreters.md, Templates)")
    return [] if request.param == "template" else NO_TEMPLATE


def have_pandas():
    return subprocess.run(["/usr/bin/python3", "-c", "import pandas"], capture_output=True).returncode == 0


def pool(cmds, outdir, size=2, extra=INTERP, timeout=120, input=None, env=None, wait_file=None):
    """Run cmds through one interpreter pool; (runs, summary, proc)."""
    if not os.path.exists(AJ_POOL):
        must_skip("aj-pool helper not built")
    argv = [AJ_POOL, "--size", str(size), "--outdir", outdir] + list(extra)
    argv.append("--")
    for i, c in enumerate(cmds):
        if i:
            argv.append(":::")
        argv += c
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input, env=env)
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
    assert lines and "pool" in lines[-1], (proc.returncode, proc.stdout, proc.stderr)
    return lines[:-1], lines[-1], proc


def out(outdir, i, ext="out"):
    with open(os.path.join(outdir, "%d.%s" % (i, ext)), errors="replace") as f:
        return f.read()


@pytest.fixture
def outdir(tmp_path):
    os.chmod(tmp_path, 0o777)
    return str(tmp_path)


@pytest.fixture
def workspace(hostdir):
    """A script with a package beside it, for script semantics and imports relative to it."""
    import pathlib
    tmp_path = pathlib.Path(hostdir)
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "helper.py").write_text("X = 'helper'\n")
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "pkg" / "sub.py").write_text("from . import sib\nY = 'sub+' + sib.Z\n")
    (ws / "pkg" / "sib.py").write_text("Z = 'sib'\n")
    (ws / "main.py").write_text(textwrap.dedent("""\
        import os, sys
        import helper
        from pkg import sub
        import multiprocessing as mp

        def sq(x):
            return x * x

        if __name__ == "__main__":  # (spawned workers import this file as __mp_main__)
            print(__name__, __file__, sys.argv, sys.path[0], helper.X, sub.Y, os.getcwd(), flush=True)
            for method in ("spawn", "fork"):
                with mp.get_context(method).Pool(2) as p:
                    print(method, p.map(sq, [1, 2, 3]))
            raise SystemExit(int(sys.argv[1]))
        """))
    for p in [tmp_path, ws, ws / "pkg"]:
        os.chmod(p, 0o755)
    return str(ws)


# (code, args): each run warm and as bare `python3 -c` cold, compared.
CORPUS = [
    ("print('hello'); import sys; print(sys.argv, __name__, sys.path[0], sorted(globals()))", ["a", "b"]),
    ("1/0", []),
    ("def f():\n    raise ValueError('deep')\nf()", []),
    ("x = (", []),
    ("import sys; sys.exit(3)", []),
    ("import sys; sys.exit('a message')", []),
    ("raise SystemExit(None)", []),
    ("raise SystemExit(300)", []),
    ("raise KeyboardInterrupt", []),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", []),
    ("import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('handled'))\n"
     "os.kill(os.getpid(), signal.SIGUSR1)\nprint('after')", []),
    ("import atexit; atexit.register(print, 'at exit', 1); print('main')", []),
    ("import threading, time\n"
     "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\nprint('main')", []),
    ("import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
     "print('daemon left')", []),
    ("class A:\n    def __del__(self):\n        print('del A')\na = A()\nprint('main')", []),
    ("f = open('/tmp/o.txt', 'w'); f.write('unflushed'); import atexit\n"
     "atexit.register(lambda: print(open('/tmp/o.txt').read() or 'empty'))", []),
    ("import sys; sys.stdout.write('x' * 1000000); sys.stderr.write('e' * 100000); print()", []),
    ("import sys; print('to stdout', flush=False); sys.stderr.write('to stderr\\n'); 1/0", []),
    ("import subprocess; print(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout)", []),
    ("import multiprocessing as mp\nwith mp.get_context('fork').Pool(2) as p:\n    print(p.map(abs, [-1, -2]))", []),
    ("import os; print(os.getpid(), os.getcwd(), sorted(os.environ))", []),
    ("import sys; print(sys.flags.isolated, sys.flags.no_site, sys.orig_argv[1:], sys.executable)", ["z"]),
    ("import warnings; warnings.warn('careful')", []),
    ("print(__builtins__.__name__, __loader__, __spec__, __doc__)", []),
    # A forked child that runs on to the end of the code ends as its own process; the run's
    # status is the parent's (the bootstrap's end word is the first process's alone).
    ("import os, sys\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n    sys.exit(4)\n"
     "_, st = os.waitpid(pid, 0)\nprint('parent', os.waitstatus_to_exitcode(st))", []),
    # A process left running that holds stdout: killed at the end as a cold run's would be.
    ("import subprocess; subprocess.Popen(['/bin/sleep', '60']); print('left a sleeper')", []),
]


def test_snippets_as_bare_python(outdir, mode):
    runs, summary, proc = pool([["python3", "-c", c] + a for c, a in CORPUS], outdir, extra=INTERP + mode)
    assert proc.returncode == 0, proc.stderr
    assert runs[0]["warm"] and runs[1]["warm"], runs[:2]
    for i, (code, args) in enumerate(CORPUS):
        cold = run_aj([], ["python3", "-c", code] + args)
        got = runs[i]["result"]
        assert (got["status"], got["exit_code"], got["signal"]) == (
            cold.result["status"], cold.result["exit_code"], cold.result["signal"]), (code, got, cold.stderr)
        assert out(outdir, i) == cold.stdout, code
        assert out(outdir, i, "err") == cold.stderr, code
    # What the corpus is made of happened: a traceback, a SystemExit message, a signal.
    assert "ZeroDivisionError" in out(outdir, 1, "err") and "a message" in out(outdir, 5, "err")
    assert runs[9]["result"]["status"] == "signaled" or runs[9]["result"]["exit_code"] == 128 + 15
    assert "thread done" in out(outdir, 12) and "del A" in out(outdir, 14)
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False


# The code finds the channel its bootstrap keeps for the end word and writes it itself.
WORD = textwrap.dedent("""\
    import os, socket, sys, time
    def socket_fd(f):
        try:
            return os.readlink('/proc/self/fd/' + f).startswith('socket:')
        except OSError:
            return False  # listdir's own fd
    fds = [int(f) for f in os.listdir('/proc/self/fd') if socket_fd(f)]
    print('channel fds', len(fds), fds[0] > 3, flush=True)
    s = socket.socket(fileno=fds[0])
    print('reads', s.recv(10), flush=True)
    s.send(sys.argv[1].encode('latin-1'))
    time.sleep(float(sys.argv[2]))
    print('still here', flush=True)
    sys.exit(5)
    """)


def test_end_word_is_an_exit(outdir):
    # The word (b"D" + status) ends the run as os._exit(status) would: the sandbox is killed at
    # once, whatever the code does next. Taken where the run's cgroup has its CPU time and
    # memory peak (the result then needs nothing from init's wait).
    root_only("the end word is taken only with the run's cgroup accounting (a root run's here)")
    extra = INTERP + ["--set", "limits.timeout=60s"]
    runs, summary, proc = pool([["python3", "-c", WORD, "X\x07", "0.1"], ["python3", "-c", WORD, "D\x07", "60"]],
                               outdir, extra=extra)
    assert runs[0]["warm"] and runs[1]["warm"], (runs, proc.stderr)
    if runs[0]["result"]["cgroup_controllers"].get("memory", "none") == "none":
        must_skip("no memory cgroup here: the end word is not taken without the run's memory peak")
    # Positive control: anything but the word is ignored, the run goes on and ends as its code
    # says. The code sees one socket (above 3), from which nothing can be read.
    assert out(outdir, 0) == "channel fds 1 True\nreads b''\nstill here\n", out(outdir, 0, "err")
    assert (runs[0]["result"]["status"], runs[0]["result"]["exit_code"]) == ("nonzero_exit", 5), runs[0]
    # The word: the run ends with its status, the code's sleep and exit never happen.
    assert out(outdir, 1) == "channel fds 1 True\nreads b''\n", out(outdir, 1, "err")
    got = runs[1]["result"]
    assert (got["status"], got["exit_code"]) == ("nonzero_exit", 7), got
    assert got["cpu_ms"] > 0 and got["max_rss_kb"] > 0, got  # the cgroup's accounting
    # The killed interpreter is gone with the pool, nothing held.
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False, summary


def test_stdin_reaches_the_code(outdir):
    code = "import sys; data = sys.stdin.read(); print(len(data), data[:5].upper())"
    runs, _, _ = pool([["python3", "-c", code]], outdir, input="hello" * 1000)
    assert runs[0]["warm"] and out(outdir, 0) == "5000 HELLO\n", out(outdir, 0, "err")


def test_script_relative_imports_multiprocessing(outdir, workspace, mode):
    extra = INTERP + mode + ["--bind", workspace + ":/ws", "--set", "filesystem.workdir=/ws"]
    runs, _, _ = pool([["python3", "main.py", "7", "x"], ["python3", "/ws/missing.py"]], outdir, extra=extra)
    cold = run_aj(["--bind-ro", workspace + ":/ws", "--workdir", "/ws"], ["python3", "main.py", "7", "x"])
    assert runs[0]["warm"] and runs[0]["result"]["exit_code"] == 7 == cold.result["exit_code"], out(outdir, 0, "err")
    assert out(outdir, 0) == cold.stdout, (out(outdir, 0), cold.stdout)
    lines = out(outdir, 0).splitlines()
    assert lines[0] == "__main__ /ws/main.py ['main.py', '7', 'x'] /ws helper sub+sib /ws", lines
    assert lines[1:] == ["spawn [1, 4, 9]", "fork [1, 4, 9]"], lines
    # A script that does not exist: python3's own message and status 2.
    missing = run_aj([], ["python3", "/ws/missing.py"])
    assert runs[1]["result"]["exit_code"] == 2 == missing.result["exit_code"]
    assert out(outdir, 1, "err") == missing.stderr, (out(outdir, 1, "err"), missing.stderr)


def test_environment_is_the_requests(outdir):
    # env_pass is read when the run starts (never while parked); a variable
    # that changes how python3 starts (PYTHONPATH) runs cold, same semantics.
    code = "import os, sys; print(os.environ.get('AJ_T_TOKEN'), os.environ.get('PYTHONPATH'), '/extra' in sys.path)"
    env = dict(os.environ, AJ_T_TOKEN="first")
    runs, _, _ = pool([["@AJ_T_TOKEN=second", "python3", "-c", code],
                       ["@PYTHONPATH=/extra", "python3", "-c", code]], outdir,
                      extra=INTERP + ["--pass", "AJ_T_TOKEN", "--pass", "PYTHONPATH"], env=env)
    assert runs[0]["warm"] and out(outdir, 0) == "second None False\n", out(outdir, 0, "err")
    assert not runs[1]["warm"] and out(outdir, 1) == "second /extra True\n", out(outdir, 1, "err")


def test_nothing_of_one_run_reaches_the_next(outdir, mode):
    mods = "json" + (",pandas" if have_pandas() else "")
    extra = ["--set", "interpreter.language=python"] + mode + sum(
        (["--set", "interpreter.preload=" + m] for m in mods.split(",")), [])
    first = textwrap.dedent("""\
        import builtins, json, os, sys, threading, time
        json.MARK = 'left'
        json.dumps = lambda *a, **k: 'patched'
        builtins.LEFT = 1
        sys.path.append('/left-behind')
        os.environ['LEFT'] = '1'
        open('/tmp/left-behind', 'w').write('x')
        threading.Thread(target=time.sleep, args=(30,), name='left-thread', daemon=True).start()
        try:
            import pandas as pd
            pd.set_option('display.max_rows', 3)
            print('pandas', pd.get_option('display.max_rows'))
        except ImportError:
            pass
        print(json.dumps({}), getattr(json, 'MARK', None), os.path.exists('/tmp/left-behind'),
              [t.name for t in threading.enumerate()][1:])
        """)
    second = textwrap.dedent("""\
        import builtins, json, os, sys, threading
        try:
            import pandas as pd
            print('pandas', pd.get_option('display.max_rows'))
        except ImportError:
            pass
        print(json.dumps({}), getattr(json, 'MARK', None), os.path.exists('/tmp/left-behind'),
              [t.name for t in threading.enumerate()][1:], hasattr(builtins, 'LEFT'),
              '/left-behind' in sys.path, 'LEFT' in os.environ)
        """)
    runs, summary, proc = pool([["python3", "-c", first], ["python3", "-c", second]], outdir, extra=extra)
    assert runs[0]["warm"] and runs[1]["warm"], (runs, proc.stderr)
    pd_line = ["pandas 3"] if "pandas" in mods else []
    # Positive control: the first run did change all of it, in its own interpreter.
    assert out(outdir, 0).splitlines() == pd_line + ["patched left True ['left-thread']"], out(outdir, 0, "err")
    pd_line = ["pandas 60"] if "pandas" in mods else []
    assert out(outdir, 1).splitlines() == pd_line + ["{} None False [] False False False"], out(outdir, 1, "err")


def parked_pythons(helper_pid):
    """The parked interpreters' pids: children of the helper's sandbox inits, or (a template
    pool) of the template's children, the reapers that entered the sandboxes."""
    found = []
    for kid in children(helper_pid):
        for grandkid in children(kid):
            if comm(grandkid) != "python3":
                continue
            if comm(kid) == "python3":  # kid: the template, grandkid: a reaper
                found += [p for p in children(grandkid) if comm(p) == "python3"]
            else:
                found.append(grandkid)
    return found


def template_of(helper_pid):
    kids = [k for k in children(helper_pid) if comm(k) == "python3"]
    return kids[0] if kids else None


def status_fields(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)


def while_parked(argv, go, look, timeout=60, env=None):
    """Start the aj-pool helper (argv has --wait-file go), call look(pid) once its pool is
    ready, then let it run: (look's value, its JSON lines, its stderr). Killed on any failure."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stderr.readline() == "ready\n"
        seen = look(p.pid)
        go.touch()
        stdout, stderr = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return seen, [json.loads(l) for l in stdout.splitlines() if l.strip()], stderr


def test_parked_interpreter_as_the_host_sees_it(outdir, tmp_path, mode):
    go = tmp_path / "go"
    ev = tmp_path / "ev"
    ev.mkdir()
    os.chmod(ev, 0o777)
    env = dict(os.environ, AJ_T_SECRET="secret-" + new_tag())
    code = textwrap.dedent("""\
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print('getpid', libc.getpid() == os.getpid())
        r = libc.unshare(0x10000000)
        print('unshare', r, os.strerror(ctypes.get_errno()), os.environ.get('AJ_T_SECRET', '')[:7])
        """)
    argv = [AJ_POOL, "--size", "2", "--outdir", outdir, "--events", str(ev), "--wait-file", str(go),
            "--pass", "AJ_T_SECRET"] + INTERP + mode + ["--", "python3", "-c", code]

    def look(helper_pid):
        parked = wait_for(lambda: len(parked_pythons(helper_pid)) == 2 and parked_pythons(helper_pid), 10)
        assert parked, "no parked interpreters under %d" % helper_pid
        host_ns = {n: os.readlink("/proc/self/ns/" + n) for n in ("user", "pid", "mnt", "net", "ipc", "uts", "cgroup")}
        for pid in parked:
            st = status_fields(pid)
            assert st["Seccomp"].strip() == "2" and st["NoNewPrivs"].strip() == "1", st
            assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0 and int(st["CapBnd"], 16) == 0, st
            for n, ino in host_ns.items():
                assert os.readlink("/proc/%d/ns/%s" % (pid, n)) != ino, n
            # Holds nothing of a request: 0-2 /dev/null and its channel, no
            # env_pass value (read when a run starts).
            fds = {int(fd): os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)}
            assert sorted(fds) == [0, 1, 2, 3] and all(fds[i] == "/dev/null" for i in range(3)), fds
            assert fds[3].startswith("socket:"), fds
            with open("/proc/%d/environ" % pid, "rb") as f:
                environ = f.read().split(b"\0")
            assert not any(e.startswith(b"AJ_T_SECRET") for e in environ), environ
        tmpl = template_of(helper_pid)
        assert (tmpl is not None) == (mode == []), (tmpl, mode)
        if tmpl is not None:
            check_template(tmpl, host_ns, tmp_path)
        return parked

    parked, lines, _ = while_parked(argv, go, look, env=env)
    run, summary = lines[0], lines[-1]
    assert run["warm"], run
    # Positive control (ctypes reaches libc) and the refusal, recorded.
    assert out(outdir, 0).splitlines() == ["getpid True", "unshare -1 Operation not permitted secret-"], \
        out(outdir, 0, "err")
    res = run["result"]
    assert res["escape_attempted"] is True and res["events"]["escape_attempt"] >= 1, res
    for k in ("seccomp", "landlock_fs", "escape_monitor", "user_namespace", "pid_namespace", "mount_namespace",
              "network_namespace", "no_new_privs", "capabilities_dropped", "nested_namespaces_refused"):
        assert res["layers"][k], k
    events = [json.loads(l) for l in open(ev / "0.jsonl")]
    start = [e for e in events if e["type"] == "start"]
    assert len(start) == 1 and start[0]["command"][:2] == ["python3", "-c"], start
    assert any(e["type"] == "escape_attempt" and e.get("syscall") == "unshare" for e in events), events
    # Pool freed with a parked interpreter still waiting: every one is gone.
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False, summary
    assert wait_for(lambda: not any(os.path.exists("/proc/%d" % pid) for pid in parked), 5), parked


def check_template(tmpl, host_ns, tmp_path):
    """The template as the host sees it: no capability, no_new_privs, not dumpable by others,
    fds 0-3, its own view (the sandbox's), network, IPC and UTS; the host's user and pid
    namespaces (its children enter the sandboxes from there). Its reapers hold one socket."""
    st = status_fields(tmpl)
    assert st["NoNewPrivs"].strip() == "1", st
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0 and int(st["CapBnd"], 16) == 0, st
    assert int(st["CapAmb"], 16) == 0 and int(st["CapInh"], 16) == 0, st
    assert int(st["Threads"]) == 1, st
    fds = sorted(int(fd) for fd in os.listdir("/proc/%d/fd" % tmpl))
    assert fds == [0, 1, 2, 3], fds
    for n in ("mnt", "net", "ipc", "uts"):
        assert os.readlink("/proc/%d/ns/%s" % (tmpl, n)) != host_ns[n], n
    for n in ("user", "pid"):
        assert os.readlink("/proc/%d/ns/%s" % (tmpl, n)) == host_ns[n], n
    # The sandbox's filesystem, not the host's: a file of the test's is not there (positive
    # control: it is in the host's), and its cgroup is not the helper's.
    marker = tmp_path / "aj-template-marker"
    marker.write_text("x")
    assert os.path.exists("/proc/self/root" + str(marker))
    assert not os.path.exists("/proc/%d/root%s" % (tmpl, marker))
    with open("/proc/%d/cgroup" % tmpl) as f, open("/proc/self/cgroup") as g:
        assert f.read() != g.read()
    for reaper in children(tmpl):
        if comm(reaper) != "python3":
            continue
        rst = status_fields(reaper)
        assert int(rst["CapEff"], 16) == 0 and rst["NoNewPrivs"].strip() == "1", rst
        rfds = {int(fd): os.readlink("/proc/%d/fd/%s" % (reaper, fd)) for fd in os.listdir("/proc/%d/fd" % reaper)}
        assert all(rfds.pop(i) == "/dev/null" for i in range(3)), rfds
        assert len(rfds) == 1 and list(rfds.values())[0].startswith("socket:"), rfds


def test_preload_errors(tmp_path, outdir):
    runs = None
    p = subprocess.run([AJ_POOL, "--size", "1", "--set", "interpreter.language=python", "--set",
                        "interpreter.preload=aj_no_such_module", "--", "python3", "-c", "pass"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "interpreter.preload: aj_no_such_module: ModuleNotFoundError" in p.stderr, p
    # The same from the CLI (cold): a setup error naming the module.
    r = run_aj(["--interpreter", "python", "--preload", "aj_no_such_module"], ["-c", "print(1)"])
    assert r.returncode == 125 and "aj_no_such_module" in r.stderr and r.stdout == "", r
    # Positive control: a module that exists.
    r = run_aj(["--interpreter", "python", "--preload", "json"], ["-c", "import sys; print('json' in sys.modules)"])
    assert r.returncode == 0 and r.stdout == "True\n", r.stderr
    # Bad input, refused before anything starts (exit 2), located in a file.
    for args, msg in [(["--preload", "json"], "interpreter.preload needs interpreter.language"),
                      (["--interpreter", "python", "--preload", "a..b"], "'a..b' is not a module name"),
                      (["--interpreter", "ruby"], "ruby")]:
        r = run_aj(args, ["-c", "pass"])
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    pol = tmp_path / "p.json"
    pol.write_text('{"version": 1,\n  "interpreter": {"language": "python",\n    "preload": ["json", 7]}\n}\n')
    r = run_aj(["--policy", str(pol)], ["-c", "pass"])
    assert r.returncode == 2 and "p.json:3:" in r.stderr and "interpreter.preload[1]" in r.stderr, r.stderr


def test_warmup_cell(outdir):
    # interpreter.warmup: a cell each interpreter runs after its preload, before it parks: what it
    # imports stays (that is its point), its own names and output do not reach the run.
    warm = "import colorsys\nW = 1\nprint('from the warm-up')\n"
    code = "import sys; print('colorsys' in sys.modules, 'W' in globals())"
    extra = INTERP + ["--set", "interpreter.warmup=" + warm]
    runs, summary, proc = pool([["python3", "-c", code]], outdir, extra=extra)
    assert runs[0]["warm"] and out(outdir, 0) == "True False\n", (out(outdir, 0), out(outdir, 0, "err"))
    # The same from the CLI (cold, the same bootstrap); the control: without the warm-up.
    r = run_aj(["--interpreter", "python", "--warmup", warm], ["-c", code])
    assert r.returncode == 0 and r.stdout == "True False\n", r.stderr
    r = run_aj(["--interpreter", "python"], ["-c", code])
    assert r.returncode == 0 and r.stdout == "False False\n", r.stderr
    # A warm-up that fails: no interpreter parks, the pool says why; from the CLI, a setup error.
    p = subprocess.run([AJ_POOL, "--size", "1"] + INTERP + ["--set", "interpreter.warmup=1/0", "--", "python3", "-c",
                                                           "pass"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "interpreter.warmup: ZeroDivisionError" in p.stderr, p
    r = run_aj(["--interpreter", "python", "--warmup", "1/0"], ["-c", "print(1)"])
    assert r.returncode == 125 and "interpreter.warmup: ZeroDivisionError" in r.stderr and r.stdout == "", r
    # Bad input: a warm-up without an interpreter.
    r = run_aj(["--warmup", "pass"], ["true"])
    assert r.returncode == 2 and "interpreter.warmup needs interpreter.language" in r.stderr, r.stderr


def test_cli_code_file_like_python_c(tmp_path, hostdir):
    code = "import sys\nprint('ran', sys.argv)\nraise SystemExit(4)\n"
    f = tmp_path / "code.py"
    f.write_text(code)
    warm_cli = run_aj(["--interpreter", "python", "--preload", "json"], [str(f), "a1"])
    bare = run_aj([], ["python3", "-c", code, "a1"])
    assert (warm_cli.returncode, warm_cli.stdout, warm_cli.stderr) == (4, "ran ['-c', 'a1']\n", "")
    assert (bare.returncode, bare.stdout) == (4, warm_cli.stdout)
    # A plain command under an interpreter policy runs as it is.
    r = run_aj(["--interpreter", "python"], ["python3", "-c", "print(2)"])
    assert r.returncode == 0 and r.stdout == "2\n"
    # A file the code leaves open is closed (flushed) at its end, as python3 -c's teardown does.
    import pathlib
    ws = pathlib.Path(hostdir)
    if IS_ROOT:
        os.chown(hostdir, 1000, 1000)  # a workspace of a normal user (root's is refused)
    rw = ["--bind-rw", hostdir + ":/out"]
    leave = "f = open('/out/left.txt', 'w'); f.write('flushed at exit')"
    r = run_aj(["--interpreter", "python", "--preload", "json"] + rw, ["-c", leave])
    assert r.returncode == 0 and (ws / "left.txt").read_text() == "flushed at exit", r
    (ws / "left.txt").unlink()
    r = run_aj(rw, ["python3", "-c", leave])  # the control: bare
    assert r.returncode == 0 and (ws / "left.txt").read_text() == "flushed at exit", r
    r = run_aj(["--interpreter", "python"], [str(tmp_path / "missing.py")])
    assert r.returncode == 2 and "missing.py" in r.stderr


def test_pandas_warm_run(outdir, mode):
    if not have_pandas():
        must_skip("python3-pandas is not installed (scripts/deps.sh test)")
    code = textwrap.dedent("""\
        import sys
        print('pandas' in sys.modules)
        import pandas as pd, numpy as np
        df = pd.DataFrame({'k': np.arange(10000) % 10, 'v': np.arange(10000, dtype=float)})
        print(df.groupby('k')['v'].agg(['sum', 'mean', 'count']).to_string())
        """)
    runs, _, _ = pool([["python3", "-c", code]], outdir, size=1,
                      extra=["--set", "interpreter.language=python", "--set", "interpreter.preload=pandas"] + mode)
    cold = run_aj([], ["python3", "-c", code])
    assert runs[0]["warm"] and runs[0]["result"]["status"] == "ok", out(outdir, 0, "err")
    # The interpreter's accounting: with one import per interpreter, the import's CPU and memory
    # are the run's, as for a cold one; a template's child is charged what it touches (the pages
    # it copies and allocates), not the template's shared pages.
    assert runs[0]["result"]["cpu_ms"] > 0 and runs[0]["result"]["max_rss_kb"] > 0, runs[0]["result"]
    if mode:
        assert runs[0]["result"]["max_rss_kb"] > 20000, runs[0]["result"]
    assert out(outdir, 0).splitlines()[0] == "True" and cold.stdout.splitlines()[0] == "False"
    assert out(outdir, 0).splitlines()[1:] == cold.stdout.splitlines()[1:]


def test_preload_is_under_the_monitor(hostdir):
    # A preload that makes an escape-indicative call while it imports: refused
    # (the monitor answers EPERM), and no interpreter is parked with it.
    with open(os.path.join(hostdir, "aj_t_escape.py"), "w") as f:
        f.write("import ctypes\nctypes.CDLL(None).unshare(0x10000000)\n")
    with open(os.path.join(hostdir, "aj_t_fine.py"), "w") as f:
        f.write("import ctypes\nctypes.CDLL(None).getpid()\n")
    # With one import per interpreter (a template imports outside the sandbox's filter: see
    # test_template_imports_in_the_sandboxes_view).
    base = [AJ_POOL, "--size", "1", "--bind", hostdir + ":/mods", "--set", "environment.set=PYTHONPATH=/mods",
            "--set", "interpreter.language=python"] + NO_TEMPLATE
    p = subprocess.run(base + ["--set", "interpreter.preload=aj_t_escape", "--", "python3", "-c", "pass"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "monitored system call (unshare)" in p.stderr, p
    # The same from the warm-up cell (the module itself stays inside).
    p = subprocess.run(base + ["--set", "interpreter.preload=aj_t_fine", "--set",
                               "interpreter.warmup=import aj_t_escape", "--", "python3", "-c", "pass"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "monitored system call (unshare)" in p.stderr, p
    # Positive control: the same path, a module that stays inside.
    p = subprocess.run(base + ["--set", "interpreter.preload=aj_t_fine", "--", "python3", "-c",
                               "import sys; print('aj_t_fine' in sys.modules)"],
                       capture_output=True, text=True, timeout=60)
    runs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    assert p.returncode == 0 and runs[0]["warm"] and runs[0]["result"]["status"] == "ok", p
    assert "True\n" in p.stdout, p.stdout  # the run's stdout is the helper's here


# ---- templates (docs/interpreters.md, Templates) ---------------------------------------------

def test_template_is_used_or_says_why(outdir):
    runs, summary, proc = pool([["python3", "-c", "print(1)"]], outdir)
    assert runs[0]["warm"] and out(outdir, 0) == "1\n", (runs, proc.stderr)
    if IS_ROOT:
        assert summary["template"] > 0 and summary["template_why"] == "", summary
    else:
        assert summary["template"] == 0 and "rootless" in summary["template_why"], summary
    # Positive control of the switch: off, the pool says so and parks imports of their own.
    runs, summary, _ = pool([["python3", "-c", "print(1)"]], outdir, extra=INTERP + NO_TEMPLATE)
    assert runs[0]["warm"] and summary["template"] == 0, summary
    assert "interpreter.template" in summary["template_why"], summary


def test_a_policy_larger_than_a_socket_buffer_still_gets_a_template(outdir):
    """The template is handed the pool's policy in one message. A policy of
    300 KB (its environment), more than a socket buffer holds by default,
    still makes one; every variable reaches the run whole."""
    root_only("templates are root mode's")
    big = []
    for i in range(3):
        big += ["--set", "environment.set=BIG%d=%d%s" % (i, i, "x" * 100000)]
    code = "import os; print(sorted((k, len(v), v[0]) for k, v in os.environ.items() if k.startswith('BIG')))"
    runs, summary, proc = pool([["python3", "-c", code]], outdir, extra=INTERP + big)
    assert runs[0]["warm"] and summary["template"] > 0 and summary["template_why"] == "", (summary, proc.stderr)
    assert out(outdir, 0) == "[('BIG0', 100001, '0'), ('BIG1', 100001, '1'), ('BIG2', 100001, '2')]\n", runs


def test_template_children_do_not_share_random_state(outdir):
    root_only("templates are root mode's")
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"], capture_output=True).returncode != 0:
        must_skip("python3-numpy is not installed (scripts/deps.sh test)")
    code = "import random, numpy; print(random.random(), numpy.random.rand(), hash('aj-t'))"
    extra = ["--set", "interpreter.language=python", "--set", "interpreter.preload=numpy"]
    runs, summary, _ = pool([["python3", "-c", code]] * 3, outdir, extra=extra)
    assert summary["template"] > 0 and all(r["warm"] for r in runs), (summary, runs)
    lines = [out(outdir, i).split() for i in range(3)]
    # random and numpy's global generator are reseeded in each child: no two runs alike.
    assert len({l[0] for l in lines}) == 3 and len({l[1] for l in lines}) == 3, lines
    # What a template shares, as documented: the string hash seed (fixed when python3 starts).
    assert len({l[2] for l in lines}) == 1, lines
    # Positive control: with one import per interpreter, the hash seed differs too.
    runs, _, _ = pool([["python3", "-c", code]] * 2, outdir, extra=extra + NO_TEMPLATE)
    assert out(outdir, 0).split()[2] != out(outdir, 1).split()[2]


# What a run finds already its own when it starts: present pages of _decimal's code (a fork
# copies no page table of a file mapping: a child has only what it touched), and pages of the
# preloaded module's 4 MiB buffer mapped by it alone (copied from the template).
PAGES = textwrap.dedent("""\
    import array, ctypes, os, aj_t_big
    at = ctypes.addressof((ctypes.c_char * len(aj_t_big.BUF)).from_buffer(aj_t_big.BUF))
    text = buf = 0
    fd = os.open('/proc/self/pagemap', os.O_RDONLY)
    for line in open('/proc/self/maps').read().splitlines():
        p = line.split()
        lo, hi = (int(x, 16) for x in p[0].split('-'))
        if p[1] == 'r-xp' and '/_decimal' in p[-1]:
            want = 1 << 63
        elif lo <= at < hi:
            lo, hi, want = at, at + len(aj_t_big.BUF), 1 << 63 | 1 << 56
        else:
            continue
        n = sum(1 for v in array.array('Q', os.pread(fd, (hi - lo) // 4096 * 8, lo // 4096 * 8)) if v & want == want)
        if want == 1 << 63:
            text += n
        else:
            buf += n
    print(text, buf)
    """)


def test_a_parked_child_has_touched_what_its_warm_up_did(outdir, hostdir):
    """Each child of a template makes the pages its warm-up cell's probe
    touched its own while it is parked (tmpl_child.c, hot_touch): the pages
    it wrote are copied, the code it ran is mapped and read. A run of other
    code finds them so when it starts."""
    root_only("templates are root mode's")
    with open(os.path.join(hostdir, "aj_t_big.py"), "w") as f:
        f.write("BUF = bytearray(b'x' * (4 << 20))\n")
    base = ["--bind", hostdir + ":/mods", "--set", "environment.set=PYTHONPATH=/mods",
            "--set", "interpreter.language=python", "--set", "interpreter.preload=decimal",
            "--set", "interpreter.preload=aj_t_big"]
    warm = ("import decimal, aj_t_big\nfor i in range(300):\n    str(decimal.Decimal(i).sqrt() / 7)\n"
            "for i in range(0, len(aj_t_big.BUF), 4096):\n    aj_t_big.BUF[i] = 120\n")
    runs, summary, proc = pool([["python3", "-c", PAGES]] * 2, outdir,
                               extra=base + ["--set", "interpreter.warmup=" + warm])
    assert summary["template"] > 0 and all(r["warm"] for r in runs), (summary, proc.stderr)
    text, buf = (int(x) for x in out(outdir, 1).split())
    # The control: the same preload, no warm-up cell. The probe ran `pass`, which runs no
    # decimal code and writes no byte of the buffer: both are the template's still.
    runs, summary, proc = pool([["python3", "-c", PAGES]] * 2, outdir, extra=base)
    assert summary["template"] > 0 and all(r["warm"] for r in runs), (summary, proc.stderr)
    text0, buf0 = (int(x) for x in out(outdir, 1).split())
    assert text0 == 0 and text >= 4, (text, text0)
    assert buf0 <= 2 and buf >= 1000, (buf, buf0)


# numpy's code pages this process has mapped, and a digest of its modules.
NUMPY_PAGES = textwrap.dedent("""\
    import array, hashlib, os, sys
    text = 0
    fd = os.open('/proc/self/pagemap', os.O_RDONLY)
    for line in open('/proc/self/maps').read().splitlines():
        p = line.split()
        if p[1] == 'r-xp' and '/_multiarray_umath' in p[-1]:
            lo, hi = (int(x, 16) for x in p[0].split('-'))
            text += sum(1 for v in array.array('Q', os.pread(fd, (hi - lo) // 4096 * 8, lo // 4096 * 8)) if v >> 63)
    print(text, hashlib.sha256(' '.join(sorted(sys.modules)).encode()).hexdigest()[:16])
    """)


def test_without_a_warm_up_cell_the_probe_exercises_the_preload(outdir):
    """Without a warm-up cell, the probe's code exercises the preloaded
    modules it knows (numpy here): each parked child has touched numpy's
    code before a run. The probe is thrown away: the run sees the same
    modules as with a warm-up cell of `pass`, which turns the exercise off."""
    root_only("templates are root mode's")
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"], capture_output=True).returncode != 0:
        must_skip("python3-numpy is not installed (scripts/deps.sh test)")
    base = ["--set", "interpreter.language=python", "--set", "interpreter.preload=numpy"]
    got = {}
    for label, extra in (("exercise", []), ("pass", ["--set", "interpreter.warmup=pass"])):
        runs, summary, proc = pool([["python3", "-c", NUMPY_PAGES]] * 2, outdir, extra=base + extra)
        assert summary["template"] > 0 and all(r["warm"] for r in runs), (summary, proc.stderr)
        got[label] = out(outdir, 1).split()
    text, mods = int(got["exercise"][0]), got["exercise"][1]
    text0, mods0 = int(got["pass"][0]), got["pass"][1]
    assert text > text0 + 32, (text, text0)
    assert mods == mods0, (got, "the exercise reached the run")


def test_template_killed_is_started_again(tmp_path, outdir):
    root_only("templates are root mode's")
    go = tmp_path / "go"
    argv = [AJ_POOL, "--size", "1", "--outdir", outdir, "--wait-file", str(go)] + INTERP + [
        "--", "python3", "-c", "import time; time.sleep(1); print('a')", ":::", "python3", "-c", "print('b')", ":::",
        "python3", "-c", "print('c')"]

    def kill_template(pid):
        tmpl = wait_for(lambda: template_of(pid), 10)
        assert tmpl, "no template under %d" % pid
        os.kill(tmpl, 9)
        return tmpl

    first, lines, stderr = while_parked(argv, go, kill_template, timeout=120)
    runs, summary = lines[:-1], lines[-1]
    # The parked child outlives its template, also while the refill behind its run (which
    # starts the new template) goes on; the refills come from a new one.
    assert [r["result"]["status"] for r in runs] == ["ok"] * 3, (runs, stderr)
    assert [out(outdir, i) for i in range(3)] == ["a\n", "b\n", "c\n"]
    assert sum(r["warm"] for r in runs) >= 2, runs
    assert summary["template"] > 0 and summary["template"] != first, summary
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False, summary
    assert not os.path.exists("/proc/%d" % summary["template"])


@pytest.mark.parametrize("what,module,why", [
    ("threads", "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
     "left 2 threads running"),
    ("files", "F = open('/etc/hostname')\n", "left files open"),
])
def test_template_refuses_what_cannot_be_forked(hostdir, what, module, why):
    root_only("templates are root mode's")
    with open(os.path.join(hostdir, "aj_t_%s.py" % what), "w") as f:
        f.write(module)
    base = [AJ_POOL, "--size", "1", "--bind", hostdir + ":/mods", "--set", "environment.set=PYTHONPATH=/mods",
            "--set", "interpreter.language=python", "--set", "interpreter.preload=aj_t_%s" % what]
    p = subprocess.run(base + ["--", "python3", "-c", "pass"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and why in p.stderr and "interpreter.template" in p.stderr, p
    # Positive control: the same preload, one import per interpreter (it keeps its thread or file).
    p = subprocess.run(base + NO_TEMPLATE + ["--", "python3", "-c", "import sys; print('aj_t_%s' in sys.modules)" % what],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "True\n" in p.stdout, p
