"""MEMORY_MODEL_UNGOVERNED: a memory-enabled Agent's model work uses the governed model route
(the pure rule, and the webhook's Agent and ModelConfig reviews with live lookups faked)."""

from __future__ import annotations

from typing import Any

import pytest

from fgentic_governance.admission.model_route_rule import model_config_denials, model_denials
from fgentic_governance.admission.policy import AdmissionCode, PolicyState, ScopeView
from fgentic_governance.admission.review import Lookups, MemoryRouting, Reviewer
from fgentic_governance.api.kagent import governed, model_refs
from tests.support.objects import example

ROUTE = "http://memory-api.fgentic-system.svc:8083/v1"
CHAT, EMBED = "spec.declarative.modelConfig", "spec.declarative.memory.modelConfig"


def model_config(name: str, base: str | None = ROUTE, provider: str = "OpenAI"
                 ) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": "m", "provider": provider}
    if base is not None:
        spec["openAI"] = {"baseUrl": base}
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def memory_agent(model: str | None = "chat", embedding: Any = "embed") -> dict[str, Any]:
    doc = example("Agent")
    doc["metadata"] = {"name": "mem", "namespace": "ns"}
    doc["spec"]["declarative"].pop("modelConfig", None)
    if model is not None:
        doc["spec"]["declarative"]["modelConfig"] = model
    doc["spec"]["declarative"]["memory"] = {"modelConfig": embedding, "ttlDays": 3}
    return doc


def test_the_refs_of_a_memory_enabled_agent() -> None:
    assert model_refs(memory_agent()) == {CHAT: "chat", EMBED: "embed"}
    assert model_refs(memory_agent(None)) == {CHAT: "default-model-config", EMBED: "embed"}
    assert model_refs(memory_agent("ns/chat")) == {CHAT: "chat", EMBED: "embed"}
    assert model_refs(memory_agent("other/chat")) == {CHAT: None, EMBED: "embed"}
    assert model_refs(memory_agent(embedding=7)) == {CHAT: "chat", EMBED: None}
    no_memory = example("Agent")
    no_memory["spec"]["declarative"].pop("memory", None)
    assert model_refs(no_memory) == {}


@pytest.mark.parametrize(("config", "expected"), [
    (model_config("x"), True),
    (model_config("x", ROUTE + "/"), True),
    (model_config("x", "https://api.openai.com/v1"), False),
    (model_config("x", ROUTE + "/other"), False),
    (model_config("x", None), False),
    (model_config("x", ROUTE, provider="Anthropic"), False),
    ({"spec": ["not", "a", "mapping"]}, False),
    (None, False),
])
def test_governed_means_openai_at_the_route(config: Any, expected: bool) -> None:
    assert governed(config, ROUTE) is expected


def test_each_ungoverned_reference_is_denied() -> None:
    good = {"chat": model_config("chat"), "embed": model_config("embed")}
    assert model_denials(memory_agent(), good, ROUTE) == []
    direct = {**good, "chat": model_config("chat", "https://api.openai.com/v1")}
    assert [d.path for d in model_denials(memory_agent(), direct, ROUTE)] == [CHAT]
    missing = {"chat": model_config("chat"), "embed": None}
    assert [d.path for d in model_denials(memory_agent(), missing, ROUTE)] == [EMBED]
    assert [d.path for d in model_denials(memory_agent("other/chat"), good, ROUTE)] == [CHAT]


def test_a_model_config_in_use_stays_governed() -> None:
    agents = [memory_agent()]
    moved = model_config("embed", "https://api.openai.com/v1")
    [denial] = model_config_denials(moved, agents, ROUTE)
    assert denial.code is AdmissionCode.MEMORY_MODEL_UNGOVERNED
    assert model_config_denials(model_config("embed"), agents, ROUTE) == []
    assert model_config_denials(model_config("unused", "https://x/v1"), agents, ROUTE) == []


# -- through the webhook's reviewer ------------------------------------------------------------

STATE = PolicyState(scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), "demo", 3,
                                                      True)]})


def reviewer(configs: dict[str, dict[str, Any]], agents: list[dict[str, Any]],
             route: str = ROUTE) -> Reviewer:
    async def state() -> PolicyState:
        return STATE

    async def nothing(*_: Any) -> Any:
        return None

    async def no_bindings() -> list[Any]:
        return []

    async def ready() -> bool:
        return True

    async def listed(_namespace: str) -> list[dict[str, Any]]:
        return agents

    async def get(_namespace: str, name: str) -> dict[str, Any] | None:
        return configs.get(name)

    lookups = Lookups(cached_state=lambda: STATE, live_state=state, get_scope=nothing,
                      list_bindings=no_bindings, offboarding=nothing)
    return Reviewer(lookups, "fgentic.local",
                    MemoryRouting("http://memory-api:8083", ready, listed, route, get))


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"request": {"uid": "u-1", "operation": operation, "object": obj}}


async def test_the_webhook_refuses_an_agent_whose_model_bypasses_the_route() -> None:
    configs = {"chat": model_config("chat"), "embed": model_config("embed")}
    out = await reviewer(configs, [])(review(memory_agent()), webhook="agents")
    assert out["response"]["allowed"] is True
    configs["chat"] = model_config("chat", "https://api.openai.com/v1")
    out = await reviewer(configs, [])(review(memory_agent()), webhook="agents")
    assert out["response"]["status"]["message"].partition(": ")[0] == \
        f"MEMORY_MODEL_UNGOVERNED at {CHAT}"
    # Without a governed model route configured, the rule is not applied.
    out = await reviewer(configs, [], route="")(review(memory_agent()), webhook="agents")
    assert out["response"]["allowed"] is True


async def test_the_webhook_refuses_repointing_a_model_config_in_use() -> None:
    moved = model_config("embed", "https://api.openai.com/v1")
    check = reviewer({}, [memory_agent()])
    out = await check(review(moved, "UPDATE"), webhook="agents")
    assert out["response"]["status"]["message"].partition(": ")[0] == \
        "MEMORY_MODEL_UNGOVERNED at spec"
    out = await reviewer({}, [])(review(moved, "UPDATE"), webhook="agents")
    assert out["response"]["allowed"] is True
