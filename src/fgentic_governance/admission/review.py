"""AdmissionReview in, AdmissionReview out: routes a review to the pure policy.

Agents are decided from the informer caches (the hot path, no API call); a denial that
depends on cached state is re-checked once against live state, so a binding or scope created
a moment ago is not refused by a lagging cache. Our own kinds are rare writes and always use
live lookups. Any unexpected error denies.

A review that is not a CREATE or UPDATE of an object (no ``request``, another or a lowercase
``operation``, a non-object ``object``, metadata, labels or annotations of another shape than
the API server's, in ``object`` or ``oldObject``) is denied with REVIEW_MALFORMED: our
configuration registers only CREATE and UPDATE, so the API server never sends anything else.
A review whose ``uid`` cannot be echoed (absent, not a short printable string) cannot be
answered at all: :class:`Unanswerable`, which the server turns into a 400.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from fgentic_governance.admission import enforcement, metrics, pods
from fgentic_governance.admission.guidance import explained
from fgentic_governance.admission.model_route_rule import model_config_denials, model_denials
from fgentic_governance.admission.policy import (
    AdmissionCode,
    Denial,
    PolicyState,
    agent_denials,
    binding_denials,
    consent_denials,
    scope_denials,
)
from fgentic_governance.api import kagent
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.common import GROUP
from fgentic_governance.api.kagent import memory_agent_of, model_refs
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE, RETRIEVAL_BINDING
from fgentic_governance.kube.failures import failure_code

log = logging.getLogger("fgentic_governance.admission.review")

STATEFUL = frozenset({AdmissionCode.IDENTITY_HEADER_UNBOUND, AdmissionCode.IDENTITY_TOOL_MISMATCH,
                      AdmissionCode.MEMORY_UNGATED, AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION,
                      AdmissionCode.REQUIRE_APPROVAL_ON_RETRIEVAL,
                      AdmissionCode.FORBIDDEN_HEADERS_FROM})
OPERATIONS: Final = frozenset({"CREATE", "UPDATE"})
ROUTE_KINDS: Final[Mapping[str, tuple[str, frozenset[str]]]] = {
    "agents": (kagent.GROUP, frozenset({kagent.AGENT.kind, kagent.MODEL_CONFIG.kind})),
    "governance": (GROUP, frozenset({CONSENT_RECORD.kind, RETRIEVAL_BINDING.kind,
                                     MEMORY_SCOPE.kind})),
    "pods": ("", frozenset({"Pod"})),
    "podcheck": ("", frozenset({"Pod"})),
}
"""Route -> the API group and kinds our configuration sends there; any other object is refused
(UNSUPPORTED_KIND at kind), never judged by another kind's rules (an object with no Agent rule
would pass them all)."""
MAX_UID_LENGTH: Final = 128
"""The API server's uid is a UUID (36 characters); anything longer is not one of its reviews."""


class Unanswerable(Exception):
    """No uid to echo: the review can only be refused (HTTP 400), not answered."""

    def __init__(self) -> None:
        super().__init__(AdmissionCode.REVIEW_MALFORMED.value)


@dataclass(frozen=True)
class Lookups:
    """Live reads against the API server (async)."""

    cached_state: Callable[[], PolicyState | None]
    live_state: Callable[[], Awaitable[PolicyState]]
    get_scope: Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
    list_bindings: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]
    offboarding: Callable[[Mapping[str, Any]], Awaitable[bool]]


@dataclass(frozen=True)
class MemoryRouting:
    """The Pod routing: where kagent's runtime must send memory calls, whether
    that memory API answers ready now, and a namespace's kagent Agents (live). With
    ``model_url`` (the memory API's ``/v1``), memory-enabled Agents' ModelConfigs must use it
    (``model_config``: one ModelConfig, live; None when absent)."""

    url: str
    ready: Callable[[], Awaitable[bool]]
    agents: Callable[[str], Awaitable[Sequence[Mapping[str, Any]]]]
    model_url: str = ""
    model_config: Callable[[str, str], Awaitable[Mapping[str, Any] | None]] | None = None


class Reviewer:
    def __init__(self, lookups: Lookups, local_homeserver: str,
                 routing: MemoryRouting | None = None,
                 warned: frozenset[AdmissionCode] = frozenset(), *,
                 audit_only: bool = False, appservice: AppserviceRegistry = EMPTY) -> None:
        self._lookups = lookups
        self._local = local_homeserver
        self._appservice = appservice
        self._routing = routing
        # warned: enforcement.WARNABLE codes set to warn (checked at start-up).
        self._enforcement = enforcement.Enforcement(warned, audit_only)

    async def __call__(self, body: Any, *, webhook: str | None = None,
                       **_: Any) -> dict[str, Any]:
        started = time.perf_counter()
        route = metrics.route_label(webhook)
        request = body.get("request") if isinstance(body, Mapping) else None
        if not isinstance(request, Mapping) or (uid := _uid(request.get("uid"))) is None:
            count_malformed(route)
            raise Unanswerable
        patch: list[dict[str, Any]] = []
        try:
            denials = _malformed(request) or _unexpected_kind(route, request["object"])
            if not denials and route == "pods":
                denials, patch = await self._pod(request, mutate=True)
            elif not denials:
                denials = await self._decide(route, request)
        except Exception as exc:  # fail closed, and say why (bounded: never swallowed)
            log.error("review on %s denied POLICY_STATE_UNAVAILABLE: %s", route,
                      failure_code(exc))
            denials = [Denial(AdmissionCode.POLICY_STATE_UNAVAILABLE, "request")]
        metrics.LATENCY.labels(route).observe(time.perf_counter() - started)
        denials, warnings = self._enforcement.split(denials)
        count(route, denials, warnings)
        if denials or warnings:
            log_verdict(route, request, denials, warnings)
        return response(uid, denials, patch, warnings, self._enforcement)

    async def _decide(self, route: str, request: Mapping[str, Any]) -> list[Denial]:
        obj = request["object"]
        if route == "agents" and obj.get("kind") == kagent.MODEL_CONFIG.kind:
            return await self._model_config(obj)
        if route == "agents":
            return await self._agent(obj) + await self._models(obj)
        if route == "governance":
            return await self._governance(str(request["operation"]), obj)
        if route == "podcheck":
            return (await self._pod(request, mutate=False))[0]
        return [Denial(AdmissionCode.UNSUPPORTED_KIND, "request")]

    async def _agent(self, obj: Mapping[str, Any]) -> list[Denial]:
        routed = self._routing is not None and await self._routing.ready()
        state = self._lookups.cached_state()
        if state is None:
            state = await self._lookups.live_state()
        denials = agent_denials(obj, replace(state, memory_routed=routed))
        if any(d.code in STATEFUL for d in denials):
            live = await self._lookups.live_state()
            denials = agent_denials(obj, replace(live, memory_routed=routed))
        return denials

    async def _models(self, agent: Mapping[str, Any]) -> list[Denial]:
        """A memory-enabled Agent's ModelConfigs use the governed model route (live reads)."""
        routing = self._routing
        refs = model_refs(agent)
        if routing is None or not routing.model_url or routing.model_config is None or not refs:
            return []
        namespace = str((agent.get("metadata") or {}).get("namespace", ""))
        names = sorted({name for name in refs.values() if name is not None})
        configs = {name: await routing.model_config(namespace, name) for name in names}
        return model_denials(agent, configs, routing.model_url)

    async def _model_config(self, model_config: Mapping[str, Any]) -> list[Denial]:
        routing = self._routing
        if routing is None or not routing.model_url:
            return []
        namespace = str((model_config.get("metadata") or {}).get("namespace", ""))
        return model_config_denials(model_config, await routing.agents(namespace),
                                    routing.model_url)

    async def _pod(self, request: Mapping[str, Any], *, mutate: bool
                   ) -> tuple[list[Denial], list[dict[str, Any]]]:
        """A memory-enabled Agent's Pod is routed (mutate) and checked (validate); any other
        Pod passes unchanged unless it sets the routed label. Without a configured memory API
        nothing is routed: Agents with memory are refused at their own admission instead
        (MEMORY_RUNTIME_UNGOVERNED). ``pods/status`` and ``pods/ephemeralcontainers`` reviews
        carry the whole Pod and are judged the same way."""
        pod = request["object"]
        namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get(
            "namespace") or "")
        agent = None
        if self._routing is not None:
            agent = memory_agent_of(pod, await self._routing.agents(namespace))
        previous = request.get("oldObject")
        old = previous if isinstance(previous, Mapping) else None
        if agent is None or self._routing is None:
            return ([] if mutate else pods.label_denials(pod, old)), []
        if mutate:
            return [], pods.pod_patch(pod, self._routing.url)
        return pods.pod_denials(pod, self._routing.url, old), []

    async def _governance(self, operation: str, obj: Mapping[str, Any]) -> list[Denial]:
        kind = obj.get("kind")
        if kind == "ConsentRecord":
            if operation != "CREATE":
                return []  # Withdrawal is never blocked; the schema keeps the rest immutable.
            meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
            scope = await self._lookups.get_scope(
                str(meta.get("namespace", "")), str((spec.get("scopeRef") or {}).get("name")))
            offboarding = await self._lookups.offboarding(spec.get("subject") or {})
            return consent_denials(obj, scope, offboarding)
        if kind == "RetrievalBinding":
            return binding_denials(obj, await self._lookups.list_bindings())
        if kind == "MemoryScope":
            return scope_denials(obj, self._local, self._appservice)
        return [Denial(AdmissionCode.UNSUPPORTED_KIND, "kind")]


def count_malformed(route: str) -> None:
    """A review refused before a verdict counts, and is logged, as a malformed-review denial."""
    metrics.DECISIONS.labels(route, "false", AdmissionCode.REVIEW_MALFORMED.value).inc()
    log.info("review denied route=%s operation=- kind=- namespace=- codes=%s", route,
             AdmissionCode.REVIEW_MALFORMED.value)


def _codes(denials: Sequence[Denial]) -> list[str]:
    """Each code once, in the order the answer gives them."""
    return list(dict.fromkeys(d.code.value for d in denials))


def count(route: str, denials: Sequence[Denial], warnings: Sequence[Denial]) -> None:
    """One decision per code of the answer (a code twice in one answer counts once): a
    refusing code with ``allowed="false"``, a code that only warned with ``allowed="true"``;
    an answer without a code counts once as ``OK``. The sum over reasons is therefore not the
    number of answers (``fgentic_admission_review_seconds_count`` is)."""
    refused = _codes(denials)
    for code in refused:
        metrics.DECISIONS.labels(route, "false", code).inc()
    for code in _codes(warnings):
        if code not in refused:
            metrics.DECISIONS.labels(route, "true", code).inc()
    if not denials and not warnings:
        metrics.DECISIONS.labels(route, "true", "OK").inc()


_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace name (RFC 1123 label): anything else in a review is logged as ``-``."""
_KINDS: Final = frozenset(kind for _, kinds in ROUTE_KINDS.values() for kind in kinds)


def log_verdict(route: str, request: Mapping[str, Any], denials: Sequence[Denial],
                warnings: Sequence[Denial]) -> None:
    """One content-free line per answer with a code: route, operation, kind and namespace,
    each from a closed set or checked shape, and the codes. Never the object's name (chosen
    by its author, it may name a person), a field value or a header name; field paths are
    left to the answer."""
    obj = request.get("object")
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    namespace = request.get("namespace")
    operation = request.get("operation")
    log.info("review %s route=%s operation=%s kind=%s namespace=%s codes=%s%s",
             "denied" if denials else "warned", route,
             operation if operation in OPERATIONS else "-",
             kind if kind in _KINDS else "-",
             namespace if isinstance(namespace, str) and _NAMESPACE.fullmatch(namespace)
             else "-", ",".join(_codes(denials) or _codes(warnings)),
             f" warned={','.join(_codes(warnings))}" if denials and warnings else "")


def _uid(uid: Any) -> str | None:
    """The uid when it is safe to echo: 1..MAX_UID_LENGTH printable ASCII characters."""
    if isinstance(uid, str) and 0 < len(uid) <= MAX_UID_LENGTH and uid.isascii() \
            and uid.isprintable():
        return uid
    return None


def _malformed(request: Mapping[str, Any]) -> list[Denial]:
    """A denial unless this is a CREATE or UPDATE of an object (all we register) whose
    metadata, and the old object's, has the API server's shape: the rules below read labels
    and annotations as mappings (labels as a list raised AttributeError, which denied as
    POLICY_STATE_UNAVAILABLE: the cluster blamed for a malformed request)."""
    obj, old = request.get("object"), request.get("oldObject")
    if request.get("operation") in OPERATIONS and isinstance(obj, Mapping) \
            and _object_meta(obj) and (old is None or (isinstance(old, Mapping)
                                                       and _object_meta(old))):
        return []
    return [Denial(AdmissionCode.REVIEW_MALFORMED, "request")]


def _object_meta(obj: Mapping[str, Any]) -> bool:
    """ObjectMeta as the API server sends it: an object (or none); name and namespace
    strings; labels and annotations maps of strings to strings (each may be absent)."""
    meta = obj.get("metadata")
    if meta is None:
        return True
    if not isinstance(meta, Mapping):
        return False
    return all(isinstance(meta.get(key, ""), str) for key in ("name", "namespace")) and all(
        _string_map(meta.get(key)) for key in ("labels", "annotations"))


def _string_map(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()))


def _unexpected_kind(route: str, obj: Mapping[str, Any]) -> list[Denial]:
    """A denial unless the object is of a kind this route is configured for."""
    if route not in ROUTE_KINDS:
        return [Denial(AdmissionCode.UNSUPPORTED_KIND, "request")]
    group, kinds = ROUTE_KINDS[route]
    api_version = obj.get("apiVersion")
    # "v1" is the core group (""), "kagent.dev/v1alpha2" the group "kagent.dev".
    if not isinstance(api_version, str) or obj.get("kind") not in kinds \
            or api_version.rpartition("/")[0] != group:
        return [Denial(AdmissionCode.UNSUPPORTED_KIND, "kind")]
    return []


def response(uid: str, denials: Sequence[Denial], patch: Sequence[Mapping[str, Any]] = (),
             warnings: Sequence[Denial] = (),
             mode: enforcement.Enforcement = enforcement.ENFORCE
             ) -> dict[str, Any]:
    """The AdmissionReview answer; ``warnings`` (warned rules) reach the client as admission
    warnings, whether or not another rule denies, in the words of ``mode``."""
    result: dict[str, Any] = {"uid": uid, "allowed": not denials}
    if warnings:
        result["warnings"] = [mode.warning(w) for w in warnings]
    if patch and not denials:
        result["patchType"] = "JSONPatch"
        result["patch"] = base64.b64encode(json.dumps(list(patch)).encode()).decode()
    if denials:
        result["status"] = {"code": 403, "reason": "Forbidden",
                            "message": "; ".join(explained(d) for d in denials)}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": result}
