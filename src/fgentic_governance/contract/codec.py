"""X-Fgentic-Identity and X-Fgentic-Room-Context: header values to validated models and back.

Decoding order (cheapest and most basic first, so the code names the first thing wrong):
exactly one value -> encoded size -> strict base64url -> decoded size -> strict JSON shape ->
JCS canonical form -> cross-field semantics -> clock. Valid input never leaves the fast path
(see `jcs`); a failure is diagnosed afterwards so its code is precise without slowing the
common case. Every failure is a ContractError raised outside any `except` block, so no parser
or pydantic exception, whose text may quote input, is chained to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NoReturn, TypeVar, final

from pydantic import BaseModel, TypeAdapter, ValidationError

from fgentic_governance.contract import jcs, limits, semantics
from fgentic_governance.contract.errors import Code, ContractError
from fgentic_governance.contract.shapes import (
    FIELD_NAMES,
    IDENTITY,
    ROOM_CONTEXT,
    ROOM_SNAPSHOT,
    AgentRef,
    AnyIdentity,
    BridgedMatrixProjection,
    MatrixProjection,
    OAuthProjection,
    RoomContext,
    RoomSnapshot,
)

IDENTITY_HEADER = "X-Fgentic-Identity"
ROOM_CONTEXT_HEADER = "X-Fgentic-Room-Context"

HeaderValue = str | bytes
_M = TypeVar("_M", bound=BaseModel)


def single_value(values: Sequence[HeaderValue]) -> HeaderValue:
    """The one value of a header given all its raw values; 0 or >= 2 values fail."""
    if isinstance(values, str | bytes):
        # A bare string is a programming error (it would be read as a list of characters).
        raise TypeError("pass the list of header values, not one value")
    if not values:
        raise ContractError(Code.HEADER_MISSING)
    if len(values) > 1:
        raise ContractError(Code.HEADER_DUPLICATE)
    return values[0]


def header_bytes(values: Sequence[HeaderValue]) -> bytes:
    """The decoded JCS bytes of a carrier header, with its count and size limits applied."""
    value = single_value(values)
    # A str longer than the limit in characters is longer in bytes too; a shorter non-ASCII
    # str is rejected by the base64url check.
    if len(value) > limits.MAX_ENCODED_BYTES:
        raise ContractError(Code.HEADER_TOO_LARGE)
    raw = jcs.b64url_decode(value)
    if len(raw) > limits.MAX_DECODED_BYTES:  # 8,192 base64 characters are 6,144 bytes; kept
        raise ContractError(Code.DECODED_TOO_LARGE)  # so the two limits stay independent
    return raw


def _path(loc: tuple[int | str, ...]) -> str:
    # Keep only the contract's own field names and indices: pydantic locations also hold union
    # branch labels and (for unknown fields) the caller's key, which must not be echoed.
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int) and parts:
            parts[-1] += f"[{item}]"
        elif isinstance(item, str) and item in FIELD_NAMES:
            parts.append(item)
    return ".".join(parts)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# pydantic error type -> (code, suffix naming the offending key where pydantic's loc stops short)
_SHAPE_CODES: dict[str, tuple[Code, str]] = {
    "missing": (Code.FIELD_MISSING, ""),
    "union_tag_not_found": (Code.FIELD_MISSING, "kind"),
    "union_tag_invalid": (Code.SHAPE_INVALID, "kind"),
}


def shape_error(exc: ValidationError) -> ContractError:
    """Map the first pydantic error to a content-free code and path."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    kind, loc = first["type"], tuple(first["loc"])
    if kind == "json_invalid":
        return ContractError(Code.NOT_JSON)
    if kind == "extra_forbidden":
        # The last location item is the caller's own key: never part of the path.
        return ContractError(Code.UNKNOWN_FIELD, _path(loc[:-1]))
    path = _path(loc)
    if kind == "missing" and loc and isinstance(loc[-1], int):
        return ContractError(Code.SHAPE_INVALID, path)  # a fixed-length list is too short
    if kind in _SHAPE_CODES:
        code, suffix = _SHAPE_CODES[kind]
        return ContractError(code, _join(path, suffix) if suffix else path)
    if path == "v" or path.endswith(".v"):
        return ContractError(Code.VERSION_UNSUPPORTED, path)
    return ContractError(Code.SHAPE_INVALID, path)


def validate_jcs(raw: bytes, adapter: TypeAdapter[_M]) -> _M:
    """Shape-validate JCS bytes and require that they are exactly the model's JCS encoding."""
    failure: ContractError | None = None
    try:
        model = adapter.validate_json(raw)
    except ValidationError as exc:
        failure = jcs.diagnose(raw) or shape_error(exc)
    if failure is None and jcs.canonical_model(model, ascii_only=raw.isascii()) != raw:
        # Equality with the re-encoding also proves the absence of duplicate names; diagnose
        # only to report them (or a float, or bad UTF-8) by their own code.
        failure = jcs.diagnose(raw) or ContractError(Code.NOT_CANONICAL)
    if failure is not None:
        raise failure from None
    return model


def validate_json(data: str | bytes, adapter: TypeAdapter[_M]) -> _M:
    """Shape-validate any strict JSON text (whitespace and key order free): for documents that
    are not carried in a header, such as fixtures or a snapshot read from disk."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    jcs.strict_loads(raw)  # duplicates, floats, bad UTF-8: pydantic's parser accepts some
    failure: ContractError | None = None
    try:
        model = adapter.validate_json(raw)
    except ValidationError as exc:
        failure = shape_error(exc)
    if failure is not None:
        raise failure from None
    return model


def _check_agent(identity: AnyIdentity, agent: AgentRef | None) -> None:
    if agent is not None and identity.agent != agent:
        raise ContractError(Code.AGENT_MISMATCH, "agent")


def decode_identity(
    values: Sequence[HeaderValue], *, now: int, agent: AgentRef | None
) -> AnyIdentity:
    """Decode and fully validate X-Fgentic-Identity from all of its raw header values.

    `now` is Unix seconds from the consumer's clock. `agent` is the route-derived Agent the
    consumer serves (None only where no single Agent applies, e.g. offline tooling).
    """
    identity = validate_jcs(header_bytes(values), IDENTITY)
    _check_agent(identity, agent)
    semantics.check_identity(identity, now=now)
    return identity


# The seal only decode_verified_identity holds: VerifiedIdentity refuses any other caller.
_SEAL: Final = object()
_IDENTITY_TYPES: Final = (MatrixProjection, BridgedMatrixProjection, OAuthProjection)


@final
class VerifiedIdentity:
    """A projection that `decode_verified_identity` accepted from an X-Fgentic-Identity value.

    The type is the proof: it wraps exactly what a successful, fully validated decode returned
    (carrier limits, strict base64url, JCS, shape, semantics, the route's Agent and the clock
    at decode time), and nothing else can make one. Its constructor refuses every caller but
    the decoder; it cannot be subclassed, mutated, copied into a new object or pickled. A
    consumer (the retrieval prefilter) therefore validates once, at decode, and later only
    checks the clock again (`current`). Its repr names the kind only, never content.
    """

    __slots__ = ("_identity",)
    _identity: AnyIdentity

    def __init__(self, identity: AnyIdentity, *, seal: object) -> None:
        if seal is not _SEAL or type(identity) not in _IDENTITY_TYPES:
            raise TypeError("a VerifiedIdentity comes only from decode_verified_identity")
        object.__setattr__(self, "_identity", identity)

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("VerifiedIdentity cannot be subclassed")

    @property
    def identity(self) -> AnyIdentity:
        """The decoded projection (a frozen contract model)."""
        return self._identity

    def current(self, *, now: int) -> AnyIdentity:
        """The projection if its validity window still holds at `now`, else ContractError
        (NOT_YET_VALID or EXPIRED): every call after expiry fails, whenever it was decoded."""
        semantics.check_window(self._identity.iat, self._identity.exp, now=now)
        return self._identity

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("VerifiedIdentity is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("VerifiedIdentity is immutable")

    def __copy__(self) -> VerifiedIdentity:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> VerifiedIdentity:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError("a VerifiedIdentity cannot be serialised; encode_identity its identity")

    def __repr__(self) -> str:
        return f"VerifiedIdentity(kind={self._identity.kind!r})"


def decode_verified_identity(
    values: Sequence[HeaderValue], *, now: int, agent: AgentRef | None
) -> VerifiedIdentity:
    """`decode_identity`, sealed: the only way to obtain a VerifiedIdentity."""
    return VerifiedIdentity(decode_identity(values, now=now, agent=agent), seal=_SEAL)


def decode_room_context(values: Sequence[HeaderValue], *, user_id: str) -> RoomContext:
    """Decode and validate X-Fgentic-Room-Context; its caller must be `user_id` (X-User-Id)."""
    context = validate_jcs(header_bytes(values), ROOM_CONTEXT)
    semantics.check_room_context(context, user_id=user_id)
    return context


def _encode(model: _M, adapter: TypeAdapter[_M]) -> tuple[str, _M]:
    try:
        dumped = model.model_dump(mode="json", warnings=False)
    except Exception:  # only an unchecked (model_construct) model can fail to serialise
        dumped = None
    if dumped is None:
        raise ContractError(Code.SHAPE_INVALID) from None
    raw = jcs.canonical(dumped)
    if len(raw) > limits.MAX_DECODED_BYTES:
        raise ContractError(Code.DECODED_TOO_LARGE)
    value = jcs.b64url_encode(raw)
    if len(value) > limits.MAX_ENCODED_BYTES:
        raise ContractError(Code.HEADER_TOO_LARGE)
    # Revalidate what goes on the wire, so a model built with model_construct (or otherwise
    # unchecked) can never be emitted: the caller's semantic checks then run on this copy.
    return value, validate_jcs(raw, adapter)


def encode_identity(identity: AnyIdentity) -> str:
    """The X-Fgentic-Identity value of a projection (every rule but the clock is enforced)."""
    value, checked = _encode(identity, IDENTITY)
    semantics.check_static(checked)
    return value


def encode_room_context(context: RoomContext) -> str:
    value, checked = _encode(context, ROOM_CONTEXT)
    semantics.check_room_context(checked)
    return value


def load_identity(data: str | bytes) -> AnyIdentity:
    """A projection from any strict JSON text, with every rule but canonical form and clock."""
    identity = validate_json(data, IDENTITY)
    semantics.check_static(identity)
    return identity


def load_room_context(data: str | bytes) -> RoomContext:
    context = validate_json(data, ROOM_CONTEXT)
    semantics.check_room_context(context)
    return context


def load_snapshot(data: str | bytes, *, local_server: str | None = None) -> RoomSnapshot:
    snapshot = validate_json(data, ROOM_SNAPSHOT)
    semantics.check_snapshot(snapshot, local_server=local_server)
    return snapshot
