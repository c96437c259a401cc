"""RetrievalBinding registrations: render (pure, `retrieval.render`), then apply, prune and
correct drift on a timer (`retrieval.apply`), and report content-free status.

Two bindings for one Agent: the earliest (creationTimestamp, then namespace/name) keeps it; every
later one reports `Conflict`, applies nothing and removes what it may have applied before.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api import kagent
from fgentic_governance.api.common import API_VERSION, GROUP, VERSION
from fgentic_governance.api.kagent import lists_tool
from fgentic_governance.api.registry import RETRIEVAL_BINDING
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.controller import kube_calls as kube
from fgentic_governance.controller.context import of, scope_lock
from fgentic_governance.controller.handlers.common import (
    Transition,
    announce,
    announced,
    condition,
    handled,
    merge_conditions,
    parse,
    update_status,
)
from fgentic_governance.controller.leadership import gated
from fgentic_governance.controller.messages import kinds_not_served
from fgentic_governance.controller.metrics import BINDING_RECONCILES
from fgentic_governance.controller.retrieval_apply import BindingApplier, KindNotServed
from fgentic_governance.controller.tuning import BINDING_RESYNC
from fgentic_governance.reasons import Reason
from fgentic_governance.retrieval.render.binding import (
    Rendered,
    RenderError,
    RenderOptions,
    render,
)
from fgentic_governance.retrieval.render.names import BindingId
from fgentic_governance.retrieval.render.ownership import Owner

KIND = "RetrievalBinding"
PLURAL = RETRIEVAL_BINDING.plural
JWKS_KEY = "jwks.json"
RETRY_DELAY = 10
# Reapply on a timer: server-side apply with force resets any field we own that someone edited.
RESYNC_INTERVAL = BINDING_RESYNC.read()
APPLIER = BindingApplier(RESYNC_INTERVAL)


@kopf.index(GROUP, VERSION, PLURAL)
async def bindings_by_agent(
    namespace: str, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str], tuple[str, str]]:
    """(Agent namespace, Agent name) → (creationTimestamp, binding namespace/name)."""
    agent = spec.get("agent", {})
    key = (str(agent.get("namespace")), str(agent.get("name")))
    return {key: (str(meta.get("creationTimestamp", "")), f"{namespace}/{name}")}


def _holder(claims: list[tuple[str, str]], mine: tuple[str, str]) -> str:
    """The binding that keeps the Agent: the earliest claim (self included, the index may lag)."""
    return min({*claims, mine})[1]


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@gated
async def reconcile_binding(**kwargs: Any) -> None:
    await _reconcile(**kwargs)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_INTERVAL, initial_delay=RESYNC_INTERVAL)
@gated
async def resync_binding(*, status: kopf.Status, meta: kopf.Meta, **kwargs: Any) -> None:
    """Drift correction: re-apply what is rendered. A binding whose current generation no
    change handler has finished yet is left to them (as by the scope sweep, `sweep.stale`)."""
    if handled(status, meta):
        await _reconcile(status=status, meta=meta, resync=True, **kwargs)


async def _reconcile(
    *, namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
    patch: kopf.Patch, memo: kopf.Memo, bindings_by_agent: kopf.Index[Any, Any],
    resync: bool = False, **_: Any,
) -> None:
    binding, api = BindingId(namespace, name), of(memo).kube()
    report = _Report(patch, status, int(meta.get("generation", 0)), memo)
    parsed = parse(RetrievalBindingSpec, spec)
    if parsed is None:
        report.done(valid=False, rendered=Reason.INVALID_SPEC, applied=Reason.INVALID_SPEC)
        return
    report.agent = await _agent_reason(api, parsed)
    mine = (str(meta.get("creationTimestamp", "")), f"{namespace}/{name}")
    claims = list(bindings_by_agent.get((parsed.agent.namespace, parsed.agent.name), []))
    async with scope_lock(f"retrievalbinding:{namespace}/{name}"):  # timer vs. update
        if _holder(claims, mine) != mine[1]:
            await _prune(api, binding, [])
            report.done(conflict=True, rendered=Reason.BINDING_CONFLICT,
                        applied=Reason.BINDING_CONFLICT)
            return
        jwks = None
        if parsed.public_route is not None:
            jwks = await kube.read_config_map_value(
                api, parsed.proxy.namespace, parsed.public_route.jwks_config_map, JWKS_KEY)
            if jwks is None:  # Without keys the public route could only deny; say so.
                report.done(rendered=Reason.INVALID_SPEC, applied=Reason.INVALID_SPEC)
                raise kopf.TemporaryError("jwks missing", delay=RETRY_DELAY)
        try:
            rendered = render(namespace, name, parsed, jwks=jwks,
                              options=RenderOptions(appservice=of(memo).appservice))
        except RenderError:
            report.done(rendered=Reason.INVALID_SPEC, applied=Reason.INVALID_SPEC)
            return
        owner = Owner(API_VERSION, KIND, namespace, name, str(meta.get("uid")))
        # A resync that renders what was last applied (and pruned against) has nothing new to
        # prune, and nothing to apply unless an object drifted.
        same = resync and _applied(status, rendered.digest)
        if same and await APPLIER.undrifted(api, binding, rendered):
            report.done(rendered=Reason.OK, applied=Reason.OK, result=rendered)
            return
        try:
            await APPLIER.apply(api, binding, rendered, owner)
            if not same:  # The prune's cluster-wide label LISTs: 5 per binding.
                await _prune(api, binding, rendered.objects)
        except KindNotServed as exc:  # Name the missing kinds: the fix is to install them.
            report.done(rendered=Reason.OK, applied=Reason.KIND_NOT_SERVED, result=rendered,
                        text=kinds_not_served(exc.kinds))
            raise kopf.TemporaryError("apply failed: kind not served", delay=RETRY_DELAY) from None
        except ApiException as exc:
            report.done(rendered=Reason.OK, applied=Reason.APPLY_FAILED, result=rendered)
            raise kopf.TemporaryError(f"apply failed: {exc.status}", delay=RETRY_DELAY) from None
        report.done(rendered=Reason.OK, applied=Reason.OK, result=rendered)


announced(PLURAL)


@kopf.on.delete(GROUP, VERSION, PLURAL)
@gated
async def remove_rendered(*, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Cross-namespace objects have no owner reference; delete everything labelled for us."""
    APPLIER.forget(BindingId(namespace, name))
    await _prune(of(memo).kube(), BindingId(namespace, name), [])


async def _prune(api: ApiClient, binding: BindingId, keep: list[dict[str, Any]]) -> None:
    try:
        await APPLIER.prune(api, binding, keep)
    except ApiException as exc:
        raise kopf.TemporaryError(f"list failed: {exc.status}", delay=RETRY_DELAY) from None


async def _agent_reason(api: ApiClient, binding: RetrievalBindingSpec) -> Reason:
    """OK when the bound Agent exists and lists the bound server's tool: a binding whose Agent
    or tool is missing protects nothing yet, so it is not Ready (its objects are still
    applied: they deny until the Agent arrives)."""
    agent = await kube.get_object(api, group=kagent.GROUP, version=kagent.VERSION,
                                  plural=kagent.AGENT.plural, namespace=binding.agent.namespace,
                                  name=binding.agent.name)
    if agent is None:
        return Reason.AGENT_NOT_FOUND
    server = binding.mcp_server
    if not lists_tool(agent, server.namespace, server.name, server.tool):
        return Reason.TOOL_NOT_BOUND
    return Reason.OK


def _applied(status: kopf.Status, digest: str) -> bool:
    """The status records this exact rendering as applied (and so pruned against)."""
    applied = [c for c in status.get("conditions") or [] if c.get("type") == "Applied"]
    return (status.get("renderedDigest") == digest and len(applied) == 1
            and applied[0].get("status") == "True")


class _Report:
    """Writes status: conditions Valid, Rendered, Applied, Conflict, Ready and the rendered
    summary, only when something changed (a resync that finds everything as recorded writes
    nothing); one event when Ready changes, once that status is written (``announce``),
    reported as the product."""

    def __init__(self, patch: kopf.Patch, current: kopf.Status, generation: int,
                 memo: kopf.Memo) -> None:
        self.patch, self.current, self.generation = patch, current, generation
        self.previous = current.get("conditions")
        self.memo = memo
        self.agent = Reason.OK

    def done(self, *, rendered: Reason, applied: Reason, valid: bool = True,
             conflict: bool = False, result: Rendered | None = None,
             text: str | None = None) -> None:
        """``text``: the Applied condition's message when it names what failed (and Ready's,
        when that failure is the reason it is not ready)."""
        def cond(kind: str, ok: bool, reason: Reason) -> dict[str, Any]:
            return condition(kind, ok, reason, self.generation, self.previous,
                             text=text if kind == "Applied" else None)

        status: dict[str, Any] = {}
        status["observedGeneration"] = self.generation
        status["conditions"] = merge_conditions(
            self.previous,
            cond("Valid", valid, Reason.OK if valid else Reason.INVALID_SPEC),
            cond("Rendered", rendered is Reason.OK, rendered),
            cond("Applied", applied is Reason.OK, applied),
            cond("Conflict", conflict, Reason.BINDING_CONFLICT if conflict else Reason.OK),
            self._ready(valid, rendered, applied, conflict, text))
        status["renderedDigest"] = result.digest if result else None
        status["renderedObjects"] = len(result.objects) if result and applied is Reason.OK else 0
        status["unenforceable"] = list(result.unenforceable) if result else []
        status["deviations"] = list(result.deviations) if result else []
        update_status(self.patch, self.current, status)

    def _ready(self, valid: bool, rendered: Reason, applied: Reason,
               conflict: bool, text: str | None) -> dict[str, Any]:
        problems = [r for r in (Reason.OK if valid else Reason.INVALID_SPEC, rendered, applied,
                                Reason.BINDING_CONFLICT if conflict else Reason.OK, self.agent)
                    if r is not Reason.OK]
        reason = problems[0] if problems else Reason.OK
        made = condition("Ready", not problems, reason, self.generation, self.previous,
                         text=text if reason is applied and problems else None)
        BINDING_RECONCILES.labels(ready=str(not problems).lower(), reason=reason.value).inc()
        announce(self.memo, self.current, Transition(
            "NotReady" if problems else "Ready", f"reason {reason.value}",
            warning=bool(problems), condition=("Ready", made["status"], made["reason"])))
        return made
