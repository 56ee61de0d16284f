"""Test harness for agentjail-egress (tests/integration/test_egress_proxy.py,
bench/egress.py).

Net: two network namespaces the harness creates (root only), joined by a
veth pair, nothing else:
  proxy ns     lo, vA 11.1.1.1/24 2a00:11::1/64    the proxy and the test resolver
  upstream ns  vB 11.1.1.2/24, 11.1.1.3, 10.0.0.1, 169.254.169.254,
               2a00:11::2/64, fd00:ec2::254         HTTP/HTTPS servers, "traps"
The 11.1.1.x addresses stand in for public ones: they exist only inside
these namespaces. The proxy's own address (11.1.1.1) is one the deny
floor must refuse. Trap addresses (10.0.0.1, 169.254.169.254,
fd00:ec2::254) are reachable from the proxy's namespace, so a refusal is
the proxy's doing, not a missing route.

Proxy: started directly with the contract's fds (config pipe, a unix
listener, events pipe, control pipe, CA pipe); a relay thread gives curl
and urllib a TCP port on the test's own loopback that carries each
connection to the unix socket, as the in-sandbox relay does.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def egress_bin():
    aj = os.environ.get("AJ_BIN", os.path.join(ROOT, "build", "agentjail"))
    return os.path.join(os.path.dirname(os.path.abspath(aj)), "agentjail-egress")


def sh(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


UP_HTTP = ["11.1.1.2:80", "11.1.1.2:8080", "11.1.1.3:80", "10.0.0.1:80", "169.254.169.254:80",
           "[fd00:ec2::254]:80", "[2a00:11::2]:80"]
UP_HTTPS = ["11.1.1.2:443"]
TRAPS = {"10.0.0.1:80", "169.254.169.254:80", "fd00:ec2::254:80"}

ZONE = {
    "public.test": {"A": ["11.1.1.2"]},
    "a.public.test": {"A": ["11.1.1.2"]},
    "x.public.test": {"A": ["11.1.1.2"]},
    "other.test": {"A": ["11.1.1.3"]},
    "nonbroker.test": {"A": ["11.1.1.3"]},
    "api.brokered.test": {"A": ["11.1.1.2"]},
    "bad.brokered.test": {"A": ["11.1.1.2"]},
    "v6.test": {"AAAA": ["2a00:11::2"]},
    "loop.test": {"A": ["127.0.0.1"]},
    "ten.test": {"A": ["10.0.0.1"]},
    "meta.test": {"A": ["169.254.169.254"]},
    "ula.test": {"AAAA": ["fd00:ec2::254"]},
    "mapped.test": {"AAAA": ["::ffff:10.0.0.1"]},
    "nat64.test": {"AAAA": ["64:ff9b::a00:1"]},
    "own.test": {"A": ["11.1.1.1"]},
    "mixed.test": {"A": ["11.1.1.2", "10.0.0.1"]},
    "rebind.test": {"A_sequence": [["11.1.1.2"], ["10.0.0.1"]]},
    "twoaddr.test": {"A": ["11.1.1.3", "11.1.1.2"]},   # :8080 refused on .3, served on .2
    "refused.test": {"A": ["11.1.1.3"]},
}


class Env:
    """The namespaces, certificates, resolver and upstream servers."""

    def __init__(self):
        tag = "%d%04d" % (os.getpid() % 100000, int(time.time() * 1000) % 10000)
        self.ns_p = "ajeg-%s-p" % tag
        self.ns_u = "ajeg-%s-u" % tag
        self.dir = tempfile.mkdtemp(prefix="ajeg-")
        os.chmod(self.dir, 0o755)
        self.procs = []
        try:
            self._net()
            self._certs()
            self._servers()
        except BaseException:
            self.close()
            raise

    def _net(self):
        sh("ip", "netns", "add", self.ns_p)
        sh("ip", "netns", "add", self.ns_u)
        sh("ip", "link", "add", "vA", "netns", self.ns_p, "type", "veth", "peer", "name", "vB",
           "netns", self.ns_u)
        p, u = self.ns_p, self.ns_u
        for ns in (p, u):
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "addr", "add", "11.1.1.1/24", "dev", "vA", ns=p)
        sh("ip", "-6", "addr", "add", "2a00:11::1/64", "dev", "vA", "nodad", ns=p)
        sh("ip", "link", "set", "vA", "up", ns=p)
        for a in ("11.1.1.2/24", "11.1.1.3/32", "10.0.0.1/32", "169.254.169.254/32"):
            sh("ip", "addr", "add", a, "dev", "vB", ns=u)
        for a in ("2a00:11::2/64", "fd00:ec2::254/128"):
            sh("ip", "-6", "addr", "add", a, "dev", "vB", "nodad", ns=u)
        sh("ip", "link", "set", "vB", "up", ns=u)
        sh("ip", "route", "add", "10.0.0.0/8", "dev", "vA", ns=p)
        sh("ip", "route", "add", "169.254.0.0/16", "dev", "vA", ns=p)
        sh("ip", "-6", "route", "add", "fd00::/8", "dev", "vA", ns=p)
        sh("ip", "-6", "route", "add", "2a00:11::1/128", "dev", "vB", ns=u)

    def _certs(self):
        d = self.dir
        ossl = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
        ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2", "-subj", "/CN=egress test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", d + "/srv.key", "-out", d + "/srv.csr", "-subj", "/CN=public.test")
        with open(d + "/ext.cnf", "w") as f:
            f.write("subjectAltName=DNS:public.test,DNS:api.brokered.test,DNS:a.public.test\n"
                    "extendedKeyUsage=serverAuth\n")
        ossl("x509", "-req", "-in", d + "/srv.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
             "-CAcreateserial", "-out", d + "/srv.pem", "-days", "2", "-extfile", d + "/ext.cnf")
        self.ca_pem_path = d + "/ca.pem"
        self.ca_pem = open(self.ca_pem_path).read()

    def _spawn_ready(self, ns, args):
        proc = subprocess.Popen(["ip", "netns", "exec", ns] + args, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("%s did not start: %s %s" % (args[1], line, proc.stderr.read()))
        return proc

    def _servers(self):
        self.dns_log = self.dir + "/dns.log"
        self.up_log = self.dir + "/upstream.log"
        with open(self.dir + "/zone.json", "w") as f:
            json.dump(ZONE, f)
        open(self.dns_log, "w").close()
        open(self.up_log, "w").close()
        self._spawn_ready(self.ns_p, [sys.executable, os.path.join(HERE, "dnsserver.py"), "127.0.0.1", "5353",
                                      self.dir + "/zone.json", self.dns_log])
        self.www = self.dir + "/www"
        os.makedirs(self.www + "/git")
        cfg = {"log": self.up_log, "http": UP_HTTP, "https": UP_HTTPS, "www": self.www,
               "cert": self.dir + "/srv.pem", "key": self.dir + "/srv.key"}
        self._spawn_ready(self.ns_u, [sys.executable, os.path.join(HERE, "upstream.py"), json.dumps(cfg)])

    def dns_queries(self):
        with open(self.dns_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def upstream_requests(self):
        with open(self.up_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def close(self):
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        for ns in (getattr(self, "ns_p", None), getattr(self, "ns_u", None)):
            if ns:
                sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def _pipe_thread(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Proxy:
    """One agentjail-egress, started with the contract's fds."""

    # Used when tcp_port is given: the listening socket is made inside the
    # proxy's namespace (127.0.0.1:PORT there), then the proxy is exec'd
    # with it, so that clients in that namespace (bench/egress.py) reach the
    # proxy with no relay in between.
    TCP_WRAP = ("import os, socket, sys\n"
                "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(512); os.set_inheritable(s.fileno(), True)\n"
                "a = [str(s.fileno()) if x == 'LISTEN' else x for x in sys.argv[2:]]\n"
                "os.execv(a[0], a)\n")

    def __init__(self, env, config, relay=True, tcp_port=None, nofile=None, handoff=False):
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="ajeg-px-")
        self.sock_path = self.dir + "/egress.sock"
        self.events = []
        self.cond = threading.Condition()
        self.closed = False
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(self.sock_path)
        lsock.listen(512)
        cfg_r, cfg_w = os.pipe()
        ev_r, ev_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        ca_r, ca_w = os.pipe()
        cfg = dict(config)
        cfg.setdefault("run_id", "test")
        cfg.setdefault("resolver", "127.0.0.1:5353")
        os.write(cfg_w, json.dumps(cfg).encode())
        os.close(cfg_w)
        child = [cfg_r, lsock.fileno(), ev_w, ctl_r, ca_w]
        args = [egress_bin(), "--config-fd", str(cfg_r), "--listen-fd", str(lsock.fileno()),
                "--events-fd", str(ev_w), "--control-fd", str(ctl_r), "--ca-out-fd", str(ca_w)]
        self.handoff = None
        if handoff:  # --handoff-fd: the test hands connected sockets over as agentjail's relay does
            self.handoff, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            child.append(theirs.fileno())
            args += ["--handoff-fd", str(theirs.fileno())]
            theirs_keep = theirs
        if tcp_port:
            args[4] = "LISTEN"
            args = [sys.executable, "-c", self.TCP_WRAP, str(tcp_port)] + args
            relay = False
        cmd = ["ip", "netns", "exec", env.ns_p] + args
        self.stderr_path = self.dir + "/stderr"
        with open(self.stderr_path, "w") as errf:
            def limit():
                if nofile:
                    import resource
                    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            self.proc = subprocess.Popen(cmd, pass_fds=child, stderr=errf, stdin=subprocess.DEVNULL,
                                         preexec_fn=limit if nofile else None)
        if handoff:
            theirs_keep.close()
            child.remove(child[-1])
        for fd in child:
            os.close(fd)
        lsock.detach()
        self.ctl_w = ctl_w
        with os.fdopen(ca_r, "rb") as f:
            self.ca_pem = f.read().decode()
        self.ev_file = os.fdopen(ev_r, "rb")
        self.ev_thread = threading.Thread(target=self._read_events, daemon=True)
        self.ev_thread.start()
        self.port = None
        if relay:
            self.rsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.rsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.rsock.bind(("127.0.0.1", 0))
            self.rsock.listen(512)
            self.port = self.rsock.getsockname()[1]
            threading.Thread(target=self._relay, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def _read_events(self):
        for line in self.ev_file:
            ev = json.loads(line)
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _relay(self):
        while True:
            try:
                c, _ = self.rsock.accept()
            except OSError:
                return
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                u.connect(self.sock_path)
            except OSError:
                c.close()
                u.close()
                continue
            def run(c=c, u=u):
                t = threading.Thread(target=_pipe_thread, args=(u, c), daemon=True)
                t.start()
                _pipe_thread(c, u)
                t.join()
                c.close()
                u.close()
            threading.Thread(target=run, daemon=True).start()

    def connect(self):
        """A raw connection to the proxy's unix socket (what the relay carries)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock_path)
        return s

    def wait_event(self, pred, timeout=20, start=0):
        """The first event (from index start) matching pred; fails after timeout
        (a guard against a hang, not a timing assertion)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise AssertionError("no matching event; events: %r" % self.events[-20:])
                self.cond.wait(left)

    def control(self, line):
        os.write(self.ctl_w, line.encode() + b"\n")

    def stderr(self):
        if getattr(self, "_stderr", None) is not None:
            return self._stderr
        with open(self.stderr_path) as f:
            return f.read()

    def pid(self):
        """The proxy's own pid (ip netns exec execs it: the same process)."""
        return self.proc.pid

    def stop(self):
        if self.port:
            self.rsock.close()
        if self.ctl_w is not None:
            os.close(self.ctl_w)
            self.ctl_w = None
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.ev_thread.join(10)
        self.ev_file.close()
        self._stderr = self.stderr()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def raw_request(sock, data, read=True, timeout=20):
    """Send bytes; read until the peer closes; return the bytes read."""
    sock.settimeout(timeout)
    if data:
        sock.sendall(data)
    if not read:
        return b""
    out = b""
    while True:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        out += d
    return out
