"""Every design-record citation in the repository resolves to a summary in docs/design/.

The records the code implements live outside the repository, so docs/design/ holds one page
per record (``adr-00NN.md``) with a heading per cited decision item (``## §27 ...``) and per
cited ADR 0017 sub-list item (``### Matrix rule 5 ...``). This test reads every citation -
``ADR 00NN``, ``ADR 00NN §N``, lists (``§3, §31``), ranges (``§19-§20``, ``§13-20``), ``section
N``, and ADR 0017's ``Matrix rule N``, ``OAuth rule N``, ``residual trust N``, ``Consequences
N`` - in every text file under the cited trees and fails naming each one whose page or heading
is missing, so citations and summaries cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.objects import ROOT

DESIGN = ROOT / "docs" / "design"
TREES = ("src", "devtools", "tests", "docs", "charts", "benchmarks", "hack")
# Build output and caches, not sources (src/*.egg-info is generated from the README).
_SKIPPED_PARTS = re.compile(r"^(__pycache__|\..+|.+\.egg-info)$")

_ITEM = r"(?:§|section\s+)\d+(?:\s*[-\u2013]\s*§?\d+)?"
# "ADR 0023", optionally followed by items: "§3, §31", "§19-§20", "§13-20", "section 14".
CITATION = re.compile(rf"ADR (00\d\d)((?:\s+{_ITEM})(?:(?:,\s*|\s+and\s+){_ITEM})*)?")
_NUMBERS = re.compile(r"(\d+)(?:\s*[-\u2013]\s*§?(\d+))?")
# ADR 0017's named sub-lists. Matrix and OAuth rules exist in no other record; residual trust
# and consequences count only right after an "ADR 0017" (ADR 0023 has consequences too).
_RULE = re.compile(r"\b(Matrix rule|OAuth rule) (\d+)\b")
_ADR_0017_LIST = re.compile(r"ADR 0017[^.;\n]{0,40}?\b([Rr]esidual trust|Consequences?) (\d+)\b")
# A citation wrapped onto the next line of a comment or docstring is read as one line.
_WRAP = re.compile(r"[ \t]*\n[ \t]*(?:#+|--|//|\*)?[ \t]*")
_HEADING = re.compile(r"^#{2,4} (§\d+|Matrix rule \d+|OAuth rule \d+|Residual trust \d+|"
                      r"Consequence \d+)\b", re.MULTILINE)
_MAX_RANGE = 50


def _sources() -> Iterator[Path]:
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            relative = path.relative_to(ROOT).parts
            if path.is_file() and not any(_SKIPPED_PARTS.match(p) for p in relative):
                yield path


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # an archive or image: it cites nothing
        return None


def items(sections: str) -> list[int]:
    """The decision items one citation names, ranges expanded."""
    found: list[int] = []
    for low, high in _NUMBERS.findall(sections):
        first, last = int(low), int(high or low)
        if last < first or last - first >= _MAX_RANGE:
            raise ValueError(f"not a range of decision items: {low}-{high}")
        found.extend(range(first, last + 1))
    return found


def citations(text: str) -> Iterator[tuple[str, str | None]]:
    """(page, heading) for each citation in one text; heading None: the page alone."""
    joined = _WRAP.sub(" ", text)
    for match in CITATION.finditer(joined):
        page = f"adr-{match.group(1)}.md"
        yield page, None
        for item in items(match.group(2) or ""):
            yield page, f"§{item}"
    for name, number in _RULE.findall(joined):
        yield "adr-0017.md", f"{name} {number}"
    for name, number in _ADR_0017_LIST.findall(joined):
        kind = "Consequence" if name.startswith("Consequence") else "Residual trust"
        yield "adr-0017.md", f"{kind} {number}"


def _headings(page: Path) -> set[str]:
    return set(_HEADING.findall(page.read_text(encoding="utf-8"))) if page.is_file() else set()


def _all_citations() -> dict[tuple[str, str | None], list[str]]:
    where: dict[tuple[str, str | None], list[str]] = {}
    for path in _sources():
        text = _text(path)
        for cited in citations(text) if text else ():
            where.setdefault(cited, []).append(str(path.relative_to(ROOT)))
    return where


@pytest.mark.parametrize(("text", "expected"), [
    ("(ADR 0023 §3, §31; ADR 0017 Matrix rule 1)",
     [("adr-0023.md", None), ("adr-0023.md", "§3"), ("adr-0023.md", "§31"),
      ("adr-0017.md", None), ("adr-0017.md", "Matrix rule 1")]),
    ("ADR 0017 §3\u2013§8, §12", [("adr-0017.md", None)]
     + [("adr-0017.md", f"§{n}") for n in (3, 4, 5, 6, 7, 8, 12)]),
    ("ADR 0023 §13-20 over", [("adr-0023.md", None)]
     + [("adr-0023.md", f"§{n}") for n in range(13, 21)]),
    ("# ADR 0023\n# §42, per Agent", [("adr-0023.md", None), ("adr-0023.md", "§42")]),
    ('"(ADR 0017 section 14)"', [("adr-0017.md", None), ("adr-0017.md", "§14")]),
    ("ADR 0024's model; issue 38 §7", [("adr-0024.md", None)]),
    ("(ADR 0017, residual trust 2)", [("adr-0017.md", None), ("adr-0017.md", "Residual trust 2")]),
    ("(ADR 0017 §11, Consequences 5)", [("adr-0017.md", None), ("adr-0017.md", "§11"),
                                        ("adr-0017.md", "Consequence 5")]),
])
def test_citations_are_read_in_every_written_form(
    text: str, expected: list[tuple[str, str | None]],
) -> None:
    assert list(citations(text)) == expected


def test_a_citation_range_that_is_no_range_is_refused() -> None:
    with pytest.raises(ValueError, match="not a range"):
        items("§43-3")


def test_every_design_citation_resolves_in_docs_design() -> None:
    cited = _all_citations()
    # Guard against a reader that silently finds nothing (the repository cites ~200 times).
    assert sum(map(len, cited.values())) > 150, "the citation reader found almost nothing"
    headings = {page: _headings(DESIGN / page) for page, _ in cited}
    unresolved = sorted(
        f"{page} {heading or '(page)'}: {', '.join(sorted(set(files))[:3])}"
        for (page, heading), files in cited.items()
        if not (DESIGN / page).is_file() or (heading and heading not in headings[page]))
    assert not unresolved, "design citations with no summary in docs/design/:\n" + "\n".join(
        unresolved)


def test_the_design_index_lists_every_page() -> None:
    index = (DESIGN / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DESIGN.glob("*.md") if p.name != "README.md")
    assert pages, "docs/design/ has no pages"
    assert [p for p in pages if f"]({p})" not in index] == []
