"""Whose turn an Agent's Pod is serving: the user an embedding or a summarisation is for.

kagent-adk 0.9.11's embeddings and summarisation requests name no user (its OpenAI client
sends the provider's key and the texts). Everything else the runtime sends names one: it
fetches a turn's session (``GET /api/sessions/<id>?user_id=``) before it embeds the first
turn's prefetch queries, appends the turn's events (``POST .../events?user_id=``) before it
summarises, and every memory call carries ``X-User-Id``. So the memory API, which all of that
crosses, notes each (Agent, user) it sees, and charges such a request to the one user seen
from that Agent within ``window`` seconds. None seen is LEASE_MISSING; several (two users'
turns at once) is SCOPE_AMBIGUOUS: refused, never guessed (a refused embedding or summary
fails that memory work only; the chat reply is still answered). The store then charges that
user only while no other user of the Agent holds a live lease (sql/0018): a user whose turn
is leased but quiet for longer than the window may be the one the request serves.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from multidict import MultiMapping

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memoryapi.codes import ApiError
from fgentic_governance.reasons import Reason

WINDOW_SECONDS: Final = 60.0
"""How long a user's last request keeps their turn attributable: longer than the runtime's
gap between a session fetch and the embeddings that follow it, short enough that another
user's turn a minute earlier no longer makes an embedding ambiguous."""
MAX_AGENTS: Final = 4096
MAX_USERS: Final = 16
"""Per Agent; more users at once are ambiguous anyway (the oldest are forgotten)."""


class Activity:
    """The users seen per Agent, with when (bounded in Agents and in users per Agent)."""

    def __init__(self, window: float = WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window, self._clock = window, clock
        self._seen: OrderedDict[AgentRef, OrderedDict[str, float]] = OrderedDict()

    def seen(self, agent: AgentRef, user: str) -> None:
        users = self._seen.setdefault(agent, OrderedDict())
        self._seen.move_to_end(agent)
        users[user] = self._clock()
        users.move_to_end(user)
        if len(users) > MAX_USERS:
            users.popitem(last=False)
        if len(self._seen) > MAX_AGENTS:
            self._seen.popitem(last=False)

    def note(self, agent: AgentRef, users: Iterable[str]) -> None:
        """Record every user a request from ``agent`` names (:func:`users_named`)."""
        for user in users:
            self.seen(agent, user)

    def user_of(self, agent: AgentRef) -> str:
        """The one user seen from ``agent`` within the window, or a refusal."""
        now = self._clock()
        users = [user for user, at in self._seen.get(agent, {}).items()
                 if now - at <= self._window]
        if not users:
            raise ApiError(Reason.LEASE_MISSING)
        if len(users) > 1:
            raise ApiError(Reason.SCOPE_AMBIGUOUS)
        return users[0]


def users_named(headers: MultiMapping[str], query: MultiMapping[str]) -> set[str]:
    """Every user a runtime request names: its ``X-User-Id`` headers and ``user_id`` query
    parameters (the runtime's session and task calls). A request naming two users records
    both, so neither is charged alone."""
    return {name for name in (*headers.getall("X-User-Id", ()), *query.getall("user_id", ()))
            if name}
