"""Property tests of the contract: round trips, single-field and byte-level mutations, and
the guarantee that an error never echoes its input."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from fgentic_governance import contract
from fgentic_governance.contract import Code, ContractError, schemagen, semantics, shapes
from fgentic_governance.contract.shapes import (
    AgentRef,
    BridgedMatrixProjection,
    BridgedPrincipal,
    MatrixPrincipal,
    MatrixProjection,
    OAuthClient,
    OAuthProjection,
    RoomContext,
    RoomRef,
)

# Each example checks a few hundred corrupted documents, so fewer examples suffice.
DATA = Path(contract.__file__).parent / "testdata"
MUTATION_SETTINGS = settings(max_examples=40, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])

# --- strategies of valid documents ----------------------------------------------------------

LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
_HOST = st.from_regex(r"[a-z0-9][a-z0-9-]{0,9}(\.[a-z]{2,6}){0,2}", fullmatch=True)
_SERVER_NAME = st.one_of(_HOST, st.just("[2001:db8::1]"), st.just("192.0.2.7"))
SERVER = st.tuples(_SERVER_NAME, st.none() | st.integers(1, 65535)).map(
    lambda t: t[0] if t[1] is None else f"{t[0]}:{t[1]}")
LOCALPART = st.text(alphabet=string.ascii_lowercase + string.digits + "._=/+-",
                    min_size=1, max_size=24)
MXID = st.builds(lambda local, server: f"@{local}:{server}", LOCALPART, SERVER)
HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
_OPAQUE = st.text(alphabet=string.ascii_letters + string.digits + "._~+/=-",
                  min_size=1, max_size=43)
ROOM_ID = st.builds(lambda o, s: f"!{o}" + (f":{s}" if s else ""), _OPAQUE, st.none() | SERVER)
EVENT_ID = st.builds(lambda o, s: f"${o}" + (f":{s}" if s else ""), _OPAQUE, st.none() | SERVER)
CLASSES = st.sampled_from([("public",), ("approved_non_public", "public")])
AGENT = st.builds(AgentRef, name=LABEL, namespace=LABEL)
ROOM = st.builds(RoomRef, event_id=EVENT_ID, history_visibility=st.just("joined"), id=ROOM_ID,
                 join_rule=st.just("invite"), state_sha256=HEX64)
# Free-form OAuth strings: any Unicode without surrogates, control characters included.
FREE = st.text(min_size=1, max_size=60)


@st.composite
def principals(draw: st.DrawFn) -> contract.Principal:
    if draw(st.booleans()):
        return MatrixPrincipal(kind="matrix", principal=draw(MXID))
    return BridgedPrincipal(kind="bridged_matrix", network=draw(LABEL), principal=draw(MXID))


@st.composite
def audiences(draw: st.DrawFn, caller: contract.Principal) -> tuple[contract.Principal, ...]:
    others = draw(st.lists(principals(), max_size=15, unique_by=lambda p: p.principal))
    entries = [p for p in others if p.principal != caller.principal] + [caller]
    return tuple(sorted(entries, key=semantics.sort_key))


@st.composite
def windows(draw: st.DrawFn) -> tuple[int, int, int]:
    """(iat, exp, now) with a valid lifetime and `now` inside the accepted window."""
    iat = draw(st.integers(0, 2**40))
    exp = iat + draw(st.integers(1, 600))
    return iat, exp, draw(st.integers(max(0, iat - 30), exp - 1))


@st.composite
def matrix_projections(
    draw: st.DrawFn,
) -> tuple[MatrixProjection | BridgedMatrixProjection, int]:
    caller = draw(principals())
    iat, exp, now = draw(windows())
    common: dict[str, Any] = dict(
        agent=draw(AGENT), allowed_classifications=draw(CLASSES),
        audience=draw(audiences(caller)), delegation_id=draw(HEX64), exp=exp, groups=(),
        iat=iat, principal=caller.principal, room=draw(ROOM), v=1)
    if isinstance(caller, BridgedPrincipal):
        return BridgedMatrixProjection(kind="bridged_matrix", network=caller.network,
                                       **common), now
    return MatrixProjection(kind="matrix", **common), now


@st.composite
def oauth_projections(draw: st.DrawFn) -> tuple[OAuthProjection, int]:
    policy = draw(LABEL)
    names = draw(st.lists(LABEL, min_size=1, max_size=16, unique=True))
    iat, exp, now = draw(windows())
    client = OAuthClient(audience=draw(FREE), azp=draw(FREE),
                         issuer=draw(st.text(min_size=1, max_size=120)), policy_id=policy)
    return OAuthProjection(
        agent=draw(AGENT), allowed_classifications=draw(CLASSES), client=client,
        delegation_id=draw(HEX64), exp=exp,
        groups=tuple(sorted(f"partner/{policy}/{n}" for n in names)), iat=iat,
        kind="oidc_client", v=1), now


IDENTITIES = st.one_of(matrix_projections(), oauth_projections())


@st.composite
def room_contexts(draw: st.DrawFn) -> RoomContext:
    caller = draw(principals())
    return RoomContext(allowed_classifications=draw(CLASSES), audience=draw(audiences(caller)),
                       caller=caller, delegation_id=draw(HEX64), room=draw(ROOM), v=1)


# --- helpers ---------------------------------------------------------------------------------


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jcs_text(doc: Any) -> bytes:
    # JCS for these documents (ASCII keys), and able to write values `rfc8785` refuses.
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@cache
def schema(stem: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schemagen.render_all()[stem + schemagen.SUFFIX]))


def decode_doc(doc_kind: str, header: str | bytes, now: int, user_id: str) -> Any:
    if doc_kind == "identity":
        return contract.decode_identity([header], now=now, agent=None)
    return contract.decode_room_context([header], user_id=user_id)


# --- round trips ------------------------------------------------------------------------------


def _round_trip(identity: contract.AnyIdentity, now: int) -> None:
    raw = rfc8785.dumps(identity.model_dump(mode="json"))
    if len(raw) > contract.limits.MAX_DECODED_BYTES:
        with pytest.raises(ContractError, match=r"^DECODED_TOO_LARGE$"):
            contract.encode_identity(identity)
        return
    header = contract.encode_identity(identity)
    assert header == b64(raw)
    decoded = contract.decode_identity([header], now=now, agent=identity.agent)
    assert decoded == identity
    assert contract.encode_identity(decoded) == header


@given(matrix_projections())
def test_matrix_projections_round_trip(case: tuple[contract.AnyIdentity, int]) -> None:
    _round_trip(*case)


@given(oauth_projections())
def test_oauth_projections_round_trip(case: tuple[contract.AnyIdentity, int]) -> None:
    _round_trip(*case)


@given(room_contexts())
def test_room_contexts_round_trip(context: RoomContext) -> None:
    header = contract.encode_room_context(context)
    assert contract.decode_room_context([header], user_id=context.caller.principal) == context


@given(IDENTITIES)
def test_fast_canonical_form_is_rfc8785(case: tuple[contract.AnyIdentity, int]) -> None:
    # The decoder's fast path compares against pydantic's writer; prove it is JCS.
    identity = case[0]
    reference = rfc8785.dumps(identity.model_dump(mode="json"))
    assert identity.__pydantic_serializer__.to_json(identity) == reference
    fast = contract.jcs.canonical_model(identity, ascii_only=reference.isascii())
    assert fast == reference


@given(IDENTITIES)
def test_valid_projections_satisfy_the_generated_schema(
    case: tuple[contract.AnyIdentity, int],
) -> None:
    schema("identity").validate(case[0].model_dump(mode="json"))


@given(st.text(alphabet=string.ascii_letters + string.digits + "\n\t \"\\/\x00\x1f\x7f",
               min_size=1, max_size=40))
def test_control_and_escape_characters_round_trip(text: str) -> None:
    identity = contract.load_identity(json.dumps(_adr_oauth()))
    assert isinstance(identity, OAuthProjection)
    weird = identity.model_copy(update={"client": identity.client.model_copy(
        update={"issuer": text})})
    header = contract.encode_identity(weird)
    assert contract.decode_identity([header], now=weird.iat, agent=None) == weird


def _adr(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"adr0017_{name}.json").read_text())
    return doc


def _adr_oauth() -> dict[str, Any]:
    return _adr("oauth_projection")


# --- single-field mutations -----------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    what: str
    doc: Any
    codes: frozenset[Code]
    structural: bool  # the JSON Schema alone must reject it as well


JsonPath = tuple[str | int, ...]
_RETYPES: list[Any] = [1, "x", None, [], {}, True, 1.5]
_BAD_LABELS = ["", "A", "-a", "a-", "a" * 64, "a_b", "a.b"]
_BAD_MXIDS = ["alice", "@alice", "@Alice:x", "@a b:x", "@" + "a" * 255 + ":x", "@a:", "@:x"]


def _json_type(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _replace(doc: Any, path: JsonPath, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _drop(doc: Any, path: JsonPath) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return out


S, SEM = True, False  # structural, semantic


def _out_of_range(key: str, value: Any, doc: dict[str, Any]) -> Iterator[
        tuple[Any, set[Code], bool]]:
    """Invalid values of the right JSON type for one field."""
    shape = {Code.SHAPE_INVALID}
    if key == "v":
        yield from ((bad, {Code.VERSION_UNSUPPORTED}, S) for bad in (0, 2, -1))
    elif key in ("name", "namespace", "network", "policy_id"):
        yield from ((bad, shape, S) for bad in _BAD_LABELS)
    elif key in ("delegation_id", "state_sha256"):
        for bad in (value.upper(), value[:-1], value + "0", "g" * 64):
            if bad != value:
                yield bad, shape, S
    elif key == "iat":
        yield from [(-1, shape, S), (2**53, {Code.NUMBER_INVALID}, S),
                    (doc["exp"], {Code.LIFETIME_INVALID}, SEM)]
        if doc["exp"] >= 601:
            yield doc["exp"] - 601, {Code.LIFETIME_INVALID}, SEM
    elif key == "exp":
        yield from [(-1, shape, S), (doc["iat"], {Code.LIFETIME_INVALID}, SEM),
                    (doc["iat"] + 601, {Code.LIFETIME_INVALID}, SEM)]
    elif key == "principal":
        yield from ((bad, shape, S) for bad in _BAD_MXIDS)
    elif key == "kind":
        for bad in ("matrix", "bridged_matrix", "oidc_client", "bridge_service", "other", ""):
            if bad != value:
                yield bad, {Code.SHAPE_INVALID, Code.FIELD_MISSING, Code.UNKNOWN_FIELD}, S
    elif key == "allowed_classifications":
        for bad in ([], ["public", "approved_non_public"], ["approved_non_public"],
                    ["restricted"], ["public", "public"], ["approved_non_public", "public", "x"]):
            yield bad, shape, S
    elif key == "audience" and isinstance(value, list):
        yield from _bad_audiences(value, doc)
    elif key == "groups":
        yield from _bad_groups(value, doc)
    elif key == "history_visibility":
        yield from ((bad, shape, S) for bad in ("shared", "invited", "world_readable", ""))
    elif key == "join_rule":
        yield from ((bad, shape, S) for bad in ("public", "knock", "restricted", ""))
    elif key == "id":
        yield from ((bad, shape, S) for bad in ("room", "!", "!a b", "!" + "a" * 255))
    elif key == "event_id":
        yield from ((bad, shape, S) for bad in ("event", "$", "$a b", "$" + "e" * 255))
    elif key == "issuer":
        yield from [("", shape, S), ("i" * 513, shape, S), ("é" * 257, shape, SEM)]
    elif key in ("audience", "azp"):
        yield from [("", shape, S), ("a" * 256, shape, S), ("é" * 128, shape, SEM)]
    elif key == "caller":
        yield {"kind": "matrix", "principal": "@nobody:absent.example"}, {
            Code.AUDIENCE_INVALID}, SEM


def _bad_audiences(value: list[Any], doc: dict[str, Any]) -> Iterator[
        tuple[Any, set[Code], bool]]:
    audience = {Code.AUDIENCE_INVALID}
    yield [], {Code.SHAPE_INVALID}, S
    yield [*value, *([value[0]] * (17 - len(value)))], {Code.SHAPE_INVALID}, S
    if len(value) < 16:
        yield [*value, value[0]], audience, SEM  # a duplicate
    if len(value) >= 2:
        yield list(reversed(value)), audience, SEM
    caller = doc.get("caller") or {k: doc[k] for k in ("kind", "network", "principal")
                                    if k in doc}
    if len(value) >= 2:
        yield [e for e in value if e != caller], audience, SEM


def _bad_groups(value: list[Any], doc: dict[str, Any]) -> Iterator[
        tuple[Any, set[Code], bool]]:
    shape, groups = {Code.SHAPE_INVALID}, {Code.GROUPS_INVALID}
    if doc["kind"] != "oidc_client":
        yield from ((bad, shape, S) for bad in (["partner/a/b"], [""]))
        return
    policy = doc["client"]["policy_id"]
    yield [], shape, S
    yield [f"partner/{policy}/g{i:02d}" for i in range(17)], shape, S
    yield ["partner/Org/x"], shape, S
    yield ["local/x"], shape, S
    yield [f"partner/{policy}/x/y"], shape, S
    yield [f"partner/{policy}x/y"], groups, SEM  # another partner's namespace
    if len(value) < 16:
        yield [*value, value[-1]], groups, SEM
    if len(value) >= 2:
        yield list(reversed(value)), groups, SEM


def mutations(doc: dict[str, Any]) -> Iterator[Mutation]:
    """Every single-field corruption: drop, retype, out-of-range value, unknown field."""

    def walk(node: Any, path: JsonPath) -> Iterator[Mutation]:
        if isinstance(node, dict):
            yield Mutation(f"unknown field in {path}", _replace(doc, path, {**node, "zz": 1}),
                           frozenset({Code.UNKNOWN_FIELD}), S)
            for key, value in node.items():
                here = (*path, key)
                yield Mutation(f"drop {here}", _drop(doc, here),
                               frozenset({Code.FIELD_MISSING}), S)
                yield from retype(value, here, key)
                for bad, codes, structural in _out_of_range(key, value, doc):
                    yield Mutation(f"{here} = {bad!r:.40}", _replace(doc, here, bad),
                                   frozenset(codes), structural)
                yield from walk(value, here)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                yield from retype(item, (*path, index), "")
                yield from walk(item, (*path, index))

    def retype(value: Any, here: JsonPath, key: str) -> Iterator[Mutation]:
        for alt in _RETYPES:
            if _json_type(alt) == _json_type(value):
                continue
            codes = ({Code.NUMBER_INVALID} if isinstance(alt, float)
                     else {Code.VERSION_UNSUPPORTED} if key == "v"
                     else {Code.SHAPE_INVALID})
            yield Mutation(f"retype {here} -> {alt!r}", _replace(doc, here, alt),
                           frozenset(codes), S)

    yield from walk(doc, ())


def _assert_all_rejected(
    doc: dict[str, Any], doc_kind: str, now: int, user_id: str, *, with_schema: bool,
) -> int:
    """Decode every mutation (and, if asked, check the schema agrees: jsonschema is slow)."""
    stem = "identity" if doc_kind == "identity" else "room-context"
    count = 0
    for mutation in mutations(doc):
        header = b64(jcs_text(mutation.doc))
        with pytest.raises(ContractError) as info:
            decode_doc(doc_kind, header, now, user_id)
        assert info.value.code in mutation.codes, (mutation.what, str(info.value))
        if with_schema and mutation.structural:
            assert not schema(stem).is_valid(mutation.doc), mutation.what
        count += 1
    return count


@MUTATION_SETTINGS
@given(IDENTITIES)
def test_every_single_field_corruption_of_a_projection_is_rejected(
    case: tuple[contract.AnyIdentity, int],
) -> None:
    identity, now = case
    doc = identity.model_dump(mode="json")
    assert _assert_all_rejected(doc, "identity", now, "", with_schema=False) > 60


@MUTATION_SETTINGS
@given(room_contexts())
def test_every_single_field_corruption_of_a_room_context_is_rejected(
    context: RoomContext,
) -> None:
    doc = context.model_dump(mode="json")
    assert _assert_all_rejected(doc, "room-context", 0, context.caller.principal,
                                with_schema=False) > 40


@given(st.one_of(IDENTITIES.map(lambda c: ("identity", c[0])),
                 room_contexts().map(lambda c: ("room-context", c))), st.data())
def test_the_schemas_reject_every_structural_corruption(
    case: tuple[str, Any], data: st.DataObject,
) -> None:
    stem, model = case
    structural = [m for m in mutations(model.model_dump(mode="json")) if m.structural]
    mutation = data.draw(st.sampled_from(structural))
    assert not schema(stem).is_valid(mutation.doc), mutation.what


def _drop_targets(node: Any, path: JsonPath = ()) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"drop {(*path, key)}"
            yield from _drop_targets(value, (*path, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _drop_targets(item, (*path, index))


@pytest.mark.parametrize("name", ["matrix", "oauth"])
def test_mutations_cover_every_field_of_the_adr_examples(name: str) -> None:
    doc = _adr(f"{name}_projection")
    dropped = {m.what for m in mutations(doc) if m.what.startswith("drop ")}
    assert dropped == set(_drop_targets(doc))
    assert _assert_all_rejected(doc, "identity", doc["iat"], "", with_schema=True) > 100


def test_mutations_of_the_adr_room_context_are_rejected() -> None:
    doc = _adr("matrix_projection")
    context = {k: doc[k] for k in ("allowed_classifications", "audience", "delegation_id",
                                   "room", "v")}
    context["caller"] = {"kind": "matrix", "principal": doc["principal"]}
    assert _assert_all_rejected(context, "room-context", 0, doc["principal"],
                                with_schema=True) > 80


@pytest.mark.parametrize(("delta", "expected"), [
    (-31, Code.NOT_YET_VALID), (-30, None), (0, None), ("exp-1", None), ("exp", Code.EXPIRED)])
def test_the_clock_is_checked_on_decode(delta: int | str, expected: Code | None) -> None:
    identity = contract.load_identity(json.dumps(_adr_oauth()))
    header = contract.encode_identity(identity)
    now = (identity.exp - 1 if delta == "exp-1" else identity.exp if delta == "exp"
           else identity.iat + int(delta))
    if expected is None:
        assert contract.decode_identity([header], now=now, agent=None) == identity
    else:
        with pytest.raises(ContractError) as info:
            contract.decode_identity([header], now=now, agent=None)
        assert info.value.code is expected


# --- byte-level corruptions of the header -------------------------------------------------------

_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"


@settings(max_examples=200)
@given(IDENTITIES, st.data())
def test_flipping_one_character_never_yields_the_same_projection(
    case: tuple[contract.AnyIdentity, int], data: st.DataObject,
) -> None:
    identity, now = case
    header = contract.encode_identity(identity)
    index = data.draw(st.integers(0, len(header) - 1))
    char = data.draw(st.sampled_from(_ALPHABET).filter(lambda c: c != header[index]))
    flipped = header[:index] + char + header[index + 1:]
    try:
        decoded = contract.decode_identity([flipped], now=now, agent=None)
    except ContractError:
        return
    # JCS is not a MAC: a flip inside a string value can name another valid projection. It
    # can never be a second spelling of this one, and it is itself canonical.
    assert decoded != identity
    assert contract.encode_identity(decoded) == flipped


@given(IDENTITIES, st.data())
def test_flipping_to_a_foreign_character_is_not_base64url(
    case: tuple[contract.AnyIdentity, int], data: st.DataObject,
) -> None:
    identity, now = case
    header = contract.encode_identity(identity)
    index = data.draw(st.integers(0, len(header)))
    char = data.draw(st.characters().filter(lambda c: c not in _ALPHABET))
    with pytest.raises(ContractError, match=r"^NOT_BASE64URL$"):
        contract.decode_identity([header[:index] + char + header[index:]], now=now, agent=None)


@given(IDENTITIES, st.sampled_from(["=", "==", "==="]))
def test_padding_is_rejected(case: tuple[contract.AnyIdentity, int], pad: str) -> None:
    identity, now = case
    with pytest.raises(ContractError, match=r"^NOT_BASE64URL$"):
        contract.decode_identity([contract.encode_identity(identity) + pad], now=now, agent=None)


def _members(doc: Any, path: JsonPath = ()) -> Iterator[JsonPath]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*path, key)
            yield from _members(value, (*path, key))
    elif isinstance(doc, list):
        for index, item in enumerate(doc):
            yield from _members(item, (*path, index))


def _write(node: Any, *, dup: JsonPath | None = None, swap: JsonPath | None = None,
           at: JsonPath = (), space: JsonPath | None = None) -> str:
    """A JSON writer that can duplicate one member, reverse one object's keys, or add one
    space: three non-canonical spellings of the same document."""
    if isinstance(node, dict):
        keys = sorted(node)
        if swap == at:
            keys.reverse()
        parts = []
        for key in keys:
            value = _write(node[key], dup=dup, swap=swap, at=(*at, key), space=space)
            member = f"{json.dumps(key)}:{value}"
            if space == (*at, key):
                member = member.replace(":", ": ", 1)
            parts.append(member)
            if dup == (*at, key):
                parts.append(member)
        return "{" + ",".join(parts) + "}"
    if isinstance(node, list):
        return "[" + ",".join(_write(v, dup=dup, swap=swap, at=(*at, i), space=space)
                              for i, v in enumerate(node)) + "]"
    return json.dumps(node, ensure_ascii=False)


@given(IDENTITIES, st.data())
def test_duplicate_names_reordered_keys_and_whitespace_are_rejected(
    case: tuple[contract.AnyIdentity, int], data: st.DataObject,
) -> None:
    identity, now = case
    doc = identity.model_dump(mode="json")
    assert _write(doc).encode() == rfc8785.dumps(doc)  # the writer is JCS when untouched
    member = data.draw(st.sampled_from(list(_members(doc))))

    def code(text: str) -> Code:
        with pytest.raises(ContractError) as info:
            contract.decode_identity([b64(text.encode())], now=now, agent=None)
        return info.value.code

    assert code(_write(doc, dup=member)) == Code.DUPLICATE_NAME
    assert code(_write(doc, space=member)) == Code.NOT_CANONICAL
    objects = [p for p in [(), *_members(doc)] if isinstance(_get(doc, p), dict)
               and len(_get(doc, p)) > 1]
    assert code(_write(doc, swap=data.draw(st.sampled_from(objects)))) == Code.NOT_CANONICAL


def _get(doc: Any, path: JsonPath) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _escape_first_letter(text: str) -> str | None:
    """JSON for `text` with its first ASCII letter written as a \\u escape (None: no letter)."""
    for index, char in enumerate(text):
        if char.isascii() and char.isalpha():
            return (json.dumps(text[:index], ensure_ascii=False)[:-1] + f"\\u{ord(char):04x}"
                    + json.dumps(text[index + 1:], ensure_ascii=False)[1:])
    return None


@given(IDENTITIES, st.data())
def test_escaping_a_character_is_not_canonical(
    case: tuple[contract.AnyIdentity, int], data: st.DataObject,
) -> None:
    identity, now = case
    doc = identity.model_dump(mode="json")
    raw = rfc8785.dumps(doc).decode()
    # Every name and string value, as it is spelled in the canonical text.
    spellings = sorted({json.dumps(p[-1]) for p in _members(doc) if isinstance(p[-1], str)}
                       | {json.dumps(_get(doc, p), ensure_ascii=False) for p in _members(doc)
                          if isinstance(_get(doc, p), str)})
    spelled = data.draw(st.sampled_from(spellings))
    escaped = _escape_first_letter(json.loads(spelled))
    assume(escaped is not None)
    assert escaped is not None and spelled in raw
    text = raw.replace(spelled, escaped, 1)
    with pytest.raises(ContractError, match=r"^NOT_CANONICAL$"):
        contract.decode_identity([b64(text.encode())], now=now, agent=None)


# --- errors never echo input ----------------------------------------------------------------

SENTINEL = "SENTINELzq7"
_SAFE = re.compile(r"^[A-Z][A-Z0-9_]*( at [a-z_][a-z0-9_]*(\[[0-9]+\])*"
                   r"(\.[a-z_][a-z0-9_]*(\[[0-9]+\])*)*)?$")


def _assert_content_free(error: ContractError, *needles: str) -> None:
    rendered = [str(error), repr(error), error.path, *map(str, error.args)]
    assert _SAFE.fullmatch(str(error)), str(error)
    assert error.code in set(Code)
    assert error.__cause__ is None and error.__context__ is None
    for needle in needles:
        for text in rendered:
            assert needle not in text


def _sentinel_docs(doc: dict[str, Any]) -> Iterator[Any]:
    for path in _members(doc):
        value = _get(doc, path)
        yield _replace(doc, path, SENTINEL)
        yield _replace(doc, path, [SENTINEL])
        yield _replace(doc, path, {SENTINEL: SENTINEL})
        if isinstance(value, str):
            yield _replace(doc, path, value + SENTINEL)
            yield _replace(doc, path, SENTINEL + value)
            yield _replace(doc, path, f"@{SENTINEL.lower()}:x")
        if isinstance(value, dict):
            yield _replace(doc, path, {**value, SENTINEL: 1})
            yield _replace(doc, path, {**value, "zz": SENTINEL})
    yield {**doc, SENTINEL: SENTINEL}
    yield {**doc, SENTINEL.lower(): 1}
    yield [SENTINEL]
    yield SENTINEL


@MUTATION_SETTINGS
@given(IDENTITIES)
def test_errors_never_contain_input(case: tuple[contract.AnyIdentity, int]) -> None:
    identity, now = case
    rejected = 0
    for doc in _sentinel_docs(identity.model_dump(mode="json")):
        text = jcs_text(doc)
        # Canonical, non-canonical (a space) and duplicate-name spellings of the document.
        for raw in (text, text.replace(b"}", b" }", 1), _with_duplicate_first_name(text)):
            header = b64(raw)
            try:
                contract.decode_identity([header], now=now, agent=None)
            except ContractError as error:
                _assert_content_free(error, SENTINEL, SENTINEL.lower(), header[:16])
                rejected += 1
            # Accepted only where the sentinel is a legitimate free-form OAuth client string.
    assert rejected > 100


def _with_duplicate_first_name(text: bytes) -> bytes:
    if not text.startswith(b'{"'):
        return text
    name_end = text.index(b'"', 2) + 1
    return b"{" + text[1:name_end] + b":" + json.dumps(SENTINEL).encode() + b"," + text[1:]


@given(st.lists(st.one_of(st.text(max_size=64), st.binary(max_size=64)), max_size=3)
       .map(lambda values: [SENTINEL + v if isinstance(v, str) else v for v in values]))
def test_arbitrary_header_values_fail_with_a_bare_code(values: list[str | bytes]) -> None:
    for decode in (lambda: contract.decode_identity(values, now=0, agent=None),
                   lambda: contract.decode_room_context(values, user_id=SENTINEL)):
        with pytest.raises(ContractError) as info:
            decode()
        _assert_content_free(info.value, SENTINEL)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.just(SENTINEL),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12))
def test_arbitrary_json_fails_with_a_bare_code(value: Any) -> None:
    header = b64(jcs_text(value))
    with pytest.raises(ContractError) as info:
        contract.decode_identity([header], now=0, agent=None)
    _assert_content_free(info.value, SENTINEL)


@given(st.binary(max_size=256))
def test_arbitrary_bytes_fail_with_a_bare_code(raw: bytes) -> None:
    assume(not raw.startswith(b"{"))
    with pytest.raises(ContractError) as info:
        contract.decode_identity([b64(raw)], now=0, agent=None)
    _assert_content_free(info.value)


# --- snapshot digests -----------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> contract.RoomSnapshot:
    members = draw(st.lists(st.tuples(principals(), st.booleans(), EVENT_ID), min_size=1,
                            max_size=12, unique_by=lambda m: m[0].principal))
    joined: list[Any] = []
    for principal, service, event_id in members:
        if service and isinstance(principal, MatrixPrincipal):
            joined.append(shapes.JoinedBridgeService(
                event_id=event_id, kind="bridge_service", principal=principal.principal))
        elif isinstance(principal, BridgedPrincipal):
            joined.append(shapes.JoinedBridged(event_id=event_id, kind="bridged_matrix",
                                               network=principal.network,
                                               principal=principal.principal))
        else:
            joined.append(shapes.JoinedMatrix(event_id=event_id, kind="matrix",
                                              principal=principal.principal))
    joined.sort(key=semantics.sort_key)
    acl = draw(st.none() | st.builds(
        shapes.ServerAcl,
        allow=st.lists(_HOST, unique=True, max_size=5).map(lambda v: tuple(sorted(v))),
        allow_ip_literals=st.booleans(),
        deny=st.lists(_HOST, unique=True, max_size=5).map(lambda v: tuple(sorted(v))),
        event_id=EVENT_ID))
    return contract.RoomSnapshot(
        allowed_classifications=draw(CLASSES),
        create=shapes.CreateState(event_id=draw(EVENT_ID), federate=draw(st.booleans())),
        history_visibility=shapes.HistoryVisibilityState(event_id=draw(EVENT_ID),
                                                         value="joined"),
        join_rule=shapes.JoinRuleState(event_id=draw(EVENT_ID), value="invite"),
        joined=tuple(joined), room_id=draw(ROOM_ID), server_acl=acl)


@given(snapshots())
def test_state_sha256_is_sha256_of_rfc8785(snapshot: contract.RoomSnapshot) -> None:
    doc = snapshot.model_dump(mode="json")
    expected = hashlib.sha256(rfc8785.dumps(doc)).hexdigest()
    assert contract.state_sha256(snapshot) == expected
    assert contract.state_sha256(contract.load_snapshot(json.dumps(doc, indent=1))) == expected
    schema("room-snapshot").validate(doc)
