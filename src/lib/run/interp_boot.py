# SPDX-License-Identifier: Apache-2.0
# The bootstrap of a warm Python interpreter (src/lib/run/interp.c, docs/interpreters.md).
#
# Run as `python3 -c THIS MODULE...` inside a sandbox whose every layer is applied already.
# Fd 3 is a stream socket to the supervisor. In order:
#   1. import MODULE... (the policy's interpreter.preload), then send b"P" (parked) or b"E"+why;
#   2. wait for the one request: b"AJR1" + 4-byte little-endian length with SCM_RIGHTS
#      [stdin, stdout, stderr], then that many bytes: cwd NUL argc NUL argv... NUL envc NUL env...
#      (argv as the request gave it: python3 -c CODE ARGS... or python3 SCRIPT ARGS...);
#   3. close fd 3, take the three fds as 0, 1, 2, the environment (os.environ rebuilt, the C
#      environment with it), the working directory, sys.argv, sys.orig_argv and sys.path[0] as
#      `python3 -c` / `python3 SCRIPT` would have them; drop from sys.modules what this bootstrap
#      imported for itself after the preload; compile the code;
#   4. run it as __main__ (the module-level try below), so that an uncaught exception, SystemExit,
#      KeyboardInterrupt, atexit, threads and the flushing of output end the process exactly as
#      they end `python3 -c`: the interpreter's own shutdown does it.
#
# Everything is inside _aj (a function): __main__'s namespace holds nothing of this file when
# the code starts; _aj itself is popped from it in the statement that runs the code. The only
# trace left is one frame: the code's module frame has this file's module frame as its f_back.
def _aj():
    import os
    import sys

    def fail(why):
        try:
            os.write(3, b"E" + why.encode("utf-8", "replace")[:4000])
        finally:
            os._exit(1)

    for name in sys.argv[1:]:
        try:
            __import__(name)
        except BaseException as e:  # noqa: B036 (SystemExit from a module too)
            fail("%s: %s: %s" % (name, type(e).__name__, e))
    preloaded = set(sys.modules)
    import _socket

    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()  # what the preload printed goes to /dev/null, not to a request's stream
        except Exception:
            pass
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
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
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
    # A SyntaxError leaves here: the handler below drops this frame, as `python3 -c` shows none.
    return compile(source, filename, "exec"), g
try:exec(*globals().pop('_aj')())
except BaseException as _agentjail_e:_agentjail_e.__traceback__=(lambda t:None if t is None or t.tb_frame.f_code.co_name=='_aj' else t)(_agentjail_e.__traceback__.tb_next);raise
