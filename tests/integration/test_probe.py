"""agentjail-probe: the in-sandbox escape-vector scanner, and `agentjail probe`.

Every expectation about the host is derived from what this test process can
see itself (its own capabilities, /proc/2/comm, ...), so the same test holds
as root and as nobody. The sandboxed runs are the denials; the unsandboxed
runs on the same host (and the fd / env / file / kernel-version cases, where
the test plants the vector) are their positive controls.
"""
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, comm, root_only, run_aj

PROBE = os.path.join(os.path.dirname(AJ_BIN), "agentjail-probe")
IN_SANDBOX = "/opt/agentjail-probe"

STATUSES = {"exposed", "blocked", "absent", "info", "unknown"}
SEVERITIES = ["critical", "high", "medium", "low", "info"]
CATEGORIES = {"privileges", "syscalls", "filesystem", "devices", "runtime", "credentials",
              "network", "processes", "kernel"}
CAP_SYS_ADMIN = 21

# Findings that must be blocked or absent inside the default sandbox.
HARDENED_PREFIXES = ("caps.", "privileges.", "namespaces.", "syscalls.", "devices.",
                     "processes.", "fds.", "filesystem.proc_sys", "filesystem.core_pattern",
                     "filesystem.sysrq_trigger", "filesystem.release_agent",
                     "network.", "credentials.")


def probe(args=(), env=None, **kw):
    return subprocess.run([PROBE] + list(args), capture_output=True, text=True, timeout=60,
                          env=env, **kw)


def probe_json(args=(), env=None, **kw):
    p = probe(["--json"] + list(args), env=env, **kw)
    assert p.returncode == 0, p.stderr
    return check_schema(json.loads(p.stdout))


def by_id(report):
    return {f["id"]: f for f in report["findings"]}


def check_schema(doc):
    """The version-1 schema, strictly: a consumer (verify, report) relies on it."""
    assert set(doc) == {"version", "probe", "kernel", "findings", "summary"}, doc.keys()
    assert doc["version"] == 1 and doc["probe"] == "agentjail-probe"
    assert isinstance(doc["kernel"], str) and doc["kernel"]
    ids = [f["id"] for f in doc["findings"]]
    assert len(ids) == len(set(ids)), "duplicate finding ids"
    for f in doc["findings"]:
        assert set(f) == {"id", "category", "status", "severity", "title", "detail"}, f
        assert re.match(r"^[a-z_]+(\.[A-Za-z0-9_-]+)+$", f["id"]), f["id"]
        assert f["category"] in CATEGORIES, f
        assert f["status"] in STATUSES, f
        assert f["severity"] in SEVERITIES, f
        assert isinstance(f["title"], str) and f["title"], f
        assert isinstance(f["detail"], str), f
    exposed = [f for f in doc["findings"] if f["status"] == "exposed"]
    assert doc["summary"]["exposed"] == len(exposed)
    assert set(doc["summary"]["by_severity"]) == set(SEVERITIES)
    for sev in SEVERITIES:
        assert doc["summary"]["by_severity"][sev] == sum(f["severity"] == sev for f in exposed)
    return doc


def sandboxed(flags=(), args=("--json",), **kw):
    r = run_aj(["--bind-ro", "%s:%s" % (PROBE, IN_SANDBOX)] + list(flags),
               [IN_SANDBOX] + list(args), **kw)
    assert r.returncode == 0, r
    return r


def own_caps():
    with open("/proc/self/status") as f:
        return int(re.search(r"^CapEff:\s*([0-9a-f]+)", f.read(), re.M).group(1), 16)



@pytest.fixture(scope="module")
def host_report():
    return probe_json()


@pytest.fixture(scope="module")
def sandbox_report():
    r = sandboxed()
    return check_schema(json.loads(r.stdout)), r


# ---- schema and output forms ------------------------------------------------

def test_json_matches_schema(host_report):
    ids = by_id(host_report)
    for must in ("caps.effective", "caps.permitted", "caps.bounding", "caps.ambient",
                 "privileges.no_new_privs", "privileges.seccomp", "namespaces.user",
                 "namespaces.mount", "syscalls.mount", "syscalls.bpf", "syscalls.io_uring",
                 "filesystem.host_mounts", "filesystem.release_agent", "fds.leaked",
                 "devices.block", "runtime.docker_sock", "runtime.k8s_token", "credentials.env",
                 "credentials.files", "network.interfaces", "processes.host_pids",
                 "kernel.version"):
        assert must in ids, must
    assert host_report["kernel"] == os.uname().release


def test_table_is_aligned():
    p = probe()
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = lines[0]
    assert header.split() == ["CHECK", "STATUS", "DETAIL"]
    st_col, det_col = header.index("STATUS"), header.index("DETAIL")
    rows = lines[1:lines.index("")]
    assert len(rows) == len(probe_json()["findings"])
    for row in rows:
        assert row[st_col - 2:st_col] == "  " and row[st_col] != " ", row
        assert row[:st_col].rstrip() and " " not in row[:st_col].rstrip(), row
        status = row[st_col:det_col].strip()
        assert re.match(r"^(exposed \((critical|high|medium|low)\)|blocked|absent|info|unknown)$",
                        status), row
    assert re.match(r"^\d+ exposed of \d+ findings", lines[-1]), lines[-1]


def test_only_runs_one_check():
    caps = probe_json(["--only", "caps"])
    assert sorted(by_id(caps)) == ["caps.ambient", "caps.bounding", "caps.effective",
                                   "caps.permitted"]
    one = probe_json(["--only", "syscalls.mount"])
    assert [f["id"] for f in one["findings"]] == ["syscalls.mount"]
    # Usage errors: exit 2, nothing on stdout.
    for bad in (["--only", "nosuchcheck"], ["--bogus"], ["extra-arg"]):
        p = probe(bad)
        assert p.returncode == 2 and p.stdout == "", (bad, p)
        assert "usage:" in p.stderr


def test_agentjail_probe_subcommand(host_report):
    p = subprocess.run([AJ_BIN, "probe", "--json", "--only", "caps"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert by_id(check_schema(json.loads(p.stdout))) == by_id(probe_json(["--only", "caps"]))
    # Arguments pass through, usage errors included.
    assert subprocess.run([AJ_BIN, "probe", "--only", "nosuchcheck"], capture_output=True,
                          timeout=60).returncode == 2
    env = dict(os.environ, AGENTJAIL_PROBE="/nonexistent/agentjail-probe")
    p = subprocess.run([AJ_BIN, "probe"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 125 and "agentjail-probe" in p.stderr


# ---- the host, unsandboxed: what it really exposes -------------------------------

def test_host_findings_match_what_this_process_sees(host_report):
    f = by_id(host_report)
    caps = own_caps()
    if caps >> CAP_SYS_ADMIN & 1:
        assert f["caps.effective"]["status"] == "exposed", f["caps.effective"]
        assert "CAP_SYS_ADMIN" in f["caps.effective"]["detail"]
        assert f["caps.effective"]["severity"] == "critical"
        for fam in ("syscalls.mount", "syscalls.setns", "syscalls.open_by_handle_at"):
            assert f[fam]["status"] == "exposed", f[fam]
        assert f["namespaces.mount"]["status"] == "exposed"
    else:
        assert f["caps.effective"]["status"] in ("absent", "info"), f["caps.effective"]
        for fam in ("syscalls.mount", "syscalls.setns", "syscalls.open_by_handle_at"):
            assert f[fam]["status"] == "blocked", f[fam]
            assert "EPERM" in f[fam]["detail"]
    with open("/proc/self/status") as st:
        status = st.read()
    nnp = re.search(r"^NoNewPrivs:\s*1$", status, re.M) is not None
    assert f["privileges.no_new_privs"]["status"] == ("blocked" if nnp else "exposed")
    if re.search(r"^Seccomp:\s*0$", status, re.M):
        # No filter: the families any user may call are reachable.
        assert f["privileges.seccomp"]["status"] == "exposed"
        for fam in ("syscalls.keyctl", "syscalls.ptrace", "syscalls.process_vm_readv"):
            assert f[fam]["status"] == "exposed", f[fam]
    else:
        assert f["privileges.seccomp"]["status"] == "blocked"
    if comm(2) == "kthreadd":  # the initial pid namespace
        assert f["processes.host_pids"]["status"] == "exposed"
        assert "kthreadd" in f["processes.host_pids"]["detail"]


def test_host_user_namespaces_match_the_kernel(host_report):
    """The probe's verdict on user namespaces is the kernel's own answer."""
    p = subprocess.run(["unshare", "--user", "true"], capture_output=True)
    expected = "exposed" if p.returncode == 0 else "blocked"
    assert by_id(host_report)["namespaces.user"]["status"] == expected


def test_leaked_directory_fd_is_found():
    d = tempfile.mkdtemp(prefix="ajtest-fd-")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        f = by_id(probe_json(["--only", "fds"], pass_fds=(fd,)))["fds.leaked"]
        assert f["status"] == "exposed", f
        assert "fd %d -> %s (directory)" % (fd, d) in f["detail"]
        # Control: the same run without it.
        assert by_id(probe_json(["--only", "fds"]))["fds.leaked"]["status"] == "absent"
    finally:
        os.close(fd)
        os.rmdir(d)


# ---- inside the default sandbox: none of it -------------------------------------

def test_default_sandbox_blocks_every_vector(sandbox_report, host_report):
    report, run = sandbox_report
    f = by_id(report)
    assert set(f) == set(by_id(host_report)), "the same checks run inside and outside"
    for fid, item in f.items():
        if fid.startswith(HARDENED_PREFIXES):
            assert item["status"] in ("blocked", "absent"), item
    assert report["summary"]["exposed"] == 0, [i for i in report["findings"]
                                               if i["status"] == "exposed"]
    assert "EPERM" in f["syscalls.mount"]["detail"]
    assert f["privileges.seccomp"]["status"] == "blocked"
    assert f["privileges.no_new_privs"]["status"] == "blocked"
    # The refused syscalls were seen by the supervisor, not just refused.
    assert run.result["events"]["escape_attempt"] > 0, run.result


def test_default_sandbox_decoys_are_present_and_named(sandbox_report):
    report, run = sandbox_report
    f = by_id(report)
    for fid in ("runtime.docker_sock", "runtime.k8s_token"):
        assert f[fid]["status"] == "info", f[fid]
        assert "agentjail decoy" in f[fid]["detail"], f[fid]
    # Reading the token is what an attacker does: the canary fired.
    assert run.result["events"]["canary"] >= 1, run.result


def test_no_decoys_means_absent():
    f = by_id(json.loads(sandboxed(["--no-decoys"], ["--json", "--only", "runtime"]).stdout))
    assert f["runtime.docker_sock"]["status"] == "absent"
    assert f["runtime.k8s_token"]["status"] == "absent"


def test_table_output_in_sandbox():
    r = sandboxed(args=())
    assert r.stdout.startswith("CHECK ")
    assert re.search(r"^syscalls\.mount +blocked +mount\(MS_MOVE\): EPERM", r.stdout, re.M)
    assert "0 exposed of" in r.stdout


# ---- credentials: names and paths, never values ----------------------------------

def test_cloud_env_names_without_values():
    secret_values = [secrets.token_hex(16) for _ in range(3)]
    env = dict(os.environ, AWS_SECRET_ACCESS_KEY=secret_values[0],
               MY_SERVICE_TOKEN=secret_values[1], DATABASE_PASSWORD=secret_values[2],
               AWS_REGION="eu-west-3")
    for p in (probe(["--json", "--only", "credentials.env"], env=env), probe(env=env)):
        assert p.returncode == 0, p.stderr
        for v in secret_values:
            assert v not in p.stdout and v not in p.stderr
    f = by_id(probe_json(["--only", "credentials"], env=env))["credentials.env"]
    assert f["status"] == "exposed"
    for name in ("AWS_SECRET_ACCESS_KEY", "MY_SERVICE_TOKEN", "DATABASE_PASSWORD"):
        assert name in f["detail"]
    assert "AWS_REGION" not in f["detail"]
    # Inside a sandbox, the same: a variable passed in is named, not shown.
    r = sandboxed(["--env", "AWS_SECRET_ACCESS_KEY=" + secret_values[0]],
                  ["--json", "--only", "credentials.env"])
    assert secret_values[0] not in r.stdout + r.stderr
    assert "AWS_SECRET_ACCESS_KEY" in by_id(json.loads(r.stdout))["credentials.env"]["detail"]
    # Control: nothing credential-like, nothing reported.
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG")}
    assert by_id(probe_json(["--only", "credentials.env"], env=clean))["credentials.env"][
        "status"] == "absent"


def test_credential_files_by_path_only():
    home = tempfile.mkdtemp(prefix="ajtest-home-")
    value = secrets.token_hex(16)
    try:
        os.makedirs(os.path.join(home, ".aws"))
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write("[default]\naws_secret_access_key = %s\n" % value)
        env = dict(os.environ, HOME=home)
        p = probe(["--json", "--only", "credentials.files"], env=env)
        assert p.returncode == 0 and value not in p.stdout
        f = by_id(json.loads(p.stdout))["credentials.files"]
        assert f["status"] == "exposed"
        assert os.path.join(home, ".aws", "credentials") + " (readable)" in f["detail"]
    finally:
        shutil.rmtree(home)


# ---- kernel version against the CVE table ---------------------------------------

@pytest.mark.parametrize("release,cve,affected", [
    ("5.8.0", "CVE-2022-0847", True),               # Dirty Pipe, first affected release
    ("5.10.101-generic", "CVE-2022-0847", True),    # last unfixed 5.10
    ("5.10.102", "CVE-2022-0847", False),           # its stable fix
    ("5.16.11-custom", "CVE-2022-0847", False),
    ("5.17.0", "CVE-2022-0847", False),             # mainline fix
    ("5.4.0-150-generic", "CVE-2022-0847", False),  # before it was introduced
    ("4.4.25", "CVE-2016-5195", True),              # Dirty COW
    ("4.4.26", "CVE-2016-5195", False),
    ("2.6.21", "CVE-2016-5195", False),
    ("6.1.75", "CVE-2024-1086", True),
    ("6.1.76", "CVE-2024-1086", False),
    ("6.18.44-fc-v669", "CVE-2024-1086", False),
])
def test_kernel_cve_matching(release, cve, affected):
    env = dict(os.environ, AGENTJAIL_PROBE_KERNEL=release)
    doc = probe_json(["--only", "kernel"], env=env)
    assert doc["kernel"] == release
    f = by_id(doc)
    assert "test override" in f["kernel.version"]["detail"]
    key = "kernel.cve." + cve
    if affected:
        assert f[key]["status"] == "exposed", f
        assert "Mitigation:" in f[key]["detail"]
    else:
        assert key not in f


def test_dirty_pipe_names_its_mitigation():
    env = dict(os.environ, AGENTJAIL_PROBE_KERNEL="5.8.0")
    f = by_id(probe_json(["--only", "kernel.cve.CVE-2022-0847"], env=env))
    assert list(f) == ["kernel.cve.CVE-2022-0847"]
    assert f["kernel.cve.CVE-2022-0847"]["severity"] == "critical"
    assert "update the kernel" in f["kernel.cve.CVE-2022-0847"]["detail"]
    # A CVE that needs user namespaces says whether this environment allows them.
    f = by_id(probe_json(["--only", "kernel.cve.CVE-2022-0185"], env=env))
    assert "user.max_user_namespaces=0" in f["kernel.cve.CVE-2022-0185"]["detail"]
    assert "Here: " in f["kernel.cve.CVE-2022-0185"]["detail"]


def test_unaffected_kernel_gives_one_info_finding():
    env = dict(os.environ, AGENTJAIL_PROBE_KERNEL="6.18.44-fc-v669")
    f = by_id(probe_json(["--only", "kernel"], env=env))
    assert not [k for k in f if k.startswith("kernel.cve.")]
    assert f["kernel.cves"]["status"] == "info"


# ---- a minimal root: no /proc, no /dev, nothing but the probe --------------------

def test_runs_in_an_empty_root():
    root_only("chroot needs CAP_SYS_CHROOT")
    root = tempfile.mkdtemp(prefix="ajtest-emptyroot-")
    try:
        shutil.copy(PROBE, os.path.join(root, "probe"))
        p = subprocess.run(["/probe", "--json"], capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: (os.chroot(root), os.chdir("/")))
        assert p.returncode == 0, p.stderr
        f = by_id(check_schema(json.loads(p.stdout)))
        assert f["processes.host_pids"]["status"] == "unknown"
        assert f["filesystem.host_mounts"]["status"] == "unknown"
        assert f["devices.block"]["status"] == "absent"
        assert f["kernel.version"]["detail"].startswith(os.uname().release)
    finally:
        shutil.rmtree(root)
