"""Helpers shared by the atheris harnesses: JSON-like values from fuzzer bytes, and the
content-free message checks the harnesses assert (an AssertionError is a finding)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import atheris

ROOT = Path(__file__).resolve().parents[1]
# Run from a plain checkout too (no `pip install -e .`).
for _source in (ROOT / "src",):
    if str(_source) not in sys.path:
        sys.path.append(str(_source))

MAX_DEPTH = 4


def json_value(fdp: atheris.FuzzedDataProvider, keys: list[str], depth: int = 0) -> Any:
    """A JSON-like value; object keys come mostly from `keys` so the fuzzer reaches fields."""
    kind = fdp.ConsumeIntInRange(0, 8 if depth < MAX_DEPTH else 5)
    value: Any
    if kind == 0:
        value = None
    elif kind == 1:
        value = fdp.ConsumeBool()
    elif kind == 2:
        value = fdp.ConsumeIntInRange(-(2**63), 2**63)
    elif kind == 3:
        value = fdp.ConsumeRegularFloat()
    elif kind in (4, 5):
        value = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 80))
    elif kind == 6:
        value = [json_value(fdp, keys, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    else:
        value = {}
        for _ in range(fdp.ConsumeIntInRange(0, 6)):
            if keys and fdp.ConsumeIntInRange(0, 4):
                key = keys[fdp.ConsumeIntInRange(0, len(keys) - 1)]
            else:
                key = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
            value[key] = json_value(fdp, keys, depth + 1)
    return value


def check_message(message: str, pattern: re.Pattern[str]) -> None:
    if pattern.fullmatch(message) is None:
        raise AssertionError("unbounded message")  # the message itself is never printed
