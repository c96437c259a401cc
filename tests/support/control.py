"""The memory control API in tests: served in-process on loopback exactly as ``control-api``
serves it (``ControlService`` over the fenced store, scopes resolved from the MemoryScope
objects of the real API server by ``KubeDirectory``), the allowed state of a scope's control
room, and calls with the bridge's bearer token, including the two-step confirmations."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import client

from fgentic_devenv import free_port
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.controlapi.auth import BearerTokenFile
from fgentic_governance.controlapi.cluster_directory import KubeDirectory
from fgentic_governance.controlapi.confirm import ConfirmationBook
from fgentic_governance.controlapi.http import make_handler
from fgentic_governance.controlapi.room import RoomPolicy
from fgentic_governance.controlapi.service import ControlService
from fgentic_governance.memory import MemoryStore
from fgentic_governance.memory.confirmations import StoreLedger
from fgentic_governance.serving.http import serve

CONTROL_SERVER = "fgentic.local"
"""The local homeserver of the control rooms (and of every governed subject)."""
BRIDGE_BOT = "@fgentic-bot:fgentic.local"
GHOST_TEMPLATE = "@agent-{namespace}-{name}:{server}"


def control_room_state(room_id: str, subject: str, agent_namespace: str, agent_name: str,
                       **changes: Any) -> dict[str, Any]:
    """A fresh snapshot of the allowed state of a control room (ADR 0023 §19-§20): invite
    only, joined history, plaintext, exactly the subject, the bridge bot and the Agent's ghost
    joined, an ACL allowing only the local server; ``changes`` applied on top (drift)."""
    ghost = GHOST_TEMPLATE.format(namespace=agent_namespace, name=agent_name,
                                  server=CONTROL_SERVER)
    room: dict[str, Any] = {
        "roomId": room_id, "observedAt": int(time.time()), "roomVersion": "12",
        "joinRule": "invite", "historyVisibility": "joined", "encrypted": False,
        "members": [{"userId": subject, "membership": "join"},
                    {"userId": BRIDGE_BOT, "membership": "join"},
                    {"userId": ghost, "membership": "join"}],
        "serverAcl": {"allow": [CONTROL_SERVER], "deny": [], "allowIpLiterals": False},
    }
    room.update(changes)
    return room


@dataclass
class ControlClient:
    """Calls to the served control API as the bridge makes them."""

    url: str
    token: str
    http: aiohttp.ClientSession
    responses: list[str] = field(default_factory=list)
    """Every response body, as sent (for content checks)."""

    async def post(self, action: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        async with self.http.post(f"{self.url}/v1/memory/{action}",
                                  data=json.dumps(body).encode(),
                                  headers={"Authorization": f"Bearer {self.token}"}) as response:
            text = await response.text()
        self.responses.append(text)
        return response.status, json.loads(text)

    async def confirmed(self, action: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``forget-all`` or ``off``: ask, then confirm with the single-use token issued."""
        status, first = await self.post(action, body)
        if status != 202:
            return status, first
        return await self.post(action, {**body,
                                        "confirmationToken": first["confirmation"]["token"]})


@asynccontextmanager
async def control_api(store: MemoryStore, pool: Any, api: client.ApiClient,
                      namespaces: Sequence[str], workdir: Path, *,
                      appservice: AppserviceRegistry = EMPTY) -> AsyncIterator[ControlClient]:
    """The control API for the scopes of ``namespaces`` on 127.0.0.1, with a fresh bearer
    token in ``workdir``; ``pool`` (the owner's) keeps its pending confirmations;
    ``appservice`` is its --appservice-namespaces."""
    token = secrets.token_urlsafe(32)
    token_file = workdir / "control-api-token"
    token_file.write_text(token)
    service = ControlService(store, KubeDirectory(api, namespaces),
                             RoomPolicy(CONTROL_SERVER, BRIDGE_BOT, GHOST_TEMPLATE,
                                        appservice=appservice),
                             ConfirmationBook(StoreLedger(pool), ttl=120))
    port = free_port()
    runner = await serve(make_handler(service, BearerTokenFile(token_file)), "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as http:
            yield ControlClient(f"http://127.0.0.1:{port}", token, http)
    finally:
        await runner.cleanup()
