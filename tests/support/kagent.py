"""The real kagent Python runtime (``kagent-adk==0.9.11``, unmodified) on loopback, offline.

``0.9.11`` is the ADRs' pin and the default; ``0.10.4``, the release users run now (issue 38
§5), is selected per call (``start_agent(version=...)``) or per test (``runtime_versions``).
Each runs in its own venv (``hack/kagent-runtime.sh VERSION``; google-adk caps ``mcp<2``) as a
child process started by ``tests/support/kagent_runner.py`` the way ``kagent-adk static`` starts
it in a Pod. Everything it talks to is an in-process aiohttp server on 127.0.0.1, run in the
test's event loop:

* ``ChatStub``: OpenAI chat completions following a per-turn script (``Say``, ``CallTool``),
  and the answer to kagent's memory summariser (every 5th user turn);
* ``EmbeddingStub``: OpenAI embeddings, deterministic 768-dim unit vectors (``embed``);
* ``ControllerStub``: kagent's controller API as the runtime uses it at ``KAGENT_URL``:
  sessions, tasks and ``/api/memories/*``, recording every request byte for byte.

Facts about the runtime the stubs rely on (read in the installed package; see
``../shared/upstream/kagent-v0.9.11/runtime/RUNTIME.md`` for the wire calls):

* memory is on when ``config.json`` has a ``memory`` object (``MemoryConfig``: ``ttl_days``,
  ``embedding`` = ``{provider, model, base_url}``); the Agent then gets ``prefetch_memory``,
  ``load_memory``, ``save_memory(content)`` and an after-agent callback that summarises the
  session every 5th user turn. It counts user events of the session the controller returns, so
  the controller stub must store and return events;
* the summariser sends one user message ending in ``Summary (JSON List):`` and accepts only a
  JSON list of strings (else it logs a WARNING with the output and stores the transcript);
* prefetch runs on the turn whose session holds exactly one user event: one search per
  sentence of >= 30 characters, or the whole text if there is none;
* ``KAGENT_URL``, ``KAGENT_NAME`` and ``KAGENT_NAMESPACE`` come from the environment; the token
  path is a module constant (see the runner's docstring).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import ClientError, ClientSession, ClientTimeout, DummyCookieJar, web

from fgentic_devenv import free_port, log_tail, terminate
from tests.support.objects import ROOT
from tests.support.polling import until_async
from tests.support.stubs import LoopbackServer, Recorded
from tests.support.vectors import DIMENSIONS, unit_vector

DEFAULT_RUNTIME: Final = "0.9.11"
CONSTRAINTS: Final[Mapping[str, Path]] = {
    DEFAULT_RUNTIME: ROOT.parent / "shared" / "upstream" / "kagent-v0.9.11" / "runtime"
    / "constraints.txt",
    "0.10.4": ROOT / "hack" / "kagent-runtime" / "constraints-0.10.4.txt",
}
"""Each runtime version's pins, as hack/kagent-runtime.sh installs them (one venv each)."""
RUNTIMES: Final = tuple(CONSTRAINTS)
RUNNER = Path(__file__).with_name("kagent_runner.py")
NAMESPACE, AGENT = "team-a", "my-agent"
APP_NAME = "team_a__NS__my_agent"  # kagent: ns.replace('-','_') + "__NS__" + name.replace(...)
SUMMARY_MARKER = "Summary (JSON List):"  # the last line of kagent's summariser prompt
STARTUP_TIMEOUT = 60.0
TURN_TIMEOUT = 60.0


# -- the runtime venv ------------------------------------------------------------------------


def runtime_venv(version: str = DEFAULT_RUNTIME) -> Path:
    """Where hack/kagent-runtime.sh builds the version's venv: keyed by the constraints it
    installs (a file per version)."""
    key = hashlib.sha256(CONSTRAINTS[version].read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "fgentic-governance" / "kagent-runtime" / key


def runtime_python(version: str = DEFAULT_RUNTIME) -> Path:
    """The venv's python; a missing venv is a failure (integration tests never skip)."""
    venv = runtime_venv(version)
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file() or not python.is_file():
        raise RuntimeError(f"no kagent runtime venv at {venv}: "
                           f"run hack/kagent-runtime.sh {version}")
    return python


def runtime_versions(metafunc: pytest.Metafunc, argname: str = "kagent_version") -> None:
    """A test module's ``pytest_generate_tests``: ``argname`` (which its runtime fixture takes)
    is every version in ``RUNTIMES`` for a test marked ``kagent_runtimes``, else the default
    only. Module-scoped, so a module starts one runtime per version, not per test."""
    if argname in metafunc.fixturenames:
        every = metafunc.definition.get_closest_marker("kagent_runtimes") is not None
        metafunc.parametrize(argname, RUNTIMES if every else (DEFAULT_RUNTIME,), scope="module")


# -- embeddings ------------------------------------------------------------------------------


def embed(text: str) -> list[float]:
    """The stub's vector for ``text`` (tests.support.vectors: float32-exact, so the runtime's
    base64 round trip keeps it)."""
    return unit_vector(text)


class EmbeddingStub(LoopbackServer):
    """``POST /v1/embeddings``: ``embed(input)`` for each input, as base64 little-endian
    float32 when asked (the openai SDK the runtime uses always asks). ``aliases`` maps a text
    to the text whose vector it gets instead (two texts "meaning the same")."""

    def __init__(self) -> None:
        super().__init__()
        self.aliases: dict[str, str] = {}
        self.failure: str | None = None
        """When set: every answer is a 500 whose body quotes it (a provider's error)."""
        self.dimensions = DIMENSIONS
        """The model's dimension (1,024: BGE-M3, ADR 0024)."""

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._embeddings)

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.failure is not None:
            return web.json_response({"error": {"message": f"cannot embed: {self.failure}"}},
                                     status=500)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector = unit_vector(self.aliases.get(str(text), str(text)), self.dimensions)
            encoded: Any = (base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                            if as_base64 else vector)
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        return web.json_response({"object": "list", "data": data, "model": body.get("model"),
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})


# -- chat completions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Say:
    """The model answers the user's turn with ``text``."""

    text: str


@dataclass(frozen=True)
class CallTool:
    """The model calls ``name(**arguments)``; once the tool result comes back it says ``then``
    (text) or makes ``then``'s call. With ``after`` set, the model answers only once that
    coroutine returns: a slow model, e.g. one still working when a projection expires."""

    name: str
    arguments: Mapping[str, Any]
    then: str | CallTool = "Done."
    after: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)


Step = Say | CallTool


class ChatStub(LoopbackServer):
    """``POST /v1/chat/completions`` (non-streaming, what kagent's OpenAI model sends unless
    the Agent streams). One scripted ``Step`` per user turn, ``Say("OK.")`` when the script is
    empty; a request whose last message is a tool result gets the pending call's ``then``; a
    summariser request gets ``json.dumps(summary)`` (a ``str`` summary as it is: malformed
    output), once ``summary_gate`` (if set) is set: a test can hold the runtime's background
    save between its summary and its save."""

    def __init__(self) -> None:
        super().__init__()
        self.summary: list[str] | str = ["The user talked about the weather."]
        self.summary_gate: asyncio.Event | None = None
        self.failure: str | None = None
        """When set: every chat request is answered 500 with a body quoting it."""
        self._steps: list[Step] = []
        self._pending: dict[str, str | CallTool] = {}  # tool call id -> what follows its result

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    def script(self, *steps: Step) -> None:
        """Queue the model's behaviour for the next user turns, in order."""
        self._steps.extend(steps)

    def summariser_requests(self) -> list[Recorded]:
        return [r for r in self.requests if _is_summariser(r.json())]

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._completions)

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("stream"):
            return web.json_response({"error": {"message": "the stub does not stream"}},
                                     status=400)
        last = body["messages"][-1]
        if self.failure is not None:
            return web.json_response({"error": {"message": f"model failed: {self.failure}",
                                                "type": "server_error"}}, status=500)
        if _is_summariser(body):
            if self.summary_gate is not None:
                await self.summary_gate.wait()
            message: dict[str, Any] = {"role": "assistant", "content": (
                self.summary if isinstance(self.summary, str) else json.dumps(self.summary))}
        else:
            step: Step
            if last.get("role") == "tool":
                follow = self._pending.pop(last.get("tool_call_id", ""), "Done.")
                step = follow if isinstance(follow, CallTool) else Say(follow)
            else:
                step = self._steps.pop(0) if self._steps else Say("OK.")
            message = await self._answer(step)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return web.json_response({
            "id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def _answer(self, step: Step) -> dict[str, Any]:
        if isinstance(step, Say):
            return {"role": "assistant", "content": step.text}
        if step.after is not None:
            await step.after()
        call_id = "call_" + uuid.uuid4().hex[:12]
        self._pending[call_id] = step.then
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": step.name, "arguments": json.dumps(step.arguments)}}]}


def _is_summariser(body: Any) -> bool:
    messages = (body.get("messages") or []) if isinstance(body, dict) else []
    content = messages[-1].get("content") if messages else None
    text = content if isinstance(content, str) else json.dumps(content)
    return text.rstrip().endswith(SUMMARY_MARKER)


# -- the controller --------------------------------------------------------------------------


def _envelope(data: Any, status: int = 200) -> web.Response:
    # The Go controller's StandardResponse, which the session service and task store unwrap.
    return web.json_response({"error": False, "data": data, "message": "ok"}, status=status)


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status)


class ControllerStub(LoopbackServer):
    """Stands in for kagent's controller (the session/task store is outside our system) just
    enough for the runtime to work, and answers ``/api/memories/*`` with the controller's
    shapes and checks (768-dim vectors, batches of at most 50), storing in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.tasks: dict[str, Any] = {}
        self.memories: list[dict[str, Any]] = []
        self.failure: str | None = None
        """When set: appending a session event is answered 500 with a body quoting it."""

    def calls(self, method: str, path: str) -> list[Recorded]:
        """The recorded requests with this method and exact path."""
        return [r for r in self.requests if r.method == method and r.path == path]

    def memory_calls(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.startswith("/api/memories")]

    def routes(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/api/sessions", self._create_session)
        r.add_get("/api/sessions", self._list_sessions)
        r.add_get("/api/sessions/{sid}", self._get_session)
        r.add_delete("/api/sessions/{sid}", self._delete_session)
        r.add_post("/api/sessions/{sid}/events", self._append_event)
        r.add_post("/api/tasks", self._save_task)
        r.add_get("/api/tasks/{tid}", self._get_task)
        r.add_delete("/api/tasks/{tid}", self._delete_task)
        r.add_post("/api/memories/sessions", self._add_memory)
        r.add_post("/api/memories/sessions/batch", self._add_memories)
        r.add_post("/api/memories/search", self._search)
        r.add_get("/api/memories", self._list_memories)
        r.add_delete("/api/memories", self._delete_memories)

    # sessions and tasks

    async def _create_session(self, request: web.Request) -> web.Response:
        body = await request.json()
        sid = body.get("id") or uuid.uuid4().hex
        self.sessions[sid] = {"id": sid, "user_id": body["user_id"],
                              "agent_id": body.get("agent_ref"), "name": body.get("name")}
        self.events.setdefault(sid, [])
        return _envelope(self.sessions[sid], 201)

    async def _list_sessions(self, request: web.Request) -> web.Response:
        user = request.query.get("user_id")
        return _envelope([s for s in self.sessions.values() if s["user_id"] == user])

    async def _get_session(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            return _error("session not found", 404)
        events = self.events[session["id"]]
        limit = int(request.query.get("limit", "-1"))
        return _envelope({"session": session,
                          "events": events[-limit:] if limit > 0 else events})

    async def _delete_session(self, request: web.Request) -> web.Response:
        self.sessions.pop(request.match_info["sid"], None)
        return _envelope(None)

    async def _append_event(self, request: web.Request) -> web.Response:
        if self.failure is not None:
            return _error(f"cannot store the event: {self.failure}", 500)
        sid = request.match_info["sid"]
        if sid not in self.sessions:
            return _error("session not found", 404)
        event = await request.json()
        self.events[sid].append(event)
        return _envelope(event, 201)

    async def _save_task(self, request: web.Request) -> web.Response:
        task = await request.json()
        self.tasks[task["id"]] = task
        return _envelope(task, 201)

    async def _get_task(self, request: web.Request) -> web.Response:
        task = self.tasks.get(request.match_info["tid"])
        return _error("task not found", 404) if task is None else _envelope(task)

    async def _delete_task(self, request: web.Request) -> web.Response:
        self.tasks.pop(request.match_info["tid"], None)
        return _envelope(None)

    # memories: the shapes of kagent's handlers/memory.go

    def _store(self, item: Any) -> str | None:
        """Store one item; the error message if it is not one the controller accepts."""
        if not isinstance(item, dict) or not item.get("agent_name") or not item.get("user_id"):
            return "Missing required fields (agent_name, user_id, vector)"
        vector = item.get("vector")
        if not isinstance(vector, list) or len(vector) != DIMENSIONS:
            return f"vector must have exactly {DIMENSIONS} dimensions"
        self.memories.append({"id": str(uuid.uuid4()), "agent_name": item["agent_name"],
                              "user_id": item["user_id"], "content": item.get("content", ""),
                              "vector": vector, "created_at": "2026-01-01T00:00:00Z"})
        return None

    async def _add_memory(self, request: web.Request) -> web.Response:
        problem = self._store(await request.json())
        return _error(problem, 400) if problem else web.json_response(
            {"id": self.memories[-1]["id"]}, status=201)

    async def _add_memories(self, request: web.Request) -> web.Response:
        items = (await request.json()).get("items") or []
        if not items or len(items) > 50:
            return _error("batch must hold 1 to 50 items", 400)
        for item in items:
            if problem := self._store(item):
                return _error(problem, 400)
        return web.json_response({"count": len(items)}, status=201)

    async def _search(self, request: web.Request) -> web.Response:
        body = await request.json()
        vector = body.get("vector")
        if not isinstance(vector, list) or len(vector) != DIMENSIONS:
            return _error(f"vector must have exactly {DIMENSIONS} dimensions", 400)
        hits = []
        for m in self.memories:
            if (m["agent_name"], m["user_id"]) != (body.get("agent_name"), body.get("user_id")):
                continue
            score = sum(a * b for a, b in zip(m["vector"], vector, strict=True))  # unit vectors
            if score >= float(body.get("min_score") or 0):
                hits.append({"id": m["id"], "content": m["content"], "score": score,
                             "metadata": {}, "created_at": m["created_at"]})
        hits.sort(key=lambda h: -h["score"])
        return web.json_response(hits[: int(body.get("limit") or 5)])

    def _owned(self, request: web.Request) -> list[dict[str, Any]]:
        key = (request.query.get("agent_name"), request.query.get("user_id"))
        return [m for m in self.memories if (m["agent_name"], m["user_id"]) == key]

    async def _list_memories(self, request: web.Request) -> web.Response:
        return web.json_response([{"id": m["id"], "content": m["content"], "access_count": 0,
                                   "created_at": m["created_at"]} for m in self._owned(request)])

    async def _delete_memories(self, request: web.Request) -> web.Response:
        gone = self._owned(request)
        self.memories = [m for m in self.memories if m not in gone]
        return web.json_response({"status": "deleted"})


# -- the runtime -----------------------------------------------------------------------------


@dataclass
class RunningAgent:
    """The runtime process: its A2A base URL, its own log (stdout and stderr) and the token it
    sends as ``Authorization: Bearer``."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: Path
    token: str
    app_name: str = APP_NAME
    version: str = DEFAULT_RUNTIME

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    async def dump_stacks(self) -> str:
        """Where the runtime waits: its threads' and asyncio tasks' stacks (the runner's
        SIGUSR1 handler), as appended to its log."""
        before = len(self.log_text())
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            await asyncio.sleep(1.0)
        sockets = subprocess.run(["ss", "-tanp"], capture_output=True, text=True, timeout=10,
                                 check=False).stdout.splitlines()
        mine = [line for line in sockets if f"pid={self.process.pid}," in line]
        return self.log_text()[before:] + "\nsockets:\n" + "\n".join(mine)

    def stop(self) -> None:
        terminate(self.process)


def agent_config(chat_url: str, embeddings_url: str, *, ttl_days: int = 0) -> dict[str, Any]:
    """The ``config.json`` kagent's controller would write for a declarative Agent with
    ``memory`` set (compiler.go): an OpenAI model and an OpenAI embedding provider."""
    return {
        "model": {"type": "openai", "model": "stub-chat", "base_url": chat_url},
        "description": "A test agent.",
        "instruction": "You are a helpful assistant.",
        "memory": {"ttl_days": ttl_days, "embedding": {
            "provider": "openai", "model": "stub-embedding", "base_url": embeddings_url}},
    }


def _agent_card(url: str, agent: str = AGENT) -> dict[str, Any]:
    return {"name": agent.replace("-", "_"), "description": "A test agent.", "url": url,
            "version": "0.1.0", "capabilities": {"streaming": False},
            "defaultInputModes": ["text"], "defaultOutputModes": ["text"], "skills": []}


def retrieval_agent_config(chat_url: str, mcp_url: str, *, api_key: str, tool: str,
                           allowed_headers: Sequence[str] = ("X-Fgentic-Identity",),
                           ) -> dict[str, Any]:
    """The ``config.json`` kagent's controller writes for a declarative Agent with one
    RemoteMCPServer tool (translateStreamableHttpTool): ``http_tools`` with the server's URL,
    its headers (the Agent's MCP API key for the gateway), the tool filter and the Agent
    tool's ``allowedHeaders``. No memory."""
    return {
        "model": {"type": "openai", "model": "stub-chat", "base_url": chat_url},
        "description": "The retrieval agent.",
        "instruction": "Answer from the knowledge tool.",
        "http_tools": [{"params": {"url": mcp_url,
                                   "headers": {"Authorization": f"Bearer {api_key}"},
                                   "timeout": 30.0},
                        "tools": [tool], "allowed_headers": list(allowed_headers)}],
    }


async def start_agent(workdir: Path, *, kagent_url: str, chat: ChatStub,
                      embeddings: EmbeddingStub | None, log_level: str = "ERROR",
                      ttl_days: int = 0, token: str | None = None,
                      extra_env: Mapping[str, str] | None = None, namespace: str = NAMESPACE,
                      agent: str = AGENT, embeddings_url: str | None = None,
                      config: Mapping[str, Any] | None = None,
                      port: int = 0, model_url: str | None = None,
                      version: str = DEFAULT_RUNTIME) -> RunningAgent:
    """Start the runtime serving A2A on loopback (``port``, else a free one) with
    ``config.json``, ``agent-card.json`` and the token file in ``workdir``, as the Agent
    ``namespace/agent`` (``KAGENT_NAMESPACE``, ``KAGENT_NAME``); wait (bounded) until it serves
    its agent card. Async so the stubs in this loop keep answering while it starts.
    ``config`` replaces the memory-enabled default (``agent_config``); ``embeddings_url``
    replaces the embeddings stub's URL in that default (e.g. the memory API's /v1), and
    ``model_url`` the chat stub's (the Agent's ModelConfig base URL); ``version`` is the
    kagent-adk release (``RUNTIMES``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    if config is None:
        url = embeddings_url or (embeddings.url if embeddings is not None else None)
        if url is None:
            raise ValueError("a memory-enabled Agent needs an embeddings URL")
        config = agent_config(model_url or chat.url, url, ttl_days=ttl_days)
    (workdir / "config.json").write_text(json.dumps(config))
    (workdir / "agent-card.json").write_text(json.dumps(_agent_card(base_url + "/", agent)))
    token = token or "kagent-sa-token-" + uuid.uuid4().hex
    (workdir / "kagent-token").write_text(token + "\n")
    # Built from scratch, like a Pod's: no proxy settings or credentials of ours leak in.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir),
        "KAGENT_URL": kagent_url, "KAGENT_NAME": agent, "KAGENT_NAMESPACE": namespace,
        "LOG_LEVEL": log_level, "OPENAI_API_KEY": "sk-test-dummy",
        "KAGENT_TEST_TOKEN_PATH": str(workdir / "kagent-token"), **(extra_env or {}),
    }
    log = workdir / "runtime.log"
    with log.open("wb") as out:
        # -P: the runner's directory must not shadow the ``kagent`` package with this module.
        process = subprocess.Popen([str(runtime_python(version)), "-P", "-u", str(RUNNER),
                                    str(workdir), str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    running = RunningAgent(process, base_url, log, token, app_name=(
        namespace.replace("-", "_") + "__NS__" + agent.replace("-", "_")), version=version)
    try:
        await _wait_ready(running)
    except BaseException:
        running.stop()
        raise
    return running


async def _wait_ready(agent: RunningAgent) -> None:
    async with ClientSession(timeout=ClientTimeout(total=2)) as http:

        async def serving() -> bool:
            if agent.process.poll() is not None:
                raise RuntimeError(f"kagent runtime exited with {agent.process.returncode}; "
                                   f"{agent.log}:\n{log_tail(agent.log)}")
            async with http.get(agent.base_url + "/.well-known/agent-card.json") as resp:
                return resp.status == 200

        try:
            await until_async(serving, "the kagent runtime's agent card", STARTUP_TIMEOUT,
                              tolerate=(ClientError, TimeoutError))
        except AssertionError as exc:
            raise RuntimeError(f"{exc}; {agent.log}:\n{log_tail(agent.log)}") from None


@dataclass
class KagentStack:
    """The three stubs and the runtime, started together by ``kagent_stack``."""

    controller: ControllerStub
    chat: ChatStub
    embeddings: EmbeddingStub
    agent: RunningAgent


@asynccontextmanager
async def kagent_stack(workdir: Path, *, log_level: str = "ERROR", kagent_url: str | None = None,
                       ttl_days: int = 0) -> AsyncIterator[KagentStack]:
    """Stubs, then the runtime with ``KAGENT_URL`` = ``kagent_url`` or the controller stub;
    everything stopped on exit."""
    controller, chat, embeddings = ControllerStub(), ChatStub(), EmbeddingStub()
    started: list[LoopbackServer] = []
    agent: RunningAgent | None = None
    try:
        servers: list[LoopbackServer] = [controller, chat, embeddings]
        for server in servers:
            await server.start()
            started.append(server)
        agent = await start_agent(workdir, kagent_url=kagent_url or controller.base_url,
                                  chat=chat, embeddings=embeddings, log_level=log_level,
                                  ttl_days=ttl_days)
        yield KagentStack(controller, chat, embeddings, agent)
    finally:
        if agent is not None:
            await asyncio.to_thread(agent.stop)
        for stub in reversed(started):
            await stub.stop()


class OtlpReceiver(LoopbackServer):
    """An OTLP/HTTP collector (http/protobuf, uncompressed, as the runtime is told to send):
    every POST recorded and answered 200 with an empty protobuf message (an empty
    ExportTraceServiceResponse / ExportLogsServiceResponse)."""

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tail:.*}", self._export)

    async def _export(self, request: web.Request) -> web.Response:
        return web.Response(body=b"", content_type="application/x-protobuf")

    def env(self) -> dict[str, str]:
        """What points the runtime's tracing and GenAI log records here (kagent-core's
        ``configure``: ``OTEL_TRACING_ENABLED``/``OTEL_LOGGING_ENABLED``, full endpoint URLs)
        with a short batch delay; its processors flush the rest when it stops gracefully."""
        return {"OTEL_TRACING_ENABLED": "true", "OTEL_LOGGING_ENABLED": "true",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.base_url + "/v1/traces",
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": self.base_url + "/v1/logs",
                "OTEL_EXPORTER_OTLP_COMPRESSION": "none", "OTEL_BSP_SCHEDULE_DELAY": "200",
                "OTEL_BLRP_SCHEDULE_DELAY": "200"}

    def exported(self, path: str | None = None) -> bytes:
        """The bytes of every export (to ``path`` only, when given), in arrival order."""
        return b"".join(r.body for r in self.requests if path is None or r.path == path)


# -- A2A -------------------------------------------------------------------------------------


async def a2a_turn(base_url: str, text: str, *, user_id: str | None, context_id: str,
                   timeout: float = TURN_TIMEOUT) -> str:
    """One A2A ``message/send`` (a2a-sdk 0.3 JSON-RPC, as kagent-adk 0.9.11 serves it) with
    ``x-user-id: user_id`` (omitted when None); the reply text of the completed task."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
                    "contextId": context_id, "parts": [{"kind": "text", "text": text}]}}}
    headers = {"x-user-id": user_id} if user_id is not None else {}
    async with ClientSession(timeout=ClientTimeout(total=timeout),
                             cookie_jar=DummyCookieJar()) as http, \
            http.post(base_url + "/", json=body, headers=headers) as resp:
        reply = await resp.json(content_type=None)
    if resp.status != 200 or "result" not in reply:
        raise RuntimeError(f"A2A turn failed: HTTP {resp.status}: {reply.get('error')}")
    return reply_text(reply["result"])


def reply_text(result: Mapping[str, Any]) -> str:
    """The agent's text in an A2A 0.3 ``Task`` (artifacts, else the status message) or
    ``Message``; a task that did not complete is an error."""
    if result.get("kind") == "message":
        return _texts(result.get("parts"))
    state = result.get("status", {}).get("state")
    if state != "completed":
        raise RuntimeError(f"A2A task ended {state}: "
                           f"{_texts(result.get('status', {}).get('message', {}).get('parts'))}")
    texts = [_texts(a.get("parts")) for a in result.get("artifacts") or []]
    return "".join(texts) or _texts(result["status"].get("message", {}).get("parts"))


def _texts(parts: Any) -> str:
    return "".join(p.get("text", "") for p in parts or [] if p.get("kind") == "text")
