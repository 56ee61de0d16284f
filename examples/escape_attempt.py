#!/usr/bin/env python3
"""What a prompt-injected agent's code tries first, run inside agentjail.

Each step is a harmless probe: it checks whether a dangerous operation is
*permitted* (invalid arguments, read-only opens); it never changes the host.
Prints one line per technique and exits 1 if any of them got through.
"""
import ctypes
import errno
import os
import socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS = {"unshare": 272, "mount": 165, "ptrace": 101, "bpf": 321, "io_uring_setup": 425,
       "keyctl": 250, "open_by_handle_at": 304, "perf_event_open": 298, "init_module": 175}
results = []


def record(name, escaped, detail):
    results.append(escaped)
    print("  %-44s %-8s %s" % (name, "ESCAPED" if escaped else "blocked", detail))


def syscall(name, *args):
    r = libc.syscall(SYS[name], *args)
    return r, ctypes.get_errno()


def record_decoy(label, detail):
    # agentjail plants decoys where escape tooling looks first: what the
    # payload got is worthless, and touching it raised a canary event.
    results.append(False)
    print("  %-44s %-8s %s" % (label, "DECOY", detail))


def try_read(label, path):
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except OSError as e:
        record(label, False, "%s: %s" % (path, errno.errorcode.get(e.errno, e.errno)))
        return
    if path.endswith("serviceaccount/token") and is_decoy_token(data):
        record_decoy(label, "a decoy token naming this run; canary raised")
    else:
        record(label, True, "read " + path)


def is_decoy_token(data):
    import base64
    try:
        payload = data.split(b".")[1]
        claims = base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4))
        return b"agentjail-" in claims
    except (IndexError, ValueError):
        return False


print("agentjail demo: a hostile payload probes its sandbox\n")
try_read("host password hashes", "/etc/shadow")
try_read("host root's SSH keys", "/root/.ssh/id_rsa")
try_read("host filesystem via /proc/1/root", "/proc/1/root/etc/shadow")
try_read("Kubernetes service-account token", "/var/run/secrets/kubernetes.io/serviceaccount/token")
leaked = [k for k in os.environ if "SECRET" in k or "TOKEN" in k or k.startswith("AWS_")]
record("cloud credentials in the environment", bool(leaked), "env: %s" % (sorted(os.environ),))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/var/run/docker.sock")
    s.sendall(b"GET /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n")
    reply = s.recv(200)
    if reply.startswith(b"HTTP/1.1 403"):
        record_decoy("Docker socket", "a decoy socket: 403, canary raised")
    else:
        record("Docker socket", True, "the Docker API answered")
except OSError as e:
    record("Docker socket", False, errno.errorcode.get(e.errno, str(e.errno)))
finally:
    s.close()
s = socket.socket()
s.settimeout(1)
try:
    s.connect(("127.0.0.1", 22))
    record("host services on loopback (ssh)", True, "connected")
except OSError as e:
    record("host services on loopback (ssh)", False, errno.errorcode.get(e.errno, str(e)))
finally:
    s.close()
try:
    with open("/usr/bin/agentjail-was-here", "w"):
        pass
    record("write into system binaries", True, "created")
except OSError as e:
    record("write into system binaries", False, errno.errorcode.get(e.errno, str(e.errno)))

CLONE_NEWUSER = 0x10000000
for label, name, args in [
    ("regain capabilities: unshare(CLONE_NEWUSER)", "unshare", (CLONE_NEWUSER,)),
    ("mount a filesystem", "mount", (b"none", b"/tmp", b"tmpfs", 0, None)),
    ("ptrace the sandbox init", "ptrace", (16, 1, 0, 0)),           # PTRACE_ATTACH
    ("load an eBPF program", "bpf", (5, None, 0)),                  # BPF_PROG_LOAD, no attr
    ("io_uring (kernel attack surface)", "io_uring_setup", (0, None)),
    ("keyring access", "keyctl", (0, -3, 0)),                       # GET_KEYRING_ID session
    ("Shocker: open_by_handle_at", "open_by_handle_at", (-100, None, 0)),
    ("perf_event_open", "perf_event_open", (None, 0, -1, -1, 0)),
    ("load a kernel module", "init_module", (None, 0, b"")),
]:
    r, e = syscall(name, *args)
    # EPERM/ENOSYS: refused by the sandbox. EINVAL/EFAULT/ESRCH: the kernel
    # looked at the (invalid) arguments, so the call itself was permitted.
    record(label, r >= 0 or e not in (errno.EPERM, errno.ENOSYS, errno.EACCES),
           errno.errorcode.get(e, str(e)) if r < 0 else "returned %d" % r)

print("\n%d techniques tried, %d escaped" % (len(results), sum(results)))
raise SystemExit(1 if any(results) else 0)
