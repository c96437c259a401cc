"""Fuzzing the projection decoder: arbitrary header values and documents never raise anything
but ContractError, and its message never echoes input.

Inputs range from raw bytes and text through base64url of arbitrary bytes and JSON-like values
to structural mutations (replace, delete, add, duplicate a name, re-encode non-canonically) of
the ADR's valid documents, so the fuzzer reaches every decoding stage, not just the first.
Every generated string carries SENTINEL so an echo is detectable anywhere in the message.
"""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgentic_governance import contract
from fgentic_governance.contract import Code, ContractError
from fgentic_governance.contract.shapes import FIELD_NAMES, AgentRef
from tests.support.doc_paths import drop, paths, put

DATA = Path(contract.__file__).parent / "testdata"
SENTINEL = "Zq9xSENT"
NOW = 1784117000
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The one shape a contract message may have: a code, optionally " at " and a field path made of
# the contract's own field names and indices.
_CODES = "|".join(c.value for c in Code)
_MESSAGE = re.compile(rf"^({_CODES})( at ([a-z_][a-z0-9_]*(\[[0-9]+\])*)"
                      rf"(\.[a-z_][a-z0-9_]*(\[[0-9]+\])*)*)?$")


@cache
def valid(stem: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"adr0017_{stem}.json").read_text())
    return doc


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def assert_content_free(exc: ContractError) -> None:
    """The message is a bounded code and a path of contract field names, nothing else."""
    for text in (str(exc), repr(exc), *(str(a) for a in exc.args)):
        assert SENTINEL not in text
    match = _MESSAGE.fullmatch(str(exc))
    assert match is not None, str(exc)
    assert isinstance(exc.code, Code)
    names = re.findall(r"[a-z_][a-z0-9_]*", exc.path)
    assert set(names) <= FIELD_NAMES
    # No parser or pydantic exception (whose text may quote input) rides along.
    assert exc.__cause__ is None
    assert exc.__context__ is None or exc.__suppress_context__


TEXT = st.text(max_size=24).map(lambda s: SENTINEL + s)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12)


@st.composite
def mutated(draw: st.DrawFn, stem: str) -> bytes:
    """A valid document with 1-3 structural mutations, encoded (mostly) as JCS."""
    doc: Any = valid(stem)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)))
        action = draw(st.sampled_from(["replace", "delete", "add", "keep"]))
        if action == "replace":
            doc = put(doc, where, draw(JSON))
        elif action == "delete" and where:
            doc = drop(doc, where)
        elif action == "add":
            target: Any = doc
            for step in where:
                target = target[step]
            if isinstance(target, dict):
                key = draw(st.sampled_from(sorted(FIELD_NAMES)) | TEXT)
                doc = put(doc, where, {**target, key: draw(JSON)})
    style = draw(st.sampled_from(["jcs", "jcs", "spaced", "unsorted", "ascii", "duplicate"]))
    if style == "duplicate" and isinstance(doc, dict) and doc:
        first = next(iter(sorted(doc)))
        body = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        dup = json.dumps({first: doc[first]}, separators=(",", ":"), ensure_ascii=False)
        return (body[:-1] + "," + dup[1:]).encode("utf-8", "surrogatepass")
    text = json.dumps(doc, sort_keys=style != "unsorted", ensure_ascii=style == "ascii",
                      separators=(", ", ": ") if style == "spaced" else (",", ":"))
    return text.encode("utf-8", "surrogatepass")


HEADER_VALUE = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64),
    st.binary(max_size=600).map(b64),
    JSON.map(lambda v: b64(json.dumps(v, sort_keys=True, separators=(",", ":")).encode())),
    mutated("matrix_projection").map(b64),
    mutated("oauth_projection").map(b64),
    st.just("A" * 8193),
)
VALUES = st.lists(HEADER_VALUE, max_size=3)
AGENTS = st.none() | st.just(AgentRef(name="knowledge-agent", namespace="kagent"))


@FUZZ
@given(VALUES, st.integers(0, 2**53 - 1), AGENTS)
def test_decode_identity_raises_only_contract_errors(
    values: list[str | bytes], now: int, agent: AgentRef | None,
) -> None:
    try:
        contract.decode_identity(values, now=now, agent=agent)
    except ContractError as exc:
        assert_content_free(exc)


@FUZZ
@given(st.lists(st.one_of(HEADER_VALUE, mutated("matrix_projection").map(b64)), max_size=3),
       st.sampled_from(["@alice:org-a.example", SENTINEL]))
def test_decode_room_context_raises_only_contract_errors(
    values: list[str | bytes], user_id: str,
) -> None:
    try:
        contract.decode_room_context(values, user_id=user_id)
    except ContractError as exc:
        assert_content_free(exc)


DOCUMENT = st.one_of(
    st.binary(max_size=200), st.text(max_size=200),
    mutated("matrix_projection"), mutated("oauth_projection"), mutated("room_snapshot"),
    mutated("room_snapshot").map(lambda raw: raw.decode("utf-8", "surrogatepass")),
)


@FUZZ
@given(DOCUMENT, st.none() | st.just("org-a.example"))
def test_loaders_raise_only_contract_errors(data: str | bytes, local: str | None) -> None:
    for load in (contract.load_identity, contract.load_room_context):
        try:
            load(data)
        except ContractError as exc:
            assert_content_free(exc)
    try:
        contract.load_snapshot(data, local_server=local)
    except ContractError as exc:
        assert_content_free(exc)


def test_the_unmutated_documents_decode() -> None:
    """Anchor: the seeds themselves are valid, so mutations start from accepted input."""
    for stem in ("matrix_projection", "oauth_projection"):
        raw = json.dumps(valid(stem), sort_keys=True, separators=(",", ":")).encode()
        identity = contract.decode_identity([b64(raw)], now=NOW, agent=None)
        assert contract.encode_identity(identity) == b64(raw)
    assert contract.load_snapshot(json.dumps(valid("room_snapshot")))
