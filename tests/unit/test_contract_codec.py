"""The X-Fgentic-Identity / X-Fgentic-Room-Context carrier: one value, sizes, base64url, JCS."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from fgentic_governance import contract
from fgentic_governance.contract import Code, ContractError, limits
from fgentic_governance.contract.codec import header_bytes
from fgentic_governance.contract.shapes import (
    AgentRef,
    BridgedPrincipal,
    MatrixPrincipal,
    MatrixProjection,
    RoomContext,
)

DATA = Path(contract.__file__).parent / "testdata"
AGENT = AgentRef(name="knowledge-agent", namespace="kagent")
NOW = 1784117000  # inside the ADR examples' window [1784116800, 1784117400)


def adr_doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"adr0017_{name}.json").read_text())
    return doc


def adr_matrix() -> MatrixProjection:
    identity = contract.load_identity((DATA / "adr0017_matrix_projection.json").read_text())
    assert isinstance(identity, MatrixProjection)
    return identity


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jcs_text(doc: Any) -> bytes:
    # Equal to RFC 8785 for these documents (ASCII keys, integers) and, unlike `rfc8785`, able
    # to write out-of-domain values such as 2**53 or 1.5 that the decoder must reject.
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def decode(value: str | bytes, *, now: int = NOW) -> contract.AnyIdentity:
    return contract.decode_identity([value], now=now, agent=AGENT)


def code_of(value: str | bytes) -> Code:
    with pytest.raises(ContractError) as info:
        decode(value)
    return info.value.code


def test_adr_projections_round_trip_and_encode_deterministically() -> None:
    for name in ("matrix_projection", "oauth_projection"):
        identity = contract.load_identity(json.dumps(adr_doc(name)))
        header = contract.encode_identity(identity)
        assert header == contract.encode_identity(identity)
        assert header == b64(jcs_text(adr_doc(name)))
        assert decode(header) == identity
        assert decode(header.encode()) == identity  # raw bytes from an HTTP server


def test_exactly_one_header_value() -> None:
    header = contract.encode_identity(adr_matrix())
    with pytest.raises(ContractError, match=r"^HEADER_MISSING$"):
        contract.decode_identity([], now=NOW, agent=AGENT)
    with pytest.raises(ContractError, match=r"^HEADER_DUPLICATE$"):
        contract.decode_identity([header, header], now=NOW, agent=AGENT)
    with pytest.raises(ContractError, match=r"^HEADER_DUPLICATE$"):
        contract.decode_identity([header, ""], now=NOW, agent=AGENT)
    with pytest.raises(TypeError):
        contract.decode_identity(header, now=NOW, agent=AGENT)


def sized_projection(size: int) -> MatrixProjection:
    """A valid Matrix projection whose JCS encoding is exactly `size` bytes (16 readers)."""
    base = adr_matrix()
    # A long (valid) event ID leaves room to reach the ceiling with 255-byte MXIDs.
    room = base.room.model_copy(update={"event_id": "$" + "e" * 200})
    base = base.model_copy(update={"room": room})

    def build(extra: int) -> MatrixProjection:
        readers: list[contract.Principal] = []
        for i in range(15):
            # Fill the localparts one after another up to the 255-byte MXID ceiling.
            grow = min(max(extra - i * 237, 0), 237)
            readers.append(BridgedPrincipal(
                kind="bridged_matrix", network="n" * 63,
                principal=f"@s{i:02d}{'u' * grow}:org-a.example"))
        readers.append(MatrixPrincipal(kind="matrix", principal=base.principal))
        return base.model_copy(update={"audience": tuple(readers)})

    low = len(contract.jcs.canonical(build(0).model_dump(mode="json")))
    projection = build(size - low)
    assert len(contract.jcs.canonical(projection.model_dump(mode="json"))) == size
    return projection


def test_size_ceilings_are_exact() -> None:
    assert limits.MAX_ENCODED_BYTES * 3 // 4 == limits.MAX_DECODED_BYTES
    largest = sized_projection(limits.MAX_DECODED_BYTES)
    header = contract.encode_identity(largest)
    assert len(header) == limits.MAX_ENCODED_BYTES
    assert decode(header) == largest
    with pytest.raises(ContractError, match=r"^DECODED_TOO_LARGE$"):
        contract.encode_identity(sized_projection(limits.MAX_DECODED_BYTES + 1))
    assert code_of(header + "A") == Code.HEADER_TOO_LARGE  # 8,193 bytes
    assert code_of("A" * 8193) == Code.HEADER_TOO_LARGE
    assert code_of("A" * 8192) != Code.HEADER_TOO_LARGE
    assert code_of("é" * 8193) == Code.HEADER_TOO_LARGE


def test_decoded_ceiling_is_enforced_independently(monkeypatch: pytest.MonkeyPatch) -> None:
    # Unreachable through a header that passes the encoded ceiling; prove the check anyway.
    monkeypatch.setattr(limits, "MAX_ENCODED_BYTES", 10**6)
    with pytest.raises(ContractError, match=r"^DECODED_TOO_LARGE$"):
        header_bytes([b64(b" " * (limits.MAX_DECODED_BYTES + 1))])


@pytest.mark.parametrize("mutate", [
    lambda h: h + "=",
    lambda h: h + "==",
    lambda h: h[:10] + "+" + h[11:],
    lambda h: h[:10] + "/" + h[11:],
    lambda h: h[:10] + " " + h[10:],
    lambda h: h + "\n",
    lambda h: h[:10] + "é" + h[11:],
    lambda h: h[:10] + "." + h[11:],
    lambda h: h[:-1] if len(h) % 4 == 2 else h + "A",  # a length of 1 mod 4
], ids=["pad1", "pad2", "plus", "slash", "space", "newline", "non-ascii", "dot", "length"])
def test_only_strict_unpadded_base64url(mutate: Any) -> None:
    header = contract.encode_identity(adr_matrix())
    assert code_of(mutate(header)) == Code.NOT_BASE64URL


def test_nonzero_trailing_bits_are_not_a_second_encoding() -> None:
    header = contract.encode_identity(adr_matrix())
    assert len(header) % 4 in (2, 3)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused = 0x0F if len(header) % 4 == 2 else 0x03
    index = alphabet.index(header[-1])
    for bits in range(1, unused + 1):
        twin = header[:-1] + alphabet[index | bits]
        assert base64.urlsafe_b64decode(twin + "=" * (-len(twin) % 4)) == header_bytes([header])
        assert code_of(twin) == Code.NOT_BASE64URL


def raw_with(replace: tuple[bytes, bytes]) -> bytes:
    raw = jcs_text(adr_doc("matrix_projection"))
    old, new = replace
    assert old in raw
    return raw.replace(old, new, 1)


@pytest.mark.parametrize(("raw", "code"), [
    (raw_with((b'"$event"', b'"$ev\xffent"')), Code.NOT_UTF8),
    (raw_with((b'"$event"', b'"$ev\xc0\xafent"')), Code.NOT_UTF8),  # overlong '/'
    (raw_with((b'"$event"', b'"$ev\xed\xa0\x80ent"')), Code.NOT_UTF8),  # encoded surrogate
    (raw_with((b'"$event"', b'"$ev\\ud800ent"')), Code.NOT_UTF8),  # lone surrogate escape
    (raw_with((b'"$event"', b'"$ev\\udc00ent"')), Code.NOT_UTF8),
    (b"", Code.NOT_JSON),
    (b"{", Code.NOT_JSON),
    (b"nul", Code.NOT_JSON),
    (b"\xef\xbb\xbf{}", Code.NOT_JSON),
    (raw_with((b'"v":1', b'"v":1,"v":1')), Code.DUPLICATE_NAME),
    (raw_with((b'"kind":"matrix",', b'"kind":"matrix","kind":"matrix",')), Code.DUPLICATE_NAME),
    (raw_with((b'"name":', b'"name":"x","name":')), Code.DUPLICATE_NAME),
    (raw_with((b'"v":1', b'"v":1.0')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":1e0')), Code.NUMBER_INVALID),
    (raw_with((b'"exp":1784117400', b'"exp":1784117400.0')), Code.NUMBER_INVALID),
    (raw_with((b'"iat":1784116800', b'"iat":1.7841168e9')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":NaN')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":Infinity')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":-Infinity')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":9007199254740993')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v":1,"x":0.5')), Code.NUMBER_INVALID),
    (raw_with((b'"v":1', b'"v": 1')), Code.NOT_CANONICAL),
    (raw_with((b'"v":1}', b'"v":1}\n')), Code.NOT_CANONICAL),
    (b" " + jcs_text(adr_doc("matrix_projection")), Code.NOT_CANONICAL),
    (raw_with((b'"$event"', b'"$\\u0065vent"')), Code.NOT_CANONICAL),
    (raw_with((b'"$event"', b'"\\u0024event"')), Code.NOT_CANONICAL),
    (raw_with((b'"iat":1784116800', b'"iat":1784116800')), None),  # control: unchanged
    (json.dumps(adr_doc("matrix_projection"), indent=2).encode(), Code.NOT_CANONICAL),
    (b"[1]", Code.SHAPE_INVALID),
    (b'"x"', Code.SHAPE_INVALID),
])
def test_json_text_layer(raw: bytes, code: Code | None) -> None:
    if code is None:
        assert decode(b64(raw)) == adr_matrix()
    else:
        assert code_of(b64(raw)) == code


def test_reordered_keys_are_not_canonical() -> None:
    doc = adr_doc("matrix_projection")
    reordered = json.dumps(dict(reversed(list(doc.items()))), separators=(",", ":"))
    assert code_of(b64(reordered.encode())) == Code.NOT_CANONICAL
    doc["room"] = dict(reversed(list(doc["room"].items())))
    nested = json.dumps(doc, separators=(",", ":")).encode()
    assert code_of(b64(nested)) == Code.NOT_CANONICAL


def test_negative_zero_is_not_canonical() -> None:
    doc = adr_doc("matrix_projection")
    doc["iat"], doc["exp"] = 0, 1
    zero = jcs_text(doc).replace(b'"iat":0', b'"iat":-0')
    assert b'"iat":-0,' in zero
    assert code_of(b64(zero)) == Code.NOT_CANONICAL


def test_errors_name_a_code_and_chain_nothing() -> None:
    doc = adr_doc("matrix_projection")
    doc["room"]["id"] = "not a room"
    with pytest.raises(ContractError) as info:
        decode(b64(jcs_text(doc)))
    error = info.value
    assert (error.code, error.path, str(error)) == (
        Code.SHAPE_INVALID, "room.id", "SHAPE_INVALID at room.id")
    assert error.__cause__ is None
    assert error.__context__ is None
    assert repr(error) == "ContractError('SHAPE_INVALID at room.id')"


def test_paths_outside_the_field_grammar_are_dropped() -> None:
    assert str(ContractError(Code.SHAPE_INVALID, "room.id")) == "SHAPE_INVALID at room.id"
    assert str(ContractError(Code.SHAPE_INVALID, "audience[3].kind")) == (
        "SHAPE_INVALID at audience[3].kind")
    for unsafe in ("secret value", "room.ID", "a\nb", "x.", "@alice:org-a.example"):
        assert str(ContractError(Code.SHAPE_INVALID, unsafe)) == "SHAPE_INVALID"


def test_unknown_and_missing_fields_and_versions() -> None:
    doc = adr_doc("matrix_projection")
    doc["room"]["topic"] = "x"
    with pytest.raises(ContractError, match=r"^UNKNOWN_FIELD at room$"):
        decode(b64(jcs_text(doc)))
    doc = adr_doc("matrix_projection")
    del doc["delegation_id"]
    with pytest.raises(ContractError, match=r"^FIELD_MISSING at delegation_id$"):
        decode(b64(jcs_text(doc)))
    doc = adr_doc("matrix_projection")
    doc["v"] = 2
    with pytest.raises(ContractError, match=r"^VERSION_UNSUPPORTED at v$"):
        decode(b64(jcs_text(doc)))


def test_kinds_do_not_mix() -> None:
    matrix, oauth = adr_doc("matrix_projection"), adr_doc("oauth_projection")
    hybrid = {**matrix, "client": oauth["client"]}
    with pytest.raises(ContractError, match=r"^UNKNOWN_FIELD$"):
        decode(b64(jcs_text(hybrid)))
    as_oauth = {**matrix, "kind": "oidc_client"}
    with pytest.raises(ContractError) as info:
        decode(b64(jcs_text(as_oauth)))
    assert info.value.code in {Code.UNKNOWN_FIELD, Code.FIELD_MISSING}
    bridged_without_network = {**matrix, "kind": "bridged_matrix"}
    with pytest.raises(ContractError, match=r"^FIELD_MISSING at network$"):
        decode(b64(jcs_text(bridged_without_network)))
    matrix_with_network = {**matrix, "network": "slack"}
    with pytest.raises(ContractError, match=r"^UNKNOWN_FIELD$"):
        decode(b64(jcs_text(matrix_with_network)))


def test_agent_must_be_the_route_agent() -> None:
    header = contract.encode_identity(adr_matrix())
    other = AgentRef(name="other-agent", namespace="kagent")
    with pytest.raises(ContractError, match=r"^AGENT_MISMATCH at agent$"):
        contract.decode_identity([header], now=NOW, agent=other)
    assert contract.decode_identity([header], now=NOW, agent=None) == adr_matrix()


def adr_context() -> RoomContext:
    matrix = adr_matrix()
    return RoomContext(
        allowed_classifications=matrix.allowed_classifications, audience=matrix.audience,
        caller=MatrixPrincipal(kind="matrix", principal=matrix.principal),
        delegation_id=matrix.delegation_id, room=matrix.room, v=1)


def test_room_context_round_trip_and_caller_binding() -> None:
    context = adr_context()
    header = contract.encode_room_context(context)
    assert contract.decode_room_context([header], user_id="@alice:org-a.example") == context
    with pytest.raises(ContractError, match=r"^CALLER_MISMATCH at caller.principal$"):
        contract.decode_room_context([header], user_id="@slack-bob:org-a.example")
    with pytest.raises(ContractError, match=r"^HEADER_DUPLICATE$"):
        contract.decode_room_context([header, header], user_id="@alice:org-a.example")
    # A room context is not an identity, and an identity is not a room context.
    with pytest.raises(ContractError):
        decode(header)
    with pytest.raises(ContractError):
        contract.decode_room_context([contract.encode_identity(adr_matrix())],
                                     user_id="@alice:org-a.example")


def test_room_context_has_exactly_its_six_fields() -> None:
    assert list(RoomContext.model_fields) == [
        "allowed_classifications", "audience", "caller", "delegation_id", "room", "v"]


def test_encode_refuses_what_decode_would_reject() -> None:
    matrix = adr_matrix()
    unsorted = matrix.model_copy(update={"audience": tuple(reversed(matrix.audience))})
    with pytest.raises(ContractError, match=r"^AUDIENCE_INVALID at audience$"):
        contract.encode_identity(unsorted)
    forged = MatrixProjection.model_construct(**{**dict(matrix), "principal": "alice"})
    with pytest.raises(ContractError):
        contract.encode_identity(forged)
    too_long = matrix.model_copy(update={"exp": matrix.iat + 601})
    with pytest.raises(ContractError, match=r"^LIFETIME_INVALID at exp$"):
        contract.encode_identity(too_long)
