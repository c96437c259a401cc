"""The chunk-row ACL of ADR 0017 as one bound, parameterized WHERE clause (§2, §15).

The retrieval server is the only chunk-row ACL enforcement point. It turns a
verified projection (a ``contract.VerifiedIdentity``, which only a successful
``contract.decode_verified_identity`` of the X-Fgentic-Identity header produces) into a
predicate over the derived ACL columns of ``corpus.py`` and applies it inside the same statement
that ranks, counts or returns chunks. There is no second, unscoped query: an unusable projection
raises before any SQL is built, and no unfiltered search exists.

The predicate, for ``$c`` = the projection's allowed_classifications:

* Matrix (Matrix rule 5): ``acl_classification = ANY($c::text[]) AND acl_principals @>
  $p::text[]`` where ``$p`` holds one exact key per audience entry, so every reader must be
  named by an identical typed object; a partial audience, a superset object, a group or an
  empty audience admits nothing.
* OAuth (OAuth rule 4): ``acl_classification = ANY($c::text[]) AND acl_groups && $g::text[]``:
  at least one projected partner group equals one row group string exactly (``text[]``
  overlap is whole-string equality, so ``partner/org-b/doc`` never matches
  ``partner/org-b/docs``); allowed_principals is never consulted.

:func:`search` and :func:`count` call the rule's installed SQL functions (``corpus.py``): the
same clause, bound at creation time, inside ``corpus.search_sql`` / ``corpus.count_sql``; the
search function carries pgvector's iterative-scan settings so a selective predicate still fills
``k``, and chooses its access path per call from the ACL key census (``corpus.Path``). One round
trip each, and the settings hold for that call only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import asyncpg

from fgentic_governance.contract import (
    BridgedMatrixProjection,
    BridgedPrincipal,
    Code,
    ContractError,
    MatrixPrincipal,
    MatrixProjection,
    OAuthProjection,
    VerifiedIdentity,
)
from fgentic_governance.retrieval.search.corpus import (
    EMBEDDING_DIMENSIONS,
    KEY_SEPARATOR,
    Rule,
    clause,
    count_function,
    search_function,
)

AnyProjection = MatrixProjection | BridgedMatrixProjection | OAuthProjection

# ADR 0017 §15: the only classifications v1 admits at all.
ADMISSIBLE_CLASSIFICATIONS: Final = frozenset({"public", "approved_non_public"})
MAX_K: Final = 1000


@dataclass(frozen=True, slots=True)
class Predicate:
    """SQL text with ``$n`` placeholders and the values bound to them, in order."""

    sql: str
    args: tuple[list[str], list[str]]
    rule: Rule


@dataclass(frozen=True, slots=True)
class Hit:
    """One returned chunk. ACL metadata is deliberately not returned to the caller."""

    id: int
    content: str
    source: str
    distance: float


def current_projection(identity: VerifiedIdentity, *, now: int | None = None) -> AnyProjection:
    """The projection ``identity`` carries, if it may still be used at ``now``; ContractError
    otherwise: fail closed.

    Validation happened once, when the header was decoded: a ``VerifiedIdentity`` exists only
    for a value that passed every rule of the contract. Anything else (a raw projection model,
    however built, a dict, JSON text) is refused here with SHAPE_INVALID, at run time too,
    whatever the static types say. The validity window is checked again at ``now`` (default:
    this host's clock) because a retrieval call after expiry must fail even if decoding
    succeeded earlier.
    """
    if type(identity) is not VerifiedIdentity:
        raise ContractError(Code.SHAPE_INVALID)
    return identity.current(now=int(time.time()) if now is None else now)


def principal_key(entry: MatrixPrincipal | BridgedPrincipal) -> str:
    """The ``acl_principals`` key of one validated audience entry (see ``corpus.py``)."""
    network = entry.network if isinstance(entry, BridgedPrincipal) else ""
    parts = (entry.kind, network, entry.principal)
    if any(KEY_SEPARATOR in part for part in parts):
        # Impossible for a validated entry; refusing keeps the key injective regardless.
        raise ValueError("principal key part contains the separator")
    return KEY_SEPARATOR.join(parts)


def predicate(identity: VerifiedIdentity, *, now: int | None = None, first: int = 1) -> Predicate:
    """The ACL WHERE clause for ``identity``; placeholders are numbered from ``first``."""
    checked = current_projection(identity, now=now)
    classes = list(checked.allowed_classifications)
    # Already guaranteed by the model; restated because an empty or widened list here would
    # silently change what the clause admits.
    if not classes or not ADMISSIBLE_CLASSIFICATIONS.issuperset(classes):
        raise ContractError(Code.SHAPE_INVALID, "allowed_classifications")
    if isinstance(checked, OAuthProjection):
        groups = list(checked.groups)
        if not groups:  # overlap with '{}' is false anyway; an empty list is still a bug
            raise ContractError(Code.GROUPS_INVALID, "groups")
        return Predicate(clause(Rule.GROUPS, first=first), (classes, groups), Rule.GROUPS)
    keys = [principal_key(entry) for entry in checked.audience]
    if not keys:  # containment of '{}' is TRUE for every row: never build it
        raise ContractError(Code.AUDIENCE_INVALID, "audience")
    return Predicate(clause(Rule.PRINCIPALS, first=first), (classes, keys), Rule.PRINCIPALS)


def query_vector(embedding: Sequence[float],
                 dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A query embedding as a checked ``real[]`` parameter.

    asyncpg encodes a float list in binary, in C; pgvector's text form costs ~0.55 ms per query
    here (768 ``repr`` calls), about a sixth of the whole unfiltered ANN query.
    """
    values = list(map(float, embedding))
    if len(values) != dimensions:
        raise ValueError(f"embedding must have {dimensions} dimensions")
    if not all(map(math.isfinite, values)):
        raise ValueError("embedding components must be finite")
    return values


async def search(
    conn: asyncpg.Connection, identity: VerifiedIdentity, embedding: Sequence[float], k: int,
    *, now: int | None = None, dimensions: int = EMBEDDING_DIMENSIONS,
) -> list[Hit]:
    """The ``k`` nearest chunks (cosine) that ``identity`` may read, nearest first.

    One statement ranks and filters; its settings hold for the call only, also inside a
    caller's transaction.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer in 1..{MAX_K}")
    query = query_vector(embedding, dimensions)
    where = predicate(identity, now=now)
    # The function name is derived from constants (corpus.search_function); values are bound.
    function = search_function(where.rule)
    sql = f"SELECT id, content, source, distance FROM {function}($1, $2, $3, $4)"  # noqa: S608
    rows = await conn.fetch(sql, query, k, *where.args)
    return [Hit(row["id"], row["content"], row["source"], row["distance"]) for row in rows]


async def count(conn: asyncpg.Connection, identity: VerifiedIdentity, *,
                now: int | None = None) -> int:
    """How many chunks ``identity`` may read (the same predicate, no ranking)."""
    where = predicate(identity, now=now)
    value = await conn.fetchval(f"SELECT {count_function(where.rule)}($1, $2)", *where.args)
    return int(value)


__all__ = [
    "ADMISSIBLE_CLASSIFICATIONS",
    "MAX_K",
    "AnyProjection",
    "Hit",
    "Predicate",
    "count",
    "current_projection",
    "predicate",
    "principal_key",
    "query_vector",
    "search",
]
