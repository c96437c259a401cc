"""Whose turn an Agent's Pod serves (memoryapi/activity.py): the one user seen within the
window, refused with none or several; bounded in Agents and users."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, MultiDict

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memoryapi import activity
from fgentic_governance.memoryapi.activity import Activity, users_named
from fgentic_governance.memoryapi.codes import ApiError
from fgentic_governance.reasons import Reason

HELPER, OTHER = AgentRef("team-a", "helper"), AgentRef("team-a", "other")
ALICE, BOB = "@alice:fgentic.local", "@bob:fgentic.local"


def _refusal(seen: Activity, agent: AgentRef) -> Reason:
    with pytest.raises(ApiError) as refused:
        seen.user_of(agent)
    return refused.value.code  # type: ignore[return-value]


def test_the_one_recent_user_of_the_agent_and_nobody_else() -> None:
    now = [0.0]
    seen = Activity(window=60, clock=lambda: now[0])
    assert _refusal(seen, HELPER) is Reason.LEASE_MISSING
    seen.seen(HELPER, ALICE)
    seen.seen(OTHER, BOB)  # another Agent's user is not this Agent's
    assert seen.user_of(HELPER) == ALICE
    now[0] = 30
    seen.seen(HELPER, BOB)
    assert _refusal(seen, HELPER) is Reason.SCOPE_AMBIGUOUS  # two turns at once
    now[0] = 61  # Alice's last call is past the window: Bob's turn alone
    assert seen.user_of(HELPER) == BOB
    now[0] = 91
    assert _refusal(seen, HELPER) is Reason.LEASE_MISSING


def test_bounded_in_users_and_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MAX_AGENTS", 3)
    seen = Activity(window=60, clock=lambda: 0.0)
    for i in range(activity.MAX_USERS + 5):
        seen.seen(HELPER, f"@u{i}:fgentic.local")
    assert len(seen._seen[HELPER]) == activity.MAX_USERS
    assert _refusal(seen, HELPER) is Reason.SCOPE_AMBIGUOUS
    for i in range(5):
        seen.seen(AgentRef("ns", f"a{i}"), ALICE)
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
