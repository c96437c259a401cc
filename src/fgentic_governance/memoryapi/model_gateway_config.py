"""Per-Agent model routes for memory-enabled Agents: an agentgateway v1.3.1 standalone config
(pure): the model work kagent does before a memory call, bounded per Agent.

kagent's runtime summarises a session on the Agent's own model before it calls the memory API,
so that work is outside every admission of ours. Each memory-enabled Agent gets a route of its
own, ``/agents/<namespace>/<name>/`` (its ModelConfig's base URL: ``http://<gateway>:<port>
/agents/<namespace>/<name>/v1``), rewritten to ``/`` and sent to the model upstream, with a
local rate limit of its own: one Agent's summaries, prefetches and turns can use at most that
much of the model, whatever its users do. Unknown prefixes match no route (404).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from fgentic_governance.api.kagent import AgentRef

_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HOST_PORT: Final = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")


class ModelRouteError(ValueError):
    """Input the config cannot be rendered from (never echoed)."""


@dataclass(frozen=True)
class ModelLimit:
    """A token bucket per Agent: ``burst`` requests at once, refilled ``per_minute`` a minute."""

    per_minute: int = 30
    burst: int = 10

    def spec(self) -> dict[str, Any]:
        if not (1 <= self.per_minute <= 6000 and 1 <= self.burst <= 1000):
            raise ModelRouteError("limit out of range")
        return {"maxTokens": self.burst, "tokensPerFill": self.per_minute,
                "fillInterval": "60s", "type": "requests"}


def prefix(agent: AgentRef) -> str:
    return f"/agents/{agent.namespace}/{agent.name}/"


def model_routes_config(agents: Sequence[AgentRef], upstream: str, port: int,
                        limit: ModelLimit = ModelLimit()) -> dict[str, Any]:
    """One listener on ``port``; one rate-limited route per Agent to ``upstream`` (host:port)."""
    if not agents or len(set(agents)) != len(agents):
        raise ModelRouteError("agents missing or repeated")
    if not all(_LABEL.match(a.namespace) and _LABEL.match(a.name) for a in agents):
        raise ModelRouteError("agent names must be DNS labels")
    if not _HOST_PORT.match(upstream) or not 1 <= port <= 65535:
        raise ModelRouteError("upstream must be host:port and port 1..65535")
    routes = [{
        "name": f"memory-model-{a.namespace}-{a.name}",
        "matches": [{"path": {"pathPrefix": prefix(a)}}],
        "policies": {"localRateLimit": [limit.spec()],
                     "urlRewrite": {"path": {"prefix": "/"}}},
        "backends": [{"host": upstream}],
    } for a in sorted(agents, key=lambda a: (a.namespace, a.name))]
    return {"binds": [{"port": port, "listeners": [
        {"name": "memory-model-routes", "protocol": "HTTP", "routes": routes}]}]}
