"""The ingestion contract of the knowledge corpus (ADR 0017 §15) and its idempotent bulk load.

One JSON Lines row is one chunk::

    {"id": 17, "text": "...", "source": "docs/retention.md", "classification": "public",
     "allowed_principals": [{"kind": "matrix", "principal": "@alice:org-a.example"}],
     "allowed_groups": ["partner/org-b/docs"], "embedding": [768 numbers, optional]}

:func:`parse_row` checks a row exactly, or refuses it with a bounded code (never the value):
- ``classification`` is one of the §15 enum. Only ``public`` and ``approved_non_public`` are ever
  returned: the prefilter denies the rest inside the database.
- Each ``allowed_principals`` entry is an exact audience-entry object (the contract's own
  ``Principal`` type).
- Each ``allowed_groups`` entry is ``partner/<policy>/<group>``.
- A row must name at least one reader, and names no other field.

The ACL is stored in ``metadata`` exactly as the prefilter's derived columns read it
(``corpus.py``). :func:`load` upserts by chunk id: a re-load replaces a chunk and duplicates
nothing. A chunk id belongs to the ``source`` that created it: a row of another source replaces
it only when the caller says so (``replace_other_sources``), since the row brings its own ACL.

:func:`read_lines` reads a file line by line within :data:`MAX_LINE_BYTES`, so no line, however
long, is held in memory whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, BinaryIO, Final

import asyncpg
from pydantic import TypeAdapter, ValidationError

from fgentic_governance.contract import Principal
from fgentic_governance.contract.limits import PARTNER_GROUP, utf8_bytes
from fgentic_governance.retrieval.search.corpus import (
    EMBEDDING_DIMENSIONS,
    TABLE,
    is_vector,
    vector_text,
)
from fgentic_governance.serving import strict_json
from fgentic_governance.serving.strict_json import Refusal, Refused

CLASSIFICATIONS: Final = ("public", "approved_non_public", "restricted", "regulated", "secret",
                          "authentication")
"""ADR 0017 §15: every value a chunk may carry; the prefilter admits the first two only."""
MAX_TEXT_BYTES: Final = 16 * 1024
MAX_SOURCE_BYTES: Final = 2048
MAX_READERS: Final = 1024
MAX_ID: Final = (1 << 63) - 1
MAX_LINE_BYTES: Final = 4 << 20
"""A line's bound. The largest row the contract admits (16 KiB of text, 1,024 principals and
1,024 groups, 1,024 numbers) is well under 1 MiB as an ordinary encoder writes it."""
BOM: Final = b"\xef\xbb\xbf"
"""A UTF-8 byte order mark, which some editors and exporters write first in a file."""
FIELDS: Final = frozenset({"id", "text", "source", "classification", "allowed_principals",
                           "allowed_groups", "embedding"})
_PRINCIPAL: Final = TypeAdapter(Principal)
_GROUP: Final = re.compile(PARTNER_GROUP)


class RowCode(StrEnum):
    NOT_JSON = "NOT_JSON"
    """Not strict JSON: bad syntax, NaN or Infinity, too deep."""
    DUPLICATE_NAME = "DUPLICATE_NAME"
    """A member named twice in one object (which one counts would be a parser's choice)."""
    NOT_OBJECT = "NOT_OBJECT"
    UNKNOWN_FIELD = "UNKNOWN_FIELD"
    ID_INVALID = "ID_INVALID"
    TEXT_INVALID = "TEXT_INVALID"
    TEXT_TOO_LARGE = "TEXT_TOO_LARGE"
    SOURCE_INVALID = "SOURCE_INVALID"
    CLASSIFICATION_INVALID = "CLASSIFICATION_INVALID"
    PRINCIPAL_INVALID = "PRINCIPAL_INVALID"
    GROUP_INVALID = "GROUP_INVALID"
    ACL_EMPTY = "ACL_EMPTY"
    """Neither a principal nor a group: a chunk nobody could ever read."""
    EMBEDDING_INVALID = "EMBEDDING_INVALID"
    EMBEDDING_MISSING = "EMBEDDING_MISSING"
    """No ``embedding`` in the row, and no endpoint to make one."""
    DUPLICATE_ID = "DUPLICATE_ID"
    """The same id earlier in the same file."""
    LINE_TOO_LONG = "LINE_TOO_LONG"
    """A line over ``MAX_LINE_BYTES``: skipped without being read into memory."""
    ID_OF_ANOTHER_SOURCE = "ID_OF_ANOTHER_SOURCE"
    """The id is a stored chunk of another ``source``; only ``--replace-other-sources``
    replaces it (and its ACL)."""


class RowRefused(ValueError):
    """A refused row; ``str()`` is the code only."""

    def __init__(self, code: RowCode) -> None:
        super().__init__(code.value)
        self.code = code


@dataclass(frozen=True, slots=True)
class Row:
    id: int
    text: str
    source: str
    metadata: dict[str, Any]
    embedding: tuple[float, ...] | None


def _text(value: Any, code: RowCode, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RowRefused(code)
    size = utf8_bytes(value)
    if size is None or "\x00" in value:  # PostgreSQL text cannot hold NUL
        raise RowRefused(code)
    if size > limit:
        raise RowRefused(RowCode.TEXT_TOO_LARGE if code is RowCode.TEXT_INVALID else code)
    return value


def _principals(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > MAX_READERS:
        raise RowRefused(RowCode.PRINCIPAL_INVALID)
    checked = []
    for entry in value:
        failed = False
        try:
            principal = _PRINCIPAL.validate_python(entry, strict=True)
        except ValidationError:
            failed = True
        if failed or not isinstance(entry, dict):
            raise RowRefused(RowCode.PRINCIPAL_INVALID)
        checked.append(principal.model_dump())
    return checked


def _groups(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_READERS:
        raise RowRefused(RowCode.GROUP_INVALID)
    if not all(isinstance(g, str) and _GROUP.fullmatch(g) for g in value):
        raise RowRefused(RowCode.GROUP_INVALID)
    return list(value)


def _embedding(value: Any, dimensions: int) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not is_vector(value, dimensions):
        raise RowRefused(RowCode.EMBEDDING_INVALID)
    return tuple(float(x) for x in value)


def parse_row(line: str | bytes, dimensions: int = EMBEDDING_DIMENSIONS) -> Row:
    """One checked chunk (an ``embedding`` of ``dimensions`` numbers, the corpus's), or
    RowRefused with the first problem's code."""
    raw = line.encode(errors="surrogateescape") if isinstance(line, str) else line
    refusal: Refusal | None = None
    try:
        doc = strict_json.loads(raw)
    except Refused as refused:
        refusal = refused.code
    if refusal is not None:  # duplicate names are ambiguous ACLs: never the last one wins
        raise RowRefused(RowCode.DUPLICATE_NAME if refusal is Refusal.DUPLICATE_NAME
                         else RowCode.NOT_JSON)
    if not isinstance(doc, dict):
        raise RowRefused(RowCode.NOT_OBJECT)
    if not set(doc) <= FIELDS:
        raise RowRefused(RowCode.UNKNOWN_FIELD)
    chunk_id = doc.get("id")
    if isinstance(chunk_id, bool) or not isinstance(chunk_id, int) or not 1 <= chunk_id <= MAX_ID:
        raise RowRefused(RowCode.ID_INVALID)
    text = _text(doc.get("text"), RowCode.TEXT_INVALID, MAX_TEXT_BYTES)
    source = _text(doc.get("source"), RowCode.SOURCE_INVALID, MAX_SOURCE_BYTES)
    if doc.get("classification") not in CLASSIFICATIONS:
        raise RowRefused(RowCode.CLASSIFICATION_INVALID)
    principals = _principals(doc.get("allowed_principals", []))
    groups = _groups(doc.get("allowed_groups", []))
    if not principals and not groups:
        raise RowRefused(RowCode.ACL_EMPTY)
    metadata = {"classification": doc["classification"], "allowed_principals": principals,
                "allowed_groups": groups}
    return Row(chunk_id, text, source, metadata, _embedding(doc.get("embedding"), dimensions))


# -- the file ------------------------------------------------------------------------------------


def read_lines(handle: BinaryIO, limit: int = MAX_LINE_BYTES
               ) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of each line that is not blank, from 1; ``None`` for a line over
    ``limit`` bytes (its newline aside). A long line is read and dropped ``limit`` bytes at a
    time, so memory stays bounded. A UTF-8 BOM before line 1 is not part of it."""
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
                pass
            yield number, None
            continue
        if number == 1 and line.startswith(BOM):
            line = line[len(BOM):]
        if line.strip():
            yield number, line


# -- the load ------------------------------------------------------------------------------------

# Text columns: asyncpg's binary COPY has no codec for pgvector's type; the upsert casts.
_STAGE: Final = ("CREATE TEMP TABLE IF NOT EXISTS fgentic_ingest (id bigint, content text,"
                 " source text, embedding text, metadata text) ON COMMIT DELETE ROWS")
_COLUMNS: Final = ("id", "content", "source", "embedding", "metadata")
# Locked, so that what is counted as another source's is what the upsert then replaces.
_OTHER_SOURCE: Final = (
    f"SELECT c.id FROM {TABLE} c JOIN fgentic_ingest s USING (id)"  # noqa: S608 (constants)
    " WHERE c.source NOT IN (s.source, '') FOR UPDATE OF c"
)
# The WHERE guard is the check itself: a chunk of another source (also one another load
# created after the SELECT above) is left as it is unless $1, and RETURNING says which were
# written. A chunk without a source ('', written before the column existed, or outside the
# loader) belongs to none: the first load that names one claims it.
_UPSERT: Final = (
    f"INSERT INTO {TABLE} AS c (id, content, source, embedding, metadata)"  # noqa: S608
    " SELECT id, content, source, embedding::vector, metadata::jsonb FROM fgentic_ingest"
    " ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, source = EXCLUDED.source,"
    " embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata"
    " WHERE c.source IN (EXCLUDED.source, '') OR $1"
    " RETURNING id"
)
_OTHER_SOURCE_IDS: Final = (
    f"SELECT c.id FROM {TABLE} c JOIN unnest($1::bigint[], $2::text[]) AS s(id, source)"  # noqa: S608
    " USING (id) WHERE c.source NOT IN (s.source, '')"
)


@dataclass(frozen=True, slots=True)
class Loaded:
    """What one :func:`load` did, by chunk id."""

    written: frozenset[int]
    replaced: frozenset[int]
    """Written over a chunk of another source (``replace_other_sources`` only)."""
    refused: frozenset[int]
    """Left as they were: chunks of another source."""


async def load(conn: asyncpg.Connection, rows: Sequence[Row],
               vectors: Sequence[Sequence[float]], *,
               dimensions: int = EMBEDDING_DIMENSIONS,
               replace_other_sources: bool = False) -> Loaded:
    """Upsert ``rows`` with their ``vectors`` (one per row, ``dimensions`` numbers each) in
    one transaction. A row whose id is a chunk of another source is refused, unless
    ``replace_other_sources``."""
    if len(rows) != len(vectors):
        raise ValueError("one vector per row")
    records = [(r.id, r.text, r.source, vector_text(v, dimensions), json.dumps(r.metadata))
               for r, v in zip(rows, vectors, strict=True)]
    async with conn.transaction():
        await conn.execute(_STAGE)
        # A savepoint of a caller's transaction (--strict) commits nothing: clear the
        # previous batch's rows, which ON COMMIT DELETE ROWS has not removed yet.
        await conn.execute("DELETE FROM fgentic_ingest")
        await conn.copy_records_to_table("fgentic_ingest", records=records, columns=_COLUMNS)
        other = {r["id"] for r in await conn.fetch(_OTHER_SOURCE)}
        written = {r["id"] for r in await conn.fetch(_UPSERT, replace_other_sources)}
    return Loaded(frozenset(written), frozenset(other & written),
                  frozenset(r.id for r in rows) - written)


async def other_source_ids(conn: asyncpg.Connection, rows: Sequence[Row]) -> set[int]:
    """The ids of ``rows`` that are stored chunks of another source (nothing is locked: a
    check before a load, which :func:`load` repeats)."""
    if not rows or await is_empty(conn):
        return set()
    found = await conn.fetch(_OTHER_SOURCE_IDS, [r.id for r in rows], [r.source for r in rows])
    return {r["id"] for r in found}


async def is_empty(conn: asyncpg.Connection) -> bool:
    exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", TABLE)
    if not exists:
        return True
    return not await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {TABLE})")  # noqa: S608


async def stats(conn: asyncpg.Connection) -> dict[str, Any]:
    """Content-free counts: chunks in all, by classification (NULL as "missing"), and how many
    name principals and groups."""
    by_class = await conn.fetch(
        f"SELECT coalesce(acl_classification, 'missing') AS c, count(*) AS n FROM {TABLE}"  # noqa: S608
        " GROUP BY 1 ORDER BY 1")
    counts = await conn.fetchrow(
        f"SELECT count(*) AS total,"  # noqa: S608
        " count(*) FILTER (WHERE cardinality(acl_principals) > 0) AS with_principals,"
        f" count(*) FILTER (WHERE cardinality(acl_groups) > 0) AS with_groups FROM {TABLE}")
    return {"chunks": counts["total"], "with_principals": counts["with_principals"],
            "with_groups": counts["with_groups"],
            "by_classification": {r["c"]: r["n"] for r in by_class}}
