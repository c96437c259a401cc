"""docs/README.md is the one index of docs/: every page is reachable from it, and no link in it
points to a missing file, so a newcomer can walk the docs and the index cannot drift either way.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.objects import ROOT

DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
# A Markdown inline link's target, without its #anchor; external schemes are left out below.
_LINK = re.compile(r"\]\(([^)#\s]*)(?:#[^)\s]*)?\)")


def _relative_targets() -> list[str]:
    targets = _LINK.findall(INDEX.read_text(encoding="utf-8"))
    return [t for t in targets if t and not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def _resolved() -> set[Path]:
    return {(DOCS / target).resolve() for target in _relative_targets()}


def test_every_docs_page_is_linked_from_the_index() -> None:
    pages = {page.resolve() for page in DOCS.glob("*.md") if page != INDEX}
    missing = sorted(page.name for page in pages - _resolved())
    assert not missing, f"docs pages not linked from docs/README.md: {missing}"


def test_every_relative_link_in_the_index_points_to_a_file() -> None:
    broken = sorted(t for t in _relative_targets() if not (DOCS / t).is_file())
    assert not broken, f"docs/README.md links to missing files: {broken}"
