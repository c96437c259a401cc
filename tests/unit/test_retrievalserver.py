"""The retrieval server's pure parts: which requests reach the SDK (the guard), the
tool's argument checks and result, the embeddings answer, and the order of a tool call's steps
(nothing is embedded for an unusable projection or bad arguments)."""

from __future__ import annotations

import json
from math import nan
from typing import Any

import pytest

from fgentic_governance import contract
from fgentic_governance.contract import AgentRef, Code
from fgentic_governance.retrieval.search.prefilter import Hit
from fgentic_governance.retrievalserver import guard, http, protocol, tool
from fgentic_governance.retrievalserver.codes import (
    RetrievalServerError,
    RetrievalServerReason,
    http_status,
)
from fgentic_governance.retrievalserver.embeddings import vector_of
from fgentic_governance.retrievalserver.service import RetrievalService
from tests.support.mcp_requests import VERSION, carrier, rpc_body
from tests.support.projector import AGENT, NOW

INIT = rpc_body("initialize", {"protocolVersion": VERSION, "capabilities": {},
                          "clientInfo": {"name": "t", "version": "1"}})
CALL = rpc_body("tools/call", {"name": "search_knowledge", "arguments": {"query": "retention"}})


def admit(body: bytes, *, carriers: list[str] | None = None,
          versions: list[str] | None = None, now: int = NOW + 1) -> guard.Admitted | guard.Refusal:
    return guard.admit(body, carriers=[carrier()] if carriers is None else carriers,
                       versions=[VERSION] if versions is None else versions,
                       agent=AGENT, now=now)


def refused(decision: guard.Admitted | guard.Refusal) -> object:
    assert isinstance(decision, guard.Refusal), decision
    return decision.error.code


# -- the guard -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", sorted(guard.METHODS - {"initialize"}))
def test_every_method_of_the_table_is_admitted_with_the_version_header(method: str) -> None:
    decision = admit(rpc_body(method, {} if method != "tools/call" else {"name": "x"}))
    assert isinstance(decision, guard.Admitted)
    assert decision.method == method
    assert decision.identity.identity.agent == AGENT


def test_initialize_is_admitted_offering_exactly_2025_11_25_without_the_header() -> None:
    assert isinstance(admit(INIT, versions=[]), guard.Admitted)
    assert isinstance(admit(INIT, versions=[VERSION]), guard.Admitted)


@pytest.mark.parametrize("offered", ["2025-06-18", "2026-07-28", "2024-11-05", None, 20251125])
def test_initialize_offering_anything_else_is_refused(offered: object) -> None:
    body = rpc_body("initialize", {"protocolVersion": offered, "capabilities": {},
                              "clientInfo": {"name": "t", "version": "1"}})
    assert refused(admit(body, versions=[])) is RetrievalServerReason.PROTOCOL_VERSION_REFUSED


def test_initialize_with_another_version_header_is_refused() -> None:
    assert refused(admit(INIT, versions=["2025-06-18"])) is (
        RetrievalServerReason.PROTOCOL_VERSION_REFUSED)


@pytest.mark.parametrize("versions", [[], ["2025-06-18"], ["2026-07-28"], [VERSION, VERSION],
                                      ["2025-11-25 "], ["garbage"]],
                         ids=["absent", "older", "newer", "repeated", "space", "garbage"])
def test_later_requests_carry_exactly_the_negotiated_revision(versions: list[str]) -> None:
    assert refused(admit(CALL, versions=versions)) is RetrievalServerReason.PROTOCOL_VERSION_REFUSED


@pytest.mark.parametrize("method", ["resources/list", "resources/read", "prompts/list",
                                    "prompts/get", "completion/complete", "logging/setLevel",
                                    "server/discover", "tasks/list", "sampling/createMessage",
                                    "Tools/call", ""])
def test_every_other_method_is_refused(method: str) -> None:
    assert refused(admit(rpc_body(method, {}))) is RetrievalServerReason.METHOD_REFUSED


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
    b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',  # batches are not 2025-11-25
    b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}',  # duplicate name
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}', b'{"jsonrpc":"2.0","id":{},"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":7}', b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
], ids=["empty", "text", "array", "jsonrpc-1", "batch", "duplicate", "bool-id", "object-id",
        "number-method", "overflow"])
def test_anything_but_one_json_rpc_object_is_malformed(body: bytes) -> None:
    assert refused(admit(body)) is RetrievalServerReason.REQUEST_MALFORMED


@pytest.mark.parametrize(("carriers", "code"), [
    ([], Code.HEADER_MISSING),
    (["a", "b"], Code.HEADER_DUPLICATE),
    ("same-twice", Code.HEADER_DUPLICATE),
    (["A" * 8193], Code.HEADER_TOO_LARGE),
    (["not base64!"], Code.NOT_BASE64URL),
    ("other-agent", Code.AGENT_MISMATCH),
    ("expired", Code.EXPIRED),
])
def test_every_request_needs_exactly_one_valid_carrier_for_the_binding_agent(
    carriers: list[str] | str, code: Code,
) -> None:
    named = {"same-twice": [carrier(), carrier()],
             "other-agent": [carrier(agent=AgentRef(namespace="fgentic-demo", name="other"))],
             "expired": [carrier(iat=NOW - 601)]}
    values = named[carriers] if isinstance(carriers, str) else carriers
    for body in (INIT, CALL, rpc_body("tools/list")):
        decision = admit(body, carriers=values, versions=[] if body is INIT else None)
        assert refused(decision) is code
        assert http_status(code) == 403


@pytest.mark.parametrize("body", [
    rpc_body("tools/call", "the query text itself"),
    rpc_body("tools/list", [1, 2]),
    rpc_body("tools/call", {"name": 7, "arguments": {"query": "x"}}),
    rpc_body("tools/call", {"name": "search_knowledge", "arguments": "the query text itself"}),
], ids=["params-string", "params-array", "name-number", "arguments-string"])
def test_params_the_sdk_would_echo_are_malformed_here(body: bytes) -> None:
    """The SDK answers these with a validation error that quotes the input: never sent on."""
    decision = admit(body)
    assert refused(decision) is RetrievalServerReason.REQUEST_MALFORMED
    assert isinstance(decision, guard.Refusal) and decision.method in guard.METHODS


def test_a_refusal_keeps_the_request_id_and_no_input() -> None:
    decision = admit(rpc_body("resources/list", {"uri": "secret-sentinel"}, request_id="r-7"))
    assert isinstance(decision, guard.Refusal)
    assert decision.request_id == "r-7"
    assert str(decision.error) == "METHOD_REFUSED"


# -- the tool --------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "code"), [
    (None, RetrievalServerReason.ARGUMENTS_INVALID),
    ({}, RetrievalServerReason.ARGUMENTS_INVALID),
    ({"query": 1}, RetrievalServerReason.ARGUMENTS_INVALID),
    ({"query": "x", "extra": 1}, RetrievalServerReason.ARGUMENTS_INVALID),
    ({"query": ""}, RetrievalServerReason.QUERY_INVALID),
    ({"query": "   "}, RetrievalServerReason.QUERY_INVALID),
    ({"query": "\ud800"}, RetrievalServerReason.QUERY_INVALID),
    ({"query": "x" * 513}, RetrievalServerReason.QUERY_TOO_LARGE),
    ({"query": "é" * 257}, RetrievalServerReason.QUERY_TOO_LARGE),  # 257 code points, 514 bytes
    ({"query": "x", "k": 0}, RetrievalServerReason.K_INVALID),
    ({"query": "x", "k": 11}, RetrievalServerReason.K_INVALID),
    ({"query": "x", "k": True}, RetrievalServerReason.K_INVALID),
    ({"query": "x", "k": 2.0}, RetrievalServerReason.K_INVALID),
])
def test_arguments_are_exactly_query_and_k(arguments: Any, code: RetrievalServerReason) -> None:
    with pytest.raises(RetrievalServerError) as caught:
        tool.parse_arguments(arguments)
    assert caught.value.code is code
    assert str(caught.value) == code.value  # nothing of the input


def test_bounds_are_inclusive() -> None:
    assert tool.parse_arguments({"query": "é" * 256, "k": 10}) == tool.Query("é" * 256, 10)
    assert tool.parse_arguments({"query": "x"}).k == tool.DEFAULT_K


def test_schemas_are_2020_12_objects_that_allow_nothing_else() -> None:
    for schema in (tool.INPUT_SCHEMA, tool.OUTPUT_SCHEMA):
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert tool.INPUT_SCHEMA["properties"]["k"]["maximum"] == tool.MAX_K


def test_result_is_structured_and_scored_by_similarity() -> None:
    found = tool.result([Hit(7, "text", "docs/a.md", 0.25)])
    assert found == {"chunks": [{"chunk_id": "7", "source": "docs/a.md", "text": "text",
                                 "score": 0.75}]}


def test_a_chunk_without_a_distance_is_left_out_never_scored_nan() -> None:
    """A chunk stored without a direction (all zero) has a NaN cosine distance to anything."""
    found = tool.result([Hit(7, "text", "docs/a.md", 0.25), Hit(8, "zero", "docs/z.md", nan)])
    assert [c["chunk_id"] for c in found["chunks"]] == ["7"]


def test_no_answer_with_a_nan_goes_out() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        protocol._text({"chunks": [{"score": nan}]})
    for number in (b"NaN", b"Infinity", b"-Infinity"):
        body = b'{"jsonrpc":"2.0","id":1,"result":{"score":' + number + b"}}"
        assert not http._clean(protocol.Answer(200, [], bytearray(body)))
    assert http._clean(protocol.Answer(200, [], bytearray(
        b'{"jsonrpc":"2.0","id":1,"result":{"score":0.5}}')))


# -- the embeddings answer -------------------------------------------------------------------


def _answer(data: Any) -> bytes:
    return json.dumps({"object": "list", "data": data}).encode()


def test_one_vector_of_the_dimension_is_taken() -> None:
    assert vector_of(_answer([{"embedding": [0.5, -1, 0]}]), 3) == [0.5, -1.0, 0.0]
    # Far from float4's limits at both ends, as no real embedding comes near them.
    assert vector_of(_answer([{"embedding": [1e-18, 0, 0]}]), 3) == [1e-18, 0.0, 0.0]
    assert vector_of(_answer([{"embedding": [1e18, 1e18, 1]}]), 3) == [1e18, 1e18, 1.0]


@pytest.mark.parametrize("raw", [
    b"oops", _answer([]), _answer([{"embedding": [1, 2]}, {"embedding": [1, 2, 3]}]),
    _answer([{"embedding": [1, 2]}]), _answer([{"embedding": [1, 2, "3"]}]),
    _answer([{"embedding": [1, 2, True]}]), _answer([{"embedding": "AAAA"}]),
    b'{"data":[{"embedding":[1,2,NaN]}]}', b'{"data":[{"embedding":[1,2,1e999]}]}',
    b'{"data":[{"embedding":[1,2,3]}]}' + b" " * (1 << 20),
    _answer([{"index": 0.0, "embedding": [1, 2, 3]}]),
    _answer([{"index": True, "embedding": [1, 2, 3]}]),
    _answer([{"index": "0", "embedding": [1, 2, 3]}]),
    # The provider's fault, not the store's: float4 cannot hold 1e39, and a vector with no
    # length (zero, or squares that float4 flushes to zero or past its range) ranks every
    # chunk at a NaN distance.
    _answer([{"embedding": [1, 2, 1e39]}]), _answer([{"embedding": [1, 2, -1e39]}]),
    _answer([{"embedding": [1, 2, 10**39]}]), _answer([{"embedding": [1, 2, 10**400]}]),
    _answer([{"embedding": [0, 0, 0]}]), _answer([{"embedding": [0.0, -0.0, 0]}]),
    _answer([{"embedding": [1e-30, 1e-30, 0]}]), _answer([{"embedding": [1e20, 1, 1]}]),
])
def test_anything_else_is_embeddings_unavailable(raw: bytes) -> None:
    with pytest.raises(RetrievalServerError) as caught:
        vector_of(raw, 3)
    assert caught.value.code is RetrievalServerReason.EMBEDDINGS_UNAVAILABLE


# -- the order of a call's steps -------------------------------------------------------------


class CountingEmbedder:
    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, text: str) -> list[float]:
        self.calls += 1
        raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)


async def test_nothing_is_embedded_for_an_expired_projection_or_bad_arguments() -> None:
    verified = contract.decode_verified_identity([carrier()], now=NOW + 1, agent=AGENT)
    embedder = CountingEmbedder()
    late = RetrievalService(None, embedder, clock=lambda: NOW + 601)  # type: ignore[arg-type]
    with pytest.raises(RetrievalServerError) as caught:
        await late.call(verified, {"query": "retention"})
    assert caught.value.code is Code.EXPIRED
    on_time = RetrievalService(None, embedder, clock=lambda: NOW + 2)  # type: ignore[arg-type]
    with pytest.raises(RetrievalServerError) as caught:
        await on_time.call(verified, {"query": "x" * 600})
    assert caught.value.code is RetrievalServerReason.QUERY_TOO_LARGE
    assert embedder.calls == 0
    with pytest.raises(RetrievalServerError) as caught:
        await on_time.call(verified, {"query": "retention"})
    assert caught.value.code is RetrievalServerReason.EMBEDDINGS_UNAVAILABLE
    assert embedder.calls == 1


def test_refusals_carry_no_library_error_as_context() -> None:
    """A codec or parser error quotes its input; ``from None`` would still keep it as
    ``__context__``, so every refusal is raised outside the handler."""
    for call in (lambda: tool.parse_arguments({"query": "\ud800 sentinel"}),
                 lambda: vector_of(b"not json sentinel", 3),
                 lambda: vector_of(_answer([{"index": "x", "embedding": [1]}, {}]), 1)):
        with pytest.raises(RetrievalServerError) as caught:
            call()
        assert caught.value.__context__ is None and caught.value.__cause__ is None
