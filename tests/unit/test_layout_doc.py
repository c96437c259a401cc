"""docs/architecture.md's tree is the one description of the repository's layout.

It must name every package of both source roots, every top-level module of the shipped
package and every test tier, so it cannot fall behind the code; and no other page lists the
packages again (the README, CONTRIBUTING.md and docs/README.md link to the tree instead), so
there is one layout to keep true, not three.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.objects import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "fgentic_governance"
# Caches and private directories are not part of the layout.
_SKIPPED = re.compile(r"^(__pycache__|[._].*)$")
# A page listing this many packages as layout entries (a table row or a tree line that starts
# with the package) is a second layout; one or two named in passing are not.
MOST_PACKAGES_ELSEWHERE = 2


def _tree() -> str:
    """The first fenced block after the "The tree" heading."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n### The tree\n", 1)[1]
    return section.split("```", 2)[1]


def _names(tree: str, wanted: list[str]) -> list[str]:
    """Those of ``wanted`` the tree does not name as a whole word (``api/`` is not in
    ``memoryapi/`` or ``controlapi/``)."""
    return [name for name in wanted
            if not re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w])", tree)]


def _packages(root: Path, depth: int) -> list[str]:
    found = []
    for init in sorted(root.rglob("__init__.py")):
        package = init.parent
        parts = package.relative_to(root).parts
        if 0 < len(parts) <= depth and not any(_SKIPPED.match(p) for p in parts):
            found.append(f"{package.name}/")
    return found


def _layout_entries(text: str, packages: set[str]) -> set[str]:
    """The packages a page lists as layout entries: at the start of a table row or of a
    line in a tree, followed by a cell border or a column gap."""
    entry = re.compile(r"^\s*(?:\|\s*)?`?(?:src/fgentic_governance/)?([a-z_]+)/`?\s*(?:\||\s{2,})",
                       re.MULTILINE)
    return {name for name in entry.findall(text) if f"{name}/" in packages}


def test_the_tree_names_every_package_module_and_test_tier() -> None:
    wanted = _packages(SRC, depth=2)
    wanted += [m.name for m in sorted(SRC.glob("*.py")) if not _SKIPPED.match(m.name)
               and m.name != "__main__.py"]
    wanted += [m.name for m in sorted((SRC / "retrieval").glob("*.py"))
               if not _SKIPPED.match(m.name)]
    wanted += [f"devtools/{init.parent.name}/"
               for init in sorted((ROOT / "devtools").glob("*/__init__.py"))]
    wanted += [f"{d.name}/" for d in sorted((ROOT / "tests").iterdir())
               if d.is_dir() and not _SKIPPED.match(d.name)]
    missing = _names(_tree(), wanted)
    assert not missing, f"docs/architecture.md's tree does not name: {missing}"


def test_no_other_page_describes_the_layout_again() -> None:
    packages = set(_packages(SRC, depth=1))
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
             *sorted((ROOT / "docs").rglob("*.md"))]
    again: dict[str, list[str]] = {}
    for page in pages:
        if page == ARCHITECTURE:
            continue
        listed = _layout_entries(page.read_text(encoding="utf-8"), packages)
        if len(listed) > MOST_PACKAGES_ELSEWHERE:
            again[str(page.relative_to(ROOT))] = sorted(listed)
    assert not again, ("the layout belongs in docs/architecture.md's tree; link to it "
                       f"instead of listing the packages again: {again}")


def test_the_layout_check_sees_a_table_and_a_tree() -> None:
    """The check above would pass vacuously if its pattern matched nothing: it must see the
    tree it guards, and the README table it replaced."""
    packages = set(_packages(SRC, depth=1))
    table = ("| `src/fgentic_governance/api/` | ground | models |\n"
             "| `src/fgentic_governance/memory/` | store | the store |\n"
             "| `src/fgentic_governance/controller/` | process | the operator |\n")
    assert _layout_entries(table, packages) == {"api", "memory", "controller"}
    assert len(_layout_entries(_tree(), packages)) > MOST_PACKAGES_ELSEWHERE
