"""Whose turn an Agent's Pods are serving: the user an embedding or a summarisation is for.

kagent-adk 0.9.11's embeddings and summarisation requests name no user (its OpenAI client
sends the provider's key and the texts). Everything else the runtime sends names one: it
fetches a turn's session (``GET /api/sessions/<id>?user_id=``) before it embeds the first
turn's prefetch queries, appends the turn's events (``POST .../events?user_id=``) before it
summarises, and every memory call carries ``X-User-Id``. So the memory API, which all of that
crosses, notes each (Agent, user) that a caller authenticated as that Agent names (its Pod's
token; on a pass-through call also the address of its live routed Pod: nobody else's names
count), here and, for every replica, in the store (sql/0019: at the first call and then at
most once per ``slack``). Such a request is charged
to the one user seen from that Agent within ``window`` seconds, by this replica or any other:
none seen is LEASE_MISSING, several (two users' turns at once) is SCOPE_AMBIGUOUS: refused,
never guessed (a refused embedding or summary fails that memory work only; the chat reply is
still answered). The store decides, and charges that user only while no other user of the
Agent holds a live lease (sql/0018): a user whose turn is leased but quiet for longer than
the window may be the one the request serves.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from multidict import MultiMapping

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memory.model import MAX_NOTED_USERS, RecentUsers

WINDOW_SECONDS: Final = 60.0
"""How long a user's last request keeps their turn attributable: longer than the runtime's
gap between a session fetch and the embeddings that follow it, short enough that another
user's turn a minute earlier no longer makes an embedding ambiguous."""
SLACK_FRACTION: Final = 0.1
"""A pair is noted in the store at most once per this fraction of the window, so a shared
note trails its user's last call by at most that much (the store counts it that much longer:
more refusals for a moment, never a missed user)."""
MAX_AGENTS: Final = 4096
MAX_USERS: Final = MAX_NOTED_USERS
"""Per Agent; more users at once are ambiguous anyway (the oldest are forgotten)."""
MAX_NOTED: Final = 16384
"""(Agent, user) pairs noted within the last slack; beyond it the oldest is noted again
sooner (one more store write, never a missed note)."""


class Activity:
    """The users seen per Agent, with when each was last seen (bounded in Agents and in
    users per Agent), and the pairs noted in the store within the last ``slack`` seconds
    (kept apart: an Agent with more than MAX_USERS users at once must not note every call)."""

    def __init__(self, window: float = WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window, self._clock = window, clock
        self._slack = window * SLACK_FRACTION
        self._seen: OrderedDict[AgentRef, OrderedDict[str, float]] = OrderedDict()
        # Oldest note first; a pair noted ``slack`` ago or longer is due again, so it is gone.
        self._noted: OrderedDict[tuple[AgentRef, str], float] = OrderedDict()

    def note(self, agent: AgentRef, users: Iterable[str]) -> list[str]:
        """Record every user a request from ``agent`` names (:func:`users_named`); returns
        those due for a note in the store (not noted within ``slack``), now counted as noted:
        a failed note is retried only when the next one is due."""
        now = self._clock()
        while self._noted and now - next(iter(self._noted.values())) >= self._slack:
            self._noted.popitem(last=False)
        known = self._seen.setdefault(agent, OrderedDict())
        self._seen.move_to_end(agent)
        due = []
        for user in sorted(users):
            if (agent, user) not in self._noted:
                due.append(user)
                self._noted[(agent, user)] = now
                if len(self._noted) > MAX_NOTED:
                    self._noted.popitem(last=False)
            known[user] = now
            known.move_to_end(user)
            if len(known) > MAX_USERS:
                known.popitem(last=False)
        if len(self._seen) > MAX_AGENTS:
            self._seen.popitem(last=False)
        return due

    def recent(self, agent: AgentRef) -> RecentUsers:
        """The users seen from ``agent`` within the window, for the store's attribution."""
        now = self._clock()
        users = tuple(user for user, at in self._seen.get(agent, {}).items()
                      if now - at <= self._window)
        return RecentUsers(users, self._window, self._slack)


def users_named(headers: MultiMapping[str], query: MultiMapping[str]) -> set[str]:
    """Every user a runtime request names, at most MAX_USERS: its ``X-User-Id`` headers and
    ``user_id`` query parameters (the runtime's session and task calls name one). A request
    naming two users records both, so neither is charged alone; beyond MAX_USERS the first in
    order are kept, still several (ambiguous), within what the store takes in one note."""
    named = {name for name in (*headers.getall("X-User-Id", ()), *query.getall("user_id", ()))
             if name}
    return set(sorted(named)[:MAX_USERS])
