"""Every guarantee survives a primary failover (issue 40 §1): the leader of a real three-member
Patroni cluster (synchronous, strict) is SIGKILLed, Patroni and postmaster, in the middle of
an operation of our store code, and the invariant is read back on the new primary.

The store is built as our processes build theirs, from a DSN file naming every member and no
target session attribute (tests/support/ha.py); memory/dsn.py makes every connection go to
the primary. Each test prints each client's time from the kill to its first successful call.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from kubernetes.client import ApiClient

from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.ha import Failover, Member
from fgentic_governance import faults
from fgentic_governance.api.memory import Posture, ScopePhase
from fgentic_governance.consent import flow
from fgentic_governance.consent.gates import Verdict
from fgentic_governance.memory import Access, MemoryStore, Operation, ScopeRecord, StoreRefusal
from fgentic_governance.memory.cost import CostGate
from fgentic_governance.reasons import Reason
from fgentic_governance.retrievalserver.codes import RetrievalServerReason
from tests.support import processes
from tests.support.faults import (
    Cluster,
    Operator,
    enabled_scope,
    new_namespace,
    new_principal,
    record_of,
)
from tests.support.ha import DATABASE, FIRST_SUCCESS_SECONDS, HaStore, first_success, psql
from tests.support.mcp_requests import VERSION, carrier, rpc_body
from tests.support.objects import scope_obj
from tests.support.polling import until, until_async
from tests.support.projector import AGENT, ALICE
from tests.support.retrieval_server import (
    TOOL,
    Chunk,
    QueryEmbeddings,
    RunningServer,
    load_corpus,
    retrieval_server,
)
from tests.support.store import CONTEXT, enabled, scope_record

pytestmark = pytest.mark.integration
T = TypeVar("T")

WITHDRAWN = Verdict(Posture.FULLY_DISABLED, Reason.CONSENT_WITHDRAWN)
ENTRIES = 4
COUNT_ROWS = "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1"
GENERATION = "SELECT consent_generation FROM fgentic_memory.scope WHERE scope_key = $1"
# What a client may be told while no member is the primary: a closed, content-free code.
OUTAGE = {Reason.STORE_UNAVAILABLE}


async def _scope(store: MemoryStore, name: str, entries: int,
                 **fields: object) -> tuple[ScopeRecord, Access]:
    # An Agent of its own: one subject binds one scope per Agent.
    agent = f"{name}-{uuid.uuid4().hex[:8]}"
    record = scope_record(f"team-a/{agent}", agent_name=agent, **fields)
    access = await enabled(store, record)
    for index in range(entries):
        await store.save(access, f"ha fact {index}")
    return record, access


def _kill_at(step: str, ha: HaStore, monkeypatch: pytest.MonkeyPatch) -> list[Failover]:
    """Kill the primary when the flow reaches ``step`` (once); the flow itself goes on."""
    kills: list[Failover] = []

    def point(at: str) -> None:
        if at == step and not kills:
            kills.append(ha.kill_primary())

    monkeypatch.setattr(faults, "point", point)
    return kills


async def _withdrawal_across_failover(ha: HaStore, monkeypatch: pytest.MonkeyPatch, step: str,
                                      name: str) -> tuple[ScopeRecord, int, flow.Outcome,
                                                          flow.Outcome, int]:
    """Withdraw with the primary killed at ``step``; then, as the operator's retry does,
    reconcile again once a store call succeeds. Returns the scope, its generation before,
    both outcomes and the row count the new primary held before the retry."""
    async with ha.store() as store:
        record, _ = await _scope(store, name, ENTRIES)
        before = (await store.scope_state(record.scope_key)).consent_generation
        kills = _kill_at(step, ha, monkeypatch)
        first = await flow.reconcile(store, record, WITHDRAWN, before)
        assert kills, f"the flow never reached {step}"
        await ha.wait_new_leader(kills[0])
        state = await first_success(lambda: store.scope_state(record.scope_key), kills[0],
                                    "operator store (scope state)")
        # The fence was acknowledged before the kill, so the new primary has it: the scope
        # is disabled, held and advanced, whatever happened after.
        assert (state.enabled, state.held) == (False, True)
        assert state.consent_generation > before
        retry = await flow.reconcile(store, record, WITHDRAWN, before)
    return record, before, first, retry, state.entry_count


async def _assert_verified_on_primary(ha: HaStore, record: ScopeRecord,
                                      retry: flow.Outcome) -> None:
    assert retry.phase is ScopePhase.DISABLED
    assert retry.erasure is not None and retry.erasure.verified
    assert retry.erasure.reason is Reason.OK
    # Read back on the new primary itself: nothing of the scope, and the receipt names the
    # generation the primary holds.
    assert (await ha.on_primary(COUNT_ROWS, record.scope_key))[0][0] == 0
    assert (await ha.on_primary(GENERATION, record.scope_key))[0][0] == retry.erasure.generation


def _assert_failed_closed(first: flow.Outcome) -> None:
    # No primary can exist a moment after the kill: the withdrawal must not say Verified.
    assert first.phase is ScopePhase.FAILED
    assert first.erasure is not None and not first.erasure.verified
    assert first.reason in OUTAGE and first.erasure.reason in OUTAGE


async def test_withdrawal_killed_between_fence_and_delete(
        ha: HaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    record, _, first, retry, rows_before_retry = await _withdrawal_across_failover(
        ha, monkeypatch, "withdraw.after_fence", "fence")
    _assert_failed_closed(first)
    # The delete never ran: the rows are still there, behind the fence and the hold.
    assert rows_before_retry == ENTRIES
    await _assert_verified_on_primary(ha, record, retry)
    assert retry.erasure is not None and retry.erasure.deleted == ENTRIES


async def test_withdrawal_killed_between_delete_and_verify(
        ha: HaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    record, _, first, retry, rows_before_retry = await _withdrawal_across_failover(
        ha, monkeypatch, "withdraw.after_delete", "delete")
    _assert_failed_closed(first)
    # The delete was acknowledged, so the synchronous standby had it: nothing to delete now,
    # and the retry's receipt is verified by its own read-back on the new primary.
    assert rows_before_retry == 0
    await _assert_verified_on_primary(ha, record, retry)
    assert retry.erasure is not None and retry.erasure.deleted == 0


BURST_PACE = 0.1
"""Seconds between one writer's answered saves: 4 writers, about 40 saves a second at most."""


async def test_burst_of_saves_across_a_failover(ha: HaStore) -> None:
    acked: set[str] = set()
    refused: dict[str, Reason] = {}
    stop = asyncio.Event()
    async with ha.store() as store:
        _, access = await _scope(store, "burst", 0)
        # The probe saves into a scope of its own: on a fast host the writers fill theirs (100,
        # the cap) between two probes, and a probe there would be refused ENTRY_CAP_REACHED
        # however healthy the new primary is.
        _, probe = await _scope(store, "burst-probe", 0)

        async def writer(worker: int) -> None:
            index = 0
            while not stop.is_set():
                content = f"burst {worker}-{index}"
                index += 1
                try:
                    await store.save(access, content)
                except StoreRefusal as refusal:
                    if refusal.reason is Reason.ENTRY_CAP_REACHED:
                        # The scope is full (100, the schema's most): a fast host gets there
                        # after the gap; the burst has done its work.
                        stop.set()
                        return
                    refused[content] = refusal.reason
                    await asyncio.sleep(0.2)
                else:
                    acked.add(content)
                    # Paced: unpaced, four writers on a quiet host fill the scope (100) before
                    # the kill lands, and the burst crosses no failover at all.
                    await asyncio.sleep(BURST_PACE)

        writers = [asyncio.create_task(writer(worker)) for worker in range(4)]
        try:
            await until_async(lambda: len(acked) >= 20, "20 saves before the kill", 60)
            failover = ha.kill_primary()
            await ha.wait_new_leader(failover)
            await first_success(lambda: store.save(probe, "burst probe"), failover,
                                "fenced save (memory store)")
            after = len(acked)
            await until_async(lambda: len(acked) >= after + 20 or stop.is_set(),
                              "20 saves after (or the scope full)", 60)
        finally:
            stop.set()
            await asyncio.gather(*writers)
    counts = {str(row["content"]): int(row["n"]) for row in await ha.on_primary(
        "SELECT content, count(*) AS n FROM fgentic_memory.memory WHERE scope_key = $1"
        " GROUP BY content", access.scope_key)}
    landed_anyway = sorted(c for c in refused if counts.get(c))
    print(f"\n[ha] burst: {len(acked)} saves answered, {len(refused)} refused "
          f"({len(landed_anyway)} of those committed before the connection died)")
    assert refused, "the kill refused no save: it did not happen mid-burst"
    assert set(refused.values()) <= OUTAGE
    # Every answered save is on the new primary, once; none refused is there twice.
    assert {c: counts.get(c, 0) for c in acked} == dict.fromkeys(acked, 1)
    assert all(counts.get(c, 0) <= 1 for c in refused)


async def test_save_in_flight_under_the_old_generation_never_lands_after_verified(
        ha: HaStore) -> None:
    async with ha.store() as operator, ha.store() as runtime:
        record, old = await _scope(operator, "inflight", ENTRIES)
        failover = ha.kill_primary()
        answers: list[tuple[float, Reason]] = []

        async def late_save() -> Reason:
            try:
                await runtime.save(old, "late fact")
            except StoreRefusal as refusal:
                answers.append((time.monotonic(), refusal.reason))
                return refusal.reason
            answers.append((time.monotonic(), Reason.OK))
            return Reason.OK

        async def background_save() -> None:
            # A save under the generation the runtime was granted, retried through the gap
            # until the store answers anything but "unavailable".
            await until_async(late_save, "the late save refused", 120, interval=0.1,
                              holds=lambda reason: reason not in OUTAGE | {Reason.OK})

        saver = asyncio.create_task(background_save())
        await ha.wait_new_leader(failover)
        before = (await first_success(lambda: operator.scope_state(record.scope_key),
                                      failover, "operator store (scope state)")
                  ).consent_generation
        outcome = await flow.reconcile(operator, record, WITHDRAWN, before)
        verified_at = time.monotonic()
        await asyncio.wait_for(saver, timeout=130)
    assert outcome.erasure is not None and outcome.erasure.verified
    final = answers[-1][1]
    assert final not in OUTAGE | {Reason.OK}, "the late save was never refused"
    assert all(at < verified_at for at, reason in answers if reason is Reason.OK)
    assert (await ha.on_primary(COUNT_ROWS, record.scope_key))[0][0] == 0


CEILING = 40


async def test_cost_admission_and_leases_across_a_failover(ha: HaStore) -> None:
    admitted = 0
    refusals: list[Reason] = []
    opened: set[str] = set()
    closed: set[str] = set()
    to_close: list[str] = []
    async with ha.store() as store, ha.pool() as pool:
        _, access = await _scope(store, "cost", 0, hourly_operation_ceiling=CEILING)
        gate = CostGate(pool)
        failover: Failover | None = None
        first_turn: float | None = None

        async def turn() -> Reason:
            """A turn: close what an earlier turn could not, open a lease, charge, close."""
            nonlocal failover, admitted, first_turn
            if failover is None and admitted >= 10:
                failover = ha.kill_primary()
            try:
                for lease_id in list(to_close):
                    await store.close_lease(access.scope_key, lease_id)
                    to_close.remove(lease_id)
                    closed.add(lease_id)
                lease = await store.open_lease(access, 60, context_id=CONTEXT)
                opened.add(lease.id)
                to_close.append(lease.id)
                await gate.admit(access, {Operation.EMBEDDING: 1})
            except StoreRefusal as refusal:
                refusals.append(refusal.reason)
                if refusal.reason is not Reason.COST_CEILING_REACHED:
                    await asyncio.sleep(0.2)  # through the gap, not at full speed
                return refusal.reason
            admitted += 1
            if failover is not None and first_turn is None:
                first_turn = time.monotonic() - failover.at
                print(f"\n[ha] lease + cost admission: first successful turn "
                      f"{first_turn:.1f} s after the kill of {failover.killed.name}")
            return Reason.OK

        # Turn after turn at full speed (a successful one does not wait) until the ceiling.
        await until_async(turn, "the cost ceiling reached across the failover", 150,
                          interval=0, holds=lambda reason: reason is Reason.COST_CEILING_REACHED)
        assert failover is not None
        for lease_id in list(to_close):  # the primary is back: close the last one
            await store.close_lease(access.scope_key, lease_id)
            closed.add(lease_id)
    charged = (await ha.on_primary(
        "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1",
        access.scope_key))[0][0]
    leases = {str(row["lease_id"]): row["closed_at"] for row in await ha.on_primary(
        "SELECT lease_id, closed_at FROM fgentic_memory.delegation_lease WHERE scope_key = $1",
        access.scope_key)}
    print(f"\n[ha] cost: {admitted} admitted of a ceiling of {CEILING}, {charged} charged on "
          f"the new primary; {len(opened)} leases opened; refusals "
          f"{sorted({r.value: refusals.count(r) for r in refusals}.items())}")
    assert refusals[-1] is Reason.COST_CEILING_REACHED, "the ceiling was never reached"
    assert set(refusals[:-1]) <= OUTAGE
    # No acknowledged charge lost, none counted twice past the ceiling: what the new primary
    # holds covers every admission answered, and the ceiling still stopped the scope at 40.
    assert admitted <= charged <= CEILING
    # Every lease answered open is on the new primary, and every one answered closed is closed.
    assert opened <= set(leases)
    assert all(leases[lease_id] is not None for lease_id in closed)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:  # 503 (HTTPError) while the store is unavailable, or refused
        return False


async def test_memory_api_process_recovers_after_a_failover(ha: HaStore, kubeconfig: Path,
                                                            tmp_path: Path) -> None:
    # The real memory-api process, given the DSN file naming every member (no attribute).
    proc, port = processes.spawn_memory_api(kubeconfig, ha.dsn_file, "http://127.0.0.1:9",
                                            tmp_path / "memory-api.log")
    try:
        await asyncio.to_thread(until, lambda: _ready(port), "memory API ready", 60)
        failover = ha.kill_primary()
        # Readiness probes the store (one bounded call): in the gap it must say "not ready"
        # (no member is the primary), not hang and not be answered by a standby.
        await asyncio.to_thread(until, lambda: not _ready(port),
                                "memory API not ready in the gap", 10)
        await ha.wait_new_leader(failover)
        await asyncio.to_thread(until, lambda: _ready(port),
                                "memory API ready on the new primary", 90)
        print(f"\n[ha] memory-api process: first successful store call (readiness) "
              f"{time.monotonic() - failover.at:.1f} s after the kill of {failover.killed.name}")
        # Its pool's connections are on the new primary, as the read-write rule demands.
        on_new = (await ha.on_primary(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            DATABASE))[0][0]
        assert proc.poll() is None
    finally:
        processes.stop(proc)
    assert on_new >= 1


# -- the control API and the retrieval server: one kill, both processes observe it ----------

TOKEN = "ha-control-api-token-" + "x" * 24
ALICE_KEY = {"kind": "matrix", "principal": ALICE}
CHUNKS = [Chunk(1, "ha retention policy", "docs/retention.md",
                {"classification": "public", "allowed_principals": [ALICE_KEY]}),
          Chunk(2, "ha gateway key rotation", "docs/keys.md",
                {"classification": "public", "allowed_principals": [ALICE_KEY]})]


def _spawn_control_api(ha: HaStore, kubeconfig: Path, work: Path
                       ) -> tuple[subprocess.Popen[bytes], int]:
    """The real control API, given the DSN file naming every member (no attribute)."""
    token_file = work / "bridge-token"
    token_file.write_text(TOKEN)
    port = processes.free_port()
    proc = processes.spawn_and_wait(
        ["control-api", "--store-dsn-file", str(ha.dsn_file), "--token-file", str(token_file),
         "--local-homeserver", "fgentic.local", "--bot-mxid", "@fgentic-bot:fgentic.local",
         "--ghost-template", "@agent-{namespace}-{name}:{server}",
         "--kubeconfig", str(kubeconfig), "--namespace", "default",
         "--host", "127.0.0.1", "--port", str(port)], work / "control-api.log", port)
    return proc, port


def _search(server: RunningServer) -> list[str] | str:
    """One bounded tool call as alice: the chunk ids found, or the refusal's code."""
    body = rpc_body("tools/call", {"name": TOOL,
                                   "arguments": {"query": CHUNKS[0].text, "k": 2}})
    request = urllib.request.Request(server.url, data=body, headers={
        "accept": "application/json, text/event-stream", "content-type": "application/json",
        "mcp-protocol-version": VERSION, "x-fgentic-identity": carrier(iat=int(time.time()))})
    with urllib.request.urlopen(request, timeout=15) as answer:
        result = json.loads(answer.read())["result"]
    if result.get("isError"):
        return str(result["content"][0]["text"])
    return [str(chunk["chunk_id"]) for chunk in result["structuredContent"]["chunks"]]


def _refused(server: RunningServer) -> str | None:
    found = _search(server)
    return found if isinstance(found, str) else None


def _found(server: RunningServer) -> list[str] | None:
    found = _search(server)
    return found if isinstance(found, list) and found else None


def _first_success(check: Callable[[], T], failover: Failover, who: str) -> T:
    found = until(check, f"{who} served on the new primary", FIRST_SUCCESS_SECONDS)
    print(f"\n[ha] {who}: first successful store call "
          f"{time.monotonic() - failover.at:.1f} s after the kill of {failover.killed.name}")
    return found


async def test_control_api_and_retrieval_server_recover_after_a_failover(
        ha: HaStore, kubeconfig: Path, tmp_path: Path) -> None:
    # A corpus in the same database, loaded on the primary before the kill (the standbys
    # replay it synchronously).
    await load_corpus(ha.cluster.dsn(DATABASE), CHUNKS)
    control, control_port = _spawn_control_api(ha, kubeconfig, tmp_path)
    embeddings = QueryEmbeddings()
    try:
        async with embeddings, retrieval_server(
                tmp_path, ha.dsn_file.read_text(), embeddings.url,
                agent=f"{AGENT.namespace}/{AGENT.name}") as server:
            await asyncio.to_thread(until, lambda: _ready(control_port),
                                    "control API ready", 60)
            assert await asyncio.to_thread(_found, server) == ["1", "2"]
            failover = ha.kill_primary()
            # One kill, both processes: in the gap no member is the primary, so each must
            # refuse with a closed code, never answer from a standby (before memory/dsn.py
            # their pools reconnected to the first member that accepted: a replica).
            await asyncio.to_thread(until, lambda: not _ready(control_port),
                                    "control API not ready in the gap", 10)
            refusal = await asyncio.to_thread(until, lambda: _refused(server),
                                              "retrieval refused in the gap", 10)
            await ha.wait_new_leader(failover)
            # Polled side by side, so each process's own time to first success is printed.
            _, found = await asyncio.gather(
                asyncio.to_thread(_first_success, lambda: _ready(control_port), failover,
                                  "control-api process (readiness)"),
                asyncio.to_thread(_first_success, lambda: _found(server), failover,
                                  "retrieval-server process (search)"))
            assert server.process.poll() is None
        assert control.poll() is None
    finally:
        processes.stop(control)
    assert refusal == RetrievalServerReason.STORE_UNAVAILABLE.value
    assert found == ["1", "2"]


# -- the operator process: an offboarding killed mid-erasure ----------------------------------

SCOPES = 3
FACTS = 3
HOLD_ROWS = ("SELECT count(*) FROM (SELECT 1 FROM fgentic_memory.memory WHERE scope_key = $1"
             " FOR UPDATE) held")
PERSON_ROWS = ("SELECT count(*) FROM fgentic_memory.memory m JOIN fgentic_memory.scope s"
               " USING (scope_key) WHERE s.subject_mxid = $1")
PERSON_SCOPES = ("SELECT count(*), bool_or(enabled) FROM fgentic_memory.scope"
                 " WHERE subject_mxid = $1")
CLIENTS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
           " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
CLEANED = "fgentic_store_cleanup_last_success_timestamp_seconds"
READY = "ReadyForDeactivation"


def _deleting_behind(ha: HaStore, leader: Member, holder: int) -> bool:
    """Whether an erasure's DELETE waits on the rows ``holder`` (a backend pid) locked."""
    return psql(ha.cluster, leader, (
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE"
        f" 'DELETE FROM fgentic_memory.memory%' AND {holder} = ANY(pg_blocking_pids(pid))"),
        DATABASE) not in {"", "0"}


def _cleaned_after(port: int, since: float) -> float:
    """The operator's last successful expiry cleanup (a store call; unix time) if after
    ``since``, else 0."""
    at = processes.metric(port, CLEANED) or 0.0
    return at if at > since else 0.0


def _results(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {f"{r['namespace']}/{r['scope']}": (r["result"], r["reasonCode"])
            for r in status.get("results") or []}


async def test_operator_offboarding_killed_mid_erasure(
        ha: HaStore, control_plane: LocalControlPlane, k8s_client: ApiClient,
        tmp_path: Path) -> None:
    """The real operator (a DSN naming every member, no attribute) offboards a person whose
    three MemoryScopes hold facts, and the primary dies in the middle of the erasure.

    The kill lands deterministically: before the offboarding is created, a test connection on
    the leader locks the rows of the second scope in the flow's order (FOR UPDATE), so the
    flow erases and verifies the first scope, then its DELETE of the second waits on that lock
    (seen in pg_stat_activity: a DELETE blocked by the test's pid), and the leader is killed
    then, well inside the operator's lock_timeout (8 s; a miss would only show a
    STORE_LOCK_TIMEOUT and a retry that blocks again). The kill also ends the lock. A count of
    scopes would race the flow; a fault point cannot stop a child process, only kill it.

    The DSN names the leader, then the replica, then the synchronous standby: a pool that may
    land on a standby lands, at its first reconnect after the kill, on the replica, which
    Patroni never promotes (strict synchronous mode). Without target_session_attrs=read-write
    the operator's writes then fail there (INTERNAL_ERROR, read-only) after the failover too:
    the offboarding never completes and its cleanup never succeeds again.
    """
    leader, standby, replica = (ha.cluster.in_role(role)
                                for role in ("leader", "sync_standby", "replica"))
    ns, person = new_namespace("ha-offboard"), new_principal()
    control_plane.ensure_namespace(ns)
    operator = Operator(control_plane.kubeconfig,
                        ha.cluster.hosts_dsn(DATABASE, (leader, replica, standby)), tmp_path,
                        namespace=ns)
    port = processes.free_port()
    operator.args += ["--metrics-port", str(port)]
    # No scope sweep (only the offboarding touches the scopes' rows); the expiry cleanup every
    # second: the process's first successful store call after the kill is stamped by it.
    operator.start(resync=3600, env={"FGENTIC_STORE_CLEANUP_SECONDS": "1",
                                     "FGENTIC_STORE_SETTINGS_SECONDS": "1"})
    cluster = Cluster(k8s_client)
    scopes = [scope_obj(ns, f"erase-{i}", person, f"agent-{i}") for i in range(SCOPES)]
    seen: list[dict[str, Any]] = []
    ready_at: list[float] = []

    def ready(status: dict[str, Any]) -> bool:
        seen.append(status)
        if status.get("phase") == READY:
            ready_at.append(time.monotonic())
        return bool(ready_at)

    name = ""
    watch: asyncio.Task[dict[str, Any]] | None = None
    try:
        async with ha.store() as store:
            for scope in scopes:
                await enabled_scope(cluster, store, scope, person, FACTS)
        keys = sorted(record_of(scope).scope_key for scope in scopes)  # the flow's order
        lock = await asyncpg.connect(ha.cluster.member_dsn(leader, DATABASE), timeout=10)
        try:
            # The database's default idle bound (sql/0006) would end this transaction.
            await lock.execute("SET idle_in_transaction_session_timeout = 0")
            holder = int(await lock.fetchval("SELECT pg_backend_pid()"))
            await lock.execute("BEGIN")
            assert await lock.fetchval(HOLD_ROWS, keys[1]) == FACTS
            name = cluster.offboard(person)
            watch = asyncio.create_task(cluster.until_offboarded(name, ready, timeout=180))
            await asyncio.to_thread(until,
                                    lambda: _deleting_behind(ha, leader, holder),
                                    "the erasure's DELETE waiting on the held rows", 60)
            # Mid-erasure: the first scope is erased (and verified), the second not yet.
            assert [(await ha.on_primary(COUNT_ROWS, key))[0][0] for key in keys[:2]] == [
                0, FACTS]
            failover = ha.kill_primary()
        finally:
            lock.terminate()
        killed = time.time() - (time.monotonic() - failover.at)
        await ha.wait_new_leader(failover)
        cleaned = await asyncio.to_thread(until, lambda: _cleaned_after(port, killed),
                                          "the operator's first successful store call",
                                          FIRST_SUCCESS_SECONDS)
        print(f"\n[ha] operator process (expiry cleanup): first successful store call "
              f"{cleaned - killed:.1f} s after the kill of {failover.killed.name}")
        final = await watch
        print(f"[ha] operator process: offboarding {READY} "
              f"{ready_at[0] - failover.at:.1f} s after the kill")
        on_new = (await ha.on_primary(CLIENTS, DATABASE))[0][0]
        assert operator.proc is not None and operator.proc.poll() is None
    finally:
        if watch is not None:
            watch.cancel()
        operator.stop()
        if name:
            cluster.delete_offboarding(name)
    operator.assert_content_free()
    # In the gap: Failed with the closed code, the held scope never Verified.
    gap = [status for status in seen if status.get("phase") == "Failed"]
    assert gap, "the offboarding never reported the outage"
    assert {status.get("reasonCode") for status in gap} == {Reason.STORE_UNAVAILABLE.value}
    failed = {result for status in gap for result in _results(status).values()
              if result[0] != "Verified"}
    assert failed == {("Failed", Reason.STORE_UNAVAILABLE.value)}
    assert all(_results(status)[keys[1]][0] == "Failed" for status in gap if _results(status))
    # After the failover: Ready, every receipt minted by a run after the kill (none of the
    # gap's ids) and Verified by a read-back the new primary confirms: nothing of the person
    # left there, every scope disabled. Every Verified receipt ever shown is checked too.
    assert (final["scopesFound"], final["scopesErased"], final["scopesFailed"]) == (
        SCOPES, SCOPES, 0)
    assert set(_results(final).values()) == {("Verified", Reason.OK.value)}
    assert sorted(_results(final)) == keys
    gap_ids = {r["receiptId"] for status in gap for r in status.get("results") or []}
    assert all(len(r["receiptId"]) == 32 and r["receiptId"] not in gap_ids
               for r in final["results"])
    verified = {key for status in seen for key, result in _results(status).items()
                if result[0] == "Verified"}
    for key in sorted(verified):
        assert (await ha.on_primary(COUNT_ROWS, key))[0][0] == 0, key
    assert (await ha.on_primary(PERSON_ROWS, person))[0][0] == 0
    assert tuple((await ha.on_primary(PERSON_SCOPES, person))[0]) == (SCOPES, False)
    assert person not in str(seen)  # content-free: not even the MXID
    # Its pool is on the new primary (no other client of this database is connected now).
    assert on_new >= 1
