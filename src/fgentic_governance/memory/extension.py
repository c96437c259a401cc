"""The oldest pgvector the content store may run on, and how its installed version is read.

pgvector 0.8.3 fixed "possible index corruption with HNSW vacuuming"; 0.8.4 fixed the
"hnsw graph not repaired" error with HNSW vacuuming and a possible error with inserts during
it. The store deletes entry by entry (erasure, hard expiry, caps), so (auto)vacuum visits its
HNSW indexes all the time: on an older pgvector the index every search reads could break.

The operator reads the version at start and every minute, beside the pinned settings
(controller/main.py ``check_settings``): below :data:`MIN_PGVECTOR`, or unreadable, every
MemoryScope's ``StoreReady`` is False with ``STORE_EXTENSION_OUTDATED`` and nothing is
granted. The version read is the catalog's (``pg_extension.extversion``): it is what
``ALTER EXTENSION vector UPDATE`` moves once the newer package is installed.
"""

from __future__ import annotations

import re
from typing import Any, Final

MIN_PGVECTOR: Final = (0, 8, 4)
"""The one definition of the oldest pgvector release the store accepts."""
MIN_PGVECTOR_TEXT: Final = ".".join(map(str, MIN_PGVECTOR))

# "0.8.6"; a missing patch number counts as 0. ASCII digits only (int() takes any Unicode
# digit), and a bounded number of them.
_VERSION: Final = re.compile(r"(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?", re.ASCII)
_INSTALLED: Final = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector'"


def parse(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a plain release number; None for anything else (a suffix such
    as ``-dev``, an empty or missing value), which the caller refuses."""
    found = _VERSION.fullmatch(text) if text is not None else None
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def outdated(text: str | None) -> bool:
    """Whether a store whose ``vector`` extension is at ``text`` is refused (fail closed: an
    absent or unreadable version is refused too)."""
    version = parse(text)
    return version is None or version < MIN_PGVECTOR


def spelt(text: str | None) -> str:
    """The version for a log line: rebuilt from its numbers, never the server's own text."""
    version = parse(text)
    return "unreadable" if version is None else ".".join(map(str, version))


async def installed(conn: Any) -> str | None:
    """``extversion`` of the ``vector`` extension in the connected database (None without)."""
    found = await conn.fetchval(_INSTALLED)
    return None if found is None else str(found)
