"""libagentjail in a long-running process: aj_run() called many times must
leave the supervisor with the same fds, no children and bounded memory."""
import json
import os
import subprocess

from conftest import AJ_HELPERS, must_skip


def test_many_runs_in_one_process_leak_nothing():
    loop = os.path.join(AJ_HELPERS, "aj-loop")
    if not os.path.exists(loop):
        must_skip("aj-loop helper not built")
    runs = int(os.environ.get("AJ_LEAK_RUNS", "200"))
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        # ASan's quarantine holds freed memory back (up to 256 MB), which
        # reads as RSS growth; LeakSanitizer at exit still reports real leaks.
        env["ASAN_OPTIONS"] += ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    proc = subprocess.run([loop, str(runs)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["runs"] == runs and stats["failures"] == 0
    assert stats["fds_after"] == stats["fds_before"], stats
    assert stats["children_left"] is False, stats
    # After warm-up the allocator's caches are full: a per-run leak of even
    # one page would show as runs*4 KiB here.
    assert stats["rss_after_kb"] - stats["rss_warm_kb"] < max(1024, runs), stats
