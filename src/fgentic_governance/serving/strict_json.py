"""Strict JSON for every body we parse: duplicate names, invalid UTF-8 (lone surrogates
included), non-finite numbers and nesting deeper than ``MAX_JSON_DEPTH`` are refused.

Pure (no I/O, no framework), so the control API's wire models and the admission webhook share
it. Refusals are :class:`Refused` with a :class:`Refusal` code: never the input, never a
chained parser exception. The body readers of ``serving`` raise the same type.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Any, Final, NoReturn

import pydantic_core

from fgentic_governance.contract.jcs import DuplicateName, has_lone_surrogate, unique_object
from fgentic_governance.reasons import Coded

MAX_JSON_DEPTH: Final = 128
"""Nested arrays/objects. Kubernetes objects nest about 10 deep; Python's parser itself fails
near 1,000 (RecursionError), and what we hand on is walked by code that may recurse."""


class Refusal(StrEnum):
    """Why a body was refused: a closed set, safe for answers, logs and metric labels."""

    BODY_TOO_LARGE = "BODY_TOO_LARGE"
    BODY_TIMEOUT = "BODY_TIMEOUT"
    BODY_INCOMPLETE = "BODY_INCOMPLETE"
    BUSY = "BUSY"
    NOT_UTF8 = "NOT_UTF8"
    NOT_JSON = "NOT_JSON"
    DUPLICATE_NAME = "DUPLICATE_NAME"
    NUMBER_INVALID = "NUMBER_INVALID"
    TOO_DEEP = "TOO_DEEP"


REFUSAL_STATUS: Final = {Refusal.BODY_TOO_LARGE: 413, Refusal.BODY_TIMEOUT: 408,
                         Refusal.BUSY: 503}
"""HTTP status of a refusal; every other refusal is a malformed request (400)."""


class Refused(Coded[Refusal]):
    """A refused body; ``str()`` is the code only (never request content)."""

    @property
    def status(self) -> int:
        return REFUSAL_STATUS.get(self.code, 400)


# -- strict JSON -------------------------------------------------------------------------------


class _NonFinite(Exception):
    pass


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999 parses as inf
        raise _NonFinite
    return number


def _constant(_text: str) -> NoReturn:  # NaN, Infinity, -Infinity
    raise _NonFinite


# What may be a \u escape of U+D800..U+DFFF (a literal search; a miss skips the walk).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH, finite_floats: bool = True) -> Any:
    """Parse one JSON text strictly (see the module docstring), else :class:`Refused`.

    ``finite_floats=False`` is for bodies that are mostly numbers the caller checks itself
    (an embeddings answer: 768 floats). Floats are then parsed in C, so one that overflows
    (``1e999``) comes back as ``inf``; NaN and Infinity are still refused. Checking each
    number in Python costs ~0.8 ms on a 768-number answer.
    """
    return _checked(raw, max_depth, parse_float=_float if finite_floats else float)


def _checked(raw: bytes, max_depth: int, *, parse_float: Any) -> Any:
    failure: Refusal | None = None
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_object,
                           parse_float=parse_float, parse_constant=_constant)
    except UnicodeDecodeError:
        failure = Refusal.NOT_UTF8
    except DuplicateName:
        failure = Refusal.DUPLICATE_NAME
    except _NonFinite:
        failure = Refusal.NUMBER_INVALID
    except RecursionError:
        failure = Refusal.TOO_DEEP
    except ValueError:  # JSONDecodeError, and integers beyond Python's digit limit
        failure = Refusal.NOT_JSON
    if failure is None and _deeper_than(raw, value, max_depth):
        failure = Refusal.TOO_DEEP
    if failure is None and _SURROGATE_ESCAPE.search(raw) and has_lone_surrogate(value):
        failure = Refusal.NOT_UTF8  # Valid pairs were joined by the parser; lone ones remain.
    if failure is not None:
        refuse(failure)
    return value


def loads_floats(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``loads(raw, finite_floats=False)`` in about half the time, for a body that is mostly
    floats (an embeddings answer: 768 of them, ~0.17 ms of ``json``'s float parsing).

    Two passes over the same text: ``loads``' own, with every rule (duplicate names, UTF-8 and
    lone surrogates, NaN and Infinity, depth) but its floats left unparsed, then pydantic's
    Rust parser for the values. Once the first pass holds, the two read the same structure
    (no duplicate name is left to resolve differently) and the same doubles (both round
    correctly; an overflow is ``inf`` in both). What the second refuses and ``json`` accepts
    (an integer past its range) is refused here too (NOT_JSON): never looser than ``loads``.
    """
    _checked(raw, max_depth, parse_float=len)  # len: the cheapest C call per float literal
    try:
        return pydantic_core.from_json(raw)
    except ValueError:
        refuse(Refusal.NOT_JSON)


def _deeper_than(raw: bytes, value: Any, max_depth: int) -> bool:
    if raw.count(b"[") + raw.count(b"{") <= max_depth:  # Cheap: cannot nest deeper.
        return False
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:  # Breadth first, one list per level: a fraction of the parse time.
        depth += 1
        if depth > max_depth:
            return True
        deeper: list[Any] = []
        for node in level:
            deeper.extend([c for c in (node.values() if type(node) is dict else node)
                           if type(c) is dict or type(c) is list])
        level = deeper
    return False


def refuse(code: Refusal) -> NoReturn:
    raise Refused(code) from None
