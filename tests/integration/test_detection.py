"""Escape detection: audit events, decoys, --on-escape and --alert-cmd.

Escape-indicative syscalls come to the supervisor (SECCOMP_RET_USER_NOTIF),
which writes one `escape_attempt` event and answers EPERM; decoys (a
docker.sock, a Kubernetes service-account token, optional cloud keys) write a
`canary` event when touched. Every assertion is an outcome: the errno the
payload saw, the exit status, the event lines written, a file the alert hook
wrote on the host. Each detection has a control: benign work (Python, a shell
pipeline, metadata reads of the decoys) must produce no event, since a false
positive is a bug too.

Every run goes through run_ev(), which checks each event line: valid JSON,
the common fields (RFC 3339 UTC time with milliseconds, the result's
sandbox_id and policy_sha256, a known type and severity, the technique on
escape_attempt and canary), start first and exit last, and counts equal to
the result's `events`. docs/events.md describes the format.

Runs as root and as nobody:
  python3 -m pytest -p no:cacheprovider tests/integration/test_detection.py
  setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \
      python3 -m pytest -p no:cacheprovider tests/integration/test_detection.py
"""
import base64
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import write, wait_for, AJ_BIN, must_skip, new_tag, pids_with, run_aj, try_args, host_abi_works

PY = "/usr/bin/python3"
TRY = "/opt/aj-try"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DOCKER_SOCK = "/var/run/docker.sock"
AWS_FILE = "/tmp/.aws/credentials"
SIGSYS_EXIT = 128 + signal.SIGSYS  # 159
KILLED_EXIT = 128 + signal.SIGKILL  # 137

TYPES = ("start", "exit", "escape_attempt", "canary", "net_denied", "net_allowed", "limit", "error")
SEVERITIES = ("info", "low", "medium", "high", "critical")
TECHNIQUES = {
    "T1611": "Escape to Host",
    "T1552": "Unsecured Credentials",
    "T1613": "Container and Resource Discovery",
    "T1055": "Process Injection",
    "T1040": "Network Sniffing",
    "T1082": "System Information Discovery",
    "T1499": "Endpoint Denial of Service",
    "T1068": "Exploitation for Privilege Escalation",
}
COMMON = ("time", "sandbox_id", "policy_sha256", "type", "severity")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


# ---- helpers ----------------------------------------------------------------

def parse_lines(text):
    """Every line is one JSON object (JSON Lines, newline-terminated)."""
    assert text == "" or text.endswith("\n"), "last event line not terminated: %r" % text[-200:]
    events = []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            pytest.fail("event line is not JSON: %r" % line)
        assert isinstance(ev, dict), line
        events.append(ev)
    return events


def check_events(r, events):
    """The documented invariants of one run's event stream."""
    assert r.result is not None, r
    res = r.result
    for ev in events:
        for k in COMMON:
            assert k in ev, "event lacks %r: %r" % (k, ev)
        assert TIME_RE.match(ev["time"]), ev
        time.strptime(ev["time"][:19], "%Y-%m-%dT%H:%M:%S")  # a real date
        assert ev["sandbox_id"] == res["sandbox_id"], ev
        assert ev["policy_sha256"] == res["policy_sha256"], ev
        assert ev["type"] in TYPES, ev
        assert ev["severity"] in SEVERITIES, ev
        if ev["type"] in ("escape_attempt", "canary", "limit"):
            assert ev.get("technique") in TECHNIQUES, ev
            assert ev["technique_name"] == TECHNIQUES[ev["technique"]], ev
        if ev["type"] == "escape_attempt":
            assert ev["severity"] in ("high", "critical"), ev
            assert isinstance(ev["syscall"], str) and ev["syscall"], ev
            assert isinstance(ev["syscall_nr"], int), ev
            assert ev["arch"] in ("x86_64", "i386", "x32"), ev
            assert isinstance(ev["pid"], int) and ev["pid"] > 0, ev
            assert isinstance(ev["args"], list), ev
            assert ev["action"] == ("killed" if ev["severity"] == "critical" else "denied"), ev
        if ev["type"] == "canary":
            assert ev["severity"] == "high", ev
            assert ev["decoy"] and ev["path"].startswith("/") and ev["access"] in ("open", "connect"), ev
    times = [ev["time"] for ev in events]
    assert times == sorted(times), "events out of time order: %r" % times
    if res["status"] != "setup_error" or events:
        types = [ev["type"] for ev in events]
        assert types.count("exit") == 1 and types[-1] == "exit", types
        ex = events[-1]
        assert ex["status"] == res["status"] and ex["exit_code"] == res["exit_code"], (ex, res)
        assert ex["signal"] == res["signal"] and ex["severity"] == "info", (ex, res)
        if "start" in types:
            assert types.count("start") == 1 and types[0] == "start", types
    counts = {t: sum(ev["type"] == t for ev in events) for t in TYPES}
    assert res["events"] == counts, (res["events"], counts)
    assert res["escape_attempted"] == (counts["escape_attempt"] + counts["canary"] > 0), res


def run_ev(args, cmd, **kw):
    """Run with --events FILE; return (Run, events), the stream checked."""
    with tempfile.TemporaryDirectory(prefix="ajdet-ev-") as d:
        path = os.path.join(d, "events.jsonl")
        r = run_aj(["--events", path] + list(args), cmd, **kw)
        text = open(path).read() if os.path.exists(path) else ""
    events = parse_lines(text)
    check_events(r, events)
    return r, events


def of_type(events, t):
    return [ev for ev in events if ev["type"] == t]


def probe(argv, args=(), **kw):
    """aj-try inside; returns (Run, events, its JSON verdict or None)."""
    r, events = run_ev(try_args() + list(args), [TRY] + list(argv), **kw)
    line = r.stdout.strip().splitlines()
    return r, events, (json.loads(line[-1]) if line else None)




def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


# ---- every escape-indicative syscall: one event, EPERM inside -------------------

NS = ("user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time")
# (probe argv, syscall named in the event, technique)
MONITORED = [
    (["mount"], "mount", "T1611"),
    (["umount2"], "umount2", "T1611"),
    (["pivot_root"], "pivot_root", "T1611"),
    (["chroot"], "chroot", "T1611"),
    (["open_tree"], "open_tree", "T1611"),
    (["move_mount"], "move_mount", "T1611"),
    (["fsopen"], "fsopen", "T1611"),
    (["fsconfig"], "fsconfig", "T1611"),
    (["fsmount"], "fsmount", "T1611"),
    (["fspick"], "fspick", "T1611"),
    (["mount_setattr"], "mount_setattr", "T1611"),
    (["setns"], "setns", "T1611"),
    (["bpf"], "bpf", "T1068"),
    (["perf_event_open"], "perf_event_open", "T1068"),
    (["io_uring_setup"], "io_uring_setup", "T1068"),
    (["userfaultfd"], "userfaultfd", "T1068"),
    (["keyctl"], "keyctl", "T1552"),
    (["add_key"], "add_key", "T1552"),
    (["request_key"], "request_key", "T1552"),
    (["ptrace-traceme"], "ptrace", "T1055"),
    (["process_vm_readv"], "process_vm_readv", "T1055"),
    (["open_by_handle_at"], "open_by_handle_at", "T1611"),
    (["name_to_handle_at"], "name_to_handle_at", "T1611"),
    (["kexec_load"], "kexec_load", "T1611"),
    (["kexec_file_load"], "kexec_file_load", "T1611"),
    (["init_module"], "init_module", "T1611"),
    (["finit_module"], "finit_module", "T1611"),
    (["delete_module"], "delete_module", "T1611"),
    (["reboot"], "reboot", "T1611"),
    (["swapon"], "swapon", "T1611"),
    (["swapoff"], "swapoff", "T1611"),
    (["acct"], "acct", "T1611"),
    (["quotactl"], "quotactl", "T1611"),
    (["iopl"], "iopl", "T1611"),
    (["ioperm"], "ioperm", "T1611"),
    (["modify_ldt"], "modify_ldt", "T1611"),
    (["syslog"], "syslog", "T1082"),
    (["clock_settime"], "clock_settime", "T1611"),
    (["settimeofday"], "settimeofday", "T1611"),
    (["sethostname"], "sethostname", "T1611"),
    (["tiocsti-filter"], "ioctl", "T1611"),
    (["tiocsti"], "ioctl", "T1611"),
    (["tioclinux"], "ioctl", "T1611"),
    (["tioccons"], "ioctl", "T1611"),
    (["tiocsetd"], "ioctl", "T1611"),
    (["socket-packet"], "socket", "T1040"),
    (["socket-vsock"], "socket", "T1040"),
    (["socket-raw"], "socket", "T1040"),
    (["mknod", "/tmp"], "mknodat", "T1611"),
    (["personality", "addr_no_randomize"], "personality", "T1611"),
    (["personality", "linux32"], "personality", "T1611"),
] + [(["unshare", ns], "unshare", "T1611") for ns in NS] \
  + [(["clone", ns], "clone", "T1611") for ns in NS]


@pytest.mark.parametrize("argv,syscall,technique", MONITORED, ids=["-".join(m[0]).replace("/", "") for m in MONITORED])
def test_monitored_syscall_one_event_and_eperm(argv, syscall, technique):
    r, events, verdict = probe(argv)
    assert r.returncode == 1, r
    assert verdict["permitted"] is False and verdict["errno"] == "EPERM", verdict
    esc = of_type(events, "escape_attempt")
    assert len(esc) == 1, esc
    ev = esc[0]
    assert (ev["syscall"], ev["arch"], ev["action"], ev["severity"], ev["technique"]) == \
        (syscall, "x86_64", "denied", "high", technique), ev
    assert not of_type(events, "canary"), events
    assert r.result["escape_attempted"] is True and r.result["status"] == "nonzero_exit", r


def test_ptrace_attach_pid1_one_event():
    """PTRACE_SEIZE of the sandbox's pid 1 (the probe checks its comm)."""
    r, events = run_ev(try_args(), ["sh", "-c", 'exec %s ptrace-attach 1 "$(cat /proc/1/comm)"' % TRY])
    verdict = json.loads(r.stdout)
    assert r.returncode == 1 and verdict["errno"] == "EPERM", (r, verdict)
    esc = of_type(events, "escape_attempt")
    assert [(e["syscall"], e["args"][:2], e["technique"]) for e in esc] == [("ptrace", [0x4206, 1], "T1055")], esc


@pytest.mark.parametrize("probe_name,arch", [("int80", "i386"), ("x32", "x32")])
def test_foreign_abi_killed_with_sigsys_one_critical_event(probe_name, arch):
    if not host_abi_works(probe_name):
        pytest.skip("this kernel has no %s entry point at all (SIGSEGV on the host too)" % arch)
    r, events, verdict = probe([probe_name])
    assert r.returncode == SIGSYS_EXIT, r
    assert verdict is None, "the probe must die before it can print: %r" % r.stdout
    assert (r.result["status"], r.result["signal"]) == ("signaled", signal.SIGSYS), r
    esc = of_type(events, "escape_attempt")
    assert len(esc) == 1, esc
    ev = esc[0]
    assert (ev["arch"], ev["severity"], ev["action"], ev["syscall"], ev["technique"]) == \
        (arch, "critical", "killed", "getpid", "T1611"), ev
    assert ev["args"] == [] and "foreign ABI" in ev["reason"], ev


def test_benign_counterparts_of_monitored_calls_no_event():
    """The same syscalls with the arguments ordinary programs use: fork
    (clone without namespace flags), personality query, unix/inet/netlink
    sockets, fifo and file nodes, ordinary ioctls. Allowed, and silent."""
    code = r"""
import ctypes, fcntl, os, socket, termios
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
libc.personality.argtypes = [ctypes.c_ulong]  # as C code calls it
assert libc.personality(0xffffffff) >= 0
assert libc.personality(0) >= 0
for fam, typ, proto in ((socket.AF_UNIX, socket.SOCK_STREAM, 0), (socket.AF_INET, socket.SOCK_STREAM, 0),
                        (socket.AF_INET6, socket.SOCK_DGRAM, 0), (socket.AF_NETLINK, socket.SOCK_RAW, 0)):
    socket.socket(fam, typ, proto).close()
os.mkfifo("/tmp/fifo")
os.mknod("/tmp/node", 0o600 | 0o100000)
r, w = os.pipe()
fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4)
fcntl.ioctl(r, termios.FIOCLEX)
try:
    termios.tcgetattr(r)  # TCGETS: ENOTTY from the kernel, not the filter
except termios.error as e:
    assert e.args[0] == 25, e
print("ok")
"""
    r, events = run_ev([], [PY, "-c", code])
    assert r.returncode == 0 and r.stdout == "ok\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events


# The kernel reads these arguments as 32-bit ints (ioctl's cmd, socket's
# family, personality's persona): junk in the upper half of the register
# changes nothing for the kernel, so it must change nothing for the monitor
# either, in both directions.
HIGH_BITS = r"""
import ctypes, sys
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
nr, a0, a1, a2 = (int(x, 0) for x in sys.argv[1:])
r = l.syscall(nr, ctypes.c_ulong(a0), ctypes.c_ulong(a1), ctypes.c_ulong(a2))
print(r, ctypes.get_errno())
"""


@pytest.mark.parametrize("call,syscall,args", [
    (["16", "-1", str(0x100005412), "0"], "ioctl", [-1, "TIOCSTI"]),          # ioctl(-1, TIOCSTI | 1 << 32)
    (["16", "-1", str(0xffffffff0000541c), "0"], "ioctl", [-1, "TIOCLINUX"]),
    (["41", str(0x100000011), "3", "0"], "socket", ["AF_PACKET", "SOCK_RAW", 0]),
], ids=["ioctl-TIOCSTI", "ioctl-TIOCLINUX", "socket-AF_PACKET"])
def test_high_bits_do_not_hide_a_monitored_call(call, syscall, args):
    r, events = run_ev([], [PY, "-c", HIGH_BITS] + call)
    assert r.stdout.split() == ["-1", "1"], r  # EPERM from the monitor, not EBADF from the kernel
    (ev,) = of_type(events, "escape_attempt")
    assert ev["syscall"] == syscall and ev["args"][:len(args)] == args, ev


def test_personality_query_sign_extended_no_event():
    """personality(0xffffffff) through ctypes without argtypes passes -1
    sign-extended; the kernel reads 0xffffffff, the query. Not an attempt."""
    r, events = run_ev([], [PY, "-c", HIGH_BITS, "135", str(0xffffffffffffffff), "0", "0"])
    assert r.stdout.split() == ["0", "0"], r  # PER_LINUX, no error
    assert [e["type"] for e in events] == ["start", "exit"], events


# ---- decoded arguments ----------------------------------------------------------

def test_mount_args_decoded():
    r, events, verdict = probe(["mount"])
    (ev,) = of_type(events, "escape_attempt")
    # aj-try: mount("none", "/proc/self", NULL, MS_REMOUNT|MS_BIND|MS_RDONLY, NULL)
    assert ev["args"] == ["none", "/proc/self", None, "0x1021", "0x0"], ev
    assert ev["syscall_nr"] == 165, ev


def test_mount_strings_read_from_the_payload():
    tag = new_tag()
    code = ("import ctypes; l = ctypes.CDLL(None, use_errno=True); "
            "r = l.mount(b'ajsrc-%s', b'/tmp/ajtgt-%s', b'tmpfs', 0, None); "
            "print(r, ctypes.get_errno())" % (tag, tag))
    r, events = run_ev([], [PY, "-c", code])
    assert r.stdout.split() == ["-1", "1"], r  # EPERM
    (ev,) = of_type(events, "escape_attempt")
    assert ev["args"][:3] == ["ajsrc-" + tag, "/tmp/ajtgt-" + tag, "tmpfs"], ev


@pytest.mark.parametrize("flags,names", [
    ("user", {"CLONE_NEWUSER"}),
    ("user,mnt,net", {"CLONE_NEWUSER", "CLONE_NEWNS", "CLONE_NEWNET"}),
    ("pid,ipc,uts,cgroup,time", {"CLONE_NEWPID", "CLONE_NEWIPC", "CLONE_NEWUTS", "CLONE_NEWCGROUP",
                                 "CLONE_NEWTIME"}),
])
def test_unshare_flags_decoded(flags, names):
    r, events, verdict = probe(["unshare", flags])
    (ev,) = of_type(events, "escape_attempt")
    assert len(ev["args"]) == 1 and set(ev["args"][0].split("|")) == names, ev


@pytest.mark.parametrize("argv,args", [
    (["socket-packet"], ["AF_PACKET", "SOCK_RAW", 0]),
    (["socket-raw"], ["AF_INET", "SOCK_RAW", 1]),
    (["tiocsti-filter"], [-1, "TIOCSTI"]),
    (["tioclinux"], [0, "TIOCLINUX"]),
    (["tioccons"], [-1, "TIOCCONS"]),
    (["tiocsetd"], [-1, "TIOCSETD"]),
    (["delete_module"], ["aj_try_nonexistent_module", "0x800"]),
])
def test_other_args_decoded(argv, args):
    r, events, verdict = probe(argv)
    (ev,) = of_type(events, "escape_attempt")
    assert ev["args"] == args, ev


# ---- false positives are bugs ---------------------------------------------------------

PY_WORKLOAD = r"""
import concurrent.futures, csv, io, json, multiprocessing, os, sqlite3, subprocess, tempfile, threading

def square(x):
    return x * x

if __name__ == "__main__":
    d = json.loads(json.dumps({"a": [1, 2.5, None, {"b": "c"}]}))
    assert d["a"][3]["b"] == "c"
    buf = io.StringIO()
    csv.writer(buf).writerows([[i, "row%d" % i] for i in range(100)])
    assert len(list(csv.reader(io.StringIO(buf.getvalue())))) == 100
    db = sqlite3.connect(os.path.join(tempfile.mkdtemp(), "t.db"))
    db.execute("create table t (x integer)")
    db.executemany("insert into t values (?)", [(i,) for i in range(1000)])
    db.commit()
    assert db.execute("select sum(x) from t").fetchone()[0] == 499500
    threads = [threading.Thread(target=sum, args=(range(10000),)) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert sum(ex.map(square, range(100))) == 328350
    for method in ("fork", "spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            assert pool.map(square, range(10)) == [x * x for x in range(10)]
    assert subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout == "hi\n"
    assert subprocess.check_output("ls / | wc -l", shell=True).strip().isdigit()
    print("ok")
"""

SHELL_WORKLOAD = r"""
set -e
cd /tmp
mkdir d
printf '3\n1\n2\n2\n' | sort | uniq -c | awk '{print $2}' | sed 's/2/two/' > d/out
tar -C /tmp -cf - d | gzip -c > d.tgz
gzip -dc d.tgz | tar -tf - >/dev/null
find /tmp -name '*.tgz' >/dev/null
ps -ef >/dev/null
date -u >/dev/null
id >/dev/null
stty -a 2>&1 >/dev/null | grep -q 'Inappropriate ioctl'
stty size 2>&1 >/dev/null | grep -q 'Inappropriate ioctl'
cat d/out
"""


def test_no_false_positive_python_workload(hostdir):
    write(os.path.join(hostdir, "work.py"), PY_WORKLOAD)
    r, events = run_ev(["--bind-ro", "%s/work.py:/opt/work.py" % hostdir], [PY, "/opt/work.py"])
    assert r.returncode == 0 and r.stdout == "ok\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events
    assert r.result["escape_attempted"] is False, r


def test_no_false_positive_shell_pipeline():
    """On a pty. The payload never gets the caller's terminal (issue 12:
    its stdin is /dev/null then), so stty's terminal ioctls reach the kernel
    and fail there with ENOTTY, not EPERM from the monitor: no event."""
    master, slave = os.openpty()
    try:
        r, events = run_ev([], ["sh", "-c", SHELL_WORKLOAD], stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert r.returncode == 0 and r.stdout == "1\ntwo\n3\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events
    assert r.result["escape_attempted"] is False, r


def test_decoy_metadata_is_not_a_touch():
    """Listing and stat of the decoys (what `ls -la`, find or a shell's
    completion do) is not a read: no event."""
    cmd = ("ls -la %s /var/run >/dev/null && stat %s/token %s/ca.crt %s/namespace %s >/dev/null && "
           "test -S %s && test -s %s/token && find /var/run >/dev/null && echo ok"
           % (SA_DIR, SA_DIR, SA_DIR, SA_DIR, DOCKER_SOCK, DOCKER_SOCK, SA_DIR))
    r, events = run_ev([], ["sh", "-c", cmd])
    assert r.returncode == 0 and r.stdout == "ok\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events


# ---- decoys ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,kind", [("token", "kubernetes_token"), ("ca.crt", "kubernetes_ca"),
                                       ("namespace", "kubernetes_namespace")])
def test_decoy_file_read_is_a_canary(name, kind):
    path = "%s/%s" % (SA_DIR, name)
    r, events = run_ev([], ["cat", path])
    assert r.returncode == 0 and r.stdout, r  # the read succeeds: that is the point
    (ev,) = of_type(events, "canary")
    assert (ev["decoy"], ev["path"], ev["access"], ev["technique"], ev["severity"]) == \
        (kind, path, "open", "T1552", "high"), ev
    assert not of_type(events, "escape_attempt"), events


DOCKER_CLIENT = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect("/var/run/docker.sock")
time.sleep(float(sys.argv[1]))
try:
    s.sendall(b"GET /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n")
    print(s.recv(4096).decode().split("\r\n")[0])
except OSError as e:
    print("error", e.errno)
"""


@pytest.mark.parametrize("pause", ["0", "0.2"], ids=["immediate", "slow-client"])
def test_docker_socket_connect_is_a_canary_with_the_request(pause):
    """A client that writes its request at once, and one that pauses between
    connect and write (a real CLI builds its request after connecting): both
    get the 403, and the event records the request line."""
    r, events = run_ev([], [PY, "-c", DOCKER_CLIENT, pause])
    assert r.returncode == 0, r
    assert r.stdout == "HTTP/1.1 403 Forbidden\n", r
    (ev,) = of_type(events, "canary")
    assert (ev["decoy"], ev["path"], ev["access"], ev["technique"]) == \
        ("docker_socket", DOCKER_SOCK, "connect", "T1611"), ev
    assert ev.get("request") == "GET /containers/json HTTP/1.1", ev


def test_decoy_values_name_the_run():
    """A token found later (in a log, a paste, an exfiltration) leads back to
    the run: its claims, and the CA, carry the sandbox id."""
    r, events = run_ev([], ["sh", "-c", "cat %s/token; echo; cat %s/ca.crt" % (SA_DIR, SA_DIR)])
    assert r.returncode == 0, r
    sid = r.result["sandbox_id"]
    token, ca = r.stdout.split("\n", 1)
    header, payload, sig = token.split(".")
    assert json.loads(b64url(header)) == {"alg": "RS256", "kid": "agentjail-decoy"}, b64url(header)
    claims = json.loads(b64url(payload))
    assert claims["jti"] == sid, claims
    assert claims["sub"] == "system:serviceaccount:default:agentjail-" + sid[:12], claims
    assert len(b64url(sig)) >= 64
    assert sid in ca and ca.startswith("-----BEGIN CERTIFICATE-----"), ca
    decoys = {d["kind"]: d for d in events[0]["decoys"]}
    assert decoys["kubernetes_token"]["subject_suffix"] == sid, decoys
    assert decoys["docker_socket"]["path"] == DOCKER_SOCK, decoys
    # Two runs, two different tokens.
    r2, _ = run_ev([], ["cat", "%s/token" % SA_DIR])
    assert r2.stdout.split(".")[1] != payload and r2.result["sandbox_id"] != sid


NO_DECOY_PROBE = ("for f in %s %s/token %s/ca.crt %s/namespace %s; do test -e $f && echo present $f; done; "
                  "cat %s/token 2>/dev/null; %s -c 'import socket; s = socket.socket(socket.AF_UNIX); "
                  "s.connect(\"%s\")' 2>/dev/null; env | grep AWS_; echo end"
                  % (DOCKER_SOCK, SA_DIR, SA_DIR, SA_DIR, AWS_FILE, SA_DIR, PY, DOCKER_SOCK))


def test_no_decoys_removes_them():
    r, events = run_ev(["--no-decoys"], ["sh", "-c", NO_DECOY_PROBE])
    assert r.stdout == "end\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events
    assert events[0]["decoys"] == [] and r.result["layers"]["decoys"] is False, (events[0], r.result)


def test_no_decoys_control_default_has_them():
    r, events = run_ev([], ["sh", "-c", NO_DECOY_PROBE])
    present = [l.split()[1] for l in r.stdout.splitlines() if l.startswith("present")]
    assert present == [DOCKER_SOCK, SA_DIR + "/token", SA_DIR + "/ca.crt", SA_DIR + "/namespace"], r
    assert {(e["decoy"], e["access"]) for e in of_type(events, "canary")} == \
        {("kubernetes_token", "open"), ("docker_socket", "connect")}, events
    assert r.result["layers"]["decoys"] is True, r


def test_decoy_cloud_env_and_file():
    cmd = "echo $AWS_ACCESS_KEY_ID; echo $AWS_SECRET_ACCESS_KEY; cat %s" % AWS_FILE
    r, events = run_ev(["--decoy-cloud"], ["sh", "-c", cmd])
    assert r.returncode == 0, r
    sid = r.result["sandbox_id"]
    key_id, secret, creds = r.stdout.split("\n", 2)
    assert key_id == "AKIA" + sid[:16].upper(), (key_id, sid)
    assert len(secret) >= 32
    assert creds == "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (key_id, secret), creds
    (ev,) = of_type(events, "canary")  # the file read; reading the environment cannot be seen
    assert (ev["decoy"], ev["path"], ev["access"], ev["technique"]) == \
        ("aws_credentials_file", AWS_FILE, "open", "T1552"), ev
    decoys = {d["kind"]: d for d in events[0]["decoys"]}
    assert decoys["aws_credentials"]["aws_access_key_id"] == key_id, decoys


def test_decoy_cloud_control_absent_by_default():
    r, events = run_ev([], ["sh", "-c", "env | grep ^AWS_; test -e %s && echo present; echo end" % AWS_FILE])
    assert r.stdout == "end\n", r
    assert "aws_credentials" not in {d["kind"] for d in events[0]["decoys"]}


# ---- --on-escape -------------------------------------------------------------------

@pytest.mark.parametrize("what,first", [
    ("escape", "%s mount" % TRY),
    ("canary", "cat %s/namespace" % SA_DIR),
    ("docker", "%s -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"%s\"); "
               "s.sendall(b\"GET / HTTP/1.1\\r\\n\\r\\n\"); s.recv(100)'" % (PY, DOCKER_SOCK)),
], ids=["escape", "canary", "docker"])
def test_on_escape_kill_ends_the_run(what, first):
    r, events = run_ev(["--on-escape", "kill"] + try_args(), ["sh", "-c", first + "; echo NEXT-LINE"])
    assert r.returncode == KILLED_EXIT, r
    # Nothing after the attempt runs: not the next command, and not even
    # the probe's own verdict line (aj-try prints it right after the call).
    assert "NEXT-LINE" not in r.stdout and '"probe"' not in r.stdout, r
    assert r.result["status"] == "escape_attempt" and r.result["escape_attempted"] is True, r
    assert [e["type"] for e in events] == \
        ["start", "escape_attempt" if what == "escape" else "canary", "exit"], events
    assert events[-1]["status"] == "escape_attempt", events


def test_on_escape_kill_with_alert_cmd_nothing_runs_after_the_attempt(hostdir):
    """Kill and alert together (the configuration a production operator
    picks): starting the hook must not give the payload time to go on."""
    r, events = run_ev(["--on-escape", "kill", "--alert-cmd", "cat > %s/event.json" % hostdir] + try_args(),
                       ["sh", "-c", "%s mount; echo NEXT-LINE" % TRY])
    assert r.returncode == KILLED_EXIT and r.result["status"] == "escape_attempt", r
    assert r.stdout == "", "the payload ran on after the attempt: %r" % r.stdout
    with open(os.path.join(hostdir, "event.json")) as f:
        assert json.loads(f.read())["syscall"] == "mount"


def test_on_escape_deny_is_the_default_and_goes_on():
    r, events = run_ev(try_args(), ["sh", "-c", "%s mount; %s bpf; echo NEXT-LINE" % (TRY, TRY)])
    assert r.returncode == 0 and r.stdout.endswith("NEXT-LINE\n"), r
    assert r.result["status"] == "ok" and r.result["escape_attempted"] is True, r
    assert [e["syscall"] for e in of_type(events, "escape_attempt")] == ["mount", "bpf"], events


def test_on_escape_kill_control_benign_run_unaffected():
    r, events = run_ev(["--on-escape", "kill"], ["sh", "-c", "ls -la %s >/dev/null; echo NEXT-LINE" % SA_DIR])
    assert r.returncode == 0 and r.stdout == "NEXT-LINE\n", r
    assert [e["type"] for e in events] == ["start", "exit"], events


# ---- --alert-cmd ----------------------------------------------------------------

def test_alert_cmd_once_first_high_event_on_host(hostdir):
    """Several high events (two escape attempts, a decoy read, a docker
    connect): the hook runs once, on the host, with the first on stdin."""
    out = os.path.join(hostdir, "alert")
    os.mkdir(out)
    os.chmod(out, 0o700)  # not reachable from inside, whatever the uid
    hook = ("cat > %s/event.json; echo ran >> %s/count; id -u > %s/uid; "
            "readlink /proc/self/ns/mnt > %s/mntns; echo \"$AGENTJAIL_SANDBOX_ID\" > %s/sid"
            % ((out,) * 5))
    payload = ("%s mount; %s bpf; cat %s/token >/dev/null; %s -c 'import socket; "
               "s = socket.socket(socket.AF_UNIX); s.connect(\"%s\")'"
               % (TRY, TRY, SA_DIR, PY, DOCKER_SOCK))
    r, events = run_ev(["--alert-cmd", hook] + try_args(), ["sh", "-c", payload])
    assert r.returncode == 0, r
    high = [e for e in events if e["severity"] in ("high", "critical")]
    assert len(high) == 4, events
    with open(os.path.join(out, "count")) as f:
        assert f.read() == "ran\n"
    with open(os.path.join(out, "event.json")) as f:
        text = f.read()
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert json.loads(text) == high[0], (text, high[0])
    with open(os.path.join(out, "uid")) as f:
        assert int(f.read()) == os.getuid()
    with open(os.path.join(out, "mntns")) as f:
        assert f.read().strip() == os.readlink("/proc/self/ns/mnt")
    with open(os.path.join(out, "sid")) as f:
        assert f.read().strip() == r.result["sandbox_id"]


def test_alert_cmd_control_not_run_without_high_event(hostdir):
    marker = os.path.join(hostdir, "ran")
    r, events = run_ev(["--alert-cmd", "touch %s" % marker], ["sh", "-c", "echo hi; exit 3"])
    assert r.returncode == 3 and r.stdout == "hi\n", r
    assert not os.path.exists(marker)


def test_alert_cmd_critical_event_foreign_abi(hostdir):
    out = os.path.join(hostdir, "event.json")
    probe_name, arch = ("int80", "i386") if host_abi_works("int80") else ("x32", "x32")
    r, events = run_ev(["--alert-cmd", "cat > %s" % out] + try_args(), [TRY, probe_name])
    assert r.returncode == SIGSYS_EXIT, r
    with open(out) as f:
        ev = json.loads(f.read())
    assert (ev["type"], ev["severity"], ev["arch"]) == ("escape_attempt", "critical", arch), ev


def _alert_timeout_run(payload_secs, tag):
    """Start agentjail with a hook that would sleep 1000 s and a 1 s alert
    timeout; return (seconds until agentjail exited, its exit code, leftover
    hook pids, whether the hook was seen running)."""
    cmd = [AJ_BIN, "run", "--alert-cmd", "sleep %s" % tag, "--alert-timeout", "1s"] + try_args() + \
          ["--", "sh", "-c", "%s mount; sleep %s" % (TRY, payload_secs)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = bool(wait_for(lambda: pids_with(tag), 2))  # the hook did run
        try:
            p.wait(timeout=payload_secs + 8)
        except subprocess.TimeoutExpired:
            pass
        exited = time.monotonic() - t0 if p.returncode is not None else None
        left = pids_with(tag)
    finally:
        for pid in pids_with(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.communicate(timeout=30)
    return exited, p.returncode, left, started


@pytest.mark.parametrize("payload_secs", [0, 3], ids=["run-ends-first", "hook-deadline-first"])
def test_alert_cmd_killed_at_alert_timeout(payload_secs):
    """The hook is `sleep` for 1000 s with --alert-timeout 1s: agentjail
    still exits (at 1 s, or when the payload ends if later), and no process
    of the hook is left behind, holding agentjail's stdout and stderr."""
    tag = new_tag()
    exited, rc, left, started = _alert_timeout_run(payload_secs, tag)
    assert started, "the alert hook never ran: nothing was there to kill"
    assert exited is not None, "agentjail still running %d s after the alert timeout" % (payload_secs + 7)
    assert exited < max(1, payload_secs) + 5, exited
    assert rc == 0, rc
    assert not left, "alert hook processes left running past --alert-timeout: %r" % left


# ---- event stream plumbing ------------------------------------------------------------

def test_events_to_stderr():
    r = run_aj(["--events", "-"] + try_args(), ["sh", "-c", "%s mount; echo out; echo err >&2" % TRY])
    assert r.returncode == 0, r
    out = r.stdout.splitlines()  # the payload's own lines only
    assert len(out) == 2 and json.loads(out[0])["probe"] == "mount" and out[1] == "out", r
    lines = r.stderr.splitlines()
    assert "err" in lines, r
    events = parse_lines("".join(l + "\n" for l in lines if l.startswith("{")))
    check_events(r, events)
    assert [e["type"] for e in events] == ["start", "escape_attempt", "exit"], events


def test_events_file_appended_and_0600(hostdir):
    path = os.path.join(hostdir, "events.jsonl")
    umask0 = ("sh", "-c", 'umask 0; exec "$@"', "sh")
    r1 = run_aj(["--events", path], ["true"], prefix=umask0)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, oct(os.stat(path).st_mode)
    with open(path) as f:
        first = f.read()
    r2 = run_aj(["--events", path] + try_args(), [TRY, "chroot"], prefix=umask0)
    with open(path) as f:
        both = f.read()
    assert both.startswith(first), "the second run rewrote the file"
    e1, e2 = parse_lines(first), parse_lines(both[len(first):])
    check_events(r1, e1)
    check_events(r2, e2)
    assert [e["type"] for e in e1 + e2] == ["start", "exit", "start", "escape_attempt", "exit"]
    assert r1.result["sandbox_id"] != r2.result["sandbox_id"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_events_counted_without_events_flag():
    r = run_aj(try_args(), [TRY, "mount"])
    assert r.result["events"]["escape_attempt"] == 1 and r.result["escape_attempted"] is True, r
    assert r.stderr == "", r


# ---- a realistic attack ------------------------------------------------------------------

ATTACK = r'''
"""The first minute of a container-escape toolkit (deepce, CDK,
amicontained): look around, grab credentials, then try the classics."""
import ctypes, errno, json, os, socket, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, PTRACE_ATTACH, NR_io_uring_setup, NR_bpf, BPF_PROG_LOAD = 0x10000000, 16, 425, 321, 5

def step(name, fn):
    try:
        out = {"step": name, "ok": True, "value": fn()}
    except OSError as e:
        out = {"step": name, "ok": False, "errno": errno.errorcode.get(e.errno, str(e.errno))}
    print(json.dumps(out), flush=True)

def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r

def capeff():
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return line.split()[1]

def docker():
    for path in ("/run/docker.sock", "/var/run/docker.sock"):
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            s.sendall(b"GET /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n")
            status = s.recv(4096).decode("ascii", "replace").split("\r\n")[0]
            if " 200 " not in status:
                raise OSError(errno.EACCES, status)
            return status
    raise OSError(errno.ENOENT, "no docker socket")

def token():
    return open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()

params = ctypes.create_string_buffer(120)
attr = ctypes.create_string_buffer(128)
step("capeff", capeff)
step("docker_socket", docker)
step("sa_token", token)
step("unshare_user", lambda: check(libc.unshare(CLONE_NEWUSER)))
step("mount", lambda: check(libc.mount(b"/dev/sda1", b"/mnt", b"ext4", ctypes.c_ulong(0), None)))
step("ptrace_attach", lambda: check(libc.ptrace(ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(1), None, None)))
step("io_uring_setup", lambda: check(libc.syscall(NR_io_uring_setup, 8, params)))
step("bpf", lambda: check(libc.syscall(NR_bpf, BPF_PROG_LOAD, attr, 128)))
step("host_file", lambda: open(sys.argv[1]).read())
step("host_file_via_proc", lambda: open("/proc/1/root" + sys.argv[1]).read())
'''


def test_realistic_attack_sequence(hostdir):
    write(os.path.join(hostdir, "attack.py"), ATTACK)
    secret_dir = os.path.join(hostdir, "secret")
    os.mkdir(secret_dir)
    os.chmod(secret_dir, 0o755)
    secret = os.path.join(secret_dir, "host-secret.txt")
    token = "AJDET-HOST-SECRET-" + new_tag()
    write(secret, token + "\n", 0o644)  # readable by any uid: only the sandbox stops it

    r, events = run_ev(["--bind-ro", "%s/attack.py:/opt/attack.py" % hostdir], [PY, "/opt/attack.py", secret])
    assert r.returncode == 0, r
    steps = {s["step"]: s for s in map(json.loads, r.stdout.splitlines())}
    assert steps["capeff"]["value"] == "0000000000000000", steps
    assert steps["docker_socket"] == {"step": "docker_socket", "ok": False, "errno": "EACCES"}, steps
    sid = r.result["sandbox_id"]
    assert json.loads(b64url(steps["sa_token"]["value"].split(".")[1]))["jti"] == sid  # a decoy
    for name in ("unshare_user", "mount", "ptrace_attach", "io_uring_setup", "bpf"):
        assert steps[name] == {"step": name, "ok": False, "errno": "EPERM"}, steps[name]
    for name in ("host_file", "host_file_via_proc"):
        assert steps[name]["ok"] is False, steps[name]
    assert token not in r.stdout and token not in r.stderr
    with open(secret) as f:
        assert f.read() == token + "\n"

    seq = [(e["type"], e.get("decoy") or e.get("syscall")) for e in events]
    assert seq == [
        ("start", None),
        ("canary", "docker_socket"),
        ("canary", "kubernetes_token"),
        ("escape_attempt", "unshare"),
        ("escape_attempt", "mount"),
        ("escape_attempt", "ptrace"),
        ("escape_attempt", "io_uring_setup"),
        ("escape_attempt", "bpf"),
        ("exit", None),
    ], seq
    esc = of_type(events, "escape_attempt")
    assert all(e["action"] == "denied" and e["arch"] == "x86_64" for e in esc), esc
    assert len({e["pid"] for e in esc}) == 1, esc  # one process did it all
    assert [e["technique"] for e in events[1:-1]] == \
        ["T1611", "T1552", "T1611", "T1611", "T1055", "T1068", "T1068"], events
    assert esc[0]["args"] == ["CLONE_NEWUSER"]
    assert esc[1]["args"][:3] == ["/dev/sda1", "/mnt", "ext4"]
    assert esc[2]["args"][:2] == [16, 1]  # PTRACE_ATTACH, pid 1
    assert of_type(events, "canary")[0].get("request") == "GET /containers/json HTTP/1.1"
    assert r.result["status"] == "ok" and r.result["escape_attempted"] is True


RACE_KILLED_NOTIFIERS = """
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
# Children make escape-indicative calls and are killed while the
# supervisor is about to receive them (the kernel then says ENOENT).
for rnd in range(40):
    kids = []
    for i in range(16):
        pid = os.fork()
        if pid == 0:
            while True:
                libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
        kids.append(pid)
    time.sleep(0.002)
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
    for pid in kids:
        os.waitpid(pid, 0)
r = libc.setns(-1, 0)
print(r, ctypes.get_errno())
"""


def test_killing_notifying_children_does_not_switch_the_monitor_off(hostdir):
    # A payload could kill its own children mid-notification until the
    # supervisor mistook a failed receive for a dead listener and dropped
    # it: later attempts then failed with ENOSYS and were never recorded
    # (about one run in four before the fix). The last call must still be
    # refused by the monitor (EPERM) and reported.
    for i in range(3):
        ev = os.path.join(hostdir, "ev%d.jsonl" % i)
        # Every attempt must be an event here: well past the default budget.
        r = run_aj(["--events", ev, "--event-budget", "1000000"], ["python3", "-c", RACE_KILLED_NOTIFIERS],
                   timeout=120)
        assert r.returncode == 0 and r.stdout == "-1 1\n", r
        calls = [e.get("syscall") for e in map(json.loads, open(ev)) if e["type"] == "escape_attempt"]
        assert "setns" in calls, calls[-5:]


def test_decoys_armed_before_the_payload_runs():
    """init holds the payload back until the supervisor has leased every
    decoy (AJ_MSG_ARMED): a payload that reads the token as its very first
    act, with the whole run pinned to one CPU (the supervisor then competes
    with the sandbox for it), always leaves a canary. Before the handshake,
    a few runs in 60 read the token unseen."""
    import shutil
    taskset = shutil.which("taskset")
    if not taskset:
        must_skip("taskset (util-linux) not installed")
    missed = []
    for i in range(60):
        r, events = run_ev([], ["cat", SA_DIR + "/token"], prefix=[taskset, "-c", "0"])
        # Control: the read itself succeeded every time.
        assert r.returncode == 0 and r.stdout, r
        if not of_type(events, "canary"):
            missed.append(i)
    assert not missed, "runs whose token read left no canary: %s" % missed
