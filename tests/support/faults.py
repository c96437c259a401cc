"""Helpers of the fault tests (tests/faults): the operator process, object builders, bounded
waits.

No fixtures here (they live in tests/faults/conftest.py). Every wait has an explicit timeout;
nothing here reads, logs or compares memory content except the sentinel check on the operator
log.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_devenv import log_tail
from fgentic_governance.api.common import OriginKind, Principal
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.cli.offboard import manifest, object_name
from fgentic_governance.faults import ENV as FAULT_ENV
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord, StoreRefusal
from fgentic_governance.reasons import Reason
from tests.support import processes
from tests.support.kube import GROUP, VERSION, Check, get_object, phase, until_status
from tests.support.objects import consent_obj

HOMESERVER = "fgentic.local"
# Planted in every saved fact: it must never reach the operator's log, status or events.
SENTINEL = "SENTINEL-faults-do-not-leak"
WAIT = 60.0  # Per wait; the machine is shared and has 2 cores.


class Operator:
    """The real `fgentic-governance operator` process, optionally armed to die at one step."""

    def __init__(self, kubeconfig: Path, dsn: str, work: Path,
                 namespace: str | None = None) -> None:
        dsn_file = work / "dsn"
        dsn_file.write_text(dsn)
        self.log = work / "operator.log"
        self.args = ["operator", "--kubeconfig", str(kubeconfig), "--local-homeserver",
                     HOMESERVER, "--store-dsn-file", str(dsn_file)]
        if namespace:
            self.args += ["--namespace", namespace]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, kill_at: str | None = None, resync: float = 1.0,
              env: dict[str, str | None] | None = None) -> None:
        """Spawn; ``kill_at`` arms the fault point, ``resync`` is the scope timer interval,
        ``env`` more of the child's environment."""
        assert self.proc is None or self.proc.poll() is not None, "operator already running"
        self.proc = processes.spawn_cli(self.args, self.log, env={
            FAULT_ENV: kill_at, "FGENTIC_SCOPE_RESYNC_SECONDS": str(resync), **(env or {})})

    def wait_killed(self, timeout: float = WAIT) -> None:
        """The armed fault fired: the process died of SIGKILL (not an error, not a timeout)."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"operator never reached its fault point; log tail:\n"
                                 f"{log_tail(self.log)}") from None
        assert code == -signal.SIGKILL, f"operator exited {code}:\n{log_tail(self.log)}"

    def kill(self) -> None:
        """SIGKILL from outside (a fault the test times itself)."""
        assert self.proc is not None
        self.proc.kill()
        assert self.proc.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc)

    def assert_content_free(self) -> None:
        assert SENTINEL not in self.log.read_text(errors="replace"), "content reached the log"


def new_namespace(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_principal() -> str:
    """A principal of this test only, so no other test's offboarding can touch it."""
    return f"@fault-{uuid.uuid4().hex[:8]}:{HOMESERVER}"


def record_of(scope: dict[str, Any]) -> ScopeRecord:
    meta = scope["metadata"]
    return ScopeRecord.from_spec(meta["namespace"], meta["name"],
                                 MemoryScopeSpec.model_validate(scope["spec"]))


def condition_status(status: dict[str, Any], kind: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def enabled_condition(status: dict[str, Any]) -> str | None:
    return condition_status(status, "Enabled")


class Cluster:
    """Our custom objects through one API client (the test's own kubeconfig)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"]["namespace"]
        return self.api.create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, ns, plural, obj, _request_timeout=30)

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any]:
        return get_object(self.api, plural, ns, name, request_timeout=30)

    def withdraw(self, consent: dict[str, Any]) -> None:
        meta = consent["metadata"]
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], "consentrecords", meta["name"],
            {"spec": {"decision": "withdrawn"}}, _request_timeout=30)

    async def until(self, plural: str, ns: str, name: str, check: Check,
                    timeout: float = WAIT) -> dict[str, Any]:
        """Poll the object's status until ``check`` holds; fail after ``timeout`` seconds."""
        return await until_status(self.api, plural, ns, name, check, timeout=timeout,
                                  interval=0.3, tolerate=(ApiException, OSError),
                                  request_timeout=30)

    # -- offboarding (cluster-scoped) -----------------------------------------------------------

    def offboard(self, mxid: str) -> str:
        principal = Principal(mxid=mxid, origin_kind=OriginKind.NATIVE_LOCAL)
        self.api.create_cluster_custom_object(GROUP, VERSION, "principaloffboardings",
                                              manifest(principal), _request_timeout=30)
        return object_name(principal)

    def offboarding_status(self, name: str) -> dict[str, Any]:
        obj: Any = self.api.get_cluster_custom_object(GROUP, VERSION, "principaloffboardings",
                                                      name, _request_timeout=30)
        return dict(obj.get("status") or {})

    def delete_offboarding(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.api.delete_cluster_custom_object(GROUP, VERSION, "principaloffboardings",
                                                  name, _request_timeout=30)

    async def until_offboarded(self, name: str, check: Check,
                               timeout: float = WAIT) -> dict[str, Any]:
        obj = await until_status(self.api, "principaloffboardings", "", name, check,
                                 timeout=timeout, interval=0.3, tolerate=(ApiException, OSError),
                                 request_timeout=30)
        return dict(obj.get("status") or {})


async def enabled_scope(cluster: Cluster, store: MemoryStore, scope: dict[str, Any],
                        mxid: str, facts: int) -> tuple[dict[str, Any], int]:
    """Create the scope and a grant, wait until Enabled, save ``facts`` facts.

    Returns the consent record and the generation the facts were saved at.
    """
    ns, name = scope["metadata"]["namespace"], scope["metadata"]["name"]
    cluster.create("memoryscopes", scope)
    consent = cluster.create("consentrecords", consent_obj(ns, name, mxid))
    status = (await cluster.until("memoryscopes", ns, name, phase("Enabled", "OK")))["status"]
    generation = int(status["consentGeneration"])
    access = Access.for_scope(record_of(scope), generation)
    for i in range(facts):
        await store.save(access, f"fact {i} {SENTINEL}")
    assert await store.entry_count(record_of(scope).scope_key) == facts
    return consent, generation


async def assert_fenced(store: MemoryStore, scope: dict[str, Any], old_generation: int) -> None:
    """Nothing can come back: a save at the pre-erasure generation, and one at the current
    generation of the (disabled) scope, are both refused by the database fence."""
    record = record_of(scope)
    state = await store.scope_state(record.scope_key)
    for generation in (old_generation, state.consent_generation):
        try:
            await store.save(Access.for_scope(record, generation), f"late save {SENTINEL}")
        except StoreRefusal as refusal:
            assert refusal.reason in {Reason.STALE_GENERATION, Reason.SCOPE_DISABLED}, refusal
        else:
            raise AssertionError(f"a save at generation {generation} was accepted")
    assert await store.entry_count(record.scope_key) == 0


def assert_status_content_free(obj: dict[str, Any], mxid: str) -> None:
    text = str(obj.get("status") or {})
    assert SENTINEL not in text and mxid not in text
