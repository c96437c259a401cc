"""Bounded, content-free codes of the retrieval server and its one exception.

A refusal before the SDK (the guard) is an HTTP status with a JSON-RPC error whose message is
the code; a refused tool call is a tool result with ``isError`` and the code as its only text.
Identity refusals keep the contract's own code (``contract.Code``: EXPIRED, AGENT_MISMATCH, ...).
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import Final

from fgentic_governance.contract import Code as IdentityCode
from fgentic_governance.reasons import Coded


class RetrievalServerReason(StrEnum):
    REQUEST_MALFORMED = "REQUEST_MALFORMED"
    """Not one strict-JSON JSON-RPC 2.0 object (batches included)."""
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    HTTP_METHOD_REFUSED = "HTTP_METHOD_REFUSED"
    """Anything but POST: the server is stateless, so there is no stream to GET or DELETE."""
    PATH_UNKNOWN = "PATH_UNKNOWN"
    METHOD_REFUSED = "METHOD_REFUSED"
    """A JSON-RPC method outside the table (resources, prompts, completion, logging, ...)."""
    PROTOCOL_VERSION_REFUSED = "PROTOCOL_VERSION_REFUSED"
    """``initialize`` offering another revision than 2025-11-25, or a later request whose
    ``MCP-Protocol-Version`` is absent, repeated or another."""
    TOOL_UNKNOWN = "TOOL_UNKNOWN"
    ARGUMENTS_INVALID = "ARGUMENTS_INVALID"
    """Arguments that are not exactly ``{query[, k]}`` of the right types."""
    QUERY_INVALID = "QUERY_INVALID"
    """An empty query, or one that is not storable UTF-8 (a lone surrogate)."""
    QUERY_TOO_LARGE = "QUERY_TOO_LARGE"
    K_INVALID = "K_INVALID"
    EMBEDDINGS_UNAVAILABLE = "EMBEDDINGS_UNAVAILABLE"
    """The embeddings endpoint failed, timed out or answered something that is not one vector
    of the corpus's dimension (its body is never read into a log or an error)."""
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    BUSY = "BUSY"
    """Too many request bodies held at once."""


Code = RetrievalServerReason | IdentityCode


class RetrievalServerError(Coded[Code]):
    """A refused request or tool call; ``str()`` is only the code."""


IDENTITY_STATUS: Final = 403
STATUS: Final = MappingProxyType({
    RetrievalServerReason.REQUEST_MALFORMED: 400,
    RetrievalServerReason.REQUEST_TOO_LARGE: 413,
    RetrievalServerReason.HTTP_METHOD_REFUSED: 405,
    RetrievalServerReason.PATH_UNKNOWN: 404,
    RetrievalServerReason.METHOD_REFUSED: 400,
    RetrievalServerReason.PROTOCOL_VERSION_REFUSED: 400,
    RetrievalServerReason.BUSY: 503,
    # Only when the whole answer outran its bound (a tool call's own failures are results).
    RetrievalServerReason.STORE_UNAVAILABLE: 503,
    RetrievalServerReason.EMBEDDINGS_UNAVAILABLE: 503,
})


def http_status(code: Code) -> int:
    """The HTTP status of a refusal before the SDK: 403 for every identity code."""
    return IDENTITY_STATUS if isinstance(code, IdentityCode) else STATUS.get(code, 400)


# JSON-RPC error codes of the refusals before the SDK (the message is the bounded code).
RPC_INVALID_REQUEST: Final = -32600
RPC_METHOD_NOT_FOUND: Final = -32601
RPC_REFUSED: Final = -32001


def rpc_code(code: Code) -> int:
    if code is RetrievalServerReason.METHOD_REFUSED:
        return RPC_METHOD_NOT_FOUND
    if code in (RetrievalServerReason.REQUEST_MALFORMED, RetrievalServerReason.REQUEST_TOO_LARGE):
        return RPC_INVALID_REQUEST
    return RPC_REFUSED
