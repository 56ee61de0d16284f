# SPDX-License-Identifier: Apache-2.0
# The bootstrap of a warm Python interpreter (src/lib/run/interp.c, docs/interpreters.md).
#
# Run as `python3 -c THIS MODULE... [-wWARMUP]` inside a sandbox whose every layer is applied
# already. Fd 3 is a stream socket to the supervisor. In order:
#   1. import MODULE... (the policy's interpreter.preload), run WARMUP (interpreter.warmup) in a
#      namespace of its own, then send b"P" (parked) or b"E"+why;
#   2. wait for the one request: b"AJR1" + 4-byte little-endian length with SCM_RIGHTS
#      [stdin, stdout, stderr], then that many bytes: cwd NUL argc NUL argv... NUL envc NUL env...
#      (argv as the request gave it: python3 -c CODE ARGS... or python3 SCRIPT ARGS...);
#   3. close fd 3, take the three fds as 0, 1, 2, the environment (os.environ rebuilt, the C
#      environment with it), the working directory, sys.argv, sys.orig_argv and sys.path[0] as
#      `python3 -c` / `python3 SCRIPT` would have them; drop from sys.modules what this bootstrap
#      imported for itself after the preload; compile the code;
#   4. run it as __main__ in _aj's frame and end as `python3 -c` ends: an uncaught exception's
#      traceback (without this file's frame) through sys.excepthook and status 1, SystemExit's
#      code, KeyboardInterrupt's SIGINT; then the interpreter's shutdown as far as a program can
#      see it: non-daemon threads joined (threading._shutdown), atexit handlers, the modules the
#      run imported and __main__ torn down (their objects' __del__, files left open closed),
#      stdout and stderr flushed; then _exit. What it skips is tearing down the preloaded modules
#      (their objects predate the run): a few hundred milliseconds for pandas.
#   5. The end word: before the _exit, fds 0-2 closed, then b"D" + the exit status (one byte) on
#      the channel, which it kept for this alone (moved to a high fd, close-on-exec; the
#      supervisor shut its own sending side after the request, so nothing ever arrives on it).
#      The supervisor takes the word as the process's exit: it kills the sandbox at once and the
#      result is final as soon as the output pipes reach EOF, without waiting for the exit of a
#      ~100 MB process (and its BLAS threads), which is then torn down off the caller's path.
#      The code can write the word too: that is what os._exit(status) is, and the kill makes it
#      so. A process the code forked that runs on to this end sends none. No word (a signal, the
#      channel closed or garbage): the ordinary end, by init's wait.
#
# Everything is inside _aj (a function): __main__'s namespace holds nothing of this file when
# the code starts; _aj itself is popped from it in the statement that calls it. What is left:
# two frames under the code's module frame (this file's module frame and _aj's).
def _aj(report, exit_status, finish, template_setup, template_profile, template_serve):
    import os
    import sys

    def fail(why):
        # A long message (numpy's import advice) would lose its end, where the cause is: its
        # first line and its last, then.
        lines = [l.strip() for l in why.splitlines() if l.strip()]
        if len(why) > 400 and len(lines) > 2:
            why = "%s ... %s" % (lines[0], lines[-1])
        try:
            os.write(3, b"E" + why.encode("utf-8", "replace")[:4000])
        finally:
            os._exit(1)

    warmup = None
    template = sys.argv[1:2] == ["-t"]
    preload = []
    for name in sys.argv[2 if template else 1:]:
        if name.startswith("-w"):
            warmup = name[2:]
            continue
        preload.append(name)
        try:
            __import__(name)
        except BaseException as e:  # noqa: B036 (SystemExit from a module too)
            fail("interpreter.preload: %s: %s: %s" % (name, type(e).__name__, e))
    if warmup is not None:
        # The policy's warm-up cell: its own globals (dropped after), output to /dev/null (0-2
        # until the request). What it changes elsewhere (imports, options) stays, by design.
        try:
            exec(compile(warmup, "<warmup>", "exec"), {"__name__": "__warmup__", "__builtins__": __builtins__})
        except BaseException as e:  # noqa: B036
            fail("interpreter.warmup: %s: %s" % (type(e).__name__, e))
    # compile()'s first call builds the interpreter's AST types (about 1 ms):
    # here, once, not in each request's time.
    compile("pass", "<agentjail>", "exec")
    preloaded = set(sys.modules)
    import _socket
    import gc
    import resource

    # Where the channel goes while the code runs: a high fd (not the 3 the code's first open()
    # gets in a cold run), below the fd limit; no larger than 255 (the fd table grows to it).
    word_fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    word_fd = (256 if word_fd < 0 or word_fd > 256 else word_fd) - 1
    if word_fd > 3:
        # The fd table grows to it now, not when a request comes: growing a table that threads
        # share (numpy's BLAS threads) waits for an RCU grace period, 5-20 ms on a busy machine.
        try:
            os.dup2(3, word_fd)
            os.close(word_fd)
        except OSError:
            pass

    # What the preload made lives as long as the process: out of the collector's way. Its
    # passes at exit (over every object of pandas, say) cost a few hundred milliseconds of
    # `python3 -c`'s shutdown; frozen objects are not scanned (the run's own objects are).
    # Only the young generations are collected first: a full pass over pandas' objects is
    # ~20 ms of every refill's CPU and finds nothing (the import's own passes collected it);
    # older garbage, if a preload left some, is frozen with the rest (memory, not behaviour).
    if template:
        lib, ctl = template_setup(fail)
    gc.collect(1)
    gc.freeze()
    probe = None
    if template:
        hot, probe = template_profile(warmup, preload, ctl)
    del warmup, preload

    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()  # what the preload printed goes to /dev/null, not to a request's stream
        except Exception:
            pass
    if template:
        if probe is None:
            template_serve(lib, ctl, hot)  # returns in a child, parked in a sandbox of its own
        del lib, ctl, hot
    os.write(3, b"P")
    s = _socket.socket(fileno=3)
    data, anc, _flags, _addr = s.recvmsg(1 << 16, _socket.CMSG_SPACE(3 * 4))
    fds = []
    for level, kind, d in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(d[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(d) - 3, 4)]
    if len(data) < 8 or data[:4] != b"AJR1" or len(fds) != 3:
        os._exit(125)  # the supervisor went away (the pool was freed), or not our protocol
    n = int.from_bytes(data[4:8], "little")
    buf = bytearray(data[8:])
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            os._exit(125)
        buf += chunk
    # The word is this process's alone: a child the code forks (os.fork) that runs on to the end
    # of the code ends here too, and must not end the run with its own status.
    me, word = os.getpid(), None
    if word_fd > 3:
        try:
            os.dup2(3, word_fd, inheritable=False)
            word = _socket.socket(fileno=word_fd)
        except OSError:
            pass
    s.close()
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    it = iter(bytes(buf).split(b"\0"))
    cwd = next(it)
    argv = [os.fsdecode(next(it)) for _ in range(int(next(it)))]
    env = [next(it) for _ in range(int(next(it)))]
    # The interpreter started with the same PATH, HOME, LANG, LC_* and PYTHON* as the request's
    # (interp.c runs the request cold otherwise), so what its start added (PEP 538's LC_CTYPE
    # for a C locale) is what a cold start would have added.
    coerced = os.environb.get(b"LC_CTYPE")
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    if coerced is not None:
        os.environb[b"LC_CTYPE"] = coerced
    if "time" in sys.modules and "TZ" in os.environ:
        sys.modules["time"].tzset()
    os.chdir(cwd)
    sys.orig_argv = argv
    g = globals()
    if argv[1] == "-c":
        source, filename = argv[2], "<string>"
        sys.argv = ["-c"] + argv[3:]
    else:
        script = argv[1]
        sys.argv = argv[1:]
        filename = os.path.abspath(script)
        try:
            with open(script, "rb") as f:
                source = f.read()
        except OSError as e:
            sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (argv[0], filename, e.errno, e.strerror))
            sys.stderr.flush()
            os._exit(2)
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        g["__file__"] = filename
        g["__cached__"] = None
        g["__loader__"] = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", filename)
    for m in set(sys.modules) - preloaded:
        del sys.modules[m]
    # The working directory changed: path finders cached for "" (the old one) go, the rest
    # look again (importlib.invalidate_caches, without importing importlib).
    sys.path_importer_cache.pop("", None)
    for finder in list(sys.path_importer_cache.values()) + list(sys.meta_path):
        if hasattr(finder, "invalidate_caches"):
            finder.invalidate_caches()
    status, sigint = 1, False
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:
        report(e, None)
    else:
        try:
            exec(code, g)
            status = 0
        except SystemExit as e:
            status = exit_status(e)
        except BaseException as e:  # noqa: B036 (as the interpreter does)
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code is not code:
                tb = tb.tb_next
            report(e, tb)
            sigint = isinstance(e, KeyboardInterrupt)
        del code
    finish(status, sigint, preloaded, word if os.getpid() == me else None, _socket.MSG_NOSIGNAL,
           probe if os.getpid() == me else None)


def _aj_template_setup(fail):
    # A template (tmpl.c): fd 3 is a SOCK_SEQPACKET socket to the supervisor, whose first message
    # is b"I" + the policy's sha256 (hex) + 4 bytes of layer flags + the policy's JSON; fd 4 is
    # agentjail-interp.so, which applies the sandbox's layers in each child (tmpl_child.c).
    import _socket
    import ctypes
    import os

    ctl = _socket.socket(fileno=3)
    msg = ctl.recv(1 << 22)
    if msg[:1] != b"I" or len(msg) < 69:
        os._exit(125)
    lib = ctypes.CDLL("/proc/self/fd/4")
    os.close(4)
    lib.aj_tmpl_child_init.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint,
                                       ctypes.c_char_p, ctypes.c_size_t]
    lib.aj_tmpl_child_init.restype = ctypes.c_int
    why = ctypes.create_string_buffer(1024)
    if lib.aj_tmpl_child_init(msg[69:], len(msg) - 69, msg[1:65], int.from_bytes(msg[65:69], "little"), why,
                              len(why)) != 0:
        fail("interpreter.template: " + why.value.decode("utf-8", "replace"))
    return lib, ctl


def _aj_template_profile(warmup, preload, ctl):
    # A child of the template writes to pages it shares with it: each first write is a copy (a
    # fault, ~3 us with its memory charge, 10-20 us under a hypervisor's shadow page tables), a
    # thousand or more for a pandas snippet and its run's way through this bootstrap, which made a
    # warm run 2-3x slower than in an interpreter of its own. And the first touch of any page in a
    # new address space costs there too: ~5 us where the hypervisor builds its page tables then,
    # and a fault (with its neighbours) for the text of the interpreter and its libraries, whose
    # page tables a fork does not copy. Which pages: a probe, a child that parks as any does and is
    # sent a request made here (the warm-up cell as its code, or the exercise below; /dev/null for
    # its streams), runs it to the end and, before its _exit, reports the pages it wrote (those its
    # pagemap shows present and mapped by it alone: a page shared with the template is not, until
    # written) and the pages of files mapped read-only that it touched (present: none were at
    # its fork), these with the address's low bit set. Each parked child writes the first and reads
    # the second kind first thing after its fork (tmpl_child.c), off the run's path: they are its
    # own then, charged to it. Without a warm-up cell, the probe's code exercises the preloaded
    # modules it knows (numpy, pandas: the operations a data-analysis snippet makes most), each
    # in a try of its own; it runs in the probe alone, which is thrown away: a run sees no
    # difference but its speed. Returns (pages, None) in the template, (None, report) in the probe.
    import _socket
    import array
    import os
    import sys

    def exercise():
        # The probe's code when the policy has no warm-up cell: for each
        # preloaded module named here, common work on small data, output included (the probe's
        # streams are /dev/null); `pass` when none is.
        cells = {
            "numpy": (
                "import numpy as np\n"
                "a = np.arange(600, dtype=float).reshape(60, 10)\n"
                "print(a.sum(axis=0), a.mean(), a.std(), a.min(), a.max(), a[:3] @ a[:3].T)\n"
                "print(np.sort(a[::-1], axis=None)[:4], np.unique(a.astype(int) % 7, return_counts=True))\n"
                "print(np.linspace(0, 1, 5), np.where(a > 300, 1, 0).sum(), np.cumsum(a[0]), a.T.shape)\n"),
            "pandas": (
                "import pandas as pd, numpy as np\n"
                "w = pd.DataFrame({'g': np.arange(60) % 4, 'x': np.linspace(0, 1, 60), 'n': np.arange(60),\n"
                "                  's': ['a', 'b', 'c'] * 20})\n"
                "for how in ('sum', 'mean', 'count', 'min', 'max', 'size', 'std', 'median', 'nunique'):\n"
                "    w.groupby('g')['x'].agg(how)\n"
                "print(w[['g', 'x', 'n']].groupby('g').agg(['sum', 'mean', 'count']))\n"
                "print(w.groupby('g')['x'].agg(['sum', 'mean', 'count']))\n"
                "print(w.groupby(['g', 's'])['n'].sum().unstack())\n"
                "print(w.describe(), w.head(), w.dtypes, w['s'].value_counts())\n"
                "print(w.sort_values('x', ascending=False).reset_index(drop=True).iloc[:3])\n"
                "m = w[w['x'] > 0.5].merge(w[['n', 's']], on='n', suffixes=('', '_r'))\n"
                "print(m.pivot_table(index='g', columns='s', values='x'), m.to_string()[:80])\n"),
        }
        code = ""
        for name in preload:
            cell = cells.get(name)
            if cell is not None:
                body = "".join("    " + line + "\n" for line in cell.splitlines())
                code += "try:\n" + body + "except Exception:\n    pass\n"
        return code or "pass"

    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ctl.detach()
        a.close()
        os.close(r)
        os.dup2(b.detach(), 3)

        def report():
            hot = array.array("Q")
            page = os.sysconf("SC_PAGE_SIZE")
            with open("/proc/self/maps") as maps:
                regions = [line.split() for line in maps]
            fd = os.open("/proc/self/pagemap", os.O_RDONLY)
            for parts in regions:
                if len(parts) < 5 or parts[1][0] != "r":
                    continue
                named = len(parts) >= 6 and parts[5]
                if named and parts[5].startswith("[") and parts[5] != "[heap]":
                    continue
                if parts[1][1] == "w" and parts[1][3] == "p":
                    tag, want = 0, 1 << 56 | 1 << 63  # written: mapped exclusively, present
                elif parts[1][1] != "w" and named and parts[5].startswith("/") and parts[4] != "0":
                    tag, want = 1, 1 << 63  # a file's page, read-only here: present
                else:
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                bits = array.array("Q", os.pread(fd, (hi - lo) // page * 8, lo // page * 8))
                start = None
                for i, v in enumerate(bits):
                    mine = v & want == want
                    if mine and start is None:
                        start = i
                    elif not mine and start is not None:
                        hot.extend((lo + start * page | tag, (i - start) * page))
                        start = None
                if start is not None:
                    hot.extend((lo + start * page | tag, (len(bits) - start) * page))
            os.write(w, hot.tobytes())

        return None, report
    os.close(w)
    b.close()
    try:
        code = warmup if warmup is not None else exercise()
        env = [k + b"=" + v for k, v in os.environb.items()]
        body = b"\0".join([b"/", b"3", b"python3", b"-c", os.fsencode(code), str(len(env)).encode()] + env) + b"\0"
        null = os.open("/dev/null", os.O_RDWR)
        a.recv(1)  # b"P": parked
        a.sendmsg([b"AJR1" + len(body).to_bytes(4, "little")],
                  [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", [null] * 3).tobytes())])
        os.close(null)
        a.sendall(body)
        a.shutdown(_socket.SHUT_WR)
        data = b""
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        a.close()
        os.close(r)
        os.waitpid(pid, 0)
    hot = array.array("Q")
    hot.frombytes(data[:len(data) // 16 * 16])
    return hot, None


def _aj_template_serve(lib, ctl, hot):
    # Ready; then one child per b"S" message (struct aj_tmpl_spawn, decoy paths; fds: the sandbox's
    # sync socket, its namespaces, its cgroup files). The child enters the sandbox (tmpl_child.c)
    # and returns from here, parked; the template goes on. EOF: the supervisor is gone.
    import _signal
    import _socket
    import ctypes
    import os
    import sys

    # The fork is tmpl_child.c's (aj_tmpl_child_spawn), called holding the interpreter's lock
    # (PYFUNCTYPE), with os.fork's hooks around it: 0 in the payload, the reaper's pid here.
    spawn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int),
                              ctypes.c_int)(("aj_tmpl_child_spawn", lib))
    api = ctypes.pythonapi
    if hot:
        # The pages a run is likely to write (_aj_template_profile): each payload writes them
        # (MADV_POPULATE_WRITE) first thing after its fork, in C, before anything here runs.
        lib.aj_tmpl_child_hot.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.aj_tmpl_child_hot.restype = None
        lib.aj_tmpl_child_hot(hot.buffer_info()[0], len(hot) // 2)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)  # the children's reapers are nobody's to wait for
    ctl.send(b"P")
    while True:
        try:
            data, anc, flags, _addr = ctl.recvmsg(1 << 16, _socket.CMSG_SPACE(32 * 4))
        except InterruptedError:
            continue
        fds = []
        for level, kind, d in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += [int.from_bytes(d[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(d) - 3, 4)]
        if not data or data[:1] != b"S" or flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC):
            os._exit(0 if not data else 125)
        arr = (ctypes.c_int * len(fds))(*fds)
        api.PyOS_BeforeFork()
        pid = spawn(data[1:], len(data) - 1, arr, len(fds))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            ctl.detach()  # fd 3: closed in the child by tmpl_child.c, never by this object
            break
        api.PyOS_AfterFork_Parent()
        # pid -1: fork failed (the pids limit of the template's sandbox); closing our copies ends
        # that sandbox
        for fd in fds:
            os.close(fd)
    # The payload: every layer applied, fd 3 its request channel. random was reseeded by PyOS_AfterFork_Child;
    # numpy's global generator would repeat the template's sequence in every child.
    if hot and lib.aj_tmpl_child_hot_errno() == 22:
        # Before Linux 5.14 (no MADV_POPULATE_WRITE, EINVAL): the profile's pages to write are
        # written here, a byte written back with its own value, in the pages mapped writable and
        # private only. Its files' pages (the address's low bit set) are left to the run.
        with open("/proc/self/maps") as f:
            mapped = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f
                      if line.split()[1][1] == "w" and line.split()[1][3] == "p"]
        for i in range(0, len(hot), 2):
            if hot[i] & 1:
                continue
            for lo, hi in mapped:
                for a in range(max(lo, hot[i]), min(hi, hot[i] + hot[i + 1]), 4096):
                    b = ctypes.c_char.from_address(a)
                    b.value = b.value
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:
            pass


def _aj_report(e, tb):
    import sys

    e.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    try:
        sys.excepthook(type(e), e, tb)
    except BaseException as hook_e:  # noqa: B036
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_e), hook_e, hook_e.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(e), e, tb)


def _aj_exit_status(e):
    import sys

    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def _aj_finish(status, sigint, preloaded, word, nosignal, probe):
    import gc
    import os
    import sys

    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:  # noqa: B036
            pass
    import atexit

    atexit._run_exitfuncs()
    # The run's own modules (imported after the preload from outside the installed library,
    # such as the workspace's) in reverse order, then __main__: their globals go as the
    # interpreter's teardown lets them go (their objects' __del__ run). The library's modules
    # stay: a daemon thread may still be using them.
    lib = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/lib/python3"})
    main = sys.modules.get("__main__")
    mods = [m for n, m in list(sys.modules.items())
            if n not in preloaded and n != "__main__" and isinstance(getattr(m, "__file__", None), str)
            and not m.__file__.startswith(lib)]
    gc.collect()
    for m in reversed(mods + [main]):
        d = getattr(m, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for first in (True, False):
            for k in list(d):
                if k != "__builtins__" and k.startswith("_") == first:
                    d[k] = None
    gc.collect()
    std = {id(f) for f in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    iobase = sys.modules["io"].IOBase
    for o in gc.get_objects():  # what the run made (the preload's objects are frozen)
        try:
            if isinstance(o, iobase) and id(o) not in std and not o.closed:
                o.close()
        except BaseException:  # noqa: B036 (as at teardown: ignored)
            pass
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except BaseException:  # noqa: B036
            if status == 0:
                status = 120  # as the interpreter: output that could not be flushed
    if sigint:
        import _signal

        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGINT)
    if word is not None:
        # Nothing more is written: EOF on the pipes (unless another process holds them), then
        # the word. Errors (the code closed an fd, or the channel) leave the ordinary end.
        for fd in (0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            word.send(b"D" + bytes([status & 0xFF]), nosignal)
        except OSError:
            pass
    if probe is not None:
        probe()
    os._exit(status)
globals().pop('_aj')(globals().pop('_aj_report'), globals().pop('_aj_exit_status'), globals().pop('_aj_finish'),
                    globals().pop('_aj_template_setup'), globals().pop('_aj_template_profile'),
                    globals().pop('_aj_template_serve'))
