"""Whose turn an Agent's Pods serve (memoryapi/activity.py): the users seen within the window,
shared with the store at first sight and then at most once per slack; bounded in Agents and
users. The store's attribution from them is tested in test_store_activity.py."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, MultiDict

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memory.model import MAX_NOTED_USERS, RecentUsers
from fgentic_governance.memoryapi import activity
from fgentic_governance.memoryapi.activity import Activity, users_named

HELPER, OTHER = AgentRef("team-a", "helper"), AgentRef("team-a", "other")
ALICE, BOB = "@alice:fgentic.local", "@bob:fgentic.local"


def test_the_recent_users_of_the_agent_and_nobody_else() -> None:
    now = [0.0]
    seen = Activity(window=60, clock=lambda: now[0])
    assert seen.recent(HELPER) == RecentUsers((), 60, 6)
    seen.note(HELPER, [ALICE])
    seen.note(OTHER, [BOB])  # another Agent's user is not this Agent's
    assert seen.recent(HELPER).users == (ALICE,)
    now[0] = 30
    seen.note(HELPER, [BOB])
    assert set(seen.recent(HELPER).users) == {ALICE, BOB}  # two turns at once
    now[0] = 60.5  # Alice's last call is past the window: Bob's turn alone
    assert seen.recent(HELPER).users == (BOB,)
    now[0] = 91
    assert seen.recent(HELPER).users == ()


def test_a_pair_is_shared_at_its_first_call_then_at_most_once_per_slack() -> None:
    """The store's note of a user trails that user's last call by less than the slack, so
    the store, counting notes for the window plus the slack, never misses a recent user."""
    now = [0.0]
    seen = Activity(window=60, clock=lambda: now[0])
    assert seen.note(HELPER, [BOB, ALICE]) == [ALICE, BOB]  # first seen: both due
    assert seen.note(HELPER, [ALICE]) == []
    now[0] = 5.9
    assert seen.note(HELPER, [ALICE, BOB]) == []  # noted 5.9 s ago, under the 6 s slack
    now[0] = 6.0
    assert seen.note(HELPER, [ALICE]) == [ALICE]
    assert seen.note(OTHER, [ALICE]) == [ALICE]  # per Agent
    noted = {ALICE: 6.0, BOB: 0.0}
    for step in range(1, 400):  # any pattern of calls: the last note is within the slack
        now[0] = 6.0 + step * 0.37
        for user in [ALICE, BOB][: 1 + step % 2]:
            if user in seen.note(HELPER, [user]):
                noted[user] = now[0]
            assert now[0] - noted[user] < 6.0


def test_an_agent_with_more_users_than_it_keeps_is_noted_once_per_slack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The notes are kept apart from the per-Agent users: with more users than MAX_USERS at
    once (the oldest forgotten as recent users), each pair is still noted once per slack,
    not on every call (every call had cost a store write). Only the pairs noted within the
    slack are kept, and at most MAX_NOTED of them."""
    now = [0.0]
    seen = Activity(window=60, clock=lambda: now[0])
    many = [f"@u{i}:fgentic.local" for i in range(activity.MAX_USERS + 9)]
    assert [seen.note(HELPER, [u]) for u in many] == [[u] for u in many]
    now[0] = 5.0
    assert [seen.note(HELPER, [u]) for u in many] == [[] for _ in many]
    now[0] = 6.0  # the slack since the first notes
    assert [seen.note(HELPER, [u]) for u in many] == [[u] for u in many]
    assert len(seen._noted) == len(many)
    now[0] = 20.0
    seen.note(OTHER, [ALICE])
    assert list(seen._noted) == [(OTHER, ALICE)]  # the rest were due again anyway
    monkeypatch.setattr(activity, "MAX_NOTED", 3)
    for user in many[:5]:
        seen.note(OTHER, [user])
    assert len(seen._noted) == 3 and seen.note(OTHER, [many[4]]) == []


def test_bounded_in_users_and_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MAX_AGENTS", 3)
    seen = Activity(window=60, clock=lambda: 0.0)
    for i in range(activity.MAX_USERS + 5):
        seen.note(HELPER, [f"@u{i}:fgentic.local"])
    assert len(seen.recent(HELPER).users) == activity.MAX_USERS == MAX_NOTED_USERS
    for i in range(5):
        seen.note(AgentRef("ns", f"a{i}"), [ALICE])
    assert len(seen._seen) == 3 and HELPER not in seen._seen


def test_every_user_a_request_names() -> None:
    assert users_named(CIMultiDict({"X-User-Id": ALICE}), MultiDict()) == {ALICE}
    assert users_named(CIMultiDict(), MultiDict({"user_id": BOB})) == {BOB}
    # Naming two users records both, so neither is charged alone.
    assert users_named(CIMultiDict({"x-user-id": ALICE}), MultiDict({"user_id": BOB})) == \
        {ALICE, BOB}
    assert users_named(CIMultiDict([("X-User-Id", ALICE), ("X-User-Id", BOB)]),
                       MultiDict()) == {ALICE, BOB}
    assert users_named(CIMultiDict({"X-User-Id": ""}), MultiDict({"limit": "5"})) == set()
