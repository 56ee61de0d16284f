#!/usr/bin/env python3
"""Generate deploy/docker/seccomp.json: Docker's default seccomp profile plus
exactly the system calls agentjail needs to build a sandbox inside a
container (namespaces, mounts, the keyring, the hostname of its own UTS
namespace). Nothing else changes, so the container's other processes stay
under Docker's default.

  scripts/gen-docker-seccomp.py [--check]

Input: deploy/docker/moby-default.json, Docker's default profile as moby
ships it (vendor/github.com/moby/profiles/seccomp/default.json). --check
regenerates and fails if the checked-in profile differs (CI runs it, and
tests/integration/test_container.py checks every call agentjail makes
under strace is allowed by the result).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "deploy", "docker", "moby-default.json")
DST = os.path.join(HERE, "..", "deploy", "docker", "seccomp.json")
# The same profile for Kubernetes nodes: kustomize reads no file outside
# the kustomization's directory, so deploy/kubernetes/base has a copy.
DSTS = [DST, os.path.join(HERE, "..", "deploy", "kubernetes", "base", "seccomp.json")]

# Each is refused (or, for clone/clone3, refused with namespace flags) by
# Docker's default profile to a container without CAP_SYS_ADMIN.
AGENTJAIL_SYSCALLS = {
    "clone": "the sandbox's namespaces (CLONE_NEWUSER|NEWPID|NEWNS|...)",
    "clone3": "the same, with CLONE_INTO_CGROUP and CLONE_PIDFD",
    "unshare": "network, cgroup and time namespaces made after the clone",
    "setns": "the network-namespace helper joins the sandbox's user namespace",
    "mount": "the sandbox's private root: tmpfs, read-only binds, /proc",
    "umount2": "detach the old root after pivot_root",
    "pivot_root": "switch to the sandbox's root",
    "open_tree": "detached bind mounts of the policy's directories",
    "move_mount": "attach them in the new root",
    "fsopen": "new-API mounts (tmpfs, proc)",
    "fsconfig": "new-API mounts (tmpfs, proc)",
    "fsmount": "new-API mounts (tmpfs, proc)",
    "mount_setattr": "read-only and nosuid/nodev/noexec on the binds",
    "sethostname": "the hostname of the sandbox's own UTS namespace",
    "keyctl": "a fresh session keyring for the sandbox (the payload's own filter refuses keyctl)",
}


def generate(profile):
    out = dict(profile)
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in AGENTJAIL_SYSCALLS]
        if not names:
            continue
        r = dict(rule)
        r["names"] = names
        rules.append(r)
    rules.append({
        "names": sorted(AGENTJAIL_SYSCALLS),
        "action": "SCMP_ACT_ALLOW",
        "comment": "agentjail: namespaces, mounts, keyring and hostname for its sandboxes "
                   "(scripts/gen-docker-seccomp.py says why for each)",
    })
    out["syscalls"] = rules
    return json.dumps(out, indent="\t") + "\n"


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    with open(SRC) as f:
        text = generate(json.load(f))
    if check:
        for dst in DSTS:
            try:
                with open(dst) as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
            if not same:
                print("%s is stale: run scripts/gen-docker-seccomp.py" % os.path.relpath(dst, os.path.join(HERE, "..")),
                      file=sys.stderr)
                return 1
        return 0
    for dst in DSTS:
        with open(dst, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
