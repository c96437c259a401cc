"""Digests: the ADR's room-snapshot test vector, snapshot normal form, OAuth X-User-Id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from fgentic_governance import contract
from fgentic_governance.contract import ContractError, shapes
from fgentic_governance.contract.shapes import (
    AgentRef,
    BridgedMatrixProjection,
    BridgedPrincipal,
    MatrixPrincipal,
    OAuthProjection,
    RoomContext,
)

DATA = Path(contract.__file__).parent / "testdata"
VECTOR = "58e67efe5cd7f5ff2805eb0f35192ea90ef64244c896417b5504af8ad102be17"


def snapshot_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "adr0017_room_snapshot.json").read_text())
    return doc


def snapshot(doc: dict[str, Any] | None = None) -> contract.RoomSnapshot:
    return contract.load_snapshot(json.dumps(snapshot_doc() if doc is None else doc))


def code(func: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ContractError) as info:
        func(*args, **kwargs)
    return str(info.value)


def test_adr_snapshot_hashes_to_the_adr_vector() -> None:
    text = (DATA / "adr0017_room_snapshot.json").read_text()
    assert '"joined": [' in text  # the ADR's own formatting, copied verbatim
    assert contract.state_sha256(contract.load_snapshot(text)) == VECTOR
    # The same digest from nothing but the file and the reference JCS package.
    assert hashlib.sha256(rfc8785.dumps(json.loads(text))).hexdigest() == VECTOR


def test_the_vector_is_the_adr_projections_state_sha256() -> None:
    identity = contract.load_identity((DATA / "adr0017_matrix_projection.json").read_text())
    assert not isinstance(identity, OAuthProjection)
    assert identity.room.state_sha256 == VECTOR
    # And the projection's audience is exactly the snapshot's readers, bridge services excluded.
    assert contract.audience_from_snapshot(snapshot()) == identity.audience


@pytest.mark.parametrize("edit", [
    lambda d: d["create"].update(federate=False),
    lambda d: d["joined"].pop(0),
    lambda d: d["joined"][1].update(network="irc"),
    lambda d: d["server_acl"].update(allow_ip_literals=True),
    lambda d: d["server_acl"]["deny"].append("evil.example"),
    lambda d: d.update(allowed_classifications=["public"]),
    lambda d: d.update(server_acl=None),
    lambda d: d["history_visibility"].update(event_id="$history2"),
])
def test_every_relevant_change_changes_the_digest(edit: Any) -> None:
    doc = snapshot_doc()
    edit(doc)
    assert contract.state_sha256(snapshot(doc)) != VECTOR


def test_digest_ignores_input_formatting() -> None:
    doc = snapshot_doc()
    shuffled = json.dumps(dict(reversed(list(doc.items()))), indent=4)
    assert contract.state_sha256(contract.load_snapshot(shuffled)) == VECTOR


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["joined"].reverse(), "SNAPSHOT_INVALID at joined"),
    (lambda d: d["joined"].append(d["joined"][2]), "SNAPSHOT_INVALID at joined"),
    (lambda d: d["joined"][2].update(network="slack"), "UNKNOWN_FIELD at joined[2]"),
    (lambda d: d["joined"][0].update(network="slack"), "UNKNOWN_FIELD at joined[0]"),
    (lambda d: d["joined"][1].pop("network"), "FIELD_MISSING at joined[1].network"),
    (lambda d: d["joined"][0].update(kind="appservice"), "SHAPE_INVALID at joined[0].kind"),
    (lambda d: d.update(joined=[]), "SHAPE_INVALID at joined"),
    (lambda d: d["server_acl"].update(allow=["org-b.example", "org-a.example"]),
     "SNAPSHOT_INVALID at server_acl.allow"),
    (lambda d: d["server_acl"].update(allow=["org-a.example", "org-a.example"]),
     "SNAPSHOT_INVALID at server_acl.allow"),
    (lambda d: d["server_acl"].update(deny=["b", "a"]), "SNAPSHOT_INVALID at server_acl.deny"),
    (lambda d: d["server_acl"].pop("allow_ip_literals"),
     "FIELD_MISSING at server_acl.allow_ip_literals"),
    (lambda d: d["server_acl"].update(allow_ip_literals=0),
     "SHAPE_INVALID at server_acl.allow_ip_literals"),
    (lambda d: d.pop("server_acl"), "FIELD_MISSING at server_acl"),
    (lambda d: d["create"].update(federate="true"), "SHAPE_INVALID at create.federate"),
    (lambda d: d["create"].pop("federate"), "FIELD_MISSING at create.federate"),
    (lambda d: d["history_visibility"].update(value="shared"),
     "SHAPE_INVALID at history_visibility.value"),
    (lambda d: d["join_rule"].update(value="public"), "SHAPE_INVALID at join_rule.value"),
    (lambda d: d.update(room_id="room"), "SHAPE_INVALID at room_id"),
])
def test_snapshot_normal_form(edit: Any, expected: str) -> None:
    doc = snapshot_doc()
    edit(doc)
    assert code(contract.load_snapshot, json.dumps(doc)) == expected


def test_state_sha256_refuses_a_snapshot_out_of_normal_form() -> None:
    unsorted = snapshot().model_copy(update={"joined": tuple(reversed(snapshot().joined))})
    assert code(contract.state_sha256, unsorted) == "SNAPSHOT_INVALID at joined"


def test_null_acl_only_while_every_native_member_is_local() -> None:
    doc = snapshot_doc()
    doc["server_acl"] = None
    contract.load_snapshot(json.dumps(doc), local_server="org-a.example")
    doc["joined"].append({"event_id": "$member-carol", "kind": "matrix",
                          "principal": "@carol:org-b.example"})
    contract.load_snapshot(json.dumps(doc))  # without the local server name: shape only
    assert code(contract.load_snapshot, json.dumps(doc), local_server="org-a.example") == (
        "SNAPSHOT_INVALID at server_acl")


def test_audience_excludes_only_bridge_services() -> None:
    audience = contract.audience_from_snapshot(snapshot())
    assert [e.principal for e in audience] == ["@slack-bob:org-a.example", "@alice:org-a.example"]
    only_bots = snapshot_doc()
    only_bots["joined"] = only_bots["joined"][:1]
    assert code(contract.audience_from_snapshot, snapshot(only_bots)) == (
        "AUDIENCE_INVALID at audience")


def test_oauth_user_id() -> None:
    identity = contract.load_identity((DATA / "adr0017_oauth_projection.json").read_text())
    assert isinstance(identity, OAuthProjection)
    jcs = b'{"audience":"fgentic-a2a","azp":"org-b-a2a","issuer":"https://issuer.example"}'
    expected = "oidc:org-b:" + hashlib.sha256(jcs).hexdigest()
    assert contract.oauth_user_id(identity.client) == expected
    assert contract.user_id(identity) == expected
    assert expected == (
        "oidc:org-b:15e6889a926b03308d688970505c517ecf6bdefe48f6f16ae1c9767ea95045b9")
    # A different policy_id names a different registry entry, not a different token tuple.
    other = identity.client.model_copy(update={"policy_id": "org-c"})
    assert contract.oauth_user_id(other).split(":")[2] == expected.split(":")[2]


def test_matrix_user_id_is_the_mxid() -> None:
    identity = contract.load_identity((DATA / "adr0017_matrix_projection.json").read_text())
    assert contract.user_id(identity) == "@alice:org-a.example"


def _context(caller: contract.Principal) -> RoomContext:
    identity = contract.load_identity((DATA / "adr0017_matrix_projection.json").read_text())
    assert not isinstance(identity, OAuthProjection)
    return RoomContext(allowed_classifications=identity.allowed_classifications,
                       audience=identity.audience, caller=caller,
                       delegation_id=identity.delegation_id, room=identity.room, v=1)


def test_stamping_the_adr_room_context_yields_the_adr_projection() -> None:
    agent = AgentRef(name="knowledge-agent", namespace="kagent")
    context = _context(MatrixPrincipal(kind="matrix", principal="@alice:org-a.example"))
    stamped = contract.stamp_matrix(context, agent=agent, iat=1784116800)
    header = contract.encode_identity(stamped)
    adr = (DATA / "adr0017_matrix_projection.json").read_text()
    assert header == contract.encode_identity(contract.load_identity(adr))

    bob = BridgedPrincipal(kind="bridged_matrix", network="slack",
                           principal="@slack-bob:org-a.example")
    bridged = contract.stamp_matrix(_context(bob), agent=agent, iat=1784116800)
    assert isinstance(bridged, BridgedMatrixProjection)
    assert (bridged.network, bridged.principal, bridged.exp) == (
        "slack", bob.principal, 1784117400)
    assert code(contract.stamp_matrix, context, agent=agent, iat=-5) == "SHAPE_INVALID at iat"
    assert code(contract.stamp_matrix, context, agent=agent, iat=2**53 - 1) == (
        "SHAPE_INVALID at exp")


def test_snapshot_schema_requires_explicit_null_acl() -> None:
    schema = shapes.ROOM_SNAPSHOT.json_schema()
    assert "server_acl" in schema["required"]
