"""The client: one-shot runs, asynchronous runs with streamed output, and
sessions with a workspace and files."""
import base64
import json
import os
import socket
import time
import urllib.parse

from ._transport import Transport, decode_json, error_from
from .errors import Gone, ProtocolError, RateLimited, RequestTimeout, ServerError, TransportError, WaitTimeout

# How long a streamed read may see nothing: the server sends a keep-alive
# comment every 15 s on a quiet stream.
_STREAM_IDLE = 40.0
_FINAL_LIVE = ("queued", "running")


def _b64(data, what):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("%s: want bytes or str, got %s" % (what, type(data).__name__))
    return base64.b64encode(bytes(data)).decode("ascii")


def _quote_path(path):
    # As given (relative to /workspace, or starting with /workspace/): the
    # server checks it; only made safe for the URL here.
    if not isinstance(path, str) or not path:
        raise ValueError("path: want a non-empty string")
    return urllib.parse.quote(path, safe="/")


class Run:
    """A run's record as the server answers it (`POST /v1/runs`, `GET`, the
    SSE `exit`).

    Attributes: `id`, `status` (`ok`, `nonzero_exit`, `timeout`,
    `escape_attempt`, ... or `queued`/`running` while live), `exit_code`,
    `stdout`, `stderr` (text), `stdout_bytes`, `stderr_bytes`,
    `stdout_truncated`, `stderr_truncated`, `events` (the audit events:
    escape attempts with their system call, canaries, limits),
    `events_truncated`, `result` (the library's result JSON, a dict, or
    None), `outputs` (the files the request named in `outputs`, decoded:
    {path: bytes}), `output_errors` ({path: the server's reason} for those
    it could not return), `outputs_truncated` (paths cut at the server's
    size cap), `session` (its session's id, or None), `raw` (the whole
    JSON record)."""

    def __init__(self, record):
        if not isinstance(record, dict):
            raise ProtocolError("a run record must be a JSON object, got %r" % (record,))
        self.raw = record
        self.id = record.get("id")
        self.status = record.get("status")
        self.exit_code = record.get("exit_code")
        self.stdout = record.get("stdout", "")
        self.stderr = record.get("stderr", "")
        self.stdout_bytes = record.get("stdout_bytes")
        self.stderr_bytes = record.get("stderr_bytes")
        self.stdout_truncated = bool(record.get("stdout_truncated", False))
        self.stderr_truncated = bool(record.get("stderr_truncated", False))
        self.events = record.get("events") or []
        self.events_truncated = bool(record.get("events_truncated", False))
        self.result = record.get("result")
        self.outputs, self.output_errors, self.outputs_truncated = self._decode_outputs(record)
        self.session = record.get("session")

    @staticmethod
    def _decode_outputs(record):
        # "outputs": {path: {"base64", "bytes", "truncated"} | {"error"}}
        content, errors, truncated = {}, {}, []
        got = record.get("outputs")
        if not isinstance(got, dict):
            return content, errors, truncated
        for path, v in got.items():
            if not isinstance(v, dict):
                continue
            if isinstance(v.get("error"), str):
                errors[path] = v["error"]
            elif isinstance(v.get("base64"), str):
                try:
                    content[path] = base64.b64decode(v["base64"], validate=True)
                except ValueError as e:
                    raise ProtocolError("outputs[%r]: bad base64: %s" % (path, e)) from e
                if v.get("truncated"):
                    truncated.append(path)
        return content, errors, truncated

    @property
    def live(self):
        """True while the run is queued or running (a record from GET)."""
        return self.status in _FINAL_LIVE

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def signal(self):
        return (self.result or {}).get("signal")

    @property
    def escape_attempts(self):
        """The run's escape-attempt events (what the sandbox refused and logged)."""
        return [e for e in self.events if isinstance(e, dict) and e.get("type") == "escape_attempt"]

    @property
    def escape_attempted(self):
        return bool((self.result or {}).get("escape_attempted")) or bool(self.escape_attempts)

    def summary(self):
        """A short dict of the record for feeding back to a model."""
        d = {"status": self.status, "exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr}
        if self.stdout_truncated or self.stderr_truncated:
            d["truncated"] = {"stdout": self.stdout_truncated, "stderr": self.stderr_truncated}
        if self.escape_attempts:
            d["refused"] = [{k: e[k] for k in ("syscall", "args", "action", "technique", "technique_name",
                                               "severity") if k in e} for e in self.escape_attempts]
        if self.outputs or self.output_errors:
            d["outputs"] = {p: b.decode("utf-8", "replace") for p, b in self.outputs.items()}
            d["outputs"].update({p: {"error": e} for p, e in self.output_errors.items()})
        return d

    def __repr__(self):
        return "Run(id=%r, status=%r, exit_code=%r, stdout=%r, stderr=%r)" % (
            self.id, self.status, self.exit_code, self.stdout[:200], self.stderr[:200])


def _sse_events(resp):
    """(event type, data text) pairs of a text/event-stream response."""
    typ, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                yield typ or "message", "\n".join(data)
            typ, data = None, []
        elif line.startswith(":"):
            continue  # a comment: the server's keep-alive
        else:
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "event":
                typ = value
            elif field == "data":
                data.append(value)


class RunHandle:
    """A run started with `wait=False` (`Client.start`, `Session.start`)."""

    def __init__(self, client, run_id):
        self._client = client
        self.id = run_id

    def get(self):
        """The record now (`status` `queued`/`running` while it is live)."""
        return self._client.get_run(self.id)

    def kill(self):
        """Kill the run (every process of its sandbox) and return its record."""
        return self._client.kill_run(self.id)

    def wait(self, timeout=None):
        """Wait for the run's end and return its Run. `timeout` (seconds,
        None: as long as it takes) bounds the waiting only: on expiry
        WaitTimeout is raised and the run goes on."""
        return self.stream(timeout=timeout)

    def stream(self, on_stdout=None, on_stderr=None, on_event=None, on_start=None, timeout=None):
        """Follow the run's Server-Sent Events: `on_stdout(text)` and
        `on_stderr(text)` for each chunk as the run writes it, `on_event(dict)`
        for each audit event (escape attempts, canaries, limits),
        `on_start(dict)`. Returns the Run from the `exit` event. A run that
        has ended already is replayed (one chunk per stream)."""
        c = self._client
        deadline = None if timeout is None else time.monotonic() + timeout
        conn, resp = c._open("GET", "/v1/runs/%s/stream" % urllib.parse.quote(self.id, safe=""),
                             read_timeout=self._idle(deadline))
        try:
            ctype = resp.getheader("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise ProtocolError("stream %s: answered %r, not text/event-stream" % (self.id, ctype))
            events = _sse_events(resp)
            while True:
                if conn.sock is not None:
                    conn.sock.settimeout(self._idle(deadline))
                try:
                    typ, data = next(events)
                except StopIteration:
                    raise TransportError("stream %s: the server closed it before the exit event" % self.id)
                except socket.timeout as e:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise WaitTimeout("run %s: still running after %.1f s" % (self.id, timeout)) from e
                    raise RequestTimeout("stream %s: nothing for %.0f s (not even a keep-alive)"
                                         % (self.id, _STREAM_IDLE)) from e
                except OSError as e:
                    raise TransportError("stream %s: %s" % (self.id, e)) from e
                try:
                    obj = json.loads(data)
                except ValueError as e:
                    raise ProtocolError("stream %s: a %s event that is not JSON: %r" % (self.id, typ, data)) from e
                if typ == "stdout" and on_stdout:
                    on_stdout(obj.get("data", ""))
                elif typ == "stderr" and on_stderr:
                    on_stderr(obj.get("data", ""))
                elif typ == "event" and on_event:
                    on_event(obj)
                elif typ == "start" and on_start:
                    on_start(obj)
                elif typ == "exit":
                    return Run(obj)
        finally:
            conn.close()

    @staticmethod
    def _idle(deadline):
        if deadline is None:
            return _STREAM_IDLE
        return max(0.001, min(_STREAM_IDLE, deadline - time.monotonic()))

    def __repr__(self):
        return "RunHandle(%r)" % self.id


class Session:
    """A session: a workspace at `/workspace` that persists from one run to
    the next (each run is a fresh sandbox; no process survives between
    runs). Use it as a context manager: it is closed (the server removes
    the workspace) when the block ends, also on an exception."""

    def __init__(self, client, record):
        self._client = client
        self.raw = record
        self.id = record.get("id")
        if not isinstance(self.id, str) or not self.id:
            raise ProtocolError("POST /v1/sessions: no id in %r" % (record,))
        self.closed = False

    def _path(self, tail=""):
        return "/v1/sessions/%s%s" % (urllib.parse.quote(self.id, safe=""), tail)

    def run(self, **kw):
        """As Client.run, in a fresh sandbox with the workspace at /workspace."""
        return self._client._run(self._path("/runs"), **kw)

    def start(self, **kw):
        """As Client.start, in the session."""
        return self._client._run(self._path("/runs"), wait=False, **kw)

    def write_file(self, path, data):
        """Write `data` to `path` in the workspace (relative to /workspace;
        parent directories are made): bytes, str (as UTF-8), or a binary
        file object, streamed from where it stands (a regular file with its
        length, anything else chunked). Returns the server's answer
        ({"path", "bytes"}). Over the quota: WorkspaceFull; over the
        server's file size cap: TooLarge."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        headers = {}
        if hasattr(data, "read"):
            try:
                headers["Content-Length"] = str(os.fstat(data.fileno()).st_size - data.tell())
            except (AttributeError, OSError, ValueError):
                pass  # not a regular file: http.client sends it chunked
        else:
            data = bytes(data)
        _, _, body = self._client._call("PUT", self._path("/files/" + _quote_path(path)), raw=data,
                                        content_type="application/octet-stream", extra_headers=headers)
        return decode_json(body, "PUT file") if body else None

    def read_file(self, path, out=None):
        """The bytes of `path` in the workspace (NotFound if it is not
        there). With `out` (a binary file object) the content is streamed
        into it instead and its length returned."""
        if out is None:
            _, _, body = self._client._call("GET", self._path("/files/" + _quote_path(path)))
            return body
        conn, resp = self._client._open("GET", self._path("/files/" + _quote_path(path)))
        n = 0
        try:
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                out.write(chunk)
                n += len(chunk)
        except OSError as e:
            raise TransportError("read_file %r: %s" % (path, e)) from e
        finally:
            conn.close()
        return n

    def delete_file(self, path):
        """Remove a file, a link or an empty directory."""
        _, _, body = self._client._call("DELETE", self._path("/files/" + _quote_path(path)))
        return decode_json(body, "DELETE file") if body else None

    def list_files(self, path=""):
        """The entries of a workspace directory (its root by default): a
        list of {"name", "type": "file"|"dir"|"symlink"|"other", "size"}."""
        return self.listing(path).get("entries", [])

    def listing(self, path=""):
        """A directory's whole listing as the server answers it:
        {"path", "type": "dir", "entries": [...], "truncated"}."""
        _, _, body = self._client._call("GET", self._path("/files/" + (_quote_path(path) if path else "")))
        got = decode_json(body, "list files")
        if not isinstance(got, dict) or not isinstance(got.get("entries"), list):
            raise ProtocolError("list files %r: not a directory listing: %r" % (path, got))
        return got

    def info(self):
        """The session as GET answers it: `status` `live` (with
        `workspace_used`, `expires_ms`, ...), or once ended `deleted`,
        `expired` or `lost` with the `reason`."""
        _, _, body = self._client._call("GET", self._path())
        return decode_json(body, "GET session")

    def close(self):
        """End the session: the server kills a run in flight and removes
        the workspace. Once; a session that had ended already (410) is
        closed all the same. Returns the ended record (or None)."""
        if self.closed:
            return None
        try:
            _, _, body = self._client._call("DELETE", self._path())
        except Gone:
            self.closed = True
            return None
        self.closed = True  # not before: a close that failed may be tried again
        self.raw = decode_json(body, "DELETE session") if body else self.raw
        return self.raw

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except Exception:
            if exc_type is None:
                raise  # a failed close is the error when the block went well
        return False

    def __repr__(self):
        return "Session(%r%s)" % (self.id, ", closed" if self.closed else "")


class Client:
    """A client of `agentjail serve`.

    url: `http://HOST:PORT`, `https://HOST:PORT` (with `cafile`, or an
    `ssl_context`) or `unix:/path/to/socket`. token: the tenant's bearer
    token. timeout: seconds for each HTTP request (connecting, sending,
    an answer that does not wait for a run); a request that waits for a
    run also gets the run's own timeout (or `max_run_seconds` when the
    request names none, the server's default bound). retries: how many
    times a 429 is retried after the server's Retry-After (0: never, the
    default); a Retry-After over `max_retry_wait` is not waited for."""

    def __init__(self, url, token, timeout=30.0, cafile=None, ssl_context=None, retries=0,
                 max_retry_wait=60.0, max_run_seconds=300.0):
        if not isinstance(token, str) or not token:
            raise ValueError("token: want the tenant's bearer token")
        self._t = Transport(url, timeout, cafile=cafile, ssl_context=ssl_context)
        self.url = url
        self.timeout = timeout
        self._token = token
        self.retries = int(retries)
        self.max_retry_wait = max_retry_wait
        self.max_run_seconds = max_run_seconds

    # -- plumbing ---------------------------------------------------------------------------------

    def _headers(self, content_type=None):
        h = {"Authorization": "Bearer " + self._token, "Accept": "application/json"}
        if content_type:
            h["Content-Type"] = content_type
        return h

    def _retrying(self, fn):
        attempt = 0
        while True:
            try:
                return fn()
            except RateLimited as e:
                if attempt >= self.retries:
                    raise
                wait = 1 if e.retry_after is None else e.retry_after
                if wait > self.max_retry_wait:
                    raise
                attempt += 1
                time.sleep(wait)

    def _call(self, method, path, body=None, raw=None, content_type=None, read_timeout=None, extra_headers=None):
        if body is not None:
            raw = json.dumps(body).encode("utf-8")
            content_type = "application/json"
        headers = self._headers(content_type)
        headers.update(extra_headers or {})
        if not hasattr(raw, "read"):
            return self._retrying(lambda: self._t.call(method, path, headers, raw, read_timeout))
        # A streamed body is sent again on a 429 only if it can be rewound.
        try:
            start = raw.tell() if raw.seekable() else None
        except (AttributeError, OSError):
            start = None

        def attempt():
            if start is not None:
                raw.seek(start)
            return self._t.call(method, path, headers, raw, read_timeout)
        if start is None:
            return attempt()
        return self._retrying(attempt)

    def _open(self, method, path, read_timeout=None):
        def go():
            conn, resp = self._t.open(method, path, self._headers(), None, read_timeout)
            if resp.status >= 400:
                try:
                    data = resp.read()
                finally:
                    conn.close()
                raise error_from(resp, data)
            return conn, resp
        return self._retrying(go)

    # -- runs -------------------------------------------------------------------------------------

    @staticmethod
    def _body(language, code, argv, files, stdin, env, timeout, limits, network, outputs, wait, extra):
        if (argv is None) == (code is None):
            raise ValueError("run: give either language= and code=, or argv=")
        if code is not None and not language:
            raise ValueError("run: code= wants language= (python, bash, sh, node)")
        if argv is not None and language is not None:
            raise ValueError("run: argv= runs the command as given; it takes no language=")
        b = {}
        if argv is not None:
            if isinstance(argv, str):
                raise TypeError("argv: want a list of strings (use language='sh', code=... for a shell line)")
            b["argv"] = list(argv)
        else:
            b["language"], b["code"] = language, code
        if files:
            b["files"] = {name: _b64(data, "files[%r]" % name) for name, data in files.items()}
        if stdin is not None:
            if isinstance(stdin, (bytes, bytearray)):
                stdin = bytes(stdin).decode("utf-8")  # JSON carries text; raises on other bytes
            b["stdin"] = stdin
        if env:
            b["env"] = dict(env)
        if timeout is not None:
            b["timeout"] = timeout
        if limits:
            b["limits"] = dict(limits)
        if network is not None:
            b["network"] = network
        if outputs:
            b["outputs"] = list(outputs)
        b["wait"] = bool(wait)
        b.update(extra or {})
        return b

    def _run(self, path, language=None, code=None, argv=None, files=None, stdin=None, env=None, timeout=None,
             limits=None, network=None, outputs=None, wait=True, on_stdout=None, on_stderr=None,
             on_event=None, extra=None):
        streaming = any((on_stdout, on_stderr, on_event))
        body = self._body(language, code, argv, files, stdin, env, timeout, limits, network, outputs,
                          wait and not streaming, extra)
        read_timeout = None
        if body["wait"]:
            read_timeout = self.timeout + (timeout if timeout is not None else self.max_run_seconds) + 10
        status, _, data = self._call("POST", path, body, read_timeout=read_timeout)
        rec = decode_json(data, "POST " + path)
        if body["wait"]:
            return Run(rec)
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise ProtocolError("POST %s: no run id in %r" % (path, rec))
        h = RunHandle(self, rec["id"])
        if not streaming:
            return h
        return h.stream(on_stdout=on_stdout, on_stderr=on_stderr, on_event=on_event)

    def run(self, language=None, code=None, argv=None, files=None, stdin=None, env=None, timeout=None,
            limits=None, network=None, outputs=None, wait=True, on_stdout=None, on_stderr=None,
            on_event=None, extra=None):
        """Run code in a fresh sandbox: `language` (python, bash, sh, node)
        and `code`, or `argv` (a list). `files` {path: bytes|str} are
        written into /workspace before the run (the run then gets a
        workspace of its own, its working directory), `outputs` names
        files of /workspace to bring back (Run.outputs), `stdin` (str) is
        its input, `env` adds variables, `timeout` is the run's own limit
        in seconds (not the HTTP one), `limits` and `network` tighten the
        policy (sent as given; a server that does not take them says so). Returns a Run when it has ended; with
        `wait=False` a RunHandle at once. With `on_stdout`, `on_stderr` or
        `on_event` the output is streamed to them as it comes, and the Run
        returned at the end. `extra` adds raw fields to the request."""
        return self._run("/v1/runs", language=language, code=code, argv=argv, files=files, stdin=stdin,
                         env=env, timeout=timeout, limits=limits, network=network, outputs=outputs,
                         wait=wait, on_stdout=on_stdout, on_stderr=on_stderr, on_event=on_event, extra=extra)

    def start(self, **kw):
        """As run(..., wait=False): a RunHandle with .wait(), .kill(), .stream()."""
        kw["wait"] = False
        return self._run("/v1/runs", **kw)

    def get_run(self, run_id):
        _, _, data = self._call("GET", "/v1/runs/" + urllib.parse.quote(run_id, safe=""))
        return Run(decode_json(data, "GET run"))

    def kill_run(self, run_id):
        _, _, data = self._call("DELETE", "/v1/runs/" + urllib.parse.quote(run_id, safe=""),
                                read_timeout=self.timeout + 30)
        return Run(decode_json(data, "DELETE run"))

    # -- sessions ---------------------------------------------------------------------------------

    def session(self, policy=None, profile=None, ttl=None, idle_timeout=None, workspace_quota=None, extra=None):
        """Create a session (`POST /v1/sessions`) and return it; use it in a
        `with` block so that it is closed whatever happens."""
        body = {}
        for k, v in (("policy", policy), ("profile", profile), ("ttl", ttl), ("idle_timeout", idle_timeout),
                     ("workspace_quota", workspace_quota)):
            if v is not None:
                body[k] = v
        body.update(extra or {})
        _, _, data = self._call("POST", "/v1/sessions", body)
        return Session(self, decode_json(data, "POST /v1/sessions"))

    def list_sessions(self):
        """The ids of the tenant's live sessions."""
        _, _, data = self._call("GET", "/v1/sessions")
        got = decode_json(data, "GET /v1/sessions")
        return got.get("sessions", []) if isinstance(got, dict) else got

    def get_session(self, session_id):
        """A Session object for an existing id (nothing is checked until used)."""
        return Session(self, {"id": session_id})

    # -- server -----------------------------------------------------------------------------------

    def health(self):
        _, _, data = self._t.call("GET", "/healthz", {})
        return decode_json(data, "GET /healthz")

    def ready(self):
        """True when /readyz says ready; False on 503."""
        try:
            self._t.call("GET", "/readyz", {})
            return True
        except ServerError:
            return False

    def __repr__(self):
        return "Client(%r)" % self.url
