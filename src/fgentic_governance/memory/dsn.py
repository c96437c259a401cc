"""Every store connection goes to the primary: the one rule for a store DSN.

A highly available store is several servers, one primary and its standbys (docs/ha.md). Its DSN
may name them all (``postgresql://U@H1:P1,H2:P2,H3:P3/DB``); libpq and asyncpg then connect
to the first that answers, a standby included, unless ``target_session_attrs`` says otherwise.
A fence, a delete or a cost charge on a standby is refused, and worse, an erasure's read-back
on a lagging standby could see nothing where the primary still holds rows. So every pool of
ours connects with ``target_session_attrs=read-write``: added where the DSN names none, and a
DSN that names another value (``any``, ``standby``, ``read-only``, ...) is refused at start-up.
The message names the parameter only, never the DSN (it may carry a password).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ATTRIBUTE: Final = "target_session_attrs"
READ_WRITE: Final = "read-write"


class StoreDsnError(ValueError):
    """A store DSN that would let a connection land on a standby; the text is content-free."""


def problem(dsn: str) -> str | None:
    """Why ``dsn`` cannot be a store DSN of ours, or None."""
    try:
        values = [v for k, v in parse_qsl(urlsplit(dsn).query, keep_blank_values=True)
                  if k == ATTRIBUTE]
    except ValueError:
        return "not a PostgreSQL URI (postgresql://USER@HOST:PORT/DB)"
    if any(value != READ_WRITE for value in values):
        return (f"{ATTRIBUTE} must be {READ_WRITE} (or absent, which means {READ_WRITE}): "
                "every store call writes or verifies on the primary")
    return None


def read_write(dsn: str) -> str:
    """``dsn`` with ``target_session_attrs=read-write``; StoreDsnError for another value."""
    dsn = dsn.strip()
    found = problem(dsn)
    if found:
        raise StoreDsnError(found)
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == ATTRIBUTE for key, _ in query):
        return dsn
    return urlunsplit(parts._replace(query=urlencode([*query, (ATTRIBUTE, READ_WRITE)])))


def from_file(path: Path) -> str:
    """The read-write DSN a mounted Secret holds: every process's one way to read its store."""
    return read_write(path.read_text())


__all__ = ["ATTRIBUTE", "READ_WRITE", "StoreDsnError", "from_file", "problem", "read_write"]
