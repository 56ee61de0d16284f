"""The key reference in docs/policy.md is generated from the key table
(src/lib/policy/keys.c) by `agentjail policy keys --markdown`: these tests
fail when the file and the binary disagree (run tools/update-policy-doc.py
after changing a row), and check what the tables claim against what the
binary does: each default is what `policy show` prints, each flag is one
`agentjail run` takes, each range's ends load and one step beyond them is
refused with the key named."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import AJ_BIN, ROOT

DOC = os.path.join(ROOT, "docs", "policy.md")
TOOL = os.path.join(ROOT, "tools", "update-policy-doc.py")
BEGIN = "<!-- BEGIN KEYS:"
END = "<!-- END KEYS -->"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJAIL_")}


def aj(*args):
    return subprocess.run([AJ_BIN] + list(args), capture_output=True, text=True, timeout=30, env=ENV)


def generated():
    p = aj("policy", "keys", "--markdown")
    assert p.returncode == 0 and p.stderr == "", p
    return p.stdout


def doc_region(path=DOC):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    b = text.index("\n", text.index(BEGIN)) + 1
    return text[b:text.index(END)]


def rows():
    """{"limits.memory": {"type", "default", "range", "flag"}} from the generated tables."""
    out, group, header = {}, None, None
    for line in generated().splitlines():
        m = re.match(r"^### `(\w+)`$", line)
        if m:
            group, header = m.group(1), None
            continue
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells[0] == "key":
            header = cells
            continue
        if header and header[3] == "range":  # a key row (not a bind member's)
            name = cells[0].strip("`")
            # A whole group ("secrets", an array at the top level) is its one key.
            out[name if name == group else "%s.%s" % (group, name)] = dict(zip(header[1:], cells[1:]))
    return out


def test_doc_matches_the_key_table():
    assert doc_region() == "\n" + generated() + "\n", \
        "docs/policy.md's key reference is stale: run tools/update-policy-doc.py %s" % AJ_BIN


def test_a_stale_doc_is_caught_and_rewritten(tmp_path):
    # The comparison above can fail: a changed cell no longer matches, and
    # the tool puts the table back.
    copy = str(tmp_path / "policy.md")
    shutil.copy(DOC, copy)
    with open(copy, encoding="utf-8") as f:
        text = f.read()
    stale = text.replace("| `pids` | integer or `null` |", "| `pids` | integer |", 1)
    assert stale != text
    with open(copy, "w", encoding="utf-8") as f:
        f.write(stale)
    assert doc_region(copy) != "\n" + generated() + "\n"
    p = subprocess.run([sys.executable, TOOL, AJ_BIN, copy], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "rewritten" in p.stdout, p
    assert doc_region(copy) == "\n" + generated() + "\n"
    with open(copy, encoding="utf-8") as f:
        assert f.read() == text  # only the generated part changed, back to what it was


def test_every_key_is_in_the_canonical_json_and_back():
    shown = json.loads(aj("policy", "show").stdout)
    leaves = {"%s.%s" % (g, k) for g, v in shown.items() if isinstance(v, dict) for k in v}
    leaves |= {g for g, v in shown.items() if isinstance(v, list)}
    assert set(rows()) == leaves
    plain = aj("policy", "keys")
    assert plain.returncode == 0
    assert [line.split()[0] for line in plain.stdout.splitlines()] == list(rows())


def test_defaults_are_what_policy_show_prints():
    shown = json.loads(aj("policy", "show").stdout)
    checked = 0
    for key, row in rows().items():
        if "." not in key:
            assert shown[key] == json.loads(re.match(r"^`([^`]*)`", row["default"]).group(1)), key
            continue
        group, name = key.split(".")
        m = re.match(r"^`([^`]*)`", row["default"])
        if row["default"] == "none":
            want = None
        elif m:
            want = json.loads(m.group(1))
        else:
            continue  # described in words ("the cgroup limits the file names")
        assert shown[group][name] == want, (key, row["default"], shown[group][name])
        checked += 1
    assert checked >= 25


def test_flags_are_flags_of_run():
    help_text = aj("run", "--help").stdout
    flags = [f for row in rows().values() for f in re.findall(r"`(--[a-z-]+)`", row["flag"])]
    assert len(flags) >= 30
    for flag in flags:
        assert re.search(r"(^\s+|, )%s\b" % re.escape(flag), help_text, re.M), flag


UNITS = {"size": {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40},
         "duration": {"ms": 1, "s": 1000, "m": 60000, "h": 3600000}}


def to_base(kind, text):
    """"4M" -> bytes, "168h" -> ms, "0.01" -> thousandths, "16" -> 16."""
    if kind == "CPU share":
        whole, _, frac = text.partition(".")
        return int(whole) * 1000 + int((frac + "000")[:3])
    if kind in UNITS:
        m = re.match(r"^(\d+)([a-zA-Z]*)$", text)
        return int(m.group(1)) * UNITS[kind][m.group(2)]
    return int(text)


def as_json(kind, v):
    """A value of the key's kind, as a policy file may write it."""
    if kind == "CPU share":
        return "%d.%03d" % (v // 1000, v % 1000)
    if kind == "duration":
        return "%dms" % v
    return v  # sizes in bytes, counts: integers


def write(d, name, group, key, value):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write('{\n  "version": 1,\n  "%s": {"%s": %s}\n}\n' % (group, key, json.dumps(value)))
    return path


def ranged():
    out = []
    for key, row in rows().items():
        kind = row["type"].replace(" or `null`", "").replace(' or `"auto"`', "")
        if row["range"] and kind in ("size", "duration", "CPU share", "integer"):
            lo, hi = row["range"].split("..")
            out.append((key, kind, to_base(kind, lo), to_base(kind, hi)))
    return out


@pytest.mark.parametrize("key,kind,lo,hi", ranged(), ids=[r[0] for r in ranged()])
def test_range_ends_load_and_beyond_is_refused(tmp_path, key, kind, lo, hi):
    group, name = key.split(".")
    for v in (lo, hi):
        path = write(str(tmp_path), "ok.json", group, name, as_json(kind, v))
        p = aj("policy", "check", path)
        assert (p.returncode, p.stdout) == (0, "%s: valid\n" % path), (key, v, p)
    beyond = [hi + 1] + ([lo - 1] if lo > 0 else [])
    for v in beyond:
        path = write(str(tmp_path), "bad.json", group, name, as_json(kind, v))
        p = aj("policy", "check", path)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, (key, v, p)
        assert re.match(r"^agentjail: %s:3:\d+: %s: " % (re.escape(path), re.escape(key)), p.stderr), p.stderr
