"""Confirmation tokens of ``forget all`` and ``off``: single use, short-lived, exactly bound.

The book's rules over an in-memory ledger; the store's ledger (sql/0012) and two replicas
sharing it are in tests/integration/test_control_api.py."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest

from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.controlapi.confirm import Action, Binding, ConfirmationBook
from fgentic_governance.reasons import Reason

BINDING = Binding("team-a/alice-helper", Action.FORGET_ALL, "@alice:fgentic.local",
                  "team-a/helper", "!alice-control", 3)


class MemoryLedger:
    """The ledger contract of ``controlapi.confirm.Ledger``, in a dict."""

    def __init__(self) -> None:
        self.rows: dict[bytes, tuple[Binding, float]] = {}

    async def put(self, digest: bytes, binding: Binding, expires: float, *, now: float,
                  most: int) -> bool:
        self.rows = {k: v for k, v in self.rows.items() if v[1] > now and v[0] != binding}
        if len(self.rows) >= most:
            return False
        self.rows[digest] = (binding, expires)
        return True

    async def take(self, digest: bytes) -> tuple[Binding, float] | None:
        return self.rows.pop(digest, None)


def book_of(**kwargs: Any) -> ConfirmationBook:
    return ConfirmationBook(MemoryLedger(), **kwargs)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def refused(book: ConfirmationBook, token: str,
                  binding: Binding = BINDING) -> ControlReason:
    with pytest.raises(ControlError) as info:
        await book.redeem(token, binding)
    assert isinstance(info.value.code, ControlReason)
    return info.value.code


async def test_token_redeems_once_then_replay_fails() -> None:
    ledger = MemoryLedger()
    book = ConfirmationBook(ledger, clock=Clock())
    issued = await book.issue(BINDING)
    await book.redeem(issued.token, BINDING)
    assert await refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID
    assert ledger.rows == {}


async def test_token_is_random_and_urlsafe() -> None:
    book = book_of(clock=Clock())
    tokens = {(await book.issue(dataclasses.replace(BINDING, generation=g))).token
              for g in range(50)}
    assert len(tokens) == 50
    assert all(len(t) == 43 and t.replace("-", "").replace("_", "").isalnum() for t in tokens)


async def test_token_expires_after_its_lifetime() -> None:
    clock = Clock()
    book = book_of(ttl=120, clock=clock)
    issued = await book.issue(BINDING)
    assert issued.expires_at == clock.now + 120
    clock.now += 120
    assert await refused(book, issued.token) is ControlReason.CONFIRMATION_EXPIRED
    # Consumed by the failed attempt too.
    assert await refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID


async def test_token_just_before_expiry_still_works() -> None:
    clock = Clock()
    book = book_of(ttl=120, clock=clock)
    issued = await book.issue(BINDING)
    clock.now += 119.9
    await book.redeem(issued.token, BINDING)


@pytest.mark.parametrize("change", [
    {"action": Action.OFF},
    {"scope_key": "team-a/bob-helper"},
    {"subject": "@bob:fgentic.local"},
    {"agent": "team-a/other"},
    {"room": "!other-room"},
    {"generation": 4},
])
async def test_token_is_bound_to_every_field_and_burns_on_misuse(
        change: dict[str, object]) -> None:
    book = book_of(clock=Clock())
    issued = await book.issue(BINDING)
    other = dataclasses.replace(BINDING, **change)  # type: ignore[arg-type]
    assert await refused(book, issued.token, other) is ControlReason.CONFIRMATION_INVALID
    # A token presented in the wrong context is gone: it cannot be retried in the right one.
    assert await refused(book, issued.token) is ControlReason.CONFIRMATION_INVALID


async def test_a_new_token_voids_the_pending_one_for_the_same_binding() -> None:
    book = book_of(clock=Clock())
    first = await book.issue(BINDING)
    second = await book.issue(BINDING)
    assert await refused(book, first.token) is ControlReason.CONFIRMATION_INVALID
    await book.redeem(second.token, BINDING)


async def test_unknown_token_is_invalid() -> None:
    book = book_of(clock=Clock())
    await book.issue(BINDING)
    assert await refused(book, "A" * 43) is ControlReason.CONFIRMATION_INVALID


async def test_pending_tokens_are_bounded_and_expired_ones_pruned() -> None:
    clock, ledger = Clock(), MemoryLedger()
    book = ConfirmationBook(ledger, ttl=10, clock=clock, max_pending=3)
    for g in range(3):
        await book.issue(dataclasses.replace(BINDING, generation=g))
    with pytest.raises(ControlError) as info:
        await book.issue(dataclasses.replace(BINDING, generation=99))
    assert info.value.code is Reason.RATE_LIMITED
    clock.now += 10
    await book.issue(dataclasses.replace(BINDING, generation=99))
    assert len(ledger.rows) == 1


@pytest.mark.parametrize("ttl", [0, -1, 601])
def test_lifetime_is_bounded(ttl: float) -> None:
    with pytest.raises(ValueError, match="lifetime"):
        ConfirmationBook(MemoryLedger(), ttl=ttl)


async def test_only_digests_are_kept() -> None:
    ledger = MemoryLedger()
    issued = await ConfirmationBook(ledger, clock=Clock()).issue(BINDING)
    assert list(ledger.rows) == [hashlib.sha256(issued.token.encode()).digest()]
    assert issued.token not in repr(ledger.rows)
