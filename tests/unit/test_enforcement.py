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


# -- audit-only mode (issue 37 item 10) --------------------------------------------------------

AUDIT = enforcement.Enforcement(audit_only=True)


def test_audit_only_warns_for_every_rule_and_refuses_only_what_no_api_server_sends() -> None:
    assert frozenset(AdmissionCode) == enforcement.AUDITED | enforcement.NOT_RULES
    for code in AdmissionCode:
        denied, warned = AUDIT.split([Denial(code, "spec")])
        assert (denied == []) is (code in enforcement.AUDITED), code
        assert (warned == []) is (code in enforcement.NOT_RULES), code
    assert {AdmissionCode.REVIEW_MALFORMED,
                                     AdmissionCode.UNSUPPORTED_KIND} == enforcement.NOT_RULES


def test_an_audit_only_warning_says_it_was_not_denied_and_the_memory_risk() -> None:
    assert AUDIT.warning(LEAK).endswith("X-Fgentic-Identity (audit-only, not denied)")
    ungated = Denial(AdmissionCode.MEMORY_UNGATED, "spec.declarative.memory")
    assert AUDIT.warning(ungated).endswith(
        "(audit-only, not denied: a memory rule, memory may bypass governance)")
    # A rule the platform chose to warn keeps its plain warning (the store bounds it anyway).
    both = enforcement.Enforcement(TTL, audit_only=True)
    assert both.warning(MISSING) == enforcement.Enforcement(TTL).warning(MISSING)
    for code in enforcement.MEMORY_RISK:  # the start-up line names every memory rule
        assert code.value in enforcement.AUDIT_RISK
    assert "memory rules" in enforcement.AUDIT_RISK and "consent" in enforcement.AUDIT_RISK
    assert not enforcement.MEMORY_RISK & enforcement.WARNABLE


async def test_an_audit_only_reviewer_admits_what_it_would_deny_with_warnings() -> None:
    leaky = agent(headers=["X-Fgentic-Identity", "Cookie"])
    leaky["spec"]["declarative"]["memory"] = {"modelConfig": "embed"}
    strict = Reviewer(lookups(STATE, STATE), "fgentic.local", None)
    audit_only = Reviewer(lookups(STATE, STATE), "fgentic.local", None, audit_only=True)
    refused = (await strict(review(leaky), webhook="agents"))["response"]
    admitted = (await audit_only(review(leaky), webhook="agents"))["response"]
    assert refused["allowed"] is False and "warnings" not in refused
    assert admitted["allowed"] is True and "status" not in admitted
    messages = refused["status"]["message"].split("; ")
    assert len(messages) >= 2
    assert [w.rpartition(" (audit-only")[0] for w in admitted["warnings"]] == messages
    # Not a rule: a kind no route reviews is refused in every mode.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    other = (await audit_only(review(pod), webhook="agents"))["response"]
    assert other["allowed"] is False
    assert other["status"]["message"].startswith("UNSUPPORTED_KIND at kind")


def test_the_rendered_admission_policies_only_warn_and_audit_in_audit_only_mode() -> None:
    from fgentic_governance.admission.render import admission_policy, scope_policy

    for policies in ((admission_policy(), scope_policy("fgentic.local")),):
        for _, binding in policies:
            assert binding["spec"]["validationActions"] == ["Deny"]
    for _, binding in (admission_policy(audit_only=True),
                       scope_policy("fgentic.local", audit_only=True)):
        assert binding["spec"]["validationActions"] == ["Warn", "Audit"]


def test_the_webhook_takes_its_enforcement_from_one_flag() -> None:
    from fgentic_governance.cli import _parser

    args = _parser().parse_args(["webhook", "--tls-dir", "/tmp", "--enforcement", "audit"])
    assert args.enforcement == "audit"
    assert _parser().parse_args(["webhook", "--tls-dir", "/tmp"]).enforcement == "deny"
    with pytest.raises(SystemExit):
        _parser().parse_args(["webhook", "--tls-dir", "/tmp", "--enforcement", "warn"])
