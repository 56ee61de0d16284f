"""`agentjail mcp` (stdio) and /mcp on `agentjail serve` (Streamable HTTP),
driven by the official MCP TypeScript SDK client (tests/mcp/drive.mjs,
@modelcontextprotocol/sdk from tests/mcp/package-lock.json, installed by
scripts/deps.sh test). Each refusal has its positive control next to it."""
import ast
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import AJ_BIN, IS_ROOT, ROOT, new_tag, pids_with

MCP_DIR = os.path.join(ROOT, "tests", "mcp")
DRIVE = os.path.join(MCP_DIR, "drive.mjs")
NODE = shutil.which("node")
VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
MODERN = "2026-07-28"  # the stateless revision: no initialize, _meta on every request
ALL_VERSIONS = [MODERN] + VERSIONS
SERVER_INFO = "io.modelcontextprotocol/serverInfo"

pytestmark = pytest.mark.skipif(
    not NODE or not os.path.isdir(os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk")),
    reason="node or tests/mcp/node_modules missing (scripts/deps.sh test runs npm ci there)")


def drive(spec, timeout=120):
    p = subprocess.run([NODE, DRIVE, json.dumps(spec)], cwd=MCP_DIR, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0 and p.stdout.strip(), "drive.mjs failed: %s %s" % (p.stdout[-2000:], p.stderr[-3000:])
    out = json.loads(p.stdout)
    assert "fatal" not in out, out["fatal"] + "\nserver stderr:\n" + out.get("stderr", "")
    return out


def stdio(steps, args=(), timeout=120):
    return drive({"transport": "stdio", "command": [AJ_BIN, "mcp"] + list(args), "steps": steps}, timeout)


def init_msg(version, id=1):
    return {"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}


def call_msg(id, name, args, token=None):
    params = {"name": name, "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


def by_id(messages, id):
    found = [m for m in messages if m.get("id") == id]
    assert len(found) == 1, messages
    return found[0]


def debug_tag(tag):
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cl = f.read()
        except OSError:
            continue
        if tag.encode() in cl:
            out.append((pid, cl))
    return out


def structured(result):
    """structuredContent, checked to be the same JSON as the text block."""
    sc = result["structuredContent"]
    texts = [c["text"] for c in result["content"] if c["type"] == "text"]
    assert texts and json.loads(texts[0]) == sc, result
    return sc


# ---- lifecycle ---------------------------------------------------------------------------------

def test_handshake_for_each_protocol_version_and_discover():
    raws = [{"op": "raw", "messages": [init_msg(v)]} for v in VERSIONS]
    raws.append({"op": "raw", "messages": [init_msg("1999-01-01")]})
    raws.append({"op": "raw", "messages": [
        {"jsonrpc": "2.0", "id": "d", "method": "server/discover",
         "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                              "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                              "io.modelcontextprotocol/clientCapabilities": {}}}},
        {"jsonrpc": "2.0", "id": "p", "method": "ping"},
        {"jsonrpc": "2.0", "id": "l", "method": "tools/list"},
        init_msg("2025-11-25", id="i"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "l2", "method": "tools/list"},
        init_msg("2025-11-25", id="i2")]})
    out = stdio([{"op": "connect"}] + raws)
    conn = out["steps"][0]
    assert conn["server"]["name"] == "agentjail" and "tools" in conn["capabilities"], conn
    assert "sandbox" in conn["instructions"]
    for v, step in zip(VERSIONS, out["steps"][1:5]):
        r = by_id(step["messages"], 1)["result"]
        assert r["protocolVersion"] == v, (v, r)
        assert r["serverInfo"]["name"] == "agentjail" and r["capabilities"]["tools"] == {"listChanged": False}
    # A revision the server does not speak: it answers with its newest.
    assert by_id(out["steps"][5]["messages"], 1)["result"]["protocolVersion"] == VERSIONS[0]
    msgs = out["steps"][6]["messages"]
    d = by_id(msgs, "d")["result"]
    assert d["supportedVersions"] == ALL_VERSIONS and d["resultType"] == "complete", d
    assert d["_meta"][SERVER_INFO]["name"] == "agentjail" and "tools" in d["capabilities"]
    assert d["ttlMs"] > 0 and d["cacheScope"] == "private", d
    assert by_id(msgs, "p")["result"] == {}
    # Before initialize only ping and discover are served; after it, the same request is.
    assert by_id(msgs, "l")["error"]["code"] == -32600
    assert {t["name"] for t in by_id(msgs, "l2")["result"]["tools"]} >= {"run_code", "run_command"}
    assert by_id(msgs, "i2")["error"]["code"] == -32600  # initialized once only


# ---- the stateless revision (2026-07-28) -----------------------------------------------------------

def meta(version=MODERN, caps=True, info=True):
    m = {"io.modelcontextprotocol/protocolVersion": version}
    if caps:
        m["io.modelcontextprotocol/clientCapabilities"] = {}
    if info:
        m["io.modelcontextprotocol/clientInfo"] = {"name": "raw", "version": "1"}
    return m


def modern_msg(id, method, params=None, **kw):
    p = dict(params or {})
    p["_meta"] = dict(meta(**kw), **p.get("_meta", {}))
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": p}


def test_stateless_requests_without_initialize_over_stdio():
    """Requests that carry the 2026-07-28 envelope are served with no
    initialize: results say resultType and the server in _meta, lists
    carry cache hints; a missing field is -32602, a revision the server
    does not serve per request -32022 with the ones it does; ping and
    initialize are not methods of that revision. The same tools/list
    without the envelope (positive control of the trigger) still needs
    initialize."""
    out = stdio([{"op": "raw", "messages": [
        {"jsonrpc": "2.0", "id": "plain", "method": "tools/list"},
        modern_msg("list", "tools/list"),
        modern_msg("call", "tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "echo stateless"}}),
        modern_msg("bad-args", "tools/call", {"name": "run_code", "arguments": {"language": "cobol", "code": "x"}}),
        modern_msg("disc", "server/discover"),
        modern_msg("no-caps", "tools/list", caps=False),
        modern_msg("no-info", "tools/list", info=False),
        {"jsonrpc": "2.0", "id": "bad-info", "method": "tools/list",
         "params": {"_meta": dict(meta(), **{"io.modelcontextprotocol/clientInfo": "me"})}},
        modern_msg("future", "tools/list", version="2099-01-01"),
        modern_msg("legacy-rev", "tools/list", version="2025-11-25"),
        {"jsonrpc": "2.0", "id": "not-str", "method": "tools/list",
         "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": 20260728,
                              "io.modelcontextprotocol/clientCapabilities": {}}}},
        modern_msg("ping", "ping"),
        modern_msg("init", "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "x", "version": "1"}}),
        modern_msg("res", "resources/list")]}])
    msgs = out["steps"][0]["messages"]
    assert by_id(msgs, "plain")["error"]["code"] == -32600  # the control: no envelope, no initialize
    lst = by_id(msgs, "list")["result"]
    assert lst["resultType"] == "complete" and lst["_meta"][SERVER_INFO]["name"] == "agentjail", lst
    assert lst["ttlMs"] > 0 and lst["cacheScope"] == "private"
    assert [t["name"] for t in lst["tools"]][:2] == ["run_code", "run_command"]
    call = by_id(msgs, "call")["result"]
    assert call["resultType"] == "complete" and call["_meta"][SERVER_INFO]["name"] == "agentjail", call
    assert structured(call)["stdout"] == "stateless\n" and call["isError"] is False
    assert by_id(msgs, "bad-args")["error"]["code"] == -32602
    d = by_id(msgs, "disc")["result"]
    assert d["supportedVersions"] == ALL_VERSIONS and d["resultType"] == "complete", d
    assert "clientCapabilities" in by_id(msgs, "no-caps")["error"]["message"]
    assert by_id(msgs, "no-caps")["error"]["code"] == -32602
    assert by_id(msgs, "no-info")["result"]["resultType"] == "complete"  # clientInfo is optional
    assert by_id(msgs, "bad-info")["error"]["code"] == -32602
    for rid, asked in (("future", "2099-01-01"), ("legacy-rev", "2025-11-25")):
        e = by_id(msgs, rid)["error"]
        assert e["code"] == -32022 and e["data"] == {"supported": ALL_VERSIONS, "requested": asked}, e
    assert by_id(msgs, "not-str")["error"]["code"] == -32602
    for rid in ("ping", "init", "res"):
        assert by_id(msgs, rid)["error"]["code"] == -32601, by_id(msgs, rid)
    assert "initialize: client asked" not in out["stderr"]  # nothing went through the handshake


def test_stateless_sdk_v2_client_over_stdio():
    """The SDK's v2 client, pinned to 2026-07-28 and on 'auto' (it probes
    with server/discover), speaks the stateless revision to `agentjail
    mcp`: no initialize; tools, progress, a cancel (notifications/cancelled)
    and the session tools work. On 'legacy' it still gets the handshake."""
    tag = new_tag()
    code = ("import subprocess\n"
            "p = subprocess.Popen(['sleep', '%s'])\n"
            "print('started', flush=True)\n"
            "p.wait()\n" % tag)
    steps = [{"op": "connect"},
             {"op": "call", "name": "run_code", "args": {"language": "bash", "code": "echo one; sleep 0.2; echo two"},
              "progress": True},
             {"op": "call", "name": "run_code", "args": {"language": "python", "code": code}, "progress": True,
              "cancel_on": "^stdout: started", "pids_tag": tag},
             {"op": "stderr", "pattern": "tools/call run_code cancelled: its run was killed"},
             {"op": "call", "name": "run_command", "args": {"argv": ["false"]}}]
    out = drive({"transport": "stdio", "command": [AJ_BIN, "mcp"], "sdk": "v2", "negotiation": {"pin": MODERN},
                 "steps": steps})
    conn, ok, cancelled, log, failed = out["steps"]
    assert conn["protocolVersion"] == MODERN and conn["server"]["name"] == "agentjail", conn
    assert "tools" in conn["capabilities"] and "sandbox" in conn["instructions"]
    assert ok["result"]["isError"] is False and structured(ok["result"])["stdout"] == "one\ntwo\n", ok
    assert "stdout: one" in "".join(p.get("message", "") for p in ok["progress"]), ok["progress"]
    assert cancelled["pids_at_cancel"] and "error" in cancelled, cancelled  # it ran, then was cancelled
    assert log["matched"] and pids_with(tag) == []
    assert failed["result"]["isError"] is True and structured(failed["result"])["exit_code"] == 1
    assert "initialize: client asked" not in out["stderr"], out["stderr"]
    # 'auto' probes and picks the stateless revision; 'legacy' (the control) goes through initialize.
    for mode, want, init in (("auto", MODERN, False), ("legacy", VERSIONS[0], True)):
        out = drive({"transport": "stdio", "command": [AJ_BIN, "mcp"], "sdk": "v2", "negotiation": mode,
                     "steps": [{"op": "connect"}, {"op": "list"}]})
        assert out["steps"][0]["protocolVersion"] == want, (mode, out["steps"][0])
        assert {"run_code", "run_command"} <= {t["name"] for t in out["steps"][1]["tools"]}
        assert ("initialize: client asked" in out["stderr"]) == init, (mode, out["stderr"])


def test_tools_declare_input_and_output_schemas():
    out = stdio([{"op": "connect"}, {"op": "list"}])
    tools = {t["name"]: t for t in out["steps"][1]["tools"]}
    assert {"run_code", "run_command"} <= set(tools), tools.keys()
    for name, t in tools.items():
        assert t["inputSchema"]["type"] == "object" and t["inputSchema"]["properties"], name
        assert t["outputSchema"]["type"] == "object" and "status" in t["outputSchema"]["properties"] or \
            t["outputSchema"]["properties"], name
        assert t["description"], name
    assert tools["run_code"]["inputSchema"]["required"] == ["language", "code"]
    assert tools["run_code"]["inputSchema"]["properties"]["language"]["enum"] == ["python", "bash", "sh", "node"]


# ---- runs --------------------------------------------------------------------------------------

def test_run_code_ok_and_failed_runs_are_is_error():
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "python", "code": "print(6*7)"}},
                 {"op": "call", "name": "run_code", "args": {"language": "bash", "code": "echo no >&2; exit 3"}},
                 {"op": "call", "name": "run_code",
                  "args": {"language": "python", "code": "import time; time.sleep(30)", "timeout": 0.5}},
                 {"op": "call", "name": "run_command", "args": {"argv": ["sh", "-c", "echo $0 $1", "a", "b"]}},
                 {"op": "call", "name": "run_command", "args": {"command": "echo one; echo two"}},
                 {"op": "call", "name": "run_code",
                  "args": {"language": "sh", "code": "cat", "stdin": "from stdin\n"}}])
    ok, bad, slow, argv, line, stdin = [s["result"] for s in out["steps"][1:]]
    sc = structured(ok)
    assert ok["isError"] is False and sc["status"] == "ok" and sc["stdout"] == "42\n" and sc["exit_code"] == 0, ok
    sc = structured(bad)
    assert bad["isError"] is True and sc["status"] == "nonzero_exit" and sc["exit_code"] == 3, bad
    assert sc["stderr"] == "no\n"
    sc = structured(slow)
    assert slow["isError"] is True and sc["status"] == "timeout", slow
    assert structured(argv)["stdout"] == "a b\n" and argv["isError"] is False
    assert structured(line)["stdout"] == "one\ntwo\n" and structured(line)["argv"][:2] == ["sh", "-c"]
    assert structured(stdin)["stdout"] == "from stdin\n"


ESCAPE = ("import ctypes, os\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "r = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER: regain capabilities
          "print(r, os.strerror(ctypes.get_errno()))\n")


def test_escape_attempt_is_is_error_with_its_event():
    # As the server's first (pooled) run: a rootless pool once held it in
    # its seccomp notification until the timeout (fixed in the pool).
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "python", "code": ESCAPE}},
                 {"op": "call", "name": "run_code",
                  "args": {"language": "python", "code": "import ctypes, os\nprint(0)\n"}}])
    esc, control = out["steps"][1]["result"], out["steps"][2]["result"]
    sc = structured(esc)
    assert sc["stdout"].startswith("-1 "), sc  # refused
    assert esc["isError"] is True, sc
    events = [e for e in sc["events"] if e["type"] == "escape_attempt"]
    assert events and events[0]["syscall"] == "unshare", sc["events"]
    # Positive control: the same interpreter without the call is no error.
    sc = structured(control)
    assert control["isError"] is False and sc["events"] == [] and sc["status"] == "ok", sc


def test_bad_arguments_are_32602_and_bad_messages_their_codes():
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "cobol", "code": "x"}},
                 {"op": "call", "name": "run_code", "args": {"language": "python", "code": "1", "shell": True}},
                 {"op": "call", "name": "run_code", "args": {"language": "python"}},
                 {"op": "call", "name": "run_command", "args": {"argv": ["true"], "command": "true"}},
                 {"op": "call", "name": "run_command", "args": {"argv": "true"}},
                 {"op": "call", "name": "run_code", "args": {"language": "python", "code": "1", "timeout": 1e9}},
                 {"op": "call", "name": "no_such_tool", "args": {}},
                 {"op": "call", "name": "run_command", "args": {"argv": ["true"]}}])
    for step in out["steps"][1:-1]:
        assert step.get("error", {}).get("code") == -32602, step
    assert "language" in out["steps"][1]["error"]["message"]
    assert "shell" in out["steps"][2]["error"]["message"]
    assert out["steps"][-1]["result"]["isError"] is False  # positive control
    raw = stdio([{"op": "raw", "messages": [
        init_msg("2025-11-25"),
        {"jsonrpc": "2.0", "id": 2, "method": "no/such/method"},
        {"id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"arguments": {}}},
        {"jsonrpc": "2.0", "id": 5, "method": "ping"}]}])
    msgs = raw["steps"][0]["messages"]
    assert by_id(msgs, 2)["error"]["code"] == -32601
    assert by_id(msgs, 3)["error"]["code"] == -32600
    assert by_id(msgs, 4)["error"]["code"] == -32602
    assert by_id(msgs, 5)["result"] == {}


def test_parse_error_is_32700_and_the_session_goes_on():
    # A line that is not JSON: -32700 with a null id; the next line is served.
    script = ("import json, subprocess, sys\n"
              "p = subprocess.Popen([sys.argv[1], 'mcp'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,"
              " stderr=subprocess.DEVNULL)\n"
              "p.stdin.write(b'{not json\\n' + json.dumps({'jsonrpc': '2.0', 'id': 7, 'method': 'ping'}).encode()"
              " + b'\\n')\n"
              "p.stdin.close()\n"
              "print(p.stdout.read().decode(), end='')\n"
              "sys.exit(p.wait())\n")
    p = subprocess.run(["/usr/bin/python3", "-c", script, AJ_BIN], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert lines[0]["error"]["code"] == -32700 and lines[0]["id"] is None, lines
    assert lines[1] == {"jsonrpc": "2.0", "id": 7, "result": {}}, lines


def test_progress_notifications_on_a_long_run():
    code = "for i in 1 2 3; do echo line$i; sleep 0.2; done"
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "bash", "code": code}, "progress": True},
                 {"op": "call", "name": "run_code", "args": {"language": "bash", "code": code}}])
    step = out["steps"][1]
    assert step["result"]["isError"] is False, step
    prog = step["progress"]
    values = [p["progress"] for p in prog]
    assert values == sorted(values) and len(set(values)) == len(values), prog  # increasing
    text = "".join(p.get("message", "") for p in prog)
    for i in (1, 2, 3):
        assert "line%d" % i in text, prog
    # Positive control of the trigger: without a progressToken, none.
    assert out["steps"][2]["progress"] == [] and out["steps"][2]["result"]["isError"] is False


def test_cancel_kills_the_run_and_leaves_no_process():
    tag = new_tag()
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen(['sleep', '%s'])\n"  # returns once sleep is exec'd
            "print('started', flush=True)\n"
            "p.wait()\n" % tag)
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "python", "code": code}, "progress": True,
                  "cancel_on": "^stdout: started", "pids_tag": tag},
                 {"op": "stderr", "pattern": "tools/call run_code cancelled: its run was killed"},
                 {"op": "call", "name": "run_command", "args": {"argv": ["true"]}}])
    step = out["steps"][1]
    assert step["pids_at_cancel"], step  # positive control: the payload was running when cancelled
    assert "error" in step and "result" not in step, step  # the SDK gives up on the request
    assert out["steps"][2]["matched"], out["stderr"]
    # The run ended (the log line is written after it did): nothing of it is left.
    assert pids_with(tag) == []
    assert out["steps"][3]["result"]["isError"] is False  # the session goes on


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_client_gone_mid_run_kills_it_and_the_server_leaves_nothing(how):
    """stdin reaches EOF while a run goes on (the agent exited), or the
    server gets SIGTERM: the run is killed, the server exits 0 and its
    private directory is gone (the no_leaks fixture checks /tmp and
    processes too)."""
    import signal
    from conftest import wait_for
    tag = new_tag()
    p = subprocess.Popen([AJ_BIN, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for m in (init_msg("2025-11-25"), {"jsonrpc": "2.0", "method": "notifications/initialized"},
              call_msg(2, "run_command", {"argv": ["sleep", tag]})):
        p.stdin.write(json.dumps(m).encode() + b"\n")
    p.stdin.flush()
    assert json.loads(p.stdout.readline())["id"] == 1
    head = b""
    while b"stdio: ready" not in head:
        line = p.stderr.readline()
        assert line, head
        head += line
    mine = re.search(rb"records in (\S+) \(private", head).group(1).decode()
    assert os.stat(mine).st_mode & 0o777 == 0o700, mine
    assert wait_for(lambda: pids_with(tag), 30), "the run is going (positive control)"
    if how == "eof":
        p.stdin.close()
    else:
        p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    if how == "sigterm":
        p.stdin.close()
    err = p.stderr.read().decode()
    assert "tools/call run_command cancelled" in err, err
    assert pids_with(tag) == []
    assert not os.path.exists(mine)
    assert p.stdout.read() == b""  # no answer for the cancelled call


def test_cli_config_tenant_and_policy_flags(tmp_path):
    """--config: the config's store keeps the records, --tenant picks the
    tenant (required when there are several), --policy bounds the runs."""
    import hashlib
    d = tmp_path / "srv"
    d.mkdir(mode=0o700)
    cfg = d / "server.json"
    tenants = {n: {"token_sha256": hashlib.sha256(n.encode()).hexdigest()} for n in ("a", "b")}
    cfg.write_text(json.dumps({"store": str(d / "runs.db"), "tenants": tenants, "pool_size": 0}))
    pol = d / "policy.json"
    pol.write_text(json.dumps({"version": 1, "limits": {"timeout": "3s"}}))
    p = subprocess.run([AJ_BIN, "mcp", "--config", str(cfg)], input="", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--tenant" in p.stderr and p.stdout == "", p.stderr
    p = subprocess.run([AJ_BIN, "mcp", "--config", str(cfg), "--tenant", "c"], input="", capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "no such tenant" in p.stderr, p.stderr
    p = subprocess.run([AJ_BIN, "mcp", "--tenant", "a"], input="", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--tenant needs --config" in p.stderr, p.stderr
    p = subprocess.run([AJ_BIN, "mcp", "extra"], input="", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "usage" in p.stderr
    # A bad profile stops it before anything runs (and its temp directory goes: no_leaks).
    p = subprocess.run([AJ_BIN, "mcp", "--profile", "nope"], input="", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown profile 'nope'" in p.stderr and p.stdout == "", p.stderr
    out = stdio([{"op": "connect"},
                 {"op": "call", "name": "run_code", "args": {"language": "sh", "code": "echo hi", "timeout": 5}},
                 {"op": "call", "name": "run_code", "args": {"language": "sh", "code": "echo hi", "timeout": 2}}],
                args=["--config", str(cfg), "--tenant", "b", "--policy", str(pol)])
    assert out["steps"][1]["error"]["code"] == -32602 and "may only tighten" in out["steps"][1]["error"]["message"]
    sc = structured(out["steps"][2]["result"])
    assert sc["stdout"] == "hi\n", sc  # positive control: within the policy's bound
    # The record is in the config's store, as tenant b's.
    import sqlite3
    db = sqlite3.connect(str(d / "runs.db"))
    rows = db.execute("select tenant, status from runs where id = ?", (sc["id"],)).fetchall()
    db.close()
    assert rows == [("b", "ok")], rows


def test_stdio_channel_is_not_reachable_from_the_payload():
    """The payload writes JSON-RPC to its stdout, to every fd of every
    process it can see (/proc/*/fd/*) and reads its stdin: nothing reaches
    the client but the tool result, and a ping sent while it runs is
    answered (nobody else read it)."""
    inject = json.dumps({"jsonrpc": "2.0", "id": "injected", "result": {"pwned": True}})
    code = ("import os, sys, select\n"
            "msg = (%r + '\\n').encode()\n"
            "os.write(1, msg)\n"
            "opened = []\n"
            "seen = []\n"
            "for pid in os.listdir('/proc'):\n"
            "    if not pid.isdigit(): continue\n"
            "    try: fds = os.listdir('/proc/%%s/fd' %% pid)\n"
            "    except OSError: continue\n"
            "    for fd in fds:\n"
            "        p = '/proc/%%s/fd/%%s' %% (pid, fd)\n"
            "        try: seen.append(os.readlink(p))\n"
            "        except OSError: pass\n"
            "        try:\n"
            "            f = os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n"
            "        except OSError: continue\n"
            "        try: os.write(f, msg); opened.append(p + '->' + os.readlink(p))\n"
            "        except OSError: pass\n"
            "        os.close(f)\n"
            "r, _, _ = select.select([0], [], [], 1.0)\n"
            "data = os.read(0, 65536) if r else b'(nothing)'\n"
            "print('stdin:', data)\n"
            "print('wrote:', opened)\n"
            "print('fds:', {fd: os.readlink('/proc/self/fd/' + fd) for fd in ('0', '1', '2')})\n"
            "print('seen:', sorted(set(seen)))\n" % inject)
    out = stdio([{"op": "raw", "messages": [
        init_msg("2025-11-25"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call_msg(2, "run_code", {"language": "python", "code": code}),
        {"jsonrpc": "2.0", "id": 3, "method": "ping"}]}])
    msgs = out["steps"][0]["messages"]
    assert not [m for m in msgs if m.get("id") == "injected" or "pwned" in json.dumps(m.get("result", {}))
                and m.get("id") != 2], msgs
    assert {m.get("id") for m in msgs} == {1, 2, 3}, msgs
    assert by_id(msgs, 3)["result"] == {}
    sc = by_id(msgs, 2)["result"]["structuredContent"]
    # Positive control: what it wrote to its own stdout is in its result.
    assert sc["stdout"].startswith(inject + "\n"), sc
    assert "stdin: b''" in sc["stdout"] or "stdin: b'(nothing)'" in sc["stdout"], sc["stdout"]
    assert "fds: {'0': '/dev/null', '1': 'pipe:" in sc["stdout"], sc["stdout"]
    # The library's own guarantee, beside the CLI's: no process in the
    # sandbox (the payload, its init) holds an fd of the server's JSON-RPC
    # channel, whatever fds it sits on.
    m = re.search(r"the channel is fds (\d+) and (\d+)", out["stderr"])
    fds = out["steps"][0]["serverFds"]
    channel = {fds[m.group(1)], fds[m.group(2)]}
    assert all(c.startswith(("pipe:", "socket:")) for c in channel), (channel, fds)
    seen = ast.literal_eval(re.search(r"^seen: (.*)$", sc["stdout"], re.M).group(1))
    assert any(x.startswith("pipe:") for x in seen), seen  # positive control: it sees its own pipes
    assert not channel & set(seen), (channel, seen)


def test_session_tools_keep_a_workspace_between_runs_and_close_at_disconnect():
    if not IS_ROOT:
        # Sessions need root (a tmpfs workspace per session): the server
        # answers 501, which the tool reports as a failed call.
        out = stdio([{"op": "connect"}, {"op": "call", "name": "create_session", "args": {}}])
        res = out["steps"][1]["result"]
        assert res["isError"] is True and structured(res)["http_status"] == 501, res
        pytest.skip("sessions need root (checked: create_session is isError with 501)")
    out = stdio([
        {"op": "connect"},                                                                       # 0
        {"op": "call", "name": "create_session", "args": {"ttl": 600}},                          # 1
        {"op": "call", "name": "write_file", "args": {"session_id": "$sid:1", "path": "in/data.txt",
                                                     "content": "hello\n"}},                      # 2
        {"op": "call", "name": "write_file", "args": {"session_id": "$sid:1", "path": "bin.dat",
                                                     "content_base64": "AP8B"}},                   # 3
        {"op": "call", "name": "run_code", "args": {"session_id": "$sid:1", "language": "python", "code":
            "print(open('/workspace/in/data.txt').read().upper(), end='')\n"
            "open('/workspace/out.txt', 'w').write('from run 1')\n"}},                            # 4
        {"op": "call", "name": "run_command", "args": {"session_id": "$sid:1",
                                                      "command": "cat /workspace/out.txt"}},       # 5
        {"op": "call", "name": "read_file", "args": {"session_id": "$sid:1", "path": "out.txt"}},  # 6
        {"op": "call", "name": "read_file", "args": {"session_id": "$sid:1", "path": "bin.dat"}},  # 7
        {"op": "call", "name": "list_files", "args": {"session_id": "$sid:1"}},                    # 8
        {"op": "call", "name": "read_file", "args": {"session_id": "$sid:1", "path": "../etc/passwd"}},  # 9
        {"op": "call", "name": "read_file", "args": {"session_id": "$sid:1", "path": "nope.txt"}},  # 10
        {"op": "call", "name": "read_file", "args": {"session_id": "0" * 32, "path": "out.txt"}},  # 11
        {"op": "call", "name": "close_session", "args": {"session_id": "$sid:1"}},                 # 12
        {"op": "call", "name": "list_files", "args": {"session_id": "$sid:1"}},                    # 13
        {"op": "call", "name": "create_session", "args": {}},                                      # 14
        {"op": "call", "name": "run_code", "args": {"language": "sh", "code": "ls /workspace"}},   # 15
        {"op": "close"},                                                                           # 16
        {"op": "stderr", "pattern": "session ended"}])                                             # 17
    st = out["steps"]
    sid = structured(st[1]["result"])["session_id"]
    assert re.fullmatch("[0-9a-f]{32}", sid) and st[1]["result"]["isError"] is False, st[1]
    assert structured(st[2]["result"]) == {"path": "in/data.txt", "bytes": 6}, st[2]
    assert structured(st[3]["result"])["bytes"] == 3
    sc = structured(st[4]["result"])
    assert sc["stdout"] == "HELLO\n" and sc["session"] == sid, sc
    assert structured(st[5]["result"])["stdout"] == "from run 1"  # the workspace stays between runs
    assert structured(st[6]["result"]) == {"path": "out.txt", "bytes": 10, "encoding": "utf-8",
                                           "content": "from run 1"}
    assert structured(st[7]["result"])["encoding"] == "base64" and structured(st[7]["result"])["content"] == "AP8B"
    names = {e["name"]: e["type"] for e in structured(st[8]["result"])["entries"]}
    assert names == {"in": "dir", "bin.dat": "file", "out.txt": "file"}, names
    assert st[9]["error"]["code"] == -32602, st[9]  # a path out of the workspace is a bad argument
    assert st[10]["result"]["isError"] is True and structured(st[10]["result"])["http_status"] == 404
    assert st[11]["error"]["code"] == -32602 and "no session" in st[11]["error"]["message"]
    assert st[12]["result"]["isError"] is False and structured(st[12]["result"])["status"] == "deleted"
    assert st[13]["error"]["code"] == -32602  # closed: no longer this connection's
    sid2 = structured(st[14]["result"])["session_id"]
    assert structured(st[15]["result"])["stdout"] == ""  # a one-shot run has no session's workspace
    # The session the client left open is closed when it goes away.
    assert st[17]["matched"] and "closing session %s the client left open" % sid2 in out["stderr"], out["stderr"]
    assert "session %s: deleted" % sid2 in out["stderr"]


# ---- Streamable HTTP at /mcp ---------------------------------------------------------------------

needs_root = pytest.mark.skipif(not IS_ROOT, reason="the server runs as root (per-run host uids), as test_server.py")


@pytest.fixture
def http_server():
    import tempfile
    from test_server import Server
    tmp = tempfile.mkdtemp(prefix="ajtest-mcp-")
    servers = []

    def start(**kw):
        s = Server(tmp, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.err()
    shutil.rmtree(tmp, ignore_errors=True)


def post(s, body, token=None, headers=None, session=None):
    import http.client
    from test_server import TOKEN_A
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    h = {"Content-Type": "application/json", "Accept": "application/json"}  # tools/call: a JSON answer
    if token is not False:
        h["Authorization"] = "Bearer " + (token or TOKEN_A)
    if session:
        h["Mcp-Session-Id"] = session
    h.update(headers or {})
    c.request(h.pop("X-Method", "POST"), "/mcp", body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, r, (json.loads(data) if data and r.getheader("Content-Type", "").startswith("application/json")
                         else data)


@needs_root
def test_http_sdk_client_runs_tools_and_ends_its_session(http_server):
    from test_server import TOKEN_A
    s = http_server()
    url = "http://127.0.0.1:%d/mcp" % s.port
    out = drive({"transport": "http", "url": url, "headers": {"Authorization": "Bearer " + TOKEN_A}, "steps": [
        {"op": "connect"}, {"op": "list"},
        {"op": "call", "name": "run_code", "args": {"language": "python", "code": "print(6*7)"}},
        {"op": "call", "name": "run_code", "args": {"language": "bash", "code": "echo a; sleep 0.2; echo b; exit 4"},
         "progress": True},
        {"op": "call", "name": "run_code", "args": {"language": "cobol", "code": "x"}},
        {"op": "terminate"}]})
    conn, tools, ok, bad, wrong, term = out["steps"]
    assert conn["protocolVersion"] == VERSIONS[0] and re.fullmatch("[0-9a-f]{32}", conn["sessionId"]), conn
    assert {"run_code", "run_command"} <= {t["name"] for t in tools["tools"]}
    assert ok["result"]["isError"] is False and structured(ok["result"])["stdout"] == "42\n"
    sc = structured(bad["result"])
    assert bad["result"]["isError"] is True and sc["exit_code"] == 4 and sc["stdout"] == "a\nb\n", sc
    msgs = "".join(p.get("message", "") for p in bad["progress"])
    assert "stdout: a" in msgs and "stdout: b" in msgs, bad["progress"]  # streamed as SSE events
    assert wrong["error"]["code"] == -32602
    assert term == {}
    # The session is gone: its id answers 404 (a live one answers: positive control below).
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, session=conn["sessionId"])
    assert status == 404, (status, j)


@needs_root
def test_http_origin_auth_sessions_and_methods(http_server):
    from test_server import TOKEN_B
    s = http_server()
    init = init_msg("2025-06-18")
    status, _, j = post(s, init, headers={"Origin": "http://evil.example"})
    assert status == 403 and j["error"]["code"] == -32600, (status, j)
    status, _, j = post(s, init, headers={"Origin": "http://localhost.evil.example:80"})
    assert status == 403, j
    status, r, j = post(s, init, token=False)
    assert status == 401 and r.getheader("WWW-Authenticate") == "Bearer", (status, j)
    # Positive controls: a loopback Origin, and none.
    status, r, j = post(s, init, headers={"Origin": "http://localhost:6274"})
    assert status == 200 and j["result"]["protocolVersion"] == "2025-06-18", (status, j)
    sid = r.getheader("Mcp-Session-Id")
    assert re.fullmatch("[0-9a-f]{32}", sid), sid
    status, _, j = post(s, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=sid)
    assert status == 202, (status, j)
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, session=sid)
    assert status == 200 and j == {"jsonrpc": "2.0", "id": 2, "result": {}}, j
    # Without a session id: 400; another tenant's: 404, as an unknown one.
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert status == 400, j
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session=sid, token=TOKEN_B)
    assert status == 404, j
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session="0" * 32)
    assert status == 404, j
    # A protocol version header that is not the session's: 400.
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, session=sid,
                        headers={"MCP-Protocol-Version": "2024-11-05"})
    assert status == 400, j
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, session=sid,
                        headers={"MCP-Protocol-Version": "2025-06-18"})
    assert status == 200, j
    status, _, j = post(s, None, session=sid, headers={"X-Method": "GET"})
    assert status == 405, j
    status, _, raw = post(s, None, session=sid, headers={"X-Method": "POST"})
    assert status == 400 and raw["error"]["code"] == -32700, raw
    # discover needs no session and makes none.
    status, r, j = post(s, {"jsonrpc": "2.0", "id": 5, "method": "server/discover"})
    assert status == 200 and j["result"]["supportedVersions"] == ALL_VERSIONS and not r.getheader("Mcp-Session-Id"), j
    status, _, j = post(s, None, session=sid, headers={"X-Method": "DELETE"})
    assert status == 200, j
    status, _, j = post(s, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, session=sid)
    assert status == 404, j


ORIGINS = ["https://app.example.com", "http://localhost:3000", "http://[::1]:*"]


@needs_root
def test_http_origin_allow_list_from_the_config(http_server):
    """mcp.allowed_origins replaces the loopback default: a listed origin
    is served (its default port the same as none), an unlisted one is 403,
    even a loopback one; a request without Origin is served (not a browser)."""
    s = http_server(extra={"mcp": {"allowed_origins": ORIGINS}})
    init = init_msg("2025-11-25")
    for origin in ("https://app.example.com", "https://APP.example.com:443", "http://localhost:3000",
                   "http://[::1]:9", None):
        status, r, j = post(s, init, headers={"Origin": origin} if origin else {})
        assert status == 200 and j["result"]["protocolVersion"] == "2025-11-25", (origin, status, j)
        status, _, _ = post(s, None, session=r.getheader("Mcp-Session-Id"), headers={"X-Method": "DELETE"})
        assert status == 200
    for origin in ("http://app.example.com", "https://app.example.com:8443", "https://app.example.com.evil.example",
                   "http://localhost:3001", "http://127.0.0.1:3000", "https://app.example.com/", "null"):
        status, _, j = post(s, init, headers={"Origin": origin})
        assert status == 403 and "mcp.allowed_origins" in j["error"]["message"], (origin, status, j)
    # Refused before anything else: only the five served ones made a session.
    assert len(re.findall(r"http: session \S+ started", s.err())) == 5, s.err()


def test_http_origin_allow_list_config_errors_are_located(tmp_path):
    from test_server import TOKEN_A, sha
    bad = [({"allowed_origins": ["https://a.example", "*"]}, "mcp.allowed_origins[1]", "DNS rebinding"),
           ({"allowed_origins": ["https://a.example/app"]}, "mcp.allowed_origins[0]", "no path"),
           ({"allowed_origins": ["ftp://a.example"]}, "mcp.allowed_origins[0]", "http://HOST"),
           ({"allowed_origins": ["http://a.example:0"]}, "mcp.allowed_origins[0]", "1 to 65535"),
           ({"allowed_origins": ["https://a.example", "https://A.example:443"]}, "mcp.allowed_origins[1]",
            "same origin as mcp.allowed_origins[0]"),
           ({"allowed_origins": "https://a.example"}, "mcp.allowed_origins", "array"),
           ({"allowed_origin": []}, "mcp.allowed_origin", "unknown key"),
           ([], "mcp", "must be an object")]
    cfg = tmp_path / "server.json"
    for mcp, key, why in bad:
        text = json.dumps({"listen": "127.0.0.1:0", "store": str(tmp_path / "r.db"),
                           "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}, "mcp": mcp}, indent=1)
        cfg.write_text(text)
        p = subprocess.run([AJ_BIN, "serve", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and re.search(r"%s:\d+:\d+: %s: " % (re.escape(str(cfg)), re.escape(key)),
                                               p.stderr) and why in p.stderr, (mcp, p.stderr)
    assert not (tmp_path / "r.db").exists()  # nothing was started


def modern_post(s, body, token=None, version=MODERN, method=None, name=None, headers=None, accept=None):
    """POST /mcp as a 2026-07-28 client does: the mirrored headers (None: left out)."""
    h = {}
    if version is not None:
        h["MCP-Protocol-Version"] = version
    m = method if method is not None else body.get("method")
    if m is not False:
        h["Mcp-Method"] = m
    if name is not None:
        h["Mcp-Name"] = name
    if accept:
        h["Accept"] = accept
    h.update(headers or {})
    return post(s, body, token=token, headers=h)


@needs_root
def test_http_stateless_requests_headers_and_errors(http_server):
    """POST /mcp of the stateless revision: served with no MCP session
    (none made, one sent is ignored); the headers must say what the body
    does (400 -32020), a missing _meta field is 400 -32602, an unserved
    revision 400 -32022, a method it does not have 404 -32601."""
    s = http_server()
    lst = modern_msg(1, "tools/list")
    status, r, j = modern_post(s, lst)
    assert status == 200 and j["result"]["resultType"] == "complete", (status, j)
    assert j["result"]["_meta"][SERVER_INFO]["name"] == "agentjail" and not r.getheader("Mcp-Session-Id")
    status, _, j = modern_post(s, lst, headers={"Mcp-Session-Id": "0" * 32})
    assert status == 200 and "tools" in j["result"], j  # ignored, not a 404
    call = modern_msg(2, "tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "echo hi"}})
    status, r, j = modern_post(s, call, name="run_code")
    assert status == 200 and structured(j["result"])["stdout"] == "hi\n" and j["result"]["resultType"] == "complete"
    # Mcp-Name in the Base64 sentinel form is the same name.
    status, _, j = modern_post(s, call, name="=?base64?cnVuX2NvZGU=?=")
    assert status == 200 and j["result"]["isError"] is False, j
    # An SSE answer carries no session either.
    status, r, text = modern_post(s, call, name="run_code", accept="application/json, text/event-stream")
    assert status == 200 and r.getheader("Content-Type") == "text/event-stream" and not r.getheader("Mcp-Session-Id")
    final = [json.loads(l[6:]) for l in text.splitlines() if l.startswith("data: ")][-1]
    assert final["id"] == 2 and structured(final["result"])["stdout"] == "hi\n", text
    mismatches = [dict(body=lst, version=None), dict(body=lst, version="2025-11-25"),
                  dict(body=lst, method=False), dict(body=lst, method="tools/call"),
                  dict(body=call, name=None), dict(body=call, name="run_command"),
                  dict(body=call, name="=?base64?cnVuX2NvbW1hbmQ=?="),
                  dict(body=lst, name="run_code")]
    for kw in mismatches:
        status, _, j = modern_post(s, **kw)
        assert status == 400 and j["error"]["code"] == -32020 and "Header mismatch" in j["error"]["message"], (kw, j)
    status, _, j = modern_post(s, modern_msg(3, "tools/list", caps=False))
    assert status == 400 and j["error"]["code"] == -32602 and j["id"] == 3, j
    status, _, j = modern_post(s, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"})  # the header, no _meta
    assert status == 400 and j["error"]["code"] == -32602, j
    status, _, j = modern_post(s, modern_msg(4, "tools/list", version=20260728))  # not a string
    assert status == 400 and j["error"]["code"] == -32602, j
    status, _, j = modern_post(s, modern_msg(5, "tools/list", version="2099-01-01"), version="2099-01-01")
    assert status == 400 and j["error"]["code"] == -32022, j
    assert j["error"]["data"] == {"supported": ALL_VERSIONS, "requested": "2099-01-01"}
    status, _, j = modern_post(s, modern_msg(6, "resources/list"))
    assert status == 404 and j["error"]["code"] == -32601, j
    status, _, j = modern_post(s, modern_msg(7, "ping"))
    assert status == 404 and j["error"]["code"] == -32601, j
    status, _, _ = modern_post(s, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    assert status == 202
    status, _, j = modern_post(s, lst, token=False)
    assert status == 401, j
    # The legacy era beside it: initialize still makes an MCP session.
    assert re.fullmatch("[0-9a-f]{32}", http_session(s))


@needs_root
def test_http_stateless_session_handles_are_the_tenants_and_close_at_the_end(http_server):
    """A sandbox session made by a stateless request is a handle the
    tenant's later stateless requests use; another tenant's, or an MCP
    session of the handshake era, cannot. Left open, it is closed when
    the server stops."""
    from test_server import TOKEN_B
    s = http_server()

    def call(id, name, args, token=None):
        status, _, j = modern_post(s, modern_msg(id, "tools/call", {"name": name, "arguments": args}), token=token,
                                   name=name)
        assert status == 200, (status, j)
        return j

    sid = structured(call(1, "create_session", {})["result"])["session_id"]
    j = call(2, "write_file", {"session_id": sid, "path": "a.txt", "content": "kept"})
    assert j["result"]["isError"] is False, j  # positive control: another request uses it
    j = call(3, "run_command", {"session_id": sid, "command": "cat /workspace/a.txt"})
    assert structured(j["result"])["stdout"] == "kept"
    j = call(4, "read_file", {"session_id": sid, "path": "a.txt"}, token=TOKEN_B)
    assert j["error"]["code"] == -32602, j
    legacy = http_session(s)
    j = http_call(s, legacy, "read_file", {"session_id": sid, "path": "a.txt"})
    assert j["error"]["code"] == -32602, j
    sid2 = structured(call(5, "create_session", {})["result"])["session_id"]
    j = call(6, "close_session", {"session_id": sid2})
    assert structured(j["result"])["status"] == "deleted"
    j = call(7, "list_files", {"session_id": sid2})
    assert j["error"]["code"] == -32602, j  # closed: no longer a handle
    status, _, rec = s.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and rec["status"] == "live", rec
    assert s.stop() == 0
    assert "closing session %s the client left open" % sid in s.err(), s.err()
    import sqlite3
    db = sqlite3.connect(s.store)
    rows = dict(db.execute("select id, status from sessions").fetchall())
    db.close()
    assert rows[sid] == "lost" and rows[sid2] == "deleted", rows  # nothing outlives the server


@needs_root
def test_http_stateless_handles_of_ended_sessions_are_pruned(http_server):
    """The tenant's stateless set has no connection end to close at: a
    handle whose session ended elsewhere (here a REST DELETE) stays until
    the set holds 64, then it is forgotten (-32602) instead of answering
    the ended session's 410 forever; a live one is kept."""
    s = http_server()

    def call(id, name, args):
        status, _, j = modern_post(s, modern_msg(id, "tools/call", {"name": name, "arguments": args}), name=name)
        assert status == 200, (status, j)
        return j

    keep = structured(call(1, "create_session", {})["result"])["session_id"]
    first = None
    for i in range(64):
        sid = structured(call(10 + i, "create_session", {})["result"])["session_id"]
        first = first or sid
        status, _, _ = s.request("DELETE", "/v1/sessions/" + sid)
        assert status == 200
        if i == 0:
            # Still a handle: the ended session answers (410), as a result.
            j = call(2, "list_files", {"session_id": first})
            assert j["result"]["isError"] is True and structured(j["result"])["http_status"] == 410, j
    j = call(3, "list_files", {"session_id": first})
    assert j["error"]["code"] == -32602, j  # pruned when the 65th was made
    j = call(4, "write_file", {"session_id": keep, "path": "k", "content": "1"})
    assert j["result"]["isError"] is False, j  # the live one was kept

@needs_root
def test_http_stateless_sdk_v2_client(http_server):
    """The SDK's v2 client pinned to 2026-07-28 over Streamable HTTP:
    no MCP session, tools with progress on an SSE stream, and a sandbox
    session's handle used across requests."""
    from test_server import TOKEN_A
    s = http_server()
    url = "http://127.0.0.1:%d/mcp" % s.port
    out = drive({"transport": "http", "url": url, "headers": {"Authorization": "Bearer " + TOKEN_A}, "sdk": "v2",
                 "negotiation": {"pin": MODERN}, "steps": [
                     {"op": "connect"}, {"op": "list"},
                     {"op": "call", "name": "run_code", "progress": True,
                      "args": {"language": "bash", "code": "echo a; sleep 0.2; echo b; exit 4"}},
                     {"op": "call", "name": "create_session", "args": {}},
                     {"op": "call", "name": "write_file", "args": {"session_id": "$sid:3", "path": "x", "content": "1"}},
                     {"op": "call", "name": "run_command", "args": {"session_id": "$sid:3", "command": "cat x"}},
                     {"op": "call", "name": "close_session", "args": {"session_id": "$sid:3"}}]})
    conn, tools, bad, made, wrote, ran, closed = out["steps"]
    assert conn["protocolVersion"] == MODERN and conn["sessionId"] is None, conn
    assert {"run_code", "create_session"} <= {t["name"] for t in tools["tools"]}
    sc = structured(bad["result"])
    assert bad["result"]["isError"] is True and sc["exit_code"] == 4 and sc["stdout"] == "a\nb\n", sc
    assert "stdout: b" in "".join(p.get("message", "") for p in bad["progress"]), bad["progress"]
    assert wrote["result"]["isError"] is False and structured(ran["result"])["stdout"] == "1", (wrote, ran)
    assert structured(closed["result"])["status"] == "deleted"
    assert "http: session" not in s.err()  # no MCP session was made


def http_session(s, token=None):
    status, r, j = post(s, init_msg("2025-11-25"), token=token)
    assert status == 200, j
    return r.getheader("Mcp-Session-Id")


def http_call(s, sid, name, args, token=None):
    status, _, j = post(s, call_msg(7, name, args), session=sid, token=token)
    assert status == 200, (status, j)
    return j


@needs_root
def test_http_session_handles_belong_to_their_connection_and_close_with_it(http_server):
    from test_server import TOKEN_B
    s = http_server()
    a, b = http_session(s), http_session(s)
    j = http_call(s, a, "create_session", {})
    sid = j["result"]["structuredContent"]["session_id"]
    # Positive control: A uses it.
    j = http_call(s, a, "write_file", {"session_id": sid, "path": "x.txt", "content": "x"})
    assert j["result"]["isError"] is False, j
    # B, the same tenant's other MCP session, does not know it; nor does another tenant.
    j = http_call(s, b, "read_file", {"session_id": sid, "path": "x.txt"})
    assert j["error"]["code"] == -32602, j
    c = http_session(s, token=TOKEN_B)
    j = http_call(s, c, "read_file", {"session_id": sid, "path": "x.txt"}, token=TOKEN_B)
    assert j["error"]["code"] == -32602, j
    status, _, rec = s.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and rec["status"] == "live", rec
    # A ends (DELETE /mcp): the session it left open is closed.
    status, _, _ = post(s, None, session=a, headers={"X-Method": "DELETE"})
    assert status == 200
    status, _, rec = s.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and rec["status"] == "deleted", rec


@needs_root
@pytest.mark.parametrize("era", ["handshake", "stateless"])
def test_http_closing_the_stream_kills_the_run(http_server, era):
    import http.client
    from conftest import wait_for
    from test_server import TOKEN_A
    s = http_server()
    tag = new_tag()
    code = ("import subprocess\n"
            "p = subprocess.Popen(['sleep', '%s'])\n"
            "print('started', flush=True)\n"
            "p.wait()\n" % tag)
    body = call_msg(2, "run_code", {"language": "python", "code": code}, "t")
    headers = {"Authorization": "Bearer " + TOKEN_A, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if era == "handshake":
        status, r, j = post(s, init_msg("2025-11-25"))
        sid = r.getheader("Mcp-Session-Id")
        headers["Mcp-Session-Id"] = sid
    else:
        body["params"]["_meta"].update(meta())
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "run_code"})
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    c.request("POST", "/mcp", body=json.dumps(body), headers=headers)
    resp = c.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    seen = b""
    while b"stdout: started" not in seen:
        line = resp.fp.readline()
        assert line, seen
        seen += line
    # Positive control: the payload runs (its `sleep` is exec'd before it
    # prints; found within a few seconds whatever /proc's timing).
    assert wait_for(lambda: pids_with(tag), 5), ("the payload runs", seen, debug_tag(tag))
    c.sock.shutdown(2)
    c.close()
    assert wait_for(lambda: "tools/call run_code cancelled: its run was killed" in s.err(), 30), s.err()
    assert pids_with(tag) == []
    # The server serves on (the MCP session too).
    if era == "handshake":
        status, _, j = post(s, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session=sid)
    else:
        status, _, j = modern_post(s, modern_msg(3, "tools/list"))
    assert status == 200 and "error" not in j, j


@needs_root
def test_http_conformance_suite_scenarios_that_apply(http_server):
    """@modelcontextprotocol/conformance's server scenarios that do not need
    the suite's own test tools, resources or prompts (those fail by design:
    this server has its own tools and no resources, prompts, logging or
    completions). It sends no token: a loopback proxy adds it."""
    from test_server import TOKEN_A
    conf = os.path.join(MCP_DIR, "node_modules", ".bin", "conformance")
    if not os.path.exists(conf):
        pytest.skip("@modelcontextprotocol/conformance not installed (npm ci in tests/mcp)")
    s = http_server()
    proxy = subprocess.Popen([NODE, os.path.join(MCP_DIR, "authproxy.mjs"), "http://127.0.0.1:%d" % s.port, TOKEN_A],
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(proxy.stdout.readline().split()[1])
        for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams"):
            p = subprocess.run([conf, "server", "--url", "http://127.0.0.1:%d/mcp" % port, "--scenario", scenario],
                               cwd=s.tmp, capture_output=True, text=True, timeout=120)
            why = (scenario, p.stdout[-3000:], p.stderr[-2000:])
            # The suite's summary line and its checks.json must agree, and a
            # scenario that ran no check is a failure (it would otherwise
            # read "0 failed").
            m = re.search(r"^Passed: (\d+)/(\d+), (\d+) failed", p.stdout, re.M)
            assert m and p.returncode == 0, why
            passed, ran, failed = map(int, m.groups())
            assert ran > 0 and passed == ran and failed == 0, why
            saved = re.search(r"^Results saved to (\S+)", p.stdout, re.M)
            assert saved, why
            with open(os.path.join(s.tmp, saved.group(1), "checks.json")) as f:
                checks = json.load(f)
            # Each check passed (INFO lines are notes, not checks: the suite
            # does not count them), as many as the summary counted.
            statuses = [c["status"] for c in checks]
            assert statuses.count("SUCCESS") == ran and set(statuses) <= {"SUCCESS", "INFO"}, (scenario, checks)
    finally:
        proxy.kill()
        proxy.wait()


@needs_root
def test_http_mcp_sessions_are_capped_per_tenant(http_server):
    from test_server import TOKEN_B
    s = http_server()
    sids = [http_session(s) for _ in range(64)]
    status, _, j = post(s, init_msg("2025-11-25"))
    assert status == 429 and "64 per tenant" in j["error"]["message"], (status, j)
    # Another tenant is not held back by it, and an ended session frees a place.
    assert http_session(s, token=TOKEN_B)
    status, _, _ = post(s, None, session=sids[0], headers={"X-Method": "DELETE"})
    assert status == 200
    assert http_session(s)
