"""Which MCP requests reach the SDK: one pure decision per request, before any protocol work.

The `mcp` SDK accepts every revision it knows at ``initialize`` and does not tie a later
request's ``MCP-Protocol-Version`` to the negotiated one (2.x dropped the check), so the
server decides both itself, as the gateway route does, and fails closed:

* the body is one strict-JSON JSON-RPC 2.0 object (no batch) naming a method in ``METHODS``;
* ``initialize`` offers exactly 2025-11-25 and carries no other ``MCP-Protocol-Version``;
  every later request carries that header exactly once, with exactly that value;
* every request carries exactly one ``X-Fgentic-Identity`` for the binding's Agent, decoded
  here, once, into the ``VerifiedIdentity`` the tool hands to the prefilter. Nothing is kept
  between requests (kagent pools MCP sessions by a hash of the headers, so an identity kept in
  a session could serve another turn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fgentic_governance.contract import AgentRef, ContractError, VerifiedIdentity
from fgentic_governance.contract import decode_verified_identity as decode
from fgentic_governance.retrieval import vocabulary
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason
from fgentic_governance.serving.strict_json import Refused, loads

PROTOCOL_VERSION: Final = vocabulary.MCP_PROTOCOL_VERSION[1]
VERSION_HEADER: Final = vocabulary.MCP_PROTOCOL_VERSION[0]
INITIALIZE: Final = "initialize"
METHODS: Final = frozenset({INITIALIZE, "notifications/initialized", "ping", "tools/list",
                            "tools/call"})
"""The whole protocol surface of a one-tool server (no resources, prompts, completion,
logging, subscriptions or the 2026-07-28 ``server/discover``)."""

RequestId = str | int | None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request the SDK may see: its method, its id (None for a notification) and the
    identity decoded from its one carrier."""

    method: str
    request_id: RequestId
    identity: VerifiedIdentity


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, its id and method when they could be read (to answer
    JSON-RPC and to label the metric, which bounds the method to the table)."""

    error: RetrievalServerError
    request_id: RequestId = None
    method: object = None


def _message(body: bytes) -> dict[str, Any]:
    try:
        message = loads(body)
    except Refused:
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED) from None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)
    if not isinstance(message.get("method"), str):
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)
    return message


def _request_id(message: Mapping[str, Any]) -> RequestId:
    value = message.get("id")
    # bool is an int in Python but not a JSON-RPC id
    if value is None or (isinstance(value, str | int) and not isinstance(value, bool)):
        return value
    raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)


def _check_params(method: str, params: Any) -> None:
    """``params`` absent or an object, and a tool call's name a string and its arguments an
    object: the SDK answers anything else with a validation error that quotes the input."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)
    if method == "tools/call" and (not isinstance(params.get("name"), str)
                                   or not isinstance(params.get("arguments", {}), dict)):
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)


def _check_version(method: str, params: Any, versions: Sequence[str]) -> None:
    if method == INITIALIZE:
        offered = params.get("protocolVersion") if isinstance(params, dict) else None
        if offered != PROTOCOL_VERSION or any(v != PROTOCOL_VERSION for v in versions):
            raise RetrievalServerError(RetrievalServerReason.PROTOCOL_VERSION_REFUSED)
    elif list(versions) != [PROTOCOL_VERSION]:
        raise RetrievalServerError(RetrievalServerReason.PROTOCOL_VERSION_REFUSED)


def admit(body: bytes, *, carriers: Sequence[str], versions: Sequence[str],
          agent: AgentRef, now: int) -> Admitted | Refusal:
    """The decision for one POST: ``carriers`` and ``versions`` are every value of
    X-Fgentic-Identity and of MCP-Protocol-Version as received, repeats kept."""
    request_id: RequestId = None
    method: object = None
    try:
        message = _message(body)
        method = message["method"]
        request_id = _request_id(message)
        try:
            identity = decode(carriers, now=now, agent=agent)
        except ContractError as exc:
            raise RetrievalServerError(exc.code) from None
        if method not in METHODS:
            raise RetrievalServerError(RetrievalServerReason.METHOD_REFUSED)
        _check_params(method, message.get("params"))
        _check_version(method, message.get("params"), versions)
    except RetrievalServerError as error:
        return Refusal(error, request_id, method)
    return Admitted(str(method), request_id, identity)
