"""HTTP over TCP, TLS or a unix socket, with the standard library only."""
import email.utils
import http.client
import json
import socket
import ssl
import time
import urllib.parse

from .errors import ProtocolError, RequestTimeout, TransportError, error_for


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def parse_retry_after(value):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date);
    None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0, int(when.timestamp() - time.time() + 0.999))


class Transport:
    """One connection per request (so a Client may be shared by threads)."""

    def __init__(self, url, timeout, cafile=None, ssl_context=None):
        if url.startswith("unix:"):
            path = url[5:]
            if not path.startswith("/"):
                raise ValueError("url: unix: wants an absolute socket path (unix:/run/agentjail.sock)")
            self.kind, self.unix_path, self.prefix = "unix", path, ""
            self.host = self.port = None
        else:
            u = urllib.parse.urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError("url: want http://HOST:PORT, https://HOST:PORT or unix:/PATH, got %r" % url)
            self.kind, self.host, self.port = u.scheme, u.hostname, u.port
            self.prefix = u.path.rstrip("/")
            self.unix_path = None
        if self.kind != "https" and (cafile or ssl_context):
            raise ValueError("cafile/ssl_context only apply to an https:// url")
        self.ssl_context = ssl_context
        if self.kind == "https" and ssl_context is None:
            self.ssl_context = ssl.create_default_context(cafile=cafile)
        self.timeout = timeout

    def connection(self):
        if self.kind == "unix":
            return _UnixHTTPConnection(self.unix_path, self.timeout)
        if self.kind == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def open(self, method, path, headers, body=None, read_timeout=None):
        """Send a request; return (connection, response) with the headers read.
        The caller reads the body and closes the connection."""
        conn = self.connection()
        try:
            conn.request(method, self.prefix + path, body=body, headers=headers)
            if read_timeout is not None and conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise RequestTimeout("%s %s: timed out: %s" % (method, path, e)) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError("%s %s: %s" % (method, path, e or type(e).__name__)) from e
        return conn, resp

    def call(self, method, path, headers, body=None, read_timeout=None):
        """A whole request: (status, headers, body bytes); error statuses raise."""
        conn, resp = self.open(method, path, headers, body, read_timeout)
        try:
            data = resp.read()
        except socket.timeout as e:
            raise RequestTimeout("%s %s: timed out reading the answer" % (method, path)) from e
        except (OSError, http.client.HTTPException) as e:
            raise TransportError("%s %s: %s" % (method, path, e or type(e).__name__)) from e
        finally:
            conn.close()
        if resp.status >= 400:
            raise error_from(resp, data)
        return resp.status, resp.headers, data


def error_from(resp, data):
    """The typed error for an error response whose body is `data`."""
    body, message = None, None
    try:
        body = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        message = body["error"]
    if message is None:
        message = data.decode("utf-8", "replace").strip() or (resp.reason or "HTTP %d" % resp.status)
    return error_for(resp.status, message, body, resp.headers.items(),
                     parse_retry_after(resp.getheader("Retry-After")))


def decode_json(data, what):
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("%s: the answer is not JSON: %s" % (what, e)) from e
