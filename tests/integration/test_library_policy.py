"""One place validates a policy: a library caller that fills struct
aj_policy directly (no setters) is held to the same bounds as the CLI and
policy files. aj_run, aj_run_ex and aj_pool_new all call aj_policy_validate
(the aj-rawpolicy helper sets fields raw, then runs)."""
import os
import subprocess

import pytest

from conftest import AJ_HELPERS, must_skip

RAW = os.path.join(AJ_HELPERS, "aj-rawpolicy")


def raw(fields, cmd, pool=False):
    if not os.path.exists(RAW):
        must_skip("aj-rawpolicy helper not built")
    argv = [RAW] + (["--pool"] if pool else []) + fields + ["--"] + cmd
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("field,words", [
    ("uid_base=0", "uid range"),                 # would run the sandbox as host root
    ("uid_base=1000", "uid range"),              # a real user's uid
    ("uid_count=0", "uid range"),
    ("uid_base=0xfffffff0", "uid range"),        # base + count wraps past the top
    ("memory_max=1", "memory limit"),
    ("pids_max=1", "pids limit"),
    ("cpu_milli=5", "cpus"),
    ("timeout_ms=0x100000000000", "timeout"),    # > 366 days
    ("rlimit_nofile=0", "open files"),
    ("rlimit_fsize=0", "file size"),
    ("tmp_size=1", "tmp size"),
    ("network=7", "network mode"),
    ("on_escape=9", "on_escape"),
])
@pytest.mark.parametrize("pool", [False, True], ids=["run", "pool"])
def test_raw_fields_out_of_range_are_refused(field, words, pool):
    r = raw([field], ["/bin/true"], pool=pool)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.startswith("refused:") and words in r.stdout, r.stdout


@pytest.mark.parametrize("pool", [False, True], ids=["run", "pool"])
def test_raw_fields_in_range_run(pool):
    # Positive controls: the defaults, and valid raw values, run.
    assert raw([], ["/bin/true"], pool=pool).returncode == 0
    r = raw(["uid_base=0x60000000", "uid_count=65536", "memory_max=0x4000000", "pids_max=64",
             "timeout_ms=30000"], ["/bin/sh", "-c", "exit 7"], pool=pool)
    assert r.returncode == 7, (r.returncode, r.stdout, r.stderr)
