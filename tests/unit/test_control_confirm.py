"""Confirmation tokens of ``forget all`` and ``off``: single use, short-lived, exactly bound."""

from __future__ import annotations

import dataclasses

import pytest

from fgentic_governance.control.codes import ControlError, ControlReason
from fgentic_governance.control.confirm import Action, Binding, ConfirmationBook
from fgentic_governance.reasons import Reason

BINDING = Binding("team-a/alice-helper", Action.FORGET_ALL, "@alice:fgentic.local",
                  "team-a/helper", "!alice-control", 3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(book: ConfirmationBook, token: str, binding: Binding = BINDING) -> ControlReason:
    with pytest.raises(ControlError) as info:
        book.redeem(token, binding)
    assert isinstance(info.value.code, ControlReason)
    return info.value.code


def test_token_redeems_once_then_replay_fails() -> None:
    book = ConfirmationBook(clock=Clock())
    issued = book.issue(BINDING)
    book.redeem(issued.token, BINDING)
    assert refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID
    assert len(book) == 0


def test_token_is_random_and_urlsafe() -> None:
    book = ConfirmationBook(clock=Clock())
    tokens = {book.issue(dataclasses.replace(BINDING, generation=g)).token for g in range(50)}
    assert len(tokens) == 50
    assert all(len(t) == 43 and t.replace("-", "").replace("_", "").isalnum() for t in tokens)


def test_token_expires_after_its_lifetime() -> None:
    clock = Clock()
    book = ConfirmationBook(ttl=120, clock=clock)
    issued = book.issue(BINDING)
    assert issued.expires_at == clock.now + 120
    clock.now += 120
    assert refused(book, issued.token) is ControlReason.CONFIRMATION_EXPIRED
    # Consumed by the failed attempt too.
    assert refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID


def test_token_just_before_expiry_still_works() -> None:
    clock = Clock()
    book = ConfirmationBook(ttl=120, clock=clock)
    issued = book.issue(BINDING)
    clock.now += 119.9
    book.redeem(issued.token, BINDING)


@pytest.mark.parametrize("change", [
    {"action": Action.OFF},
    {"scope_key": "team-a/bob-helper"},
    {"subject": "@bob:fgentic.local"},
    {"agent": "team-a/other"},
    {"room": "!other-room"},
    {"generation": 4},
])
def test_token_is_bound_to_every_field_and_burns_on_misuse(change: dict[str, object]) -> None:
    book = ConfirmationBook(clock=Clock())
    issued = book.issue(BINDING)
    other = dataclasses.replace(BINDING, **change)  # type: ignore[arg-type]
    assert refused(book, issued.token, other) is ControlReason.CONFIRMATION_INVALID
    # A token presented in the wrong context is gone: it cannot be retried in the right one.
    assert refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID


def test_a_new_token_voids_the_pending_one_for_the_same_binding() -> None:
    book = ConfirmationBook(clock=Clock())
    first = book.issue(BINDING)
    second = book.issue(BINDING)
    assert refused(book, first.token) is ControlReason.CONFIRMATION_INVALID
    book.redeem(second.token, BINDING)


def test_unknown_token_is_invalid() -> None:
    book = ConfirmationBook(clock=Clock())
    book.issue(BINDING)
    assert refused(book, "A" * 43) is ControlReason.CONFIRMATION_INVALID


def test_pending_tokens_are_bounded_and_expired_ones_pruned() -> None:
    clock = Clock()
    book = ConfirmationBook(ttl=10, clock=clock, max_pending=3)
    for g in range(3):
        book.issue(dataclasses.replace(BINDING, generation=g))
    with pytest.raises(ControlError) as info:
        book.issue(dataclasses.replace(BINDING, generation=99))
    assert info.value.code is Reason.RATE_LIMITED
    clock.now += 10
    book.issue(dataclasses.replace(BINDING, generation=99))
    assert len(book) == 1


@pytest.mark.parametrize("ttl", [0, -1, 601])
def test_lifetime_is_bounded(ttl: float) -> None:
    with pytest.raises(ValueError, match="lifetime"):
        ConfirmationBook(ttl=ttl)


def test_only_digests_are_kept() -> None:
    book = ConfirmationBook(clock=Clock())
    issued = book.issue(BINDING)
    assert issued.token not in repr(vars(book))
