"""Attack surfaces a security review found open or silent (issue 12):

- degraded mode (no pid namespace) reaching other processes of the same uid
  through prlimit64 / setpriority / sched_setaffinity, and rootless degraded
  runs on a kernel whose Landlock cannot scope signals;
- kernel attack surface refused without an event (rare socket families,
  netlink protocols, listmount/statmount);
- host reconnaissance through /proc (cmdline, boot id, uptime, locks);
- decoys recognisable by their metadata.

Each refusal is checked as a kernel outcome (errno, the victim unchanged,
the file contents) with a positive control that shows the probe can succeed.
Runs as root and as nobody.
"""
import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, IS_ROOT, Run, helper, must_skip, new_tag, root_only, run_aj, try_args

TRY = "/opt/aj-try"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/tmp"]


def run_as(prefix, args, cmd, timeout=60):
    """run_aj, with the result and events written to a directory anyone may
    write (the caller may be nobody). Returns (Run, events)."""
    with tempfile.TemporaryDirectory(prefix="ajsurf-") as d:
        os.chmod(d, 0o777)
        res, evp = os.path.join(d, "result.json"), os.path.join(d, "ev.jsonl")
        full = list(prefix) + [AJ_BIN, "run", "--result", res, "--events", evp] + list(args) + ["--"] + list(cmd)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        result = json.load(open(res)) if os.path.exists(res) else None
        evs = events_of(evp) if os.path.exists(evp) else []
    return Run(proc, result), evs


def events_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def escapes(events):
    return [e for e in events if e["type"] == "escape_attempt"]


# ---- degraded mode: other processes of the same uid ---------------------------------

# The payload aims at VICTIM (another process of its uid) and then at itself.
REACH = r"""
import json, os, resource, sys
v = int(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = os.strerror(e.errno)
attempt("prlimit", lambda: resource.prlimit(v, resource.RLIMIT_CPU, (1, 1)))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, v, 7))
attempt("affinity", lambda: os.sched_setaffinity(v, {0}))
attempt("sched_setscheduler", lambda: os.sched_setscheduler(v, os.SCHED_BATCH, os.sched_param(0)))
# Signals: Landlock's signal scope (kill, pidfd_send_signal), no event.
import signal
attempt("kill0", lambda: os.kill(v, 0))
def _pidfd():
    fd = os.pidfd_open(v)
    try:
        signal.pidfd_send_signal(fd, 0)
    finally:
        os.close(fd)
attempt("pidfd_signal", _pidfd)
# Controls: the same calls on itself (pid 0, its pid, its tid).
attempt("self_prlimit", lambda: resource.prlimit(0, resource.RLIMIT_CPU, (500, 500)))
attempt("self_setrlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
attempt("self_nice", lambda: os.nice(1))
attempt("self_setpriority_pid", lambda: os.setpriority(os.PRIO_PROCESS, os.getpid(), 2))
attempt("self_affinity0", lambda: os.sched_setaffinity(0, {0}))
attempt("self_affinity_pid", lambda: os.sched_setaffinity(os.getpid(), {0}))
attempt("self_prlimit_pid", lambda: resource.prlimit(os.getpid(), resource.RLIMIT_CPU, (400, 400)))
out["self_cpu"] = list(resource.getrlimit(resource.RLIMIT_CPU))
print(json.dumps(out))
"""

OTHER = ("prlimit", "setpriority", "affinity", "sched_setscheduler")


def _as_caller():
    """Degraded runs as the caller's own uid need an unprivileged caller:
    as root, agentjail gives the payload a per-run uid, so run it as nobody
    (with the victim as nobody too)."""
    return NOBODY if IS_ROOT else []


def _victim(prefix, tag):
    p = subprocess.Popen(list(prefix) + ["sleep", tag])
    for _ in range(100):
        try:
            with open("/proc/%d/comm" % p.pid) as f:
                if f.read().strip() == "sleep":
                    break
        except OSError:
            pass
        time.sleep(0.02)
    return p


def _victim_state(pid):
    with open("/proc/%d/limits" % pid) as f:
        cpu = [l for l in f if l.startswith("Max cpu time")][0].split()[3:5]
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return {"cpu": cpu, "nice": int(fields[16]), "policy": int(fields[38]),
            "affinity": sorted(os.sched_getaffinity(pid))}


def test_degraded_payload_cannot_reach_another_process_of_its_uid():
    if len(os.sched_getaffinity(0)) < 2:
        must_skip("needs two CPUs to tell an affinity change")
    prefix = _as_caller()
    tag = new_tag()
    victim = _victim(prefix, tag)
    before = _victim_state(victim.pid)
    try:
        # Before Landlock ABI 6 a rootless degraded run needs the policy's
        # consent (signals are not scoped there: test_rootless_degraded_...).
        r, evs = run_as(list(prefix) + [helper("aj-nouserns")], ["--allow-degraded", "--allow-unscoped-signals"],
                        ["python3", "-c", REACH, str(victim.pid)])
        assert r.returncode == 0 and r.result["degraded"] is True, r
        out = json.loads(r.stdout)
        evs = escapes(evs)
        # kill and pidfd_send_signal are Landlock's (signal scope, ABI 6).
        signals = ("kill0", "pidfd_signal") if r.result["landlock_abi"] >= 6 else ()
        for k in OTHER + signals:
            assert out[k] == os.strerror(1), (k, out)
        # The kernel outcome: the victim is exactly as it was.
        assert _victim_state(victim.pid) == before, before
        assert before["cpu"] == ["unlimited", "unlimited"], before
        # Each attempt reported, with its technique.
        assert sorted({(e["syscall"], e["technique"]) for e in evs}) == sorted(
            {("prlimit64", "T1499"), ("setpriority", "T1499"), ("sched_setaffinity", "T1499"),
             ("sched_setscheduler", "T1499")}), evs
        assert all(e["args"][0] == victim.pid or e["args"][1] == victim.pid for e in evs), evs
        # Positive control: on itself (pid 0, its own pid) each works, silently.
        for k, v in out.items():
            if k.startswith("self_") and k != "self_cpu":
                assert v == "ok", (k, out)
        assert out["self_cpu"] == [400, 400], out
        # Control: the same payload outside the sandbox does change the victim,
        # so the probe can fail.
        p = subprocess.run(list(prefix) + ["python3", "-c", REACH, str(victim.pid)],
                           capture_output=True, text=True, timeout=60)
        host = json.loads(p.stdout)
        assert host["prlimit"] == "ok" and host["affinity"] == "ok" and host["kill0"] == "ok", host
        after = _victim_state(victim.pid)
        assert after["cpu"] == ["1", "1"] and after["affinity"] == [0], after
    finally:
        victim.kill()
        victim.wait()


def _unscoped(*extra):
    return list(_as_caller()) + [helper("aj-nouserns")] + list(extra)


def test_rootless_degraded_without_landlock_signal_scope_fails_closed(hostdir):
    """Landlock before ABI 6 cannot keep kill() off the caller's processes."""
    r, _ = run_as(_unscoped("--no-landlock-scope"), ["--allow-degraded"], ["sh", "-c", "echo ran"])
    assert r.returncode == 125 and r.stdout == "", r
    line = r.stderr.strip().splitlines()[-1]
    assert "ABI 6" in line and "degraded.without_signal_scope" in line and "--allow-unscoped-signals" in line, line
    # The policy may allow it, by flag or key; the result then says so.
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "degraded": {"allow": True, "without_signal_scope": True}}, f)
    os.chmod(hostdir, 0o755)
    os.chmod(pol, 0o644)
    for args in (["--allow-degraded", "--allow-unscoped-signals"], ["--policy", pol]):
        q, _ = run_as(_unscoped("--no-landlock-scope"), args, ["sh", "-c", "echo ran"])
        assert q.returncode == 0 and q.stdout == "ran\n", (args, q)
        assert q.result["degraded"] is True and 1 <= q.result["landlock_abi"] <= 5, q.result
        assert q.result["layers"]["landlock_scope"] is False, q.result
    # Control: with scoping available the same degraded run needs no key
    # (on a kernel before 6.12 there is none: the refusal above is real).
    c, _ = run_as(_unscoped(), ["--allow-degraded"], ["sh", "-c", "echo ran"])
    if c.returncode == 125 and "ABI 6" in c.stderr:
        assert q.result["landlock_abi"] < 6, q.result
    else:
        assert c.returncode == 0 and c.stdout == "ran\n", c
        assert c.result["layers"]["landlock_scope"] is True, c.result
    # The key is part of the policy: dumped, and weaker in a diff.
    d = subprocess.run([AJ_BIN, "policy", "show", pol], capture_output=True, text=True)
    assert d.returncode == 0 and json.loads(d.stdout)["degraded"]["without_signal_scope"] is True, d
    d = subprocess.run([AJ_BIN, "policy", "diff", pol, "profile:default"], capture_output=True, text=True)
    assert d.returncode == 1 and "degraded.without_signal_scope: A true, B false (A is weaker" in d.stdout, d


# ---- kernel attack surface: refused AND reported --------------------------------------

RARE_FAMILIES = ["alg", "tipc", "rds", "xdp", "bluetooth", "key", "pppox", "llc", "can", "atmpvc",
                 "x25", "ax25", "nfc", "vsock", "smc", "mctp", "qipcrtr", "kcm"]
AF_NAMES = {"alg": "AF_ALG", "tipc": "AF_TIPC", "rds": "AF_RDS", "xdp": "AF_XDP",
            "bluetooth": "AF_BLUETOOTH", "key": "AF_KEY", "pppox": "AF_PPPOX", "llc": "AF_LLC",
            "can": "AF_CAN", "atmpvc": "AF_ATMPVC", "x25": "AF_X25", "ax25": "AF_AX25", "nfc": "AF_NFC",
            "vsock": "AF_VSOCK", "smc": "AF_SMC", "mctp": "AF_MCTP", "qipcrtr": "AF_QIPCRTR", "kcm": "AF_KCM"}
NETLINK = {4: "NETLINK_SOCK_DIAG", 6: "NETLINK_XFRM", 9: "NETLINK_AUDIT", 12: "NETLINK_NETFILTER",
           16: "NETLINK_GENERIC", 21: "NETLINK_CRYPTO", 11: "NETLINK_CONNECTOR"}


def probe_in(argv, args=(), prefix=()):
    r, evs = run_as(prefix, try_args() + list(args), [TRY] + list(argv))
    lines = r.stdout.strip().splitlines()
    return r, evs, (json.loads(lines[-1]) if lines else None)


def probe_on_host(argv):
    p = subprocess.run([helper("aj-try")] + list(argv), capture_output=True, text=True, timeout=30)
    return json.loads(p.stdout)


@pytest.mark.parametrize("fam", RARE_FAMILIES)
def test_rare_socket_family_refused_and_reported(fam):
    r, evs, v = probe_in(["socket-family", fam])
    assert r.returncode == 1 and v["errno"] == "EPERM", (r, v)
    esc = escapes(evs)
    # AF_VSOCK reaches the hypervisor host: a way out (T1040 as before);
    # the others are kernel exploit surface (T1068).
    technique = "T1040" if fam == "vsock" else "T1068"
    assert [(e["syscall"], e["args"][0], e["technique"]) for e in esc] == [("socket", AF_NAMES[fam], technique)], esc


@pytest.mark.parametrize("proto", sorted(NETLINK))
def test_netlink_protocol_refused_and_reported(proto):
    r, evs, v = probe_in(["socket-netlink", str(proto)])
    assert r.returncode == 1 and v["errno"] == "EPERM", (r, v)
    esc = escapes(evs)
    assert [(e["syscall"], e["args"][0], e["args"][2], e["technique"]) for e in esc] == \
        [("socket", "AF_NETLINK", NETLINK[proto], "T1068")], esc


@pytest.mark.parametrize("argv", [["socket-family", "xdp"], ["socket-netlink", "9"], ["socket-netlink", "4"]])
def test_surface_control_on_host(argv):
    """The probes can succeed: on the host (built-in families only: a probe
    never makes the kernel load a module) the same sockets are created."""
    if argv[1] == "xdp" and not IS_ROOT:
        root_only("AF_XDP needs CAP_NET_RAW on the host: its control runs as root only")
    v = probe_on_host(argv)
    if v["errno"] == "EAFNOSUPPORT" or v["errno"] == "EPROTONOSUPPORT":
        must_skip("this kernel lacks %s altogether" % argv)
    assert v["permitted"] is True, v


@pytest.mark.parametrize("call", ["listmount", "statmount"])
def test_listmount_statmount_refused_and_reported(call):
    host = probe_on_host([call])
    if host["errno"] == "ENOSYS":
        pytest.skip("not applicable: %s is newer than this kernel (6.8)" % call)
    # Control: on the host the call reaches the kernel (EINVAL for the
    # empty request, not EPERM).
    assert host["permitted"] is True and host["errno"] != "EPERM", host
    r, evs, v = probe_in([call])
    assert r.returncode == 1 and v["errno"] == "EPERM", (r, v)
    assert [(e["syscall"], e["technique"]) for e in escapes(evs)] == [(call, "T1613")], evs


def test_ordinary_sockets_work_and_are_silent():
    """Positive control: unix, inet and netlink route sockets, no event."""
    script = ("%s socket-proto unix stream 0 && %s socket-proto inet stream 0 && "
              "%s socket-proto inet6 dgram 0 && %s socket-proto netlink raw 0" % (TRY, TRY, TRY, TRY))
    r, evs = run_as((), try_args(), ["sh", "-c", script])
    assert r.returncode == 0, r
    assert [json.loads(l)["permitted"] for l in r.stdout.splitlines()] == [True] * 4, r.stdout
    assert escapes(evs) == [], evs


def test_degraded_reports_surfaces_and_stays_quiet_on_ordinary_sockets():
    """Degraded mode refuses every socket; the ordinary ones quietly, the
    attack surface with an event."""
    script = "; ".join("%s %s" % (TRY, a) for a in (
        "socket-proto unix stream 0", "socket-proto netlink raw 0", "socket-netlink 9",
        "socket-family alg"))
    # No mount namespace: the helper is bound at its own path.
    r, evs = run_as([helper("aj-nouserns")], ["--allow-degraded", "--allow-unscoped-signals", "--bind-ro", "%s:%s" % (helper("aj-try"), helper("aj-try"))],
                    ["sh", "-c", script.replace(TRY, helper("aj-try"))])
    verdicts = [json.loads(l) for l in r.stdout.splitlines()]
    assert [v["errno"] for v in verdicts] == ["EPERM"] * 4, r
    assert [(e["args"][0], e["args"][2]) for e in escapes(evs)] == \
        [("AF_NETLINK", "NETLINK_AUDIT"), ("AF_ALG", 0)], evs


# ---- reconnaissance: /proc shows the sandbox's own boot ------------------------------------

UUID_RE = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"


def _read(path):
    with open(path) as f:
        return f.read()


def test_proc_cmdline_and_boot_id_are_not_the_hosts():
    import re
    host_cmdline = _read("/proc/cmdline")
    host_boot = _read("/proc/sys/kernel/random/boot_id").strip()
    r = run_aj([], ["sh", "-c", "cat /proc/cmdline; cat /proc/sys/kernel/random/boot_id; "
                                "echo x > /proc/sys/kernel/random/boot_id 2>/dev/null && echo writable; true"])
    assert r.returncode == 0, r
    cmdline, boot = r.stdout.splitlines()[:2]
    assert "writable" not in r.stdout, r.stdout
    # Control: the host's are readable and non-trivial (so "differs" means something).
    assert host_cmdline.strip() and re.match(UUID_RE, host_boot), (host_cmdline, host_boot)
    assert cmdline + "\n" != host_cmdline and cmdline.startswith("BOOT_IMAGE=/boot/vmlinuz-%s " % os.uname().release), cmdline
    assert re.match(UUID_RE, boot) and boot != host_boot, boot
    # A fresh one per run: nothing to recognise a host by across runs.
    r2 = run_aj([], ["cat", "/proc/sys/kernel/random/boot_id"])
    assert r2.stdout.strip() != boot and re.match(UUID_RE, r2.stdout.strip()), r2


UPTIME = r"""
import json, time
up = float(open("/proc/uptime").read().split()[0])
btime = [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0]
print(json.dumps({"uptime": up, "boottime": time.clock_gettime(time.CLOCK_BOOTTIME),
                  "monotonic": time.clock_gettime(time.CLOCK_MONOTONIC), "btime": btime}))
"""


def test_uptime_and_boot_clocks_count_from_the_sandboxs_start():
    host_up = float(_read("/proc/uptime").split()[0])
    if host_up < 300:
        pytest.skip("not applicable: the host booted %.0f s ago: too recent to tell its uptime from the sandbox's" % host_up)
    r = run_aj([], ["python3", "-c", UPTIME])
    assert r.returncode == 0 and r.result["layers"]["time_namespace"] is True, r
    inside = json.loads(r.stdout)
    # Control, the same script on the host: its clocks are the host's boot.
    p = subprocess.run(["python3", "-c", UPTIME], capture_output=True, text=True, timeout=30)
    host = json.loads(p.stdout)
    assert host["uptime"] >= 300 and host["boottime"] >= 300 and host["monotonic"] >= 250, host
    for k in ("uptime", "boottime", "monotonic"):
        # The sandbox started well under a minute ago; the host 5+ minutes.
        assert 0 <= inside[k] < 60, (k, inside)
    assert inside["btime"] > host["btime"] + 200, (inside, host)


def test_proc_locks_does_not_show_the_hosts_locks(hostdir):
    import fcntl
    import struct
    path = os.path.join(hostdir, "locked")
    with open(path, "w") as f:
        # An OFD write lock, as agentjail's uid-slot locks are.
        fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
        ino = ":%d " % os.fstat(f.fileno()).st_ino
        host = _read("/proc/locks")
        r = run_aj([], ["cat", "/proc/locks"])
    # Control: the host's /proc/locks shows the lock.
    assert any("OFDLCK" in l and ino in l for l in host.splitlines()), host
    assert r.returncode == 0 and ino not in r.stdout and "OFDLCK" not in r.stdout, r


# ---- decoys: not recognisable by their metadata ------------------------------------------------

DECOY_META = r"""
import json, os, socket, stat, time
SA = "/var/run/secrets/kubernetes.io/serviceaccount"
out = {"now": time.time()}
for k, p in (("sock", "/var/run/docker.sock"), ("token", SA + "/token"), ("sadir", SA)):
    st = os.lstat(p)
    out[k] = {"mode": st.st_mode, "mtime": st.st_mtime, "atime": st.st_atime}
out["sources"] = {l.split()[4]: l.split(" - ")[1].split()[1] for l in open("/proc/self/mountinfo")}
s = socket.socket(socket.AF_UNIX)
s.connect("/var/run/docker.sock")
s.sendall(b"GET /version HTTP/1.1\r\nHost: docker\r\n\r\n")
out["reply"] = s.recv(100).decode(errors="replace").split("\r\n")[0]
print(json.dumps(out))
"""


def test_decoys_look_aged_and_mounted_like_the_real_thing():
    host_up = float(_read("/proc/uptime").split()[0])
    if host_up < 300:
        pytest.skip("not applicable: the host booted %.0f s ago: a decoy made now would look as old as one made at boot" % host_up)
    host_btime = [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0]
    r, evs = run_as((), [], ["python3", "-c", DECOY_META])
    assert r.returncode == 0, r
    m = json.loads(r.stdout)
    now = m["now"]
    # docker.sock: a socket as dockerd makes it (srw-rw----), as old as the
    # host's boot, not the run.
    assert m["sock"]["mode"] == 0o140660, oct(m["sock"]["mode"])
    assert host_btime <= m["sock"]["mtime"] <= host_btime + 30, (host_btime, m["sock"])
    assert now - m["sock"]["mtime"] > 200, m
    # The service-account token: rewritten by a kubelet minutes ago.
    for k in ("token", "sadir"):
        assert 240 <= now - m[k]["mtime"] <= 3660, (k, now, m[k])
    # Mounted as Docker's and Kubernetes' tmpfs mounts are named, not "none"
    # or the runtime's name.
    assert m["sources"]["/var/run"] == "tmpfs" and m["sources"]["/"] == "tmpfs", m["sources"]
    # Still a decoy: the connect is a canary, and the client gets a 403.
    assert m["reply"] == "HTTP/1.1 403 Forbidden", m
    canaries = [e for e in evs if e["type"] == "canary"]
    assert [(e["decoy"], e["access"]) for e in canaries] == [("docker_socket", "connect")], evs


# ---- device nodes: an open is recorded, and reaches no device -----------------------------------

DEVICES = {"/dev/kvm": "T1068", "/dev/fuse": "T1068", "/dev/net/tun": "T1068", "/dev/uinput": "T1068",
           "/dev/userfaultfd": "T1068", "/dev/vhost-net": "T1068", "/dev/vhost-vsock": "T1068",
           "/dev/mem": "T1611", "/dev/kmem": "T1611", "/dev/port": "T1611", "/dev/cpu/0/msr": "T1611"}

OPEN_DEVICES = r"""
import fcntl, json, os, stat, sys
out = {}
for p in sys.argv[1:]:
    try:
        fd = os.open(p, os.O_RDWR)
    except OSError as e:
        out[p] = os.strerror(e.errno)
        continue
    st = os.fstat(fd)
    try:
        fcntl.ioctl(fd, 0xAE00)  # KVM_GET_API_VERSION; any device ioctl
        io = "ok"
    except OSError as e:
        io = os.strerror(e.errno)
    out[p] = {"chr": stat.S_ISCHR(st.st_mode), "size": st.st_size, "ioctl": io, "read": len(os.read(fd, 16))}
    os.close(fd)
print(json.dumps(out))
"""


def test_device_opens_are_canaries_and_reach_no_device():
    paths = sorted(DEVICES)
    r, evs = run_as((), [], ["python3", "-c", OPEN_DEVICES] + paths + ["/dev/null", "/dev/zero"])
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    for p in paths:
        # Opened, but no device behind it: an empty file that knows no ioctl.
        assert out[p] == {"chr": False, "size": 0, "ioctl": os.strerror(25), "read": 0}, (p, out[p])
    canaries = [e for e in evs if e["type"] == "canary"]
    assert sorted((e["decoy"], e["path"], e["access"], e["technique"]) for e in canaries) == \
        sorted(("device", p, "open", t) for p, t in DEVICES.items()), canaries
    # Positive control in the same run: the real nodes open silently.
    assert out["/dev/null"]["chr"] is True and out["/dev/zero"]["read"] == 16, out
    assert not [e for e in canaries if e["path"] in ("/dev/null", "/dev/zero")], canaries


def test_without_decoys_device_names_are_absent():
    """Control: the decoys are what records the open (and what answers it)."""
    r, evs = run_as((), ["--no-decoys"], ["python3", "-c", OPEN_DEVICES, "/dev/kvm", "/dev/net/tun"])
    assert r.returncode == 0, r
    assert json.loads(r.stdout) == {"/dev/kvm": os.strerror(2), "/dev/net/tun": os.strerror(2)}, r.stdout
    assert [e for e in evs if e["type"] == "canary"] == [], evs
