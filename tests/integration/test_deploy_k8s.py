"""deploy/kubernetes, checked offline: both overlays render (`kubectl
kustomize` where kubectl is installed, else tests/deploy/k8s-check.mjs's
minimal kustomize, and where both exist they must agree), every object
validates against the Kubernetes OpenAPI schema of its kind (the
kubernetes-models npm package, tests/deploy/package.json, installed by
scripts/deps.sh test with npm ci) with unknown fields refused, and the
settings each least-privilege way promises are what the manifests say.
Also: the shipped seccomp profile (and its Kubernetes copy) is what
scripts/gen-docker-seccomp.py makes, and it allows every system call
agentjail's static binary can make (its machine code disassembled: the
call numbers loaded before each `syscall` instruction and each call of
syscall()), beside the strace check of test_container.py.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import AJ_BIN, ROOT, must_skip

K8S = os.path.join(ROOT, "deploy", "kubernetes")
CHECKS = os.path.join(ROOT, "tests", "deploy")
PROFILE = os.path.join(ROOT, "deploy", "docker", "seccomp.json")
OVERLAYS = ("rootless", "every-layer")
PRIVATE = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"}


def node_checks():
    if not shutil.which("node"):
        must_skip("node is not installed (scripts/deps.sh test installs nodejs)")
    if not os.path.isdir(os.path.join(CHECKS, "node_modules", "kubernetes-models")):
        must_skip("tests/deploy/node_modules missing: scripts/deps.sh test runs npm ci there")


def k8s_check(*args):
    node_checks()
    return subprocess.run(["node", os.path.join(CHECKS, "k8s-check.mjs")] + list(args), capture_output=True,
                          text=True, timeout=120)


def render_minimal(overlay):
    p = k8s_check("render", os.path.join(K8S, "overlays", overlay))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def kubectl_kustomize():
    """Whether kubectl has a kustomize that reads these manifests (v4+:
    `patches` with a target; Debian 12's kubernetes-client 1.20 has v2)."""
    if not shutil.which("kubectl"):
        return False
    p = subprocess.run(["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60)
    try:
        v = json.loads(p.stdout).get("kustomizeVersion", "")
    except ValueError:
        return False
    m = re.match(r"v(\d+)\.", v)
    return bool(m) and int(m.group(1)) >= 4


def render_kubectl(overlay, tmp):
    """kubectl kustomize's render as JSON (parsed by the yaml package), or None."""
    if not kubectl_kustomize():
        return None
    p = subprocess.run(["kubectl", "kustomize", os.path.join(K8S, "overlays", overlay)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = os.path.join(tmp, overlay + ".yaml")
    with open(out, "w") as f:
        f.write(p.stdout)
    node = subprocess.run(["node", "--input-type=module", "-e",
                           "import fs from 'node:fs'; import {parseAllDocuments} from 'yaml';"
                           "console.log(JSON.stringify(parseAllDocuments(fs.readFileSync(process.argv[1], 'utf8'))"
                           ".map(d => d.toJS())))", out], capture_output=True, text=True, cwd=CHECKS, timeout=60)
    assert node.returncode == 0, node.stderr
    return json.loads(node.stdout)


def key(o):
    return (o["kind"], o["metadata"]["name"])


@pytest.fixture(scope="module")
def rendered():
    """{overlay: {(kind, name): object}}, and the files validated."""
    node_checks()
    tmp = tempfile.mkdtemp(prefix="ajtest-k8s-")
    try:
        out = {}
        for overlay in OVERLAYS:
            mine = render_minimal(overlay)
            theirs = render_kubectl(overlay, tmp)
            if theirs is not None:
                # The minimal render is what machines without kubectl check:
                # it must be kustomize's own, object for object.
                assert sorted(mine, key=key) == sorted(theirs, key=key), overlay
            out[overlay] = {key(o): o for o in mine}
        yield out, tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def validate(objs, tmp, name):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(objs, f)
    p = k8s_check("validate", path)
    report = json.loads(p.stdout) if p.stdout.strip() else {"errors": [p.stderr]}
    return p.returncode, report


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_manifest_validates_against_the_kubernetes_schemas(rendered, overlay):
    objs, tmp = rendered
    rc, report = validate(list(objs[overlay].values()), tmp, overlay)
    assert rc == 0 and not report["errors"], report["errors"]
    kinds = {k for k, _ in objs[overlay]}
    assert kinds == {"Namespace", "ServiceAccount", "Secret", "ConfigMap", "Deployment", "Service",
                     "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "DaemonSet"}, kinds
    assert len(report["valid"]) == len(objs[overlay])


def test_the_validator_refuses_a_typo_a_wrong_type_and_a_bad_enum(rendered):
    # Negative controls: the same Deployment, each with one mistake.
    objs, tmp = rendered
    dep = objs["rootless"][("Deployment", "agentjail")]
    for mutate, says in (
            (lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(procMounts="Unmasked"),
             "securityContext/procMounts: unknown field"),
            (lambda d: d["spec"].update(replicas="2"), "/spec/replicas"),
            (lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(procMount="Open"),
             "procMount"),
            (lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"].pop("port"),
             "port")):
        bad = json.loads(json.dumps(dep))
        mutate(bad)
        rc, report = validate([bad], tmp, "bad")
        assert rc == 1 and says in " ".join(report["errors"]), report


def pod(objs, name="agentjail"):
    kind = "Deployment" if name == "agentjail" else "DaemonSet"
    return objs[(kind, name)]["spec"]["template"]


def test_both_ways_share_the_least_privilege_floor(rendered):
    objs, _ = rendered
    for overlay in OVERLAYS:
        o = objs[overlay]
        assert o[("ServiceAccount", "agentjail")]["automountServiceAccountToken"] is False
        spec = pod(o)["spec"]
        assert spec["automountServiceAccountToken"] is False and spec["hostUsers"] is False
        assert spec["securityContext"]["seccompProfile"] == {"type": "Localhost",
                                                             "localhostProfile": "agentjail/seccomp.json"}
        c = spec["containers"][0]
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert sc["procMount"] == "Unmasked" and sc["readOnlyRootFilesystem"] is True
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert "limits" in c["resources"], "the pod's limits bound all runs in the rootless way"


def test_rootless_has_no_capability_and_no_root(rendered):
    objs, _ = rendered
    spec = pod(objs["rootless"])["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert "add" not in spec["containers"][0]["securityContext"]["capabilities"]


def test_every_layer_adds_exactly_the_measured_capabilities(rendered):
    objs, _ = rendered
    spec = pod(objs["every-layer"])["spec"]
    assert spec["securityContext"]["runAsUser"] == 0 and spec["securityContext"]["runAsNonRoot"] is False
    # The set test_deploy_image.py shows is needed: without LEASE check says
    # so; SYS_PTRACE is not needed (test_container.py).
    assert spec["containers"][0]["securityContext"]["capabilities"]["add"] == ["SETUID", "SETGID", "LEASE"]
    assert pod(objs["every-layer"])["metadata"]["annotations"] == {
        "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw": "true"}


def test_selectors_and_references_resolve(rendered):
    objs, _ = rendered
    for overlay in OVERLAYS:
        o = objs[overlay]
        labels = pod(o)["metadata"]["labels"]
        sub = lambda sel: all(labels.get(k) == v for k, v in sel.items())  # noqa: E731
        assert sub(o[("Deployment", "agentjail")]["spec"]["selector"]["matchLabels"])
        assert sub(o[("Service", "agentjail")]["spec"]["selector"])
        assert sub(o[("PodDisruptionBudget", "agentjail")]["spec"]["selector"]["matchLabels"])
        assert sub(o[("NetworkPolicy", "agentjail-ingress")]["spec"]["podSelector"]["matchLabels"])
        assert o[("HorizontalPodAutoscaler", "agentjail")]["spec"]["scaleTargetRef"]["name"] == "agentjail"
        for p in (pod(o), pod(o, "agentjail-seccomp-installer")):
            for v in p["spec"]["volumes"]:
                if "configMap" in v:
                    assert ("ConfigMap", v["configMap"]["name"]) in o, v
                if "secret" in v:
                    assert ("Secret", v["secret"]["secretName"]) in o, v
            assert p["spec"]["serviceAccountName"] in {n for k, n in o if k == "ServiceAccount"}
        for (kind, _), obj in o.items():
            if kind != "Namespace":
                assert obj["metadata"]["namespace"] == "agentjail", (kind, obj["metadata"])


def test_network_policy_ingress_from_the_platform_only_and_egress_never_private(rendered):
    objs, _ = rendered
    o = objs["rootless"]
    ing = o[("NetworkPolicy", "agentjail-ingress")]["spec"]
    assert ing["policyTypes"] == ["Ingress"] and len(ing["ingress"]) == 1
    assert [list(f) for f in ing["ingress"][0]["from"]] == [["namespaceSelector"]]
    eg = o[("NetworkPolicy", "agentjail-egress")]["spec"]
    assert eg["policyTypes"] == ["Egress"]
    for rule in eg["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer and peer["ipBlock"]["cidr"] == "0.0.0.0/0":
                assert PRIVATE <= set(peer["ipBlock"]["except"]), peer
            elif "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"] == "::/0" and "fc00::/7" in peer["ipBlock"]["except"], peer
            else:  # DNS only, to kube-dns
                assert {p["port"] for p in rule["ports"]} == {53}, rule


def test_configmap_holds_a_config_and_policy_agentjail_accepts(rendered):
    objs, tmp = rendered
    cm = objs["rootless"][("ConfigMap", "agentjail-config")]["data"]
    cfg = json.loads(cm["server.json"])
    assert cfg["policy"] == "/etc/agentjail/config/policy.json" and "tenants" not in cfg
    path = os.path.join(tmp, "policy.json")
    with open(path, "w") as f:
        f.write(cm["policy.json"])
    p = subprocess.run([AJ_BIN, "policy", "check", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    tenants = json.loads(objs["rootless"][("Secret", "agentjail-tenants")]["stringData"]["tenants.json"])
    assert all(re.fullmatch("[0-9a-f]{64}", t["token_sha256"]) for t in tenants.values()), tenants
    # The node profile is the one the Docker flags use.
    seccomp = objs["rootless"][("ConfigMap", "agentjail-seccomp")]["data"]["seccomp.json"]
    with open(PROFILE) as f:
        assert seccomp == f.read()


def test_seccomp_installer_writes_where_the_pods_read(rendered):
    objs, _ = rendered
    spec = pod(objs["rootless"], "agentjail-seccomp-installer")["spec"]
    host = [v for v in spec["volumes"] if "hostPath" in v][0]
    assert host["hostPath"]["path"] == "/var/lib/kubelet/seccomp"
    script = " ".join(spec["initContainers"][0]["command"])
    assert "/host-seccomp/agentjail/seccomp.json" in script  # = localhostProfile agentjail/seccomp.json
    assert spec["initContainers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]


# ---- the seccomp profile against agentjail's own code ---------------------------------

def _syscall_table():
    table = {}
    with open("/usr/include/x86_64-linux-gnu/asm/unistd_64.h") as f:
        for line in f:
            m = re.match(r"#define __NR_(\w+) (\d+)", line)
            if m:
                table[int(m.group(2))] = m.group(1)
    return table


def _enumerate_syscalls(binary):
    """(numbers, unresolved functions): the call number each `syscall`
    instruction and each call of syscall() is given, by the closest
    earlier immediate load of %eax (%edi for syscall()) in the function."""
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    found, unresolved, func, window = set(), set(), None, []
    for line in dis.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            func, window = m.group(1), []
            continue
        m = re.match(r"^\s*[0-9a-f]+:\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        op, args = m.groups()
        if op == "syscall" or (op == "call" and args.endswith("<syscall>")):
            reg = "ax" if op == "syscall" else "di"
            num = None
            for pop, pargs in reversed(window):
                mm = re.match(r"\$0x([0-9a-f]+),%[re]" + reg + "$", pargs)
                if pop in ("mov", "movl", "movq") and mm:
                    num = int(mm.group(1), 16)
                    break
                if pop == "xor" and pargs == "%e{0},%e{0}".format(reg):
                    num = 0
                    break
                if re.search(r"%[re]?" + reg + r"[lx]?$", pargs) or pop.startswith(("call", "j", "ret")):
                    break
            if num is None:
                unresolved.add(func)
            else:
                found.add(num)
        window = (window + [(op, args)])[-12:]
    return found, unresolved


def _allowed(caps):
    with open(PROFILE) as f:
        p = json.load(f)
    free, cond = set(), set()
    for rule in p["syscalls"]:
        if rule["action"] != "SCMP_ACT_ALLOW":
            continue
        inc, exc = rule.get("includes", {}), rule.get("excludes", {})
        if (inc.get("arches") and "amd64" not in inc["arches"]) or "amd64" in exc.get("arches", []):
            continue
        if any(c not in caps for c in inc.get("caps", [])) or any(c in caps for c in exc.get("caps", [])):
            continue
        (cond if rule.get("args") else free).update(rule["names"])
    return free, cond


# Call sites whose number is not an immediate: each function here makes
# only calls named beside it (read from its source: glibc 2.36 and
# src/lib/isolate/caps.c). A new one fails the test until it is reviewed.
UNRESOLVED_REVIEWED = {
    "syscall": "the generic wrapper itself (its callers are enumerated)",
    "_Exit": "exit_group", "__libc_message": "writev, abort's calls", "__libc_start_call_main": "exit",
    "___pthread_cond_broadcast": "futex", "___pthread_cond_signal": "futex", "__condvar_cancel_waiting": "futex",
    "__pthread_cond_destroy": "futex", "__pthread_disable_asynccancel": "futex",
    "__pthread_mutex_cond_lock_full": "futex", "__pthread_mutex_lock_full": "futex",
    "__thread_gscope_wait": "futex", "start_thread": "futex, madvise, exit",
    "__nptl_setxid": "setresuid, setresgid, setgroups (the setxid broadcast)",
    "__nptl_setxid_sighandler": "the same setxid calls", "setxid_mark_thread.constprop.0": "futex",
    "__tcsetattr": "ioctl", "_dl_early_allocate": "brk", "getentropy": "getrandom",
    "aj_caps_child_drop_all": "capset, prctl (PR_CAPBSET_DROP, securebits)",
    "_sys_chk_flag_kernel": "seccomp (libseccomp's probe)", "sys_chk_seccomp_action": "seccomp",
    "sys_chk_seccomp_syscall.part.0": "seccomp", "sys_filter_load": "seccomp, prctl",
}


def test_profile_is_generated_and_its_kubernetes_copy_matches():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-docker-seccomp.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open(PROFILE) as a, open(os.path.join(K8S, "base", "seccomp.json")) as b:
        assert a.read() == b.read()


def test_profile_allows_every_call_in_agentjails_code():
    if not shutil.which("objdump"):
        must_skip("objdump is not installed (binutils)")
    if subprocess.run(["file", AJ_BIN], capture_output=True, text=True).stdout.find("static") < 0:
        pytest.skip("a dynamic build (ASan): the enumeration reads the static release binary")
    table = _syscall_table()
    nums, unresolved = _enumerate_syscalls(AJ_BIN)
    names = {table[n] for n in nums if n in table}
    assert not [n for n in nums if n not in table], "numbers that are no x86-64 call: %r" % nums
    # The enumeration sees agentjail's own calls (positive control).
    assert {"clone3", "unshare", "setns", "mount", "pivot_root", "keyctl", "landlock_restrict_self",
            "seccomp", "open_tree", "mount_setattr"} <= names, sorted(names)
    assert unresolved <= set(UNRESOLVED_REVIEWED), sorted(unresolved - set(UNRESOLVED_REVIEWED))
    for caps in ([], ["CAP_SETUID", "CAP_SETGID", "CAP_LEASE"]):
        free, cond = _allowed(caps)
        # socket is allowed for every family but AF_VSOCK (agentjail: AF_UNIX, AF_NETLINK).
        missing = sorted(n for n in names if n not in free and not (n in cond and n in ("socket", "personality")))
        assert not missing, (caps, missing)
    # Negative control: Docker's default profile refuses some of them.
    with open(os.path.join(ROOT, "deploy", "docker", "moby-default.json")) as f:
        dflt = json.load(f)
    dfree = {n for r in dflt["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" and not r.get("includes", {}).get("caps")
             for n in r["names"]}
    assert {"unshare", "mount", "pivot_root", "setns", "keyctl"} <= names - dfree


# ---- the single-host systemd unit ------------------------------------------------------

def _verify_unit(text, tmp):
    path = os.path.join(tmp, "agentjail.service")
    with open(path, "w") as f:
        f.write(text.replace("/usr/local/bin/agentjail", AJ_BIN))  # verify wants the binary to exist
    return subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, timeout=60)


def test_systemd_unit_is_valid_and_delegates_the_cgroup(tmp_path):
    if not shutil.which("systemd-analyze"):
        must_skip("systemd-analyze is not installed (systemd)")
    with open(os.path.join(ROOT, "deploy", "systemd", "agentjail.service")) as f:
        unit = f.read()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if re.match(r"^[A-Z]\w+=", line))
    assert settings["Delegate"] == "yes" and settings["User"] == "root"
    assert settings["ExecStart"].startswith("/usr/local/bin/agentjail serve --config ")
    for breaks in ("ProtectKernelTunables", "ProtectControlGroups", "RestrictNamespaces", "SystemCallFilter",
                   "PrivateUsers", "ProtectHostname"):
        assert breaks not in settings, breaks
    p = _verify_unit(unit, str(tmp_path))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    # Negative control: verify does report a mistake.
    p = _verify_unit(unit.replace("Delegate=yes", "Delgate=yes"), str(tmp_path))
    assert "Unknown key 'Delgate'" in p.stderr, p.stderr
