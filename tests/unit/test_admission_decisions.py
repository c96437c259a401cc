"""Issue 37 item 11: the webhook logs one content-free line per answer with a code, and
``fgentic_admission_decisions_total`` counts every code of an answer (docs/observability.md)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

from fgentic_governance.admission.policy import AdmissionCode
from fgentic_governance.admission.review import Reviewer
from tests.support.reviews import SENTINEL, STATE, agent, lookups, ready_routing, review

TTL = frozenset({AdmissionCode.MEMORY_TTL_MISSING})


def decisions(route: str, allowed: str, reason: str) -> float:
    value = REGISTRY.get_sample_value("fgentic_admission_decisions_total",
                                      {"webhook": route, "allowed": allowed, "reason": reason})
    return value or 0.0


def _two_denials() -> dict[str, Any]:
    """FORBIDDEN_HEADER twice (two headers) and MEMORY_TTL_MISSING, in one answer."""
    doc = agent("mem", headers=["Cookie", SENTINEL])
    doc["spec"]["declarative"]["memory"] = {"modelConfig": "embed"}
    return doc


def _request(doc: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    request = review(doc)
    request["request"]["namespace"] = namespace
    return request


def _reviewer(warned: frozenset[AdmissionCode] = frozenset(), *,
              audit_only: bool = False) -> Reviewer:
    return Reviewer(lookups(STATE, STATE), "fgentic.local", ready_routing([]), warned,
                    audit_only=audit_only)


async def test_every_code_of_a_multi_denial_answer_is_counted_once() -> None:
    codes = ("FORBIDDEN_HEADER", "MEMORY_TTL_MISSING")
    before = {code: decisions("agents", "false", code) for code in codes}
    answer = (await _reviewer()(_request(_two_denials()), webhook="agents"))["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"].count("FORBIDDEN_HEADER at ") == 2
    assert {code: decisions("agents", "false", code) - before[code] for code in codes} == \
        dict.fromkeys(codes, 1.0)


async def test_a_warned_code_counts_as_admitted_beside_the_refusing_ones() -> None:
    denied = decisions("agents", "false", "FORBIDDEN_HEADER")
    warned = decisions("agents", "true", "MEMORY_TTL_MISSING")
    ok = decisions("agents", "true", "OK")
    reviewer = _reviewer(TTL)
    await reviewer(_request(_two_denials()), webhook="agents")
    assert decisions("agents", "false", "FORBIDDEN_HEADER") == denied + 1
    assert decisions("agents", "true", "MEMORY_TTL_MISSING") == warned + 1
    await reviewer(review(agent()), webhook="agents")  # compliant: one OK
    assert decisions("agents", "true", "OK") == ok + 1


async def test_each_denial_is_one_content_free_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    reviewer = _reviewer(TTL)
    with caplog.at_level(logging.INFO, logger="fgentic_governance.admission.review"):
        await reviewer(_request(_two_denials(), "team-a"), webhook="agents")
        await reviewer(review(agent()), webhook="agents")  # admitted: no line
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["review denied route=agents operation=CREATE kind=Agent namespace=team-a "
                     "codes=FORBIDDEN_HEADER warned=MEMORY_TTL_MISSING"]
    assert SENTINEL.lower() not in caplog.text.lower()  # neither the name nor a header


async def test_an_audit_only_answer_is_logged_as_warned_and_odd_fields_as_dashes(
        caplog: pytest.LogCaptureFixture) -> None:
    request = _request(_two_denials(), f"Team\n{SENTINEL}")
    reviewer = _reviewer(audit_only=True)
    with caplog.at_level(logging.INFO, logger="fgentic_governance.admission.review"):
        answer = (await reviewer(request, webhook="agents"))["response"]
    assert answer["allowed"] is True
    [line] = [r.getMessage() for r in caplog.records]
    assert line == ("review warned route=agents operation=CREATE kind=Agent namespace=- "
                    "codes=FORBIDDEN_HEADER,MEMORY_TTL_MISSING")
    assert SENTINEL.lower() not in caplog.text.lower()
