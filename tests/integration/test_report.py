"""`agentjail check` (host posture) and `agentjail report` (the risk report).

check: the live JSON has exactly the finding ids documented in
docs/risk-model.md, each with a status, a value, a reason and a
recommendation, and the exit status follows the `fail` findings. The
status logic is driven through --sysroot with a fake /proc/sys tree, where
each finding has a weak value and a positive control next to it.

report: Markdown and JSON are byte-for-byte stable for fixed inputs (golden
files in tests/golden/, generated from the fixtures there; AJ_UPDATE_GOLDEN=1
rewrites them after a deliberate change of the method); a weaker policy
(loopback network, decoys off, on_escape deny) scores a higher residual risk
than a stronger one on the same host and probe; measured exposures raise
the dimensions docs/risk-model.md says they raise; the HTML is one
self-contained file that headless Chromium renders (screenshot and DOM).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, IS_ROOT, must_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
RISK_DOC = os.path.join(ROOT, "docs", "risk-model.md")
UPDATE = os.environ.get("AJ_UPDATE_GOLDEN") == "1"
STATUSES = {"ok", "warn", "fail", "unknown"}
DIMS = ["detectability", "autonomy", "multiplicative", "attack_surface", "governance",
        "enterprise_impact"]


def aj(*args, timeout=120, cwd=None, env=None):
    return subprocess.run([AJ_BIN] + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def fixture(name):
    return os.path.join(GOLDEN, name)


def documented_check_ids():
    """The ids in the 'Host posture findings' table of docs/risk-model.md."""
    text = open(RISK_DOC, encoding="utf-8").read()
    section = text.split("## Host posture findings", 1)[1]
    ids = re.findall(r"^\| `([a-z0-9_.]+)` \|", section, re.M)
    assert len(ids) >= 20, ids
    return ids


# ---- check ---------------------------------------------------------------------

def test_check_json_has_every_documented_finding():
    p = aj("check", "--json")
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    ids = [f["id"] for f in rep["findings"]]
    assert len(ids) == len(set(ids)), "a finding id appears twice"
    assert sorted(ids) == sorted(documented_check_ids()), \
        "check findings and docs/risk-model.md disagree"
    for f in rep["findings"]:
        assert f["status"] in STATUSES, f
        assert isinstance(f["value"], str) and f["value"], f
        assert len(f["why"]) > 40, f
        assert len(f["recommendation"]) > 8, f
        if f["status"] in ("warn", "fail") and f["id"] not in ("landlock.abi", "cgroup.memory",
                                                              "cgroup.pids", "cgroup.cpu"):
            # Not "nothing to change" where something should change.
            assert "nothing to change" not in f["recommendation"], f
    fails = [f for f in rep["findings"] if f["status"] == "fail"]
    assert (p.returncode == 1) == bool(fails), (p.returncode, fails)
    assert rep["summary"] == {s: sum(1 for f in rep["findings"] if f["status"] == s)
                              for s in ("ok", "warn", "fail", "unknown")}
    assert rep["euid"] == os.geteuid()
    # The live host: values that can be read directly must match.
    by_id = {f["id"]: f for f in rep["findings"]}
    with open("/proc/sys/kernel/osrelease") as fh:
        assert rep["kernel"] == fh.read().strip()
    try:
        with open("/proc/sys/kernel/dmesg_restrict") as fh:
            assert by_id["kernel.dmesg_restrict"]["value"] == fh.read().strip()
    except FileNotFoundError:
        pass
    with open("/proc/sys/kernel/seccomp/actions_avail") as fh:
        has_notif = "user_notif" in fh.read().split()
    assert (by_id["seccomp.user_notif"]["status"] == "ok") == has_notif


def test_check_table_lists_every_finding_and_exits_like_json():
    p = aj("check")
    j = aj("check", "--json")
    assert p.returncode == j.returncode, (p.stderr, j.stderr)
    for fid in documented_check_ids():
        assert fid in p.stdout, fid
    assert re.search(r"^\d+ ok, \d+ warn, \d+ fail, \d+ unknown$", p.stdout, re.M), p.stdout


def test_check_bad_arguments():
    assert aj("check", "--bogus").returncode == 2
    assert aj("check", "extra").returncode == 2


def write_tree(root, values):
    for rel, val in values.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(val + "\n")


HARDENED = {
    "proc/sys/kernel/osrelease": "6.12.48-fake",
    "proc/sys/kernel/seccomp/actions_avail": "kill_process kill_thread trap errno user_notif trace log allow",
    "sys/kernel/security/lsm": "lockdown,capability,landlock,yama,apparmor,bpf",
    "proc/sys/user/max_user_namespaces": "1000",
    "proc/sys/kernel/unprivileged_userns_clone": "0",
    "proc/sys/kernel/unprivileged_bpf_disabled": "2",
    "proc/sys/vm/unprivileged_userfaultfd": "0",
    "proc/sys/kernel/io_uring_disabled": "2",
    "proc/sys/kernel/kptr_restrict": "2",
    "proc/sys/kernel/dmesg_restrict": "1",
    "proc/sys/kernel/perf_event_paranoid": "3",
    "proc/sys/kernel/yama/ptrace_scope": "1",
    "proc/sys/fs/protected_symlinks": "1",
    "proc/sys/fs/protected_hardlinks": "1",
    "proc/sys/fs/protected_fifos": "2",
    "proc/sys/fs/protected_regular": "2",
    "proc/sys/kernel/kexec_load_disabled": "1",
    "proc/sys/kernel/modules_disabled": "1",
}

# Weak value -> expected status, for every sysctl finding.
WEAK = {
    "kernel.unprivileged_bpf_disabled": ("proc/sys/kernel/unprivileged_bpf_disabled", "0", "warn"),
    "vm.unprivileged_userfaultfd": ("proc/sys/vm/unprivileged_userfaultfd", "1", "warn"),
    "kernel.io_uring_disabled": ("proc/sys/kernel/io_uring_disabled", "0", "warn"),
    "kernel.kptr_restrict": ("proc/sys/kernel/kptr_restrict", "0", "warn"),
    "kernel.dmesg_restrict": ("proc/sys/kernel/dmesg_restrict", "0", "warn"),
    "kernel.perf_event_paranoid": ("proc/sys/kernel/perf_event_paranoid", "-1", "warn"),
    "kernel.yama.ptrace_scope": ("proc/sys/kernel/yama/ptrace_scope", "0", "warn"),
    "fs.protected_symlinks": ("proc/sys/fs/protected_symlinks", "0", "warn"),
    "fs.protected_hardlinks": ("proc/sys/fs/protected_hardlinks", "0", "warn"),
    "fs.protected_fifos": ("proc/sys/fs/protected_fifos", "0", "warn"),
    "fs.protected_regular": ("proc/sys/fs/protected_regular", "0", "warn"),
    "kernel.kexec_load_disabled": ("proc/sys/kernel/kexec_load_disabled", "0", "warn"),
    "kernel.modules_disabled": ("proc/sys/kernel/modules_disabled", "0", "warn"),
}


def check_tree(root):
    p = aj("check", "--json", "--sysroot", root)
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    return p.returncode, {f["id"]: f for f in rep["findings"]}, rep


def test_check_sysroot_hardened_tree_is_clean(hostdir):
    write_tree(hostdir, HARDENED)
    before = {rel: open(os.path.join(hostdir, rel)).read() for rel in HARDENED}
    rc, by_id, rep = check_tree(hostdir)
    assert rep["kernel"] == "6.12.48-fake"
    for fid in WEAK:
        assert by_id[fid]["status"] == "ok", by_id[fid]
    assert by_id["seccomp.user_notif"]["status"] == "ok"
    assert by_id["lsm.stack"]["status"] == "ok"
    assert by_id["kernel.cves"]["status"] == "ok", by_id["kernel.cves"]
    # What needs a syscall is not measured from a snapshot.
    for fid in ("landlock.abi", "cgroup.memory", "cgroup.pids", "cgroup.cpu"):
        assert by_id[fid]["status"] == "unknown", by_id[fid]
    assert rc == 0, [f for f in by_id.values() if f["status"] == "fail"]
    # check only reads.
    assert before == {rel: open(os.path.join(hostdir, rel)).read() for rel in HARDENED}


@pytest.mark.parametrize("fid", sorted(WEAK))
def test_check_sysroot_weak_sysctl_warns(hostdir, fid):
    rel, weak, expect = WEAK[fid]
    write_tree(hostdir, dict(HARDENED, **{rel: weak}))
    rc, by_id, _ = check_tree(hostdir)
    assert by_id[fid]["status"] == expect, by_id[fid]
    assert by_id[fid]["value"] == weak
    assert fid.split(".", 1)[1].split(".")[-1] in by_id[fid]["recommendation"], by_id[fid]
    assert rc == 0  # warnings alone do not fail the host


def test_check_sysroot_missing_user_notif_fails(hostdir):
    write_tree(hostdir, dict(HARDENED, **{
        "proc/sys/kernel/seccomp/actions_avail": "kill_process kill_thread trap errno trace log allow"}))
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["seccomp.user_notif"]["status"] == "fail"
    assert rc == 1


def test_check_sysroot_lsm_without_landlock_fails(hostdir):
    write_tree(hostdir, dict(HARDENED, **{"sys/kernel/security/lsm": "lockdown,capability,yama,apparmor"}))
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["lsm.stack"]["status"] == "fail"
    assert rc == 1


def test_check_sysroot_absent_and_garbage(hostdir):
    values = dict(HARDENED)
    for rel in ("proc/sys/kernel/kexec_load_disabled", "proc/sys/kernel/modules_disabled",
                "proc/sys/kernel/yama/ptrace_scope", "proc/sys/kernel/io_uring_disabled"):
        del values[rel]
    values["proc/sys/kernel/kptr_restrict"] = "1x"
    write_tree(hostdir, values)
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["kernel.kexec_load_disabled"]["status"] == "ok"     # no kexec built in
    assert by_id["kernel.modules_disabled"]["status"] == "ok"        # no modules
    assert by_id["kernel.yama.ptrace_scope"]["status"] == "warn"     # Yama not active
    assert by_id["kernel.io_uring_disabled"]["status"] == "unknown"  # before 6.6
    assert by_id["kernel.kptr_restrict"]["status"] == "unknown"      # strict parse
    assert rc == 0


def test_check_sysroot_userns_max_zero_fails(hostdir):
    write_tree(hostdir, dict(HARDENED, **{"proc/sys/user/max_user_namespaces": "0"}))
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["userns.available"]["status"] == "fail"
    assert "max_user_namespaces" in by_id["userns.available"]["recommendation"]
    assert rc == 1


def table_cves():
    with open(os.path.join(ROOT, "data", "kernel-cves.json")) as fh:
        return json.load(fh)["cves"]


def test_check_sysroot_vulnerable_kernel_fails(hostdir):
    """5.10.30 is before the 5.10.31 fix of CVE-2021-22555 (and others): fail,
    naming the CVEs; 6.6.60 is past every fix the table records for 6.6."""
    write_tree(hostdir, dict(HARDENED, **{"proc/sys/kernel/osrelease": "5.10.30"}))
    rc, by_id, _ = check_tree(hostdir)
    f = by_id["kernel.cves"]
    assert f["status"] == "fail" and rc == 1, f
    assert "CVE-2021-22555" in f["value"]
    assert "update the kernel" in f["recommendation"]
    # Every entry the table says covers 5.10.30 by version is named.
    for e in table_cves():
        fixes = [v for v in e.get("stable_fixes", []) if v.startswith("5.10.")]
        if e.get("distro") or not fixes:
            continue
        intro = tuple(map(int, (e["introduced"] or "0.0").split(".")[:2]))
        if int(fixes[0].split(".")[2]) > 30 and intro <= (5, 10):
            assert e["cve"] in f["value"], e["cve"]
    write_tree(hostdir, dict(HARDENED, **{"proc/sys/kernel/osrelease": "6.6.60"}))
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["kernel.cves"]["status"] == "ok", by_id["kernel.cves"]
    assert rc == 0


def test_check_sysroot_debian_kernel_uses_the_package_version(hostdir):
    """Debian's uname -r keeps the base (6.1.0-18-amd64); uname -v has the
    package (6.1.76-1), which carries the stable fixes."""
    tree = dict(HARDENED, **{"proc/sys/kernel/osrelease": "6.1.0-18-amd64",
                             "proc/sys/kernel/version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"})
    write_tree(hostdir, tree)
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["kernel.cves"]["status"] == "ok", by_id["kernel.cves"]
    assert "Debian package 6.1.76-1" in by_id["kernel.cves"]["value"]
    tree["proc/sys/kernel/version"] = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.69-1 (2023-12-30)"
    write_tree(hostdir, tree)
    rc, by_id, _ = check_tree(hostdir)
    assert by_id["kernel.cves"]["status"] == "fail" and rc == 1
    assert "CVE-2024-1086" in by_id["kernel.cves"]["value"]   # fixed in 6.1.76


def test_check_sysroot_ubuntu_kernel_asks_for_the_vendor(hostdir):
    write_tree(hostdir, dict(HARDENED, **{
        "proc/sys/kernel/osrelease": "6.8.0-45-generic",
        "proc/sys/kernel/version": "#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024",
        "proc/version_signature": "Ubuntu 6.8.0-45.45-generic 6.8.12"}))
    rc, by_id, _ = check_tree(hostdir)
    f = by_id["kernel.cves"]
    assert f["status"] == "warn", f      # the Ubuntu-only entry: check the vendor
    assert "upstream 6.8.12" in f["value"] and "CVE-2021-3493" in f["value"]
    assert rc == 0


# ---- report: golden files and determinism -----------------------------------------

FIXED = ["--probe-json", fixture("probe-clean.json"), "--check-json", fixture("check-host.json")]


def report(*args, **kw):
    p = aj("report", *args, **kw)
    assert p.returncode == 0, p.stderr
    return p.stdout


def report_json(*args):
    return json.loads(report("--format", "json", *args))


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_report_matches_golden(fmt):
    out = report("--policy", fixture("policy-strong.json"), "--format", fmt, *FIXED)
    path = fixture("report-strong." + fmt)
    if UPDATE:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(out)
    with open(path, encoding="utf-8") as fh:
        golden = fh.read()
    assert out == golden, "report differs from %s (AJ_UPDATE_GOLDEN=1 after a deliberate change)" % path


def test_report_is_stable_across_runs_and_directories(hostdir):
    for name in ("probe-clean.json", "check-host.json", "policy-weak.json"):
        shutil.copy(fixture(name), hostdir)
    for fmt in ("md", "json", "html"):
        a = report("--policy", fixture("policy-weak.json"), "--format", fmt, *FIXED)
        b = report("--policy", "policy-weak.json", "--format", fmt, "--probe-json", "probe-clean.json",
                   "--check-json", "check-host.json", cwd=hostdir)
        assert a == b, fmt
        assert not re.search(r"20\d\d-\d\d-\d\dT", a), "a time in a report made without --now"


def test_report_now_sets_only_generated_at():
    plain = report_json("--profile", "default", *FIXED)
    stamped = report_json("--profile", "default", "--now", *FIXED)
    assert plain["generated_at"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamped["generated_at"])
    stamped["generated_at"] = None
    assert stamped == plain
    md = report("--profile", "default", "--now", *FIXED)
    assert "| Generated |" in md


def test_report_output_file(hostdir):
    out = os.path.join(hostdir, "r.md")
    p = aj("report", "--profile", "default", "--output", out, *FIXED)
    assert p.returncode == 0 and p.stdout == "", p.stderr
    assert open(out).read() == report("--profile", "default", *FIXED)


def test_report_json_shape():
    rep = report_json("--profile", "default", *FIXED)
    assert [d["key"] for d in rep["dimensions"]] == DIMS
    assert [d["letter"] for d in rep["dimensions"]] == list("DAMAGE")
    assert [d["inherent"] for d in rep["dimensions"]] == [4, 4, 4, 3, 3, 5]
    for d in rep["dimensions"]:
        assert d["floor"] <= d["residual"] <= 5
        assert d["residual"] == max(d["floor"], min(5, d["inherent"] + sum(a["delta"] for a in d["adjustments"])))
        assert d["rationale"].startswith("%d -> %d:" % (d["inherent"], d["residual"]))
        for a in d["adjustments"]:
            assert a["evidence"] and a["evidence"] in d["rationale"]
    tenths = lambda v: (sum(v) * 100 // 6 + 5) // 10  # noqa: E731  (docs/risk-model.md)
    assert rep["composite"]["inherent"] == tenths([4, 4, 4, 3, 3, 5]) / 10 == 3.8
    assert rep["composite"]["residual"] == tenths([d["residual"] for d in rep["dimensions"]]) / 10
    frameworks = {f["framework"] for f in rep["frameworks"]}
    assert frameworks == {"NIST CSF 2.0", "NIST SP 800-53", "NIST SP 800-190", "CIS Docker Benchmark",
                          "OWASP NHI Top 10", "OWASP Agentic AI"}
    refs = {f["reference"] for f in rep["frameworks"]}
    for ref in ("PR.AA-05", "PR.PS-01", "PR.IR-01", "DE.CM-09", "RS.MI-01", "SC-7", "SC-39", "AC-6",
                "AU-2", "SI-4", "CM-7", "4.5.2", "NHI2", "NHI7", "T11", "T3", "T2"):
        assert ref in refs, ref
    for f in rep["frameworks"]:
        assert f["covers"] and f["misses"], f
        assert f["status"] in ("applied", "partial", "not applied", "not addressed"), f
    misses = " ".join(f["misses"] for f in rep["frameworks"])
    for gap in ("rotation", "payload", "egress proxy"):
        assert gap in misses, gap
    assert rep["policy"]["network"]["mode"] == "loopback"
    assert rep["subject"]["policy"] == "profile:default"
    assert re.fullmatch(r"[0-9a-f]{64}", rep["subject"]["policy_sha256"])


def test_framework_rows_are_documented():
    """Every mapping the report makes is in the table of docs/risk-model.md."""
    doc = open(RISK_DOC, encoding="utf-8").read().split("## Framework mapping", 1)[1]
    doc = doc.split("\n## ", 1)[0]
    rows = [line for line in doc.splitlines() if line.startswith("| ") and "---" not in line]
    rep = report_json("--profile", "default", *FIXED)
    for f in rep["frameworks"]:
        ref = f["reference"] if f["reference"] != "5 runtime" else "\u00a75:"
        assert any(ref in r and f["framework"].split()[0] in r for r in rows), f


def by_key(rep):
    return {d["key"]: d for d in rep["dimensions"]}


def test_weaker_policy_scores_higher():
    strong = report_json("--policy", fixture("policy-strong.json"), *FIXED)
    weak = report_json("--policy", fixture("policy-weak.json"), *FIXED)
    assert weak["composite"]["residual"] > strong["composite"]["residual"], \
        (weak["composite"], strong["composite"])
    s, w = by_key(strong), by_key(weak)
    # Decoys off and no alert: attempts are less visible.
    assert w["detectability"]["residual"] > s["detectability"]["residual"]
    assert "policy:detection.decoys" in s["detectability"]["rationale"]
    assert "policy:detection.decoys" not in w["detectability"]["rationale"]
    # deny instead of kill: the code may keep trying.
    assert w["autonomy"]["residual"] > s["autonomy"]["residual"]
    assert "on_escape=kill" in s["autonomy"]["rationale"]
    # A loopback network is more surface than none.
    assert w["attack_surface"]["residual"] > s["attack_surface"]["residual"]
    assert "network.mode=none" in s["attack_surface"]["rationale"]
    # The inherent baseline does not depend on the policy.
    assert [d["inherent"] for d in weak["dimensions"]] == [d["inherent"] for d in strong["dimensions"]]
    assert weak["composite"]["inherent"] == strong["composite"]["inherent"]
    # Both are far below the no-sandbox baseline, and every residual is at most the inherent.
    for rep in (strong, weak):
        assert rep["composite"]["residual"] < rep["composite"]["inherent"]
    fw = {(f["framework"], f["reference"], f["title"]): f["status"] for f in weak["frameworks"]}
    fs = {(f["framework"], f["reference"], f["title"]): f["status"] for f in strong["frameworks"]}
    assert fs[("NIST SP 800-53", "SC-26", "Decoys")] == "applied"
    assert fw[("NIST SP 800-53", "SC-26", "Decoys")] == "not applied"
    assert fs[("NIST SP 800-53", "SC-7", "Boundary protection")] == "applied"
    assert fw[("NIST SP 800-53", "SC-7", "Boundary protection")] == "partial"


def test_exposed_probe_raises_residual():
    clean = report_json("--profile", "default", *FIXED)
    exposed = report_json("--profile", "default", "--probe-json", fixture("probe-exposed.json"),
                          "--check-json", fixture("check-host.json"))
    c, e = by_key(clean), by_key(exposed)
    assert exposed["composite"]["residual"] > clean["composite"]["residual"]
    assert e["attack_surface"]["residual"] > c["attack_surface"]["residual"]
    assert "probe:caps.effective" in e["attack_surface"]["rationale"]
    assert e["multiplicative"]["residual"] > c["multiplicative"]["residual"]
    assert "probe:credentials.env" in e["multiplicative"]["rationale"]
    assert e["enterprise_impact"]["residual"] > c["enterprise_impact"]["residual"]
    assert e["governance"]["residual"] > c["governance"]["residual"]
    # The seccomp exposure switches the monitor off.
    assert exposed["controls"]["escape_monitor"] is False and clean["controls"]["escape_monitor"] is True
    assert e["detectability"]["residual"] > c["detectability"]["residual"]
    # What the kernel did not enforce is not "applied".
    st = {(f["reference"], f["title"]): f["status"] for f in exposed["frameworks"]}
    assert st[("AC-6", "Least privilege")] == "partial"
    assert st[("SC-39", "Process isolation")] == "partial"
    assert st[("ID.RA-01", "Vulnerabilities are identified")] == "applied"
    assert "applied" in {f["status"] for f in clean["frameworks"]}
    assert {f["status"] for f in clean["frameworks"] if f["reference"] in ("AC-6", "SC-39")} == {"applied"}
    ids = {f["id"] for f in exposed["probe_findings"]}
    assert {"caps.effective", "privileges.seccomp", "credentials.env"} <= ids
    assert clean["probe_findings"] == []


def test_vulnerable_kernel_raises_attack_surface(hostdir):
    check = json.load(open(fixture("check-host.json")))
    for f in check["findings"]:
        if f["id"] == "kernel.cves":
            f["status"], f["value"] = "fail", "6.12.48-golden: CVE-2024-1086"
    path = os.path.join(hostdir, "check-vuln.json")
    with open(path, "w") as fh:
        json.dump(check, fh)
    ok = by_key(report_json("--profile", "default", *FIXED))
    bad = by_key(report_json("--profile", "default", "--probe-json", fixture("probe-clean.json"),
                             "--check-json", path))
    assert bad["attack_surface"]["residual"] == min(5, ok["attack_surface"]["residual"] + 2)
    assert "check:kernel.cves" in bad["attack_surface"]["rationale"]
    assert "check:kernel.cves" not in ok["attack_surface"]["rationale"]


def test_report_bad_input(hostdir):
    assert aj("report", "--format", "pdf", *FIXED).returncode == 2
    assert aj("report", "--bogus").returncode == 2
    p = aj("report", "--profile", "nope", *FIXED)
    assert p.returncode == 2 and "nope" in p.stderr
    p = aj("report", "--probe-json", os.path.join(hostdir, "missing.json"), "--check-json",
           fixture("check-host.json"))
    assert p.returncode == 125 and "missing.json" in p.stderr
    bad = os.path.join(hostdir, "bad.json")
    with open(bad, "w") as fh:
        fh.write("[1, 2")
    p = aj("report", "--probe-json", bad, "--check-json", fixture("check-host.json"))
    assert p.returncode == 125 and "bad.json" in p.stderr
    # A report that failed writes nothing.
    out = os.path.join(hostdir, "never.md")
    assert aj("report", "--probe-json", bad, "--check-json", fixture("check-host.json"),
              "--output", out).returncode == 125
    assert not os.path.exists(out)


# ---- HTML -------------------------------------------------------------------------------

def html_report(hostdir, policy="policy-strong.json"):
    path = os.path.join(hostdir, "report.html")
    p = aj("report", "--policy", fixture(policy), "--format", "html", "--output", path, *FIXED)
    assert p.returncode == 0, p.stderr
    os.chmod(path, 0o644)
    return path


def test_html_is_self_contained(hostdir):
    text = open(html_report(hostdir), encoding="utf-8").read()
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=""", text, re.I), "the report links to something"
    # The only URL is the SVG namespace name, which is never fetched.
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in text
    assert text.count("<svg") == 1 and 'id="damage-chart"' in text
    # One inherent and one residual bar per dimension, heights from the scores.
    rep = report_json("--policy", fixture("policy-strong.json"), *FIXED)
    for d in rep["dimensions"]:
        block = re.search(r'<g class="dim" data-key="%s">(.*?)</g>' % d["key"], text, re.S).group(1)
        inh = int(re.search(r'class="inh"[^>]*height="(\d+)"', block).group(1))
        res = int(re.search(r'class="res"[^>]*height="(\d+)"', block).group(1))
        assert inh * d["residual"] == res * d["inherent"], (d["key"], inh, res)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_html_renders_in_headless_chromium(hostdir):
    browser = chromium()
    if not browser:
        must_skip("chromium is not installed (apt-get install -y chromium)")
    page = html_report(hostdir)
    profile = tempfile.mkdtemp(prefix="ajtest-chromium-", dir=hostdir)
    shot = os.path.join(hostdir, "out.png")
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--user-data-dir=" + profile]
    env = dict(os.environ, HOME=hostdir)
    url = "file://" + page
    try:
        p = subprocess.run(base + ["--enable-logging=stderr", "--v=0", "--screenshot=" + shot,
                                   "--window-size=1200,2000", url],
                           capture_output=True, text=True, timeout=120, env=env)
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120,
                             env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("headless chromium did not finish in 120 s")
    assert os.path.exists(shot), p.stderr[-3000:]
    data = open(shot, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30000, "screenshot of %d bytes: a blank page?" % len(data)
    # Console errors from the page (CSP violations, parse errors) name its URL
    # or say "Uncaught"; dbus and GPU noise from a headless browser do not.
    errors = [line for line in p.stderr.splitlines()
              if "CONSOLE" in line or "report.html" in line or "Content Security Policy" in line
              or "Uncaught" in line]
    assert not errors, errors
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<title>Execution-environment escape: agentjail risk report" in dom.stdout
    assert 'id="damage-chart"' in dom.stdout and dom.stdout.count("<rect") >= 14
    assert "Framework mapping" in dom.stdout


# ---- live --------------------------------------------------------------------------------

def test_report_live_measures_this_host():
    """Without saved inputs the report runs the probe inside the policy and
    checks the host itself."""
    p = aj("report", "--profile", "default", "--format", "json", timeout=180)
    if p.returncode != 0 and "agentjail-probe" in p.stderr and (
            "No such file" in p.stderr or "AGENTJAIL_PROBE" in p.stderr):
        must_skip("agentjail-probe is not built: " + p.stderr.strip())
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["inputs"]["probe"]["source"].startswith("measured")
    assert rep["inputs"]["check"]["source"].startswith("measured")
    assert rep["inputs"]["probe"]["findings"] > 10
    assert rep["subject"]["mode"] == ("root" if IS_ROOT else "rootless")
    with open("/proc/sys/kernel/osrelease") as fh:
        assert rep["subject"]["kernel"] == fh.read().strip()
    # The default sandbox exposes nothing that moves a score.
    assert rep["inputs"]["probe"]["exposed"] == 0, rep["probe_findings"]
    assert rep["composite"]["residual"] < rep["composite"]["inherent"]
