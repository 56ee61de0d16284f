"""Hardening claims that had no test of their own (docs/security-model.md).

Securebits, capability sets, no_new_privs, supplementary groups, the
scrubbed /proc/1/cmdline, recursive read-only binds, RLIMIT_NOFILE and
RLIMIT_FSIZE at their exact boundary, nested namespaces refused by the
max_*_namespaces sysctls (tested without seccomp, from the host), the
memfd_create and socket-protocol filters, bind sources checked on the
path and again on the opened fd, degraded mode's socket and network
refusals, and a rw bind listed before its ro parent.

Every assertion is a kernel outcome (errno, exit status, a value the
kernel reports inside) with a positive control: the same probe on the
host, or with the layer's condition lifted. Probes are tests/helpers/aj-try.c.
Runs as root and as nobody; the root-only parts say why.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, children, comm, nouserns, write, IS_ROOT, helper, must_skip, root_only, run_aj, try_args

PY = "/usr/bin/python3"
NS_KINDS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")
# securebits locked by caps.c: NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE,
# each with its _LOCKED bit, and KEEP_CAPS_LOCKED (KEEP_CAPS itself is
# cleared at execve).
SECUREBITS_LOCKED = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80  # 0xef
CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


# ---- helpers -------------------------------------------------------------------

def probe_json(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def on_host(*probe):
    """An aj-try probe on the host, no sandbox: the control."""
    p = subprocess.run([helper("aj-try")] + list(probe), capture_output=True, text=True, timeout=30)
    out = probe_json(p.stdout)
    assert out is not None and p.returncode in (0, 1), p
    assert out["permitted"] == (p.returncode == 0), p
    return out


def probes_inside(probes, args=(), prefix=(), aj_try=None):
    """Run several aj-try probes in ONE sandbox; one verdict per probe, in order."""
    path = aj_try or "/opt/aj-try"
    script = "; ".join("%s %s" % (path, " ".join(p)) for p in probes) + "; exit 0"
    binds = [] if aj_try else try_args()
    r = run_aj(binds + list(args), ["/bin/sh", "-c", script], prefix=prefix)
    assert r.returncode == 0, r
    outs = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(outs) == len(probes), r
    for p, o in zip(probes, outs):
        assert o["probe"] == p[0], (p, o)
    return outs, r


def blocked(out, errno_name):
    assert not out["permitted"], "permitted inside the sandbox: %s" % out
    assert out["errno"] == errno_name, "blocked with %s, expected %s: %s" % (out["errno"], errno_name, out)


def permitted(out):
    assert out["permitted"], "expected PERMITTED: %s" % out


def status_fields(text):
    fields = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return fields


def read_text(path):
    with open(path) as f:
        return f.read()




def wait_for_payload(sup, name, timeout=15):
    """Host pid of the payload (supervisor -> init -> payload) once it runs NAME."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for init in children(sup):
            for p in children(init):
                if comm(p) == name:
                    return init, p
        time.sleep(0.01)
    raise AssertionError("payload %s of supervisor %d never appeared" % (name, sup))


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@pytest.fixture
def hostdir():
    """A host temp dir every host uid can traverse (root mode runs as a per-run uid)."""
    d = tempfile.mkdtemp(prefix="ajtest-hard-")
    os.chmod(d, 0o755)
    mounts = []
    yield d, mounts
    for m in reversed(mounts):
        subprocess.run(["umount", m], capture_output=True)
        if os.path.ismount(m):
            subprocess.run(["umount", "-l", m], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def mount_in(hostdir, name, *mount_args):
    d, mounts = hostdir
    path = os.path.join(d, name)
    os.mkdir(path)
    subprocess.run(["mount"] + list(mount_args) + [path], check=True, capture_output=True)
    mounts.append(path)
    return path


# ---- identity: securebits, capabilities, no_new_privs, groups --------------------

def test_securebits_locked_inside():
    r = run_aj(try_args(), ["/opt/aj-try", "securebits"])
    out = probe_json(r.stdout)
    assert out is not None and r.returncode == 1, r
    assert out["detail"].startswith("securebits=0x%x:" % SECUREBITS_LOCKED), out
    # Control: a host process has them unlocked, and the probe says so.
    host = on_host("securebits")
    assert host["permitted"], host


def test_capability_sets_empty_and_no_new_privs():
    r = run_aj([], ["cat", "/proc/self/status"])
    assert r.returncode == 0, r
    inside = status_fields(r.stdout)
    for k in CAP_FIELDS:
        assert int(inside[k], 16) == 0, (k, inside[k])
    assert inside["NoNewPrivs"] == "1", inside["NoNewPrivs"]
    assert inside["Seccomp"] == "2", inside["Seccomp"]
    # Control: the same read on the host shows a bounding set (and, as
    # root, effective capabilities): the fields are real.
    host = status_fields(subprocess.run(["cat", "/proc/self/status"], capture_output=True,
                                        text=True, check=True).stdout)
    assert int(host["CapBnd"], 16) != 0, host["CapBnd"]
    if IS_ROOT:
        assert int(host["CapEff"], 16) != 0, host["CapEff"]


def test_supplementary_groups_dropped_in_root_mode(hostdir):
    root_only("setting supplementary groups on agentjail needs root, and rootless "
              "mode keeps the caller's groups by design (setgroups=deny)")
    d, _ = hostdir
    groups = ["setpriv", "--groups", "0,4,27"]
    # Control: setpriv really gives a process those groups.
    host = subprocess.run(groups + ["cat", "/proc/self/status"], capture_output=True, text=True, check=True)
    assert status_fields(host.stdout)["Groups"].split() == ["0", "4", "27"], host.stdout
    r = run_aj([], ["sh", "-c", "id -G; grep '^Groups:' /proc/self/status"], prefix=groups)
    assert r.returncode == 0, r
    ids, status = r.stdout.splitlines()
    assert ids == "1000", r.stdout  # the sandbox gid alone (unmapped groups would read 65534)
    assert status.split() == ["Groups:"], r.stdout
    # What the groups would be worth: a file readable by group 4 only.
    f = os.path.join(d, "adm-only")
    with open(f, "w") as fh:
        fh.write("AJTEST-ADM\n")
    os.chown(f, 0, 4)
    os.chmod(f, 0o640)
    ctl = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--groups", "4",
                          helper("aj-try"), "read", f], capture_output=True, text=True, timeout=30)
    assert probe_json(ctl.stdout)["permitted"], ctl  # group 4 alone reads it on the host
    r = run_aj(try_args() + ["--bind-ro", d + ":/data"], ["/opt/aj-try", "read", "/data/adm-only"],
               prefix=groups)
    out = probe_json(r.stdout)
    assert out is not None, r
    blocked(out, "EACCES")
    # Control in the same sandbox set-up: a world-readable neighbour reads,
    # so the refusal above is the group's, not the bind's or Landlock's.
    pub = os.path.join(d, "public")
    with open(pub, "w") as fh:
        fh.write("AJTEST-PUB\n")
    os.chmod(pub, 0o644)
    r = run_aj(try_args() + ["--bind-ro", d + ":/data"], ["/opt/aj-try", "read", "/data/public"], prefix=groups)
    assert probe_json(r.stdout)["permitted"], r


def test_proc_1_cmdline_is_scrubbed():
    marker = "ajmark" + secrets.token_hex(8)
    code = ("import sys, time\n"
            "sys.stdout.write(repr(open('/proc/1/cmdline', 'rb').read().rstrip(b'\\0')) + '\\n')\n"
            "sys.stdout.flush()\n"
            "time.sleep(30)\n")
    with tempfile.TemporaryDirectory(prefix="ajtest-%s-" % marker) as d:
        os.chmod(d, 0o755)
        out_path = os.path.join(d, "out")
        with open(out_path, "w") as out:
            p = subprocess.Popen([AJ_BIN, "run", "--result", os.path.join(d, "result.json"),
                                  "--env", "AJTEST_MARK=" + marker, "--timeout", "30", "--",
                                  PY, "-c", code], stdout=out, stderr=subprocess.DEVNULL)
        try:
            init, _ = wait_for_payload(p.pid, "python3")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not read_text(out_path).endswith("\n"):
                time.sleep(0.01)
            # Control: the marker is on agentjail's host command line, which
            # init (a fork of it) carried until it blanked it.
            with open("/proc/%d/cmdline" % p.pid, "rb") as f:
                assert marker.encode() in f.read()
            with open("/proc/%d/cmdline" % init, "rb") as f:
                host_view = f.read()
        finally:
            stop(p)
        inside = read_text(out_path)
    assert inside == "b'agentjail-init'\n", inside
    assert marker not in inside
    assert host_view.rstrip(b"\0") == b"agentjail-init", host_view[:64]


# ---- filesystem ------------------------------------------------------------------

def test_ro_bind_is_recursively_read_only(hostdir):
    root_only("mounting a tmpfs inside the bound directory needs root")
    d, _ = hostdir
    sub = mount_in(hostdir, "sub", "-t", "tmpfs", "-o", "size=1m,mode=1777", "ajtest-sub")
    # EROFS, not EACCES: the mount answers. If the submount were writable,
    # Landlock (read+execute on the bind) would answer EACCES instead.
    outs, _ = probes_inside([["create", "/data/sub/f"], ["create", "/data/f"]],
                            args=["--bind-ro", d + ":/data"])
    blocked(outs[0], "EROFS")
    blocked(outs[1], "EROFS")
    # Control: the same submount through --bind-rw is writable.
    outs, _ = probes_inside([["create", "/data/sub/f"]], args=["--bind-rw", d + ":/data"])
    permitted(outs[0])
    assert not os.path.exists(os.path.join(sub, "f"))  # the probe removed it


# ---- rlimits --------------------------------------------------------------------------

OPEN_UNTIL_44 = ("import errno, os\n"
                 "fd = -1\n"
                 "try:\n"
                 "    while fd < 44: fd = os.open('/dev/null', os.O_RDONLY)\n"
                 "    print('ok', fd)\n"
                 "except OSError as e:\n"
                 "    print(errno.errorcode[e.errno], fd)\n")


def test_open_files_limit_exact():
    # --open-files 40: fds 0..39 exist, the 41st open is EMFILE (N+5 = 45 asked).
    r = run_aj(["--open-files", "40"], [PY, "-c", OPEN_UNTIL_44])
    assert r.returncode == 0 and r.stdout == "EMFILE 39\n", r
    # Control: the same 45 fds under --open-files 64.
    r = run_aj(["--open-files", "64"], [PY, "-c", OPEN_UNTIL_44])
    assert r.returncode == 0 and r.stdout == "ok 44\n", r


WRITE_PAST_1M = ("import errno, os\n"
                 "fd = os.open('/tmp/f', os.O_WRONLY | os.O_CREAT, 0o600)\n"
                 "print(os.write(fd, bytes(1 << 20)))\n"
                 "try:\n"
                 "    print(os.write(fd, b'x'))\n"
                 "except OSError as e:\n"
                 "    print(errno.errorcode[e.errno])\n"
                 "print(os.fstat(fd).st_size)\n")


def test_file_size_limit_exact():
    # Python ignores SIGXFSZ, so the write past the limit fails with EFBIG.
    r = run_aj(["--file-size", "1M"], [PY, "-c", WRITE_PAST_1M])
    assert r.returncode == 0 and r.stdout.split() == ["1048576", "EFBIG", "1048576"], r
    # A shell keeps the default action: death by SIGXFSZ (128+25).
    r = run_aj(["--file-size", "1M"], ["sh", "-c", "head -c 1048577 /dev/zero > /tmp/f; echo $?"])
    assert r.returncode == 0 and r.stdout == "153\n", r
    # Control: the same writes under --file-size 2M.
    r = run_aj(["--file-size", "2M"], [PY, "-c", WRITE_PAST_1M])
    assert r.returncode == 0 and r.stdout.split() == ["1048576", "1", "1048577"], r


# ---- nested namespaces ------------------------------------------------------------

def test_nested_namespace_limits_are_zero_inside():
    r = run_aj([], ["sh", "-c", "cd /proc/sys/user && grep -H . max_*_namespaces"])
    assert r.returncode == 0, r
    inside = dict(l.split(":", 1) for l in r.stdout.splitlines())
    present = {k for k in NS_KINDS if os.path.exists("/proc/sys/user/max_%s_namespaces" % k)}
    assert {k[len("max_"):-len("_namespaces")] for k in inside} == present, inside
    assert set(inside.values()) == {"0"}, inside
    assert r.result["layers"]["nested_namespaces_refused"] is True, r.result["layers"]
    # Control: the host's own limits are not touched (it could not run agentjail otherwise).
    with open("/proc/sys/user/max_user_namespaces") as f:
        assert int(f.read()) > 0


# Joins a user namespace from the host (no seccomp filter on this process)
# and tries each kind of namespace in a throw-away child: the sysctls alone
# must refuse them with ENOSPC.
NEST_SCRIPT = r"""
import ctypes, errno, os, sys
FLAGS = [("user", 0x10000000), ("mnt", 0x00020000), ("pid", 0x20000000), ("net", 0x40000000),
         ("ipc", 0x08000000), ("uts", 0x04000000), ("cgroup", 0x02000000), ("time", 0x00000080)]
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/%s/ns/user" % sys.argv[1], os.O_RDONLY)
if libc.setns(fd, 0x10000000) != 0:
    print("setns=" + errno.errorcode[ctypes.get_errno()])
    sys.exit(0)
out = []
for name, flag in FLAGS:
    if not os.path.exists("/proc/self/ns/" + name):
        continue
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(flag) == 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    out.append("%s=%s" % (name, "ok" if code == 0 else errno.errorcode.get(code, code)))
print(" ".join(out))
"""


def nest_from_host(pid):
    p = subprocess.run([PY, "-c", NEST_SCRIPT, str(pid)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p
    return dict(kv.split("=") for kv in p.stdout.split())


def test_nested_namespaces_refused_without_seccomp():
    """The second layer alone: a process that joined the sandbox's user
    namespace from the host carries no seccomp filter, and still cannot
    create any namespace (ENOSPC from max_*_namespaces=0)."""
    p = subprocess.Popen([AJ_BIN, "run", "--timeout", "30", "--", "sleep", "30"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, payload = wait_for_payload(p.pid, "sleep")
        inside = nest_from_host(payload)
    finally:
        stop(p)
    assert "setns" not in inside, inside  # the join itself worked
    assert inside.get("user") == "ENOSPC", inside
    assert set(inside.values()) == {"ENOSPC"}, inside
    # Control: the same script against a user namespace of the test's own
    # (mapping the caller, as the nested user namespace's creator must be).
    c = subprocess.Popen(["unshare", "--user", "--map-root-user", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while comm(c.pid) != "sleep":  # exec'd: the namespace and its maps are in place
            assert time.monotonic() < deadline, "unshare --user never ran sleep"
            time.sleep(0.01)
        assert os.readlink("/proc/%d/ns/user" % c.pid) != os.readlink("/proc/self/ns/user")
        ctl = nest_from_host(c.pid)
    finally:
        c.kill()
        c.wait()
    assert set(ctl) == set(inside) and set(ctl.values()) == {"ok"}, ctl


# ---- seccomp argument filters: memfd_create, socket protocols --------------------

def test_memfd_needs_noexec_seal():
    outs, _ = probes_inside([["memfd-exec", "none"], ["memfd-exec", "exec"],
                             ["memfd-exec", "noexec-seal"]])
    if IS_ROOT and os.path.exists("/proc/sys/vm/memfd_noexec"):
        # Root mode, 6.3+: vm.memfd_noexec=2 in the sandbox's pid namespace
        # seals a memfd made without flags; the kernel will not execute it.
        blocked(outs[0], "EACCES")
        assert outs[0]["detail"].startswith("memfd created"), outs[0]
    else:
        blocked(outs[0], "EPERM")  # memfd_create without MFD_NOEXEC_SEAL
    blocked(outs[1], "EPERM")  # with MFD_EXEC
    blocked(outs[2], "EACCES")  # created sealed, and the kernel will not execute it
    assert outs[2]["detail"].startswith("memfd created"), outs[2]
    # Control: on the host an unsealed memfd holding a binary runs.
    try:
        with open("/proc/sys/vm/memfd_noexec") as f:
            sysctl = f.read().strip()
    except FileNotFoundError:
        sysctl = "0"  # before 6.3: every memfd is executable
    if sysctl != "0":
        must_skip("vm.memfd_noexec=%s on this host: no executable memfd for the control" % sysctl)
    permitted(on_host("memfd-exec", "none"))
    blocked(on_host("memfd-exec", "noexec-seal"), "EACCES")


REFUSED_PROTOCOLS = [
    ["socket-proto", "inet", "stream", "262"],     # IPPROTO_MPTCP
    ["socket-proto", "inet6", "stream", "262"],
    ["socket-proto", "inet", "stream", "132"],     # IPPROTO_SCTP
    ["socket-proto", "inet", "seqpacket", "132"],
    ["socket-proto", "inet", "dgram", "135"],      # just below UDP-Lite
    ["socket-proto", "inet6", "dgram", "137"],     # just above
    ["socket-proto", "inet", "dgram", "18"],       # just above UDP
]
ALLOWED_SOCKETS = [
    ["socket-proto", "inet", "stream", "0"],
    ["socket-proto", "inet", "stream", "6"],       # IPPROTO_TCP
    ["socket-proto", "inet", "dgram", "0"],
    ["socket-proto", "inet", "dgram", "17"],       # IPPROTO_UDP
    ["socket-proto", "inet", "dgram", "136"],      # IPPROTO_UDPLITE: UDP's own code, allowed
    ["socket-proto", "inet6", "dgram", "136"],
    ["socket-proto", "inet6", "stream", "0"],
    ["socket-proto", "inet6", "dgram", "0"],
    ["socket-proto", "unix", "stream", "0"],
    ["socket-proto", "unix", "dgram", "0"],
    ["socketpair"],
]


def test_socket_protocol_filter():
    outs, _ = probes_inside(REFUSED_PROTOCOLS + ALLOWED_SOCKETS)
    for probe, out in zip(REFUSED_PROTOCOLS, outs):
        # The filter answers what a kernel without the protocol says
        # (EPROTONOSUPPORT, or ESOCKTNOSUPPORT for a type with no protocol
        # at all), never ENOSYS; the host gives the same or makes it.
        assert not out["permitted"], (probe, out)
        assert out["errno"] in ("EPROTONOSUPPORT", "ESOCKTNOSUPPORT"), (probe, out)
        host = on_host(*probe)
        assert host["permitted"] or host["errno"] == out["errno"], (probe, host, out)
    for out in outs[len(REFUSED_PROTOCOLS):]:
        permitted(out)


# ---- bind sources -------------------------------------------------------------------

@pytest.mark.parametrize("target,says", [
    ("/proc", "under /proc"), ("/proc/self", "under /proc"), ("/sys", "under /sys"),
    ("/sys/fs/cgroup", "under /sys"), ("/dev", "under /dev"), ("/dev/shm", "under /dev"),
    ("/", "whole root"),
])
def test_bind_source_symlink_to_refused_path(hostdir, target, says):
    d, _ = hostdir
    link = os.path.join(d, "link")
    os.symlink(target, link)
    r = run_aj(["--bind-ro", link + ":/h"], ["sh", "-c", "echo AJTEST-RAN"])
    assert r.returncode == 2, r
    assert "AJTEST-RAN" not in r.stdout, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bind-ro" in lines[0] and says in lines[0], r.stderr


def test_bind_source_symlink_positive_control(hostdir):
    """A symlink in a bind source is refused even to an ordinary directory
    (a link a sandbox planted cannot be told from the operator's; see
    tests/integration/test_links.py); the real path binds."""
    d, _ = hostdir
    os.mkdir(os.path.join(d, "real"))
    os.chmod(os.path.join(d, "real"), 0o755)
    with open(os.path.join(d, "real", "f"), "w") as f:
        f.write("AJTEST-THROUGH-LINK\n")
    os.chmod(os.path.join(d, "real", "f"), 0o644)
    os.symlink(os.path.join(d, "real"), os.path.join(d, "link"))
    r = run_aj(["--bind-ro", os.path.join(d, "link") + ":/h"], ["cat", "/h/f"])
    assert r.returncode == 2 and "realpath" in r.stderr, r
    r = run_aj(["--bind-ro", os.path.realpath(os.path.join(d, "link")) + ":/h"], ["cat", "/h/f"])
    assert r.returncode == 0 and r.stdout == "AJTEST-THROUGH-LINK\n", r


@pytest.mark.parametrize("source", ["/run/agentjail", "/run/agentjail/uids.lock"])
def test_bind_source_under_run_agentjail_refused(source):
    r = run_aj(["--bind-ro", source + ":/h"], ["sh", "-c", "echo AJTEST-RAN"])
    assert r.returncode == 2, r
    assert "AJTEST-RAN" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "under /run/agentjail" in lines[0], r.stderr


@pytest.mark.parametrize("kind", ["procfs", "device-node", "host-root"])
def test_bind_source_checked_on_the_opened_fd(hostdir, kind):
    """The mount layer alone: a source whose path passes the policy check
    (it is an ordinary path under /tmp) but whose opened fd is a kernel
    filesystem, a device node or the host's root is refused by init."""
    root_only("mounting procfs, binding / or creating a device node needs root")
    d, _ = hostdir
    if kind == "procfs":
        src, says = mount_in(hostdir, "p", "-t", "proc", "ajtest-proc"), "host's proc filesystem"
    elif kind == "host-root":
        src, says = mount_in(hostdir, "r", "--bind", "/"), "host's root directory"
    else:
        src, says = os.path.join(d, "null"), "device node"
        os.mknod(src, 0o666 | 0o020000, os.makedev(1, 3))
    r = run_aj(["--bind-ro", src + ":/h"], ["sh", "-c", "echo AJTEST-RAN"])
    assert r.returncode == 125, r
    assert "AJTEST-RAN" not in r.stdout
    assert says in r.stderr and "refused" in r.stderr, r.stderr
    assert r.result["status"] == "setup_error", r.result
    # Control: an ordinary directory at the same kind of path is bound.
    ok = os.path.join(d, "ok")
    os.mkdir(ok)
    os.chmod(ok, 0o755)
    r = run_aj(["--bind-ro", ok + ":/h"], ["sh", "-c", "echo AJTEST-RAN"])
    assert r.returncode == 0 and r.stdout == "AJTEST-RAN\n", r


def test_rw_bind_listed_before_its_ro_parent_refused(hostdir):
    d, _ = hostdir
    d1, d2 = os.path.join(d, "d1"), os.path.join(d, "d2")
    for x in (d1, d2, os.path.join(d1, "out")):
        os.mkdir(x)
        os.chmod(x, 0o777)
    for args in (["--bind-rw", d2 + ":/data/out", "--bind-ro", d1 + ":/data"],
                 ["--bind-ro", d1 + ":/data", "--bind-rw", d2 + ":/data/out"]):
        r = run_aj(args, ["sh", "-c", "echo AJTEST-RAN"])
        assert r.returncode == 2, (args, r)
        assert "AJTEST-RAN" not in r.stdout
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "/data/out" in lines[0] and "read-only bind /data" in lines[0], r.stderr
    # Control: the rw bind beside the ro one, and it is writable.
    r = run_aj(["--bind-rw", d2 + ":/out", "--bind-ro", d1 + ":/data"],
               ["sh", "-c", "echo x > /out/f && cat /out/f"])
    assert r.returncode == 0 and r.stdout == "x\n", r
    assert os.path.exists(os.path.join(d2, "f"))


# ---- degraded mode --------------------------------------------------------------------

def test_host_refusing_only_network_namespaces():
    # The clone asks for the network namespace with the others (security
    # model step 6b). A host that refuses only network namespaces gets a
    # setup error that says so and what to do, not a sandbox without one.
    r = run_aj([], ["sh", "-c", "echo AJTEST-RAN"], prefix=nouserns("--net-only"))
    assert r.returncode == 125 and "AJTEST-RAN" not in r.stdout, r
    assert r.result["status"] == "setup_error", r.result
    assert "cannot create namespaces" in r.stderr and "--allow-degraded" in r.stderr, r.stderr
    # With --allow-degraded the refusal degrades the whole run, as on hosts
    # refusing them all.
    r = run_aj(["--allow-degraded"], ["sh", "-c", "echo AJTEST-RAN"], prefix=nouserns("--net-only"))
    assert r.returncode == 0 and r.stdout == "AJTEST-RAN\n", r
    assert r.result["degraded"] is True and r.result["layers"]["network_namespace"] is False, r.result


def test_degraded_loopback_means_no_network():
    """Without a network namespace there is no private loopback to give: a
    degraded run (loopback is the default mode) refuses network sockets
    like --network none, and its result says so."""
    code = ("import socket\ntry:\n    socket.socket().bind(('127.0.0.1', 0)); print('BOUND')\n"
            "except OSError as e:\n    print('REFUSED', e.errno)\n")
    for args in ([], ["--network", "loopback"]):
        r = run_aj(["--allow-degraded"] + args, ["python3", "-c", code], prefix=nouserns())
        assert r.returncode == 0 and r.stdout.startswith("REFUSED"), r
        assert r.result["degraded"] is True, r.result
        assert "no private loopback" in r.result["degraded_reason"], r.result
    # Control: with namespaces the same bind works (private lo), and
    # --network none degraded says nothing of a loopback.
    r = run_aj([], ["python3", "-c", code])
    assert r.returncode == 0 and r.stdout == "BOUND\n", r
    q = run_aj(["--allow-degraded", "--network", "none"], ["python3", "-c", code], prefix=nouserns())
    assert q.returncode == 0 and q.stdout.startswith("REFUSED") and q.result["degraded"] is True, q
    assert "loopback" not in q.result["degraded_reason"], q.result


DEGRADED_SOCKETS = [
    ["socket-proto", "inet", "stream", "0"],
    ["socket-proto", "inet", "dgram", "0"],
    ["socket-proto", "inet6", "dgram", "0"],
    ["socket-proto", "unix", "stream", "0"],
    ["socket-proto", "unix", "dgram", "0"],
    ["socket-proto", "netlink", "raw", "0"],       # NETLINK_ROUTE
]


def test_degraded_refuses_sockets_but_not_socketpair():
    aj_try = helper("aj-try")  # degraded: no remapping, bound at its host path
    outs, r = probes_inside(DEGRADED_SOCKETS + [["socketpair"]], prefix=nouserns(),
                            args=["--allow-degraded", "--bind-ro", aj_try], aj_try=aj_try)
    assert r.result["degraded"] is True, r.result
    for out in outs[:-1]:
        blocked(out, "EPERM")
    permitted(outs[-1])
    # Control: the same probes in a full sandbox (its own network namespace).
    outs, r = probes_inside(DEGRADED_SOCKETS + [["socketpair"]])
    assert r.result["degraded"] is False
    for out in outs:
        permitted(out)


def test_fifo_at_a_file_bind_target_does_not_block(hostdir):
    # A file bind whose mount point lies in a writable bind: a FIFO planted
    # there (by an earlier run) must not be opened while the mount point is
    # made, which would block the set-up for ever.
    d, _ = hostdir
    rw = os.path.join(d, "rw")
    os.mkdir(rw)
    os.chmod(rw, 0o777)
    os.mkfifo(os.path.join(rw, "f"))
    src = os.path.join(d, "src")
    write(src, "AJTEST-FILE\n")
    r = run_aj(["--bind-rw", rw + ":/data", "--bind-ro", src + ":/data/f"], ["cat", "/data/f"], timeout=20)
    assert r.returncode == 0 and r.stdout == "AJTEST-FILE\n", r
