"""The control-room state check (ADR 0023 §19-20): the allowed state passes, every drift fails.

Each case starts from the one allowed snapshot and changes one thing; the check must name
exactly the drift subcodes that change implies, so a refusal is specific yet content-free.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fgentic_governance.controlapi.codes import ControlError, ControlReason, Drift
from fgentic_governance.controlapi.room import RoomPolicy, check_room
from fgentic_governance.controlapi.wire import AgentKey, RoomState

LOCAL = "fgentic.local"
SUBJECT = "@alice:fgentic.local"
BOT = "@fgentic-bot:fgentic.local"
AGENT = AgentKey(namespace="demo", name="docs-agent")
GHOST = "@agent-demo-docs-agent:fgentic.local"
ROOM = "!alice-control"
NOW = 1_800_000_000
POLICY = RoomPolicy(LOCAL, BOT, "@agent-{namespace}-{name}:{server}")


def allowed() -> dict[str, Any]:
    return {
        "roomId": ROOM, "observedAt": NOW, "roomVersion": "12", "joinRule": "invite",
        "historyVisibility": "joined", "encrypted": False,
        "members": [{"userId": SUBJECT, "membership": "join"},
                    {"userId": BOT, "membership": "join"},
                    {"userId": GHOST, "membership": "join"}],
        "serverAcl": {"allow": [LOCAL], "deny": [], "allowIpLiterals": False},
    }


def drift(doc: dict[str, Any], *, subject: str = SUBJECT) -> tuple[Drift, ...]:
    state = RoomState.model_validate_json(json.dumps(doc))
    return check_room(state, policy=POLICY, subject=subject, agent=AGENT, control_room=ROOM,
                      now=NOW)


def changed(**fields: Any) -> dict[str, Any]:
    doc = allowed()
    doc.update(copy.deepcopy(fields))
    return doc


def with_members(*extra: tuple[str, str], drop: str = "") -> dict[str, Any]:
    doc = allowed()
    doc["members"] = [m for m in doc["members"] if m["userId"] != drop]
    doc["members"] += [{"userId": u, "membership": m} for u, m in extra]
    return doc


def test_allowed_state_passes() -> None:
    assert drift(allowed()) == ()


def test_former_members_who_left_or_were_banned_are_no_drift() -> None:
    assert drift(with_members(("@bob:fgentic.local", "leave"),
                              ("@eve:remote.example", "ban"))) == ()


CASES: dict[str, tuple[dict[str, Any], set[Drift]]] = {
    "room-version-11": (changed(roomVersion="11"), {Drift.ROOM_VERSION}),
    "room-version-absent-means-1": (changed(roomVersion="1"), {Drift.ROOM_VERSION}),
    "join-rule-public": (changed(joinRule="public"), {Drift.JOIN_RULE}),
    "join-rule-knock": (changed(joinRule="knock"), {Drift.JOIN_RULE}),
    "join-rule-restricted": (changed(joinRule="restricted"), {Drift.JOIN_RULE}),
    "history-shared": (changed(historyVisibility="shared"), {Drift.HISTORY_VISIBILITY}),
    "history-world-readable": (changed(historyVisibility="world_readable"),
                               {Drift.HISTORY_VISIBILITY}),
    "history-invited": (changed(historyVisibility="invited"), {Drift.HISTORY_VISIBILITY}),
    "encryption-present": (changed(encrypted=True), {Drift.ENCRYPTED}),
    "extra-joined-member": (with_members(("@bob:fgentic.local", "join")),
                            {Drift.EXTRA_JOINED}),
    "extra-invited-member": (with_members(("@bob:fgentic.local", "invite")),
                             {Drift.EXTRA_INVITED}),
    "extra-knocking-member": (with_members(("@bob:fgentic.local", "knock")),
                              {Drift.EXTRA_KNOCKING}),
    "missing-subject": (with_members(drop=SUBJECT), {Drift.MISSING_SUBJECT}),
    "subject-left": (with_members((SUBJECT, "leave"), drop=SUBJECT), {Drift.MISSING_SUBJECT}),
    "subject-only-invited": (with_members((SUBJECT, "invite"), drop=SUBJECT),
                             {Drift.MISSING_SUBJECT}),
    "missing-bot": (with_members(drop=BOT), {Drift.MISSING_BOT}),
    "missing-ghost": (with_members(drop=GHOST), {Drift.MISSING_GHOST}),
    "ghost-only-invited": (with_members((GHOST, "invite"), drop=GHOST),
                           {Drift.MISSING_GHOST}),
    "other-agents-ghost": (with_members(("@agent-demo-other:fgentic.local", "join"),
                                        drop=GHOST),
                           {Drift.MISSING_GHOST, Drift.EXTRA_JOINED}),
    "remote-member-joined": (with_members(("@mallory:remote.example", "join")),
                             {Drift.REMOTE_MEMBER, Drift.EXTRA_JOINED}),
    "remote-member-invited": (with_members(("@mallory:[2001:db8::1]", "invite")),
                              {Drift.REMOTE_MEMBER, Drift.EXTRA_INVITED}),
    "duplicate-member-events": (with_members((BOT, "leave")),
                                {Drift.MEMBER_DUPLICATE, Drift.MISSING_BOT}),
    "acl-missing": (changed(serverAcl=None), {Drift.SERVER_ACL_MISSING}),
    "acl-allows-another-server": (
        changed(serverAcl={"allow": [LOCAL, "partner.example"], "deny": [],
                           "allowIpLiterals": False}), {Drift.SERVER_ACL_ALLOW}),
    "acl-allows-wildcard": (
        changed(serverAcl={"allow": ["*"], "deny": [], "allowIpLiterals": False}),
        {Drift.SERVER_ACL_ALLOW}),
    "acl-allows-glob-of-local": (
        changed(serverAcl={"allow": ["fgentic.*"], "deny": [], "allowIpLiterals": False}),
        {Drift.SERVER_ACL_ALLOW}),
    "acl-allows-nothing": (
        changed(serverAcl={"allow": [], "deny": [], "allowIpLiterals": False}),
        {Drift.SERVER_ACL_ALLOW}),
    "acl-ip-literals": (
        changed(serverAcl={"allow": [LOCAL], "deny": [], "allowIpLiterals": True}),
        {Drift.SERVER_ACL_IP_LITERALS}),
    "wrong-room-id": (changed(roomId="!someone-elses-room"), {Drift.ROOM_ID_MISMATCH}),
    "snapshot-too-old": (changed(observedAt=NOW - 31), {Drift.SNAPSHOT_STALE}),
    "snapshot-from-the-future": (changed(observedAt=NOW + 31), {Drift.SNAPSHOT_STALE}),
}


@pytest.mark.parametrize("doc,expected", CASES.values(), ids=CASES.keys())
def test_every_drift_is_named(doc: dict[str, Any], expected: set[Drift]) -> None:
    assert set(drift(doc)) == expected


def test_everything_wrong_at_once_lists_every_subcode_in_a_fixed_order() -> None:
    doc = changed(roomVersion="10", joinRule="public", historyVisibility="shared",
                  encrypted=True, serverAcl=None, roomId="!x", observedAt=0)
    found = drift(doc)
    assert list(found) == [d for d in Drift if d in found]
    assert {Drift.ROOM_VERSION, Drift.JOIN_RULE, Drift.HISTORY_VISIBILITY, Drift.ENCRYPTED,
            Drift.SERVER_ACL_MISSING, Drift.ROOM_ID_MISMATCH, Drift.SNAPSHOT_STALE} <= set(found)


def test_subject_posing_as_the_bot_is_no_subject() -> None:
    assert Drift.MISSING_SUBJECT in drift(allowed(), subject=BOT)


@pytest.mark.parametrize("bot,template", [
    ("@fgentic-bot:remote.example", "@agent-{namespace}-{name}:{server}"),
    ("not-an-mxid", "@agent-{namespace}-{name}:{server}"),
    (BOT, "@agent-{namespace}-{name}:remote.example"),
    (BOT, "agent-{name}"),
])
def test_policy_refuses_a_non_local_bot_or_ghost(bot: str, template: str) -> None:
    with pytest.raises(ValueError, match="local homeserver"):
        RoomPolicy(LOCAL, bot, template)


def test_snapshot_omissions_are_malformed_not_allowed() -> None:
    from fgentic_governance.controlapi.wire import Command, parse

    for field in ("serverAcl", "encrypted", "roomVersion", "members"):
        doc = allowed()
        del doc[field]
        body = json.dumps({"subject": SUBJECT, "agent": {"namespace": "demo",
                                                         "name": "docs-agent"}, "room": doc})
        with pytest.raises(ControlError) as info:
            parse(Command, body.encode())
        assert info.value.code is ControlReason.REQUEST_MALFORMED
