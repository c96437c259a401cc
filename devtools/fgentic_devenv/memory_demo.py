"""The governed memory path in `fgentic-dev up`: the memory API as kagent's runtime would call it.

A memory-enabled Agent is admitted (the webhook routes its Pods to the memory API); Alice has
consented, Bob has a scope but no consent. With the Agent's own service-account token
(TokenRequest, audience ``kagent``) and kagent v0.9.11's request shapes, Bob's save is refused
and Alice's is stored once a delegation lease is open - what the control API does after its
control-room check. Only status codes, bounded codes and counts are printed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import aiohttp
import asyncpg

from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_governance.api import kagent
from fgentic_governance.api.kagent import app_name
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord
from fgentic_governance.memory.delegated import DelegatedStore
from fgentic_governance.memory.model import Sighting

NS = "fgentic-demo"
AGENT = "memory-demo"
LOCAL = "fgentic.local"
# The A2A context of the demo's turn: a lease names it, and the memory API serves the lease's
# memory calls only while it alone is in progress (sql/0021).
CONTEXT = "memory-demo-turn"


def _objects() -> list[dict[str, Any]]:
    def scope(who: str) -> dict[str, Any]:
        return {"apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "MemoryScope",
                "metadata": {"name": f"{who}-{AGENT}", "namespace": NS},
                "spec": {"subject": {"mxid": f"@{who}:{LOCAL}", "originKind": "native-local"},
                         "agent": {"namespace": NS, "name": AGENT},
                         "controlRoom": f"!{who}-memory-demo:{LOCAL}",
                         "purpose": "personal-preferences", "policyVersion": "2026-11",
                         "profile": "demo", "posture": "enabled"}}

    consent = {"apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "ConsentRecord",
               "metadata": {"name": f"alice-{AGENT}-grant-1", "namespace": NS},
               "spec": {"scopeRef": {"name": f"alice-{AGENT}"},
                        "subject": {"mxid": f"@alice:{LOCAL}", "originKind": "native-local"},
                        "purpose": "personal-preferences", "policyVersion": "2026-11",
                        "decision": "granted"}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": AGENT, "namespace": NS}}
    return [scope("alice"), scope("bob"), consent, account]


def _agent() -> dict[str, Any]:
    return {"apiVersion": kagent.API_VERSION, "kind": kagent.AGENT.kind,
            "metadata": {"name": AGENT, "namespace": NS},
            "spec": {"type": "Declarative", "declarative": {
                "modelConfig": "default-model-config",
                "systemMessage": "You remember what the user agreed to share.",
                "memory": {"modelConfig": "embedding-model-config", "ttlDays": 3}}}}


def _phase(cp: LocalControlPlane, name: str) -> tuple[str, int]:
    obj = json.loads(cp.kubectl("get", "memoryscope", "-n", NS, name, "-o", "json"))
    status = obj.get("status") or {}
    return str(status.get("phase", "")), int(status.get("consentGeneration") or 0)


def _vector(text: str) -> list[float]:
    """A stand-in embedding (kagent's runtime sends the provider's 768 floats)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % 32] - 127.5) / 128.0 for i in range(768)]


def run(cp: LocalControlPlane, dsn: str, memory_api: str, timeout: float = 60.0) -> None:
    print("\n-- governed memory in kagent's path (memory API at " + memory_api + ")")
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in _objects()))
    deadline = time.monotonic() + timeout
    while (phase := _phase(cp, f"alice-{AGENT}"))[0] != "Enabled":
        if time.monotonic() > deadline:
            raise SystemExit(f"alice's scope never Enabled: {phase}")
        time.sleep(0.5)
    while True:  # the webhook admits the Agent once it has seen the memory API ready
        try:
            cp.kubectl("apply", "-f", "-", input=json.dumps(_agent()))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    print(f"memory-enabled Agent {NS}/{AGENT} admitted (its Pods are routed to the memory API)")
    token = cp.kubectl("create", "token", AGENT, "-n", NS, "--audience", "kagent").strip()
    asyncio.run(_calls(dsn, memory_api, token, _phase(cp, f"alice-{AGENT}")[1]))


async def _calls(dsn: str, url: str, token: str, generation: int) -> None:
    async def post(session: aiohttp.ClientSession, path: str, who: str,
                   body: dict[str, Any]) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}", "X-Agent-Name": app_name(NS, AGENT),
                   "X-User-Id": f"@{who}:{LOCAL}"}
        async with session.post(url + path, json=body, headers=headers) as answer:
            return answer.status, await answer.json()

    def fact(who: str, text: str) -> dict[str, Any]:
        return {"agent_name": app_name(NS, AGENT), "user_id": f"@{who}:{LOCAL}",
                "content": text, "vector": _vector(text)}

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        status, body = await post(session, "/api/memories/sessions", "bob",
                                  fact("bob", "Bob prefers short answers."))
        print(f"save for bob (no consent):            {status} {body}")
        status, body = await post(session, "/api/memories/sessions", "alice",
                                  fact("alice", "Alice prefers tea."))
        print(f"save for alice (consent, no lease):   {status} {body}")
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        try:
            store = MemoryStore(pool)
            record = ScopeRecord(f"{NS}/alice-{AGENT}", f"@alice:{LOCAL}", "native-local", NS,
                                 AGENT, f"!alice-memory-demo:{LOCAL}")
            lease = await store.open_lease(Access.for_scope(record, generation), 120,
                                           context_id=CONTEXT)
            # What the memory API notes from the runtime's first session call of the turn.
            await DelegatedStore(pool).note_context(NS, AGENT, f"@alice:{LOCAL}",
                                                    Sighting(CONTEXT))
            print(f"lease opened for alice's delegation, expires {lease.expires_at:%H:%M:%S}")
            status, body = await post(session, "/api/memories/sessions", "alice",
                                      fact("alice", "Alice prefers tea."))
            print(f"save for alice (consent and lease):   {status} {sorted(body)}")
            query = {"agent_name": app_name(NS, AGENT), "user_id": f"@alice:{LOCAL}",
                     "vector": _vector("Alice prefers tea."), "limit": 5, "min_score": 0.3}
            status, found = await post(session, "/api/memories/search", "alice", query)
            print(f"search for alice:                     {status} {len(found)} fact(s)")
            counts = [await pool.fetchval(
                "SELECT count(*) FROM fgentic_memory.memory WHERE user_id = $1",
                f"@{who}:{LOCAL}") for who in ("alice", "bob")]
            print(f"stored rows: alice {counts[0]}, bob {counts[1]}")
        finally:
            await pool.close()
