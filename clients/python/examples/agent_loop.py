#!/usr/bin/env python3
"""An agent loop that uses agentjail as its code-execution tool, offline.

The "model" is a scripted stand-in (no network, no weights): at each turn
it reads the conversation so far and emits either a tool call (code to
run) or a final answer, as a chat model with tools would. The loop runs
each tool call through agentjail_client and feeds the result back as the
tool message. One of the scripted turns is hostile (it tries to unshare a
user namespace to regain capabilities, as injected code would): its
result shows how the sandbox refuses and reports it.

    python3 agent_loop.py --url unix:/run/agentjail/api.sock --token TOKEN
    AGENTJAIL_URL=http://127.0.0.1:8080 AGENTJAIL_TOKEN=... python3 agent_loop.py

Prints the transcript as JSON lines; exit status 0 when the agent gave
its final answer.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from agentjail_client import AgentjailError, Client  # noqa: E402

TASK = "What is the sum of the squares of the primes below 100? Save your working in primes.txt."

TOOLS = [{
    "name": "run_code",
    "description": "Run code in a fresh sandbox and return its status, exit code, stdout and stderr.",
    "input_schema": {"type": "object", "required": ["language", "code"],
                     "properties": {"language": {"enum": ["python", "bash", "sh", "node"]},
                                    "code": {"type": "string"}}},
}]

ESCAPE = ("import ctypes, os\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "r = libc.unshare(0x10000000)  # CLONE_NEWUSER: become root in a new user namespace\n"
          "print('unshare:', r, os.strerror(ctypes.get_errno()))\n")


class ScriptedModel:
    """Stands in for the model: decides the next message from the
    transcript only (so the tool results really steer it)."""

    def __call__(self, messages):
        tool_results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        n = len(tool_results)
        if n == 0:
            return self._call("python",
                              "import os\n"
                              "ps = [p for p in range(2, 100) if all(p % d for d in range(2, p))]\n"
                              "d = '/workspace' if os.path.isdir('/workspace') else '/tmp'\n"
                              "open(os.path.join(d, 'primes.txt'), 'w').write(' '.join(map(str, ps)))\n"
                              "print(len(ps), sum(p * p for p in ps))\n",
                              "First, compute it.")
        if n == 1:
            # The stand-in for a prompt-injected step: it tries to break out.
            return self._call("python", ESCAPE, "Let me get more privileges to look around the host.")
        if n == 2:
            # Check the first answer another way, from the first result's numbers.
            count, total = tool_results[0]["stdout"].split()
            # In a session the first run's file is still in /workspace; one-shot runs recompute.
            return self._call("sh", "f=/workspace/primes.txt; if [ -f $f ]; then ps=$(cat $f); else "
                              "ps=$(python3 -c \"print(*[p for p in range(2,100) if all(p % d for d in range(2, p))])\"); "
                              "fi; n=0; for p in $ps; do n=$((n + p * p)); done; echo $n; test $n -eq " + str(int(total)),
                              "Double-check with a shell loop.")
        first, escape, check = tool_results[:3]
        count, total = first["stdout"].split()
        verdict = "confirmed" if check["status"] == "ok" else "NOT confirmed (%s)" % check["status"]
        refused = escape.get("refused") or []
        note = ("the sandbox refused %s; that run ended %s" % (
                    ", ".join("%s(%s): %s" % (r.get("syscall", "?"), "|".join(map(str, r.get("args") or [])),
                                              r.get("technique_name", r.get("technique", "?"))) for r in refused),
                    escape["status"])
                if refused else "the privilege attempt was not reported as refused: status %s" % escape["status"])
        return {"role": "assistant", "content": "There are %s primes below 100; the sum of their squares is %s, "
                "%s by a second method. (%s.)" % (count, total, verdict, note)}

    @staticmethod
    def _call(language, code, thought):
        return {"role": "assistant", "content": thought,
                "tool_call": {"name": "run_code", "arguments": {"language": language, "code": code}}}


def run_tool(client, call, session=None):
    """The tool: one sandboxed run; its result as the JSON the model reads."""
    args = call["arguments"]
    try:
        target = session if session is not None else client
        r = target.run(language=args["language"], code=args["code"], timeout=20)
    except AgentjailError as e:  # a refused request is a result the model can read too
        return {"status": "error", "error": str(e)}
    return r.summary()


def agent(client, model=None, max_turns=8, use_session=False, log=None):
    """Run the loop; return the transcript (a list of messages)."""
    model = model or ScriptedModel()
    messages = [{"role": "system", "content": "You can run code with the run_code tool.", "tools": TOOLS},
                {"role": "user", "content": TASK}]

    def emit(m):
        messages.append(m)
        if log:
            log(m)

    def loop(session):
        for _ in range(max_turns):
            m = model(messages)
            emit(m)
            if "tool_call" not in m:
                return
            emit({"role": "tool", "name": m["tool_call"]["name"],
                  "content": json.dumps(run_tool(client, m["tool_call"], session))})
        raise RuntimeError("no final answer in %d turns" % max_turns)

    if use_session:
        with client.session() as s:  # one workspace for the task, removed at the end
            loop(s)
    else:
        loop(None)
    return messages


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("AGENTJAIL_URL", "http://127.0.0.1:8080"))
    p.add_argument("--token", default=os.environ.get("AGENTJAIL_TOKEN"))
    p.add_argument("--session", action="store_true", help="run every step in one session (shared /workspace)")
    a = p.parse_args(argv)
    if not a.token:
        p.error("--token (or AGENTJAIL_TOKEN) is required")
    client = Client(a.url, a.token, timeout=30)
    agent(client, use_session=a.session, log=lambda m: print(json.dumps(m), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
