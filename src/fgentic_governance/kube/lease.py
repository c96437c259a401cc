"""One holder among replicas: a coordination.k8s.io Lease, as cert-manager and Kyverno elect
theirs. The webhook's holder alone posts audit events and writes PolicyReports (every replica
still answers reviews); the operator's holder alone runs the handlers. A holder that stops
renewing loses the Lease after its duration, and another replica takes it.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import MANAGED_BY

log = logging.getLogger("fgentic_governance.kube.lease")
LEASE_SECONDS: Final = 30
_LABELS: Final = dict([MANAGED_BY])


def parse_lease(value: str, flag: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of the Lease named by ``flag``; anything else is refused at start-up
    (a bare NAME would elect nobody: the operator's and the webhook's flags alike)."""
    namespace, slash, name = value.partition("/")
    if not (slash and namespace and name) or "/" in name:
        raise SystemExit(f"{flag} {value}: expected NAMESPACE/NAME")
    return namespace, name


@dataclass
class LeaseElector:
    api_client: client.ApiClient
    namespace: str
    name: str
    identity: str
    seconds: int = LEASE_SECONDS
    leading: bool = False
    # The last read showed another live holder (or another replica won the write).
    held_by_other: bool = False

    def try_acquire(self) -> bool:
        """Take or renew the Lease when it is free, expired or ours (bounded API calls; a
        conflict means another replica won this round). Any failure is "not held"."""
        try:
            return self._attempt()
        except Exception as exc:  # unreachable API server, timeout: not confirmed, not held
            log.warning("lease %s/%s not confirmed (%s)", self.namespace, self.name,
                        type(exc).__name__)
            return self._set(False)

    def release(self) -> None:
        """Give the Lease up at a clean stop, so a standby need not wait for it to expire."""
        api = client.CoordinationV1Api(self.api_client)
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec = client.V1LeaseSpec(lease_duration_seconds=self.seconds)
            api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except Exception as exc:  # it expires on its own
            log.warning("lease %s/%s not released (%s)", self.namespace, self.name,
                        type(exc).__name__)
        self._set(False)

    def _attempt(self) -> bool:
        api = client.CoordinationV1Api(self.api_client)
        now = dt.datetime.now(dt.UTC)
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except ApiException as exc:
            if exc.status != 404:
                return self._set(False)
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, labels=_LABELS),
                                  spec=self._spec(now, now))
            try:
                api.create_namespaced_lease(self.namespace, body, _request_timeout=5)
            except ApiException as exc:
                return self._refused(exc)
            return self._set(True)
        spec = lease.spec or client.V1LeaseSpec()
        mine = spec.holder_identity == self.identity
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or now - renewed > dt.timedelta(
            seconds=spec.lease_duration_seconds or self.seconds)
        if not (mine or expired):
            self.held_by_other = True
            return self._set(False)
        lease.spec = self._spec(spec.acquire_time if mine and spec.acquire_time else now, now)
        # A Lease of an earlier release gains the label, so the removal recipe finds it.
        if lease.metadata is not None:
            lease.metadata.labels = {**(lease.metadata.labels or {}), **_LABELS}
        try:  # replace carries resourceVersion: a concurrent taker gets 409
            api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except ApiException as exc:
            return self._refused(exc)
        return self._set(True)

    def _refused(self, exc: ApiException) -> bool:
        """A write refused: 409 (create or replace) means another replica wrote first."""
        self.held_by_other = exc.status == 409
        return self._set(False)

    def _spec(self, acquired: dt.datetime, renewed: dt.datetime) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(holder_identity=self.identity,
                                  lease_duration_seconds=self.seconds,
                                  acquire_time=acquired, renew_time=renewed)

    def _set(self, leading: bool) -> bool:
        if leading:
            self.held_by_other = False
        if leading != self.leading:
            log.info("lease %s/%s %s", self.namespace, self.name,
                     "acquired" if leading else "lost")
        self.leading = leading
        return leading
