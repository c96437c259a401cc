"""docs/troubleshooting.md documents every bounded reason code, and only codes that exist.

Each vocabulary a platform engineer can meet (status, events, HTTP bodies, admission denials,
CLI output, metric labels, logs) must have a table row per code in its own ``## `` section of
the page, the code in backticks in the row's first cell; and every backticked ALL_CAPS token
anywhere on the page must be a code of one of these vocabularies or of a small allow-list, so
the page cannot drift either way. The enums the page leaves out on purpose are listed in its
"Left out on purpose" section.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

import pytest

from fgentic_governance.admission.policy import AdmissionCode
from fgentic_governance.contract.errors import Code as ContractCode
from fgentic_governance.controlapi.codes import ControlReason, Drift
from fgentic_governance.memory.errors import SQLSTATE_REASONS
from fgentic_governance.memoryapi.codes import ApiReason
from fgentic_governance.reasons import Reason
from fgentic_governance.retrieval.projector.core import ProjectorReason
from fgentic_governance.retrieval.render.rules import DEVIATIONS, UNENFORCEABLE
from fgentic_governance.retrieval.search.ingest import RowCode
from fgentic_governance.retrievalserver.codes import RetrievalServerReason
from fgentic_governance.serving.strict_json import Refusal
from tests.support.objects import ROOT

PAGE = ROOT / "docs" / "troubleshooting.md"


def _values(*enums: type[StrEnum]) -> frozenset[str]:
    return frozenset(member.value for enum in enums for member in enum)


# Vocabulary -> (its codes, the `## ` heading (prefix) whose tables need a row for each).
VOCABULARIES: dict[str, tuple[frozenset[str], str]] = {
    "AdmissionCode": (_values(AdmissionCode), "Admission denials"),
    "Reason": (_values(Reason), "Governance reason codes"),
    "ApiReason": (_values(ApiReason), "Memory API"),
    "ControlReason": (_values(ControlReason), "Control API"),
    "Drift": (_values(Drift), "Control API"),
    "Refusal": (_values(Refusal), "HTTP body refusals"),
    "ProjectorReason": (_values(ProjectorReason), "Identity projector"),
    "RetrievalServerReason": (_values(RetrievalServerReason), "Retrieval server"),
    "contract.Code": (_values(ContractCode), "Identity projection codes"),
    "rules.UNENFORCEABLE, rules.DEVIATIONS": (
        frozenset(UNENFORCEABLE) | frozenset(DEVIATIONS), "RetrievalBinding rendering codes"),
    "RowCode": (_values(RowCode), "CLI"),
}
KNOWN = frozenset().union(*(codes for codes, _ in VOCABULARIES.values()))
NOT_REASON_CODES = frozenset(SQLSTATE_REASONS) | {"HTTP_REQUEST_REJECTED", "KAGENT_URL",
                                                  "LOG_LEVEL"}
"""Backticked ALL_CAPS tokens that are no enum member: the store's FG SQLSTATEs, the shared
HTTP server's answer to a request aiohttp cannot parse (``serving/http.py``), and two of the
environment variables the webhook sets in a routed Pod."""

_SPAN = re.compile(r"`([^`\n]+)`")
_CODES = re.compile(r"[A-Z][A-Z0-9_]+(?:/[A-Z][A-Z0-9_]+)*")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell may hold an escaped pipe


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _codes(text: str) -> list[str]:
    """Every code-like backticked token (``A`` or ``A/B`` made of ALL_CAPS words), split."""
    return [code for span in _SPAN.findall(text) if _CODES.fullmatch(span)
            for code in span.split("/")]


def _sections(text: str) -> dict[str, str]:
    """``## `` heading -> the text up to the next ``## `` heading (subsections included)."""
    found: dict[str, str] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        found[heading.strip()] = body
    return found


def _section(heading: str) -> str:
    matches = [body for name, body in _sections(_text()).items() if name.startswith(heading)]
    assert len(matches) == 1, f"docs/troubleshooting.md needs one '## {heading}…' section"
    return matches[0]


def _rows(text: str) -> Iterable[list[str]]:
    """The cells of every table row that is neither a header separator nor empty."""
    for line in text.splitlines():
        if not line.startswith("|") or re.fullmatch(r"[|\s:-]+", line):
            continue
        yield [cell.strip() for cell in _CELL_SPLIT.split(line.strip().strip("|"))]


def _first_cell_codes(text: str) -> list[str]:
    return [code for cells in _rows(text) for code in _codes(cells[0])]


@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
def test_every_code_has_a_row_in_its_section(vocabulary: str) -> None:
    codes, heading = VOCABULARIES[vocabulary]
    documented = set(_first_cell_codes(_section(heading)))
    missing = sorted(codes - documented)
    assert not missing, (
        f"docs/troubleshooting.md, section '## {heading}…', has no row for these {vocabulary} "
        f"codes (add a row: `CODE` | where it is seen | what it means | what to check): "
        + ", ".join(missing))


def test_the_page_names_no_code_that_does_not_exist() -> None:
    unknown = sorted(set(_codes(_text())) - KNOWN - NOT_REASON_CODES)
    assert not unknown, (
        "docs/troubleshooting.md names codes that no vocabulary has (removed or renamed? "
        "update the page, or the test's allow-list if it is no reason code): "
        + ", ".join(unknown))


def test_no_code_has_two_rows_in_one_section() -> None:
    repeated = {}
    for heading in sorted({heading for _, heading in VOCABULARIES.values()}):
        codes = _first_cell_codes(_section(heading))
        twice = sorted({code for code in codes if codes.count(code) > 1})
        if twice:
            repeated[heading] = twice
    assert not repeated, f"docs/troubleshooting.md repeats rows: {repeated}"


def test_the_sqlstate_table_is_the_stores() -> None:
    table = {cells[0].strip("`"): cells[1].strip("`")
             for cells in _rows(_section("Store refusals by SQLSTATE"))
             if re.fullmatch(r"`FG[0-9]{3}`", cells[0])}
    expected = {state: reason.value for state, reason in SQLSTATE_REASONS.items()}
    assert table == expected, (
        "docs/troubleshooting.md's FG SQLSTATE rows differ from memory/errors.py "
        f"SQLSTATE_REASONS: documented {table}, store {expected}")


def test_the_checks_read_the_page_they_mean() -> None:
    """The parsing above finds what it looks for (a guard against a vacuous pass)."""
    assert len(_first_cell_codes(_section("Governance reason codes"))) == len(Reason)
    assert {"ROOM_CONTEXT_INVALID", "CALLER_MISMATCH"} <= set(
        _codes("`ROOM_CONTEXT_INVALID/CALLER_MISMATCH`"))
    assert _codes("`API_STATUS_<status>` `X-User-Id` `a2aVersion: \"0.3\"`") == []
