"""RFC 8785 (JCS) bytes, strict JSON diagnosis, and unpadded base64url: the byte layer.

Decoding is on the request path of every retrieval call, so it is split in two:

* The fast path (`canonical_model`) re-serialises an already validated model with pydantic's
  compact JSON writer. Shapes declare fields in JCS key order, have only ASCII names, and bound
  every integer to the IEEE-754 safe range, and pydantic escapes strings exactly as JCS does
  (only `"`, `\\` and U+0000..U+001F, with the same short forms and lowercase `\\u00xx`).
  So for ASCII text the output *is* the JCS encoding; a property test checks this against the
  `rfc8785` package. Non-ASCII text takes the reference `rfc8785` path, which costs more but
  needs no argument about UTF-16 key order or escaping.
* The slow path (`diagnose`) runs only after a failure, with Python's json module and hooks,
  to name the most basic problem: invalid UTF-8, not JSON, a duplicate name, a non-integer
  number, or a lone surrogate. Valid input never pays for it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, NoReturn

import rfc8785
from pydantic import BaseModel

from fgentic_governance.contract import limits
from fgentic_governance.contract.errors import Code, ContractError

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
# An unpadded group of 2 (3) characters carries 4 (2) unused low bits in its last character.
# Canonical base64 sets them to zero; otherwise several headers would decode to the same bytes.
_ZERO_LOW4 = frozenset(c for i, c in enumerate(_ALPHABET) if i & 0x0F == 0)
_ZERO_LOW2 = frozenset(c for i, c in enumerate(_ALPHABET) if i & 0x03 == 0)


def canonical(value: Any) -> bytes:
    """The JCS bytes of a JSON-compatible value (reference implementation: `rfc8785`)."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        failure = ContractError(Code.NUMBER_INVALID)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        # Floats, NaN and lone surrogates are not representable in this contract.
        failure = ContractError(Code.NOT_CANONICAL)
    raise failure from None


def canonical_model(model: BaseModel, *, ascii_only: bool) -> bytes | None:
    """JCS bytes of a validated shape, or None if it cannot be serialised (see module doc)."""
    try:
        if ascii_only:
            return model.__pydantic_serializer__.to_json(model)
        return rfc8785.dumps(model.model_dump(mode="json"))
    except Exception:  # any failure to serialise simply means "not canonical"
        return None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(value: str | bytes) -> bytes:
    """Strict unpadded base64url: alphabet only, no '=', zero trailing bits."""
    if isinstance(value, str):
        if not value.isascii():
            _fail(Code.NOT_BASE64URL)
        data = value.encode("ascii")
    else:
        data = bytes(value)
    if data.translate(None, _ALPHABET) or len(data) % 4 == 1:
        _fail(Code.NOT_BASE64URL)
    tail = len(data) % 4
    if (tail == 2 and data[-1] not in _ZERO_LOW4) or (tail == 3 and data[-1] not in _ZERO_LOW2):
        _fail(Code.NOT_BASE64URL)
    try:
        return binascii.a2b_base64(data.translate(_TO_STANDARD) + b"=" * (-len(data) % 4),
                                   strict_mode=True)
    except binascii.Error:  # unreachable after the checks above; fail closed regardless
        pass
    _fail(Code.NOT_BASE64URL)


class DuplicateName(Exception):
    """Raised by :func:`unique_object` (a ``json.loads`` object hook)."""


class _BadNumber(Exception):
    pass


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing duplicate names (every strict JSON reader uses it)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise DuplicateName
    return obj


def _float(_text: str) -> NoReturn:
    raise _BadNumber


def _int(text: str) -> int:
    number = int(text)
    if abs(number) > limits.MAX_SAFE_INTEGER:
        raise _BadNumber
    return number


def has_lone_surrogate(value: Any) -> bool:
    """A lone UTF-16 surrogate anywhere in a parsed value (JSON's \\u escapes allow them)."""
    if isinstance(value, str):
        return not value.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_lone_surrogate(v) for v in value)
    return False


def strict_loads(raw: bytes) -> Any:
    """Parse JSON text strictly: UTF-8, no duplicate names, integers only, no lone surrogates."""
    failure: ContractError | None = None
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_object,
                           parse_float=_float, parse_constant=_float, parse_int=_int)
    except UnicodeDecodeError:
        failure = ContractError(Code.NOT_UTF8)
    except DuplicateName:
        failure = ContractError(Code.DUPLICATE_NAME)
    except _BadNumber:
        failure = ContractError(Code.NUMBER_INVALID)
    except (ValueError, RecursionError):
        failure = ContractError(Code.NOT_JSON)
    if failure is None and has_lone_surrogate(value):
        failure = ContractError(Code.NOT_UTF8)
    if failure is not None:
        # Raised outside the handler so no parser exception (which may quote input) is chained.
        raise failure from None
    return value


def diagnose(raw: bytes) -> ContractError | None:
    """The byte- or syntax-level error in `raw`, if any (None: the JSON text itself is fine)."""
    try:
        strict_loads(raw)
    except ContractError as exc:
        return ContractError(exc.code)
    return None


def _fail(code: Code) -> NoReturn:
    raise ContractError(code) from None
