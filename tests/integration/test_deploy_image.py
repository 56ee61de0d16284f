"""deploy/Containerfile, built and run with a real Docker daemon, both
least-privilege ways of docs/deploy.md.

The suite's own dockerd (tests/integration/test_docker.py: no networking,
its own data root and socket, stopped and removed at the end) builds the
image from this tree with `docker build`, with no registry: its two bases
are Debian 12 roots that deploy/base-root.sh makes with debootstrap from
the host's apt mirror, cached in /var/cache/agentjail-test (made once per
machine, about a minute each) and `docker import`ed. Then `agentjail serve`
runs in a container with --network none, listening on a unix socket in a
directory the test binds, and the test talks HTTP to it:

  rootless way: the image's user (10001), --cap-drop ALL,
    no-new-privileges, the shipped seccomp profile, systempaths=unconfined;
  every-layer way: the same as uid 0 plus SETUID, SETGID and LEASE, and on
    a cgroup v1 host the memory and pids hierarchies bound writable (a
    delegated cgroup v2 subtree needs a v2 host: the VM suite).

Each way: POST /v1/runs of python print(1) works with the layers the way
promises; an escape attempt is refused and reported; `agentjail check`
in the container names the way and what is missing; controls without the
profile or the unmasked /proc name what is missing instead.
Heavy (an image build): release root pass only.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import IS_ROOT, ROOT, heavy_only, must_skip, wait_for
from test_docker import Docker
from srvhelp import UnixConnection

IMAGE = "agentjail:test"
CACHE = os.environ.get("AJ_DEPLOY_CACHE", "/var/cache/agentjail-test")
PROFILE = os.path.join(ROOT, "deploy", "docker", "seccomp.json")
TOKEN = "deploy-test-token-0123456789"
ROOTLESS = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + PROFILE,
            "--security-opt", "systempaths=unconfined"]
EVERY_CAPS = ["--user", "0:0", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "LEASE"]
CGROUP = "a delegated cgroup (memory, pids)"
V1_CGROUP = os.path.isdir("/sys/fs/cgroup/memory") and os.path.isdir("/sys/fs/cgroup/pids")
CGROUP_BINDS = ["-v", "/sys/fs/cgroup/memory:/sys/fs/cgroup/memory:rw",
                "-v", "/sys/fs/cgroup/pids:/sys/fs/cgroup/pids:rw"] if V1_CGROUP else []
EVERY = ROOTLESS + EVERY_CAPS + CGROUP_BINDS
ESCAPE = ("import ctypes, os\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "r = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER: regain capabilities
          "print(r, os.strerror(ctypes.get_errno()))\n"
          "print(libc.mount(b'/etc', b'/tmp', None, 4096, None))\n")  # MS_BIND: a path to decode


def assert_escape_reported(j):
    """The escape attempts were refused, and the events name them with
    their arguments: the supervisor read the path from the sandbox's
    memory (what needs no CAP_SYS_PTRACE: the sandbox's user namespace is
    the supervisor's own child)."""
    assert j["stdout"].startswith("-1 ") and j["stdout"].split("\n")[1] == "-1", j  # both refused
    esc = {e["syscall"]: e for e in j["events"] if e["type"] == "escape_attempt"}
    assert esc["unshare"]["args"] == ["CLONE_NEWUSER"], esc
    assert esc["mount"]["args"][:2] == ["/etc", "/tmp"], esc
    assert j["result"]["escape_attempted"] is True and esc["mount"]["technique"] == "T1611", j


def _import_base(d, kind):
    script = os.path.join(ROOT, "deploy", "base-root.sh")
    with tempfile.TemporaryFile(dir="/var/tmp") as tar:
        p = subprocess.run([script, "--cache", CACHE, kind], stdout=tar, stderr=subprocess.PIPE, timeout=900)
        if p.returncode != 0:
            raise AssertionError("base-root.sh %s: %s" % (kind, p.stderr.decode(errors="replace")))
        tar.seek(0)
        p = subprocess.run(["docker", "import", "-", "agentjail-base-%s:test" % kind], stdin=tar,
                           capture_output=True, env=d.env, timeout=300)
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def docker():
    heavy_only("builds the container image (debootstrap once per machine, then a compile)")
    if not IS_ROOT:
        pytest.skip("dockerd needs root (the root pass runs this)")
    if not shutil.which("debootstrap"):
        must_skip("debootstrap is not installed (scripts/deps.sh test installs it)")
    d = Docker()
    d.storage_driver = "overlay2"  # vfs copies every layer of the build: minutes
    why = d.start()
    if why:  # a filesystem overlayfs cannot stack on: vfs it is
        d.stop()
        d = Docker()
        why = d.start()
    try:
        if why:
            must_skip(why)
        _import_base(d, "build")
        _import_base(d, "runtime")
        # The legacy builder: this Docker has no buildx (BuildKit would
        # need it), and the Containerfile needs nothing newer.
        p = subprocess.run(["docker", "build", "-q", "-f", os.path.join(ROOT, "deploy", "Containerfile"),
                            "--build-arg", "BASE=agentjail-base-build:test",
                            "--build-arg", "RUNTIME_BASE=agentjail-base-runtime:test", "-t", IMAGE, ROOT],
                           capture_output=True, text=True, env=dict(d.env, DOCKER_BUILDKIT="0"), timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        yield d
    finally:
        d.stop()


class Served:
    """agentjail serve in a container (the image's default command), on a
    unix socket in a directory bound from the host."""

    def __init__(self, docker, flags, uid):
        self.docker = docker
        self.dir = tempfile.mkdtemp(prefix="ajtest-deploy-")
        os.chmod(self.dir, 0o755)
        etc, sock = os.path.join(self.dir, "etc"), os.path.join(self.dir, "sock")
        os.makedirs(os.path.join(etc, "tenants"))
        os.mkdir(sock, 0o700)
        os.chown(sock, uid, uid)
        # The config as a ConfigMap would give it, the tenants as a Secret.
        with open(os.path.join(etc, "server.json"), "w") as f:
            json.dump({"listen": "unix:/run/agentjail/serve.sock", "store": "/var/lib/agentjail/store/runs.db"}, f)
        with open(os.path.join(etc, "tenants", "tenants.json"), "w") as f:
            json.dump({"team-a": {"token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}}, f)
        for root, dirs, files in os.walk(etc):
            for n in dirs:
                os.chmod(os.path.join(root, n), 0o755)
            for n in files:
                os.chmod(os.path.join(root, n), 0o644)
        self.sock = os.path.join(sock, "serve.sock")
        p = docker.docker("run", "-d", "--network", "none", *flags, "-v", etc + ":/etc/agentjail:ro",
                          "-v", sock + ":/run/agentjail", IMAGE, check=False)
        assert p.returncode == 0, p.stderr
        self.id = p.stdout.strip()
        ready = wait_for(lambda: self._get("/readyz") == 200 or not self.running(), 60)
        assert ready and self.running(), self.logs()

    def running(self):
        p = self.docker.docker("inspect", "-f", "{{.State.Running}}", self.id, check=False)
        return p.stdout.strip() == "true"

    def logs(self):
        p = self.docker.docker("logs", self.id, check=False)
        return p.stdout + p.stderr

    def _get(self, path):
        try:
            c = UnixConnection(self.sock, timeout=10)
            c.request("GET", path)
            return c.getresponse().status
        except OSError:
            return None

    def run(self, body):
        c = UnixConnection(self.sock, timeout=120)
        c.request("POST", "/v1/runs", body=json.dumps(body),
                  headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())

    def verify(self):
        """agentjail verify in the server's container: agentjail-probe run
        inside the default policy's sandbox, under the container's profile."""
        p = self.docker.docker("exec", self.id, "agentjail", "verify", "--json", check=False)
        assert p.stdout.strip(), p.stderr
        return p.returncode, json.loads(p.stdout)

    def check(self):
        p = self.docker.docker("exec", self.id, "agentjail", "check", "--json", check=False)
        return json.loads(p.stdout)

    def stop(self):
        self.docker.docker("rm", "-f", self.id, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def rootless(docker):
    s = Served(docker, ROOTLESS, 10001)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def every(docker):
    s = Served(docker, EVERY, 0)
    yield s
    s.stop()


def check_in(docker, flags):
    """agentjail check --json in a fresh container with FLAGS."""
    p = docker.docker("run", "--rm", "--network", "none", *flags, IMAGE, "check", "--json", check=False)
    return json.loads(p.stdout)


def test_image_is_the_runtime_only_and_serves_as_non_root(docker):
    cfg = json.loads(docker.docker("inspect", IMAGE).stdout)[0]["Config"]
    assert cfg["User"] == "10001:10001" and cfg["Cmd"] == ["serve"], cfg
    assert cfg["Entrypoint"] == ["/usr/local/bin/agentjail-entrypoint"], cfg
    p = docker.docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", IMAGE, "-c",
                      "id -u; python3 -c 'print(6*7)'; ls /usr/local/bin; "
                      "for t in gcc cc meson ninja apt-get; do command -v $t; done; true")
    lines = p.stdout.split()
    assert lines[0] == "10001" and lines[1] == "42", p.stdout
    assert {"agentjail", "agentjail-serve", "agentjail-probe", "agentjail-entrypoint"} <= set(lines), p.stdout
    # The build tools stayed in the build stage (apt-get is Debian's own).
    assert not [x for x in lines if x.endswith(("/gcc", "/cc", "/meson", "/ninja"))], p.stdout


def test_rootless_way_serves_a_run(rootless):
    status, j = rootless.run({"language": "python", "code": "print(1)"})
    assert status == 200 and j["status"] == "ok" and j["stdout"] == "1\n", j
    res = j["result"]
    assert res["mode"] == "rootless" and res["degraded"] is False and res["host_uid"] == 10001, res
    for layer in ("user_namespace", "network_namespace", "private_root", "seccomp", "landlock_fs", "fresh_keyring",
                  "decoys", "nested_namespaces_refused", "escape_monitor"):
        assert res["layers"][layer] is True, layer
    # What the rootless way gives up, and the result says so.
    assert res["layers"]["per_run_host_uid"] is False and res["layers"]["memory_limit"] is False, res["layers"]


def test_rootless_way_refuses_and_reports_an_escape(rootless):
    status, j = rootless.run({"language": "python", "code": ESCAPE})
    assert status == 200, j
    assert_escape_reported(j)
    # Positive control: the same server runs code that does not try it.
    status, j = rootless.run({"language": "python", "code": "print('-1'.lstrip('-'))"})
    assert j["status"] == "ok" and not j["result"]["escape_attempted"], j


def test_rootless_way_check_names_the_way_and_what_every_layer_needs(rootless):
    dep = rootless.check()["deployment"]
    assert dep["way"] == "rootless" and dep["missing_for_rootless"] == [], dep
    assert set(dep["missing_for_every_layer"]) == {"uid 0", "CAP_SETUID", "CAP_SETGID",
                                                   "CAP_LEASE", CGROUP}, dep
    assert dep["summary"].startswith("rootless (in a docker container); missing for every layer:"), dep


def test_rootless_way_probe_finds_what_the_policy_declares(rootless):
    rc, v = rootless.verify()
    bad = {c["protection"] for c in v["checks"] if not c["ok"]}
    # Everything the default policy declares is found in place, but what
    # the rootless way gives up by design: the cgroup limits (verify says
    # so, exit 1). The sandbox layers all match.
    assert rc == 1 and v["matches"] is False, v
    assert bad and bad <= {"layer.cgroup", "layer.memory_limit", "layer.pids_limit"}, bad
    ok = {c["protection"] for c in v["checks"] if c["ok"]}
    assert {"layer.user_namespace", "layer.seccomp", "layer.landlock_fs", "layer.nested_namespaces_refused"} <= ok, ok
    assert v["result"]["mode"] == "rootless", v["result"]


def test_without_the_unmasked_proc_check_names_it(docker):
    assert ROOTLESS[-2:] == ["--security-opt", "systempaths=unconfined"]
    flags = ROOTLESS[:-2]
    dep = check_in(docker, flags)["deployment"]
    assert dep["way"] in ("none", "degraded"), dep
    assert any("unmasked /proc" in m for m in dep["missing_for_rootless"]), dep


def test_under_dockers_default_profile_check_names_the_profile(docker):
    dep = check_in(docker, ["--cap-drop", "ALL", "--security-opt", "systempaths=unconfined"])["deployment"]
    assert dep["way"] == "degraded", dep
    assert any("deploy/docker/seccomp.json" in m for m in dep["missing_for_rootless"]), dep


def test_every_layer_way_serves_a_run_with_its_own_host_uid(every):
    status, j = every.run({"language": "python", "code": "print(1)"})
    assert status == 200 and j["status"] == "ok" and j["stdout"] == "1\n", j
    res = j["result"]
    assert res["mode"] == "root" and res["degraded"] is False and res["host_uid"] != 0, res
    for layer in ("per_run_host_uid", "user_namespace", "network_namespace", "private_root", "seccomp",
                  "decoys", "nested_namespaces_refused", "escape_monitor"):
        assert res["layers"][layer] is True, layer
    if V1_CGROUP:
        assert res["layers"]["memory_limit"] is True and res["layers"]["pids_limit"] is True, res["layers"]


def test_every_layer_way_refuses_and_reports_an_escape(every):
    status, j = every.run({"language": "python", "code": ESCAPE})
    assert status == 200, j
    assert_escape_reported(j)


def test_every_layer_way_check_names_it(every):
    dep = every.check()["deployment"]
    if not V1_CGROUP:
        # Docker mounts a cgroup v2 hierarchy read-only: only the VM
        # suite's delegated subtree shows every-layer on v2.
        assert dep["way"] == "partial" and dep["missing_for_every_layer"] == [CGROUP]
        return
    assert dep["way"] == "every-layer" and dep["missing_for_every_layer"] == [], dep
    assert dep["summary"] == "every-layer (in a docker container)", dep


def test_every_layer_way_probe_finds_what_the_policy_declares(every):
    rc, v = every.verify()
    bad = [c for c in v["checks"] if not c["ok"]]
    assert rc == 0 and v["matches"] is True and not bad, bad
    assert v["result"]["mode"] == "root", v["result"]


def test_root_without_lease_check_names_cap_lease(docker):
    flags = ROOTLESS + ["--user", "0:0", "--cap-add", "SETUID", "--cap-add", "SETGID"] + CGROUP_BINDS
    dep = check_in(docker, flags)["deployment"]
    assert dep["way"] == "none" and dep["missing_for_every_layer"] == ["CAP_LEASE"], dep
    assert any("CAP_LEASE" in m for m in dep["missing_for_rootless"]), dep


# ---- podman -----------------------------------------------------------------------------
# The same Containerfile with `podman build` (rootful, storage in a temporary
# directory of its own, --network none: the build needs no network), and
# `agentjail check` in a container both ways. Podman's flag for an unmasked
# /proc is `--security-opt unmask=ALL`: unmasking /proc/sys alone is not
# enough, the kernel refuses a new proc mount while any part of /proc is
# masked (`fsmount proc: Operation not permitted`).

class Podman:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ajtest-podman-", dir="/var/tmp")
        self.base = ["podman", "--root", os.path.join(self.dir, "root"), "--runroot", os.path.join(self.dir, "run"),
                     "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--events-backend", "none"]
        self.env = dict(os.environ, TMPDIR=self.dir)
        self.cgroups_before = set(self.cgroups())

    def run(self, *args, input_file=None, timeout=600):
        return subprocess.run(self.base + list(args), stdin=input_file, capture_output=True, text=True,
                              env=self.env, timeout=timeout)

    @staticmethod
    def cgroups():
        """The cgroups podman makes with its cgroupfs manager (libpod_parent,
        and conmon's below it), deepest first."""
        import glob
        found = glob.glob("/sys/fs/cgroup/*/libpod_parent") + glob.glob("/sys/fs/cgroup/libpod_parent")
        out = []
        for top in found:
            for root, dirs, _ in os.walk(top, topdown=False):
                out += [os.path.join(root, d) for d in dirs]
            out.append(top)
        return out

    def stop(self):
        self.run("system", "reset", "-f", timeout=120)
        subprocess.run(["umount", "-R", "-l", self.dir], capture_output=True)  # nothing, unless podman died
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in self.cgroups():
            if d not in self.cgroups_before:
                try:
                    os.rmdir(d)
                except OSError:
                    pass


@pytest.fixture(scope="module")
def podman():
    heavy_only("builds the container image with podman")
    if not IS_ROOT:
        pytest.skip("rootful podman (the root pass runs this)")
    if not shutil.which("podman"):
        must_skip("podman is not installed (scripts/deps.sh test installs it)")
    pm = Podman()
    try:
        for kind in ("build", "runtime"):
            with tempfile.TemporaryFile(dir="/var/tmp") as tar:
                p = subprocess.run([os.path.join(ROOT, "deploy", "base-root.sh"), "--cache", CACHE, kind], stdout=tar,
                                   stderr=subprocess.PIPE, timeout=900)
                assert p.returncode == 0, p.stderr
                tar.seek(0)
                p = pm.run("import", "-q", "-", "agentjail-base-%s:test" % kind, input_file=tar)
                assert p.returncode == 0, p.stderr
        p = pm.run("build", "-q", "--network", "none", "-f", os.path.join(ROOT, "deploy", "Containerfile"),
                   "--build-arg", "BASE=localhost/agentjail-base-build:test",
                   "--build-arg", "RUNTIME_BASE=localhost/agentjail-base-runtime:test", "-t", IMAGE, ROOT,
                   timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        yield pm
    finally:
        pm.stop()
    assert not os.path.exists(pm.dir)
    assert set(pm.cgroups()) <= pm.cgroups_before, "podman's cgroups left behind"


def podman_check(pm, flags):
    # Podman asks for RLIMIT_NOFILE and RLIMIT_NPROC of its own (1048576,
    # 4194304), which this test machine's runc may not set (it lacks
    # CAP_SYS_RESOURCE): small ones do for a check.
    limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
    p = pm.run("run", "--rm", "--network", "none", *limits, *flags,
               "localhost/" + IMAGE, "check", "--json", timeout=300)
    assert p.stdout.strip(), p.stderr
    return json.loads(p.stdout)["deployment"]


PODMAN_ROOTLESS = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + PROFILE,
                   "--security-opt", "unmask=ALL"]


def test_podman_builds_the_image_and_check_names_both_ways(podman):
    dep = podman_check(podman, PODMAN_ROOTLESS)
    assert dep["way"] == "rootless" and dep["container"] == "podman", dep
    dep = podman_check(podman, PODMAN_ROOTLESS + ["--user", "0:0", "--cap-add", "SETUID,SETGID,LEASE"])
    # Podman mounts the cgroup tree read-only too: root mode without limits.
    assert dep["way"] in ("partial", "every-layer"), dep
    assert dep["missing_for_every_layer"] in ([], [CGROUP]), dep
    # Control: /proc/sys alone unmasked, as a reader of the Docker flag might
    # guess: no sandbox, and check says what is missing.
    flags = PODMAN_ROOTLESS[:-1] + ["unmask=/proc/sys"]
    dep = podman_check(podman, flags)
    assert dep["way"] in ("none", "degraded"), dep
    assert any(m.startswith("an unmasked /proc") for m in dep["missing_for_rootless"]), dep
