"""Process-wide settings the handlers read (set once at start-up by the runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RuntimeContext:
    local_homeserver: str = ""
    store_ready: bool = False
    api_client: Any = None


_CONTEXT = RuntimeContext()


def context() -> RuntimeContext:
    return _CONTEXT


def configure(**values: Any) -> RuntimeContext:
    for key, value in values.items():
        setattr(_CONTEXT, key, value)
    return _CONTEXT
