"""Compatibility regression check (issue 13): the fast subsets of CPython's
regression suite, of the test suites Debian ships in Python packages and of
the agent workloads, bare and in the sandbox.

Every test that passes bare and fails only in the sandbox must be listed,
with its layer and reason, in docs/compatibility.md between the
`allowed:begin` / `allowed:end` markers; anything else fails this test, so a
change that breaks more of CPython's suite or of the tooling steps is caught.

It takes about 5 minutes (3 runs of 10 CPython modules, 2 runs of 3 Debian
suites and ~40 workload steps twice), more than the normal pytest pass can
afford: it is skipped unless AJ_COMPAT=1 (scripts/test.sh sets it for its
compat pass). Needs root (the bare runs
are as nobody) and the packages of `scripts/deps.sh compat`.
"""
import json
import os
import re
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, IS_ROOT, must_skip

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "compatibility.md")

heavy = pytest.mark.skipif(
    os.environ.get("AJ_COMPAT") != "1",
    reason="compatibility runs take ~5 min: set AJ_COMPAT=1 to run them "
           "(tests/compat/cpython.py --fast, pysuites.py --fast, workloads.sh --fast)")


def allowed():
    """{(suite, where): {test: (layer, reason)}} from docs/compatibility.md."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- allowed:begin -->(.*?)<!-- allowed:end -->", text, re.S)
    assert m, "docs/compatibility.md has no allowed:begin/allowed:end section"
    out = {}
    for line in m.group(1).splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("suite", "") or set(cells[0]) <= set("-: "):
            continue
        suite, where, test, layer, reason = cells
        assert suite in ("cpython", "debian", "workloads"), line
        assert layer and reason, "allowed entry without layer or reason: " + line
        out.setdefault((suite, where), {})[test] = (layer, reason)
    return out


def need_root_and_packages():
    if not IS_ROOT:
        must_skip("the compatibility runs need root (bare runs as nobody)")
    if not os.path.isdir("/usr/lib/python3.11/test/libregrtest"):
        must_skip("CPython's test suite is missing: scripts/deps.sh compat")


def test_allowed_list_parses():
    entries = allowed()
    assert entries, "the allowed list in docs/compatibility.md is empty or unreadable"


@heavy
def test_cpython_fast_subset():
    need_root_and_packages()
    ok = allowed()
    with tempfile.TemporaryDirectory(prefix="aj-compat-") as d:
        p = subprocess.run([os.path.join(HERE, "cpython.py"), "--fast", "--jobs", "2", "--timeout", "300",
                            "--aj", AJ_BIN, "--out", d], capture_output=True, text=True, timeout=3600)
        assert p.returncode == 0, p.stderr[-3000:]
        with open(os.path.join(d, "results.json")) as f:
            res = json.load(f)
    # positive control: the bare runs did run the suite
    assert res["summary"]["passed_bare"] > 1000, res["summary"]
    bad = []
    for e in res["modules"]:
        assert e["bare"]["pass"] > 0, "%s: nothing passed bare: %s" % (e["module"], e["bare"])
        listed = ok.get(("cpython", e["module"]), {})
        for mode in res["summary"]["modes"][1:]:
            for t in e[mode]["fail_only_in_sandbox"]:
                short = t["test"].split(".", 2)[-1]    # Class.test_name
                if "*" in listed or short in listed:
                    continue
                bad.append("%s %s [%s]: %s" % (mode, t["test"], t["cause"], t["why"][-200:]))
    assert not bad, "fail only in the sandbox and not in docs/compatibility.md:\n" + "\n".join(bad)


@heavy
def test_debian_suites_fast():
    need_root_and_packages()
    ok = allowed()
    with tempfile.TemporaryDirectory(prefix="aj-compat-") as d:
        p = subprocess.run([os.path.join(HERE, "pysuites.py"), "--fast", "--timeout", "300",
                            "--aj", AJ_BIN, "--out", d], capture_output=True, text=True, timeout=1800)
        if p.returncode == 1 and "scripts/deps.sh compat" in p.stderr:
            must_skip(p.stderr.strip())
        assert p.returncode == 0, p.stderr[-3000:]
        with open(os.path.join(d, "results.json")) as f:
            res = json.load(f)
    # positive control: the bare runs did run the suites
    assert res["summary"]["passed_bare"] > 1000, res["summary"]
    bad = []
    for e in res["suites"]:
        assert e["bare"]["pass"] > 0, "%s: nothing passed bare: %s" % (e["suite"], e["bare"])
        listed = ok.get(("debian", e["suite"]), {})
        for t in e["default"]["fail_only_in_sandbox"]:
            if "*" not in listed and t["test"] not in listed:
                bad.append("%s %s [%s]: %s" % (e["suite"], t["test"], t["cause"], t["why"][-200:]))
    assert not bad, "fail only in the sandbox and not in docs/compatibility.md:\n" + "\n".join(bad)


@heavy
def test_workloads_fast():
    need_root_and_packages()
    ok = allowed()
    with tempfile.TemporaryDirectory(prefix="aj-compat-") as d:
        p = subprocess.run([os.path.join(HERE, "workloads.sh"), "--fast", "--aj", AJ_BIN, "--out", d],
                           capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, p.stderr[-3000:]
        with open(os.path.join(d, "results.json")) as f:
            res = json.load(f)
    s = res["summary"]
    # positive control: every step that ran works bare
    assert s["pass_bare"] >= 30 and not s["fail_bare"], s
    bad = [e["step"] + ": " + e.get("sandbox_stderr", "")[-200:] for e in res["steps"]
           if e["fails_only_in_sandbox"] and ("workloads", e["step"]) not in ok]
    assert not bad, "fail only in the sandbox and not in docs/compatibility.md:\n" + "\n".join(bad)
