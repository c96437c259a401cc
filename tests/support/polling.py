"""The one way a test waits: poll until something holds, within a bound.

Every wait of the test suite goes through ``until`` (plain probes) or ``until_async`` (probes in
a running event loop); tests/unit/test_layout.py fails on a deadline loop written anywhere else.
A timeout is never what a test asserts, only how long it may take before the test fails loudly,
saying what it waited for and the last value (or tolerated error) it saw.
"""

from __future__ import annotations

import asyncio
import inspect
import reprlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

INTERVAL = 0.2
TIMEOUT = 30.0

# Enough to tell a wrong state from a slow one, short enough that a failure stays readable: a
# value can be a whole object (test data only, but possibly long).
_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 120
_SHOW.maxlist = _SHOW.maxdict = 8


def until(probe: Callable[[], T], what: str, timeout: float = TIMEOUT, *,
          holds: Callable[[T], object] = bool, interval: float = INTERVAL,
          tolerate: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``probe`` every ``interval`` seconds until ``holds`` is true of its value (by default:
    the value is true) and return that value. Errors of the ``tolerate`` types count as a poll
    that did not hold; any other error ends the wait at once. After ``timeout`` seconds, an
    AssertionError naming ``what`` and the last value or error seen."""
    wait = _Wait(what, timeout, holds, tolerate)
    while not wait.over(probe):
        time.sleep(interval)
    return wait.value


async def until_async(probe: Callable[[], Awaitable[T]] | Callable[[], T], what: str,
                      timeout: float = TIMEOUT, *, holds: Callable[[T], object] = bool,
                      interval: float = INTERVAL,
                      tolerate: tuple[type[BaseException], ...] = ()) -> T:
    """``until`` inside an event loop: ``probe`` returns a value or an awaitable of one (wrap
    blocking calls in ``asyncio.to_thread``); the sleep between polls yields the loop."""
    wait = _Wait(what, timeout, holds, tolerate)
    while not wait.over(await _attempt(probe)):
        await asyncio.sleep(interval)
    return wait.value


class _Wait(Generic[T]):
    """One bounded wait: its deadline and what its last poll saw."""

    def __init__(self, what: str, timeout: float, holds: Callable[[T], object],
                 tolerate: tuple[type[BaseException], ...]) -> None:
        self.what, self.timeout, self.holds, self.tolerate = what, timeout, holds, tolerate
        self.deadline = time.monotonic() + timeout
        self.value: T
        self.error: BaseException | None = None
        self.polls = 0

    def over(self, attempt: Callable[[], T]) -> bool:
        """Record one poll: true when it held; past the deadline, the failure."""
        self.polls += 1
        try:
            self.value, self.error = attempt(), None
        except self.tolerate as exc:
            self.error = exc
        else:
            if self.holds(self.value):
                return True
        if time.monotonic() >= self.deadline:
            raise self._failure()
        return False

    def _failure(self) -> AssertionError:
        last = (f"last error {type(self.error).__name__}: {_SHOW.repr(str(self.error))}"
                if self.error is not None
                else f"last value {_SHOW.repr(getattr(self, 'value', None))}")
        return AssertionError(f"timed out after {self.timeout:g} s ({self.polls} polls) "
                              f"waiting for {self.what}; {last}")


async def _attempt(probe: Callable[[], Awaitable[T]] | Callable[[], T]) -> Callable[[], T]:
    """The probe's outcome, awaited if it is awaitable, as a call that returns the value or
    raises the error: ``_Wait.over`` then treats both variants alike."""
    try:
        result = probe()
        value = cast(T, await result if inspect.isawaitable(result) else result)
    except Exception as exc:  # re-raised by the returned call, where tolerance is decided
        error = exc

        def fail() -> T:
            raise error

        return fail
    return lambda: value
