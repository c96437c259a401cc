"""The retrieval server's configuration, derived from its RetrievalBinding.

The operator renders it, with the binding's other objects, into a ConfigMap in the retrieval
service's namespace (``render.names.SERVER_CONFIG_SUFFIX``). The chart's Deployment mounts it
at ``--config``, so the Agent, the tool and the path the server enforces are always the
binding's own. Like the projector's configuration, it holds names only: no credential and no
content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from fgentic_governance.api.common import AgentRef, Model
from fgentic_governance.api.retrieval import HttpPath, RetrievalBindingSpec, ToolName


class ServerConfigError(ValueError):
    """The configuration is unusable; the message names a field, never a value."""


class RetrievalServerConfig(Model):
    version: Literal[1] = 1
    agent: AgentRef
    """The retrieval Agent every X-Fgentic-Identity must name."""
    tool: ToolName
    """The one tool the server offers (the binding's mcpServer.tool)."""
    mcp_path: HttpPath
    """The server's own Streamable HTTP path (the binding's retrievalService.mcpPath)."""


def server_config(spec: RetrievalBindingSpec) -> RetrievalServerConfig:
    return RetrievalServerConfig(
        agent=AgentRef(namespace=spec.agent.namespace, name=spec.agent.name),
        tool=spec.mcp_server.tool, mcp_path=spec.retrieval_service.mcp_path)


def dump_config(config: RetrievalServerConfig) -> str:
    """Canonical JSON (camelCase, sorted keys): what the operator writes to the ConfigMap."""
    return json.dumps(config.wire(), sort_keys=True, indent=2) + "\n"


def load_config(path: Path) -> RetrievalServerConfig:
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        raise ServerConfigError("the configuration is not JSON") from None
    try:
        return RetrievalServerConfig.from_wire(doc)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the configuration"
        raise ServerConfigError(f"{where}: {first['msg']}") from None
