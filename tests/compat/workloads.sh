#!/usr/bin/env bash
# The data-science and tooling work an agent does, each step bare and inside
# agentjail, on one workspace that every step of a mode shares; one
# `agentjail run` per step, which is how agents call it (issue 13).
#
#   bare     as nobody (65534), empty environment but PATH, HOME (a fresh
#            empty directory per step) and W; the workspace is nobody's own
#   sandbox  agentjail run (default policy) --bind-rw WS:/work --workdir /work
#            --env W=/work --timeout; the workspace is made like the bare one
#            (owner nobody, 0755), as an operator's checkout would be.
#            --open-workspace makes it 0777 instead, to see what else breaks
#            once the first run's files exist.
#
# Usage: tests/compat/workloads.sh [--fast] [--open-workspace] [--out DIR]
#        [--aj PATH] [--only REGEX] [--timeout SEC]
#   --fast   the tooling steps and the pandas job (no matplotlib/seaborn/
#            scikit-learn/statsmodels imports, which take most of the time)
# Output: DIR/results.json and DIR/results.md (default build-compat/workloads),
# DIR/logs/<mode>/<step>.{out,err,events}. Needs root; installs the Debian
# packages with scripts/deps.sh compat when missing, and skips (naming the
# package) a step whose package apt could not install.
# Exit status: 0 when it ran (whatever it found), 1 setup error, 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
aj=${AJ_BIN:-$root/build/agentjail}
out=$root/build-compat/workloads
fast=0 open=0 only='' tmo=180
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) fast=1 ;;
    --open-workspace) open=1 ;;
    --out) out=$2; shift ;;
    --aj) aj=$2; shift ;;
    --only) only=$2; shift ;;
    --timeout) tmo=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "workloads.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "workloads.sh: run as root (bare steps run as nobody)" >&2; exit 1; }
aj=$(realpath "$aj"); [ -x "$aj" ] || { echo "workloads.sh: no agentjail at $aj (--aj or AJ_BIN)" >&2; exit 1; }
"$root/scripts/deps.sh" compat >&2 || echo "workloads.sh: some packages could not be installed; their steps are skipped" >&2
mkdir -p "$out"; out=$(realpath "$out")
base=$(mktemp -d /tmp/aj-compat-wl.XXXXXX)
trap 'rm -rf "$base"' EXIT
chmod 755 "$base"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
PATHV=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin   # the sandbox's PATH

# ---- the steps: NAME, what must be importable/executable first, script ----
names=() needs=() scripts=()
step() { names+=("$1"); needs+=("$2"); scripts+=("$3"); }

# data science (one job each, files in the workspace shared with later steps)
step ds-pandas "py:pandas" '
python3 - <<PY
import pandas as pd, numpy as np
rng = np.random.default_rng(1)
df = pd.DataFrame({"g": rng.integers(0, 5, 5000), "x": rng.normal(size=5000)})
df["y"] = 2 * df.x + rng.normal(size=5000)
df.to_csv("data.csv", index=False)
back = pd.read_csv("data.csv")
print(back.groupby("g").y.mean().round(2).to_dict())
assert len(back) == 5000
PY'
[ $fast = 1 ] || {
step ds-matplotlib "py:matplotlib" '
python3 - <<PY
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt, pandas as pd
df = pd.read_csv("data.csv")
ax = df.plot.scatter(x="x", y="y", s=2)
ax.figure.savefig("plot.png")
assert open("plot.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
print("png", len(open("plot.png", "rb").read()))
PY'
step ds-seaborn "py:seaborn" '
python3 - <<PY
import matplotlib
matplotlib.use("Agg")
import seaborn as sns, pandas as pd
df = pd.read_csv("data.csv")
g = sns.histplot(data=df, x="y", hue="g")
g.figure.savefig("sns.png")
assert open("sns.png", "rb").read(4) == b"\x89PNG"
PY'
step ds-sklearn "py:sklearn" '
python3 - <<PY
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
import joblib
X, y = load_iris(return_X_y=True)
s = cross_val_score(LogisticRegression(max_iter=500), X, y, cv=5, n_jobs=2)
print("cv", s.mean().round(3))
assert s.mean() > 0.9
joblib.dump(LogisticRegression(max_iter=500).fit(X, y), "model.joblib")
PY'
step ds-joblib-memmap "py:joblib" '
python3 - <<PY
# joblib memory-maps an argument over 1 MB for its workers: into /dev/shm
# when that is 2 GB or more, else into the temporary directory (/tmp)
import numpy as np
from joblib import Parallel, delayed
a = np.ones((100, 1000, 125), dtype=np.float64)   # 100 MB
r = Parallel(n_jobs=2)(delayed(np.sum)(a, axis=0) for i in range(2))
assert r[0].sum() == a.size
print(len(r))
PY'
step ds-statsmodels "py:statsmodels" '
python3 - <<PY
import pandas as pd, statsmodels.formula.api as smf
df = pd.read_csv("data.csv")
m = smf.ols("y ~ x + C(g)", data=df).fit()
print(m.params.round(2).to_dict())
assert abs(m.params["x"] - 2) < 0.1
PY'
}

# git across runs: made in one, edited/deleted/committed in later ones
step git-init "bin:git" '
mkdir repo && cd repo && git init -q && git config user.email a@b && git config user.name agent
printf "one\n" > a.txt && printf "keep\n" > b.txt && git add . && git commit -qm first && git log --oneline'
step git-edit-commit "bin:git" 'cd repo && printf "two\n" >> a.txt && git commit -qam second && git log --oneline | wc -l'
step git-rm-commit "bin:git" 'cd repo && git rm -q b.txt && git commit -qm third && test ! -e b.txt'
step git-log-status "bin:git" 'cd repo && test "$(git log --oneline | wc -l)" = 3 && test -z "$(git status --porcelain)"'
step git-branch-merge "bin:git" 'cd repo && git checkout -qb feat && echo f > f.txt && git add f.txt && git commit -qm f && git checkout -q - && git merge -q --no-edit feat && git log --oneline | wc -l'
# C: compile and run in /tmp and in the workspace, make across runs
step gcc-tmp "bin:gcc" 'printf "#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}\n" > /tmp/h$$.c && gcc -o /tmp/h$$ /tmp/h$$.c && /tmp/h$$ && rm -f /tmp/h$$ /tmp/h$$.c'
step gcc-workspace "bin:gcc" 'mkdir -p src && printf "#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}\n" > src/h.c && gcc -O2 -o src/h src/h.c && ./src/h'
step make-build "bin:make" 'mkdir -p mk && cd mk && printf "int main(void){return 0;}\n" > p.c && printf "p: p.c\n\tcc -o p p.c\nclean:\n\trm -f p\n" > Makefile && make -s && ./p'
step make-rebuild "bin:make" 'cd mk && sleep 1 && printf "int main(void){return 3;}\n" > p.c && make -s && if ./p; then exit 1; else test $? = 3; fi'
step make-clean "bin:make" 'cd mk && make -s clean && test ! -e p'
step script-in-tmp "" 'printf "#!/bin/sh\necho ok\n" > /tmp/s$$.sh && chmod +x /tmp/s$$.sh && /tmp/s$$.sh && rm /tmp/s$$.sh'
step script-in-workspace "" 'printf "#!/bin/sh\necho ok\n" > run.sh && chmod +x run.sh && ./run.sh'
step script-rerun-chmod "" 'chmod 700 run.sh && ./run.sh && printf "echo again\n" >> run.sh && ./run.sh'
step shell-which "" 'python3 -c "import shutil,sys; p=shutil.which(\"run.sh\", path=\".\"); print(p); sys.exit(p is None)"'
# Python packaging without the internet: a local package, a wheel, a venv
step pkg-write "" '
mkdir -p pkg/tinypkg && printf "def hello():\n    print(\"tiny hello\")\n" > pkg/tinypkg/__init__.py
printf "from setuptools import setup\nsetup(name=\"tinypkg\", version=\"0.1\", packages=[\"tinypkg\"], entry_points={\"console_scripts\": [\"tinyhello=tinypkg:hello\"]})\n" > pkg/setup.py'
step pkg-wheel "py:wheel" 'python3 -m pip wheel -q --no-index --no-build-isolation --no-deps -w dist ./pkg && ls dist'
step pkg-sdist "py:setuptools" 'cd pkg && python3 setup.py -q sdist -d ../dist 2>&1 | tail -2; ls ../dist/*.tar.gz'
step venv-create "py:venv" 'python3 -m venv venv && venv/bin/python -c "import sys; print(sys.prefix)"'
step venv-pip-wheel "py:venv" 'venv/bin/pip install -q --no-index dist/tinypkg-0.1-py3-none-any.whl && venv/bin/tinyhello'
step venv-pip-sdist "py:venv" 'venv/bin/pip install -q --no-index --force-reinstall --no-build-isolation dist/tinypkg-0.1.tar.gz && venv/bin/python -c "import tinypkg; tinypkg.hello()"'
step venv-pip-uninstall "py:venv" 'venv/bin/pip uninstall -qy tinypkg && ! venv/bin/python -c "import tinypkg" 2>/dev/null'
step venv-in-tmp "py:venv" 'python3 -m venv /tmp/v$$ && /tmp/v$$/bin/pip --version && /tmp/v$$/bin/pip install -q --no-index dist/tinypkg-0.1-py3-none-any.whl && /tmp/v$$/bin/tinyhello; rm -rf /tmp/v$$'
# node / npm
step npm-init "bin:npm" 'mkdir -p js && cd js && npm init -y >/dev/null && cat package.json | head -3'
step npm-pkg-set "bin:npm" 'cd js && npm pkg set scripts.hello="node -e \"console.log(42)\"" && npm pkg get scripts.hello'
step npm-run "bin:npm" 'cd js && npm run -s hello'
step node-fs "bin:node" 'node -e "const fs=require(\"fs\"); fs.writeFileSync(\"js/out.txt\", \"n\"); console.log(fs.readFileSync(\"js/out.txt\",\"utf8\"))"'
# sqlite3, jq, tar
step sqlite-create "bin:sqlite3" 'sqlite3 db.sqlite "create table t(x int); insert into t values (1),(2);" && sqlite3 db.sqlite "select count(*) from t"'
step sqlite-update "bin:sqlite3" 'sqlite3 db.sqlite "insert into t values (3); select sum(x) from t" | grep -qx 6'
step python-sqlite "" 'python3 -c "import sqlite3; c=sqlite3.connect(\"db.sqlite\"); c.execute(\"delete from t where x=1\"); c.commit(); print(c.execute(\"select count(*) from t\").fetchone())"'
step jq-filter "bin:jq" 'printf "{\"a\":[1,2,3]}" > j.json && jq ".a | add" j.json | grep -qx 6 && jq ".b = 1" j.json > j2.json && mv j2.json j.json && jq .b j.json'
step tar-create "bin:tar" 'tar czf src.tgz src mk && tar tzf src.tgz | head -3'
step tar-extract "bin:tar" 'mkdir -p x && tar xzf src.tgz -C x && test -x x/src/h'
step tar-overwrite "bin:tar" 'tar xzf src.tgz -C x && rm -rf x && test ! -e x'
# a local server on the sandbox's own loopback, started by the step itself
step curl-loopback "bin:curl" '
port=$((20000 + RANDOM % 20000)); d=$(mktemp -d); echo hello > $d/page.txt
python3 -m http.server -b 127.0.0.1 -d $d $port >/dev/null 2>&1 & srv=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:$port/page.txt && break; sleep 0.1; done | grep -q hello; rc=$?
kill $srv; rm -rf $d; exit $rc'
step python-socket-loopback "" 'python3 -c "
import socket, threading
s = socket.create_server((\"127.0.0.1\", 0)); port = s.getsockname()[1]
threading.Thread(target=lambda: s.accept()[0].sendall(b\"pong\"), daemon=True).start()
print(socket.create_connection((\"127.0.0.1\", port)).recv(4))"'
# what packages read from /etc, ptys, debuggers
step etc-services-mime "" 'python3 -c "import socket, mimetypes; print(socket.getservbyname(\"http\"), socket.getprotobyname(\"tcp\"), mimetypes.guess_type(\"x.webp\"))" && cat /etc/os-release | head -1'
step openssl-cli "bin:openssl" 'openssl rand -hex 4 && openssl req -x509 -newkey rsa:2048 -nodes -keyout /tmp/k$$ -out /tmp/c$$ -subj /CN=x -days 1 2>/dev/null && rm -f /tmp/k$$ /tmp/c$$'
step pty-script "bin:script" 'script -qec "echo in-pty" /dev/null | grep -q in-pty'
step python-pty "" 'python3 -c "import os, pty; m, s = os.openpty(); print(os.ttyname(s))"'
step strace "bin:strace" 'strace -f -qq -e trace=none true'
step file-delete "" 'rm j.json src.tgz && rm -rf js/node_modules && ls'

# ---- run ----
declare -A skip
for i in "${!names[@]}"; do
  n=${needs[$i]}; what=${n#*:}
  case "$n" in
    py:*) if ! env -i PATH=$PATHV python3 -c "import $what" >/dev/null 2>&1; then
            skip[$i]="python module $what missing (apt: python3-$what not installable here)"; fi ;;
    bin:*) env -i PATH=$PATHV sh -c "command -v $what" >/dev/null 2>&1 || skip[$i]="$what not installed (apt could not install it)" ;;
  esac
done

mkws() { mkdir "$1"; chown 65534:65534 "$1"; chmod "$2" "$1"; }
mkws "$base/ws-bare" 755
mkws "$base/ws-sandbox" $([ $open = 1 ] && echo 777 || echo 755)
mkdir -p "$out/logs/bare" "$out/logs/sandbox"
rows=$base/rows.tsv; : > "$rows"

run_mode() {  # mode
  local mode=$1 i name rc t0 t1 log
  for i in "${!names[@]}"; do
    name=${names[$i]}
    [ -z "$only" ] || [[ $name =~ $only ]] || continue
    [ -z "${skip[$i]:-}" ] || continue
    log=$out/logs/$mode/$name
    rm -f "$log.out" "$log.err" "$log.events" "$log.result"
    t0=$(date +%s%N)
    set +e
    if [ $mode = bare ]; then
      home=$(mktemp -d "$base/home.XXXXXX"); chown 65534:65534 "$home"
      (cd "$base/ws-bare" && timeout -k 5 "$tmo" "${NOBODY[@]}" env -i PATH=$PATHV HOME="$home" W="$base/ws-bare" \
        sh -ec "${scripts[$i]}") </dev/null >"$log.out" 2>"$log.err"
      rc=$?
    else
      (cd / && "$aj" run --bind-rw "$base/ws-sandbox:/work" --workdir /work --env W=/work \
        --timeout "${tmo}s" --result "$log.result" --events "$log.events" \
        -- sh -ec "${scripts[$i]}") </dev/null >"$log.out" 2>"$log.err"
      rc=$?
    fi
    set -e
    t1=$(date +%s%N)
    printf '%s\t%s\t%s\t%s\n' "$mode" "$name" "$rc" $(( (t1 - t0) / 1000000 )) >> "$rows"
    printf '%-8s %-24s rc=%s\n' "$mode" "$name" "$rc" >&2
  done
}
run_mode bare
run_mode sandbox

skips=$base/skips.tsv; : > "$skips"
for i in "${!skip[@]}"; do printf '%s\t%s\n' "${names[$i]}" "${skip[$i]}" >> "$skips"; done
python3 - "$rows" "$skips" "$out" "$open" "$fast" <<'PY'
import json, os, re, sys
rows_f, skips_f, out, open_ws, fast = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(rows_f) if l.strip()]
skips = dict(l.rstrip("\n").split("\t", 1) for l in open(skips_f) if l.strip())
def rd(p, n):
    try:
        with open(p, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""
res = {}
for mode, name, rc, ms in rows:
    res.setdefault(name, {})[mode] = {"rc": int(rc), "ms": int(ms)}
steps = []
for name, r in res.items():
    b, s = r.get("bare"), r.get("sandbox")
    e = {"step": name, "bare_rc": b and b["rc"], "sandbox_rc": s and s["rc"]}
    if s is not None:
        log = os.path.join(out, "logs", "sandbox", name)
        e["sandbox_stderr"] = rd(log + ".err", 600).strip()
        try:
            e["sandbox_status"] = json.load(open(log + ".result")).get("status")
        except (OSError, ValueError):
            e["sandbox_status"] = None
        evs = {}
        for line in rd(log + ".events", 200000).splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") in ("start", "exit"):
                continue
            k = "%s:%s" % (ev.get("type"), ev.get("syscall") or ev.get("path") or "")
            evs[k] = evs.get(k, 0) + 1
        e["sandbox_events"] = evs
    if b is not None and b["rc"] != 0:
        e["bare_stderr"] = rd(os.path.join(out, "logs", "bare", name + ".err"), 400).strip()
    e["fails_only_in_sandbox"] = bool(b and s and b["rc"] == 0 and s["rc"] != 0)
    steps.append(e)
summary = {"workspace_mode": "0777" if open_ws == "1" else "0755 nobody", "fast": fast == "1",
           "steps": len(steps), "pass_bare": sum(1 for e in steps if e["bare_rc"] == 0),
           "pass_sandbox": sum(1 for e in steps if e["sandbox_rc"] == 0),
           "fail_only_in_sandbox": [e["step"] for e in steps if e["fails_only_in_sandbox"]],
           "fail_bare": [e["step"] for e in steps if e["bare_rc"] not in (0, None)],
           "skipped": skips}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"summary": summary, "steps": steps}, f, indent=1)
md = ["# Agent workloads: bare vs agentjail, one run per step, one workspace", "",
      "Workspace %s. %d steps; bare pass %d; sandbox pass %d; **%d fail only in the sandbox**." % (
          summary["workspace_mode"], len(steps), summary["pass_bare"], summary["pass_sandbox"],
          len(summary["fail_only_in_sandbox"])), ""]
for n, why in sorted(skips.items()):
    md.append("- skipped `%s`: %s" % (n, why))
md += ["", "| step | bare | sandbox | only in sandbox | sandbox stderr (end) |", "|---|---:|---:|---|---|"]
for e in steps:
    why = re.sub(r"\s+", " ", e.get("sandbox_stderr", "") if e["fails_only_in_sandbox"] else "")[-240:]
    md.append("| %s | %s | %s | %s | %s |" % (e["step"], e["bare_rc"], e["sandbox_rc"],
              "**yes**" if e["fails_only_in_sandbox"] else "", why.replace("|", "\\|")))
with open(os.path.join(out, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print(json.dumps(summary, indent=1))
PY
