"""Request parsing and scope resolution of the control API: strict, exact, never echoing.

A malformed request is REQUEST_MALFORMED and nothing else: the refusal's text, repr and full
traceback (chain included) carry no byte of the request, whatever field the bad value was in.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import pytest

from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.controlapi.codes import ControlError, ControlReason, Drift
from fgentic_governance.controlapi.directory import DirectoryScope, select
from fgentic_governance.controlapi.wire import (
    AgentKey,
    Command,
    ConfirmableCommand,
    ForgetCommand,
    InspectCommand,
    parse,
)
from fgentic_governance.reasons import Reason
from tests.support.objects import example

SENTINEL = "SENTINEL-c0ntr0l-wire-9d1e"
SUBJECT = "@alice:fgentic.local"
AGENT = {"namespace": "demo", "name": "docs-agent"}


def room() -> dict[str, Any]:
    return {
        "roomId": "!alice-control", "observedAt": 0, "roomVersion": "12",
        "joinRule": "invite", "historyVisibility": "joined", "encrypted": False,
        "members": [{"userId": SUBJECT, "membership": "join"}],
        "serverAcl": {"allow": ["fgentic.local"], "deny": [], "allowIpLiterals": False},
    }


def body(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"subject": SUBJECT, "agent": dict(AGENT), "room": room()}
    doc.update(fields)
    return doc


def test_a_well_formed_command_parses() -> None:
    command = parse(InspectCommand, json.dumps(body(offset=20, limit=5)).encode())
    assert (command.offset, command.limit, command.agent.name) == (20, 5, "docs-agent")
    token = "A" * 43
    assert parse(ConfirmableCommand, json.dumps(body(confirmationToken=token)).encode()
                 ).confirmation_token == token
    entry = "0b6c2a0e-7f1d-4c55-9d3e-4f8a1b2c3d4e"
    assert parse(ForgetCommand, json.dumps(body(entryId=entry)).encode()).entry_id == entry


def _room_with(**fields: Any) -> dict[str, Any]:
    doc = room()
    doc.update(fields)
    return doc


MALFORMED: dict[str, tuple[type[Command], bytes]] = {
    "not-json": (Command, f"{{{SENTINEL}".encode()),
    "json-array": (Command, json.dumps([SENTINEL]).encode()),
    "json-string": (Command, json.dumps(SENTINEL).encode()),
    "unknown-field-name": (Command, json.dumps(body(**{SENTINEL: 1})).encode()),
    "unknown-field-value": (Command, json.dumps(body(note=SENTINEL)).encode()),
    "subject-not-mxid": (Command, json.dumps(body(subject=SENTINEL)).encode()),
    "subject-bare-localpart": (Command, json.dumps(body(subject="@alice")).encode()),
    "agent-name": (Command, json.dumps(body(agent={"namespace": "demo",
                                                   "name": SENTINEL})).encode()),
    "room-id": (Command, json.dumps(body(room=_room_with(roomId=SENTINEL))).encode()),
    "member-id": (Command, json.dumps(body(room=_room_with(
        members=[{"userId": SENTINEL, "membership": "join"}]))).encode()),
    "membership": (Command, json.dumps(body(room=_room_with(
        members=[{"userId": SUBJECT, "membership": SENTINEL}]))).encode()),
    "acl-entry": (Command, json.dumps(body(room=_room_with(serverAcl={
        "allow": [SENTINEL + " x"], "deny": [], "allowIpLiterals": False}))).encode()),
    "room-version-too-long": (Command, json.dumps(body(room=_room_with(
        roomVersion=SENTINEL * 10))).encode()),
    "bool-as-int": (Command, json.dumps(body(room=_room_with(encrypted=0))).encode()),
    "int-as-string": (InspectCommand, json.dumps(body(offset="0")).encode()),
    "entry-id": (ForgetCommand, json.dumps(body(entryId=SENTINEL)).encode()),
    "entry-id-uppercase": (ForgetCommand, json.dumps(body(
        entryId="0B6C2A0E-7F1D-4C55-9D3E-4F8A1B2C3D4E")).encode()),
    "token": (ConfirmableCommand, json.dumps(body(confirmationToken=SENTINEL)).encode()),
    "snake-case-field": (ConfirmableCommand, json.dumps(body(
        confirmation_token="A" * 43)).encode()),
    "not-utf8": (Command, b"\xff\xfe" + SENTINEL.encode()),
    "too-many-members": (Command, json.dumps(body(room=_room_with(members=[
        {"userId": f"@u{i}:fgentic.local", "membership": "join"} for i in range(65)]))).encode()),
}


@pytest.mark.parametrize("model,raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_are_refused_without_echo(model: type[Command], raw: bytes) -> None:
    with pytest.raises(ControlError) as info:
        parse(model, raw)
    error = info.value
    assert error.code is ControlReason.REQUEST_MALFORMED
    assert error.__context__ is None and error.__cause__ is None
    text = "".join(traceback.format_exception(error)) + str(error) + repr(error)
    assert SENTINEL not in text


# -- resolution ------------------------------------------------------------------------------


def view(name: str, **spec: Any) -> DirectoryScope:
    raw = example("MemoryScope")["spec"]
    raw.update(spec)
    return DirectoryScope("demo", name, MemoryScopeSpec.model_validate(raw))


ALICE = view("alice", subject={"mxid": SUBJECT, "originKind": "native-local"},
             agent=AGENT, controlRoom="!alice-control")
BOB = view("bob", subject={"mxid": "@bob:fgentic.local", "originKind": "native-local"},
           agent=AGENT, controlRoom="!bob-control")
KEY = AgentKey(namespace="demo", name="docs-agent")


def refusal(scopes: list[DirectoryScope], subject: str = SUBJECT, agent: AgentKey = KEY,
            room_id: str = "!alice-control") -> ControlError:
    with pytest.raises(ControlError) as info:
        select(scopes, subject, agent, room_id)
    return info.value


def test_the_exact_triple_resolves() -> None:
    assert select([BOB, ALICE], SUBJECT, KEY, "!alice-control") is ALICE


def test_another_subject_gets_scope_missing_even_in_the_owners_room() -> None:
    error = refusal([ALICE], subject="@bob:fgentic.local")
    assert error.code is Reason.SCOPE_MISSING
    # Bob has his own scope, but not for Alice's room: same answer as no scope at all would
    # be for a room he has none in - the room is just not his control room.
    error = refusal([ALICE, BOB], subject="@bob:fgentic.local")
    assert (error.code, error.drift) == (ControlReason.ROOM_STATE_DRIFT,
                                         (Drift.ROOM_ID_MISMATCH,))


def test_another_agent_is_scope_missing() -> None:
    for agent in (AgentKey(namespace="demo", name="other"),
                  AgentKey(namespace="other", name="docs-agent")):
        assert refusal([ALICE], agent=agent).code is Reason.SCOPE_MISSING


def test_the_subjects_scope_from_another_room_is_room_drift() -> None:
    error = refusal([ALICE], room_id="!somewhere-else")
    assert (error.code, error.drift) == (ControlReason.ROOM_STATE_DRIFT,
                                         (Drift.ROOM_ID_MISMATCH,))


def test_two_objects_claiming_one_triple_is_a_binding_conflict() -> None:
    twin = DirectoryScope("other-ns", "alice", ALICE.spec)
    assert refusal([ALICE, twin]).code is Reason.BINDING_CONFLICT


def test_a_non_native_subject_is_federation_denied() -> None:
    bridged = view("alice", subject={"mxid": SUBJECT, "originKind": "bridged"}, agent=AGENT,
                   controlRoom="!alice-control", posture="fully_disabled")
    assert refusal([bridged]).code is Reason.FEDERATION_DENIED
