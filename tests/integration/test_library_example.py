"""examples/event_loop.c, the example of docs/library.md, runs as
documented: several sandboxes at once from one thread, each one's stdout
captured through a pipe the library made, each result right, and nothing
left behind (processes, mounts, cgroups, the example's own fds)."""
import glob
import os
import re
import subprocess
import time

from conftest import AJ_BIN, must_skip, new_tag, pids_with

EXAMPLE = os.path.join(os.environ.get("AJ_EXAMPLES", os.path.join(os.path.dirname(AJ_BIN), "examples")),
                       "event_loop")
LINE = re.compile(r"^run (\d+): (\w+), exit (\d+), sandbox ([0-9a-f]{32}), (\d+) bytes: (.*)$")


def test_event_loop_example(reaper):
    if not os.path.exists(EXAMPLE):
        must_skip("examples/event_loop not built: " + EXAMPLE)
    tag = new_tag()
    reaper.append(tag)
    cmds = [["/bin/sh", "-c", "sleep 1; echo run-%d; echo not-captured >&2" % i] for i in range(4)]
    cmds.append(["/bin/sh", "-c", "echo started; exec sleep %s" % tag])  # past the example's 10 s timeout
    cmds.append(["/nonexistent-command"])
    argv = [EXAMPLE]
    for i, c in enumerate(cmds):
        argv += ([":::"] if i else []) + c
    mounts_before = open("/proc/self/mountinfo").read().count("agentjail")
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout, p.stderr)
    lines = p.stdout.splitlines()
    runs = [LINE.match(l).groups() for l in lines[:-1]]
    assert [int(r[0]) for r in runs] == list(range(len(cmds))), p.stdout
    for i in range(4):
        assert runs[i][1:3] == ("ok", "0") and runs[i][5] == "run-%d\\n" % i, runs[i]
    assert runs[4][1:3] == ("timeout", "137") and runs[4][5] == "started\\n", runs[4]
    assert runs[5][1:3] == ("setup_error", "127") and "cannot execute" in runs[5][5], runs[5]
    assert len({r[3] for r in runs}) == len(cmds)
    # At once: the 10 s timeout bounds the whole; four 1 s runs in series
    # plus it would take 14 s.
    assert elapsed < 13, elapsed
    # Nothing left: the example's fds, the sandboxes' processes and
    # cgroups, mounts in this namespace.
    m = re.match(r"^fds: (\d+) before, (\d+) after$", lines[-1])
    assert m and m.group(1) == m.group(2), lines[-1]
    assert not pids_with(tag)
    for r in runs:
        assert not glob.glob("/sys/fs/cgroup/**/agentjail/*%s*" % r[3][:12], recursive=True), r[3]
    assert open("/proc/self/mountinfo").read().count("agentjail") <= mounts_before
