"""The corpus ingestion contract (ADR 0017 §15): every field checked exactly, a bad row refused
with a bounded code and nothing of its content, and the stored ACL the one the prefilter reads."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgentic_governance import contract
from fgentic_governance.retrieval.search.acl_reference import admits
from fgentic_governance.retrieval.search.ingest import (
    BOM,
    CLASSIFICATIONS,
    RowCode,
    RowRefused,
    parse_row,
    read_lines,
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


# -- the file -------------------------------------------------------------------------------------


class _Reads(io.BytesIO):
    """Records the largest read asked for: a long line is never read whole."""

    largest = 0

    def readline(self, size: int | None = -1, /) -> bytes:
        assert size is not None and size > 0
        self.largest = max(self.largest, size)
        return super().readline(size)


def test_lines_are_numbered_and_bounded_and_a_long_one_is_skipped_in_bounded_reads() -> None:
    data = _Reads(b"a\n\n  \n" + b"x" * 100 + b"\nbbbb\n" + b"y" * 11 + b"\ncccc")
    assert list(read_lines(data, limit=10)) == [
        (1, b"a\n"), (4, None), (5, b"bbbb\n"), (6, None), (7, b"cccc")]
    assert data.largest == 11


def test_a_line_of_exactly_the_bound_is_read() -> None:
    assert list(read_lines(io.BytesIO(b"x" * 10 + b"\n" + b"y" * 10), limit=10)) == [
        (1, b"x" * 10 + b"\n"), (2, b"y" * 10)]
    # A BOM counts: a too-long first line is not cut into two lines once it is stripped.
    assert list(read_lines(io.BytesIO(BOM + b"x" * 20 + b"\nz"), limit=10)) == [
        (1, None), (2, b"z")]


def test_a_bom_before_line_1_is_not_part_of_the_row() -> None:
    data = io.BytesIO(BOM + line().encode() + b"\n" + BOM + line(id=8).encode() + b"\n")
    (_, first), (_, second) = read_lines(data)
    assert first is not None and parse_row(first).id == 7
    with pytest.raises(RowRefused) as caught:  # only the file's first line may carry one
        parse_row(second or b"")
    assert caught.value.code is RowCode.NOT_JSON
