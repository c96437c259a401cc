"""The kagent runtime harness (tests/support/kagent.py) against the REAL runtime.

``kagent-adk==0.9.11``, unmodified, from the venv of ``hack/kagent-runtime.sh``, talks to the
recording controller stub directly (no memory API of ours yet). These tests prove the harness
sees what the runtime really sends, so later tests can put our memory API behind
``KAGENT_URL`` and trust what they observe.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.kagent import (
    APP_NAME,
    CallTool,
    ControllerStub,
    Say,
    a2a_turn,
    embed,
    kagent_stack,
    runtime_python,
)
from tests.support.polling import until_async
from tests.support.stubs import Recorded
from tests.support.vectors import DIMENSIONS

pytestmark = pytest.mark.integration

USER = "alice@example.com"
# One sentence of >= 30 characters: the prefetch searches for it whole.
FIRST_TURN = "Please help me plan the quarterly release of the billing service"


def _close(vector: object, expected: list[float]) -> bool:
    """Equal within float32 precision (the runtime decodes our base64 float32 vectors)."""
    return (isinstance(vector, list) and len(vector) == len(expected)
            and all(abs(a - b) <= 1e-6 for a, b in zip(vector, expected, strict=True)))


def _kagent_calls(controller: ControllerStub) -> list[Recorded]:
    return [r for r in controller.requests if r.path.startswith(("/api/sessions", "/api/tasks"))]


async def test_a_turn_reaches_sessions_and_tasks_with_agent_token_and_user(tmp_path: Path
                                                                             ) -> None:
    async with kagent_stack(tmp_path) as stack:
        stack.chat.script(Say("Hello Alice."))
        context = uuid.uuid4().hex
        reply = await a2a_turn(stack.agent.base_url, FIRST_TURN, user_id=USER,
                               context_id=context)
        assert reply == "Hello Alice."
        calls = _kagent_calls(stack.controller)

        session_path = f"/api/sessions/{context}"
        assert [r.status for r in stack.controller.calls("GET", session_path)][:2] == [404, 200]
        [created] = stack.controller.calls("POST", "/api/sessions")
        assert created.status == 201
        body = created.json()
        assert (body["user_id"], body["agent_ref"], body["id"]) == (USER, APP_NAME, context)
        assert stack.controller.calls("POST", session_path + "/events")
        assert stack.controller.calls("POST", "/api/tasks")
        # Every call carries each identity header exactly once, with the runtime's values.
        for call in [*calls, *stack.controller.memory_calls()]:
            names = [k for k, _ in call.headers]
            assert names.count("x-agent-name") == names.count("authorization") == 1, call
            assert names.count("x-user-id") == 1, call
            assert call.header("x-agent-name") == APP_NAME
            assert call.header("authorization") == f"Bearer {stack.agent.token}"
            assert call.header("x-user-id") == USER


async def test_save_memory_tool_posts_one_fact_with_its_embedding(tmp_path: Path) -> None:
    fact = "Alice prefers release notes in German " + uuid.uuid4().hex
    async with kagent_stack(tmp_path) as stack:
        stack.chat.script(CallTool("save_memory", {"content": fact}, then="Noted."))
        reply = await a2a_turn(stack.agent.base_url, FIRST_TURN, user_id=USER,
                               context_id=uuid.uuid4().hex)
        assert reply == "Noted."

        [saved] = stack.controller.calls("POST", "/api/memories/sessions")
        body = saved.json()
        assert saved.status == 201 and saved.query == ""
        assert {k: v for k, v in body.items() if k != "vector"} == {
            "agent_name": APP_NAME, "user_id": USER, "content": fact}  # ttl_days 0: not sent
        assert len(body["vector"]) == DIMENSIONS and _close(body["vector"], embed(fact))
        # The runtime asked our stub for that vector, in the format RUNTIME.md describes.
        asked = [r.json() for r in stack.embeddings.requests if fact in r.json()["input"]]
        assert asked == [{"input": [fact], "model": "stub-embedding",
                          "dimensions": DIMENSIONS, "encoding_format": "base64"}]
        assert [m["content"] for m in stack.controller.memories] == [fact]


async def test_five_turns_save_a_summary_and_the_first_turn_prefetches(tmp_path: Path) -> None:
    async with kagent_stack(tmp_path) as stack:
        stack.chat.summary = ["Alice plans the billing release " + uuid.uuid4().hex]
        context = uuid.uuid4().hex
        await a2a_turn(stack.agent.base_url, FIRST_TURN, user_id=USER, context_id=context)
        [search] = stack.controller.calls("POST", "/api/memories/search")
        assert {k: v for k, v in search.json().items() if k != "vector"} == {
            "agent_name": APP_NAME, "user_id": USER, "limit": 5, "min_score": 0.3}
        assert _close(search.json()["vector"], embed(FIRST_TURN))

        for turn in range(2, 6):
            await a2a_turn(stack.agent.base_url, f"Turn {turn}.", user_id=USER,
                           context_id=context)
        # The save runs in the background after the fifth answer.
        await until_async(lambda: stack.controller.calls("POST", "/api/memories/sessions/batch"),
                          what="the automatic save after the fifth user turn")
        [batch] = stack.controller.calls("POST", "/api/memories/sessions/batch")
        [item] = batch.json()["items"]
        assert batch.status == 201
        assert item["content"] == stack.chat.summary[0] and item["user_id"] == USER
        assert _close(item["vector"], embed(stack.chat.summary[0]))
        # One summariser call, fed the conversation; no further search after turn one.
        [summariser] = stack.chat.summariser_requests()
        assert FIRST_TURN in summariser.body.decode()
        assert len(stack.controller.calls("POST", "/api/memories/search")) == 1
        assert stack.controller.calls("POST", "/api/memories/sessions") == []


@pytest.mark.parametrize("level", ["ERROR", "INFO"])
async def test_log_level_decides_whether_a_query_reaches_the_runtime_log(tmp_path: Path,
                                                                          level: str) -> None:
    """At ERROR the runtime logs no query; at INFO it does (``No memories found for query``,
    ``Loading memory for query``), the negative control proving the log check can fail."""
    sentinel = "SENTINEL-" + uuid.uuid4().hex
    query = f"Do you remember the codename {sentinel} from our last chat?"
    async with kagent_stack(tmp_path, log_level=level) as stack:
        stack.chat.script(CallTool("load_memory", {"query": sentinel}, then="I do not."))
        await a2a_turn(stack.agent.base_url, query, user_id=USER, context_id=uuid.uuid4().hex)
        # It did pass through the runtime: to the model, and as vectors to the controller.
        assert any(sentinel in r.body.decode() for r in stack.chat.requests)
        searched = [r.json()["vector"] for r in stack.controller.calls(
            "POST", "/api/memories/search")]
        assert any(_close(v, embed(query)) for v in searched)
        assert any(_close(v, embed(sentinel)) for v in searched)
    log = stack.agent.log_text()
    assert log.strip(), "the runtime wrote no log at all"
    assert (sentinel in log) == (level == "INFO"), json.dumps(log[-2000:])


@pytest.mark.parametrize(("collector", "outcome"), [("on", "stalled"), ("off", "connected")])
def test_why_the_runtime_runs_without_its_cyclic_collector(collector: str, outcome: str) -> None:
    """kagent-adk 0.9.11's own embeddings client, once the cyclic collector finalises it,
    unregisters a later connect that reuses its freed descriptor (kagent_client_hazard.py;
    docs/memory.md section 14). The runner turns the collector off for that reason; if an
    upgrade fixes it, "on" connects and this test says the deviation can go."""
    script = Path(__file__).parents[1] / "support" / "kagent_client_hazard.py"
    done = subprocess.run([str(runtime_python()), "-P", str(script), collector],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "OPENAI_API_KEY": "sk-test-dummy"})
    assert done.stdout.strip().splitlines()[-1:] == [outcome], done.stderr[-2000:]
