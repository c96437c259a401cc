"""The corpus ingestion contract (ADR 0017 §15): every field checked exactly, a bad row refused
with a bounded code and nothing of its content, and the stored ACL the one the prefilter reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgentic_governance import contract
from fgentic_governance.retrieval.search.acl_reference import admits
from fgentic_governance.retrieval.search.ingest import (
    CLASSIFICATIONS,
    RowCode,
    RowRefused,
    parse_row,
)
from tests.support.projector import AGENT, NOW, room_context

ALICE = {"kind": "matrix", "principal": "@alice:org-a.example"}
BOB = {"kind": "bridged_matrix", "network": "slack", "principal": "@slack-bob:org-a.example"}
GOOD: dict[str, Any] = {"id": 7, "text": "retention is thirty days", "source": "docs/a.md",
                        "classification": "public", "allowed_principals": [ALICE, BOB],
                        "allowed_groups": ["partner/org-b/docs"]}


def line(**changes: Any) -> str:
    doc = {**GOOD, **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not _DROP})


_DROP = object()


def test_a_good_row_keeps_its_acl_as_the_prefilter_reads_it() -> None:
    row = parse_row(line(embedding=[0.5] * 768))
    assert (row.id, row.text, row.source) == (7, GOOD["text"], "docs/a.md")
    assert row.metadata == {"classification": "public", "allowed_principals": [ALICE, BOB],
                            "allowed_groups": ["partner/org-b/docs"]}
    assert row.embedding == (0.5,) * 768
    assert parse_row(line()).embedding is None
    context = room_context(caller=ALICE, audience=[BOB, ALICE])  # the contract sorts them
    projection = contract.stamp_matrix(context, agent=AGENT, iat=NOW)
    assert admits(projection, row.metadata)


@pytest.mark.parametrize("classification", CLASSIFICATIONS)
def test_every_section_15_classification_is_storable(classification: str) -> None:
    assert parse_row(line(classification=classification)).metadata["classification"] == (
        classification)


@pytest.mark.parametrize(("raw", "code"), [
    ("not json", RowCode.NOT_JSON),
    ('{"id": NaN}', RowCode.NOT_JSON),
    (line()[:-1] + ', "classification": "secret"}', RowCode.DUPLICATE_NAME),
    ('{"id": 7, "text": "t", "source": "s", "classification": "public", "allowed_principals": '
     '[{"kind": "matrix", "principal": "@a:b.example", "principal": "@c:b.example"}]}',
     RowCode.DUPLICATE_NAME),
    ("[1, 2]", RowCode.NOT_OBJECT),
    (line(extra=1), RowCode.UNKNOWN_FIELD),
    (line(id=0), RowCode.ID_INVALID),
    (line(id=True), RowCode.ID_INVALID),
    (line(id="7"), RowCode.ID_INVALID),
    (line(id=1 << 63), RowCode.ID_INVALID),
    (line(text=""), RowCode.TEXT_INVALID),
    (line(text="  "), RowCode.TEXT_INVALID),
    (line(text="a\u0000b"), RowCode.TEXT_INVALID),
    (line(text="\ud800 lone"), RowCode.NOT_JSON),  # strict JSON: no lone surrogate escape
    (line(text="x" * (16 * 1024 + 1)), RowCode.TEXT_TOO_LARGE),
    (line(source=_DROP), RowCode.SOURCE_INVALID),
    (line(source="s" * 2049), RowCode.SOURCE_INVALID),
    (line(classification="Public"), RowCode.CLASSIFICATION_INVALID),
    (line(classification=None), RowCode.CLASSIFICATION_INVALID),
    (line(classification=_DROP), RowCode.CLASSIFICATION_INVALID),
    (line(classification=["public"]), RowCode.CLASSIFICATION_INVALID),
    (line(allowed_principals=[{**ALICE, "extra": "x"}]), RowCode.PRINCIPAL_INVALID),
    (line(allowed_principals=[{**ALICE, "network": "slack"}]), RowCode.PRINCIPAL_INVALID),
    (line(allowed_principals=[{"kind": "matrix", "principal": "@alice"}]),
     RowCode.PRINCIPAL_INVALID),
    (line(allowed_principals=["@alice:org-a.example"]), RowCode.PRINCIPAL_INVALID),
    (line(allowed_principals={"0": ALICE}), RowCode.PRINCIPAL_INVALID),
    (line(allowed_groups=["partner/org-b"]), RowCode.GROUP_INVALID),
    (line(allowed_groups=["PARTNER/org-b/docs"]), RowCode.GROUP_INVALID),
    (line(allowed_groups=[" partner/org-b/docs"]), RowCode.GROUP_INVALID),
    (line(allowed_groups="partner/org-b/docs"), RowCode.GROUP_INVALID),
    (line(allowed_principals=[], allowed_groups=[]), RowCode.ACL_EMPTY),
    (line(allowed_principals=_DROP, allowed_groups=_DROP), RowCode.ACL_EMPTY),
    (line(embedding=[0.5] * 767), RowCode.EMBEDDING_INVALID),
    (line(embedding=[0.5] * 767 + [True]), RowCode.EMBEDDING_INVALID),
    (line(embedding=[0.5] * 767 + ["1"]), RowCode.EMBEDDING_INVALID),
    ('{"id": 7, "text": "t", "source": "s", "classification": "public", "allowed_groups": '
     '["partner/org-b/docs"], "embedding": [' + "0.5," * 767 + "1e400]}",
     RowCode.NOT_JSON),  # strict JSON: a number beyond a double
    # What pgvector's float4 cannot store, or cosine cannot rank (a NaN distance to any query).
    (line(embedding=[0.5] * 767 + [1e39]), RowCode.EMBEDDING_INVALID),
    (line(embedding=[0.5] * 767 + [-(10**39)]), RowCode.EMBEDDING_INVALID),
    (line(embedding=[0.5] * 767 + [10**400]), RowCode.EMBEDDING_INVALID),
    (line(embedding=[0] * 768), RowCode.EMBEDDING_INVALID),
    (line(embedding=[1e-30] * 768), RowCode.EMBEDDING_INVALID),
    (line(embedding=[1e19] * 768), RowCode.EMBEDDING_INVALID),
    ('{"id": 7, "text": "t", "source": "s", "classification": "public", "allowed_groups": '
     '["partner/org-b/docs"], "embedding": [' + "0.5," * 767 + "1e400]}",
     RowCode.NOT_JSON),  # strict JSON: a number beyond a double
])
def test_each_bad_field_is_refused_by_its_code(raw: str, code: RowCode) -> None:
    with pytest.raises(RowRefused) as caught:
        parse_row(raw)
    assert caught.value.code is code
    assert str(caught.value) == code.value
    assert caught.value.__context__ is None or isinstance(caught.value.__context__, RowRefused)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted([*GOOD, "embedding", "other"])), _JSON,
                       max_size=8))
def test_any_object_is_a_row_or_a_code_never_another_error(doc: dict[str, Any]) -> None:
    try:
        text = json.dumps(doc)
    except ValueError:
        return
    try:
        row = parse_row(text)
    except RowRefused as refused:
        assert refused.code in RowCode
        return
    assert row.metadata["classification"] in CLASSIFICATIONS
    assert row.metadata["allowed_principals"] or row.metadata["allowed_groups"]
