"""The contract's one error type and its bounded, content-free reason codes.

A projection header is personal/security metadata (ADR 0017, residual trust 2): it must never
reach a log line. So a failure carries only a code from this closed enum and, optionally, a path
made of the contract's own field names and list indices. The path is checked against that fixed
vocabulary before it is stored, so neither `str()` nor `repr()` can echo caller-controlled bytes.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Code(StrEnum):
    """Why a header, projection, room context or snapshot was rejected."""

    # Header carrier: exactly one value, bounded, unpadded base64url.
    HEADER_MISSING = "HEADER_MISSING"
    HEADER_DUPLICATE = "HEADER_DUPLICATE"
    HEADER_TOO_LARGE = "HEADER_TOO_LARGE"
    NOT_BASE64URL = "NOT_BASE64URL"
    DECODED_TOO_LARGE = "DECODED_TOO_LARGE"
    # JSON text: strict UTF-8, strict JSON, RFC 8785 canonical form.
    NOT_UTF8 = "NOT_UTF8"
    NOT_JSON = "NOT_JSON"
    DUPLICATE_NAME = "DUPLICATE_NAME"
    NUMBER_INVALID = "NUMBER_INVALID"
    NOT_CANONICAL = "NOT_CANONICAL"
    # Shape: what the generated JSON Schemas express.
    UNKNOWN_FIELD = "UNKNOWN_FIELD"
    FIELD_MISSING = "FIELD_MISSING"
    VERSION_UNSUPPORTED = "VERSION_UNSUPPORTED"
    SHAPE_INVALID = "SHAPE_INVALID"
    # Semantics: cross-field rules the schemas cannot express.
    LIFETIME_INVALID = "LIFETIME_INVALID"
    NOT_YET_VALID = "NOT_YET_VALID"
    EXPIRED = "EXPIRED"
    AUDIENCE_INVALID = "AUDIENCE_INVALID"
    GROUPS_INVALID = "GROUPS_INVALID"
    CALLER_MISMATCH = "CALLER_MISMATCH"
    AGENT_MISMATCH = "AGENT_MISMATCH"
    SNAPSHOT_INVALID = "SNAPSHOT_INVALID"


# A path is dotted field names with optional [index] suffixes; nothing else is representable.
_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\[[0-9]+\])*(\.[a-z_][a-z0-9_]*(\[[0-9]+\])*)*$")


class ContractError(ValueError):
    """The only exception the contract raises for bad input. `str()` is the code (and path)."""

    code: Code
    path: str

    def __init__(self, code: Code, path: str = "") -> None:
        # Paths are built from model field names only; refuse anything else rather than risk
        # carrying input into an exception that may be logged.
        safe = path if _PATH.fullmatch(path) else ""
        super().__init__(f"{code.value} at {safe}" if safe else code.value)
        self.code = code
        self.path = safe

    def __repr__(self) -> str:
        return f"ContractError({self.args[0]!r})"
