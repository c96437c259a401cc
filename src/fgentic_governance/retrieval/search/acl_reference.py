"""The chunk-row ACL of ADR 0017 restated in plain Python over decoded metadata JSON.

This is the reference the SQL predicate of ``prefilter.py`` is checked against (tests, the
property test and the benchmark's leak count). It is deliberately written from the ADR's rules,
not from the SQL: it reads raw ``metadata`` (never the derived ``acl_*`` columns) and compares
whole objects. It is not on the query path.
"""

from __future__ import annotations

from typing import Any

from fgentic_governance.contract import OAuthProjection
from fgentic_governance.retrieval.search.prefilter import AnyProjection


def _exact_string(value: Any) -> str | None:
    # type() rather than isinstance(): JSON decoding yields plain str; anything else is not a
    # JSON string (and bool is an int subclass, the classic equality trap).
    return value if type(value) is str else None


def admits(projection: AnyProjection, metadata: Any) -> bool:
    """Whether a chunk with decoded ``metadata`` (any JSON value, or None) is visible."""
    if type(metadata) is not dict:
        return False
    classification = _exact_string(metadata.get("classification"))
    if classification is None or classification not in projection.allowed_classifications:
        return False
    if isinstance(projection, OAuthProjection):
        # OAuth rule 4: one exact group string in common; principals never count.
        groups = metadata.get("allowed_groups")
        if type(groups) is not list:
            return False
        row_groups = {g for g in groups if type(g) is str}
        return any(group in row_groups for group in projection.groups)
    # Matrix rule 5: every audience entry equals (same members, same values) some row object.
    principals = metadata.get("allowed_principals")
    if type(principals) is not list:
        return False
    wanted = [entry.model_dump(mode="json") for entry in projection.audience]
    return all(any(_same_object(candidate, entry) for candidate in principals)
               for entry in wanted)


def _same_object(candidate: Any, entry: dict[str, str]) -> bool:
    if type(candidate) is not dict or candidate.keys() != entry.keys():
        return False
    return all(_exact_string(candidate[name]) == value for name, value in entry.items())


__all__ = ["admits"]
