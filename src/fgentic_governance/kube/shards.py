"""Operator shards: several releases, each owning a disjoint set of namespaces, one store.

Each shard is elected by its own Lease (kube/lease.py); the Lease also carries the shard's
claim: its namespaces (or "*", every namespace) and whether it handles the cluster-scoped
kinds (PrincipalOffboarding, MemoryPostureFloor). At start-up a replica writes its claim
first and only then lists the other shards' Leases: of two shards starting together, the one
whose list misses the other's claim listed before that claim was written, so the other's list
(after its own write) sees the first claim. Kubernetes lists are consistent reads, so one
write-then-read round refuses every overlap without a settle delay.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, MANAGED_BY
from fgentic_governance.kube.lease import LEASE_SECONDS

log = logging.getLogger("fgentic_governance.kube.shards")
SHARD_LABEL: Final = f"{GROUP}/operator-shard"
NAMESPACES: Final = f"{GROUP}/shard-namespaces"
CLUSTER_KINDS: Final = f"{GROUP}/shard-cluster-kinds"
CLAIMED: Final = f"{GROUP}/shard-claimed"
EVERY: Final = "*"
# A claim counts while its shard may be running: a holder renewing within this bound, or a
# claim written this recently (a shard whose replicas are still starting or standing by).
LIVE_SECONDS: Final = 2 * LEASE_SECONDS
_GLOB: Final = frozenset("*?[!")
_TIMEOUT: Final = 5
_KEYS: Final = (NAMESPACES, CLUSTER_KINDS, CLAIMED)


@dataclass(frozen=True)
class Claim:
    """What one shard owns. ``namespaces`` None: every namespace (a cluster-wide operator)."""

    namespaces: frozenset[str] | None
    cluster_kinds: bool

    @classmethod
    def of(cls, namespaces: list[str], cluster_kinds: bool) -> Claim:
        # A Kopf glob (team-*, !kube-*) cannot be compared with another set: it owns all.
        if not namespaces or any(_GLOB & set(ns) for ns in namespaces):
            return cls(None, cluster_kinds)
        return cls(frozenset(namespaces), cluster_kinds)

    def annotations(self, at: dt.datetime) -> dict[str, str]:
        spelt = EVERY if self.namespaces is None else json.dumps(sorted(self.namespaces))
        return {NAMESPACES: spelt, CLUSTER_KINDS: json.dumps(self.cluster_kinds),
                CLAIMED: at.isoformat()}

    @classmethod
    def read(cls, annotations: dict[str, str]) -> Claim | None:
        """The claim on a Lease; None when it carries none (or one this code cannot read,
        which is then not ours to compare)."""
        spelt = annotations.get(NAMESPACES)
        if spelt is None:
            return None
        try:
            names = None if spelt == EVERY else frozenset(str(n) for n in json.loads(spelt))
        except (ValueError, TypeError):
            return None
        return cls(names, annotations.get(CLUSTER_KINDS) == "true")

    def spelt(self) -> str:
        return EVERY if self.namespaces is None else ",".join(sorted(self.namespaces))

    def conflict(self, other: Claim) -> str | None:
        """Why two shards' claims cannot both hold (None: they are disjoint)."""
        if self.cluster_kinds and other.cluster_kinds:
            return "both handle the cluster-scoped kinds (give all but one --no-cluster-kinds)"
        if self.namespaces is None or other.namespaces is None:
            return "one of them owns every namespace"
        shared = self.namespaces & other.namespaces
        return f"both own {','.join(sorted(shared))}" if shared else None


def live(lease: client.V1Lease, now: dt.datetime) -> bool:
    """The shard of ``lease`` may be running: held and renewed, or freshly claimed. A Lease
    left behind by an uninstalled shard counts no more after LIVE_SECONDS."""
    bound = dt.timedelta(seconds=LIVE_SECONDS)
    spec = lease.spec or client.V1LeaseSpec()
    renewed = spec.renew_time or spec.acquire_time
    if spec.holder_identity and renewed is not None and now - renewed <= bound:
        return True
    claimed = ((lease.metadata.annotations if lease.metadata else None) or {}).get(CLAIMED)
    try:
        return claimed is not None and now - dt.datetime.fromisoformat(claimed) <= bound
    except (ValueError, TypeError):
        return False


def conflicts(mine: str, claim: Claim, leases: list[client.V1Lease],
              now: dt.datetime) -> list[str]:
    """One line per live shard Lease other than ``mine`` whose claim overlaps ``claim``."""
    found = []
    for lease in leases:
        meta = lease.metadata or client.V1ObjectMeta()
        other = Claim.read(meta.annotations or {})
        if meta.name == mine or other is None or not live(lease, now):
            continue
        why = claim.conflict(other)
        if why is not None:
            found.append(f"overlaps shard {meta.namespace}/{meta.name} ({other.spelt()}): {why}")
    return found


def claim(api_client: client.ApiClient, namespace: str, name: str,
          wanted: Claim) -> dict[str, str] | None:
    """Write this shard's claim on its Lease (created without a holder if absent); returns
    the claim annotations it replaced (None: none changed), so a refused start can put them
    back. A Lease already carrying the same claim under a live holder is left alone: its
    leader renews it with the resourceVersion it read, and a write here would only cost it a
    renewal round. Raises on any failure: a claim not written checks nothing."""
    api = client.CoordinationV1Api(api_client)
    now = dt.datetime.now(dt.UTC)
    labels = {**dict([MANAGED_BY]), SHARD_LABEL: "true"}
    try:
        lease = api.read_namespaced_lease(name, namespace, _request_timeout=_TIMEOUT)
    except ApiException as exc:
        if exc.status != 404:
            raise
        body = client.V1Lease(metadata=client.V1ObjectMeta(
            name=name, labels=labels, annotations=wanted.annotations(now)),
            spec=client.V1LeaseSpec(lease_duration_seconds=LEASE_SECONDS))
        api.create_namespaced_lease(namespace, body, _request_timeout=_TIMEOUT)
        return {}
    meta = lease.metadata or client.V1ObjectMeta()
    held = bool(lease.spec and lease.spec.holder_identity) and live(lease, now)
    if held and Claim.read(meta.annotations or {}) == wanted:
        return None
    previous = {k: v for k, v in (meta.annotations or {}).items() if k in _KEYS}
    meta.labels = {**(meta.labels or {}), **labels}
    meta.annotations = {**(meta.annotations or {}), **wanted.annotations(now)}
    lease.metadata = meta
    # replace carries resourceVersion: a concurrent renewal makes this 409, and start-up fails
    # (the replica restarts and claims again) rather than a claim silently lost.
    api.replace_namespaced_lease(name, namespace, lease, _request_timeout=_TIMEOUT)
    return previous


def withdraw(api_client: client.ApiClient, namespace: str, name: str,
             previous: dict[str, str]) -> None:
    """Put back the claim a refused start replaced (none: remove it), so a refused
    configuration blocks nobody; best effort, as an unheld claim also lapses after
    LIVE_SECONDS."""
    api = client.CoordinationV1Api(api_client)
    try:
        lease = api.read_namespaced_lease(name, namespace, _request_timeout=_TIMEOUT)
        meta = lease.metadata or client.V1ObjectMeta()
        kept = {k: v for k, v in (meta.annotations or {}).items() if k not in _KEYS}
        meta.annotations = {**kept, **previous}
        lease.metadata = meta
        api.replace_namespaced_lease(name, namespace, lease, _request_timeout=_TIMEOUT)
    except Exception as exc:  # it lapses on its own
        log.warning("shard claim %s/%s not withdrawn (%s)", namespace, name,
                    type(exc).__name__)


def overlaps(api_client: client.ApiClient, namespace: str, name: str,
             wanted: Claim) -> list[str]:
    """The live shards in ``namespace`` whose claims overlap ``wanted`` (read after the own
    claim was written)."""
    api = client.CoordinationV1Api(api_client)
    leases = api.list_namespaced_lease(namespace, label_selector=f"{SHARD_LABEL}=true",
                                       _request_timeout=_TIMEOUT)
    return conflicts(name, wanted, list(leases.items or []), dt.datetime.now(dt.UTC))


def check(api_client: client.ApiClient, namespace: str, name: str, wanted: Claim) -> None:
    """Claim, then list: exit 2 with one line when another live shard overlaps. A failed
    API call propagates (the CLI reports it, exit 1: an outage, restarted), so no replica
    starts unchecked."""
    previous = claim(api_client, namespace, name, wanted)
    found = overlaps(api_client, namespace, name, wanted)
    if found:
        if previous is not None:
            withdraw(api_client, namespace, name, previous)
        raise SystemExit(f"--namespace {wanted.spelt()}: {found[0]}")
    log.info("shard %s/%s claims %s (cluster kinds: %s)", namespace, name, wanted.spelt(),
             "yes" if wanted.cluster_kinds else "no")
