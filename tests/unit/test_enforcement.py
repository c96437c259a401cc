"""Per-rule roll-out (admission/enforcement.py): only the TTL rules may warn; a warned rule
admits with a warning, every other rule still denies, and the audit reports it as ``warn``."""

from __future__ import annotations

from typing import Any

import pytest

from fgentic_governance.admission import enforcement, reports
from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.admission.review import Reviewer, response
from tests.support.reviews import STATE, agent, lookups, ready_routing, review

TTL = frozenset({AdmissionCode.MEMORY_TTL_MISSING, AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION})
MISSING = Denial(AdmissionCode.MEMORY_TTL_MISSING, "spec.declarative.memory.ttlDays")
LEAK = Denial(AdmissionCode.FORBIDDEN_HEADER, "spec.declarative.tools[0]", "Cookie")


def test_only_the_ttl_rules_may_warn() -> None:
    assert enforcement.WARNABLE == TTL
    assert enforcement.warned_rules([c.value for c in TTL]) == TTL
    assert enforcement.warned_rules([]) == frozenset()


OTHERS = sorted({c.value for c in AdmissionCode} - {c.value for c in TTL})


@pytest.mark.parametrize("code", [*OTHERS, "NOT_A_CODE", "memory_ttl_missing"])
def test_every_other_rule_refuses_to_warn(code: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        enforcement.warned_rules(["MEMORY_TTL_MISSING", code])
    assert str(stopped.value.code).startswith(f"--warn-rule {code}: only ")


def test_a_warning_admits_and_a_denial_still_refuses_beside_it() -> None:
    denied, warned = enforcement.split([LEAK, MISSING], TTL)
    assert (denied, warned) == ([LEAK], [MISSING])
    only = response("u-1", [], (), [MISSING])["response"]
    assert only["allowed"] is True
    assert only["warnings"] == ["MEMORY_TTL_MISSING at spec.declarative.memory.ttlDays: set "
                                "memory.ttlDays (kagent keeps entries 15 days otherwise)"]
    both = response("u-1", [LEAK], (), [MISSING])["response"]
    assert both["allowed"] is False and both["warnings"] == only["warnings"]
    assert both["status"]["message"].startswith("FORBIDDEN_HEADER at ")
    assert "warnings" not in response("u-1", [LEAK])["response"]


def _memory_agent(**memory: Any) -> dict[str, Any]:
    doc = agent("mem")
    doc["spec"]["declarative"]["memory"] = {"modelConfig": "embed", **memory}
    return doc


async def test_the_reviewer_warns_only_for_the_rules_it_was_started_with() -> None:
    routed = ready_routing([])
    strict = Reviewer(lookups(STATE, STATE), "fgentic.local", routed)
    lenient = Reviewer(lookups(STATE, STATE), "fgentic.local", routed, TTL)
    for doc in (_memory_agent(), _memory_agent(ttlDays=5)):
        refused = (await strict(review(doc), webhook="agents"))["response"]
        admitted = (await lenient(review(doc), webhook="agents"))["response"]
        assert refused["allowed"] is False and "warnings" not in refused
        assert admitted["allowed"] is True
        assert admitted["warnings"] == [refused["status"]["message"]]
    # Without the routing the memory path itself is ungoverned: that never warns.
    bare = Reviewer(lookups(STATE, STATE), "fgentic.local", None, TTL)
    out = (await bare(review(_memory_agent()), webhook="agents"))["response"]
    assert out["allowed"] is False
    assert out["status"]["message"].startswith("MEMORY_RUNTIME_UNGOVERNED")


def test_the_audit_reports_a_warned_rule_as_warn() -> None:
    doc = _memory_agent()
    doc["metadata"]["uid"] = "uid-1"
    strict = reports.namespace_reports([(doc, [MISSING, LEAK])])["ns"]
    warned = reports.namespace_reports([(doc, [MISSING, LEAK])], TTL)["ns"]
    assert strict["summary"]["fail"] == 2 and strict["summary"]["warn"] == 0
    assert warned["summary"]["fail"] == 1 and warned["summary"]["warn"] == 1
    result = {r["rule"]: r["result"] for r in warned["results"]}
    assert result == {"MEMORY_TTL_MISSING": "warn", "FORBIDDEN_HEADER": "fail"}
