"""Admission policy as pure functions of an object (no I/O, no framework).

A denial carries a bounded reason code and a field path; its message never repeats a value
from the object other than a header name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

IDENTITY_HEADER = "x-fgentic-identity"


class Code(StrEnum):
    FORBIDDEN_HEADER = "FORBIDDEN_HEADER"
    IDENTITY_HEADER_UNBOUND = "IDENTITY_HEADER_UNBOUND"
    MALFORMED_OBJECT = "MALFORMED_OBJECT"


@dataclass(frozen=True)
class Denial:
    code: Code
    path: str
    header: str = ""

    def message(self) -> str:
        suffix = f" ({self.header})" if self.header else ""
        return f"{self.code.value} at {self.path}{suffix}"


def _tools(agent: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    declarative = (agent.get("spec") or {}).get("declarative") or {}
    tools = declarative.get("tools") or []
    if not isinstance(tools, list):
        raise TypeError("tools")
    yield from enumerate(tools)


def header_denials(agent: Mapping[str, Any]) -> list[Denial]:
    """Every propagated header except the identity carrier is forbidden (ADR 0017 §10).

    The carrier itself is admitted only by a RetrievalBinding naming this Agent and server;
    binding-aware evaluation arrives with the full policy, so here it is denied too.
    """
    denials = []
    try:
        for index, tool in _tools(agent):
            mcp = tool.get("mcpServer") or {}
            for position, header in enumerate(mcp.get("allowedHeaders") or []):
                path = f"spec.declarative.tools[{index}].mcpServer.allowedHeaders[{position}]"
                name = str(header).strip().lower()
                if name == IDENTITY_HEADER:
                    denials.append(Denial(Code.IDENTITY_HEADER_UNBOUND, path, IDENTITY_HEADER))
                else:
                    denials.append(Denial(Code.FORBIDDEN_HEADER, path, _safe_name(name)))
    except (TypeError, AttributeError):
        return [Denial(Code.MALFORMED_OBJECT, "spec.declarative.tools")]
    return denials


def _safe_name(name: str) -> str:
    """A header name is echoed only when it looks like one (bounded token characters)."""
    ok = 0 < len(name) <= 64 and all(c.isalnum() or c in "-_*" for c in name)
    return name if ok else "<invalid header name>"
