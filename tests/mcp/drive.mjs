// Drives agentjail's MCP server with the official MCP TypeScript SDK client
// and prints what it saw as one JSON document on stdout, for
// tests/integration/test_mcp.py to assert on.
//
// usage: node drive.mjs SPEC_JSON
//   SPEC: {"transport": "stdio", "command": [...], "env": {...}}
//      or {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "headers": {...}}
//   and optionally "sdk": "v2" with "negotiation": "auto" | "legacy" | {"pin": "2026-07-28"}:
//   the SDK's v2 client (@modelcontextprotocol/client, which speaks the
//   stateless 2026-07-28 revision) instead of v1 (@modelcontextprotocol/sdk)
//   plus "steps": a list of
//     {"op": "connect"}                       Client.connect (v1: initialize; v2: as negotiation says)
//     {"op": "raw", "messages": [...]}        a fresh transport, no Client: send these,
//                                             collect what comes back until every request is answered
//     {"op": "list"}                          tools/list
//     {"op": "call", "name": N, "args": {...}, "progress": true,
//      "cancel_on": "regex", "pids_tag": T}   tools/call; with cancel_on, abort it at the first progress
//                                             notification whose message matches (pids_at_cancel: the
//                                             host pids of `sleep T` then)
//                                             an argument "$sid:N" is the session_id of step N's result
//     {"op": "stderr", "pattern": "regex"}    wait until the server's stderr matches (stdio)
//     {"op": "terminate"}                     HTTP: DELETE the MCP session
//     {"op": "close"}                         close the client (stdio: ends the server's stdin)
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

const spec = JSON.parse(process.argv[2]);
const v2 = spec.sdk === "v2";
const { Client, StreamableHTTPClientTransport } = v2
  ? await import("@modelcontextprotocol/client")
  : {
      ...(await import("@modelcontextprotocol/sdk/client/index.js")),
      ...(await import("@modelcontextprotocol/sdk/client/streamableHttp.js")),
    };
const { StdioClientTransport } = v2
  ? await import("@modelcontextprotocol/client/stdio")
  : await import("@modelcontextprotocol/sdk/client/stdio.js");
let stderrText = "";
const stderrWaiters = [];

function makeTransport() {
  if (spec.transport === "stdio") {
    const t = new StdioClientTransport({
      command: spec.command[0],
      args: spec.command.slice(1),
      env: spec.env ?? {},
      stderr: "pipe",
    });
    t.stderr.on("data", (d) => {
      stderrText += d.toString();
      for (const w of stderrWaiters.splice(0)) w();
    });
    return t;
  }
  return new StreamableHTTPClientTransport(new URL(spec.url), {
    requestInit: { headers: spec.headers ?? {} },
  });
}

// Host pids of `sleep TAG` processes (as tests/conftest.py pids_with).
function pidsWith(tag) {
  const found = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(pid)) continue;
    let argv;
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`).toString().split("\0");
    } catch {
      continue;
    }
    if (argv[0].split("/").pop() === "sleep" && argv.includes(tag)) found.push(Number(pid));
  }
  return found;
}

function errorOf(e) {
  return { error: { code: e.code ?? null, message: String(e.message ?? e), data: e.data ?? null } };
}

async function waitStderr(pattern, ms) {
  const re = new RegExp(pattern);
  const deadline = Date.now() + ms;
  while (!re.test(stderrText)) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => {
      stderrWaiters.push(resolve);
      setTimeout(resolve, 500);
    });
  }
  return true;
}

async function raw(messages) {
  const t = makeTransport();
  const got = [];
  const want = new Set(messages.filter((m) => m.id !== undefined).map((m) => m.id));
  let done;
  const finished = new Promise((resolve) => (done = resolve));
  t.onmessage = (m) => {
    got.push(m);
    if (m.id !== undefined && want.delete(m.id) && want.size === 0) done();
  };
  t.onerror = (e) => got.push({ transport_error: String(e) });
  await t.start();
  for (const m of messages) {
    await t.send(m);
  }
  if (want.size) await Promise.race([finished, new Promise((r) => setTimeout(r, 30000))]);
  const sessionId = t.sessionId ?? null;
  // stdio: the server's fds now (what its channel is), while it is alive.
  const serverFds = {};
  if (t.pid) {
    for (const fd of readdirSync(`/proc/${t.pid}/fd`)) {
      try {
        serverFds[fd] = readlinkSync(`/proc/${t.pid}/fd/${fd}`);
      } catch {}
    }
  }
  await t.close();
  return { messages: got, sessionId, serverFds };
}

const out = { steps: [] };
let client = null;
let transport = null;

try {
  for (const step of spec.steps) {
    let r;
    switch (step.op) {
      case "connect": {
        transport = makeTransport();
        client = new Client(
          { name: "agentjail-test", version: "1.0.0" },
          v2 && spec.negotiation ? { versionNegotiation: { mode: spec.negotiation } } : undefined,
        );
        try {
          await client.connect(transport);
          r = {
            server: client.getServerVersion(),
            capabilities: client.getServerCapabilities(),
            instructions: client.getInstructions() ?? null,
            protocolVersion: (v2 ? client.getNegotiatedProtocolVersion() : transport.protocolVersion) ?? null,
            sessionId: transport.sessionId ?? null,
          };
        } catch (e) {
          r = errorOf(e);
        }
        break;
      }
      case "raw":
        r = await raw(step.messages);
        break;
      case "list":
        r = await client.listTools();
        break;
      case "call": {
        const progress = [];
        let pidsAtCancel = null;
        let cancelling = false;
        const ac = new AbortController();
        const opts = { signal: ac.signal, timeout: step.timeout_ms ?? 120000 };
        if (step.progress) {
          opts.onprogress = (p) => {
            progress.push(p);
            if (step.cancel_on && !cancelling && new RegExp(step.cancel_on).test(p.message ?? "")) {
              cancelling = true;
              (async () => {
                // The payload's process, seen before the cancel (a few tries: /proc's timing).
                for (let i = 0; step.pids_tag && i < 50; i++) {
                  pidsAtCancel = pidsWith(step.pids_tag);
                  if (pidsAtCancel.length) break;
                  await new Promise((res) => setTimeout(res, 100));
                }
                ac.abort("the test cancels it");
              })();
            }
          };
        }
        const args = {};
        for (const [k, v] of Object.entries(step.args ?? {})) {
          const m = typeof v === "string" && /^\$sid:([0-9]+)$/.exec(v);
          args[k] = m ? out.steps[Number(m[1])].result.structuredContent.session_id : v;
        }
        try {
          r = {
            result: v2
              ? await client.callTool({ name: step.name, arguments: args }, opts)
              : await client.callTool({ name: step.name, arguments: args }, undefined, opts),
          };
        } catch (e) {
          r = errorOf(e);
        }
        r.progress = progress;
        if (step.pids_tag) r.pids_at_cancel = pidsAtCancel;
        break;
      }
      case "stderr":
        r = { matched: await waitStderr(step.pattern, step.timeout_ms ?? 30000) };
        break;
      case "terminate":
        try {
          await transport.terminateSession();
          r = {};
        } catch (e) {
          r = errorOf(e);
        }
        break;
      case "close":
        if (client) await client.close();
        client = null;
        r = {};
        break;
      default:
        throw new Error("unknown op " + step.op);
    }
    out.steps.push(r);
  }
} catch (e) {
  out.fatal = String(e.stack ?? e);
}
if (client) await client.close();
out.stderr = stderrText;
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
