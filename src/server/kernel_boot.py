# SPDX-License-Identifier: Apache-2.0
# The bootstrap of a session's live Python kernel (src/server/kernel.c, docs/server.md 'Kernels').
#
# Run as `python3 -c THIS` inside the session's sandbox. The protocol is JSON, one object per
# line (json.dumps never writes a raw newline):
#   server -> kernel, on fd 0:  {"op": "cell", "id": N, "code": "..."}  |  {"op": "interrupt", "id": N}
#   kernel -> server, on fd 1:  {"op": "ready"} once, then per cell
#       {"op": "done", "id": N, "status": "ok"|"error"|"interrupted", "stdout": "...", "stderr": "...",
#        "result": {"text/plain": ..., "text/html": ..., "image/png": ...} | null,
#        "display": [{"image/png": ...}, ...], "error": {"ename", "evalue", "traceback"} | null}
# At start the two protocol fds are moved to fresh non-inheritable fds; fd 0 becomes /dev/null and
# fd 1 a copy of fd 2 (the stderr pipe, which the server adds to the cell's stderr): what a child
# process or os.write(1) prints cannot reach the protocol. sys.stdout and sys.stderr are captured
# per cell. The protocol fds stay reachable to a cell that looks for them (os.write on the fd):
# a cell can forge its own session's results, nothing else.
def _aj():
    import ast
    import base64
    import io
    import json
    import linecache
    import os
    import queue
    import signal
    import sys
    import threading
    import traceback

    pin = os.dup(0)
    pout = os.dup(1)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    os.environ.setdefault("MPLBACKEND", "Agg")
    cap = 1 << 20
    ns = sys.modules["__main__"].__dict__
    ns.pop("_aj", None)
    main_ident = threading.get_ident()
    cells = queue.Queue()
    state = {"cur": None}
    lock = threading.Lock()

    def send(obj):
        data = (json.dumps(obj) + "\n").encode()
        while data:
            n = os.write(pout, data)
            data = data[n:]

    def reader():
        f = os.fdopen(pin, "rb", buffering=0)
        buf = b""
        while True:
            chunk = f.read(65536)
            if not chunk:
                os._exit(0)  # the server went: nothing to answer to
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("op") == "interrupt":
                    with lock:
                        if state["cur"] == msg.get("id"):
                            signal.pthread_kill(main_ident, signal.SIGINT)
                else:
                    cells.put(msg)

    class Capture(io.TextIOBase):
        def __init__(self):
            self.parts = []
            self.n = 0
            self.cut = False

        def writable(self):
            return True

        def write(self, s):
            if not isinstance(s, str):
                raise TypeError("write() argument must be str, not %s" % type(s).__name__)
            if self.n < cap:
                self.parts.append(s[: cap - self.n])
                self.cut = self.cut or len(s) > cap - self.n
                self.n += min(len(s), cap - self.n)
            else:
                self.cut = True
            return len(s)

        def text(self):
            return "".join(self.parts) + ("\n[output truncated at %d characters]\n" % cap if self.cut else "")

    def figures():
        plt = sys.modules.get("matplotlib.pyplot")
        out = []
        if plt is None:
            return out
        try:
            for num in plt.get_fignums():
                b = io.BytesIO()
                plt.figure(num).savefig(b, format="png")
                out.append(base64.b64encode(b.getvalue()).decode())
            plt.close("all")
        except Exception as e:  # a broken figure is the cell's own problem
            print("figure: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return out

    def rich(value):
        r = {"text/plain": repr(value)}
        if not isinstance(value, type):
            for meth, mime in (("_repr_html_", "text/html"), ("_repr_png_", "image/png")):
                f = getattr(value, meth, None)
                if callable(f):
                    try:
                        v = f()
                    except Exception:
                        v = None
                    if isinstance(v, bytes):
                        v = base64.b64encode(v).decode()
                    if isinstance(v, str):
                        r[mime] = v
        return r

    def run(n, code):
        name = "<cell-%d>" % n
        out, err = Capture(), Capture()
        res = {"op": "done", "id": n, "status": "ok", "result": None, "error": None, "display": []}
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        sys.stdout, sys.stderr, sys.stdin = out, err, io.StringIO("")
        try:
            try:
                with lock:
                    state["cur"] = n
                tree = ast.parse(code, name, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, name, "exec"), ns)
                if last is not None:
                    value = eval(compile(last, name, "eval"), ns)
                    if value is not None:
                        ns["_"] = value
                        res["result"] = rich(value)
            finally:
                with lock:
                    state["cur"] = None
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt, SystemExit: the kernel goes on)
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
                tb = tb.tb_next
            res["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "error"
            res["error"] = {"ename": type(e).__name__, "evalue": str(e),
                            "traceback": "".join(traceback.format_exception(type(e), e, tb))}
        imgs = figures()
        res["display"] = [{"image/png": i} for i in imgs]
        if imgs:
            if res["result"] is None:
                res["result"] = {}
            res["result"]["image/png"] = imgs[-1]
        try:
            sys.stdout.flush()
        except Exception:
            pass
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        res["stdout"], res["stderr"] = out.text(), err.text()
        send(res)

    threading.Thread(target=reader, name="agentjail-kernel", daemon=True).start()
    send({"op": "ready", "python": sys.version.split()[0]})
    while True:
        msg = cells.get()
        try:
            run(int(msg["id"]), str(msg["code"]))
        except KeyboardInterrupt:
            # A SIGINT that came between cells (after the cell's own end): the reply was sent.
            pass


_aj()
