"""Issue 38 §3: with tracing and OTLP logs on, the real kagent-adk 0.9.11 runtime exports no
memory content (a saved fact, a query, a summary) once the Pod routing's environment is set.

The runtime runs as in test_kagent_runtime_harness.py (stub model, embeddings and controller);
its environment for the governed case is what ``pod_patch`` gives a routed container, so the
test follows the mutation. A loopback OTLP/HTTP receiver (http/protobuf, uncompressed) records
every export; a graceful stop flushes the batch processors. Negative control: the same run
without the mutation's trace switches exports every sentinel, so the byte check can fail."""

from __future__ import annotations

import asyncio
import copy
import uuid
from pathlib import Path

import jsonpatch
import pytest
from aiohttp import web

from fgentic_governance.admission.pods import CONTENT_FREE_TRACES, pod_patch
from tests.support.kagent import (
    CallTool,
    ChatStub,
    ControllerStub,
    EmbeddingStub,
    a2a_turn,
    eventually,
    start_agent,
)
from tests.support.stubs import LoopbackServer

pytestmark = pytest.mark.integration

USER = "alice@example.com"
BATCH = "/api/memories/sessions/batch"


class OtlpReceiver(LoopbackServer):
    """An OTLP/HTTP collector stub: any POST is recorded and answered 200 with an empty
    protobuf message (an ExportTraceServiceResponse / ExportLogsServiceResponse)."""

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tail:.*}", self._export)

    async def _export(self, request: web.Request) -> web.Response:
        return web.Response(body=b"", content_type="application/x-protobuf")

    def exported(self, path: str) -> bytes:
        return b"".join(r.body for r in self.requests if r.path == path)


def routed_env(kagent_url: str, otel: dict[str, str]) -> dict[str, str]:
    """What a routed container sees: ``otel`` as kagent's controller would pass it, then the
    mutating webhook's patch (its values last, so they win)."""
    pod = {"metadata": {"labels": {}}, "spec": {"containers": [
        {"name": "kagent", "env": [{"name": k, "value": v} for k, v in otel.items()]}]}}
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), pod_patch(pod, kagent_url))
    return {e["name"]: e.get("value", "") for e in patched["spec"]["containers"][0]["env"]}


async def _exports(tmp_path: Path, governed: bool) -> tuple[bytes, tuple[str, ...], str]:
    """One runtime: a saved fact, a load_memory query and five turns' summary, all carrying
    sentinels; the bytes of every exported span and log record, the sentinels and the A2A
    context."""
    s_fact, s_query, s_summary = (f"sentinel-{kind}-{uuid.uuid4().hex}"
                                  for kind in ("fact", "query", "summary"))
    controller, chat, embeddings, otlp = ControllerStub(), ChatStub(), EmbeddingStub(), \
        OtlpReceiver()
    started: list[LoopbackServer] = []
    try:
        for server in (controller, chat, embeddings, otlp):
            await server.start()
            started.append(server)
        otel = {"OTEL_TRACING_ENABLED": "true", "OTEL_LOGGING_ENABLED": "true",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otlp.base_url + "/v1/traces",
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": otlp.base_url + "/v1/logs",
                "OTEL_EXPORTER_OTLP_COMPRESSION": "none", "OTEL_BSP_SCHEDULE_DELAY": "200",
                "OTEL_BLRP_SCHEDULE_DELAY": "200"}
        env = routed_env(controller.base_url, otel)
        if not governed:
            env = {k: v for k, v in env.items() if k not in CONTENT_FREE_TRACES}
        chat.summary = [f"Alice works on {s_summary} this quarter."]
        chat.script(CallTool("save_memory", {"content": f"Alice's codename is {s_fact}."},
                             then="Saved."),
                    CallTool("load_memory", {"query": f"codename {s_query}"}, then="Checked."))
        agent = await start_agent(tmp_path, kagent_url=env.pop("KAGENT_URL"), chat=chat,
                                  embeddings=embeddings, log_level=env.pop("LOG_LEVEL"),
                                  extra_env=env)
        try:
            context = uuid.uuid4().hex
            for turn in range(1, 6):
                await a2a_turn(agent.base_url, f"Turn {turn}: what do you remember?",
                               user_id=USER, context_id=context)
            await eventually(lambda: controller.calls("POST", BATCH),
                             what="the automatic save after the fifth turn")
            await eventually(lambda: otlp.exported("/v1/traces"), what="a span export")
        finally:
            await asyncio.to_thread(agent.stop)  # SIGTERM: the SDK flushes at shutdown
        # The content did pass through the runtime (its memory calls carry it).
        memory = b"".join(r.body for r in controller.memory_calls())
        assert all(s.encode() in memory for s in (s_fact, s_summary)), "no memory traffic"
        return (otlp.exported("/v1/traces") + otlp.exported("/v1/logs"),
                (s_fact, s_query, s_summary), context)
    finally:
        for server in reversed(started):
            await server.stop()


async def test_routed_runtime_exports_no_memory_content(tmp_path: Path) -> None:
    exported, sentinels, context = await _exports(tmp_path / "governed", governed=True)
    # Tracing was on, and content-free is not identifier-free (docs/memory.md §14): the
    # user and the A2A context are span attributes and in the session URLs.
    assert USER.encode() in exported and context.encode() in exported
    for sentinel in sentinels:
        assert sentinel.encode() not in exported, f"{sentinel.split('-')[1]} in an export"


async def test_without_the_switches_the_runtime_exports_memory_content(tmp_path: Path) -> None:
    """The negative control: the same run, the mutation's trace switches left out."""
    exported, sentinels, _ = await _exports(tmp_path / "control", governed=False)
    for sentinel in sentinels:
        assert sentinel.encode() in exported, f"{sentinel.split('-')[1]} not exported"
