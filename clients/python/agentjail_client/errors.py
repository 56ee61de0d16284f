"""Typed errors: one class per HTTP status the server answers with, each
carrying the server's own message (its `{"error": "..."}`)."""


class AgentjailError(Exception):
    """Base of every error this client raises."""


class APIError(AgentjailError):
    """The server answered with an error status.

    `status` is the HTTP status, `message` the server's `error` text (or
    the body as text when it was not JSON), `body` the decoded JSON body
    (or None)."""

    def __init__(self, status, message, body=None, headers=None):
        super().__init__("%d: %s" % (status, message))
        self.status = status
        self.message = message
        self.body = body
        self.headers = dict(headers or {})


class BadRequest(APIError):
    """400: the request was refused; the message names the field at fault
    (`body:LINE:COL: ...` for malformed JSON)."""


class Unauthorized(APIError):
    """401: no token, or one no tenant has."""


class NotFound(APIError):
    """404: no such run, session or file (another tenant's answers the same)."""


class Forbidden(APIError):
    """403: refused on principle (a workspace path through a symbolic link)."""


class Conflict(APIError):
    """409: the request does not fit the object's state (a session's run
    while another is in flight, a directory in the way of a file)."""


class Gone(APIError):
    """410: the session has ended (deleted, expired or lost)."""


class TooLarge(APIError):
    """413: the body (or a file) is over the server's size limit."""


class RateLimited(APIError):
    """429: over the tenant's concurrency or rate limit.

    `retry_after` is the server's Retry-After in seconds (None when it
    sent none)."""

    def __init__(self, status, message, body=None, headers=None, retry_after=None):
        super().__init__(status, message, body, headers)
        self.retry_after = retry_after


class ServerError(APIError):
    """5xx: the server failed (or is shutting down: 503)."""


class Unsupported(ServerError):
    """501: this server does not offer it (sessions on a server that is not root)."""


class WorkspaceFull(ServerError):
    """507: the workspace's quota is reached; nothing was written."""


class TransportError(AgentjailError, OSError):
    """The connection failed, was cut, or a response could not be read."""


class RequestTimeout(TransportError, TimeoutError):
    """The HTTP request timed out (the client's `timeout`, not the run's)."""


class WaitTimeout(AgentjailError, TimeoutError):
    """`RunHandle.wait(timeout=...)` gave up before the run ended (the run
    goes on; `kill()` it if it should not)."""


class ProtocolError(AgentjailError):
    """The server answered something this client does not understand."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
              413: TooLarge, 501: Unsupported, 507: WorkspaceFull}


def error_for(status, message, body=None, headers=None, retry_after=None):
    """The typed error for an error status."""
    if status == 429:
        return RateLimited(status, message, body, headers, retry_after)
    return _BY_STATUS.get(status, ServerError if status >= 500 else APIError)(status, message, body, headers)
