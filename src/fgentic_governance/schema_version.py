"""The fenced store's schema version, counted from the shipped migration files.

Kept apart from the ``memory`` package: the webhook compares it with a scope's status and must
not import the store client (asyncpg, pools, SQL) to learn one integer: that would double the
webhook's resident memory.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.abc import Traversable
from typing import Final

MIGRATION_FILE: Final = re.compile(r"^(?P<version>\d{4})_[a-z0-9_]+\.sql$")


def migration_files() -> list[Traversable]:
    """The shipped migrations (``memory/sql/NNNN_*.sql``), in numeric order. Read through the
    top-level package so that ``fgentic_governance.memory`` is not imported."""
    sql = resources.files("fgentic_governance").joinpath("memory", "sql")
    return sorted((item for item in sql.iterdir() if MIGRATION_FILE.match(item.name)),
                  key=lambda item: item.name)


SCHEMA_VERSION: Final = len(migration_files())
"""The schema version this code requires."""
