"""Contract shapes: generated JSON Schemas, the ADR examples, and every cross-field rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from fgentic_devenv import paths
from fgentic_governance import cli, contract
from fgentic_governance.contract import Code, ContractError, schemagen, semantics, shapes
from fgentic_governance.contract.shapes import (
    BridgedMatrixProjection,
    BridgedPrincipal,
    MatrixPrincipal,
    MatrixProjection,
    OAuthProjection,
)

DATA = Path(contract.__file__).parent / "testdata"
IAT, EXP = 1784116800, 1784117400  # the ADR examples' window


def schema_file(stem: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (paths.schema_dir() / f"{stem}{schemagen.SUFFIX}").read_text())
    return doc


def validator(stem: str) -> Draft202012Validator:
    return Draft202012Validator(schema_file(stem))


def adr(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"adr0017_{name}.json").read_text())
    return doc


def matrix() -> MatrixProjection:
    identity = contract.load_identity(json.dumps(adr("matrix_projection")))
    assert isinstance(identity, MatrixProjection)
    return identity


def oauth() -> OAuthProjection:
    identity = contract.load_identity(json.dumps(adr("oauth_projection")))
    assert isinstance(identity, OAuthProjection)
    return identity


def code(func: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ContractError) as info:
        func(*args, **kwargs)
    return str(info.value)


# --- generated schemas ------------------------------------------------------------------------


def test_committed_schemas_match_models() -> None:
    assert schemagen.drift(paths.schema_dir()) == []


@pytest.mark.parametrize("stem", ["identity", "matrix-projection", "oauth-projection",
                                  "room-context", "room-snapshot"])
def test_schemas_are_draft_2020_12(stem: str) -> None:
    schema = schema_file(stem)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert "discriminator" not in json.dumps(schema)


def test_drift_check_catches_edits_extra_and_missing_files(tmp_path: Path) -> None:
    crds = ["crds", "--output", str(tmp_path / "crds"), "--schema-dir", str(tmp_path)]
    assert cli.main(crds) == 0
    assert cli.main([*crds, "--check"]) == 0
    target = tmp_path / "identity.schema.json"
    target.write_text(target.read_text().replace('"maxItems": 16', '"maxItems": 17'))
    (tmp_path / "rogue.schema.json").write_text("{}\n")
    (tmp_path / "room-context.schema.json").unlink()
    assert len(schemagen.drift(tmp_path)) == 3
    assert cli.main([*crds, "--check"]) == 1
    schemagen.write(tmp_path)
    assert schemagen.drift(tmp_path) == []


def test_fields_must_be_declared_in_jcs_order() -> None:
    with pytest.raises(TypeError, match="JCS"):
        class Unsorted(shapes._Shape):
            v: int
            agent: str


# --- the ADR's examples -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "stems"), [
    ("matrix_projection", ("identity", "matrix-projection")),
    ("oauth_projection", ("identity", "oauth-projection")),
])
def test_adr_examples_satisfy_schema_and_semantics(name: str, stems: tuple[str, ...]) -> None:
    doc = adr(name)
    for stem in stems:
        validator(stem).validate(doc)
    identity = contract.load_identity((DATA / f"adr0017_{name}.json").read_bytes())
    for now in (IAT - 30, IAT, EXP - 1):
        contract.check_identity(identity, now=now)


def test_adr_examples_do_not_cross_kinds() -> None:
    assert not validator("oauth-projection").is_valid(adr("matrix_projection"))
    assert not validator("matrix-projection").is_valid(adr("oauth_projection"))


def test_adr_snapshot_satisfies_schema_and_semantics() -> None:
    doc = adr("room_snapshot")
    validator("room-snapshot").validate(doc)
    contract.load_snapshot(json.dumps(doc), local_server="org-a.example")


# --- validity window ----------------------------------------------------------------------------


@pytest.mark.parametrize(("iat", "exp", "now", "expected"), [
    (IAT, IAT + 1, IAT, None),
    (IAT, IAT + 600, IAT, None),
    (IAT, IAT, IAT, "LIFETIME_INVALID at exp"),
    (IAT, IAT - 1, IAT, "LIFETIME_INVALID at exp"),
    (IAT, IAT + 601, IAT, "LIFETIME_INVALID at exp"),
    (IAT, EXP, IAT - 30, None),
    (IAT, EXP, IAT - 31, "NOT_YET_VALID at iat"),
    (IAT, EXP, EXP - 1, None),
    (IAT, EXP, EXP, "EXPIRED at exp"),
    (IAT, EXP, EXP + 10**6, "EXPIRED at exp"),
])
def test_validity_window(iat: int, exp: int, now: int, expected: str | None) -> None:
    for identity in (matrix(), oauth()):
        timed = identity.model_copy(update={"iat": iat, "exp": exp})
        if expected is None:
            contract.check_identity(timed, now=now)
        else:
            assert code(contract.check_identity, timed, now=now) == expected


# --- Matrix rules -------------------------------------------------------------------------------

ALICE = MatrixPrincipal(kind="matrix", principal="@alice:org-a.example")
BOB = BridgedPrincipal(kind="bridged_matrix", network="slack",
                       principal="@slack-bob:org-a.example")
CAROL = MatrixPrincipal(kind="matrix", principal="@carol:org-b.example")


@pytest.mark.parametrize(("audience", "expected"), [
    ((BOB, ALICE), None),
    ((ALICE,), None),
    ((BOB, ALICE, CAROL), None),
    ((ALICE, BOB), "AUDIENCE_INVALID at audience"),  # not byte-sorted by kind first
    ((ALICE, CAROL, BOB), "AUDIENCE_INVALID at audience"),
    ((BOB, ALICE, ALICE), "AUDIENCE_INVALID at audience"),  # duplicate
    ((BOB,), "AUDIENCE_INVALID at audience"),  # caller missing
    ((BOB, CAROL), "AUDIENCE_INVALID at audience"),
    ((), "AUDIENCE_INVALID at audience"),
    # The caller's MXID under a second kind.
    ((BridgedPrincipal(kind="bridged_matrix", network="irc", principal=ALICE.principal), ALICE),
     "AUDIENCE_INVALID at audience"),
])
def test_audience_rules(audience: tuple[Any, ...], expected: str | None) -> None:
    identity = matrix().model_copy(update={"audience": audience})
    if expected is None:
        contract.check_identity(identity, now=IAT)
        assert contract.decode_identity([contract.encode_identity(identity)], now=IAT,
                                        agent=None) == identity
    else:
        assert code(contract.check_identity, identity, now=IAT) == expected


def test_audience_has_at_most_sixteen_entries() -> None:
    readers = [MatrixPrincipal(kind="matrix", principal=f"@u{i:02d}:org-a.example")
               for i in range(17)]
    assert code(semantics.check_audience, tuple(readers), readers[0]) == (
        "AUDIENCE_INVALID at audience")
    doc = adr("matrix_projection")
    doc["audience"] = [r.model_dump() for r in readers]
    assert not validator("matrix-projection").is_valid(doc)
    assert code(contract.load_identity, json.dumps(doc)) == "SHAPE_INVALID at audience"


def test_audience_is_sorted_by_utf8_bytes_of_kind_network_principal() -> None:
    # (kind, network-or-empty, principal): bridged_matrix < matrix, then network, then MXID.
    entries = [
        BridgedPrincipal(kind="bridged_matrix", network="irc", principal="@z:x"),
        BridgedPrincipal(kind="bridged_matrix", network="slack", principal="@s1:x"),
        BridgedPrincipal(kind="bridged_matrix", network="slack", principal="@s2:x"),
        MatrixPrincipal(kind="matrix", principal="@a.b:x"),
        MatrixPrincipal(kind="matrix", principal="@a:x"),  # '.' (0x2e) < ':' (0x3a)
        MatrixPrincipal(kind="matrix", principal="@ab:x"),
    ]
    semantics.check_audience(tuple(entries), entries[0])
    assert sorted(entries, key=semantics.sort_key) == entries


def test_bridged_caller_needs_its_network_in_the_audience() -> None:
    doc = adr("matrix_projection")
    doc.update(kind="bridged_matrix", network="slack", principal="@slack-bob:org-a.example")
    identity = contract.load_identity(json.dumps(doc))
    assert isinstance(identity, BridgedMatrixProjection)
    contract.check_identity(identity, now=IAT)
    doc["network"] = "irc"
    assert code(contract.load_identity, json.dumps(doc)) == "AUDIENCE_INVALID at audience"


@pytest.mark.parametrize(("field", "value"), [
    ("groups", ["partner/org-b/docs"]),
    ("allowed_classifications", ["public", "approved_non_public"]),
    ("allowed_classifications", ["approved_non_public"]),
    ("allowed_classifications", []),
    ("allowed_classifications", ["public", "public"]),
    ("allowed_classifications", ["restricted"]),
    ("delegation_id", "9F4E" + "0" * 60),
    ("delegation_id", "0" * 63),
    ("principal", "alice"),
    ("principal", "@alice"),
    ("agent", {"name": "Knowledge", "namespace": "kagent"}),
    ("agent", {"name": "k" * 64, "namespace": "kagent"}),
    ("agent", {"name": "knowledge-agent"}),
])
def test_matrix_field_rules_are_in_the_schema(field: str, value: Any) -> None:
    doc = adr("matrix_projection")
    doc[field] = value
    assert not validator("identity").is_valid(doc)
    with pytest.raises(ContractError) as info:
        contract.load_identity(json.dumps(doc))
    assert info.value.code in {Code.SHAPE_INVALID, Code.FIELD_MISSING}


def test_classification_allow_lists() -> None:
    for allowed in (["public"], ["approved_non_public", "public"]):
        doc = adr("matrix_projection")
        doc["allowed_classifications"] = allowed
        validator("identity").validate(doc)
        assert contract.load_identity(json.dumps(doc)).allowed_classifications == tuple(allowed)


# --- grammars: model and schema accept exactly the same strings -------------------------------


@pytest.mark.parametrize(("mxid", "valid"), [
    ("@alice:org-a.example", True),
    ("@a.b_c=d/e+f-9:host.example:8448", True),
    ("@a:[2001:db8::1]:8448", True),
    ("@a:1.2.3.4", True),
    ("@" + "a" * 240 + ":org-a.example", True),  # 255 bytes
    ("@" + "a" * 241 + ":org-a.example", False),  # 256 bytes
    ("alice", False),
    ("@alice", False),
    ("@alice:", False),
    ("@:org-a.example", False),
    ("@Alice:org-a.example", False),
    ("@al ice:org-a.example", False),
    ("@alice:org a.example", False),
    ("@alice:org-a.example:123456", False),
    ("@alicé:org-a.example", False),
    ("@alice:org-a.example\n", False),
])
def test_mxid_grammar(mxid: str, valid: bool) -> None:
    doc = adr("matrix_projection")
    doc["principal"] = mxid
    doc["audience"] = [{"kind": "matrix", "principal": mxid}]
    if not mxid.endswith("\n"):
        # Python's re (used by the jsonschema package) lets '$' match before a final newline;
        # ECMA-262, which JSON Schema specifies, and the models' Rust engine do not.
        assert validator("identity").is_valid(doc) == valid
    if valid:
        contract.load_identity(json.dumps(doc))
    else:
        # Fields are checked in key order: the audience entry comes first.
        assert code(contract.load_identity, json.dumps(doc)) == (
            "SHAPE_INVALID at audience[0].principal")


@pytest.mark.parametrize(("field", "value", "valid"), [
    ("id", "!room:org-a.example", True),
    ("id", "!31hneApxJ_1o-63DmFrpeqnkFfWppnzWso1JvH3ogLM", True),  # room v12: no server part
    ("id", "room:org-a.example", False),
    ("id", "!", False),
    ("id", "!ro om:org-a.example", False),
    ("id", "!" + "r" * 255, False),
    ("event_id", "$event", True),
    ("event_id", "$acR1l0raoZnm60CBwAVgqbZqoO/mYU81xysh1u7XcJk", True),
    ("event_id", "$event:org-a.example", True),
    ("event_id", "event", False),
    ("event_id", "$", False),
    ("event_id", "$ev ent", False),
    ("history_visibility", "shared", False),
    ("history_visibility", "invited", False),
    ("join_rule", "public", False),
    ("join_rule", "knock", False),
    ("state_sha256", "58E67EFE5CD7F5FF2805EB0F35192EA90EF64244C896417B5504AF8AD102BE17", False),
    ("state_sha256", "58e67efe", False),
])
def test_room_rules(field: str, value: str, valid: bool) -> None:
    doc = adr("matrix_projection")
    doc["room"][field] = value
    assert validator("identity").is_valid(doc) == valid
    if valid:
        contract.load_identity(json.dumps(doc))
    else:
        assert code(contract.load_identity, json.dumps(doc)) == f"SHAPE_INVALID at room.{field}"


# --- OAuth rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "expected"), [
    (["partner/org-b/docs"], None),
    (["partner/org-b/a", "partner/org-b/b"], None),
    ([f"partner/org-b/g{i:02d}" for i in range(16)], None),
    ([f"partner/org-b/g{i:02d}" for i in range(17)], "SHAPE_INVALID at groups"),
    ([], "SHAPE_INVALID at groups"),
    (["partner/org-b/b", "partner/org-b/a"], "GROUPS_INVALID at groups"),
    (["partner/org-b/a", "partner/org-b/a"], "GROUPS_INVALID at groups"),
    (["partner/org-c/docs"], "GROUPS_INVALID at groups"),
    (["partner/org-b-x/docs"], "GROUPS_INVALID at groups"),
    (["partner/org-b/Docs"], "SHAPE_INVALID at groups[0]"),
    (["partner/org-b/docs/x"], "SHAPE_INVALID at groups[0]"),
    (["partner/org-b/"], "SHAPE_INVALID at groups[0]"),
    (["docs"], "SHAPE_INVALID at groups[0]"),
    (["local/docs"], "SHAPE_INVALID at groups[0]"),
])
def test_partner_groups(groups: list[str], expected: str | None) -> None:
    doc = adr("oauth_projection")
    doc["groups"] = groups
    if expected is None:
        identity = contract.load_identity(json.dumps(doc))
        contract.check_identity(identity, now=IAT)
    else:
        assert code(contract.load_identity, json.dumps(doc)) == expected
    # The schema holds the per-group grammar and count; order and namespace are semantic.
    assert validator("oauth-projection").is_valid(doc) == (
        expected is None or expected.startswith("GROUPS_INVALID"))


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("issuer", "i" * 512, None),
    ("issuer", "é" * 256, None),  # 512 UTF-8 bytes
    ("issuer", "é" * 256 + "i", "SHAPE_INVALID at client.issuer"),  # 513 bytes, 257 chars
    ("issuer", "i" * 513, "SHAPE_INVALID at client.issuer"),
    ("issuer", "", "SHAPE_INVALID at client.issuer"),
    ("audience", "a" * 255, None),
    ("audience", "a" * 256, "SHAPE_INVALID at client.audience"),
    ("audience", "é" * 128, "SHAPE_INVALID at client.audience"),  # 256 bytes
    ("azp", "z" * 255, None),
    ("azp", "ž" * 128, "SHAPE_INVALID at client.azp"),
    ("policy_id", "Org-B", "SHAPE_INVALID at client.policy_id"),
])
def test_client_bounds_are_utf8_bytes(field: str, value: str, expected: str | None) -> None:
    doc = adr("oauth_projection")
    doc["client"][field] = value
    if field == "policy_id":
        doc["groups"] = [f"partner/{value}/docs"]
    if expected is None:
        identity = contract.load_identity(json.dumps(doc))
        assert contract.decode_identity([contract.encode_identity(identity)], now=IAT,
                                        agent=None) == identity
    else:
        assert code(contract.load_identity, json.dumps(doc)) == expected


@pytest.mark.parametrize("field", ["principal", "room", "audience", "network"])
def test_oauth_projection_has_no_matrix_fields(field: str) -> None:
    doc = adr("oauth_projection")
    doc[field] = adr("matrix_projection").get(field, "slack")
    assert not validator("identity").is_valid(doc)
    assert code(contract.load_identity, json.dumps(doc)) == "UNKNOWN_FIELD"
