"""Addressing inside a JSON document by paths of keys and indexes, for the mutation fuzzers:
every path, and copies with the value at one path replaced or removed."""

from __future__ import annotations

from typing import Any

Path = tuple[Any, ...]


def paths(doc: Any, prefix: Path = ()) -> list[Path]:
    """Every path in ``doc``, the root (``()``) first."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += paths(value, (*prefix, index))
    return out


def get(doc: Any, path: Path) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def put(doc: Any, path: Path, value: Any) -> Any:
    """A copy of ``doc`` with ``value`` at ``path`` (the original is not changed)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: put(doc[head], rest, value)}
    copy = list(doc)
    copy[head] = put(doc[head], rest, value)
    return copy


def drop(doc: Any, path: Path) -> Any:
    """A copy of ``doc`` without the member or item at ``path`` (not the root)."""
    parent, last = get(doc, path[:-1]), path[-1]
    if isinstance(parent, dict):
        smaller: Any = {k: v for k, v in parent.items() if k != last}
    else:
        smaller = [v for i, v in enumerate(parent) if i != last]
    return put(doc, path[:-1], smaller)
