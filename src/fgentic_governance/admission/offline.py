"""The webhook's verdict on one object, offline: no cluster, no network (pure).

The object goes to the webhook's own :class:`~fgentic_governance.admission.review.Reviewer`,
on the route the webhook configuration sends its kind to, as a CREATE or UPDATE
AdmissionReview; every lookup the reviewer makes live (the bindings and scopes of the policy
state, a MemoryScope, the RetrievalBindings, the PrincipalOffboardings, a namespace's kagent
Agents, a ModelConfig) is answered from the objects of a *setup*, the objects that exist
first. No rule is restated here: the routing, the kind checks and every rule are the
webhook's. What the cluster alone knows is fixed by :class:`Options`:

* the operator's status on a MemoryScope: with ``assume_gated`` every setup MemoryScope has
  its store and consent gates (``ScopeView.gates_hold``), as the operator reports once the
  scope has its store record; without it the gates are read from the scope's own ``status``
  (``views.scope_view``), so a scope without one is not gated;
* the memory API: with ``memory_api_url`` the Pod routing is installed and the memory API
  answers ready; without it memory-enabled Agents are refused, as by a webhook started
  without ``--memory-api-url``;
* a namespaced object without ``metadata.namespace`` is in ``namespace`` (the API server
  fills it from the request).

Pods are judged as the validating ``/podcheck`` route sees them: the mutating ``/pods`` route,
which rewrites a memory-enabled Agent's Pod before that check, is not applied. Neither the
CRD schemas nor the ValidatingAdmissionPolicy (the header rules the webhook also enforces)
are evaluated. docs/policy-testing.md says what this means for a verdict.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from fgentic_governance.admission.policy import AdmissionCode, Denial, PolicyState
from fgentic_governance.admission.review import (
    OPERATIONS,
    ROUTE_KINDS,
    Lookups,
    MemoryRouting,
    Reviewer,
)
from fgentic_governance.admission.views import build_state
from fgentic_governance.api import kagent
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.common import GROUP
from fgentic_governance.api.registry import (
    KINDS,
    MEMORY_SCOPE,
    PRINCIPAL_OFFBOARDING,
    RETRIEVAL_BINDING,
)

MUTATING_ROUTE: Final = "pods"
"""Not evaluated: the validating ``podcheck`` route judges Pods."""
ROUTES: Final[Mapping[tuple[str, str], str]] = {
    (group, kind): route for route, (group, kinds) in ROUTE_KINDS.items()
    if route != MUTATING_ROUTE for kind in sorted(kinds)}
"""(API group, kind) -> the webhook route that reviews it."""
REVIEWED_KINDS: Final = ", ".join(kind for _, kind in ROUTES)
CLUSTER_SCOPED: Final = frozenset(
    {(GROUP, kind.kind) for kind in KINDS if not kind.namespaced})
UID: Final = "offline"

Identity = tuple[str, str, str, str]
"""API group, kind, namespace, name."""


class UnusableObject(ValueError):
    """Not an object the webhook could review (or hold in its lookups); the message is bounded
    and repeats no value of the object."""


@dataclass(frozen=True)
class Options:
    """What the webhook is started with, and what the cluster would know (module docs)."""

    local_homeserver: str = ""
    appservice: AppserviceRegistry = EMPTY
    """The webhook's --appservice-namespaces."""
    memory_api_url: str = ""
    memory_model_url: str = ""
    assume_gated: bool = True
    namespace: str = "default"


# -- objects ------------------------------------------------------------------------------------


def group_of(obj: Mapping[str, Any]) -> str:
    """The API group of ``group/version``; ``""`` for the core group's ``v1``."""
    return str(obj.get("apiVersion", "")).rpartition("/")[0]


def identity(obj: Mapping[str, Any]) -> Identity:
    meta = obj.get("metadata") or {}
    return (group_of(obj), str(obj.get("kind", "")), str(meta.get("namespace") or ""),
            str(meta.get("name") or ""))


def check_envelope(obj: Any) -> Mapping[str, Any]:
    """A mapping with a string ``apiVersion`` and ``kind`` and a mapping ``metadata``."""
    if not isinstance(obj, Mapping):
        raise UnusableObject("not an object (a YAML mapping)")
    if not all(isinstance(obj.get(key), str) and obj.get(key) for key in ("apiVersion", "kind")):
        raise UnusableObject("no apiVersion or kind")
    if not isinstance(obj.get("metadata", {}), Mapping):
        raise UnusableObject("metadata is not a mapping")
    return obj


def route_of(obj: Any) -> str:
    """The webhook route that reviews ``obj``; UnusableObject for a kind it never sees."""
    route = ROUTES.get((group_of(check_envelope(obj)), str(obj["kind"])))
    if route is None:
        raise UnusableObject(f"a kind the webhook does not review (it reviews {REVIEWED_KINDS})")
    return route


def check_setup_object(obj: Any) -> Mapping[str, Any]:
    """Any object may be in a setup (the webhook reads only some kinds); one of our group must
    be one of our kinds."""
    found = check_envelope(obj)
    if group_of(found) == GROUP and found["kind"] not in {kind.kind for kind in KINDS}:
        raise UnusableObject(f"not a kind of {GROUP}")
    return found


def placed(obj: Mapping[str, Any], namespace: str) -> Mapping[str, Any]:
    """A namespaced object without a namespace, in ``namespace`` (as the API server does)."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace") or (group_of(obj), obj.get("kind")) in CLUSTER_SCOPED:
        return obj
    return {**obj, "metadata": {**meta, "namespace": namespace}}


# -- the setup: what the webhook's live lookups would find --------------------------------------


@dataclass(frozen=True)
class Setup:
    """The objects that exist before the object under test, by identity (a later object with
    the same identity replaces an earlier one, as ``kubectl apply`` would)."""

    objects: Mapping[Identity, Mapping[str, Any]]

    @classmethod
    def of(cls, objects: Iterable[Any], namespace: str = "default") -> Setup:
        found = [placed(check_setup_object(obj), namespace) for obj in objects]
        return cls({identity(obj): obj for obj in found})

    def kind(self, group: str, kind: str, namespace: str | None = None
             ) -> list[Mapping[str, Any]]:
        """Every object of a kind (in one namespace when given), in setup order."""
        return [obj for (g, k, ns, _), obj in self.objects.items()
                if (g, k) == (group, kind) and namespace in (None, ns)]

    def get(self, key: Identity) -> Mapping[str, Any] | None:
        return self.objects.get(key)


def policy_state(setup: Setup, assume_gated: bool) -> PolicyState:
    """The bindings and scopes the Agent rules read (``views.build_state``), with every
    scope's gates held when the suite assumes the operator's status."""
    state = build_state(setup.kind(GROUP, RETRIEVAL_BINDING.kind),
                        setup.kind(GROUP, MEMORY_SCOPE.kind))
    if not assume_gated:
        return state
    gated = {agent: [replace(scope, gates_hold=True) for scope in scopes]
             for agent, scopes in state.scopes.items()}
    return replace(state, scopes=gated)


@dataclass(frozen=True)
class _Answers:
    """The reviewer's live reads, answered from the setup at once (nothing awaits)."""

    setup: Setup
    state: PolicyState

    async def live_state(self) -> PolicyState:
        return self.state

    async def get_scope(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.setup.get((GROUP, MEMORY_SCOPE.kind, namespace, name))

    async def list_bindings(self) -> Sequence[Mapping[str, Any]]:
        return self.setup.kind(GROUP, RETRIEVAL_BINDING.kind)

    async def offboarding(self, subject: Mapping[str, Any]) -> bool:
        """As the webhook asks: any PrincipalOffboarding for exactly this principal."""
        return any((o.get("spec") or {}).get("principal") == dict(subject)
                   for o in self.setup.kind(GROUP, PRINCIPAL_OFFBOARDING.kind))

    async def ready(self) -> bool:
        return True

    async def agents(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.setup.kind(kagent.GROUP, kagent.AGENT.kind, namespace)

    async def model_config(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.setup.get((kagent.GROUP, kagent.MODEL_CONFIG.kind, namespace, name))


def reviewer(setup: Setup, options: Options) -> Reviewer:
    """The webhook's reviewer over the setup, started as ``options`` say."""
    answers = _Answers(setup, policy_state(setup, options.assume_gated))
    lookups = Lookups(cached_state=lambda: answers.state, live_state=answers.live_state,
                      get_scope=answers.get_scope, list_bindings=answers.list_bindings,
                      offboarding=answers.offboarding)
    routing = None
    if options.memory_api_url:
        routing = MemoryRouting(options.memory_api_url, answers.ready, answers.agents,
                                options.memory_model_url, answers.model_config)
    return Reviewer(lookups, options.local_homeserver, routing, appservice=options.appservice)


# -- one review ---------------------------------------------------------------------------------


def admission_review(obj: Mapping[str, Any], operation: str,
                     old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The AdmissionReview the API server would send (the parts the reviewer reads)."""
    request: dict[str, Any] = {"uid": UID, "operation": operation, "object": dict(obj),
                               "namespace": identity(obj)[2]}
    if old is not None:
        request["oldObject"] = dict(old)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def evaluate(obj: Any, setup: Setup, options: Options | None = None,
             operation: str = "CREATE") -> list[Denial]:
    """The webhook's denials of a CREATE or UPDATE of ``obj`` (empty: admitted). An UPDATE's
    old object is the setup's object of the same identity."""
    options = options or Options()
    if operation not in OPERATIONS:
        raise UnusableObject("the operation is neither CREATE nor UPDATE")
    route = route_of(obj)
    target = placed(obj, options.namespace)
    old = setup.get(identity(target)) if operation == "UPDATE" else None
    if operation == "UPDATE" and old is None:
        raise UnusableObject("an UPDATE of an object the setup does not hold")
    review = reviewer(setup, options)(admission_review(target, operation, old), webhook=route)
    answer = complete(review)
    return denials_of(answer["response"])


def complete(coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run a coroutine that never suspends (every lookup here answers at once), without an
    event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: dict[str, Any] = done.value
        return result
    coroutine.close()
    raise RuntimeError("an offline review waited on I/O")


def denials_of(response: Mapping[str, Any]) -> list[Denial]:
    """The denials of a review response, read back from its message (``guidance.explained``:
    ``CODE at PATH[ (header)]: what to change``, joined by ``; ``)."""
    if response.get("allowed") is True:
        return []
    return [_denial(part) for part in str(response["status"]["message"]).split("; ")]


def _denial(message: str) -> Denial:
    code, _, rest = message.partition(" at ")
    rest = rest.partition(": ")[0]
    path, _, header = rest.partition(" (")
    return Denial(AdmissionCode(code), path, header.removesuffix(")"))
