"""agentjail inside a real Docker container.

The suite starts its own dockerd (no networking: --bridge=none
--iptables=false; its own data root, exec root and socket in a temporary
directory), builds an image locally with `docker import` from a root made
of the host's own files (agentjail is static; /bin/sh, /bin/true and the
libraries they need: no registry, no mirror, under a second to build), and
runs every container with --network none. It checks what
tests/integration/test_container.py reproduces on the host, in Docker
itself: Docker's default profile gives the seccomp message, degraded mode
works under it with the missing layers named, the shipped profile with
systempaths=unconfined works rootless with --cap-drop ALL and as root with
the documented capabilities, and a root without CAP_LEASE fails clearly
unless the policy allows running without decoys. dockerd is stopped and
its directories removed at the end; where it cannot start, the suite skips
with the reason. Needs docker.io (scripts/deps.sh test installs it).
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import AJ_BIN, IS_ROOT, ROOT, must_skip

SHIPPED_PROFILE = os.path.join(ROOT, "deploy", "docker", "seccomp.json")
IMAGE = "agentjail-test:local"
AJ_IN = "/usr/local/bin/agentjail"
SHIPPED = ["--security-opt", "seccomp=" + SHIPPED_PROFILE, "--security-opt", "systempaths=unconfined"]
ROOT_CAPS = ["--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "LEASE"]
MARK = "AJTEST-RESULT:"


def _root_files(dest):
    """A usr-merged root with agentjail and what its payloads here need."""
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/local/bin", "tmp", "run", "etc", "proc", "sys",
              "dev"):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        os.symlink(target, os.path.join(dest, link))
    os.chmod(os.path.join(dest, "tmp"), 0o1777)
    progs = [shutil.which(p) for p in ("sh", "true", "cat", "echo")]
    libs = set()
    for prog in progs + [AJ_BIN]:  # agentjail is static, but not the ASan build
        out = subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
        libs.update(w for line in out.splitlines() for w in line.split() if w.startswith("/"))
    for path in progs + sorted(libs):
        real = os.path.realpath(path)
        rel = path.lstrip("/")
        if not rel.startswith("usr/"):
            rel = "usr/" + rel  # /lib/x86_64-linux-gnu -> usr/lib/..., usr-merged
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(real, os.path.join(dest, rel))
    shutil.copy2(AJ_BIN, os.path.join(dest, AJ_IN.lstrip("/")))
    with open(os.path.join(dest, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/tmp:/bin/sh\n")


class Docker:
    # vfs works on any filesystem; a test that builds images may ask for
    # overlay2 (test_deploy_image.py), which copies no layer.
    storage_driver = "vfs"

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ajtest-docker-", dir="/tmp")
        self.sock = os.path.join(self.dir, "docker.sock")
        self.env = dict(os.environ, DOCKER_HOST="unix://" + self.sock)
        self.proc = None
        # Directories dockerd and containerd make outside the ones we give
        # them (plugin sockets, shim sockets): removed at the end if we
        # made them.
        # Containers' cgroups go under a parent of our own, removed at the end.
        self.cgroup_parent = os.path.basename(self.dir)
        self.outside = [d for d in ("/run/docker/plugins", "/run/docker", "/run/containerd/s", "/run/containerd")
                        if not os.path.exists(d)]

    def start(self):
        """None, or why dockerd cannot run here."""
        if not shutil.which("dockerd") or not shutil.which("docker"):
            return "docker.io is not installed (scripts/deps.sh test installs it)"
        if not IS_ROOT:
            return "dockerd needs root (the nobody pass runs rootless cases through --user)"
        if not os.path.exists(AJ_BIN):
            return "no agentjail binary at " + AJ_BIN
        with open(os.path.join(self.dir, "daemon.json"), "w") as f:
            # Else dockerd 20.10 writes its trust key to /etc/docker/key.json.
            json.dump({"deprecated-key-path": os.path.join(self.dir, "key.json")}, f)
        with open(os.path.join(self.dir, "dockerd.log"), "w") as log:
            self.proc = subprocess.Popen(
                ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false", "--storage-driver=" + self.storage_driver,
                 "--data-root", os.path.join(self.dir, "data"), "--exec-root", os.path.join(self.dir, "exec"),
                 "--pidfile", os.path.join(self.dir, "dockerd.pid"), "--host", "unix://" + self.sock,
                 "--config-file", os.path.join(self.dir, "daemon.json"), "--cgroup-parent", self.cgroup_parent],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.docker("version", check=False).returncode == 0:
                return None
            time.sleep(0.2)
        with open(os.path.join(self.dir, "dockerd.log")) as f:
            tail = f.read()[-600:]
        return "dockerd did not start: " + tail.replace("\n", " | ")

    def docker(self, *args, check=True, timeout=120, input=None):
        p = subprocess.run(["docker"] + list(args), capture_output=True, text=True, env=self.env, timeout=timeout,
                           input=input)
        if check and p.returncode != 0:
            raise AssertionError("docker %s: %s" % (" ".join(args), p.stderr))
        return p

    def build_image(self):
        root = os.path.join(self.dir, "root")
        _root_files(root)
        tar = subprocess.run(["tar", "-C", root, "-c", "."], capture_output=True, check=True).stdout
        p = subprocess.run(["docker", "import", "-", IMAGE], input=tar, capture_output=True, env=self.env,
                           timeout=120)
        if p.returncode != 0:
            raise AssertionError("docker import: %s" % p.stderr.decode(errors="replace"))
        shutil.rmtree(root)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            # Containers are --rm; dockerd stops its containerd on SIGTERM.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        subprocess.run(["umount", "-R", "-l", self.dir], capture_output=True)  # nothing, unless dockerd died
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in glob.glob("/sys/fs/cgroup/*/" + self.cgroup_parent) + glob.glob("/sys/fs/cgroup/" + self.cgroup_parent):
            try:
                os.rmdir(d)
            except OSError:
                pass
        for d in self.outside:  # deepest first; only if empty (another dockerd may use them)
            try:
                os.rmdir(d)
            except OSError:
                pass


@pytest.fixture(scope="module")
def docker():
    d = Docker()
    why = d.start()
    try:
        if why and not IS_ROOT:
            pytest.skip(why)  # the root pass runs it; not a missing feature of this machine
        if why:
            must_skip(why)
        d.build_image()
        yield d
    finally:
        d.stop()
    assert not os.path.exists(d.dir)
    assert not [x for x in d.outside if os.path.exists(x)]
    assert not glob.glob("/sys/fs/cgroup/*/" + d.cgroup_parent)


def aj_in(docker, opts, aj_args, cmd=("/bin/true",)):
    """docker run --rm --network none OPTS IMAGE: agentjail run AJ_ARGS --
    CMD, the result printed after it. Returns (rc, stdout, stderr, result)."""
    script = ('%s run --result /tmp/r.json %s -- %s; rc=$?; [ -f /tmp/r.json ] && { printf "\\n%s"; '
              'cat /tmp/r.json; }; exit $rc' % (AJ_IN, " ".join(aj_args), " ".join(cmd), MARK))
    p = docker.docker("run", "--rm", "--network", "none", *opts, IMAGE, "/bin/sh", "-c", script, check=False)
    out, _, res = p.stdout.partition(MARK)
    return p.returncode, out, p.stderr, json.loads(res) if res else None


def test_docker_default_profile_names_seccomp(docker):
    rc, _, err, _ = aj_in(docker, [], [])
    assert rc == 125, err
    assert "seccomp filter on agentjail refuses them" in err, err
    assert "--security-opt seccomp=deploy/docker/seccomp.json --security-opt systempaths=unconfined" in err, err


def test_docker_default_profile_degraded_works_with_missing_layers_named(docker):
    rc, out, err, res = aj_in(docker, [], ["--allow-degraded"], ["/bin/echo", "AJTEST-IN-DOCKER"])
    assert rc == 0, err
    assert out.strip() == "AJTEST-IN-DOCKER"
    assert res["degraded"] is True and res["layers"]["fresh_keyring"] is False
    assert res["layers"]["landlock_fs"] is True and res["layers"]["seccomp"] is True
    assert "missing layers:" in err and "fresh_keyring" in err, err


def test_docker_seccomp_unconfined_alone_names_systempaths(docker):
    rc, _, err, _ = aj_in(docker, ["--security-opt", "seccomp=unconfined"] + ROOT_CAPS, [])
    assert rc == 125, err
    assert "--security-opt systempaths=unconfined" in err, err


def test_docker_shipped_profile_rootless_cap_drop_all(docker):
    rc, out, err, res = aj_in(docker, SHIPPED + ["--cap-drop", "ALL", "--user", "1000"], [],
                              ["/bin/echo", "AJTEST-ROOTLESS"])
    assert rc == 0, err
    assert out.strip() == "AJTEST-ROOTLESS"
    assert res["mode"] == "rootless" and res["degraded"] is False
    for layer in ("user_namespace", "network_namespace", "private_root", "seccomp", "landlock_fs", "fresh_keyring",
                  "decoys", "nested_namespaces_refused"):
        assert res["layers"][layer] is True, layer
    # Missing by design without root: the per-run uid and the cgroup limits.
    assert res["layers"]["per_run_host_uid"] is False and res["layers"]["memory_limit"] is False


def test_docker_shipped_profile_root_with_documented_caps(docker):
    # Five runs in one container: the network-namespace helper used to lose
    # a race with init's uid switch in most of them (no CAP_SYS_PTRACE).
    script = ("for i in 1 2 3 4 5; do %s run --result /tmp/r$i.json -- /bin/true || exit $?; done; "
              "cat /tmp/r5.json" % AJ_IN)
    p = docker.docker("run", "--rm", "--network", "none", *(SHIPPED + ROOT_CAPS), IMAGE, "/bin/sh", "-c", script,
                      check=False)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["mode"] == "root" and res["degraded"] is False
    for layer in ("per_run_host_uid", "network_namespace", "private_root", "decoys", "nested_namespaces_refused",
                  "fresh_keyring"):
        assert res["layers"][layer] is True, layer


def test_docker_root_without_setuid_names_the_caps(docker):
    rc, _, err, _ = aj_in(docker, SHIPPED + ["--cap-drop", "ALL"], [])
    assert rc == 125, err
    assert "--cap-add SETUID --cap-add SETGID" in err and "--user 1000" in err, err


def test_docker_without_cap_lease_fails_unless_allowed(docker):
    no_lease = SHIPPED + ["--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID"]
    rc, _, err, res = aj_in(docker, no_lease, [])
    assert rc == 125, err
    assert "lacks CAP_LEASE" in err and "--cap-add LEASE" in err, err
    rc, _, err, res = aj_in(docker, no_lease, ["--allow-no-decoys"])
    assert rc == 0, err
    assert res["layers"]["decoys"] is False


def test_docker_check_reports_what_run_will_do(docker):
    p = docker.docker("run", "--rm", "--network", "none", IMAGE, AJ_IN, "check", "--json", check=False)
    rep = json.loads(p.stdout)
    trial = {f["id"]: f for f in rep["findings"]}["run.trial"]
    assert p.returncode == 1 and trial["status"] == "fail", trial
    assert "seccomp" in trial["value"] and "--allow-degraded would run" in trial["value"], trial


def test_docker_root_with_the_cgroup_hierarchy_gets_limits(docker):
    # Docker mounts the cgroup hierarchy read-only: the default limits are
    # missing (verify says so). On a cgroup v1 host, binding the memory and
    # pids hierarchies writable gives runs their limits (docs/deploy.md has
    # the trade-off: the container's root can then write any cgroup there).
    if not (os.path.isdir("/sys/fs/cgroup/memory") and os.path.isdir("/sys/fs/cgroup/pids")):
        pytest.skip("cgroup v1 memory and pids hierarchies only (this check binds them)")
    rc, _, err, res = aj_in(docker, SHIPPED + ROOT_CAPS, [])
    assert rc == 0, err
    assert res["layers"]["memory_limit"] is False and res["layers"]["pids_limit"] is False
    binds = ["-v", "/sys/fs/cgroup/memory:/sys/fs/cgroup/memory:rw", "-v", "/sys/fs/cgroup/pids:/sys/fs/cgroup/pids:rw"]
    rc, _, err, res = aj_in(docker, SHIPPED + ROOT_CAPS + binds, ["--memory", "64M", "--pids", "20"])
    assert rc == 0, err
    assert res["layers"]["memory_limit"] is True and res["layers"]["pids_limit"] is True
