# SPDX-License-Identifier: Apache-2.0
"""The PostgreSQL store (src/server/store_pg.c): the store's behaviours
against a real PostgreSQL server from Debian's packages, a private cluster
this module starts on a unix socket as an unprivileged user and tears down;
then two `agentjail serve` replicas on one database, one SIGKILLed mid-run:
every accepted run ends in a final state the other replica shows."""
import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.parse

import pytest

from conftest import AJ_BIN, IS_ROOT, new_tag, pids_with, wait_for
from test_server import TOKEN_A, TOKEN_B, Server, sha

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the server tests run as root (per-run host uids)")

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
PG_USER, PG_PASSWORD = "agentjail", "pw-of-the-test-cluster"


class Cluster:
    """A private PostgreSQL cluster: data and socket in a temp dir owned by
    an unprivileged user (postgres, else nobody), password auth only."""

    def __init__(self):
        bindir = os.path.dirname(PG_BIN[-1])
        try:
            u = pwd.getpwnam("postgres")
        except KeyError:
            u = pwd.getpwnam("nobody")
        self.uid, self.gid = u.pw_uid, u.pw_gid
        self.dir = tempfile.mkdtemp(prefix="ajtest-pg-")
        os.chown(self.dir, self.uid, self.gid)
        self.data = os.path.join(self.dir, "data")
        self.sock = self.dir
        pwfile = os.path.join(self.dir, "pw")
        with open(pwfile, "w") as f:
            f.write(PG_PASSWORD + "\n")
        os.chown(pwfile, self.uid, self.gid)
        self.as_user = ["setpriv", "--reuid=%d" % self.uid, "--regid=%d" % self.gid, "--clear-groups"]
        self.pg_ctl = os.path.join(bindir, "pg_ctl")
        subprocess.run(self.as_user + [os.path.join(bindir, "initdb"), "-D", self.data, "-U", PG_USER,
                                       "--pwfile", pwfile, "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, cwd=self.dir, timeout=120)
        os.unlink(pwfile)
        opts = "-c listen_addresses='' -c unix_socket_directories='%s' -c fsync=off" % self.sock
        subprocess.run(self.as_user + [self.pg_ctl, "-D", self.data, "-o", opts, "-l",
                                       os.path.join(self.dir, "log"), "-w", "start"],
                       check=True, capture_output=True, cwd=self.dir, timeout=120)
        # The password reaches libpq from a file (passfile=), never the config.
        self.passfile = os.path.join(self.dir, "pgpass")
        with open(self.passfile, "w") as f:
            f.write("*:*:*:%s:%s\n" % (PG_USER, PG_PASSWORD))
        os.chmod(self.passfile, 0o600)
        self.n = 0

    def conninfo(self, db):
        return "host=%s dbname=%s user=%s passfile=%s" % (self.sock, db, PG_USER, self.passfile)

    def psql(self, db, sql):
        p = subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.conninfo(db), "-c", sql],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def new_db(self):
        self.n += 1
        name = "t%d" % self.n
        self.psql("postgres", "CREATE DATABASE %s" % name)
        return name

    def restart(self, between=None):
        subprocess.run(self.as_user + [self.pg_ctl, "-D", self.data, "-m", "fast", "-w", "stop"],
                       check=True, capture_output=True, cwd=self.dir, timeout=120)
        if between:
            between()
        opts = "-c listen_addresses='' -c unix_socket_directories='%s' -c fsync=off" % self.sock
        subprocess.run(self.as_user + [self.pg_ctl, "-D", self.data, "-o", opts, "-l",
                                       os.path.join(self.dir, "log"), "-w", "start"],
                       check=True, capture_output=True, cwd=self.dir, timeout=120)

    def stop(self):
        subprocess.run(self.as_user + [self.pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop"],
                       capture_output=True, cwd=self.dir, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def pg():
    if not PG_BIN or not shutil.which("psql"):
        pytest.skip("PostgreSQL's server binaries are not installed (Debian: postgresql)")
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="ajtest-srvpg-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server(tmp):
    servers = []

    def start(sub="a", **kw):
        d = os.path.join(tmp, sub)
        os.makedirs(d, exist_ok=True)
        s = Server(d, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.err()


def pg_store(pg, db, tmp, sub="a"):
    return {"store": {"postgresql": pg.conninfo(db), "state_dir": os.path.join(tmp, sub, "state")}}


def test_record_survives_a_restart_same_json_as_sqlite_and_tenants_see_only_theirs(pg, server, tmp):
    db = pg.new_db()
    req = {"language": "sh", "code": "printf 'kept\\n'; printf 'e\\377rr' >&2; exit 3"}
    s = server(extra=pg_store(pg, db, tmp))
    assert "store: postgresql: replica" in s.err()
    assert wait_for(lambda: s.request("GET", "/readyz", token=None)[0] == 200, 60)  # once the warm pool is filled
    status, _, j = s.run(req)
    assert status == 200 and j["status"] == "nonzero_exit" and j["exit_code"] == 3 and j["stdout"] == "kept\n", j
    assert s.stop() == 0
    assert pg.psql(db, "SELECT count(*) FROM replicas") == "0", "a clean stop leaves no replica row"
    s2 = server(extra=pg_store(pg, db, tmp))
    status, _, j2 = s2.request("GET", "/v1/runs/" + j["id"])
    assert status == 200 and j2 == j, (j, j2)
    # The same request on the SQLite store gives the same record, but for
    # its id and times.
    sq = server(sub="sqlite")
    j3 = sq.run(req)[2]
    sq.stop()
    drop = ("id", "created_ms", "ended_ms", "duration_ms", "wall_ms")
    strip = lambda r: {k: v for k, v in r.items() if k not in drop}  # noqa: E731
    strip_res = lambda r: {k: v for k, v in r.items() if k not in drop and k != "result"}  # noqa: E731
    assert sorted(j3) == sorted(j2) and strip_res(j3) == strip_res(j2), (j2, j3)
    assert strip(j3["result"]).keys() == strip(j2["result"]).keys()
    # Tenant B sees none of A's (finished, from the store) records.
    assert s2.request("GET", "/v1/runs/" + j["id"], token=TOKEN_B)[0] == 404
    assert s2.request("GET", "/v1/runs/" + j["id"] + "/stream", token=TOKEN_B)[0] == 404
    assert s2.request("GET", "/v1/runs/" + j["id"] + "/stream")[0] == 200  # positive control


def test_a_killed_replica_restarted_marks_its_runs_lost_uri_conninfo(pg, server, tmp):
    db = pg.new_db()
    q = urllib.parse.urlencode({"host": pg.sock, "user": PG_USER, "passfile": pg.passfile})
    store = {"store": {"postgresql": "postgresql:///%s?%s" % (db, q), "state_dir": os.path.join(tmp, "a", "state")}}
    s = server(extra=store)
    tag = new_tag()
    status, _, j = s.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    assert wait_for(lambda: pids_with(tag), 10)
    ok = s.run({"argv": ["true"]})[2]
    s.stop(sig=signal.SIGKILL)
    assert wait_for(lambda: not pids_with(tag), 10)
    s2 = server(extra=store)
    assert wait_for(lambda: s2.request("GET", "/v1/runs/" + j["id"])[2]["status"] == "lost", 60), s2.err()
    assert s2.request("GET", "/v1/runs/" + ok["id"])[2] == ok  # positive control: ended, kept
    assert os.listdir(os.path.join(tmp, "a", "state", "events")) == []


def test_retention_removes_old_records(pg, server, tmp):
    db = pg.new_db()
    s = server(extra=pg_store(pg, db, tmp))
    old = s.run({"language": "sh", "code": "echo old"})[2]["id"]
    new = s.run({"language": "sh", "code": "echo new"})[2]["id"]
    assert s.stop() == 0
    pg.psql(db, "UPDATE runs SET ended_ms = ended_ms - 40::bigint * 86400 * 1000 WHERE id = '%s'" % old)
    s2 = server(extra=pg_store(pg, db, tmp))
    assert s2.request("GET", "/v1/runs/" + old)[0] == 200  # without retention: kept
    assert s2.stop() == 0
    s3 = server(extra=dict(pg_store(pg, db, tmp), retention_days=30))
    assert s3.request("GET", "/v1/runs/" + old)[0] == 404
    status, _, j = s3.request("GET", "/v1/runs/" + new)
    assert status == 200 and j["stdout"] == "new\n"
    assert "removed 1 records older than 30 days" in s3.err()


@pytest.mark.parametrize("store,where", [
    ({"postgresql": "host=/x user=a password=secret", "state_dir": "/tmp/x"},
     "store.postgresql: holds a password"),
    ({"postgresql": "host=/x", "state_dir": "relative"}, "store.state_dir: must be an absolute path"),
    ({"postgresql": "host=/x"}, "store: needs both"),
    ({"postgresql": "postgresql://h:5432/db?bogus=1", "state_dir": "/tmp/x"}, "store.postgresql: not a libpq"),
    ({"postgresql": "host=/x", "state_dir": "/tmp/x", "pool": 3}, "store: unknown key pool"),
    ("postgresql://h/db", "store: a PostgreSQL store is {"),
])
def test_bad_store_config_is_one_located_line(tmp, store, where):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "store": store,
                   "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f, indent=1)
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentjail serve: " + path + ":"), p.stderr
    assert where in lines[0], lines[0]
    assert "secret" not in p.stderr


def test_wrong_password_or_no_server_is_a_clear_error(pg, tmp):
    bad = os.path.join(tmp, "badpass")
    with open(bad, "w") as f:
        f.write("*:*:*:%s:not-the-password\n" % PG_USER)
    os.chmod(bad, 0o600)
    cases = [("host=%s dbname=postgres user=%s passfile=%s" % (pg.sock, PG_USER, bad), "password authentication"),
             ("host=%s/nowhere dbname=postgres user=%s" % (tmp, PG_USER), "No such file")]
    for conninfo, why in cases:
        path = os.path.join(tmp, "c.json")
        with open(path, "w") as f:
            json.dump({"listen": "127.0.0.1:0", "tenants": {"a": {"token_sha256": sha(TOKEN_A)}},
                       "store": {"postgresql": conninfo, "state_dir": os.path.join(tmp, "st")}}, f)
        p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "store: postgresql:" in p.stderr and why in p.stderr, p.stderr
        assert "not-the-password" not in p.stderr


def test_two_replicas_one_killed_mid_run_every_run_ends_visible_from_the_other(pg, server, tmp):
    db = pg.new_db()
    a = server("a", extra=pg_store(pg, db, tmp, "a"))
    b = server("b", extra=pg_store(pg, db, tmp, "b"))
    assert pg.psql(db, "SELECT count(*) FROM replicas") == "2"
    done_a = a.run({"argv": ["echo", "from a"]})[2]
    tags = [new_tag() for _ in range(3)]
    live_a = []
    for tag in tags[:2]:
        status, _, j = a.run({"argv": ["sleep", tag], "wait": False})
        assert status == 202, j
        live_a.append(j["id"])
    status, _, j = b.run({"argv": ["sleep", tags[2]], "wait": False})
    assert status == 202
    live_b = j["id"]
    assert wait_for(lambda: all(pids_with(t) for t in tags), 20)
    # B reads A's records from the shared store: the finished one whole,
    # the live ones as accepted (they run on A).
    status, _, j = b.request("GET", "/v1/runs/" + done_a["id"])
    assert status == 200 and j == done_a
    for rid in live_a:
        status, _, j = b.request("GET", "/v1/runs/" + rid)
        assert status == 200 and j["status"] in ("queued", "running"), j
        assert b.request("GET", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    # Sessions are pinned to the replica that holds their workspace: B
    # reads A's live session's row, and says where its requests must go.
    status, _, j = a.request("POST", "/v1/sessions", {})
    assert status == 201, j
    sid = j["id"]
    assert a.request("PUT", "/v1/sessions/%s/files/f" % sid, raw=b"x")[0] in (200, 201)
    status, _, j = b.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and j["status"] == "live", j
    assert b.request("GET", "/v1/sessions/" + sid, token=TOKEN_B)[0] == 404
    status, _, j = b.request("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["true"]})
    assert status == 421 and "another replica" in j["error"], j
    assert b.request("GET", "/v1/sessions/%s/files/f" % sid)[0] == 421
    assert b.request("DELETE", "/v1/sessions/" + sid)[0] == 421
    assert b.request("DELETE", "/v1/runs/" + live_a[0])[0] == 421  # killed only where it runs
    assert pids_with(tags[0])
    status, _, j = a.request("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["cat", "f"]})  # positive control
    assert status == 200 and j["stdout"] == "x", j
    a.stop(sig=signal.SIGKILL)
    assert wait_for(lambda: not pids_with(tags[0]) and not pids_with(tags[1]), 20), "A's sandboxes outlived it"

    # B sees A's connection go (its advisory lock is free) and marks A's
    # live runs lost; its own run is untouched.
    def status_of(rid):
        return b.request("GET", "/v1/runs/" + rid)[2]["status"]
    assert wait_for(lambda: all(status_of(r) == "lost" for r in live_a), 60), [status_of(r) for r in live_a]
    j = b.request("GET", "/v1/runs/" + live_a[0])[2]
    assert "replica" in j["error"] and "stopped" in j["error"] and j["ended_ms"] > 0, j
    assert "runs of stopped replicas marked lost" in b.err()
    status, _, j = b.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and j["status"] == "lost" and "replica" in j["reason"], j
    assert b.request("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["true"]})[0] == 410
    assert pids_with(tags[2]) and status_of(live_b) == "running", "B's own run is untouched"
    assert status_of(done_a["id"]) == "ok"  # positive control: an ended run keeps its status
    # A run accepted by B now, and B's live one, end in final states too.
    j = b.run({"argv": ["echo", "after"]})[2]
    assert j["status"] == "ok" and j["stdout"] == "after\n"
    assert b.request("DELETE", "/v1/runs/" + live_b)[0] == 200
    assert status_of(live_b) not in ("queued", "running", "lost")
    # A restarted replica (a new one: a new id) shows the same final states.
    a2 = server("a", extra=pg_store(pg, db, tmp, "a"))
    for rid, want in [(live_a[0], "lost"), (live_a[1], "lost"), (done_a["id"], "ok")]:
        assert a2.request("GET", "/v1/runs/" + rid)[2]["status"] == want
    assert a2.request("GET", "/v1/runs/" + live_b)[2]["status"] not in ("queued", "running")
    assert pg.psql(db, "SELECT count(*) FROM runs WHERE status IN ('queued', 'running')") == "0"
    assert pg.psql(db, "SELECT count(*) FROM replicas") == "2"  # b and a2; the dead one's row went


# ---- forwarding between replicas (src/server/forward.c) ------------------------------------------------------

def free_port():
    """A loopback port nothing listens on now (the server binds it next)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_cert(tmp, name):
    """A certificate for the address 127.0.0.1 only (not the name localhost)."""
    cert, key = os.path.join(tmp, name + ".crt"), os.path.join(tmp, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


def tls_conn(server, cafile):
    """server.conn, over TLS to a server whose listen has it."""
    import http.client
    import ssl

    def conn(timeout=60):
        ctx = ssl.create_default_context(cafile=cafile)
        return http.client.HTTPSConnection("127.0.0.1", server.port, timeout=timeout, context=ctx)
    server.conn = conn


def sse_until(resp, event):
    """Read SSE lines until `event: EVENT` and its data line: the events seen (with data)."""
    seen = []
    while True:
        line = resp.readline()
        assert line, "the stream ended before %s: %s" % (event, seen)
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            data = resp.readline().decode()
            assert data.startswith("data: "), data
            seen.append((line[7:], json.loads(data[6:])))
            if line[7:] == event:
                return seen


def test_forwarding_a_run_and_a_session_to_the_replica_that_holds_it(pg, server, tmp):
    """A (https on TCP) and B (a unix socket) advertise where they are
    reached; each serves the other's live runs and sessions by proxying."""
    if not shutil.which("openssl"):
        pytest.skip("openssl makes the test's certificate")
    db = pg.new_db()
    cert, key = make_cert(tmp, "a")
    port = free_port()
    a_addr = "https://127.0.0.1:%d" % port
    b_sock = os.path.join(tmp, "b.sock")
    a = server("a", listen="127.0.0.1:%d" % port, extra=dict(
        pg_store(pg, db, tmp, "a"), pool_size=0, tls={"cert": cert, "key": key},
        replica={"advertise": a_addr, "timeout": 2}))
    tls_conn(a, cert)
    os.environ["AJ_TEST_ADVERTISE"] = "unix:" + b_sock
    try:
        b = server("b", listen="unix:" + b_sock, extra=dict(
            pg_store(pg, db, tmp, "b"), pool_size=0, replica={"advertise": "env:AJ_TEST_ADVERTISE", "ca": cert}))
    finally:
        del os.environ["AJ_TEST_ADVERTISE"]
    assert sorted(pg.psql(db, "SELECT advertise FROM replicas").split()) == sorted([a_addr, "unix:" + b_sock])

    # A run started on A, read via B: the live record (A's memory:
    # running), not the stored row (queued).
    tag = new_tag()
    status, _, j = a.run({"argv": ["sh", "-c", "echo started; exec sleep " + tag], "wait": False})
    assert status == 202, j
    rid = j["id"]
    assert wait_for(lambda: pids_with(tag), 20)
    assert pg.psql(db, "SELECT status FROM runs WHERE id = '%s'" % rid) == "queued"
    status, _, j = b.request("GET", "/v1/runs/" + rid)
    assert status == 200 and j["status"] == "running" and j["id"] == rid, j
    # Another tenant's token through B: as unknown as it is on A.
    assert b.request("GET", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    assert b.request("GET", "/v1/runs/" + rid + "/stream", token=TOKEN_B)[0] == 404
    assert b.request("DELETE", "/v1/runs/" + rid, token=TOKEN_B)[0] == 404
    assert pids_with(tag), "another tenant's DELETE killed nothing"
    # A hop header: a request that was forwarded once is never forwarded
    # again (508); the owner serves one whatever it carries, and checks
    # its token itself (another tenant's: 404; an unknown one: 401).
    c = b.conn()
    c.request("GET", "/v1/runs/" + rid, headers={"Authorization": "Bearer " + TOKEN_A,
                                                 "X-Agentjail-Forwarded": "elsewhere"})
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    assert r.status == 508 and "forwarded already" in j["error"] and a_addr in j["error"], j
    for token, want in ((TOKEN_A, 200), (TOKEN_B, 404), ("not-a-token", 401)):
        c = a.conn()
        c.request("GET", "/v1/runs/" + rid, headers={"Authorization": "Bearer " + token,
                                                     "X-Agentjail-Forwarded": "unix:" + b_sock})
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == want, (token, r.status)

    # The stream via B: events as they come, then DELETE via B ends it.
    c = b.conn()
    c.request("GET", "/v1/runs/%s/stream" % rid, headers={"Authorization": "Bearer " + TOKEN_A})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    seen = sse_until(r, "stdout")
    assert seen[0][0] == "start" and seen[0][1]["id"] == rid and seen[-1][1]["data"] == "started\n", seen
    status, _, j = b.request("DELETE", "/v1/runs/" + rid)
    assert status == 200 and j["status"] == "signaled", j
    assert wait_for(lambda: not pids_with(tag), 10)
    seen = sse_until(r, "exit")
    assert seen[-1][1]["status"] == "signaled", seen
    assert r.read() == b"\n", "the stream ends after exit"
    c.close()
    assert pg.psql(db, "SELECT status FROM runs WHERE id = '%s'" % rid) == "signaled"

    # A session on A: files written via A read via B, written via B
    # (streamed, with and without a length) read via A, a run via B.
    status, _, j = a.request("POST", "/v1/sessions", {})
    assert status == 201, j
    sid = j["id"]
    big = os.urandom(3 << 20)
    assert a.request("PUT", "/v1/sessions/%s/files/from-a" % sid, raw=b"written on a")[0] in (200, 201)
    # Its GET via B is A's live view (the workspace's use), not the row.
    status, _, j = b.request("GET", "/v1/sessions/" + sid)
    assert status == 200 and j["status"] == "live" and j["workspace_used"] > 0, j
    status, resp, text = b.request("GET", "/v1/sessions/%s/files/from-a" % sid)
    assert status == 200 and text == "written on a", (status, text)
    assert b.request("PUT", "/v1/sessions/%s/files/big" % sid, raw=big)[0] in (200, 201)
    c = b.conn()
    c.request("PUT", "/v1/sessions/%s/files/a%%20b%%25c" % sid, body=iter([b"chunk1,", b"chunk2"]),
              headers={"Authorization": "Bearer " + TOKEN_A}, encode_chunked=True)
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status in (200, 201), r.status
    c = a.conn()
    for name, want in (("big", big), ("a%20b%25c", b"chunk1,chunk2")):
        c = a.conn()
        c.request("GET", "/v1/sessions/%s/files/%s" % (sid, name), headers={"Authorization": "Bearer " + TOKEN_A})
        r = c.getresponse()
        got = r.read()
        c.close()
        assert r.status == 200 and got == want, (name, r.status, len(got))
    c = b.conn()
    c.request("GET", "/v1/sessions/%s/files/big" % sid, headers={"Authorization": "Bearer " + TOKEN_A})
    r = c.getresponse()
    got = r.read()
    c.close()
    assert r.status == 200 and r.getheader("Content-Length") == str(len(big)) and got == big
    status, _, j = b.request("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["sh", "-c", "cat 'a b%c' from-a"]})
    assert status == 200 and j["stdout"] == "chunk1,chunk2written on a", j
    assert b.request("GET", "/v1/sessions/%s/files/from-a" % sid, token=TOKEN_B)[0] == 404
    assert b.request("PUT", "/v1/sessions/%s/files/x" % sid, raw=b"x", token=TOKEN_B)[0] == 404
    status, _, j = b.request("DELETE", "/v1/sessions/" + sid)
    assert status == 200, j
    assert a.request("GET", "/v1/sessions/" + sid)[2]["status"] == "deleted"
    assert b.request("GET", "/v1/sessions/%s/files/from-a" % sid)[0] == 410  # ended: answered where asked

    # B checks A's certificate: the CA, and the name it was reached by
    # (localhost is 127.0.0.1, but the certificate does not name it).
    tag = new_tag()
    status, _, j = a.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    assert wait_for(lambda: pids_with(tag), 20)
    assert b.request("GET", "/v1/runs/" + j["id"])[2]["status"] == "running"  # positive control
    pg.psql(db, "UPDATE replicas SET advertise = 'https://localhost:%d' WHERE advertise = '%s'" % (port, a_addr))
    status, _, e = b.request("GET", "/v1/runs/" + j["id"])
    assert status == 503 and "not trusted" in e["error"], e
    pg.psql(db, "UPDATE replicas SET advertise = '%s' WHERE advertise = 'https://localhost:%d'" % (a_addr, port))
    assert a.request("DELETE", "/v1/runs/" + j["id"])[0] == 200
    assert wait_for(lambda: not pids_with(tag), 10)

    # And the other way: B's run, read and killed via A.
    tag = new_tag()
    status, _, j = b.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    assert wait_for(lambda: pids_with(tag), 20)
    assert a.request("GET", "/v1/runs/" + j["id"])[2]["status"] == "running"
    assert a.request("DELETE", "/v1/runs/" + j["id"])[2]["status"] == "signaled"
    assert wait_for(lambda: not pids_with(tag), 10)

    # B shutting down (SIGTERM) does not wait for A's run that a request
    # forwarded through it waits on (up to max_timeout): the forwarded
    # request is cut (503 to its client), B exits 0 at once; A's run goes
    # on, A's to end.
    import threading
    status, _, j = a.request("POST", "/v1/sessions", {})
    sid = j["id"]
    tag = new_tag()
    got = {}

    def waiting_run():
        try:
            got["r"] = b.request("POST", "/v1/sessions/%s/runs" % sid, {"argv": ["sleep", tag]}, timeout=120)
        except Exception as e:  # noqa: BLE001: the connection cut is the point
            got["e"] = e
    t = threading.Thread(target=waiting_run)
    t.start()
    assert wait_for(lambda: pids_with(tag), 20), (got, j)
    assert b.stop(timeout=30) == 0, b.err()
    t.join(60)
    assert got["r"][0] == 503 and "shutting down" in got["r"][2]["error"], got
    assert pids_with(tag), "A's run is A's"
    assert a.request("DELETE", "/v1/sessions/" + sid)[0] == 200
    assert wait_for(lambda: not pids_with(tag), 10)


def test_forwarding_loop_unreachable_and_stopped_owner(pg, server, tmp):
    """A loop is refused (508); an owner that cannot be reached, or does
    not answer in replica.timeout, is a 503 with the reason; once its
    database connection goes, its runs are lost and answered from the store."""
    db = pg.new_db()
    a_sock, b_sock = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
    a = server("a", listen="unix:" + a_sock, extra=dict(pg_store(pg, db, tmp, "a"), pool_size=0,
                                                       replica={"advertise": "unix:" + a_sock}))
    b = server("b", listen="unix:" + b_sock, extra=dict(pg_store(pg, db, tmp, "b"), pool_size=0,
                                                       replica={"advertise": "unix:" + b_sock, "timeout": 2}))
    tag = new_tag()
    status, _, j = a.run({"argv": ["sleep", tag], "wait": False})
    assert status == 202
    rid = j["id"]
    assert wait_for(lambda: pids_with(tag), 20)
    assert b.request("GET", "/v1/runs/" + rid)[2]["status"] == "running"  # positive control
    # A's row names B's address (a misconfigured advertise): B forwards to
    # itself once, and its second sight of the request ends it.
    pg.psql(db, "UPDATE replicas SET advertise = 'unix:%s' WHERE advertise = 'unix:%s'" % (b_sock, a_sock))
    status, _, j = b.request("GET", "/v1/runs/" + rid)
    assert status == 508 and "forwarded already (by unix:%s)" % b_sock in j["error"], j
    # An address nothing listens on: 503 at once, with the reason.
    pg.psql(db, "UPDATE replicas SET advertise = 'http://127.0.0.1:1' WHERE advertise = 'unix:%s'" % b_sock)
    status, _, j = b.request("GET", "/v1/runs/" + rid)
    assert status == 503 and "http://127.0.0.1:1" in j["error"] and "refused" in j["error"], j
    pg.psql(db, "UPDATE replicas SET advertise = 'unix:%s' WHERE advertise = 'http://127.0.0.1:1'" % a_sock)
    assert b.request("GET", "/v1/runs/" + rid)[2]["status"] == "running"
    # A stream via B, open as A goes (below): it ends without an exit event.
    sc = b.conn()
    sc.request("GET", "/v1/runs/%s/stream" % rid, headers={"Authorization": "Bearer " + TOKEN_A})
    stream = sc.getresponse()
    assert stream.status == 200 and sse_until(stream, "start")
    # A stopped (SIGSTOP): its socket takes the connection, it never
    # answers; its database connection (and lock) lives on.
    a.proc.send_signal(signal.SIGSTOP)
    try:
        status, _, j = b.request("GET", "/v1/runs/" + rid)
        assert status == 503 and "did not answer within 2 s" in j["error"], j
        status, _, j = b.request("DELETE", "/v1/runs/" + rid)
        assert status == 503, j
        assert b.request("GET", "/healthz", token=None)[0] == 200, "B itself is fine"
        m = b.metrics()
        assert m['agentjail_forwarded_total{result="loop"}'] == 1, m
        assert m['agentjail_forwarded_total{result="unreachable"}'] == 3, m  # refused, silent (GET, DELETE)
        # The two positive controls, the loop's first hop (answered: the
        # 508 of its second), the stream.
        assert m['agentjail_forwarded_total{result="ok"}'] == 4, m
    finally:
        a.proc.send_signal(signal.SIGKILL)
        a.proc.send_signal(signal.SIGCONT)
    a.proc.wait(timeout=30)
    assert wait_for(lambda: not pids_with(tag), 20)
    import http.client
    try:
        rest = stream.read()
    except http.client.IncompleteRead as e:
        rest = e.partial
    sc.close()
    assert b"event: exit" not in rest, rest
    # Until B sees the lock go (about 2 s), a 503 (A is gone), then the store's answer.
    assert wait_for(lambda: b.request("GET", "/v1/runs/" + rid)[2].get("status") == "lost", 60), b.err()


@pytest.mark.parametrize("replica,where", [
    ({"advertise": "10.0.0.5:8080"}, "replica.advertise: '10.0.0.5:8080' is not http://"),
    ({"advertise": "http://10.0.0.5"}, "replica.advertise: 'http://10.0.0.5': HOST:PORT is required"),
    ({"advertise": "http://10.0.0.5:99999"}, "the port is 1 to 65535"),
    ({"advertise": "http://10.0.0.5:80/v1"}, "the port is 1 to 65535, and nothing after it"),
    ({"advertise": "http://[::1:8080"}, "an IPv6 address is [ADDR]:PORT"),
    ({"advertise": "unix:relative"}, "unix:PATH needs an absolute path"),
    ({"advertise": "unix:/run/a\r\nX-Evil: 1"}, "a control character in the address"),
    ({"advertise": "env:AJ_TEST_NO_SUCH_VARIABLE"}, "the environment variable AJ_TEST_NO_SUCH_VARIABLE is not set"),
    ({"advertise": "http://h:1", "ca": "/nonexistent/ca.pem"}, "replica.ca: /nonexistent/ca.pem: No such file"),
    ({"advertise": "http://h:1", "ca": "/etc/passwd"}, "replica.ca: /etc/passwd: no PEM CA certificate"),
    ({"timeout": 0}, "replica.timeout: must be between 1 and 3600"),
    ({"forward": True}, "replica: unknown key forward"),
    ("http://h:1", "replica: must be an object"),
])
def test_bad_replica_config_is_one_located_line(tmp, replica, where):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "store": {"postgresql": "host=/x", "state_dir": "/tmp/x"},
                   "replica": replica, "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f, indent=1)
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentjail serve: " + path + ":"), p.stderr
    assert where in lines[0], lines[0]


def test_replica_needs_a_shared_store(tmp):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "store": os.path.join(tmp, "runs.db"),
                   "replica": {"advertise": "http://10.0.0.5:8080"},
                   "tenants": {"a": {"token_sha256": sha(TOKEN_A)}}}, f, indent=1)
    p = subprocess.run([AJ_BIN, "serve", "--config", path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "replica: replicas need a shared store" in p.stderr, p.stderr


def test_the_database_restarting_under_a_replica(pg, server, tmp):
    """Last in the module: it restarts the cluster. The replica reconnects,
    takes its lock and row back, and goes on; meanwhile it is not ready."""
    db = pg.new_db()
    s = server(extra=pg_store(pg, db, tmp))
    before = s.run({"argv": ["echo", "before"]})[2]
    seen = {}

    def while_down():
        seen["readyz"] = s.request("GET", "/readyz", token=None)[0]
        seen["run"] = s.run({"argv": ["true"]})[0]
    pg.restart(between=while_down)
    assert seen == {"readyz": 503, "run": 500}, seen
    assert s.request("GET", "/readyz", token=None)[0] == 200
    assert "reconnected" in s.err()
    j = s.run({"argv": ["echo", "after"]})[2]
    assert j["status"] == "ok" and s.request("GET", "/v1/runs/" + before["id"])[2] == before
    assert pg.psql(db, "SELECT count(*) FROM replicas") == "1"
