"""`agentjail run`: exit status, result JSON, flags, root filesystem, fds.

Every assertion is an observable outcome (exit status, errno seen inside,
file on the host, kernel state read inside); each denial has a positive
control next to it. Lifecycle (timeouts, signals, leaks, degraded mode) is
in test_run_lifecycle.py.
"""
import json
import os
import re
import socket
import subprocess
import tempfile

import pytest

from conftest import write, AJ_BIN, IS_ROOT, CG_LIMITS, ETC_GENERATED, ETC_NEVER, etc_allowed_paths, run_aj

PY = "/usr/bin/python3"
UID_BASE, UID_COUNT = 1610612736, 65536
NS_LAYERS = ("user_namespace", "pid_namespace", "mount_namespace", "network_namespace",
             "ipc_namespace", "uts_namespace", "cgroup_namespace", "time_namespace")


def py(code, args=(), **kw):
    """Run CODE with the host's python3 inside a sandbox."""
    return run_aj(list(args), [PY, "-c", code], **kw)


def py_json(code, args=(), **kw):
    """Run CODE inside; it prints one JSON document on stdout."""
    r = py(code, args, **kw)
    assert r.returncode == 0, r
    return json.loads(r.stdout)




# ---- exit status ------------------------------------------------------------

@pytest.mark.parametrize("cmd,code,status,sig", [
    (["true"], 0, "ok", 0),
    (["sh", "-c", "exit 3"], 3, "nonzero_exit", 0),
    (["sh", "-c", "exit 255"], 255, "nonzero_exit", 0),
    (["sh", "-c", "kill -TERM $$"], 128 + 15, "signaled", 15),
    (["sh", "-c", "kill -KILL $$"], 128 + 9, "signaled", 9),
    (["sh", "-c", "kill -USR1 $$"], 128 + 10, "signaled", 10),
])
def test_exit_status_mirrors_payload(cmd, code, status, sig):
    r = run_aj([], cmd)
    assert r.returncode == code, r
    assert r.result["status"] == status, r
    assert r.result["exit_code"] == code, r
    assert r.result["signal"] == sig, r


def test_command_not_found_is_127():
    r = run_aj([], ["no-such-command-ajtest"])
    assert r.returncode == 127, r
    assert "no-such-command-ajtest" in r.stderr
    assert r.result["exit_code"] == 127
    # Control: an existing command found through the same PATH search.
    assert run_aj([], ["true"]).returncode == 0


def test_not_executable_is_126():
    r = run_aj([], ["/etc/passwd"])  # exists inside, mode 0644
    assert r.returncode == 126, r
    assert r.result["exit_code"] == 126
    # Control: an executable file at an absolute path runs.
    assert run_aj([], ["/bin/true"]).returncode == 0


@pytest.mark.parametrize("args,flag", [
    (["--bogus", "--", "true"], "--bogus"),
    (["--timeout", "abc", "--", "true"], "--timeout"),
    (["--timeout", "0", "--", "true"], "--timeout"),
    (["--network", "wifi", "--", "true"], "--network"),
    (["--uid", "x", "--", "true"], "--uid"),
    (["--gid", "-1", "--", "true"], "--gid"),
    (["--tmp-size", "12", "--", "true"], "--tmp-size"),
    (["--workdir", "relative", "--", "true"], "--workdir"),
    (["--bind-ro", "/nonexistent-ajtest", "--", "true"], "--bind-ro"),
    (["--bind-rw", "/nonexistent-ajtest:/x", "--", "true"], "--bind-rw"),
    (["--timeout"], "--timeout"),
    ([], "command"),
])
def test_bad_command_line_is_2_with_one_line(args, flag):
    p = subprocess.run([AJ_BIN, "run"] + args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert flag in lines[0], p.stderr
    assert p.stdout == ""


def test_missing_flag_argument_is_reported_as_such():
    # A documented flag given as the last word has no value: the message
    # must say so, not call the flag unknown.
    p = subprocess.run([AJ_BIN, "run", "--hostname"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    assert "--hostname" in p.stderr
    assert "unknown" not in p.stderr, p.stderr
    assert "argument" in p.stderr, p.stderr


def test_setup_error_is_125_with_one_line():
    r = run_aj(["--workdir", "/nonexistent-ajtest"], ["true"])
    assert r.returncode == 125, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "workdir" in lines[0] and "/nonexistent-ajtest" in lines[0]
    assert r.result["status"] == "setup_error"
    assert r.result["exit_code"] == 125
    assert "workdir" in r.result["error"]
    # Control: a workdir that exists inside.
    r = run_aj(["--workdir", "/usr"], ["pwd"])
    assert r.returncode == 0 and r.stdout == "/usr\n", r


# ---- result JSON --------------------------------------------------------------

def test_result_default_run_layers_mode_uid():
    r = run_aj([], ["true"])
    assert r.returncode == 0, r
    res = r.result
    assert res["status"] == "ok" and res["exit_code"] == 0 and res["signal"] == 0
    assert res["degraded"] is False
    assert re.fullmatch(r"[0-9a-f]{64}", res["policy_sha256"]), res
    # Limits nobody asked for are off: CPU bandwidth, CPU time, output.
    off = sorted(k for k, v in res["layers"].items() if not v)
    # landlock_net: Landlock's TCP rules come with --network none; the
    # default private loopback has the network namespace as its boundary.
    asked_only = ["cpu_bandwidth_limit", "cpu_time_limit", "landlock_net", "output_limit"]
    # A cgroup with the default memory and pids limits where this caller
    # can have one (root; a delegated cgroup v2); elsewhere rlimits only,
    # and said so.
    if not CG_LIMITS:
        asked_only += ["cgroup", "memory_limit", "pids_limit"]
    # Layers this kernel does not have (docs/security-model.md, section 6).
    if res["landlock_abi"] < 6:
        asked_only.append("landlock_scope")
    if not os.path.exists("/proc/self/ns/time"):
        asked_only.append("time_namespace")
    if IS_ROOT:
        assert off == sorted(asked_only), res["layers"]
        assert res["mode"] == "root"
        assert UID_BASE <= res["host_uid"] < UID_BASE + UID_COUNT, res
    else:
        assert off == sorted(asked_only + ["per_run_host_uid"]), res["layers"]
        assert res["mode"] == "rootless"
        assert res["host_uid"] == os.geteuid()
    for name in NS_LAYERS + ("private_root", "seccomp", "landlock_fs", "no_new_privs",
                             "capabilities_dropped", "rlimits", "fds_closed",
                             "environment_cleared", "new_session", "fresh_keyring"):
        assert name in res["layers"], name


def test_result_resource_usage():
    code = ("import time\nb = b'x' * (80 << 20)\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\ntime.sleep(0.2)\n")
    r = py(code)
    assert r.returncode == 0, r
    assert r.result["wall_ms"] >= 500, r.result
    assert r.result["wall_ms"] < 10000, r.result
    assert r.result["cpu_ms"] >= 250, r.result
    assert r.result["max_rss_kb"] >= 80 * 1024, r.result
    # Control: an idle payload uses little of either. Its cpu_ms is the
    # sandbox's own setup inside the run's cgroup, which is slow under
    # emulation (qemu TCG), so compare it with the busy run rather than with
    # a fixed bound: the busy one spent at least 300 ms more.
    q = run_aj([], ["true"])
    assert q.result["cpu_ms"] + 250 <= r.result["cpu_ms"], (q.result, r.result)
    assert q.result["max_rss_kb"] < 40 * 1024, q.result


def test_policy_sha256_depends_on_flags():
    a1 = run_aj(["--hostname", "aaa", "--env", "X=1"], ["true"]).result["policy_sha256"]
    a2 = run_aj(["--hostname", "aaa", "--env", "X=1"], ["true"]).result["policy_sha256"]
    b = run_aj(["--hostname", "bbb", "--env", "X=1"], ["true"]).result["policy_sha256"]
    c = run_aj(["--hostname", "aaa", "--env", "X=2"], ["true"]).result["policy_sha256"]
    d = run_aj(["--hostname", "aaa", "--env", "X=1", "--network", "none"], ["true"]).result["policy_sha256"]
    assert a1 == a2
    assert len({a1, b, c, d}) == 4, (a1, b, c, d)


def test_concurrent_runs_get_distinct_host_uids():
    if not IS_ROOT:
        r = run_aj([], ["true"])
        assert r.result["host_uid"] == 65534 == os.geteuid(), r.result
        return
    with tempfile.TemporaryDirectory(prefix="ajtest-res-") as d:
        paths = [os.path.join(d, "r%d.json" % i) for i in range(2)]
        procs = [subprocess.Popen([AJ_BIN, "run", "--result", p, "--", "sleep", "0.5"]) for p in paths]
        assert [p.wait(timeout=30) for p in procs] == [0, 0]
        uids = [json.load(open(p))["host_uid"] for p in paths]
    assert all(UID_BASE <= u < UID_BASE + UID_COUNT for u in uids), uids
    assert uids[0] != uids[1], uids


# ---- flags --------------------------------------------------------------------

def test_bind_ro_readable_not_writable(hostdir):
    f = os.path.join(hostdir, "f")
    write(f, "hello\n", 0o666)  # DAC would allow the write: the mount must refuse it
    code = ("import os, errno, json\nout = {'read': open('/data/f').read()}\n"
            "try:\n    os.close(os.open('/data/f', os.O_WRONLY)); out['write'] = 'ok'\n"
            "except OSError as e:\n    out['write'] = errno.errorcode[e.errno]\n"
            "print(json.dumps(out))\n")
    out = py_json(code, ["--bind-ro", f + ":/data/f"])
    assert out == {"read": "hello\n", "write": "EROFS"}
    with open(f) as fh:
        assert fh.read() == "hello\n"
    # Control: the same file bound read-write takes the write.
    code_w = "open('/data/f', 'w').write('changed\\n'); print('{}')"
    py_json(code_w, ["--bind-rw", f + ":/data/f"])
    with open(f) as fh:
        assert fh.read() == "changed\n"


def test_bind_rw_write_lands_on_host_owned_by_run_uid(hostdir):
    out = os.path.join(hostdir, "out")
    os.mkdir(out)
    os.chmod(out, 0o777)
    r = run_aj(["--bind-rw", out + ":/out"], ["sh", "-c", "echo payload > /out/w"])
    assert r.returncode == 0, r
    st = os.stat(os.path.join(out, "w"))
    with open(os.path.join(out, "w")) as f:
        assert f.read() == "payload\n"
    assert st.st_uid == r.result["host_uid"], (st.st_uid, r.result)
    if IS_ROOT:
        assert UID_BASE <= st.st_uid < UID_BASE + UID_COUNT
    else:
        assert st.st_uid == os.geteuid()


def test_bind_same_path_and_remap(hostdir):
    write(os.path.join(hostdir, "f"), "x1\n")
    code = "import os, json, sys\nprint(json.dumps({p: os.path.exists(p) for p in sys.argv[1:]}))"
    r = run_aj(["--bind-ro", hostdir + ":/data"], [PY, "-c", code, "/data/f", hostdir + "/f"])
    assert r.returncode == 0, r
    assert json.loads(r.stdout) == {"/data/f": True, hostdir + "/f": False}
    # Without SANDBOX, the host path is used inside.
    r = run_aj(["--bind-ro", hostdir], [PY, "-c", code, "/data/f", hostdir + "/f"])
    assert json.loads(r.stdout) == {"/data/f": False, hostdir + "/f": True}, r


def dd(path, kib):
    return ["sh", "-c", "dd if=/dev/zero of=%s bs=1k count=%d 2>&1" % (path, kib)]


def test_tmpfs_size_limit():
    r = run_aj(["--tmpfs", "/scratch:1M"], dd("/scratch/big", 2048))
    assert r.returncode != 0, r
    assert "No space left on device" in r.stdout, r
    # Control: below the limit.
    r = run_aj(["--tmpfs", "/scratch:1M"], dd("/scratch/small", 512))
    assert r.returncode == 0, r


def test_tmp_is_size_limited():
    r = run_aj(["--tmp-size", "1M"], dd("/tmp/big", 2048))
    assert r.returncode != 0, r
    assert "No space left on device" in r.stdout, r
    # Control: the default /tmp (at least 64M) takes the same write.
    r = run_aj([], dd("/tmp/big", 2048))
    assert r.returncode == 0, r
    # And the default is bounded too: half the memory limit where a cgroup
    # enforces one (256M here: 128M), else 64M (docs/limits.md).
    args = ["--memory", "256M"] if CG_LIMITS else []
    r = run_aj(args, ["df", "-k", "/tmp"])
    size_k = int(r.stdout.splitlines()[1].split()[1])
    assert size_k == (128 if CG_LIMITS else 64) * 1024, r
    r = run_aj(args, dd("/tmp/big", size_k + 1024))
    assert r.returncode != 0 and "No space left on device" in r.stdout, r


def test_workdir():
    assert run_aj([], ["pwd"]).stdout == "/tmp\n"
    r = run_aj(["--tmpfs", "/work", "--workdir", "/work"], ["sh", "-c", "pwd; touch rel && ls /work"])
    assert r.returncode == 0, r
    assert r.stdout == "/work\nrel\n"


def env_inside(args, host_env):
    r = run_aj(args, ["env"], env=host_env)
    assert r.returncode == 0, r
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def test_environment_starts_empty():
    host = dict(os.environ, AJ_SECRET_TOKEN="s3cr3t", AWS_SECRET_ACCESS_KEY="k")
    env = env_inside([], host)
    assert set(env) == {"PATH", "HOME"}, env
    assert env["HOME"] == "/tmp"
    env = env_inside(["--env", "A=1", "--env", "B=two words"], host)
    assert env == dict(env, A="1", B="two words") and set(env) == {"PATH", "HOME", "A", "B"}, env
    # --env overrides the defaults.
    assert env_inside(["--env", "HOME=/work"], host)["HOME"] == "/work"


def test_env_pass():
    host = dict(os.environ, AJ_PASSED="v1", AJ_OTHER="v2")
    env = env_inside(["--env-pass", "AJ_PASSED"], host)
    assert env.get("AJ_PASSED") == "v1" and "AJ_OTHER" not in env, env
    host.pop("AJ_PASSED")
    env = env_inside(["--env-pass", "AJ_PASSED"], host)
    assert "AJ_PASSED" not in env and set(env) == {"PATH", "HOME"}, env


def test_hostname():
    assert run_aj([], ["hostname"]).stdout == "agentjail\n"
    r = run_aj(["--hostname", "box-7"], ["sh", "-c", "hostname; cat /etc/hostname"])
    assert r.stdout == "box-7\nbox-7\n", r
    assert socket.gethostname() != "box-7"  # the host's name is untouched


@pytest.mark.parametrize("uid,gid", [(None, None), (0, 0), (4242, 777)])
def test_uid_gid(uid, gid):
    args = []
    if uid is not None:
        args += ["--uid", str(uid), "--gid", str(gid)]
    r = run_aj(args, ["sh", "-c", "id -u; id -g"])
    want_u, want_g = (1000, 1000) if uid is None else (uid, gid)
    assert r.stdout.split() == [str(want_u), str(want_g)], r


IFACES = """
import fcntl, json, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
up = {}
for line in open('/proc/net/dev').read().splitlines()[2:]:
    n = line.split(':')[0].strip()
    r = fcntl.ioctl(s, 0x8913, struct.pack('16sH14x', n.encode(), 0))  # SIOCGIFFLAGS
    up[n] = bool(struct.unpack('16sH14x', r)[1] & 1)
c = socket.socket()
c.settimeout(2)
try:
    c.connect(('127.0.0.1', 9)); conn = 'ok'
except OSError as e:
    conn = e.__class__.__name__
print(json.dumps({'up': up, 'connect': conn}))
"""

ECHO = """
import json, socket, threading
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(100).upper()); c.close()
t = threading.Thread(target=serve, daemon=True); t.start()  # no hang if the client fails
cl = socket.create_connection(('127.0.0.1', srv.getsockname()[1]), timeout=5)
cl.sendall(b'ping'); print(json.dumps(cl.recv(100).decode())); t.join()
"""


def test_network_none():
    out = py_json(IFACES, ["--network", "none"])
    assert [n for n, u in out["up"].items() if u] == [], out
    assert set(out["up"]) <= {"lo"}, out  # no host interface
    r = py(ECHO, ["--network", "none"])
    assert r.returncode != 0, r  # not even a loopback server
    # Refused for the right reason: Landlock (ABI 4+) refuses TCP outright;
    # without it lo is down (test_network_loopback is the control, where
    # the same connect is merely refused by the closed port and the server runs).
    if r.result["landlock_abi"] >= 4:
        assert out["connect"] == "PermissionError", out
        assert "PermissionError" in r.stderr, r.stderr
    else:
        assert out["connect"] in ("OSError", "PermissionError"), out
        assert "Cannot assign requested address" in r.stderr or "unreachable" in r.stderr, r.stderr


@pytest.mark.parametrize("args", [[], ["--network", "loopback"]], ids=["default", "explicit"])
def test_network_loopback(args):
    """The default: a private lo that is up, so local servers (Jupyter
    kernels, test servers, http.server) work; nothing else exists."""
    out = py_json(IFACES, args)
    assert out["up"] == {"lo": True}, out  # only a private lo
    r = py(ECHO, args)
    assert r.returncode == 0 and json.loads(r.stdout) == "PING", r


def test_python_payload():
    code = r"""
import csv, json, sqlite3, os
os.chdir('/tmp')
rows = [{'n': i, 'sq': i * i} for i in range(10)]
with open('d.csv', 'w', newline='') as f:
    w = csv.DictWriter(f, ['n', 'sq']); w.writeheader(); w.writerows(rows)
db = sqlite3.connect('/tmp/d.db')
db.execute('create table t (n int, sq int)')
with open('d.csv') as f:
    db.executemany('insert into t values (:n, :sq)', csv.DictReader(f))
db.commit()
total = db.execute('select sum(sq) from t').fetchone()[0]
json.dump({'total': total}, open('out.json', 'w'))
print(json.load(open('out.json'))['total'])
"""
    r = run_aj([], ["python3", "-c", code])
    assert r.returncode == 0, r
    assert r.stdout == "285\n"


# ---- root filesystem ------------------------------------------------------------

SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
ETC_BINDS = [p for p in etc_allowed_paths() if not os.path.islink(p)]
ETC = ETC_GENERATED | {p.split("/")[2] for p in etc_allowed_paths()}


def test_root_is_read_only():
    code = ("import os, errno, json, sys\nout = {}\nfor p in sys.argv[1:]:\n"
            "    try:\n        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)); out[p] = 'ok'\n"
            "    except OSError as e:\n        out[p] = errno.errorcode[e.errno]\n"
            "print(json.dumps(out))\n")
    r = run_aj(["--uid", "0", "--gid", "0"],
               [PY, "-c", code, "/x", "/etc/x", "/usr/x", "/etc/passwd", "/tmp/x", "/dev/shm/x"])
    assert json.loads(r.stdout) == {"/x": "EROFS", "/etc/x": "EROFS", "/usr/x": "EROFS",
                                    "/etc/passwd": "EROFS", "/tmp/x": "ok", "/dev/shm/x": "ok"}, r


def test_top_level_and_etc_entries(hostdir):
    r = run_aj(["--bind-ro", hostdir + ":/data"], ["sh", "-c", "ls -A /; echo --; ls -A /etc; echo --; cat /etc/passwd"])
    assert r.returncode == 0, r
    top, etc, passwd = r.stdout.split("--\n")
    # "var": /var/run holds the decoys (docker.sock, service-account token).
    want = {p[1:] for p in SYSTEM if os.path.lexists(p)} | {"dev", "etc", "proc", "tmp", "data", "var"}
    assert set(top.split()) == want, top
    assert set(etc.split()) == ETC, set(etc.split()) ^ ETC
    assert os.path.exists("/etc/shadow")  # control: the host has one
    assert "shadow" not in etc.split()
    assert "agent:x:1000:1000:" in passwd
    host_users = [l.split(":")[0] for l in open("/etc/passwd") if l.strip()]
    assert set(host_users) - {"root", "nobody"}, "control: host has other users"
    inside_users = {l.split(":")[0] for l in passwd.splitlines()}
    assert inside_users == {"root", "agent", "nobody"}, passwd


def test_host_etc_secrets_never_visible():
    """The allow-list gives programs their configuration (matplotlib,
    Java, OpenSSL, services, os-release); no secret or identity file of the
    host is ever there."""
    paths = ["/etc/" + n for n in ETC_NEVER]
    code = "import os, sys\nprint(' '.join(p for p in sys.argv[1:] if os.path.lexists(p)))"
    r = run_aj([], [PY, "-c", code] + paths)
    assert r.returncode == 0 and r.stdout.strip() == "", r
    # Control: the host has several of them, and the sandbox sees the
    # allowed configuration.
    assert sum(os.path.lexists(p) for p in paths) >= 5
    present = [p for p in ("/etc/os-release", "/etc/ssl/openssl.cnf", "/etc/services") if os.path.exists(p)]
    assert present, "control: the host has some of the allow-listed files"
    r = run_aj([], ["sh", "-c", "cat \"$@\" > /dev/null && echo read-all", "sh"] + present)
    assert r.returncode == 0 and r.stdout == "read-all\n", r


def test_policy_adds_read_only_etc_entries(hostdir):
    conf = os.path.join(hostdir, "app.conf")
    with open(conf, "w") as f:
        f.write("key=value\n")
    os.chmod(conf, 0o644)
    r = run_aj(["--bind-ro", conf + ":/etc/myapp/app.conf"], ["cat", "/etc/myapp/app.conf"])
    assert r.returncode == 0 and r.stdout == "key=value\n", r
    # Never writable, never over what agentjail generates, never /etc itself.
    for args, words in ((["--bind-rw", hostdir + ":/etc/myapp"], "read-only"),
                        (["--bind-ro", conf + ":/etc/passwd"], "generated"),
                        (["--bind-ro", conf + ":/etc/hosts"], "generated"),
                        (["--bind-ro", hostdir + ":/etc"], "reserved")):
        r = run_aj(args, ["true"])
        assert r.returncode == 2 and words in r.stderr, (args, r)


def test_mountinfo_has_no_unnamed_host_path(hostdir):
    bound = os.path.join(hostdir, "b")
    os.mkdir(bound)
    os.chmod(bound, 0o755)
    r = run_aj(["--bind-ro", bound + ":/data/b", "--tmpfs", "/scratch"],
               ["cat", "/proc/self/mountinfo"])
    assert r.returncode == 0, r
    mounts = {}
    for line in r.stdout.splitlines():
        f = line.split()
        sep = f.index("-")
        mounts[f[4]] = (f[3], f[sep + 1])
    allowed = {p for p in SYSTEM if os.path.isdir(p) and not os.path.islink(p)}
    allowed |= set(ETC_BINDS)
    allowed |= {"/", "/tmp", "/proc", "/dev", "/dev/shm", "/data/b", "/scratch"}
    # /var/run: agentjail's own tmpfs for the decoys, not a host path.
    assert mounts.get("/var/run", ("/", "tmpfs"))[1] == "tmpfs", mounts
    allowed.add("/var/run")
    extra = [m for m in mounts if m not in allowed and not m.startswith(("/proc/", "/dev/"))]
    assert extra == [], extra
    assert "/data/b" in mounts, mounts  # control: the named bind is listed
    assert mounts["/"][1] == "tmpfs" and mounts["/proc"][1] == "proc", mounts
    # Host filesystems appear only at the system paths and the named bind.
    for m, (root, fstype) in mounts.items():
        if m.startswith("/proc/") or m.startswith("/dev/"):
            assert fstype in ("proc", "tmpfs", "devtmpfs", "devpts"), (m, root, fstype)
        elif fstype not in ("tmpfs", "proc"):
            assert m in allowed - {"/", "/tmp", "/proc", "/dev", "/dev/shm", "/scratch"}, (m, root, fstype)


def test_proc_is_the_sandbox_pid_namespace():
    r = run_aj([], ["sh", "-c", "grep -E '^(Name|PPid):' /proc/1/status; echo $$"])
    assert r.returncode == 0, r
    assert r.stdout.split() == ["Name:", "agentjail-init", "PPid:", "0", "2"], r
    r = run_aj([], ["ls", "/proc"])
    pids = sorted(int(e) for e in r.stdout.split() if e.isdigit())
    assert pids == [1, 2], pids  # init and ls, nothing of the host
    # Control: the host's /proc shows many more.
    assert len([e for e in os.listdir("/proc") if e.isdigit()]) > 2


def test_no_leaked_fds():
    with tempfile.TemporaryFile(prefix="ajtest-fd-") as f:
        fd = 57
        os.dup2(f.fileno(), fd)
        try:
            # Control: a plain child of the test sees the fd.
            p = subprocess.run(["ls", "/proc/self/fd"], pass_fds=(fd,), capture_output=True, text=True)
            assert str(fd) in p.stdout.split()
            r = run_aj([], ["ls", "/proc/self/fd"], pass_fds=(fd,))
            assert r.returncode == 0, r
            assert sorted(r.stdout.split(), key=int) == ["0", "1", "2", "3"], r  # 3: ls's own dir fd
        finally:
            os.close(fd)


def test_cgroup_paths_of_the_host_are_hidden():
    # The cgroup namespace is rooted at the run's own groups: the payload
    # sees "/" for every hierarchy, not the host's layout or the run's name
    # (which carries the supervisor's host pid).
    r = run_aj([], ["cat", "/proc/self/cgroup"])
    assert r.returncode == 0, r
    lines = r.stdout.strip().splitlines()
    assert lines and all(l.endswith(":/") for l in lines), r.stdout
    assert "agentjail" not in r.stdout


def test_each_run_has_its_own_network_namespace():
    # The namespace comes from a helper, passed to init by fd (security-model
    # step 6b): it must be a new one per run, never the host's, owned by the
    # sandbox's user namespace (so root inside may configure it: lo is set
    # up with --network loopback, which test_network_loopback checks).
    host = os.readlink("/proc/self/ns/net")
    seen = set()
    # Alive at the same time (namespace inode numbers are reused once freed).
    procs = [subprocess.Popen([AJ_BIN, "run", "--", "sh", "-c", "readlink /proc/self/ns/net; sleep 0.5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        seen.add(out.strip())
    assert len(seen) == 4 and host not in seen, (host, seen)


def test_bind_at_tmp_is_the_sandbox_tmp(hostdir):
    # A host directory bound at /tmp is what the payload sees and writes
    # there (the default tmpfs used to be mounted on top and hide it), and
    # no decoy is written into it.
    write(os.path.join(hostdir, "from-host"), "h\n")
    os.chmod(hostdir, 0o777)
    r = run_aj(["--bind-rw", hostdir + ":/tmp", "--decoy-cloud"],
               ["sh", "-c", "cat /tmp/from-host; echo made > /tmp/made; env | grep -c '^AWS_'"])
    assert r.returncode == 0 and r.stdout == "h\n2\n", r
    assert open(os.path.join(hostdir, "made")).read() == "made\n"
    assert sorted(os.listdir(hostdir)) == ["from-host", "made"]  # no .aws planted on the host
    # Control: with agentjail's own /tmp the credentials file decoy is there.
    r = run_aj(["--decoy-cloud"], ["ls", "/tmp/.aws"])
    assert r.returncode == 0 and r.stdout == "credentials\n", r


def test_scratch_space_is_executable_by_default(hostdir):
    """Compilers, venvs and scripts written to /tmp are ordinary agent work:
    /tmp, /dev/shm and --tmpfs mounts are executable unless the policy asks
    for noexec_tmp (then the mount and Landlock both refuse)."""
    script = ("for d in /tmp /dev/shm /scratch; do printf '#!/bin/sh\\necho ran-$1\\n' > $d/x; chmod +x $d/x; "
              "$d/x $d || echo refused-$d; done")
    r = run_aj(["--tmpfs", "/scratch"], ["sh", "-c", script])
    assert r.returncode == 0 and r.stdout.split() == ["ran-/tmp", "ran-/dev/shm", "ran-/scratch"], r
    r = run_aj(["--tmpfs", "/scratch", "--noexec-tmp"], ["sh", "-c", script])
    assert r.returncode == 0 and r.stdout.count("refused-") == 3 and "ran-" not in r.stdout, r
    # The same from a policy file.
    pol = os.path.join(hostdir, "p.json")
    with open(pol, "w") as f:
        f.write('{"version": 1, "filesystem": {"noexec_tmp": true}}')
    r = run_aj(["--policy", pol], ["sh", "-c", script.replace(" /scratch", "")])
    assert r.returncode == 0 and r.stdout.count("refused-") == 2, r


def test_private_pty():
    """A devpts instance of the sandbox's own: openpty, pty.fork and
    script work; only the sandbox's own ptys are there (the host's
    /dev/pts entries are not), and /dev/tty is the caller's own controlling
    terminal, which a setsid()'d payload does not have."""
    code = r"""
import json, os, pty, time
m, s = os.openpty()
os.write(s, b'hi\n')
out = {"echo": os.read(m, 10).decode(), "name": os.ttyname(s)}
pid, fd = pty.fork()
if pid == 0:
    print('child', os.ttyname(0), flush=True); time.sleep(0.2); os._exit(0)
out["child"] = os.read(fd, 100).decode().strip()
os.waitpid(pid, 0)
out["pts"] = sorted(os.listdir('/dev/pts'))
out["ptmx"] = os.readlink('/dev/ptmx')
try:
    os.open('/dev/tty', os.O_RDWR); out["tty"] = "opened"
except OSError as e:
    out["tty"] = e.errno
print(json.dumps(out))
"""
    r = run_aj([], [PY, "-c", code])
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["echo"] == "hi\r\n" and out["name"] == "/dev/pts/0", out
    assert out["child"].startswith("child /dev/pts/"), out
    assert out["ptmx"] == "pts/ptmx" and set(out["pts"]) <= {"ptmx", "0", "1"}, out
    assert out["tty"] == 6, out  # ENXIO: no controlling terminal
    r = run_aj([], ["sh", "-c", "script -qc 'tty' /dev/null"])
    assert r.returncode == 0 and r.stdout.strip().startswith("/dev/pts/"), r
