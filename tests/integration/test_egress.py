"""network.mode "proxy", the sandbox side (docs/network.md): the run's egress
proxy is started and ended by the supervisor, the sandbox reaches the
network only through the relay on 127.0.0.1:PORT, a program that ignores
the proxy variables gets no route and no resolver, brokered secrets stay
outside (environment, files, every process's memory), and brokering stops
at the first high-severity escape or canary event.

The proxy is the real agentjail-egress beside AJ_BIN (src/egress/; its own
tests are test_egress_proxy.py), or AJ_EGRESS=PATH. Upstreams are servers
this test starts on the host's loopback (which the sandbox's own network
namespace cannot reach directly: the negative controls; the policy opts
127.0.0.0/8 back in past the proxy's deny floor) and, as root, in a network
namespace the test makes; names resolve through a test resolver.
"""
import glob
import json
import shlex
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import (AJ_BIN, AJ_HELPERS, CG_LIMITS, IS_ROOT, _ours, alive, comm, must_skip, not_foreign, run_aj,
                      root_only, wait_for, write)

REAL = os.environ.get("AJ_EGRESS") or os.path.join(os.path.dirname(AJ_BIN), "agentjail-egress")


def egress_env(extra=None):
    if not os.access(REAL, os.X_OK):
        must_skip("agentjail-egress not built at %s" % REAL)
    env = dict(os.environ)
    env.pop("AGENTJAIL_EGRESS", None)
    if os.environ.get("AJ_EGRESS"):  # another build's proxy, by hand
        env["AGENTJAIL_EGRESS"] = REAL
    env.update(extra or {})
    return env


# ---- servers ------------------------------------------------------------------

class Upstream:
    """An HTTP server on the host's 127.0.0.1 that records what it got."""

    def __init__(self, bind="127.0.0.1"):
        seen = self.seen = []

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                             "host": self.headers.get("Host")})
                body = b"upstream says hi\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer((bind, 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Resolver:
    """A DNS server on the host's 127.0.0.1 answering every A question with
    127.0.0.1 (and AAAA with nothing): the names the tests use exist only
    here, asked by the proxy, never from inside the sandbox."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.asked = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                q, peer = self.sock.recvfrom(512)
            except OSError:
                return
            if len(q) < 12:
                continue
            i, labels = 12, []
            while i < len(q) and q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode("latin-1"))
                i += 1 + q[i]
            qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
            self.asked.append(".".join(labels))
            question = q[12:i + 5]
            ans = b""
            if qtype == 1:
                ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton("127.0.0.1")
            hdr = q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if ans else 0, 0, 0)
            self.sock.sendto(hdr + question + ans, peer)

    def close(self):
        self.sock.close()


@pytest.fixture
def up():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture
def dns():
    r = Resolver()
    yield r
    r.close()


def proxy_args(up, dns, *more):
    """--network proxy allowing up.test at the upstream's port; the host's
    loopback opted back in past the deny floor (the upstream lives there),
    names resolved by the test's resolver."""
    return ["--network", "proxy", "--allow", "up.test:%d" % up.port, "--allow-range", "127.0.0.0/8",
            "--resolver", "127.0.0.1:%d" % dns.port] + list(more)


def events_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def leftovers():
    """Egress processes of this test's runs (its descendants, or orphans),
    and socket directories."""
    procs = [int(p) for p in os.listdir("/proc") if p.isdigit() and
             (comm(int(p)) == "agentjail-relay" or _is_proxy(int(p))) and _ours(int(p))]
    return sorted(procs), set(glob.glob("/tmp/agentjail-egress-*"))


def _is_proxy(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    # This build's, not another checkout's on the same machine.
    try:
        exe = os.path.realpath("/proc/%d/exe" % pid)
    except OSError:
        return False
    return b"--config-fd" in argv and argv[0] == b"agentjail-egress" and exe == os.path.realpath(REAL)


@pytest.fixture(autouse=True)
def no_egress_leftovers():
    procs0, before = leftovers()
    new = lambda: [p for p in leftovers()[0] if p not in procs0]  # noqa: E731
    yield
    wait_for(lambda: not new(), 5)
    dirs = not_foreign(leftovers()[1] - before)  # another test run's aside
    assert not new() and not dirs, "egress processes or directories left behind: %r %r" % (new(), dirs)


CURL = ["curl", "-sS", "--max-time", "20", "-w", " code=%{http_code}\n"]


# ---- through the proxy, and only through it --------------------------------------

def test_allowed_host_through_the_proxy_and_others_refused(up, dns, tmp_path):
    ev = str(tmp_path / "ev.jsonl")
    r = run_aj(proxy_args(up, dns, "--events", ev),
               ["/bin/sh", "-c", "%s http://up.test:%d/a; %s http://other.test:%d/b; true" %
                (shlex.join(CURL), up.port, shlex.join(CURL), up.port)], env=egress_env())
    assert r.returncode == 0, r
    assert "upstream says hi" in r.stdout and "code=200" in r.stdout, r
    assert "code=403" in r.stdout, r
    assert [s["path"] for s in up.seen] == ["/a"], up.seen
    evs = events_of(ev)
    allowed = [e for e in evs if e["type"] == "net_allowed"]
    denied = [e for e in evs if e["type"] == "net_denied"]
    assert allowed and allowed[0]["host"] == "up.test" and allowed[0]["port"] == up.port, evs
    assert denied and denied[0]["host"] == "other.test", evs
    assert all(e["sandbox_id"] == r.result["sandbox_id"] for e in evs)
    net = r.result["network"]
    assert net["mode"] == "proxy" and net["allowed"] >= 1 and net["denied"] >= 1, r.result
    assert r.result["events"]["net_allowed"] == net["allowed"], r.result


IGNORE_PROXY = r"""
import errno, json, os, socket, sys, urllib.request
out = {}
def tcp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
out["tcp_host_upstream"] = tcp("127.0.0.1", int(sys.argv[1]))
out["tcp_outside"] = tcp(sys.argv[2], int(sys.argv[3]))
def udp(host, port):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x02up\x04test\x00\x00\x01\x00\x01",
                 (host, port))
        u.settimeout(2)
        u.recvfrom(512)
        return "answered"
    except OSError as e:
        return errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
    finally:
        u.close()
# The test's resolver, at the address the host reaches it (its 127.0.0.1:
# the sandbox's own lo, where nothing answers), and a resolver's port at
# the host's address (no route).
out["udp_dns_lo"] = udp("127.0.0.1", int(sys.argv[5]))
out["udp_dns_out"] = udp(sys.argv[4], 53)
try:
    socket.getaddrinfo("up.test", 80)
    out["getaddrinfo"] = "resolved"
except socket.gaierror as e:
    out["getaddrinfo"] = "gaierror"
out["resolv_conf"] = open("/etc/resolv.conf").read()
out["interfaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None
# The positive control, same run: through the proxy it works.
out["via_proxy"] = urllib.request.urlopen("http://up.test:%s/ok" % sys.argv[1], timeout=20).read().decode()
print(json.dumps(out))
"""


def _host_addr():
    """An address of this host outside loopback (the default route's)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        return s.getsockname()[0]
    except OSError:
        return "192.0.2.1"
    finally:
        s.close()


def test_a_program_ignoring_the_proxy_gets_no_route(up, dns):
    host_ip = _host_addr()
    r = run_aj(proxy_args(up, dns), ["python3", "-c", IGNORE_PROXY, str(up.port), host_ip, str(up.port),
                                      host_ip, str(dns.port)], env=egress_env())
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    # The host's upstream is reachable from the host (the test's own
    # request in the proxy proves it) but not from inside: its 127.0.0.1
    # is the sandbox's own lo.
    assert out["tcp_host_upstream"] == "ECONNREFUSED", out
    assert out["tcp_outside"] in ("ENETUNREACH", "EHOSTUNREACH"), out
    assert out["udp_dns_lo"] in ("ECONNREFUSED", "TimeoutError", "timeout"), out
    assert out["udp_dns_out"] == "ENETUNREACH", out
    assert out["getaddrinfo"] == "gaierror", out
    assert "nameserver" not in out["resolv_conf"], out
    assert out["via_proxy"] == "upstream says hi\n", out
    assert [s["path"] for s in up.seen] == ["/ok"], up.seen
    # The resolver was asked by the proxy only, for the allowed name (A and
    # AAAA); the sandbox's own getaddrinfo and raw query never reached it.
    assert {n.lower() for n in dns.asked} == {"up.test"} and len(dns.asked) <= 2, dns.asked  # (0x20 case mix)


@pytest.fixture
def test_netns():
    """As root: a network namespace with an upstream at 10.250.X.2, reached
    from the host over a veth pair."""
    root_only("creates a network namespace and a veth pair")
    tag = secrets.token_hex(3)
    ns, a, b = "ajeg" + tag, "ajega" + tag, "ajegb" + tag
    net = "10.250.%d" % (secrets.randbelow(200) + 10)

    def sh(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, timeout=20)
    srv = None
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns)
        sh("ip", "addr", "add", net + ".1/30", "dev", a)
        sh("ip", "link", "set", a, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", net + ".2/30", "dev", b)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        srv = subprocess.Popen(["ip", "netns", "exec", ns, "python3", "-m", "http.server", "8000", "--bind",
                                net + ".2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ready():
            try:
                socket.create_connection((net + ".2", 8000), timeout=1).close()
                return True
            except OSError:
                return False
        assert wait_for(ready, 10), "upstream in the test namespace did not start"
        yield net + ".2"
    finally:
        if srv:
            srv.kill()
            srv.wait()
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_raw_connect_to_an_upstream_in_a_test_netns_has_no_route(up, dns, test_netns):
    addr = test_netns
    # Control: the host reaches it.
    socket.create_connection((addr, 8000), timeout=5).close()
    code = ("import socket, errno\ns = socket.socket()\ns.settimeout(5)\n"
            "try:\n    s.connect(('%s', 8000)); print('connected')\n"
            "except OSError as e:\n    print(errno.errorcode.get(e.errno, str(e)))\n" % addr)
    r = run_aj(proxy_args(up, dns, "--allow", "%s:8000" % addr, "--allow-range", addr + "/32"),
               ["/bin/sh", "-c", "python3 -c \"$0\"; %s http://%s:8000/" % (shlex.join(CURL), addr), code],
               env=egress_env())
    assert r.returncode == 0, r
    first = r.stdout.splitlines()[0]
    assert first in ("ENETUNREACH", "EHOSTUNREACH"), r
    # Positive control, same run: the proxy, allowed, gets there.
    assert "code=200" in r.stdout, r


def test_the_variables_and_the_trust_bundle(up, dns):
    env = egress_env({"AJTEST_SECRET": "sk-" + secrets.token_hex(20)})
    r = run_aj(proxy_args(up, dns, "--proxy-port", "3999", "--secret",
                          "api,hosts=up.test,from=env:AJTEST_SECRET,env=API_KEY"),
               ["/bin/sh", "-c", "env; echo ---; grep -c 'BEGIN CERTIFICATE' /etc/agentjail/ca-bundle.pem; "
                "tail -n 30 /etc/agentjail/ca-bundle.pem | grep -c 'END CERTIFICATE'"], env=env)
    assert r.returncode == 0, r
    envs = dict(line.split("=", 1) for line in r.stdout.split("---")[0].splitlines() if "=" in line)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        assert envs[k] == "http://127.0.0.1:3999", (k, envs)
    assert envs["NO_PROXY"] == envs["no_proxy"] == "localhost,127.0.0.1,::1", envs
    assert "-Dhttps.proxyPort=3999" in envs["JAVA_TOOL_OPTIONS"], envs
    for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
              "PIP_CERT", "npm_config_cafile"):
        assert envs[k] == "/etc/agentjail/ca-bundle.pem", (k, envs)
    # The system's bundle plus the run's CA.
    n_certs = int(r.stdout.split("---")[1].split()[0])
    with open("/etc/ssl/certs/ca-certificates.crt") as f:
        assert n_certs == f.read().count("BEGIN CERTIFICATE") + 1, r.stdout
    # The placeholder: same prefix, same length, not the value.
    ph, real = envs["API_KEY"], env["AJTEST_SECRET"]
    assert ph.startswith("sk-") and len(ph) == len(real) and ph != real, (ph, real)
    # Through the relay on the policy's port.
    r2 = run_aj(proxy_args(up, dns, "--proxy-port", "3999"), CURL + ["http://up.test:%d/p" % up.port],
                env=egress_env())
    assert "code=200" in r2.stdout, r2


def test_without_secrets_no_ca_variables_and_other_modes_unchanged(up, dns):
    r = run_aj(proxy_args(up, dns), ["/bin/sh", "-c", "env; ls /etc/agentjail 2>&1; true"], env=egress_env())
    assert "HTTP_PROXY=http://127.0.0.1:3128" in r.stdout and "SSL_CERT_FILE" not in r.stdout, r
    # loopback (the default) has none of it.
    r = run_aj([], ["/bin/sh", "-c", "env; cat /etc/resolv.conf"])
    assert "PROXY" not in r.stdout and "no DNS inside agentjail" in r.stdout, r
    assert "network" not in r.result, r.result


# ---- secrets ---------------------------------------------------------------------

SCAN = r"""
import os, sys, time
needle = os.environ["NEEDLE_HEX"]
"""


def _scan_mem(pid, needle):
    """Whether needle is in pid's memory (every readable mapping)."""
    found = False
    try:
        with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if "r" not in line.split()[1] or hi - lo > (1 << 30):
                    continue
                try:
                    mem.seek(lo)
                    if needle in mem.read(hi - lo):
                        found = True
                except OSError:
                    continue
    except OSError:
        return None
    return found


def _sanitized():
    """Whether AJ_BIN is a sanitizer build: its runtime keeps a copy of the
    process's environment (read from /proc/self/environ at start) that
    init, a clone of the supervisor, inherits and cannot know to blank."""
    try:
        with open(os.path.join(os.path.dirname(AJ_BIN), "meson-info", "intro-buildoptions.json")) as f:
            opts = json.load(f)
    except OSError:
        return False
    return any(o["name"] == "b_sanitize" and o["value"] not in ("none", "") for o in opts)


def _sandbox_pids(init_pid):
    """init and every process of its pid namespace."""
    try:
        ns = os.readlink("/proc/%d/ns/pid_for_children" % init_pid)
    except OSError:
        ns = None
    out = [init_pid]
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != init_pid:
            try:
                if ns and os.readlink("/proc/%s/ns/pid" % p) == ns:
                    out.append(int(p))
            except OSError:
                pass
    return out


# The value comes in two halves and is looked for as one without ever
# being put together: the payload's own memory must not hold it either.
FILE_SCAN = r"""
import os, sys, stat
h1, h2 = sys.argv[1].encode(), sys.argv[2].encode()
def has(data):
    i = data.find(h1)
    while i >= 0:
        if data.startswith(h2, i + len(h1)):
            return True
        i = data.find(h1, i + 1)
    return False
hits, n = [], 0
skip = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys", "/proc/sys", "/proc/kcore")
for top in ("/", "/proc/self", "/proc/1"):
    for d, dirs, files in os.walk(top):
        if top == "/" and (d.startswith(skip) or d.startswith("/proc")):
            dirs[:] = []
            continue
        for name in files:
            p = os.path.join(d, name)
            try:
                import stat
                if not stat.S_ISREG(os.stat(p).st_mode):
                    continue  # a pipe (fd 0) or a device would block or never end
                with open(p, "rb") as f:
                    data = f.read(1 << 22)
            except OSError:
                continue
            n += 1
            if has(data):
                hits.append(p)
print("scanned %d files; hits: %r" % (n, hits))
print("environ hit:", has(open("/proc/self/environ", "rb").read()))
"""


def test_the_secret_is_nowhere_inside(up, dns, tmp_path):
    real = "ghp_" + secrets.token_hex(18)
    secret_file = tmp_path / "token"
    secret_file.write_text(real + "\n")
    os.chmod(str(secret_file), 0o600)
    env = egress_env({"AJTEST_GH": real})
    flag = str(tmp_path / "go")
    ev = str(tmp_path / "ev.jsonl")
    # No decoys: the scan reads every file, and a decoy read would (rightly)
    # stop the brokering before the request it checks.
    pol = {"version": 1, "detection": {"decoys": False},
           "network": {"mode": "proxy", "allow": ["up.test:%d" % up.port], "allow_ranges": ["127.0.0.0/8"],
                       "resolver": "127.0.0.1:%d" % dns.port},
           "secrets": [{"id": "gh", "hosts": ["up.test"], "value_from": "env:AJTEST_GH", "env": "GITHUB_TOKEN",
                        "file": "/run/secrets/gh"},
                       {"id": "gh2", "hosts": ["up.test"], "value_from": "file:" + str(secret_file),
                        "header": "X-Token", "format": "{}", "env": "OTHER_TOKEN"}]}
    write(str(tmp_path / "p.json"), json.dumps(pol))
    script = (FILE_SCAN + "\nimport urllib.request\n"
              "req = urllib.request.Request('http://up.test:%d/brokered', headers={'Authorization': 'Bearer ' + "
              "os.environ['GITHUB_TOKEN']})\nprint(urllib.request.urlopen(req, timeout=20).read().decode())\n"
              "print(open('/run/secrets/gh').read().strip() == os.environ['GITHUB_TOKEN'])\n"
              "sys.stdout.flush()\nsys.stdin.read()  # alive until the host has scanned it\n" % up.port)
    proc = subprocess.Popen([AJ_BIN, "run", "--policy", str(tmp_path / "p.json"), "--events", ev, "--timeout",
                             "60", "--", "python3", "-c", script, real[:20], real[20:]], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The sandbox's init: the supervisor's child in a new pid namespace.
        def init_pid():
            for p in os.listdir("/proc"):
                if p.isdigit() and comm(int(p)) == "agentjail-init":
                    try:
                        with open("/proc/%s/stat" % p) as f:
                            if int(f.read().rsplit(")", 1)[1].split()[1]) == proc.pid:
                                return int(p)
                    except OSError:
                        pass
            return None
        pid = wait_for(init_pid, 30)
        assert pid, "no sandbox init found"
        # Wait for the payload to have used the secret (its upstream request).
        assert wait_for(lambda: up.seen, 30), "the brokered request never arrived"
        needle = real.encode()
        if IS_ROOT:
            pids = wait_for(lambda: len(_sandbox_pids(pid)) >= 2 and _sandbox_pids(pid), 10)
            assert pids and len(pids) >= 2, pids
            for p in pids:
                if p == pid and _sanitized() and "env:" in pol["secrets"][0]["value_from"]:
                    continue  # the sanitizer runtime's copy of the environment (the release pass checks init)
                assert _scan_mem(p, needle) is False, "the secret is in sandbox process %d's memory" % p
            # Control: the same scan finds it where it is (the proxy's memory,
            # the supervisor's environment).
            proxies = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_proxy(int(p))]
            assert any(_scan_mem(p, needle) for p in proxies), "the scan found the value nowhere: no control"
        # An env: source is consumed: gone from the supervisor's environment
        # (the bytes /proc/PID/environ shows wiped, the variable unset);
        # the file: one's value was never in it.
        with open("/proc/%d/environ" % proc.pid, "rb") as f:
            environ = f.read()
        assert needle not in environ, "the supervisor's environment still holds the secret"
        assert b"AJTEST_GH=" in environ  # control: the scan reads the block the variable was in
    finally:
        out, err = proc.communicate(input="", timeout=60)
    assert proc.returncode == 0, (out, err)
    assert "hits: []" in out and "environ hit: False" in out, (out, err)
    assert int(out.split("scanned ")[1].split()[0]) > 20, out
    assert "upstream says hi" in out, (out, err)
    assert "\nTrue\n" in out, "the placeholder file and variable differ: %r" % out
    # The upstream got the real value, in the named header, formatted.
    assert up.seen[0]["auth"] == "Bearer " + real, up.seen
    # Nothing the run wrote holds it.
    with open(ev) as f:
        text = f.read()
    assert real not in text and "secret_used" in text, text
    assert real not in out + err


def test_revocation_after_an_escape_attempt(up, dns, tmp_path):
    real = "sk-ant-" + secrets.token_hex(24)
    ev, alert_out = str(tmp_path / "ev.jsonl"), str(tmp_path / "alert.jsonl")
    req = ("python3 -c \"import os, urllib.request as u; "
           "r = u.Request('http://up.test:%d/' + os.environ['N'], headers={'Authorization': 'Bearer ' + "
           "os.environ['ANTHROPIC_API_KEY']}); print(u.urlopen(r, timeout=20).read().decode().strip())\"" % up.port)
    script = "N=before %s; cat /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null 2>&1; " \
             "N=after %s" % (req, req)
    r = run_aj(proxy_args(up, dns, "--events", ev, "--alert-cmd", "cat > %s" % alert_out, "--secret",
                          "anthropic,hosts=up.test,from=env:AJTEST_KEY,env=ANTHROPIC_API_KEY"),
               ["/bin/sh", "-c", script], env=egress_env({"AJTEST_KEY": real}))
    assert r.returncode == 0, r
    seen = {s["path"]: s["auth"] for s in up.seen}
    # Before the canary: the real value went out. After: the placeholder,
    # unreplaced.
    assert seen["/before"] == "Bearer " + real, seen
    assert seen["/after"].startswith("Bearer sk-ant-") and seen["/after"] != "Bearer " + real, seen
    evs = events_of(ev)
    types = [e["type"] for e in evs]
    assert "canary" in types and "credentials_suspended" in types, types
    assert types.index("credentials_suspended") > types.index("canary"), types
    cs = [e for e in evs if e["type"] == "credentials_suspended"][0]
    assert cs["secrets"] == ["anthropic"] and cs["severity"] == "high", cs
    assert r.result["network"]["credentials_suspended"] is True, r.result
    # The alert hook got the first high event and the suspension.
    assert wait_for(lambda: os.path.exists(alert_out) and open(alert_out).read().count("\n") >= 2, 10)
    lines = [json.loads(x) for x in open(alert_out).read().splitlines()]
    assert lines[0]["type"] == "canary" and lines[1]["type"] == "credentials_suspended", lines
    for path in (ev, alert_out):
        assert real not in open(path).read()


def test_on_escape_kill_still_ends_the_run(up, dns, tmp_path):
    ev = str(tmp_path / "ev.jsonl")
    r = run_aj(proxy_args(up, dns, "--events", ev, "--on-escape", "kill", "--secret",
                          "k,hosts=up.test,from=env:AJTEST_KEY,env=K"),
               ["/bin/sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token; sleep 30"],
               env=egress_env({"AJTEST_KEY": "xoxb-" + secrets.token_hex(16)}))
    assert r.result["status"] == "escape_attempt", r
    assert "credentials_suspended" in [e["type"] for e in events_of(ev)]


# ---- failures and ends -------------------------------------------------------------

def test_a_missing_or_failing_proxy_is_a_setup_error(up, dns, hostdir):
    r = run_aj(proxy_args(up, dns), ["true"], env=egress_env({"AGENTJAIL_EGRESS": "/nonexistent/agentjail-egress"}))
    assert r.returncode == 125 and "agentjail-egress at /nonexistent" in r.stderr, r
    assert r.result["status"] == "setup_error", r.result
    # (hostdir: the egress uid, root mode, must reach it)
    bad = os.path.join(hostdir, "bad-egress")
    write(bad, "#!/bin/sh\necho 'config: bad key \"x\"' >&2\nexit 2\n", 0o755)
    r = run_aj(proxy_args(up, dns), ["true"], env=egress_env({"AGENTJAIL_EGRESS": bad}))
    assert r.returncode == 125 and "exited at start (status 2): config: bad key" in r.stderr, r
    # A secret whose source is missing: refused before anything starts.
    r = run_aj(proxy_args(up, dns, "--secret", "s,hosts=up.test,from=env:AJTEST_UNSET_XYZ,env=S"), ["true"],
               env=egress_env())
    assert r.returncode == 125 and "AJTEST_UNSET_XYZ is not set" in r.stderr, r


def test_a_killed_supervisor_leaves_no_proxy_or_relay(up, dns):
    earlier, dirs_before = leftovers()
    proc = subprocess.Popen([AJ_BIN, "run"] + proxy_args(up, dns) + ["--", "sleep", "60"], env=egress_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(comm(int(p)) == "agentjail-relay" and _child_of(int(p), proc.pid)
                                    for p in os.listdir("/proc") if p.isdigit()), 20), "no relay started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The death signal takes both (the autouse check then finds nothing left).
    assert wait_for(lambda: not [p for p in os.listdir("/proc") if p.isdigit() and
                                 (comm(int(p)) == "agentjail-relay" or _is_proxy(int(p)))
                                 and _orphan(int(p)) and int(p) not in earlier], 10)
    # Its socket directory outlived it (nothing could remove it) ...
    mine = [d for d in glob.glob("/tmp/agentjail-egress-%d.*" % proc.pid)]
    assert len(mine) == 1 and os.path.exists(mine[0] + "/proxy.sock"), mine
    # ... and the next proxy-mode run reaps it: its owner is gone.
    r = run_aj(proxy_args(up, dns), ["true"], env=egress_env())
    assert r.returncode == 0, r
    assert not os.path.lexists(mine[0]), "the dead supervisor's socket directory is still there"


def test_a_run_killed_whole_ends_its_proxy_quietly(up, dns, tmp_path):
    """The proxy and the relay are in the run's cgroup: a limit kills them
    with the payload. That end is expected: the run's events say which
    limit, not "the egress proxy exited during the run". (The output limit:
    reached when the payload says so, after its request, whatever the
    machine's speed.)"""
    ev = str(tmp_path / "ev.jsonl")
    r = run_aj(proxy_args(up, dns, "--output-limit", "64K", "--events", ev),
               ["python3", "-c", "import sys, time, urllib.request as u\n"
                "print(u.urlopen('http://up.test:%d/before', timeout=20).read().decode(), flush=True)\n"
                "sys.stdout.write('x' * (1 << 20)); sys.stdout.flush(); time.sleep(60)" % up.port],
               env=egress_env())
    assert r.result["status"] == "output_limit", r
    evs = events_of(ev)
    assert [e["type"] for e in evs if e["type"] in ("limit", "error")] == ["limit"], evs
    assert "upstream says hi" in r.stdout and [s["path"] for s in up.seen] == ["/before"], r  # it had a proxy


def _pidns():
    return os.stat("/proc/self/ns/pid").st_ino


def _starttime(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_stale_socket_directories_reaped_only_when_their_owner_is_gone(up, dns):
    """The reaper's rules, on directories this test makes with the names
    and contents a run's have: the owner named in the name gone and no lock
    held: removed; its lock held (a process still has it), a live owner,
    another pid namespace's: left alone."""
    import fcntl
    gone = subprocess.Popen(["sleep", "60"])
    gone_start = _starttime(gone.pid)
    gone.kill()
    gone.wait()
    tag = secrets.token_hex(3)
    names = {
        "dead": "%d.%d.ns%d-%sA" % (gone.pid, gone_start, _pidns(), tag),
        "locked": "%d.%d.ns%d-%sB" % (gone.pid, gone_start, _pidns(), tag),
        "alive": "%d.%d.ns%d-%sC" % (os.getpid(), _starttime(os.getpid()), _pidns(), tag),
        "other_ns": "%d.%d.ns%d-%sD" % (gone.pid, gone_start, _pidns() + 1, tag),
    }
    paths = {k: "/tmp/agentjail-egress-" + v for k, v in names.items()}
    lock_fd = None
    try:
        for path in paths.values():
            os.mkdir(path, 0o700)
            os.mkdir(path + "/root")
            s = socket.socket(socket.AF_UNIX)
            s.bind(path + "/proxy.sock")
            s.close()
        lock_fd = os.open(paths["locked"], os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        r = run_aj(proxy_args(up, dns), ["true"], env=egress_env())
        assert r.returncode == 0, r
        assert not os.path.lexists(paths["dead"]), "a dead owner's directory was not reaped"
        for k in ("locked", "alive", "other_ns"):
            assert os.path.exists(paths[k] + "/proxy.sock"), "%s: reaped, and must not be" % k
        # The lock released, the same directory goes at the next start.
        os.close(lock_fd)
        lock_fd = None
        r = run_aj(proxy_args(up, dns), ["true"], env=egress_env())
        assert r.returncode == 0, r
        assert not os.path.lexists(paths["locked"])
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
        for path in paths.values():
            shutil.rmtree(path, ignore_errors=True)


def _cgroups(pid):
    """{hierarchy: path} of /proc/PID/cgroup (v1: by controllers; v2: "")."""
    with open("/proc/%d/cgroup" % pid) as f:
        return {line.split(":", 2)[1]: line.rstrip("\n").split(":", 2)[2] for line in f if line.count(":") >= 2}


def test_the_proxy_and_relay_are_in_the_runs_cgroup_and_own_no_directory_entry(up, dns):
    proc = subprocess.Popen([AJ_BIN, "run"] + proxy_args(up, dns) + ["--", "sh", "-c", "read x"], env=egress_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        kids = lambda: [int(p) for p in os.listdir("/proc") if p.isdigit() and _child_of(int(p), proc.pid)]  # noqa
        relay = wait_for(lambda: [p for p in kids() if comm(p) == "agentjail-relay"], 20)
        proxy = wait_for(lambda: [p for p in kids() if _is_proxy(p)], 20)
        init = wait_for(lambda: [p for p in kids() if comm(p) == "agentjail-init"], 20)
        assert relay and proxy and init, (relay, proxy, init)
        # The socket directory: the supervisor's, never the proxy's uid's.
        d = glob.glob("/tmp/agentjail-egress-%d.*" % proc.pid)
        assert len(d) == 1, d
        st = os.lstat(d[0])
        proxy_st = _status(proxy[0])
        if IS_ROOT:
            gid = int(proxy_st["Gid"].split()[0])
            assert st.st_uid == 0 and st.st_gid == gid and (st.st_mode & 0o7777) == 0o710, st
            uid = proxy_st["Uid"].split()[0]
            as_proxy = ["setpriv", "--reuid", uid, "--regid", str(gid), "--clear-groups"]
            # The proxy's uid cannot add (or swap) an entry there ...
            r = subprocess.run(as_proxy + ["ln", "-s", "/etc", d[0] + "/x"], capture_output=True, text=True,
                               timeout=20)
            assert r.returncode != 0 and "Permission denied" in r.stderr, r
            assert not os.path.lexists(d[0] + "/x")
            # ... and still reaches the socket (the relay's path to the proxy).
            r = subprocess.run(as_proxy + ["/usr/bin/python3", "-c", "import socket; s = socket.socket(socket.AF_UNIX); "
                                           "s.connect(%r); print('ok')" % (d[0] + "/proxy.sock")],
                               capture_output=True, text=True, timeout=20)
            assert r.stdout.strip() == "ok", r
        else:
            assert st.st_uid == os.getuid() and (st.st_mode & 0o7777) == 0o700, st
        if CG_LIMITS:
            # What the kernel says: the proxy and the relay are where the run is.
            run_cg = {h: c for h, c in _cgroups(init[0]).items() if "/agentjail/" in c}
            assert run_cg, "control: the sandbox's init is in no run cgroup: %r" % _cgroups(init[0])
            for pid in proxy + relay:
                mine = _cgroups(pid)
                assert {h: mine.get(h) for h in run_cg} == run_cg, (pid, mine, run_cg)
    finally:
        proc.communicate(input="\n", timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_warm_pool_runs_get_their_own_parked_proxy(up, dns, tmp_path):
    """A warm pool of a proxy-mode policy (aj_pool_*, as the server keeps):
    each parked sandbox has its proxy, started with the pool's policy (the
    allow-list, the caps, the brokered secret: nothing of a request) and
    waiting with it; each run is warm and gets its own proxy's decisions
    and counts, the upstream the real credential."""
    helper = os.path.join(AJ_HELPERS, "aj-pool")
    if not os.path.exists(helper):
        must_skip("aj-pool helper not built")
    real = "ghp_" + secrets.token_hex(18)
    evdir = str(tmp_path / "ev")
    os.mkdir(evdir)
    os.chmod(str(tmp_path), 0o755)
    os.chmod(evdir, 0o777)
    sets = ["--network=proxy", "--allow=up.test:%d" % up.port, "--allow-range=127.0.0.0/8",
            "--resolver=127.0.0.1:%d" % dns.port, "--secret=gh,hosts=up.test,from=env:AJTEST_POOL_GH,env=GH",
            "detection.decoys=false"]
    cmd = ["/bin/sh", "-c", "%s -H \"Authorization: Bearer $GH\" http://up.test:%d/run; %s http://other.test:%d/; "
           "echo \"GH=$GH\"" % (shlex.join(CURL), up.port, shlex.join(CURL), up.port)]
    outdir = str(tmp_path / "out")
    os.mkdir(outdir)
    os.chmod(outdir, 0o777)
    argv = [helper, "--size", "2", "--events", evdir, "--outdir", outdir]
    for kv in sets:
        argv += ["--set", kv]
    argv += ["--"] + cmd + [":::"] + cmd
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env=egress_env({"AGENTJAIL_EGRESS": REAL, "AJTEST_POOL_GH": real}))
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    assert lines and "pool" in lines[-1], (proc.returncode, proc.stdout, proc.stderr)
    runs, summary = lines[:-1], lines[-1]
    assert [r["warm"] for r in runs] == [True, True], (runs, proc.stderr)
    for i, r in enumerate(runs):
        res = r["result"]
        assert res["status"] == "ok" and res["network"]["mode"] == "proxy", res
        # Its own proxy's counts, not a shared one's running total.
        assert res["network"]["allowed"] == 1 and res["network"]["denied"] == 1, res["network"]
        evs = events_of(os.path.join(evdir, "%d.jsonl" % i))
        assert {e["sandbox_id"] for e in evs} == {res["sandbox_id"]}, evs
        assert [e["host"] for e in evs if e["type"] == "net_denied"] == ["other.test"], evs
        assert [e["secret"] for e in evs if e["type"] == "secret_used"] == ["gh"], evs
        assert real not in json.dumps(evs) + json.dumps(res)
        with open(os.path.join(outdir, "%d.out" % i)) as f:
            out = f.read()
        assert "code=200" in out and "code=403" in out, out
        # Inside: a placeholder of the same shape, never the value.
        gh = out.split("GH=", 1)[1].strip()
        assert gh.startswith("ghp_") and len(gh) == len(real) and gh != real, (gh, out)
    assert runs[0]["result"]["sandbox_id"] != runs[1]["result"]["sandbox_id"]
    # The upstream got the real value, once per run.
    assert [s["auth"] for s in up.seen] == ["Bearer " + real] * 2, up.seen
    assert summary["fds_after"] == summary["fds_before"] and summary["children_left"] is False, summary


def test_warm_interpreters_with_a_proxy_mode_policy(up, dns, tmp_path):
    """A pool of warm interpreters of a proxy-mode policy: each prepared
    interpreter has its proxy; a python run from it reaches the allowed
    host with the brokered credential and gets refused elsewhere."""
    helper = os.path.join(AJ_HELPERS, "aj-pool")
    if not os.path.exists(helper):
        must_skip("aj-pool helper not built")
    real = "sk-" + secrets.token_hex(20)
    outdir = str(tmp_path / "out")
    os.mkdir(outdir)
    os.chmod(str(tmp_path), 0o755)
    os.chmod(outdir, 0o777)
    code = ("import os, urllib.error, urllib.request as u\n"
            "r = u.Request('http://up.test:%d/interp', headers={'Authorization': 'Bearer ' + os.environ['K']})\n"
            "print(u.urlopen(r, timeout=20).read().decode().strip())\n"
            "try:\n    u.urlopen('http://other.test:%d/', timeout=20)\nexcept urllib.error.HTTPError as e:\n"
            "    print(e.code)\n" % (up.port, up.port))
    evdir = str(tmp_path / "ev")
    os.mkdir(evdir)
    os.chmod(evdir, 0o777)
    argv = [helper, "--size", "1", "--outdir", outdir, "--events", evdir, "--set", "interpreter.language=python"]
    for kv in ["--network=proxy", "--allow=up.test:%d" % up.port, "--allow-range=127.0.0.0/8",
               "--resolver=127.0.0.1:%d" % dns.port, "--secret=k,hosts=up.test,from=env:AJTEST_INTERP_K,env=K",
               "detection.decoys=false"]:
        argv += ["--set", kv]
    argv += ["--", "python3", "-c", code]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env=egress_env({"AGENTJAIL_EGRESS": REAL, "AJTEST_INTERP_K": real}))
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    assert len(lines) == 2, (proc.stdout, proc.stderr)
    run = lines[0]
    assert run["warm"] and run["result"]["status"] == "ok" and run["result"]["network"]["mode"] == "proxy", run
    with open(os.path.join(outdir, "0.out")) as f:
        assert f.read().split() == ["upstream", "says", "hi", "403"]
    assert [s["auth"] for s in up.seen] == ["Bearer " + real], up.seen
    # The interpreter's end (its cgroup killed at once, the proxy with it)
    # is no proxy error.
    evs = events_of(os.path.join(evdir, "0.jsonl"))
    assert not [e for e in evs if e["type"] == "error"], evs
    assert [e["host"] for e in evs if e["type"] == "net_denied"] == ["other.test"], evs


def test_a_parked_sandbox_whose_proxy_died_is_not_handed_out(up, dns, tmp_path):
    helper = os.path.join(AJ_HELPERS, "aj-pool")
    if not os.path.exists(helper):
        must_skip("aj-pool helper not built")
    go = str(tmp_path / "go")
    argv = [helper, "--size", "1", "--wait-file", go, "--set", "--network=proxy", "--set",
            "--allow=up.test:%d" % up.port, "--set", "--allow-range=127.0.0.0/8", "--set",
            "--resolver=127.0.0.1:%d" % dns.port, "--"] + CURL + ["http://up.test:%d/x" % up.port]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=egress_env({"AGENTJAIL_EGRESS": REAL}))
    try:
        assert proc.stderr.readline().strip() == "ready"
        parked = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_proxy(int(p)) and
                  _child_of(int(p), proc.pid)]
        assert len(parked) == 1, parked  # the parked sandbox's own proxy, waiting with it
        os.kill(parked[0], signal.SIGKILL)
        # Dead, not only signalled (under ASan the run could come first).
        assert wait_for(lambda: not alive(parked[0]), 30), "the proxy outlived SIGKILL"
        write(go, "")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    assert len(lines) == 2, (out, err)
    run, summary = lines
    # Not handed out (its run would have had no network): discarded, the
    # run started cold with a proxy of its own, and it got through.
    assert run["warm"] is False and summary["pool"]["discarded"] >= 1, (run, summary)
    assert run["result"]["status"] == "ok" and run["result"]["network"]["allowed"] == 1, run
    assert [s["path"] for s in up.seen] == ["/x"], up.seen


def _child_of(pid, parent):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == parent
    except OSError:
        return False


def _orphan(pid):
    return _child_of(pid, 1)


# ---- policy -------------------------------------------------------------------------

def test_policy_errors_are_located(tmp_path):
    cases = [
        ('{\n  "version": 1,\n  "network": {"mode": "proxy",\n    "allow": ["ok.example", "bad host"]}\n}\n',
         ":4:29: network.allow[1]: "),
        ('{\n  "version": 1,\n  "network": {"mode": "proxy"},\n  "secrets": [{"id": "a", "hosts": ["h.example"],'
         '\n    "value_from": "env:X", "env": "T", "format": "no brace"}]\n}\n', ":5:50: secrets[0].format: "),
        ('{\n  "version": 1,\n  "network": {"mode": "loopback", "allow": ["h.example"]}\n}\n',
         ":3:44: network.allow: "),
        ('{\n  "version": 1,\n  "network": {"mode": "proxy", "allow_ranges": ["10.0.0.0/33"]}\n}\n',
         ":3:49: network.allow_ranges[0]: "),
    ]
    for text, where in cases:
        p = str(tmp_path / "p.json")
        write(p, text)
        r = subprocess.run([AJ_BIN, "policy", "check", p], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and where in r.stderr, (text, r.stderr)
    # Control: the valid shape passes.
    write(p, '{"version": 1, "network": {"mode": "proxy", "allow": ["pypi.org:443", "*.example.org", '
             '"GET 10.1.2.3:8080", "[fd00::1]:443"], "allow_ranges": ["10.1.0.0/16"]}, "secrets": [{"id": "gh", '
             '"hosts": ["api.github.com"], "value_from": "env:GH", "env": "GITHUB_TOKEN"}]}')
    r = subprocess.run([AJ_BIN, "policy", "check", p], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    # A secret read from a variable that environment.pass also hands in.
    r = subprocess.run([AJ_BIN, "run", "--network", "proxy", "--env-pass", "GH", "--secret",
                        "gh,hosts=a.example,from=env:GH,env=T", "--", "true"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "environment.pass also hands to the sandbox" in r.stderr, r.stderr


def _status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def test_the_proxy_and_the_relay_hold_no_privilege_and_see_little(up, dns, tmp_path):
    proc = subprocess.Popen([AJ_BIN, "run", "--result", str(tmp_path / "r.json")] + proxy_args(up, dns) +
                            ["--", "sh", "-c", "read x"], env=egress_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        kids = lambda: [int(p) for p in os.listdir("/proc") if p.isdigit() and _child_of(int(p), proc.pid)]  # noqa
        relay = wait_for(lambda: [p for p in kids() if comm(p) == "agentjail-relay"], 20)
        proxy = wait_for(lambda: [p for p in kids() if _is_proxy(p)], 20)
        assert relay and proxy, (relay, proxy)
        for pid in relay + proxy:
            st = _status(pid)
            assert int(st["CapEff"], 16) == int(st["CapPrm"], 16) == int(st["CapAmb"], 16) == 0, st
            assert st["NoNewPrivs"] == "1", st
            assert st["Seccomp"] == "2", st  # the relay's own filter (seccomp_relay.c); the proxy's own
            # The bounding set: emptied where the process could (root; the
            # proxy's own user namespace rootless). A rootless relay holds
            # nothing and cannot gain anything (no_new_privs) either way.
            if IS_ROOT or pid in proxy:
                assert int(st["CapBnd"], 16) == 0, st
            if IS_ROOT:
                assert st["Uid"].split()[0] != "0", st
        # The proxy's own root: what it needs, none of the host's data.
        root = os.listdir("/proc/%d/root" % proxy[0])
        assert "usr" in root and "etc" in root, root
        for gone in ("home", "root", "var", "tmp", "srv", "boot"):
            assert gone not in root, (gone, root)
        assert sorted(os.listdir("/proc/%d/root/etc" % proxy[0])) <= ["ca-certificates", "gai.conf", "hosts",
                                                                       "ld.so.cache", "nsswitch.conf",
                                                                       "resolv.conf", "ssl"]
        # Control: the supervisor's root has them.
        assert "var" in os.listdir("/proc/%d/root" % proc.pid)
        proxy_uid = _status(proxy[0])["Uid"].split()[0]
    finally:
        proc.communicate(input="\n", timeout=60)
    res = json.load(open(str(tmp_path / "r.json")))
    if IS_ROOT:
        # Its own uid: not the sandbox's.
        assert int(proxy_uid) != res["host_uid"] and int(proxy_uid) >= 65536, (proxy_uid, res["host_uid"])
    else:
        assert int(proxy_uid) == os.getuid()


@pytest.fixture
def tls_up(tmp_path):
    """An HTTPS upstream on the host's 127.0.0.1 for up.test, its
    certificate signed by a CA this test makes (handed to the proxy through
    the supervisor's test knob, AGENTJAIL_TEST_EGRESS_UPSTREAM_CA)."""
    import ssl
    d = str(tmp_path)
    os.chmod(d, 0o755)

    def ossl(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True, timeout=60)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
         d + "/ca.key", "-out", d + "/ca.pem", "-days", "2", "-subj", "/CN=ajtest upstream CA")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/up.key",
         "-out", d + "/up.csr", "-subj", "/CN=up.test")
    with open(d + "/ext", "w") as f:
        f.write("subjectAltName=DNS:up.test\nextendedKeyUsage=serverAuth\n")
    ossl("x509", "-req", "-in", d + "/up.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key", "-CAcreateserial",
         "-out", d + "/up.pem", "-days", "2", "-extfile", d + "/ext")
    os.chmod(d + "/ca.pem", 0o644)
    u = Upstream()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d + "/up.pem", d + "/up.key")
    u.srv.socket = ctx.wrap_socket(u.srv.socket, server_side=True)
    u.ca = d + "/ca.pem"
    yield u
    u.close()


def test_brokered_https_gets_the_real_header_and_the_sandbox_trusts_the_run_ca(tls_up, dns, tmp_path):
    real = "ghp_" + secrets.token_hex(18)
    ev = str(tmp_path / "ev.jsonl")
    env = egress_env({"AJTEST_GH": real, "AGENTJAIL_TEST_EGRESS_UPSTREAM_CA": tls_up.ca})
    script = ("curl -sS --max-time 20 -H \"Authorization: Bearer $GITHUB_TOKEN\" https://up.test:%d/curl; "
              "python3 -c \"import os, urllib.request as u; print(u.urlopen(u.Request('https://up.test:%d/urllib', "
              "headers={'Authorization': 'Bearer ' + os.environ['GITHUB_TOKEN']}), timeout=20).read().decode())\"; "
              "curl -sS --max-time 20 https://up.test:%d/nobundle --cacert /etc/ssl/certs/ca-certificates.crt "
              ">/dev/null 2>&1; echo nobundle=$?" % (tls_up.port, tls_up.port, tls_up.port))
    r = run_aj(proxy_args(tls_up, dns, "--events", ev, "--secret",
                          "gh,hosts=up.test,from=env:AJTEST_GH,env=GITHUB_TOKEN"), ["/bin/sh", "-c", script], env=env)
    assert r.returncode == 0, r
    assert r.stdout.count("upstream says hi") == 2, r
    # Control: without the run's CA (the system bundle alone) the client
    # refuses the proxy's certificate: it is the bundle that makes it work.
    assert "nobundle=60" in r.stdout or "nobundle=35" in r.stdout, r
    seen = {s["path"]: s["auth"] for s in tls_up.seen}
    assert seen["/curl"] == seen["/urllib"] == "Bearer " + real, seen
    evs = events_of(ev)
    assert len([e for e in evs if e["type"] == "secret_used"]) >= 2, evs
    assert real not in open(ev).read() and real not in r.stdout + r.stderr


RELAY_ABUSE = r"""
import socket, sys, urllib.request
port = int(sys.argv[1])
# A client that goes on sending after the proxy answered and closed (403),
# and one that leaves mid-request: the relay gets EPIPE and resets, and
# must serve the next connection all the same.
for i in range(3):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"GET http://other.test:%d/ HTTP/1.1\r\nHost: other.test\r\n\r\n" % port)
    try:
        for _ in range(64):
            s.sendall(b"x" * 65536)
    except OSError:
        pass
    s.close()
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"GET http://up.test:%d/ HTTP/1.1\r\nHo" % port)
    s.close()
print(urllib.request.urlopen("http://up.test:%d/after" % port, timeout=20).read().decode().strip())
"""


def test_the_relay_outlives_peers_that_leave_first(up, dns):
    r = run_aj(proxy_args(up, dns), ["python3", "-c", RELAY_ABUSE, str(up.port)], env=egress_env())
    assert r.returncode == 0 and r.stdout.strip() == "upstream says hi", r
    assert "/after" in [s["path"] for s in up.seen], up.seen


@pytest.fixture
def repo_up(tmp_path):
    """A plain HTTP server on the host's 127.0.0.1 with a simple package
    index (one wheel) and a git repository (dumb HTTP)."""
    import functools
    import zipfile
    from http.server import SimpleHTTPRequestHandler
    www = tmp_path / "www"
    (www / "simple" / "ajpkg").mkdir(parents=True)
    whl = www / "simple" / "ajpkg" / "ajpkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(str(whl), "w") as z:
        z.writestr("ajpkg/__init__.py", "")
        z.writestr("ajpkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: ajpkg\nVersion: 0.1\n")
        z.writestr("ajpkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: ajtest\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr("ajpkg-0.1.dist-info/RECORD", "")
    (www / "simple" / "ajpkg" / "index.html").write_text(
        '<html><body><a href="ajpkg-0.1-py3-none-any.whl">ajpkg-0.1-py3-none-any.whl</a></body></html>')
    (www / "simple" / "index.html").write_text('<html><body><a href="ajpkg/">ajpkg</a></body></html>')
    work = tmp_path / "work"
    genv = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                GIT_COMMITTER_EMAIL="t@t", HOME=str(tmp_path))

    def git(*a, cwd=None):
        subprocess.run(["git"] + list(a), check=True, capture_output=True, cwd=cwd, env=genv, timeout=60)
    git("init", "-q", "-b", "main", str(work))
    (work / "README").write_text("cloned through the egress proxy\n")
    git("add", "README", cwd=str(work))
    git("commit", "-q", "-m", "one", cwd=str(work))
    git("clone", "-q", "--bare", str(work), str(www / "repo.git"))
    git("update-server-info", cwd=str(www / "repo.git"))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_real_clients_inside_requests_pip_git(repo_up, dns):
    port = repo_up
    script = ("set -e; cd /tmp; "
              "/usr/bin/python3 -c \"import requests; print('requests', requests.get('http://up.test:%d/simple/', "
              "timeout=20).status_code)\"; "
              "/usr/bin/python3 -m pip download -q --no-deps --disable-pip-version-check --no-cache-dir "
              "--index-url http://up.test:%d/simple/ --trusted-host up.test -d /tmp/dl ajpkg; ls /tmp/dl; "
              "git clone -q http://up.test:%d/repo.git /tmp/repo; cat /tmp/repo/README; "
              "/usr/bin/python3 -m pip download -q --no-deps --disable-pip-version-check --no-cache-dir "
              "--index-url http://elsewhere.test:%d/simple/ --trusted-host elsewhere.test -d /tmp/dl2 "
              "--retries 0 --timeout 5 ajpkg 2>/dev/null || echo 'pip elsewhere refused'"
              % (port, port, port, port))
    args = ["--network", "proxy", "--allow", "up.test:%d" % port, "--allow-range", "127.0.0.0/8", "--resolver",
            "127.0.0.1:%d" % dns.port]
    r = run_aj(args, ["/bin/sh", "-c", script], env=egress_env(), timeout=120)
    assert r.returncode == 0, r
    assert "requests 200" in r.stdout, r
    assert "ajpkg-0.1-py3-none-any.whl" in r.stdout, r
    assert "cloned through the egress proxy" in r.stdout, r
    assert "pip elsewhere refused" in r.stdout, r
    assert r.result["network"]["denied"] >= 1 and r.result["network"]["allowed"] >= 4, r.result


def test_a_host_without_a_resolver_refuses_names_and_serves_allowed_addresses(up, tmp_path):
    """No network.resolver and a host /etc/resolv.conf naming no server (an
    offline machine, a container without one): the proxy still starts; a
    name is refused with the reason (502, net_denied), never looked up; an
    allow-listed literal address is served (the positive control)."""
    root_only("binds an empty /etc/resolv.conf in a mount namespace of the test's own")
    empty = tmp_path / "resolv.conf"
    empty.write_text("# no nameserver\n")
    ev = str(tmp_path / "ev.jsonl")
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
              'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(empty)]
    r = run_aj(["--network", "proxy", "--allow", "up.test:%d" % up.port, "--allow", "127.0.0.1:%d" % up.port,
                "--allow-range", "127.0.0.0/8", "--events", ev],
               # NO_PROXY names 127.0.0.1 (the sandbox's own): --noproxy "" sends it to the proxy.
               ["/bin/sh", "-c", "%s http://up.test:%d/name; %s --noproxy '' http://127.0.0.1:%d/addr; true" %
                (shlex.join(CURL), up.port, shlex.join(CURL), up.port)], env=egress_env(), prefix=prefix)
    assert r.returncode == 0, r
    assert "code=502" in r.stdout and "code=200" in r.stdout, r
    assert [s["path"] for s in up.seen] == ["/addr"], up.seen
    denied = [e for e in events_of(ev) if e["type"] == "net_denied"]
    assert len(denied) == 1 and denied[0]["host"] == "up.test" and "no DNS server" in denied[0]["reason"], denied
