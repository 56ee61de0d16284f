"""A workspace stays writable across runs: writable binds are id-mapped.

In root mode every run gets a host uid of its own, so without id-mapping
the files one run wrote belong to a uid the next run does not have. With
MOUNT_ATTR_IDMAP the workspace owner's files are the sandbox user's inside
and what a run writes lands as the owner on the host. Each test runs the
real binary several times on one workspace, as an agent calls it, and
asserts what the kernel did: the edit, delete and commit happened, every
file on the host belongs to the workspace owner, and files of other host
users stay out of reach (with the owner's file as the positive control).

  python3 -m pytest -p no:cacheprovider tests/integration/test_workspace.py
  setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp \\
      python3 -m pytest -p no:cacheprovider tests/integration/test_workspace.py
"""
import json
import stat
import os
import subprocess

import pytest

from conftest import IS_ROOT, root_only, run_aj

OWNER = (1234, 1235)   # an operator's ordinary uid/gid
THIRD = (777, 778)     # some other host user
GIT = ["git", "-c", "user.name=agent", "-c", "user.email=agent@example.invalid", "-c", "init.defaultBranch=main"]


def chown_tree(path, uid, gid):
    os.lchown(path, uid, gid)
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), uid, gid)


def owners(path):
    """{relative path: (uid, gid)} of everything under path (itself included)."""
    out = {".": (os.lstat(path).st_uid, os.lstat(path).st_gid)}
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, path)] = (st.st_uid, st.st_gid)
    return out


def sh(ws, script, args=(), sandbox="/ws"):
    r = run_aj(["--bind-rw", "%s:%s" % (ws, sandbox), "--workdir", sandbox] + list(args), ["sh", "-c", script])
    return r


@pytest.fixture
def ws(hostdir):
    """An existing checkout of the operator's (OWNER), as a clone or an
    unpacked tarball leaves it."""
    w = os.path.join(hostdir, "ws")
    os.makedirs(os.path.join(w, "src", "pkg"))
    with open(os.path.join(w, "src", "pkg", "mod.py"), "w") as f:
        f.write("X = 1\n")
    with open(os.path.join(w, "README"), "w") as f:
        f.write("hello\n")
    if IS_ROOT:
        chown_tree(w, *OWNER)
    return w


def test_git_across_runs(ws):
    """git init in run 1, edit + delete + commit in run 2, git log in run 3:
    every run a different host uid, the same workspace owner on disk."""
    root_only("per-run host uids exist in root mode only")
    r1 = sh(ws, "%s init -q . && %s add -A && %s commit -qm first && echo notes > notes.txt"
            % ((" ".join(GIT),) * 3))
    assert r1.returncode == 0, r1
    assert r1.result["workspace_idmap"] is True, r1.result
    assert "workspace_idmap_note" not in r1.result, r1.result
    # Run 2: what run 1 made (notes.txt, .git) is edited, deleted, committed.
    r2 = sh(ws, "echo more >> notes.txt && echo 'X = 2' > src/pkg/mod.py && rm README && "
            "%s add -A && %s commit -qm second && %s status --porcelain" % ((" ".join(GIT),) * 3))
    assert r2.returncode == 0, r2
    assert r2.stdout == "", r2          # clean tree: the commit took everything
    r3 = sh(ws, "%s log --format=%%s" % " ".join(GIT))
    assert r3.returncode == 0, r3
    assert r3.stdout.split() == ["second", "first"], r3
    with open(os.path.join(ws, "notes.txt")) as f:
        assert f.read() == "notes\nmore\n"
    assert not os.path.exists(os.path.join(ws, "README"))
    # On the host, all of it is the owner's: nothing of any run's uid.
    bad = {p: o for p, o in owners(ws).items() if o != OWNER}
    assert bad == {}, bad
    # The runs really had different host uids (or the test proves nothing).
    assert len({r1.result["host_uid"], r2.result["host_uid"], r3.result["host_uid"]}) > 1 or \
        r1.result["host_uid"] not in OWNER


def test_venv_across_runs(ws):
    """A venv made in run 1 is used in run 2: a package written into its
    site-packages (what pip install does) and imported in run 3."""
    root_only("per-run host uids exist in root mode only")
    r1 = sh(ws, "/usr/bin/python3 -m venv --without-pip venv")
    assert r1.returncode == 0, r1
    r2 = sh(ws, "venv/bin/python -c \"import sysconfig, os; "
            "d = os.path.join(sysconfig.get_paths()['purelib'], 'ajpkg'); os.makedirs(d); "
            "open(os.path.join(d, '__init__.py'), 'w').write('V = 42')\"")
    assert r2.returncode == 0, r2
    r3 = sh(ws, "venv/bin/python -c 'import ajpkg; print(ajpkg.V)'")
    assert r3.returncode == 0 and r3.stdout.strip() == "42", r3
    bad = {p: o for p, o in owners(ws).items() if o != OWNER}
    assert bad == {}, bad


def test_operator_checkout_is_writable(ws):
    """An existing tree owned by the operator: inside, it is the sandbox
    user's; nested files are edited, renamed, made and removed."""
    root_only("as nobody the caller owns the tree already (see test_rootless_note)")
    r = sh(ws, "stat -c '%u:%g' src/pkg/mod.py && echo 'X = 3' > src/pkg/mod.py && "
           "mv src/pkg/mod.py src/pkg/mod2.py && mkdir -p build/out && touch build/out/a.o && rm -r src/pkg && "
           "id -u")
    assert r.returncode == 0, r
    lines = r.stdout.split()
    assert lines[0] == "1000:1000", r   # the owner's file is the sandbox user's inside
    assert lines[-1] == "1000", r
    assert not os.path.exists(os.path.join(ws, "src", "pkg"))
    assert owners(ws)["build/out/a.o"] == OWNER


def test_other_users_files_stay_out_of_reach(ws):
    """Only the owner is mapped: a third uid's files show as the overflow
    uid inside and keep their own permissions (not writable, and a 0600
    one not readable); the owner's file next to them is writable."""
    root_only("needs files of another host uid")
    other = os.path.join(ws, "other.txt")
    secret = os.path.join(ws, "secret.txt")
    for p, mode in ((other, 0o644), (secret, 0o600)):
        with open(p, "w") as f:
            f.write("third's\n")
        os.chown(p, *THIRD)
        os.chmod(p, mode)
    r = sh(ws, "stat -c '%u:%g' other.txt; "
           "echo x >> README && echo owner-ok; "
           "echo x >> other.txt && echo other-written; "
           "cat secret.txt && echo secret-read; "
           "chmod 666 other.txt && echo chmod-ok; true")
    assert r.returncode == 0, r
    out = r.stdout.split()
    assert out[0] == "65534:65534", r   # unmapped: the overflow ids
    assert "owner-ok" in out, r         # positive control
    assert "other-written" not in out and "secret-read" not in out and "chmod-ok" not in out, r
    for p in (other, secret):
        with open(p) as f:
            assert f.read() == "third's\n"
        st = os.lstat(p)
        assert (st.st_uid, st.st_gid) == THIRD


def test_mount_is_idmapped_and_nosuid(ws):
    """The kernel reports the bind as id-mapped and nosuid: a setuid file
    the sandbox leaves is useless inside."""
    root_only("id-mapping is root mode's")
    r = sh(ws, "grep ' /ws ' /proc/self/mountinfo")
    assert r.returncode == 0, r
    opts = r.stdout.split()[5].split(",") + r.stdout.split(" - ")[1].split()[2].split(",")
    assert "idmapped" in opts and "nosuid" in opts and "nodev" in opts, r.stdout


def test_policy_owner(hostdir):
    """A policy-set owner: a root-owned workspace top (which the default
    refuses to id-map) with the owner's project inside it. Without the
    key the project is read-only (control); with it, it is the sandbox
    user's and what the run writes is the set owner's on the host."""
    root_only("per-run host uids exist in root mode only")
    w = os.path.join(hostdir, "ws")
    proj = os.path.join(w, "proj")
    os.makedirs(proj)
    os.chmod(w, 0o755)
    chown_tree(proj, 2345, 2346)
    script = "touch proj/new && echo wrote"
    r0 = sh(w, script)
    assert r0.returncode != 0 and "wrote" not in r0.stdout, r0
    assert r0.result["workspace_idmap"] is False, r0.result
    assert "owned by root" in r0.result["workspace_idmap_note"], r0.result
    pol = os.path.join(hostdir, "policy.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"workdir": "/ws", "binds": [
            {"host": w, "sandbox": "/ws", "mode": "rw", "owner": "2345:2346"}]}}, f)
    r1 = run_aj(["--policy", pol], ["sh", "-c", script])
    assert r1.returncode == 0 and "wrote" in r1.stdout, r1
    assert r1.result["workspace_idmap"] is True, r1.result
    st = os.lstat(os.path.join(proj, "new"))
    assert (st.st_uid, st.st_gid) == (2345, 2346)
    # The top (root's) stays out of reach even with the key.
    r2 = run_aj(["--policy", pol], ["sh", "-c", "touch top && echo wrote"])
    assert "wrote" not in r2.stdout and not os.path.exists(os.path.join(w, "top")), r2


@pytest.mark.parametrize("owner,msg", [("0:1000", "root's"), ("1000", "UID:GID"), ("-1:5", "UID:GID")])
def test_policy_owner_bad(hostdir, owner, msg):
    pol = os.path.join(hostdir, "policy.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"binds": [
            {"host": hostdir, "sandbox": "/ws", "mode": "rw", "owner": owner}]}}, f)
    r = run_aj(["--policy", pol], ["true"])
    assert r.returncode == 2, r
    assert "filesystem.binds[0].owner" in r.stderr and msg in r.stderr, r.stderr


def test_policy_owner_ro_refused(hostdir):
    pol = os.path.join(hostdir, "policy.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"binds": [
            {"host": hostdir, "sandbox": "/ws", "mode": "ro", "owner": "1234:1234"}]}}, f)
    r = run_aj(["--policy", pol], ["true"])
    assert r.returncode == 2 and "writable binds only" in r.stderr, r


@pytest.fixture
def ramfs(hostdir):
    """A filesystem without id-mapped mounts (ramfs has no FS_ALLOW_IDMAP),
    mounted by the test in its own temp dir."""
    root_only("mounting a ramfs needs root")
    d = os.path.join(hostdir, "ram")
    os.mkdir(d)
    subprocess.run(["mount", "-t", "ramfs", "ajtest-ramfs", d], check=True)
    try:
        os.chown(d, *OWNER)
        os.chmod(d, 0o755)
        yield d
    finally:
        subprocess.run(["umount", d], check=True)


def test_fallback_without_idmap_support(ramfs, hostdir):
    """No id-mapped mounts on the filesystem: the bind works as before (the
    run's own uid), and the result says it is not id-mapped and why; a
    policy that set the owner stops instead (exit 125, nothing started)."""
    r = sh(ramfs, "stat -c '%u' .")
    assert r.returncode == 0, r
    assert r.result["workspace_idmap"] is False, r.result
    assert "no id-mapped mounts" in r.result["workspace_idmap_note"], r.result
    assert r.stdout.strip() == "65534", r      # the owner is not mapped: today's behaviour
    pol = os.path.join(hostdir, "policy.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"binds": [
            {"host": ramfs, "sandbox": "/ws", "mode": "rw", "owner": "%d:%d" % OWNER}]}}, f)
    r = run_aj(["--policy", pol], ["sh", "-c", "echo ran"])
    assert r.returncode == 125 and "ran" not in r.stdout, r
    assert "needs an id-mapped mount" in r.stderr, r.stderr


def test_no_rw_bind_no_field():
    r = run_aj([], ["true"])
    assert r.returncode == 0, r
    assert "workspace_idmap" not in r.result


def test_rootless_note(hostdir):
    """As an ordinary user the sandbox user is the caller's uid: no
    id-mapping is needed for the caller's own workspace, and the result
    says why it is not id-mapped."""
    if IS_ROOT:
        pytest.skip("as an ordinary user only (run the suite under setpriv)")
    w = os.path.join(hostdir, "ws")
    os.mkdir(w)
    r = sh(w, "echo a > f && echo b >> f && cat f")
    assert r.returncode == 0 and r.stdout == "a\nb\n", r
    assert r.result["workspace_idmap"] is False
    assert "rootless" in r.result["workspace_idmap_note"], r.result
    assert os.lstat(os.path.join(w, "f")).st_uid == os.geteuid()


def test_container_without_sys_admin_falls_back(hostdir):
    """agentjail as root in a container without CAP_SYS_ADMIN (Docker's
    --cap-drop ALL --cap-add SETUID,SETGID,LEASE): it cannot clone host
    mounts, so the workspace is not id-mapped. The run still works as it
    did before id-mapping, and the result names the missing capability.
    Control: the same helper with every capability id-maps it."""
    root_only("root mode in a container")
    from conftest import AJ_BIN, ROOT, helper, must_skip
    path = helper("aj-container")
    if not os.access(path, os.X_OK):
        must_skip("aj-container not built: " + path)
    w = os.path.join(hostdir, "ws")
    os.mkdir(w)
    os.chown(w, *OWNER)
    res = os.path.join(hostdir, "result.json")
    profile = os.path.join(ROOT, "deploy", "docker", "seccomp.json")

    def run(confine):
        if os.path.exists(res):
            os.unlink(res)
        p = subprocess.run([path] + confine + ["--", AJ_BIN, "run", "--result", res, "--bind-rw", w + ":/ws", "--",
                                               "sh", "-c", "stat -c %u /ws"],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, HOME="/tmp"))
        with open(res) as f:
            return p, json.load(f)

    p, r = run(["--profile", profile, "--cap-drop", "ALL", "--cap-add", "SETUID,SETGID,LEASE"])
    assert p.returncode == 0, p
    assert r["workspace_idmap"] is False, r
    assert "CAP_SYS_ADMIN" in r["workspace_idmap_note"] and r["workspace_idmap_note"].startswith(w + ": "), r
    assert p.stdout.strip() == "65534", p       # the owner is not mapped
    p, r = run(["--cap-add", "ALL"])
    assert p.returncode == 0 and r["workspace_idmap"] is True, (p, r)
    assert p.stdout.strip() == "1000", p


def test_degraded_mode_is_not_idmapped(ws, hostdir):
    """Without namespaces (a host refusing them, --allow-degraded) there is
    no mount to id-map: the result says so, and a policy that set the
    owner is refused rather than run without it."""
    root_only("root mode: id-mapping applies")
    from conftest import nouserns
    r = run_aj(["--allow-degraded", "--bind-rw", ws], ["true"], prefix=nouserns())
    assert r.returncode == 0, r
    assert r.result["degraded"] is True, r.result
    assert r.result["workspace_idmap"] is False and "degraded" in r.result["workspace_idmap_note"], r.result
    pol = os.path.join(hostdir, "policy.json")
    with open(pol, "w") as f:
        json.dump({"version": 1, "filesystem": {"binds": [
            {"host": ws, "mode": "rw", "owner": "%d:%d" % OWNER}]}}, f)
    r = run_aj(["--policy", pol, "--allow-degraded"], ["sh", "-c", "echo ran"], prefix=nouserns())
    assert r.returncode == 125 and "ran" not in r.stdout, r
    assert "id-map" in r.stderr, r.stderr   # no user namespace for the mapping either
    # Network namespaces refused only: the tree is made, the run degrades,
    # and degraded mode refuses the set owner before the payload runs.
    r = run_aj(["--policy", pol, "--allow-degraded"], ["sh", "-c", "echo ran"], prefix=nouserns("--net-only"))
    assert r.returncode == 125 and "ran" not in r.stdout, r
    assert "degraded mode cannot id-map" in r.stderr, r.stderr
    # Control: the same policy where namespaces work runs, id-mapped.
    r = run_aj(["--policy", pol, "--allow-degraded"], ["sh", "-c", "echo ran"])
    assert r.returncode == 0 and r.stdout == "ran\n" and r.result["workspace_idmap"] is True, r


def test_cli_bind_owner(hostdir):
    """--bind-owner UID:GID sets the owner of the --bind-rw before it."""
    root_only("per-run host uids exist in root mode only")
    w = os.path.join(hostdir, "ws")
    os.mkdir(w)
    os.chown(w, 2345, 2346)
    r = run_aj(["--bind-rw", w + ":/ws", "--bind-owner", "2345:2346"], ["sh", "-c", "touch /ws/f && stat -c %u /ws"])
    assert r.returncode == 0 and r.stdout.strip() == "1000", r
    assert r.result["workspace_idmap"] is True
    st = os.lstat(os.path.join(w, "f"))
    assert (st.st_uid, st.st_gid) == (2345, 2346)


@pytest.mark.parametrize("args,msg", [
    (["--bind-owner", "1234:1234"], "there is none"),
    (["--bind-ro", "/usr/share:/x", "--bind-owner", "1234:1234"], "there is none"),
    (["--bind-rw", "W:/ws", "--bind-owner", "1234"], "is not UID:GID"),
    (["--bind-rw", "W:/ws", "--bind-owner", "1234:0"], "root's"),
    (["--bind-rw", "W:/ws", "--bind-owner", "1234:1234", "--bind-owner", "1234:1234"], "has an owner already"),
])
def test_cli_bind_owner_bad(hostdir, args, msg):
    r = run_aj([hostdir + a[1:] if a.startswith("W:") else a for a in args], ["sh", "-c", "echo ran"])
    assert r.returncode == 2 and "ran" not in r.stdout, r
    assert msg in r.stderr, r.stderr


def test_no_setuid_file_reaches_the_host(ws):
    """Files the payload makes in a workspace belong, on the host, to the
    workspace owner: a setuid or setgid one would run as that owner for
    any local user. Every way of setting those bits is refused (chmod,
    fchmod(at), open/creat with the mode, mknod); openat2, whose mode the
    filter cannot read, answers ENOSYS so callers fall back to openat."""
    code = r"""
import ctypes, json, os, stat
out = {}
open('plain', 'w').close()
os.chmod('plain', 0o755); out['chmod755'] = 'ok'
for name, bits in (('suid', 0o4755), ('sgid', 0o2755)):
    try:
        os.chmod('plain', bits); out['chmod_' + name] = 'ok'
    except OSError as e:
        out['chmod_' + name] = e.errno
    try:
        os.close(os.open('new_' + name, os.O_CREAT | os.O_WRONLY, bits)); out['open_' + name] = 'ok'
    except OSError as e:
        out['open_' + name] = e.errno
    try:
        os.mknod('node_' + name, stat.S_IFREG | bits); out['mknod_' + name] = 'ok'
    except OSError as e:
        out['mknod_' + name] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(437, -100, b'x', b'\0' * 24, 24)
out['openat2'] = ctypes.get_errno() if r < 0 else 'ok'
print(json.dumps(out))
"""
    r = run_aj(["--bind-rw", "%s:/ws" % ws, "--workdir", "/ws"], ["python3", "-c", code])
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["chmod755"] == "ok", out  # control: ordinary modes work
    for k in ("chmod_suid", "chmod_sgid", "open_suid", "open_sgid", "mknod_suid", "mknod_sgid"):
        assert out[k] == 1, (k, out)  # EPERM
    assert out["openat2"] == 38, out  # ENOSYS
    for dirpath, dirs, files in os.walk(ws):
        for n in dirs + files:
            mode = os.lstat(os.path.join(dirpath, n)).st_mode
            if n != "src":  # the operator's own tree may carry setgid dirs
                assert not mode & (stat.S_ISUID | stat.S_ISGID), (n, oct(mode))
    # Control: the host itself can make such a file there (the filter, not
    # the filesystem, is what refused it).
    p = os.path.join(ws, "host_suid")
    open(p, "w").close()
    os.chmod(p, 0o4755)
    assert os.stat(p).st_mode & stat.S_ISUID
