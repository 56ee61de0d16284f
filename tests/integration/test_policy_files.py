"""Policy files: validation errors, syntax of values, round trips, flag
precedence, `policy diff`, and the built-in profiles running real payloads.

Error tests assert the exact `FILE:LINE:COLUMN: key.path:` prefix; the
expected line and column are computed from the text the test writes (the
first character of the value or key at fault, counted in characters from 1,
as jansson counts them for syntax errors). Every refusal has a valid
neighbour next to it (the boundary value, the optional bind, the other
order), so a loader that accepts or refuses everything fails.

Hashes: `policy show` prints `sha256: HEX` on stderr; a run's --result has
the same value as `policy_sha256` (also when the run fails closed as nobody
for want of a cgroup: the policy is hashed before anything is set up).
"""
import csv
import hashlib
import json
import os
import statistics
import subprocess
import tempfile

import pytest

from conftest import AJ_BIN, run_aj

PY = "/usr/bin/python3"
PROFILES = ("default", "python", "shell")
NO_AJ_ENV = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJAIL_")}


# ---- helpers ------------------------------------------------------------------

def aj(*args, env=None, timeout=30):
    return subprocess.run([AJ_BIN] + list(args), capture_output=True, timeout=timeout,
                          env=NO_AJ_ENV if env is None else env)


def write(d, name, text, mode=0o644):
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    os.chmod(path, mode)
    return path


def mkdir(d, name, mode=0o755):
    path = os.path.join(d, name)
    os.mkdir(path)
    os.chmod(path, mode)
    return path


def loc(text, needle, nth=0):
    """(line, column) of the first character of the nth occurrence of needle."""
    i = -1
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    line = text.count("\n", 0, i) + 1
    return line, i - (text.rfind("\n", 0, i) + 1) + 1


def check(path, env=None):
    p = aj("policy", "check", path, env=env)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def assert_valid(path, env=None):
    rc, out, err = check(path, env)
    assert (rc, out, err) == (0, "%s: valid\n" % path, ""), (rc, out, err)


def assert_refused(path, line, col, key=None, says=(), env=None):
    """`policy check` exits 2 with exactly one line, FILE:LINE:COLUMN: key:."""
    rc, out, err = check(path, env)
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    prefix = "agentjail: %s:%d:%d: " % (path, line, col)
    if key is not None:
        prefix += key + ": "
    assert err.startswith(prefix), "want prefix %r, got %r" % (prefix, err)
    for s in says:
        assert s in err, (s, err)
    return err


def refused_at(d, text, needle, key, nth=0, says=(), env=None):
    path = write(d, "p.json", text)
    line, col = loc(text, needle, nth)
    return assert_refused(path, line, col, key, says, env)


def show(*args, env=None):
    """`policy show ARGS` -> (stdout text, sha256)."""
    p = aj("policy", "show", *args, env=env)
    assert p.returncode == 0, p
    err = p.stderr.decode()
    assert err.startswith("sha256: ") and err.count("\n") == 1, err
    return p.stdout.decode(), err.split()[1]


def shown(*args, env=None):
    return json.loads(show(*args, env=env)[0])


def doc(**groups):
    """A policy text, one group per line (so errors land on known lines)."""
    lines = ['  "version": 1'] + ['  "%s": %s' % (k, json.dumps(v)) for k, v in groups.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


# ---- valid / syntax ----------------------------------------------------------

def test_valid_file_exits_0(hostdir):
    d1 = mkdir(hostdir, "d1")
    path = write(hostdir, "ok.json", doc(filesystem={"binds": [{"host": d1, "sandbox": "/data"}]},
                                      limits={"memory": "512M", "timeout": "10s"}))
    assert_valid(path)


def test_json_syntax_error(hostdir):
    text = '{\n  "version": 1,\n  "network": {"mode": "none",}\n}\n'
    line, col = loc(text, ",}")
    # jansson's own message and position: the '}' where a key was due.
    assert_refused(write(hostdir, "p.json", text), line, col + 1)


def test_json_syntax_error_positive_control(hostdir):
    assert_valid(write(hostdir, "p.json", '{\n  "version": 1,\n  "network": {"mode": "none"}\n}\n'))


def test_nul_byte_is_refused_not_a_hang(hostdir):
    # jansson 2.14 accepts a NUL right after a number; the position scanner
    # must still terminate (tests/fuzz/crashes/hang-nul-after-number.json).
    path = write(hostdir, "p.json", b'{"version": 1\0}')
    p = aj("policy", "check", path, timeout=10)
    assert p.returncode == 2, p
    assert p.stderr.decode().count("\n") == 1, p


def test_non_utf8_bytes(hostdir):
    text = b'{\n  "version": 1,\n  "environment": {"set": {"A": "\xff\xfe"}}\n}\n'
    line, col = loc(text.decode("latin-1"), '"\xff')
    # jansson points at the string holding the bad byte.
    err = assert_refused(write(hostdir, "p.json", text), line, col)
    assert "0xff" in err


def test_duplicate_keys(hostdir):
    text = '{\n  "version": 1,\n  "version": 1\n}\n'
    line, col = loc(text, '"version"', nth=1)
    # jansson reports the end of the duplicate key token.
    assert_refused(write(hostdir, "p.json", text), line, col + len('"version"') - 1,
                   says=("duplicate object key",))


def test_duplicate_nested_keys(hostdir):
    text = '{\n  "version": 1,\n  "limits": {"pids": 10, "pids": 20}\n}\n'
    line, col = loc(text, '"pids"', nth=1)
    assert_refused(write(hostdir, "p.json", text), line, col + len('"pids"') - 1,
                   says=("duplicate object key",))


# ---- version -------------------------------------------------------------------

def test_missing_version(hostdir):
    # Nothing to point at but the object that lacks it: the top level.
    refused_at(hostdir, '{\n  "network": {"mode": "none"}\n}\n', "{", "version",
               says=('"version": 1',))


@pytest.mark.parametrize("value", ["2", '"1"', "1.0", "null"])
def test_unsupported_version(hostdir, value):
    text = '{\n  "network": {"mode": "none"},\n  "version": %s\n}\n' % value
    refused_at(hostdir, text, value, "version", nth=text.count(value) - 1, says=("only version 1",))


# ---- unknown keys ----------------------------------------------------------------

TOP_KEYS = ("version", "filesystem", "environment", "network", "limits", "identity", "degraded",
            "seccomp")


def test_unknown_top_level_key(hostdir):
    err = refused_at(hostdir, '{\n  "version": 1,\n  "networks": {"mode": "none"}\n}\n', '"networks"',
                     "networks", says=("unknown key 'networks'",))
    assert all(k in err.split("accepted here:")[1] for k in TOP_KEYS), err


def test_unknown_nested_key(hostdir):
    err = refused_at(hostdir, doc(limits={"timeout": "10s", "memry": "1G"}), '"memry"', "limits.memry",
                     says=("unknown key 'memry'",))
    accepted = err.split("accepted here:")[1]
    for k in ("timeout", "memory", "pids", "cpus", "cpu_time", "output", "file_size", "open_files",
              "require_cgroup"):
        assert k in accepted, err


def test_unknown_key_in_array_element(hostdir):
    d1 = mkdir(hostdir, "d1")
    text = doc(filesystem={"binds": [{"host": d1, "sandbox": "/a"},
                                     {"host": d1, "sandbox": "/b", "rw": True}]})
    err = refused_at(hostdir, text, '"rw"', "filesystem.binds[1].rw", says=("unknown key 'rw'",))
    assert "host, sandbox, mode, optional" in err


# ---- wrong types -------------------------------------------------------------------

@pytest.mark.parametrize("text,needle,key,got", [
    # string where an object is due
    (doc(filesystem="/data"), '"/data"', "filesystem", "got a string"),
    (doc(network="none"), '"none"', "network", "got a string"),
    # boolean where a size is due
    (doc(limits={"memory": True}), "true", "limits.memory", "got a boolean"),
    (doc(filesystem={"tmp_size": False}), "false", "filesystem.tmp_size", "got a boolean"),
    # string where an integer is due
    (doc(identity={"uid": "1000"}), '"1000"', "identity.uid", "got a string"),
    # other mismatches
    (doc(limits={"require_cgroup": "yes"}), '"yes"', "limits.require_cgroup", "got a string"),
    (doc(filesystem={"binds": {"host": "/usr"}}), "{", "filesystem.binds", "got an object"),
    (doc(environment={"set": {"A": 1}}), "1}", "environment.set.A", "got an integer"),
], ids=["fs-string", "net-string", "memory-bool", "tmp_size-bool", "uid-string", "require-string",
        "binds-object", "env-int"])
def test_wrong_type(hostdir, text, needle, key, got):
    nth = 0
    if needle == "{":  # the binds value, not the outer braces
        nth = text.count("{") - 1
    refused_at(hostdir, text, needle, key, nth=nth, says=(got,))


# ---- out of range --------------------------------------------------------------------

@pytest.mark.parametrize("key,bad,good", [
    ("pids", 0, 2),
    ("pids", 1, 2),
    ("memory", "1K", "4M"),
    ("cpus", 0, "0.01"),
    ("cpus", "abc", "0.5"),
    ("timeout", "0s", "1ms"),
    ("timeout", 0, 1),
    ("open_files", 8, 16),
    ("cpu_time", "0ms", "1ms"),
    ("output", 0, 1),
    ("file_size", "0", "1"),
])
def test_out_of_range(hostdir, key, bad, good):
    text = doc(limits={key: bad})
    refused_at(hostdir, text, json.dumps(bad), "limits." + key, nth=text.count(json.dumps(bad)) - 1)
    # positive control: the boundary value loads
    assert_valid(write(hostdir, "good.json", doc(limits={key: good})))


@pytest.mark.parametrize("key", ["file_size", "open_files"])
def test_null_refused_where_there_is_no_unlimited(hostdir, key):
    refused_at(hostdir, doc(limits={key: None}), "null", "limits." + key, says=("got null",))


# ---- paths -------------------------------------------------------------------------------

def test_relative_host_path(hostdir):
    refused_at(hostdir, doc(filesystem={"binds": [{"host": "data/in", "sandbox": "/data"}]}),
               '"data/in"', "filesystem.binds[0].host", says=("not an absolute path",))


def test_relative_sandbox_path(hostdir):
    d1 = mkdir(hostdir, "d1")
    refused_at(hostdir, doc(filesystem={"binds": [{"host": d1, "sandbox": "data"}]}),
               '"data"', "filesystem.binds[0].sandbox", says=("not an absolute path",))


def test_dotdot_in_host_path(hostdir):
    mkdir(hostdir, "d1")
    mkdir(hostdir, "d2")
    host = hostdir + "/d1/../d2"
    refused_at(hostdir, doc(filesystem={"binds": [{"host": host, "sandbox": "/data"}]}),
               json.dumps(host), "filesystem.binds[0].host", says=("'..'",))
    # positive control: the same directory named without '..'
    assert_valid(write(hostdir, "good.json",
                       doc(filesystem={"binds": [{"host": hostdir + "/d2", "sandbox": "/data"}]})))


def test_dotdot_in_sandbox_path(hostdir):
    d1 = mkdir(hostdir, "d1")
    refused_at(hostdir, doc(filesystem={"binds": [{"host": d1, "sandbox": "/data/../etc"}]}),
               '"/data/../etc"', "filesystem.binds[0].sandbox", says=("'..'",))


def test_dotdot_in_tmpfs_path(hostdir):
    refused_at(hostdir, doc(filesystem={"tmpfs": [{"path": "/scratch/../etc", "size": "1M"}]}),
               '"/scratch/../etc"', "filesystem.tmpfs[0].path", says=("'..'",))


def test_nonexistent_host_path(hostdir):
    d1 = mkdir(hostdir, "d1")
    missing = hostdir + "/missing"
    text = doc(filesystem={"binds": [
        {"host": "${AJ_TEST_SURELY_UNSET}", "sandbox": "/opt", "optional": True},
        {"host": d1, "sandbox": "/a"},
        {"host": missing, "sandbox": "/b"}]})
    # The skipped optional bind does not shift the index: [2] as in the file.
    refused_at(hostdir, text, json.dumps(missing), "filesystem.binds[2].host",
               says=("No such file or directory",))
    os.mkdir(missing)
    assert_valid(os.path.join(hostdir, "p.json"))


@pytest.mark.parametrize("sandbox", ["/proc", "/proc/self", "/dev", "/etc", "/"])
def test_reserved_sandbox_path(hostdir, sandbox):
    d1 = mkdir(hostdir, "d1")
    refused_at(hostdir, doc(filesystem={"binds": [{"host": d1, "sandbox": sandbox}]}),
               json.dumps(sandbox), "filesystem.binds[0].sandbox", says=("reserved",))


def test_reserved_sandbox_path_positive_control(hostdir):
    d1 = mkdir(hostdir, "d1")
    assert_valid(write(hostdir, "p.json", doc(filesystem={"binds": [{"host": d1, "sandbox": "/procfs"}]})))


@pytest.mark.parametrize("host", ["/proc", "/proc/1", "/sys", "/sys/fs", "/", "/dev"])
def test_refused_host_source(hostdir, host):
    refused_at(hostdir, doc(filesystem={"binds": [{"host": host, "sandbox": "/h"}]}),
               json.dumps(host), "filesystem.binds[0].host")
    # positive control: an ordinary host directory to the same place
    assert_valid(write(hostdir, "good.json", doc(filesystem={"binds": [{"host": hostdir, "sandbox": "/h"}]})))


# ---- conflicts ---------------------------------------------------------------------------

def test_rw_bind_under_ro_bind(hostdir):
    d1, d2 = mkdir(hostdir, "d1"), mkdir(hostdir, "d2")
    text = doc(filesystem={"binds": [{"host": d1, "sandbox": "/data", "mode": "ro"},
                                     {"host": d2, "sandbox": "/data/out", "mode": "rw"}]})
    refused_at(hostdir, text, '"/data/out"', "filesystem.binds[1].sandbox", says=("read-only bind",))
    # positive control: a ro bind under a rw one, and the rw one beside it
    for binds in ([{"host": d1, "sandbox": "/data", "mode": "rw"},
                   {"host": d2, "sandbox": "/data/in", "mode": "ro"}],
                  [{"host": d1, "sandbox": "/data", "mode": "ro"},
                   {"host": d2, "sandbox": "/out", "mode": "rw"}]):
        assert_valid(write(hostdir, "good.json", doc(filesystem={"binds": binds})))


def test_rw_bind_under_ro_bind_listed_first(hostdir):
    # Mounts are made parents first whatever the list order, so the rw
    # bind ends up inside the ro one all the same: the order must not
    # decide whether this is refused. The later bind is the one named.
    d1, d2 = mkdir(hostdir, "d1"), mkdir(hostdir, "d2")
    os.mkdir(os.path.join(d1, "out"))
    text = doc(filesystem={"binds": [{"host": d2, "sandbox": "/data/out", "mode": "rw"},
                                     {"host": d1, "sandbox": "/data", "mode": "ro"}]})
    refused_at(hostdir, text, '"/data"', "filesystem.binds[1].sandbox", says=("under the read-only bind /data",))
    # Control: the same two binds with /data writable are a valid policy.
    assert_valid(write(hostdir, "ok.json", doc(filesystem={"binds": [
        {"host": d2, "sandbox": "/data/out", "mode": "rw"}, {"host": d1, "sandbox": "/data", "mode": "rw"}]})))


def test_two_binds_same_target(hostdir):
    d1, d2 = mkdir(hostdir, "d1"), mkdir(hostdir, "d2")
    # "/data/" normalises to "/data": the same target.
    text = doc(filesystem={"binds": [{"host": d1, "sandbox": "/data"},
                                     {"host": d2, "sandbox": "/data/"}]})
    refused_at(hostdir, text, '"/data/"', "filesystem.binds[1].sandbox", says=("both target /data",))


def test_tmpfs_and_bind_same_path(hostdir):
    d1 = mkdir(hostdir, "d1")
    text = doc(filesystem={"binds": [{"host": d1, "sandbox": "/scratch"}],
                           "tmpfs": [{"path": "/other", "size": "1M"}, {"path": "/scratch", "size": "1M"}]})
    refused_at(hostdir, text, '"/scratch"', "filesystem.tmpfs[1].path", nth=1, says=("both target /scratch",))
    # Control: the tmpfs at a path of its own is valid beside the bind.
    assert_valid(write(hostdir, "ok.json", doc(filesystem={
        "binds": [{"host": d1, "sandbox": "/scratch"}],
        "tmpfs": [{"path": "/other", "size": "1M"}, {"path": "/scratch2", "size": "1M"}]})))


def test_file_bind_error_after_profile_binds_names_the_file(hostdir):
    # --profile python puts two binds in first; the file's own indices and
    # positions must still be the ones reported.
    work, data = mkdir(hostdir, "work", 0o777), mkdir(hostdir, "data")
    missing = hostdir + "/missing"
    text = doc(filesystem={"binds": [{"host": missing, "sandbox": "/b"}]})
    path = write(hostdir, "p.json", text)
    env = dict(NO_AJ_ENV, AGENTJAIL_WORK=work, AGENTJAIL_DATA=data)
    p = aj("run", "--profile", "python", "--policy", path, "--", "true", env=env)
    line, col = loc(text, json.dumps(missing))
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1, p
    assert err.startswith("agentjail: %s:%d:%d: filesystem.binds[0].host: " % (path, line, col)), err


# ---- ${VAR} host paths and optional ------------------------------------------------------

def test_unset_variable_is_an_error(hostdir):
    text = doc(filesystem={"binds": [{"host": "${AJ_TEST_SURELY_UNSET}", "sandbox": "/w"}]})
    refused_at(hostdir, text, '"${AJ_TEST_SURELY_UNSET}"', "filesystem.binds[0].host",
               says=("not set", '"optional": true'))


def test_unset_variable_with_optional_is_skipped(hostdir):
    path = write(hostdir, "p.json", doc(filesystem={"binds": [
        {"host": "${AJ_TEST_SURELY_UNSET}", "sandbox": "/w", "optional": True}]}))
    assert_valid(path)
    assert shown(path)["filesystem"]["binds"] == []


def test_set_variable_is_expanded(hostdir):
    d1 = mkdir(hostdir, "d1")
    path = write(hostdir, "p.json", doc(filesystem={"binds": [
        {"host": "${AJ_TEST_DIR}", "sandbox": "/w", "mode": "rw", "optional": True}]}))
    env = dict(NO_AJ_ENV, AJ_TEST_DIR=d1)
    assert shown(path, env=env)["filesystem"]["binds"] == [{"host": d1, "sandbox": "/w", "mode": "rw"}]


def test_optional_bind_missing_host_is_skipped(hostdir):
    missing = hostdir + "/missing"
    path = write(hostdir, "p.json", doc(filesystem={"binds": [
        {"host": missing, "sandbox": "/w", "optional": True}]}))
    assert_valid(path)
    assert shown(path)["filesystem"]["binds"] == []


# ---- sizes, durations, null --------------------------------------------------------------

@pytest.mark.parametrize("key,value,normal", [
    ("memory", "512M", "512M"),
    ("memory", "1G", "1G"),
    ("memory", 536870912, "512M"),
    ("memory", 4194304 + 1, "4194305"),
    ("output", 1048576, "1M"),
    ("file_size", "1024K", "1M"),
    ("timeout", "10s", "10s"),
    ("timeout", "500ms", "500ms"),
    ("timeout", "2m", "2m"),
    ("timeout", "120s", "2m"),
    ("timeout", 10, "10s"),
    ("cpu_time", "1500ms", "1500ms"),
    ("cpus", "0.5", "0.5"),
    ("cpus", 2, "2"),
    ("pids", 100, 100),
    ("open_files", 64, 64),
])
def test_sizes_and_durations(hostdir, key, value, normal):
    assert shown(write(hostdir, "p.json", doc(limits={key: value})))["limits"][key] == normal


def test_tmp_size_and_tmpfs_size(hostdir):
    pol = shown(write(hostdir, "p.json", doc(filesystem={"tmp_size": 134217728,
                                                      "tmpfs": [{"path": "/s", "size": "2048K"}]})))
    assert pol["filesystem"]["tmp_size"] == "128M"
    assert pol["filesystem"]["tmpfs"] == [{"path": "/s", "size": "2M"}]


@pytest.mark.parametrize("key", ["timeout", "memory", "pids", "cpus", "cpu_time", "output"])
def test_null_means_no_limit(hostdir, key):
    path = write(hostdir, "p.json", doc(limits={key: None}))
    assert shown(path)["limits"][key] is None
    # On top of the default profile (which sets all but cpus) null clears it:
    # the run's policy is the profile with that one limit gone.
    merged = shown("--profile", "default")
    assert merged["limits"][key] is not None or key == "cpus"
    merged["limits"][key] = None
    want = show(write(hostdir, "merged.json", json.dumps(merged)))[1]
    r = run_aj(["--profile", "default", "--policy", path], ["true"], env=NO_AJ_ENV)
    assert r.returncode == 0 and r.result["policy_sha256"] == want, r


def test_null_output_lifts_the_profile_output_limit():
    big = ["sh", "-c", "head -c 9000000 /dev/zero | tr '\\0' x"]
    r = run_aj(["--profile", "shell"], big)       # shell profile: output 8M
    assert r.result["status"] == "output_limit" and r.result["stdout_truncated"], r
    with tempfile.TemporaryDirectory(prefix="ajtest-pol-") as d:
        path = write(d, "p.json", doc(limits={"output": None}))
        r = run_aj(["--profile", "shell", "--policy", path], big)
    assert r.returncode == 0 and r.result["status"] == "ok", r
    assert len(r.stdout) == 9000000 and not r.result["stdout_truncated"]


# ---- round trip and hashes ---------------------------------------------------------------

def canonical_sha(text):
    """sha256 of the compact, sorted-key form (ASCII policies only: jansson
    writes \\uXXXX escapes upper-case, Python lower-case)."""
    compact = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(compact.encode()).hexdigest()


def assert_round_trip(d, out1, sha1):
    path = write(d, "shown.json", out1)
    out2, sha2 = show(path)
    assert out2 == out1
    assert sha2 == sha1
    return path


@pytest.mark.parametrize("name", PROFILES)
def test_profile_round_trip(hostdir, name):
    out1, sha1 = show("--profile", name)
    assert sha1 == canonical_sha(out1)
    path = assert_round_trip(hostdir, out1, sha1)
    for args in (["--profile", name], ["--policy", path]):
        r = run_aj(args, ["true"], env=NO_AJ_ENV)
        assert r.returncode == 0, r
        assert r.result["policy_sha256"] == sha1, (args, r)


def test_profile_round_trip_with_optional_binds_present(hostdir):
    work, data = mkdir(hostdir, "work", 0o777), mkdir(hostdir, "data")
    env = dict(NO_AJ_ENV, AGENTJAIL_WORK=work, AGENTJAIL_DATA=data)
    out1, sha1 = show("--profile", "python", env=env)
    assert json.loads(out1)["filesystem"]["binds"] == [
        {"host": work, "sandbox": "/work", "mode": "rw"},
        {"host": data, "sandbox": "/data", "mode": "ro"}]
    assert sha1 != show("--profile", "python")[1]
    assert_round_trip(hostdir, out1, sha1)
    r = run_aj(["--profile", "python"], ["true"], env=env)
    assert r.returncode == 0 and r.result["policy_sha256"] == sha1, r


def hand_written(d):
    d1, d2 = mkdir(d, "in"), mkdir(d, "out", 0o777)
    # Not canonical on purpose: unsorted keys, integers for sizes, a bind
    # without sandbox or mode, a non-ASCII value.
    return """{
  "limits": {"memory": 268435456, "timeout": 30, "pids": 64, "cpus": "1.5",
             "cpu_time": "90s", "output": "1024K", "file_size": 1048576, "open_files": 128,
             "require_cgroup": false},
  "version": 1,
  "filesystem": {
    "workdir": "/out",
    "binds": [{"host": "%s"}, {"sandbox": "/out", "host": "%s", "mode": "rw"}],
    "tmpfs": [{"path": "/scratch", "size": 16777216}, {"path": "/cache"}],
    "tmp_size": "32M"
  },
  "environment": {"set": {"FOO": "bar", "GREETING": "h\\u00e9llo w\u00f6rld", "A": "1=2"},
                  "pass": ["TERM"]},
  "network": {"mode": "loopback"},
  "identity": {"hostname": "analytics", "uid": 1234, "gid": 1234}
}
""" % (d1, d2)


def test_hand_written_round_trip(hostdir):
    src = write(hostdir, "hand.json", hand_written(hostdir))
    out1, sha1 = show(src)
    pol = json.loads(out1)
    assert pol["limits"]["memory"] == "256M" and pol["limits"]["timeout"] == "30s"
    assert pol["environment"]["set"]["GREETING"] == "h\u00e9llo w\u00f6rld"
    assert pol["filesystem"]["binds"][0] == {"host": hostdir + "/in", "sandbox": hostdir + "/in", "mode": "ro"}
    assert_round_trip(hostdir, out1, sha1)
    r = run_aj(["--policy", src], ["sh", "-c", "echo $GREETING; hostname; pwd"], env=NO_AJ_ENV)
    assert r.returncode == 0, r
    assert r.stdout == "h\u00e9llo w\u00f6rld\nanalytics\n/out\n"
    assert r.result["policy_sha256"] == sha1


# ---- flags on top of a policy -------------------------------------------------------------

def limits_file(d, name, memory, **more):
    lim = {"memory": memory, "timeout": "60s"}
    lim.update(more)
    return write(d, name, doc(limits=lim, environment={"set": {"FOO": "file"}}))


def test_flag_overrides_scalar_and_order_does_not_matter(hostdir):
    f = limits_file(hostdir, "f.json", "1G")
    want = show(limits_file(hostdir, "f100.json", "100M"))[1]
    assert want != show(f)[1]
    # As nobody the run fails closed (no cgroup for --memory); the result
    # carries the hash all the same.
    for args in (["--policy", f, "--memory", "100M"], ["--memory", "100M", "--policy", f]):
        r = run_aj(args, ["true"])
        assert r.result["policy_sha256"] == want, (args, r)


def test_flag_timeout_overrides_file_timeout(hostdir):
    f = write(hostdir, "f.json", doc(limits={"timeout": "60s"}))
    for args in (["--policy", f, "--timeout", "1"], ["--timeout", "1", "--policy", f]):
        r = run_aj(args, ["sleep", "5"])
        assert r.result["status"] == "timeout", (args, r)
        assert r.result["wall_ms"] < 4500, r


def test_flag_timeout_lifts_file_timeout(hostdir):
    # positive control in the other direction: the file's 1s alone kills
    # `sleep 2`; a flag of 30s lets it finish.
    f = write(hostdir, "f.json", doc(limits={"timeout": "1s"}))
    r = run_aj(["--policy", f], ["sleep", "2"])
    assert r.result["status"] == "timeout", r
    r = run_aj(["--policy", f, "--timeout", "30"], ["sleep", "2"])
    assert r.returncode == 0 and r.result["status"] == "ok", r


def test_lists_add(hostdir):
    d1, d2 = mkdir(hostdir, "d1"), mkdir(hostdir, "d2")
    write(d1, "a", "from-file\n")
    write(d2, "b", "from-flag\n")
    f = write(hostdir, "f.json", doc(filesystem={"binds": [{"host": d1, "sandbox": "/fromfile"}]},
                                  environment={"set": {"FOO": "file", "KEEP": "k"}}))
    r = run_aj(["--bind-ro", d2 + ":/fromflag", "--env", "BAR=flag", "--env", "FOO=flag",
                "--policy", f], ["sh", "-c", "cat /fromfile/a /fromflag/b; echo $FOO $BAR $KEEP"])
    assert r.returncode == 0, r
    assert r.stdout == "from-file\nfrom-flag\nflag flag k\n"
    # positive control: without the flag the second bind is not there
    r = run_aj(["--policy", f], ["sh", "-c", "cat /fromfile/a; test -e /fromflag || echo absent"])
    assert r.stdout == "from-file\nabsent\n", r


def test_profile_then_policy_then_flags(hostdir):
    # shell profile: LANG=C.UTF-8, timeout 60s; the file adds FOO and
    # shortens the timeout to 1s; --env adds BAR.
    f = write(hostdir, "f.json", doc(environment={"set": {"FOO": "bar"}}, limits={"timeout": "1s"}))
    r = run_aj(["--policy", f, "--env", "BAR=baz", "--profile", "shell"],
               ["sh", "-c", "echo $LANG $FOO $BAR; sleep 5"])
    assert r.stdout == "C.UTF-8 bar baz\n", r
    assert r.result["status"] == "timeout", r
    # The same policy written out as one file hashes the same.
    merged = shown("--profile", "shell")
    merged["environment"]["set"].update(FOO="bar", BAR="baz")
    merged["limits"]["timeout"] = "1s"
    assert show(write(hostdir, "merged.json", json.dumps(merged)))[1] == r.result["policy_sha256"]


def test_bad_policy_on_run_exits_2_with_one_line(hostdir):
    text = doc(limits={"pids": 1})
    path = write(hostdir, "p.json", text)
    line, col = loc(text, "1}")
    r = run_aj(["--policy", path], ["true"])
    assert r.returncode == 2 and r.result is None, r
    assert r.stderr == "agentjail: %s:%d:%d: limits.pids: '1' is not a number of processes within " \
                      "2..4194304\n" % (path, line, col)


def test_column_counts_characters(hostdir):
    # The same count jansson uses for syntax errors: a non-ASCII character
    # earlier on the line is one column, not two.
    text = '{"version": 1, "environment": {"set": {"X": "h\u00e9llo"}}, "limits": {"pids": 1}}\n'
    line, col = loc(text, "1}")
    assert_refused(write(hostdir, "p.json", text), line, col, "limits.pids")


def test_check_and_show_agree_on_a_long_variable_name(hostdir):
    # A policy `check` calls valid must also render and hash (or `check`
    # must refuse it): a 300-character name (tests/fuzz/crashes/).
    name = "A" * 300
    path = write(hostdir, "p.json", doc(environment={"set": {name: "x"}}))
    rc, out, err = check(path)
    if rc == 0:
        assert shown(path)["environment"]["set"] == {name: "x"}
    else:
        assert rc == 2 and err.count("\n") == 1, err
        assert aj("policy", "show", path).returncode == 2  # and show refuses it too


CGROUP_LIMITS = ["memory", "pids", "cpus", "cpu_time"]


@pytest.mark.parametrize("lim,want", [
    ({"pids": 64}, ["pids"]),
    ({"memory": "1G"}, ["memory"]),
    ({"cpus": "0.5"}, ["cpus"]),
    ({"cpu_time": "10s"}, ["cpu_time"]),
    ({"memory": "1G", "pids": 64, "timeout": "5s"}, ["memory", "pids"]),
    ({"memory": None, "pids": None}, []),
    ({"output": "1M", "file_size": "1M", "open_files": 64, "timeout": "5s"}, []),
    ({"pids": 64, "require_cgroup": False}, []),
    ({"require_cgroup": True}, CGROUP_LIMITS),
    ({"memory": "1G", "pids": 64, "require_cgroup": ["pids"]}, ["pids"]),
])
def test_require_cgroup_semantics(hostdir, lim, want):
    # Each cgroup limit the file names is required (not null, not the
    # limits that need no cgroup); an explicit list or boolean wins.
    got = shown(write(hostdir, "p.json", doc(limits=lim)))["limits"]["require_cgroup"]
    assert sorted(got) == sorted(want), (lim, got)


def test_require_cgroup_bad_name(hostdir):
    refused_at(hostdir, doc(limits={"require_cgroup": ["memory", "disk"]}), '"disk"',
               "limits.require_cgroup[1]")


@pytest.mark.parametrize("name", PROFILES)
def test_profiles_require_no_cgroup(name):
    assert shown("--profile", name)["limits"]["require_cgroup"] == []


def test_required_limit_fails_closed(hostdir):
    # The limit is enforced, or the run does not start; never unlimited.
    r = run_aj(["--policy", write(hostdir, "p.json", doc(limits={"pids": 64}))], ["true"])
    if r.result["status"] == "ok":
        assert r.result["layers"]["pids_limit"] is True, r
    else:
        assert (r.returncode, r.result["status"]) == (125, "setup_error"), r
        assert "pids" in r.stderr, r
    # positive control: the same limit, not required, runs everywhere
    r = run_aj(["--policy", write(hostdir, "q.json", doc(limits={"pids": 64, "require_cgroup": False}))],
               ["true"])
    assert r.returncode == 0 and r.result["status"] == "ok", r


# ---- policy diff ---------------------------------------------------------------------------

def diff(a, b):
    p = aj("policy", "diff", a, b)
    out = p.stdout.decode()
    assert out.startswith("A: %s\nB: %s\n" % (a, b)), p
    return p.returncode, out.splitlines()[2:], p.stderr.decode()


def test_diff_identical(hostdir):
    out, _ = show("--profile", "python")
    f = write(hostdir, "python.json", out)
    for a, b in ((f, f), ("profile:python", f), ("profile:shell", "profile:shell")):
        assert diff(a, b) == (0, ["no difference in protections"], "")


def test_diff_network(hostdir):
    a = write(hostdir, "a.json", doc(network={"mode": "none"}))
    b = write(hostdir, "b.json", doc(network={"mode": "loopback"}))
    rc, lines, _ = diff(a, b)
    assert (rc, lines) == (1, ["network.mode: A none, B loopback (B is weaker: loopback networking)"])
    rc, lines, _ = diff(b, a)
    assert (rc, lines) == (1, ["network.mode: A loopback, B none (A is weaker: loopback networking)"])


def test_diff_removed_bind(hostdir):
    d1 = mkdir(hostdir, "d1")
    a = write(hostdir, "a.json", doc(filesystem={"binds": [{"host": d1, "sandbox": "/data"}]}))
    b = write(hostdir, "b.json", doc(filesystem={"binds": []}))
    rc, lines, _ = diff(a, b)
    assert rc == 1 and len(lines) == 1, lines
    assert lines[0].startswith("filesystem.binds:") and "A is weaker" in lines[0] and d1 in lines[0]


def test_diff_raised_memory(hostdir):
    a = write(hostdir, "a.json", doc(limits={"memory": "512M"}))
    b = write(hostdir, "b.json", doc(limits={"memory": "1G"}))
    rc, lines, _ = diff(a, b)
    assert (rc, lines) == (1, ["limits.memory: A 512M, B 1G (B is weaker: higher limit)"])
    c = write(hostdir, "c.json", doc(limits={"memory": None}))
    rc, lines, _ = diff(a, c)
    assert rc == 1 and lines[0].startswith("limits.memory: A 512M, B none (B is weaker"), lines


def test_diff_never_prints_env_values(hostdir):
    a = write(hostdir, "a.json", doc(environment={"set": {"TOKEN": "s3cr3t-a", "ONLY_A": "s3cr3t-c"}}))
    b = write(hostdir, "b.json", doc(environment={"set": {"TOKEN": "s3cr3t-b"}}))
    p = aj("policy", "diff", a, b)
    out = p.stdout.decode() + p.stderr.decode()
    assert p.returncode == 1, p
    assert "TOKEN" in out and "ONLY_A" in out
    assert "s3cr3t" not in out


# ---- built-in profiles with real payloads ---------------------------------------------------

def test_default_profile_shell_pipeline():
    r = run_aj(["--profile", "default"], ["sh", "-c", "seq 1 100 | grep 7 | sort -rn | head -3 | tr '\\n' ' '; "
                                                      "seq 1 100 | grep -c 7"], env=NO_AJ_ENV)
    assert r.returncode == 0, r
    assert r.stdout == "97 87 79 19\n"
    assert r.result["policy_sha256"] == show("--profile", "default")[1]


def test_shell_profile_coreutils():
    script = r"""
set -e
cd /tmp
seq 1 500 | awk '{ printf "%d,%s\n", $1, ($1 % 3 == 0 ? "fizz" : "plain") }' > data.csv
sort -t, -k1,1nr data.csv | head -n 1
wc -l < data.csv
sed -n 's/,fizz$//p' data.csv | awk '{ s += $1 } END { print s }'
"""
    r = run_aj(["--profile", "shell"], ["sh", "-c", script], env=NO_AJ_ENV)
    assert r.returncode == 0, r
    fizz = sum(i for i in range(1, 501) if i % 3 == 0)
    assert r.stdout == "500,plain\n500\n%d\n" % fizz
    # and nothing of it reached the host
    assert not os.path.exists("/tmp/data.csv")


PY_JOB = r"""
import csv, errno, json, sqlite3, statistics
with open("/data/x.csv", newline="") as f:
    rows = [(r["region"], float(r["amount"])) for r in csv.DictReader(f)]
db = sqlite3.connect("/tmp/agg.db")
db.execute("create table t (region text, amount real)")
db.executemany("insert into t values (?, ?)", rows)
totals = dict(db.execute("select region, sum(amount) from t group by region order by region"))
report = {"rows": len(rows), "totals": totals,
          "mean": statistics.mean(a for _, a in rows),
          "median": statistics.median(a for _, a in rows)}
with open("/work/report.json", "w") as f:
    json.dump(report, f, sort_keys=True)
try:
    open("/data/tampered.csv", "w")
    print("data writable")
except OSError as e:
    print("data:", errno.errorcode[e.errno])
"""


def test_python_profile_analytics_job(hostdir):
    work, data = mkdir(hostdir, "work", 0o777), mkdir(hostdir, "data")
    rows = [("north", 10.5), ("south", 3), ("north", 4.5), ("east", 7), ("south", 1)]
    with open(os.path.join(data, "x.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["region", "amount"])
        w.writerows(rows)
    os.chmod(os.path.join(data, "x.csv"), 0o644)
    env = dict(NO_AJ_ENV, AGENTJAIL_WORK=work, AGENTJAIL_DATA=data)
    r = run_aj(["--profile", "python"], [PY, "-c", PY_JOB], env=env)
    assert r.returncode == 0, r
    assert r.stdout == "data: EROFS\n", r
    with open(os.path.join(work, "report.json")) as f:
        report = json.load(f)
    amounts = [a for _, a in rows]
    assert report == {"rows": 5, "totals": {"east": 7.0, "north": 15.0, "south": 4.0},
                      "mean": statistics.mean(amounts), "median": statistics.median(amounts)}
    assert sorted(os.listdir(data)) == ["x.csv"]


def test_python_profile_without_dirs():
    r = run_aj(["--profile", "python"],
               [PY, "-c", "import os, sqlite3; sqlite3.connect(':memory:'); "
                          "print(os.path.exists('/work'), os.path.exists('/data'), os.environ['LANG'])"],
               env=NO_AJ_ENV)
    assert r.returncode == 0, r
    assert r.stdout == "False False C.UTF-8\n"
