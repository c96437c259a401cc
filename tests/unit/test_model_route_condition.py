"""A MemoryScope's ModelRouteGoverned condition (controller/model_route_condition.py): the pure
judgement of its Agent's ModelConfigs, and the per-Agent cache that keeps the reads bounded."""

from __future__ import annotations

from typing import Any

import pytest

from fgentic_governance.controller import model_route_condition, tuning
from fgentic_governance.controller.model_route_condition import ModelRoutes, judge
from fgentic_governance.reasons import Reason
from tests.support.operator_memo import unsent_client

ROUTE = "http://memory-api.fgentic-system.svc:8083/v1"


def _agent(model: str | None = "chat", memory: dict[str, Any] | None = None) -> dict[str, Any]:
    declarative: dict[str, Any] = {"modelConfig": model} if model else {}
    if memory is not None:
        declarative["memory"] = memory
    return {"metadata": {"namespace": "ns", "name": "a"}, "spec": {"declarative": declarative}}


def _config(base: str = ROUTE, provider: str = "OpenAI") -> dict[str, Any]:
    return {"spec": {"provider": provider, "openAI": {"baseUrl": base}}}


GOVERNED = {"chat": _config(), "embed": _config(ROUTE + "/")}


@pytest.mark.parametrize(("agent", "configs", "route", "expected"), [
    (_agent(memory={"modelConfig": "embed"}), GOVERNED, ROUTE, Reason.OK),
    (_agent(), {}, ROUTE, Reason.OK),  # no memory: no memory model work at all
    (_agent(memory={"modelConfig": "embed"}), GOVERNED, "", Reason.MODEL_ROUTE_UNCONFIGURED),
    (None, {}, ROUTE, Reason.AGENT_NOT_FOUND),
    (_agent(memory={"modelConfig": "embed"}), {**GOVERNED, "chat": _config("http://x/v1")},
     ROUTE, Reason.MODEL_ROUTE_UNGOVERNED),
    (_agent(memory={"modelConfig": "embed"}), {**GOVERNED, "embed": _config(provider="Gemini")},
     ROUTE, Reason.MODEL_ROUTE_UNGOVERNED),
    (_agent(memory={"modelConfig": "embed"}), {"chat": _config()}, ROUTE,
     Reason.MODEL_ROUTE_UNGOVERNED),  # the embedding ModelConfig does not exist
    (_agent(memory={}), GOVERNED, ROUTE, Reason.MODEL_ROUTE_UNGOVERNED),  # no embedding model
    (_agent("other/chat", memory={"modelConfig": "embed"}), GOVERNED, ROUTE,
     Reason.MODEL_ROUTE_UNGOVERNED),  # another namespace's ModelConfig
    (_agent(None, memory={"modelConfig": "embed"}), {**GOVERNED,
     "default-model-config": _config()}, ROUTE, Reason.OK),  # kagent's default, governed
])
def test_judge(agent: dict[str, Any] | None, configs: dict[str, Any], route: str,
               expected: Reason) -> None:
    assert judge(agent, configs, route) is expected


async def test_one_read_per_agent_per_interval_and_none_while_unreadable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[str, str]] = []
    fail = False
    objects = {"agents": _agent(memory={"modelConfig": "embed"}), **{
        f"modelconfigs/{k}": v for k, v in GOVERNED.items()}}

    async def get_object(_api: Any, *, plural: str, name: str, **_: Any) -> dict[str, Any] | None:
        reads.append((plural, name))
        if fail:
            raise RuntimeError("api 500")
        return objects.get(plural if plural == "agents" else f"{plural}/{name}")

    monkeypatch.setattr(model_route_condition.kube, "get_object", get_object)
    now = [0.0]
    routes, api = ModelRoutes(clock=lambda: now[0]), unsent_client()
    assert await routes.reason(api, "ns", "a", ROUTE) is Reason.OK
    assert sorted(reads) == [("agents", "a"), ("modelconfigs", "chat"), ("modelconfigs", "embed")]
    assert await routes.reason(api, "ns", "a", ROUTE) is Reason.OK  # cached
    assert len(reads) == 3
    assert await routes.reason(api, "ns", "a", "") is Reason.MODEL_ROUTE_UNCONFIGURED
    assert len(reads) == 3  # nothing to read without a route
    now[0] += tuning.SCOPE_RESYNC.read()
    fail = True
    assert await routes.reason(api, "ns", "a", ROUTE) is None  # the condition keeps its last value
    fail = False
    objects["modelconfigs/chat"] = _config("http://elsewhere/v1")
    assert await routes.reason(api, "ns", "a", ROUTE) is Reason.MODEL_ROUTE_UNGOVERNED
