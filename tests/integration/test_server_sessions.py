"""`agentjail serve`: sessions, their workspaces and the files API, against a
real server over a real socket (srvhelp.py's Server). Each workspace is
a filesystem that the server mounts in a mount namespace of its own (a
tmpfs where the kernel id-maps tmpfs, 6.3+, else ext4 on a loop device;
the tests of the workspace itself run on both backends, forced with
sessions.workspace_backend, each where this kernel has it): the tests
look at it through /proc/PID/root and /proc/PID/mountinfo of the server, and
at the host's side of the same directory (the disk under the mount point),
which must stay empty. Each denial has its positive control beside it."""
import base64
import glob
import hashlib
import json
import os
import signal
import socket
import subprocess

import pytest

from conftest import AJ_BIN, IS_ROOT, helper, must_skip, new_tag, pids_with, wait_for
from srvhelp import TOKEN_A, TOKEN_B, serving
from test_server import tmp  # noqa: F401 (a fixture)

KERNEL = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
TMPFS_IDMAP = KERNEL >= (6, 3)
EXT4_LOOP = os.path.exists("/dev/loop-control") and any(
    os.access(p, os.X_OK) for p in ("/usr/sbin/mke2fs", "/sbin/mke2fs"))
pytestmark = [pytest.mark.skipif(not IS_ROOT, reason="sessions need a root server (a filesystem per workspace, "
                                                     "id-mapped binds); the server tests run as root"),
              pytest.mark.skipif(not TMPFS_IDMAP and not EXT4_LOOP,
                                 reason="no workspace backend here: id-mapped tmpfs needs Linux 6.3, ext4-loop "
                                        "needs /dev/loop-control and mke2fs")]
# The tests of the workspace itself, once per backend.
BOTH = pytest.mark.parametrize("backend", ["tmpfs", "ext4"], indirect=True)


@pytest.fixture
def backend(request):
    """The config's sessions.workspace_backend: "auto" unless a test is
    parametrized with BOTH; a backend this kernel lacks skips."""
    b = getattr(request, "param", "auto")
    if b == "tmpfs" and not TMPFS_IDMAP:
        pytest.skip("id-mapped tmpfs mounts need Linux 6.3 (the ext4 variant runs here)")
    if b == "ext4" and not EXT4_LOOP:
        pytest.skip("ext4-loop needs /dev/loop-control and mke2fs (e2fsprogs)")
    return b


def expected_backend(b):
    return {"tmpfs": "tmpfs-idmap", "ext4": "ext4-loop"}.get(b, "tmpfs-idmap" if TMPFS_IDMAP else "ext4-loop")


@pytest.fixture
def server(tmp, backend):
    """srvhelp's, with the backend's config, and the server's stderr
    has no sanitizer report (the ASan pass: UBSan reports do not change
    the exit status)."""
    def config(kw):
        if backend != "auto":
            extra = dict(kw.pop("extra", None) or {})
            extra["sessions"] = dict(extra.get("sessions", {}), workspace_backend=backend)
            kw["extra"] = extra

    def no_sanitizer_report(srv):
        assert "runtime error:" not in srv.err() and "Sanitizer" not in srv.err(), srv.err()

    yield from serving(tmp, before=config, check=no_sanitizer_report)


def b64(data):
    return base64.b64encode(data).decode()


def ws_dir(s, sid, kind="s"):
    return os.path.join(os.path.dirname(s.store), "workspaces", "%s-%s" % (kind, sid))


def server_mounts(s):
    """The mount points of the server's own mount namespace."""
    with open("/proc/%d/mountinfo" % s.proc.pid) as f:
        return [line.split()[4] for line in f]


def mounted_anywhere(path):
    """Whether any process on the host has path mounted (any namespace)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/mountinfo" % pid) as f:
                if any(line.split()[4] == path for line in f):
                    return True
        except OSError:
            continue
    return False


def loops_of(s):
    """The loop devices whose backing file is under the server's state
    directory (ext4-loop: each workspace's image, unlinked once attached)."""
    state = os.path.dirname(s.store)
    found = []
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(f) as fh:
                if fh.read().startswith(state + "/"):
                    found.append(f.split("/")[3])
        except OSError:
            continue  # detached meanwhile
    return found


def in_server(s, path):
    """path as the server sees it (its mount namespace)."""
    return "/proc/%d/root%s" % (s.proc.pid, path)


def new_session(s, token=TOKEN_A, **body):
    status, _, j = s.request("POST", "/v1/sessions", body, token=token)
    assert status == 201, j
    return j["id"]


def srun(s, sid, body, token=TOKEN_A):
    return s.request("POST", "/v1/sessions/%s/runs" % sid, body, token=token)


def sh(s, sid, script, **kw):
    status, _, rec = srun(s, sid, dict({"argv": ["sh", "-c", script]}, **kw))
    assert status == 200, rec
    return rec


def files_url(sid, path=""):
    return "/v1/sessions/%s/files/%s" % (sid, path)


@BOTH
def test_session_lifecycle_and_graceful_stop(server, backend):
    s = server()
    kind = expected_backend(backend)
    assert "sessions: workspaces are %s in " % kind in s.err()
    sid = new_session(s, ttl=600, idle_timeout=300, workspace_quota="4M")
    status, _, j = s.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and j["status"] == "live" and j["workspace_quota"] == 4 << 20 and j["idle_timeout"] == 300
    assert j["workspace"] == {"backend": kind} and j["workspace_used"] == 0, j
    d = ws_dir(s, sid)
    # The workspace is a filesystem of the quota's size, in the server's
    # namespace only: the host's mount table never has it.
    assert d in server_mounts(s)
    with open("/proc/%d/mountinfo" % s.proc.pid) as f:
        line = [x for x in f if x.split()[4] == d][0]
    assert "nosuid" in line and "nodev" in line, line
    if kind == "tmpfs-idmap":
        assert " - tmpfs " in line and "size=4096k" in line, line
        assert loops_of(s) == []
    else:
        # ext4 on a loop device of its own whose image is already unlinked
        # (nothing of it is a name on the host's disk), of the quota's size.
        assert " - ext4 /dev/loop" in line, line
        loops = loops_of(s)
        assert len(loops) == 1 and "/dev/" + loops[0] in line, (loops, line)
        with open("/sys/block/%s/loop/backing_file" % loops[0]) as f:
            assert f.read().strip().endswith(".img (deleted)")
        with open("/sys/block/%s/loop/autoclear" % loops[0]) as f:
            assert f.read().strip() == "1"
        with open("/sys/block/%s/size" % loops[0]) as f:
            assert int(f.read()) * 512 == 4 << 20
        assert sorted(os.listdir(os.path.dirname(d))) == ["s-" + sid]
        assert os.listdir(in_server(s, d)) == [], "no lost+found"
    with open("/proc/self/mountinfo") as f:
        assert d not in [x.split()[4] for x in f], "the workspace is not in the host's mount table"
    # The bind source is under a root-owned 0700 directory.
    st = os.stat(os.path.dirname(d))
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o700

    rec = sh(s, sid, "pwd; echo one > f.txt")
    assert rec["status"] == "ok" and rec["stdout"] == "/workspace\n" and rec["session"] == sid
    status, _, again = s.request("GET", "/v1/runs/" + rec["id"])
    assert status == 200 and again["session"] == sid

    status, _, j = s.request("DELETE", "/v1/sessions/" + sid)
    assert status == 200 and j["status"] == "deleted" and j["ended_ms"] >= j["created_ms"]
    assert d not in server_mounts(s) and not os.path.exists(d)
    # The loop device detaches itself once the last user of the mount is
    # gone (the kernel releases a detached mount asynchronously).
    assert wait_for(lambda: not loops_of(s), 15), loops_of(s)
    # Ended: its runs and files are 410, its record stays.
    assert srun(s, sid, {"argv": ["true"]})[0] == 410
    assert s.request("GET", files_url(sid, "f.txt"))[0] == 410
    assert s.request("GET", "/v1/sessions/" + sid)[2]["status"] == "deleted"

    # SIGTERM with a live session and a run in it: the run is killed and
    # recorded, the session ends ("lost"), its workspace removed.
    sid2 = new_session(s)
    d2 = ws_dir(s, sid2)
    tag = new_tag()
    status, _, j = srun(s, sid2, {"argv": ["sleep", tag], "wait": False})
    assert status == 202 and wait_for(lambda: pids_with(tag), 15)
    run2 = j["id"]
    assert os.path.isdir(d2)
    assert s.stop() == 0
    assert not os.path.exists(d2) and not pids_with(tag) and not mounted_anywhere(d2)
    assert wait_for(lambda: not loops_of(s), 15), loops_of(s)
    s2 = server(store=s.store)
    j = s2.request("GET", "/v1/sessions/" + sid2)[2]
    assert j["status"] == "lost" and "shut down" in j["reason"], j
    rec = s2.request("GET", "/v1/runs/" + run2)[2]
    assert rec["status"] == "signaled" and rec["session"] == sid2, rec


@BOTH
def test_workspace_persists_and_stays_writable_across_host_uids(server):
    s = server()
    sid = new_session(s)
    status, _, j = s.request("PUT", files_url(sid, "src/notes.txt"), raw=b"from the API\n")
    assert status == 201 and j == {"path": "src/notes.txt", "bytes": 13}
    uids = set()
    for i in range(3):
        rec = sh(s, sid, "echo run%d >> src/notes.txt && mkdir -p d%d && echo x > d%d/f && id -u" % (i, i, i))
        assert rec["status"] == "ok" and rec["stdout"] == "1000\n", rec
        uids.add(rec["result"]["host_uid"])
    assert len(uids) >= 2, "runs got distinct host uids: %r" % uids
    rec = sh(s, sid, "cat src/notes.txt; ls")
    assert rec["stdout"] == "from the API\nrun0\nrun1\nrun2\nd0\nd1\nd2\nsrc\n"
    # On the host every file is the workspace owner's, none a run's uid, and
    # what the API made is that owner's as well.
    root = in_server(s, ws_dir(s, sid))
    owners = {os.lstat(os.path.join(dp, n)).st_uid for dp, dns, fns in os.walk(root) for n in dns + fns}
    assert len(owners) == 1 and not owners & uids and list(owners)[0] >= 65536, (owners, uids)
    status, _, body = s.request("GET", files_url(sid, "d2/f"))
    assert status == 200 and body == "x\n"
    # The host's side of the mount point (the disk) has nothing.
    assert os.listdir(ws_dir(s, sid)) == []


def test_tenant_b_gets_404_for_tenant_a_session_files_and_runs(server):
    s = server()
    sid = new_session(s)
    assert s.request("PUT", files_url(sid, "secret.txt"), raw=b"a's\n")[0] == 201
    rec = sh(s, sid, "cat secret.txt")
    for method, path, body in [("GET", "/v1/sessions/" + sid, None), ("DELETE", "/v1/sessions/" + sid, None),
                               ("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["cat", "secret.txt"]}),
                               ("GET", files_url(sid, "secret.txt"), None), ("GET", files_url(sid), None),
                               ("DELETE", files_url(sid, "secret.txt"), None),
                               ("GET", "/v1/runs/" + rec["id"], None)]:
        status, _, j = s.request(method, path, body, token=TOKEN_B)
        assert status == 404, (method, path, j)
    status, _, j = s.request("PUT", files_url(sid, "secret.txt"), raw=b"b's\n", token=TOKEN_B)
    assert status == 404, j
    assert s.request("GET", "/v1/sessions", token=TOKEN_B)[2] == {"sessions": []}
    # Tenant A: all still there, unchanged.
    assert s.request("GET", files_url(sid, "secret.txt"))[2] == "a's\n"
    assert s.request("GET", "/v1/sessions")[2] == {"sessions": [sid]}
    assert s.request("GET", "/v1/runs/" + rec["id"])[0] == 200


@BOTH
def test_symlinks_planted_by_a_run_are_never_followed(server):
    s = server()
    sid = new_session(s)
    with open("/etc/shadow", "rb") as f:
        shadow = hashlib.sha256(f.read()).hexdigest()
    rec = sh(s, sid, "ln -s /etc/shadow shadow; ln -s ../.. up; ln -s /proc/self/root pr; mkdir d; "
                     "echo ok > d/ok; ln -s d dl")
    assert rec["status"] == "ok", rec
    for path in ["shadow", "up", "up/etc/passwd", "pr/etc/passwd", "dl/ok"]:
        status, _, j = s.request("GET", files_url(sid, path))
        assert status == 403 and "symbolic link" in j["error"], (path, j)
    for path in ["up/x", "dl/new", "pr/tmp/x"]:
        status, _, j = s.request("PUT", files_url(sid, path), raw=b"x")
        assert status == 403, (path, j)
    assert srun(s, sid, {"argv": ["true"], "files": {"up/x": b64(b"x")}})[0] == 403
    rec = sh(s, sid, "true", outputs=["shadow", "d/ok"])
    assert "symbolic link" in rec["outputs"]["shadow"]["error"]
    assert base64.b64decode(rec["outputs"]["d/ok"]["base64"]) == b"ok\n"
    # Positive control: the same directory without the link.
    assert s.request("GET", files_url(sid, "d/ok"))[2] == "ok\n"
    # A PUT over the link replaces the link (rename never follows it).
    assert s.request("PUT", files_url(sid, "shadow"), raw=b"mine\n")[0] == 201
    listing = s.request("GET", files_url(sid))[2]
    assert {e["name"]: e["type"] for e in listing["entries"]}["shadow"] == "file"
    assert s.request("DELETE", files_url(sid, "up"))[0] == 200   # the link itself
    assert os.path.exists("/etc/passwd")
    with open("/etc/shadow", "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == shadow


def test_path_traversal_is_refused(server):
    s = server()
    sid = new_session(s)
    assert s.request("PUT", files_url(sid, "a/b.txt"), raw=b"b")[0] == 201
    for path in ["../../../etc/passwd", "a/../../x", "%2e%2e/%2e%2e/etc/passwd", "/etc/passwd", "a/./b.txt",
                 "a//b.txt", "a/"]:
        status, _, j = s.request("GET", files_url(sid, path))
        assert status == 400, (path, status, j)
        assert s.request("PUT", files_url(sid, path), raw=b"x")[0] == 400, path
    for files in [{"../x": b64(b"x")}, {"/etc/cron.d/x": b64(b"x")}, {"a/../../x": b64(b"x")}]:
        status, _, j = srun(s, sid, {"argv": ["true"], "files": files})
        assert status == 400, (files, j)
    assert srun(s, sid, {"argv": ["true"], "outputs": ["/etc/passwd"]})[0] == 400
    assert srun(s, sid, {"argv": ["true"], "files": {"x": "not base64!"}})[0] == 400
    # Names that are not UTF-8 (a run's, a URL's) still get JSON answers.
    assert sh(s, sid, "touch \"$(printf 'n\\377')\"")["status"] == "ok"
    names = [e["name"] for e in s.request("GET", files_url(sid))[2]["entries"]]
    assert "n\ufffd" in names, names
    status, _, j = s.request("GET", files_url(sid, "%ff"))
    assert status == 404 and "\ufffd" in j["error"], j
    # Control: the same file by its plain path, and "/workspace/..." paths.
    assert s.request("GET", files_url(sid, "a/b.txt"))[2] == "b"
    rec = sh(s, sid, "cat a/b.txt c.txt", files={"/workspace/c.txt": b64(b"c")}, outputs=["/workspace/a/b.txt"])
    assert rec["stdout"] == "bc" and rec["outputs"]["/workspace/a/b.txt"]["base64"] == b64(b"b")


@BOTH
def test_quota_is_kernel_enforced_workspace_full(server, backend):
    s = server(extra={"sessions": {"workspace_quota": 8 << 20}})
    assert s.request("POST", "/v1/sessions", {"workspace_quota": 16 << 20})[0] == 400  # may only tighten
    sid = new_session(s, workspace_quota=1 << 20)
    rec = sh(s, sid, "dd if=/dev/zero of=big bs=64k count=64; echo dd=$?")
    assert rec["status"] == "workspace_full" and "No space left" in rec["stderr"], rec
    assert "dd=1" in rec["stdout"], rec
    size = os.stat(in_server(s, ws_dir(s, sid) + "/big")).st_size
    assert size <= 1 << 20
    j = s.request("GET", "/v1/sessions/" + sid)[2]
    if expected_backend(backend) == "tmpfs-idmap":
        assert j["workspace_used"] == 1 << 20
    else:
        # ext4's own metadata takes a little of the image (not counted):
        # what the files use is the rest, at most the quota.
        assert (1 << 20) * 0.85 <= j["workspace_used"] <= 1 << 20, j
    # The bytes are in the workspace's filesystem: the host's disk under
    # the mount point has nothing, nor has the directory beside it.
    assert os.listdir(ws_dir(s, sid)) == []
    assert sorted(os.listdir(os.path.dirname(ws_dir(s, sid)))) == ["s-" + sid]
    status, _, j = s.request("PUT", files_url(sid, "more.bin"), raw=b"x" * 100000)
    assert status == 507 and j["error"].startswith("workspace_full"), j
    assert s.request("GET", files_url(sid, "more.bin"))[0] == 404, "a failed PUT leaves nothing"
    tag = new_tag()
    status, _, j = srun(s, sid, {"argv": ["sleep", tag], "files": {"more.bin": b64(b"x" * 100000)}})
    assert status == 507 and j["error"].startswith("files.workspace_full"), j
    assert not pids_with(tag) and s.request("GET", "/v1/sessions/" + sid)[2]["run"] is None, "nothing ran"
    # Control: room again, the same PUT goes through, and a run is ok.
    assert s.request("DELETE", files_url(sid, "big"))[0] == 200
    assert s.request("PUT", files_url(sid, "more.bin"), raw=b"x" * 100000)[0] == 201
    assert sh(s, sid, "wc -c < more.bin")["stdout"].strip() == "100000"


def test_max_file_bytes_is_413(server):
    s = server(extra={"sessions": {"max_file_bytes": 1000}})
    sid = new_session(s)
    status, _, j = s.request("PUT", files_url(sid, "f"), raw=b"x" * 1001)
    assert status == 413, j
    assert s.request("PUT", files_url(sid, "f"), raw=b"x" * 1000)[0] == 201
    sh(s, sid, "head -c 5000 /dev/zero > big")
    assert s.request("GET", files_url(sid, "big"))[0] == 413
    assert len(s.request("GET", files_url(sid, "f"))[2]) == 1000


def test_ttl_and_idle_expiry_remove_the_workspace(server):
    s = server()
    by_ttl = new_session(s, ttl=1)
    by_idle = new_session(s, idle_timeout=1)
    keep = new_session(s)
    for sid, reason in [(by_ttl, "ttl"), (by_idle, "idle_timeout")]:
        assert wait_for(lambda: s.request("GET", "/v1/sessions/" + sid)[2]["status"] == "expired", 30)
        j = s.request("GET", "/v1/sessions/" + sid)[2]
        assert j["reason"] == reason, j
        assert ws_dir(s, sid) not in server_mounts(s) and not os.path.exists(ws_dir(s, sid))
        assert srun(s, sid, {"argv": ["true"]})[0] == 410
    # Control: a session with the default timeouts is still there.
    assert s.request("GET", "/v1/sessions/" + keep)[2]["status"] == "live"
    assert ws_dir(s, keep) in server_mounts(s)


def test_one_run_at_a_time_per_session(server):
    s = server()
    sid = new_session(s)
    tag = new_tag()
    status, _, j = srun(s, sid, {"argv": ["sleep", tag], "wait": False})
    assert status == 202
    run_id = j["id"]
    assert wait_for(lambda: pids_with(tag), 15)
    status, _, j = srun(s, sid, {"argv": ["true"]})
    assert status == 409 and "in flight" in j["error"], j
    assert s.request("GET", "/v1/sessions/" + sid)[2]["run"] == run_id
    # Files stay usable meanwhile.
    assert s.request("PUT", files_url(sid, "f"), raw=b"f")[0] == 201
    assert s.request("DELETE", "/v1/runs/" + run_id)[2]["status"] == "signaled"
    assert sh(s, sid, "cat f")["stdout"] == "f"


def test_session_policy_may_only_tighten(server):
    s = server()
    for body, want in [({"policy": {"limits": {"timeout": "1h"}}}, "may only tighten"),
                       ({"policy": {"filesystem": {"binds": [{"host": "/usr/share", "sandbox": "/hostshare", "mode": "ro"}]}}}, "may only tighten"),
                       ({"policy": {"environment": {"pass": ["HOME"]}}}, "may only tighten"),
                       ({"policy": {"detection": {"alert_cmd": "touch /tmp/x"}}}, "may only tighten"),
                       ({"policy": {"nonsense": 1}}, "nonsense"),
                       ({"profile": "no-such-profile"}, "profile"),
                       ({"ttl": 10 ** 7}, "may only tighten"),
                       ({"bogus": 1}, "unknown field")]:
        status, _, j = s.request("POST", "/v1/sessions", body)
        assert status == 400 and want in j["error"], (body, j)
    assert s.request("GET", "/v1/sessions")[2] == {"sessions": []}, "a refused session leaves nothing"
    assert [n for n in os.listdir(os.path.dirname(ws_dir(s, "x" * 32)))] == []
    # A tighter timeout is taken, and the kernel-side outcome follows it.
    sid = new_session(s, policy={"limits": {"timeout": "1s"}})
    rec = sh(s, sid, "sleep 30")
    assert rec["status"] == "timeout", rec
    # A built-in profile on top of the server's default policy tightens it.
    prof = new_session(s, profile="python")
    assert sh(s, prof, "python3 -c 'print(6*7)'")["stdout"] == "42\n"
    plain = new_session(s)
    assert s.request("GET", "/v1/sessions/" + sid)[2]["policy_sha256"] != \
        s.request("GET", "/v1/sessions/" + plain)[2]["policy_sha256"]


@BOTH
def test_one_shot_run_with_files_and_outputs(server):
    s = server(extra={"sessions": {"max_outputs_bytes": 1000}})
    status, _, rec = s.run({"argv": ["sh", "-c", "cat in/data.txt; pwd; head -c 3000 /dev/zero > big; echo o > o.txt"],
                            "files": {"in/data.txt": b64(b"hello\n")}, "outputs": ["o.txt", "big", "missing"]})
    assert status == 200 and rec["status"] == "ok" and rec["stdout"] == "hello\n/workspace\n", rec
    outs = rec["outputs"]
    assert base64.b64decode(outs["o.txt"]["base64"]) == b"o\n" and outs["o.txt"]["truncated"] is False
    assert outs["big"]["bytes"] == 3000 and outs["big"]["truncated"] is True
    assert len(base64.b64decode(outs["big"]["base64"])) <= 1000
    assert "no such file" in outs["missing"]["error"]
    # Its workspace went with it; the stored record keeps the outputs.
    root = os.path.dirname(ws_dir(s, rec["id"], "r"))
    assert os.listdir(root) == [] and not any("/workspaces/" in m for m in server_mounts(s))
    assert wait_for(lambda: not loops_of(s), 15), loops_of(s)
    assert s.request("GET", "/v1/runs/" + rec["id"])[2]["outputs"] == outs
    # Control: a run without files or outputs has no workspace.
    status, _, rec = s.run({"argv": ["sh", "-c", "pwd; ls /workspace 2>&1 || true"]})
    assert rec["stdout"].startswith("/") and "outputs" not in rec and "No such file" in rec["stdout"], rec


@BOTH
def test_client_leaving_mid_upload_leaves_no_file(server):
    s = server()
    sid = new_session(s)
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 4000000\r\n\r\n"
                  % (files_url(sid, "up.bin"), TOKEN_A)).encode() + b"y" * 1000000)

    def used():
        return s.request("GET", "/v1/sessions/" + sid)[2]["workspace_used"]
    assert wait_for(lambda: used() >= 500000, 15), "the upload is being written"
    assert s.request("GET", files_url(sid))[2]["entries"] == [], "unnamed while it is written"
    sock.close()
    assert wait_for(lambda: used() == 0, 15), "the unnamed file went with the connection"
    assert s.request("GET", files_url(sid))[2]["entries"] == []
    # Control: the same upload, whole, lands.
    assert s.request("PUT", files_url(sid, "up.bin"), raw=b"y" * 4000000)[0] == 201
    assert used() >= 4000000


# A run watching the workspace with inotify: for every name made in it, a
# file named .aj-upload* gets the run's own file renamed over it (the swap
# an upload through a temporary name would let in); a directory of that
# name is tried (list it, write in it). It ends at "done" and prints what it
# saw. Its control: before "ready" it renames a file of its own over
# "api.txt", a file the API wrote (a rename over a name works for it).
WATCHER = r"""
import ctypes, json, os, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x80, 0x100, 0x40000000
assert fd >= 0 and libc.inotify_add_watch(fd, b"/workspace", IN_CREATE | IN_MOVED_TO) >= 0
with open("mine", "w") as f:
    f.write("run\n")
os.rename("mine", "api.txt")
open("ready", "w").close()
seen, n, done = [], 0, False
while not done:
    buf, i = os.read(fd, 65536), 0
    while i < len(buf):
        wd, mask, cookie, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode()
        i += 16 + ln
        kind, what = ("dir" if mask & IN_ISDIR else "file"), ""
        if name.startswith(".aj-upload") and kind == "file":
            n += 1
            with open("evil%d" % n, "w") as f:
                f.write("swapped\n")
            try:
                os.rename("evil%d" % n, name)
                what = "swapped"
            except OSError as e:
                what = type(e).__name__
        elif name.startswith(".aj-upload"):
            for act in (lambda: os.listdir(name), lambda: open(name + "/f", "w")):
                try:
                    act()
                    what += "done,"
                except OSError as e:
                    what += type(e).__name__ + ","
        seen.append([name, kind, what])
        done = done or name == "done"
print(json.dumps(seen))
"""


@BOTH
def test_an_upload_has_no_name_a_run_can_swap(server):
    """A run sharing the workspace cannot put its own file in an upload's
    place: no name of the upload but its own ever appears in a directory
    the run writes (new file: linked at its name; replacement: renamed from
    a root-owned 0700 directory the run can neither list nor write)."""
    s = server()
    sid = new_session(s)
    assert s.request("PUT", files_url(sid, "api.txt"), raw=b"api\n")[0] == 201
    status, _, j = srun(s, sid, {"language": "python", "code": WATCHER, "wait": False, "timeout": 60})
    assert status == 202, j
    run_id = j["id"]
    assert wait_for(lambda: s.request("GET", files_url(sid, "ready"))[0] == 200, 30), "the watcher is ready"
    for body in (b"one\n", b"two\n", b"three\n"):   # a new file, then two replacements
        status, _, j = s.request("PUT", files_url(sid, "target"), raw=body)
        assert status == 201 and j["bytes"] == len(body), j
    assert s.request("PUT", files_url(sid, "done"), raw=b"")[0] == 201
    rec = wait_for(lambda: (lambda r: r if r["status"] not in ("queued", "running") else None)(
        s.request("GET", "/v1/runs/" + run_id)[2]), 60)
    assert rec and rec["status"] == "ok", rec
    seen = json.loads(rec["stdout"])
    # Control: the watcher saw the API's names, and its own rename over a
    # file the API wrote took effect.
    names = [n for n, _, _ in seen]
    assert ["target", "file", ""] in seen and "done" in names, seen
    assert s.request("GET", files_url(sid, "api.txt"))[2] == "run\n"
    # The uploads: no file name but "target"; the staging directories (one
    # per replacement) neither listed nor written by the run, and gone.
    assert not [x for x in seen if x[0].startswith(".aj-upload") and x[1] == "file"], seen
    staged = [x for x in seen if x[0].startswith(".aj-upload")]
    assert len(staged) == 2 and all(x[1] == "dir" and "done" not in x[2] for x in staged), seen
    assert s.request("GET", files_url(sid, "target"))[2] == "three\n"
    entries = sorted(e["name"] for e in s.request("GET", files_url(sid))[2]["entries"])
    assert entries == ["api.txt", "done", "ready", "target"], entries
    # A replacement that fails (a directory in the way) leaves no staging
    # directory either.
    assert s.request("PUT", files_url(sid, "d/x"), raw=b"x")[0] == 201
    status, _, j = s.request("PUT", files_url(sid, "d"), raw=b"y")
    assert status == 409 and "a directory is in the way" in j["error"], j
    entries = sorted(e["name"] for e in s.request("GET", files_url(sid))[2]["entries"])
    assert entries == ["api.txt", "d", "done", "ready", "target"], entries


@BOTH
def test_sigkill_with_a_live_session_then_restart_leaves_nothing(server):
    s = server()
    sid = new_session(s)
    assert s.request("PUT", files_url(sid, "f"), raw=b"f")[0] == 201
    tag = new_tag()
    status, _, j = srun(s, sid, {"argv": ["sleep", tag], "wait": False})
    assert status == 202
    run_id = j["id"]
    assert wait_for(lambda: pids_with(tag), 15)
    d = ws_dir(s, sid)
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait()
    assert wait_for(lambda: not pids_with(tag), 15), "the session's run died with the server"
    assert wait_for(lambda: not mounted_anywhere(d), 15), "its filesystem died with the server's namespace"
    assert wait_for(lambda: not loops_of(s), 15), "its loop device (ext4-loop) detached itself: %r" % loops_of(s)
    assert os.listdir(d) == [], "nothing of the workspace is on the host's disk"
    assert sorted(os.listdir(os.path.dirname(d))) == ["s-" + sid], "no image left beside it"
    # What a server killed inside srv_ws_create (ext4-loop) would leave: an
    # image not yet unlinked. The next start removes it, as the directory.
    stray = os.path.join(os.path.dirname(d), "s-%s.img" % ("ab" * 16))
    with open(stray, "wb") as f:
        f.truncate(1 << 20)
    s2 = server(store=s.store)
    assert not os.path.exists(d), "the restarted server removed the directory"
    assert not os.path.exists(stray) and "removed s-%s.img" % ("ab" * 16) in s2.err()
    j = s2.request("GET", "/v1/sessions/" + sid)[2]
    assert j["status"] == "lost" and "stopped" in j["reason"], j
    assert s2.request("GET", "/v1/runs/" + run_id)[2]["status"] == "lost"
    assert srun(s2, sid, {"argv": ["true"]})[0] == 410
    assert "removed s-%s" % sid in s2.err()
    assert os.listdir(os.path.dirname(d)) == []
    # Control: the restarted server makes sessions as before.
    sid2 = new_session(s2)
    assert sh(s2, sid2, "echo ok")["stdout"] == "ok\n"


def test_in_memory_file_calls_match_http(server):
    """GET of a directory is a JSON listing; DELETE of a missing file 404; a
    file where a directory is needed 409."""
    s = server()
    sid = new_session(s)
    assert s.request("PUT", files_url(sid, "x/y/z.txt"), raw=b"z")[0] == 201
    j = s.request("GET", files_url(sid, "x"))[2]
    assert j["type"] == "dir", j
    assert [(e["name"], e["type"]) for e in j["entries"]] == [("y", "dir")], j
    assert s.request("PUT", files_url(sid, "x/y/z.txt/w"), raw=b"w")[0] == 409
    assert s.request("DELETE", files_url(sid, "x/y"))[0] == 409       # not empty
    assert s.request("DELETE", files_url(sid, "x/y/z.txt"))[0] == 200
    assert s.request("DELETE", files_url(sid, "x/y/z.txt"))[0] == 404
    assert s.request("DELETE", files_url(sid, "x/y"))[0] == 200
    rec = sh(s, sid, "ls -la x; stat -c '%U %a' x")
    assert rec["stdout"].splitlines()[-1] == "agent 755", rec
    assert s.request("POST", files_url(sid, "q"), raw=b"")[0] == 405


def test_a_server_that_is_not_root_refuses_sessions_with_501(tmp, server):
    """Not root: no filesystem can be mounted for a workspace; sessions and run
    workspaces are refused with a clear 501, one-shot runs still work."""
    os.chmod(tmp, 0o755)
    state = os.path.join(tmp, "state")
    os.mkdir(state, 0o700)
    os.chown(state, 65534, 65534)
    wrapper = os.path.join(tmp, "as-nobody")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp %s \"$@\"\n"
                % AJ_BIN)
    os.chmod(wrapper, 0o755)
    s = server(bin=wrapper)
    assert "sessions: off: not root" in s.err()
    status, _, j = s.request("POST", "/v1/sessions", {})
    assert status == 501 and "root" in j["error"], j
    status, _, j = s.run({"argv": ["true"], "files": {"a": b64(b"a")}})
    assert status == 501 and "root" in j["error"], j
    assert s.request("GET", files_url("0" * 32, "a"))[0] == 501
    assert not os.path.exists(os.path.join(state, "workspaces"))
    # Control: a one-shot run without a workspace is served.
    status, _, j = s.run({"argv": ["sh", "-c", "echo hi"]})
    assert status == 200 and j["stdout"] == "hi\n", j


def test_live_sessions_are_capped_per_tenant(server):
    s = server(extra={"sessions": {"max_per_tenant": 1}})
    sid = new_session(s)
    status, _, j = s.request("POST", "/v1/sessions", {})
    assert status == 429 and "max_per_tenant" in j["error"], j
    assert len(os.listdir(os.path.dirname(ws_dir(s, sid)))) == 1, "a refused session leaves no workspace"
    # Per tenant: B has its own place; A gets one back once its session ends.
    new_session(s, token=TOKEN_B)
    assert s.request("DELETE", "/v1/sessions/" + sid)[0] == 200
    new_session(s)
    assert s.metrics()["agentjail_sessions_live"] == 2


def test_a_workspaces_directory_it_cannot_use_turns_sessions_off_not_the_server(tmp, server):
    state = os.path.join(tmp, "state")
    os.mkdir(state, 0o700)
    with open(os.path.join(state, "workspaces"), "w") as f:
        f.write("not a directory\n")
    s = server()
    assert "sessions are off on this server: workspaces:" in s.err()
    status, _, j = s.request("POST", "/v1/sessions", {})
    assert status == 501 and "workspaces" in j["error"], j
    assert s.run({"argv": ["true"], "outputs": ["x"]})[0] == 501
    with open(os.path.join(state, "workspaces")) as f:
        assert f.read() == "not a directory\n", "left as it was"
    assert s.run({"argv": ["true"]})[2]["status"] == "ok"


def test_workspace_backend_config_is_checked(tmp):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        f.write('{"store": "%s/x.db", "tenants": {"a": {"token_sha256": "%s"}},\n'
                ' "sessions": {"workspace_backend": "xfs"}}' % (tmp, "0" * 64))
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    assert p.stderr.startswith("agentjail serve: %s:2:" % path) and "sessions.workspace_backend: must be" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.skipif(TMPFS_IDMAP, reason="this kernel id-maps tmpfs: a forced tmpfs backend works here "
                                        "(the VM suite's 6.1 runs this)")
def test_a_forced_backend_this_kernel_lacks_turns_sessions_off(server, tmp):
    s = server(extra={"sessions": {"workspace_backend": "tmpfs"}})
    assert "sessions are off on this server: workspaces: backend tmpfs: an id-mapped tmpfs mount" in s.err()
    status, _, j = s.request("POST", "/v1/sessions", {})
    assert status == 501 and "Linux 6.3" in j["error"], j
    assert not glob.glob(os.path.join(tmp, "state", "workspaces", "*"))
    assert s.run({"argv": ["true"]})[2]["status"] == "ok", "one-shot runs are served"
    assert s.stop() == 0
    # Control: auto picks ext4-loop here, and sessions work.
    s2 = server(store=s.store)
    sid = new_session(s2)
    assert s2.request("GET", "/v1/sessions/" + sid)[2]["workspace"] == {"backend": "ext4-loop"}
    assert sh(s2, sid, "echo ok > f && cat f")["stdout"] == "ok\n"


@pytest.mark.skipif(not EXT4_LOOP, reason="the control is a session on ext4-loop (/dev/loop-control, mke2fs)")
def test_a_kernel_without_idmapped_mounts_turns_sessions_off_at_start(tmp, server):
    """Before Linux 5.12 there is no mount_setattr, so no id-mapped mount of
    any filesystem: ext4-loop would make workspaces that no run could bind.
    The server says so as it starts (sessions off, 501 naming 5.12) rather
    than failing each run later. The kernel is made to answer ENOSYS for
    mount_setattr (aj-nouserns --enosys, as test_kernels.py does)."""
    nouserns = helper("aj-nouserns")
    if not os.access(nouserns, os.X_OK):
        must_skip("aj-nouserns not built: " + nouserns)
    os.chmod(tmp, 0o755)
    wrapper = os.path.join(tmp, "before-5.12")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec %s --enosys mount_setattr %s \"$@\"\n" % (nouserns, AJ_BIN))
    os.chmod(wrapper, 0o755)
    # No warm pool: a run needs mount_setattr too (it is a setup_error there).
    for want, line in (("auto", "no backend works here: tmpfs-idmap: "), ("ext4", "backend ext4: ")):
        s = server(bin=wrapper, extra={"pool_size": 0, "sessions": {"workspace_backend": want}})
        err = s.err()
        assert "sessions are off on this server: workspaces: " + line in err, err
        assert "no id-mapped mounts here (mount_setattr: Function not implemented)" in err and "Linux 5.12" in err
        status, _, j = s.request("POST", "/v1/sessions", {})
        assert status == 501 and "Linux 5.12" in j["error"], j
        assert not glob.glob(os.path.join(tmp, "state", "workspaces", "*"))
        assert s.stop() == 0
    # Control: the same config on this kernel as it is gives ext4-loop
    # sessions whose runs work.
    s = server(store=s.store, extra={"pool_size": 0, "sessions": {"workspace_backend": "ext4"}})
    sid = new_session(s)
    assert s.request("GET", "/v1/sessions/" + sid)[2]["workspace"] == {"backend": "ext4-loop"}
    assert sh(s, sid, "echo ok > f && cat f")["stdout"] == "ok\n"
