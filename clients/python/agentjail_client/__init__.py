"""agentjail_client: a standard-library-only client of `agentjail serve`.

    from agentjail_client import Client
    c = Client("unix:/run/agentjail/api.sock", token)
    r = c.run(language="python", code="print(6 * 7)", timeout=10)
    print(r.status, r.stdout)
"""
from .client import Client, Run, RunHandle, Session
from .errors import (AgentjailError, APIError, BadRequest, Conflict, Forbidden, Gone, NotFound, ProtocolError,
                     RateLimited, RequestTimeout, ServerError, TooLarge, TransportError, Unauthorized, Unsupported,
                     WaitTimeout, WorkspaceFull)

__version__ = "0.1.0"
__all__ = ["Client", "Run", "RunHandle", "Session", "AgentjailError", "APIError", "BadRequest", "Conflict",
           "Forbidden", "Gone", "NotFound", "ProtocolError", "RateLimited", "RequestTimeout", "ServerError",
           "TooLarge", "TransportError", "Unauthorized", "Unsupported", "WaitTimeout", "WorkspaceFull"]
