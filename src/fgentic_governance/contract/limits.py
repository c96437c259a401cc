"""Numbers and grammars fixed by ADR 0017; every other contract module reads them from here.

Patterns are written in the common subset of ECMA-262 (what JSON Schema `pattern` means) and
Rust's regex crate (what pydantic-core runs), so the generated schemas and the models accept the
same strings. They are anchored because both engines search rather than match. (Python's `re`,
which the `jsonschema` package uses, also lets `$` match before one final newline; the models
reject such a string, so a Python-side schema check is never the only gate.)
"""

from __future__ import annotations

from typing import Final


def utf8_bytes(text: str) -> int | None:
    """The UTF-8 size of ``text``, or None for text with a lone surrogate (not storable).

    None rather than an exception: a refusal raised in a ``UnicodeEncodeError`` handler would
    keep the codec's error, which quotes the text, as its ``__context__``; callers refuse
    outside any handler.
    """
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None

# Carrier ceilings ("Projection contract"): they bound kagent's persisted session metadata.
MAX_ENCODED_BYTES: Final = 8192
MAX_DECODED_BYTES: Final = 6144

# Validity window: 1 <= exp - iat <= 600, at most 30 s of positive clock skew.
MAX_LIFETIME_SECONDS: Final = 600
MATRIX_LIFETIME_SECONDS: Final = 600
CLOCK_SKEW_SECONDS: Final = 30
# JCS serialises numbers as IEEE doubles; integers beyond 2**53 - 1 have no exact form.
MAX_SAFE_INTEGER: Final = 2**53 - 1

MAX_AUDIENCE: Final = 16
MAX_PARTNER_GROUPS: Final = 16
MAX_ID_BYTES: Final = 255  # MXIDs, room and event IDs, OAuth audience and azp
MAX_ISSUER_BYTES: Final = 512
# Not fixed by the ADR: generous bounds that keep the digest input small. A room with more
# members cannot have an audience of at most 16 readers anyway.
MAX_JOINED: Final = 64
MAX_ACL_ENTRIES: Final = 64

DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LOWER_HEX_64: Final = r"^[0-9a-f]{64}$"
# Matrix spec grammar: dns-name is 1*255 of ALPHA / DIGIT / "-" / "."; an IPv6 literal is
# bracketed; an optional port of at most five digits.
_SERVER = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?"
_NAMED_SERVER = r"[A-Za-z0-9.-]+(:[0-9]{1,5})?"
_LOCALPART = r"@[a-z0-9._=/+-]+"
_ROOM_HASH = r"![A-Za-z0-9._~+/=-]+"
# The one MXID grammar, in two forms (a bare localpart, without ':', fails both):
# - MXID: any user ID the Matrix grammar admits (a DNS name, IPv4 or bracketed IPv6 server,
#   optional port): projections, room members, snapshots.
# - SUBJECT_MXID: a governed subject (MemoryScope, ConsentRecord, PrincipalOffboarding,
#   control API commands, the store's scope record): the same, without IPv6 literals, because
#   the local homeserver it must name is a DNS name (the store's SQL guard checks this form).
MXID: Final = "^" + _LOCALPART + ":" + _SERVER + "$"
SUBJECT_MXID: Final = "^" + _LOCALPART + ":" + _NAMED_SERVER + "$"
# Room v12 IDs are a bare hash; earlier versions carry a server name. Same for event IDs.
ROOM_ID: Final = "^" + _ROOM_HASH + "(:" + _SERVER + ")?$"
CONTROL_ROOM_ID: Final = "^" + _ROOM_HASH + "(:" + _NAMED_SERVER + ")?$"
"""A scope's control room (no IPv6 literal server, as SUBJECT_MXID)."""
EVENT_ID: Final = r"^\$[A-Za-z0-9._~+/=-]+(:" + _SERVER + ")?$"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
PARTNER_GROUP: Final = r"^partner/" + _LABEL + "/" + _LABEL + "$"
MAX_PARTNER_GROUP_CHARS: Final = len("partner/") + 63 + 1 + 63
# Server ACL globs: printable ASCII without spaces (server names, '*' and '?').
ACL_ENTRY: Final = r"^[!-~]+$"
