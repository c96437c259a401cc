"""The chart's alerts, evaluated by Prometheus' own rule engine (``promtool test rules``).

Issue 37 item 4: ``sum(...) == 0`` and ``min(...) == 0`` return nothing when no pod is
scraped (the webhook scaled to 0), so the alerts meant for that moment could not fire. Each
case renders the PrometheusRule with ``helm template``, feeds promtool series as the chart's
ServiceMonitor scrapes them (the Service's namespace and name as labels) for no pod, one pod
and two pods, and states which alert fires and with which labels.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_devenv.binaries import binary
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration
CHART = ROOT / "charts" / "fgentic-governance"
NS = "fgentic-system"
WEBHOOK = {"namespace": NS, "service": "fg-webhook"}
OPERATOR = {"namespace": NS, "service": "fg-operator-metrics"}
MEMORY_API = {"namespace": NS, "service": "fg-memory-api"}
ELSEWHERE = {"namespace": "other-team", "service": "fg-operator-metrics"}
"""Another release of the chart, in another namespace: its series must not count for ours."""
DAY = 86400


def _series(name: str, where: dict[str, str], pod: str, values: str,
            **labels: str) -> dict[str, str]:
    """One scraped series in promtool's notation (30 s apart: ``1x10`` is 1 for 5 min,
    ``_`` a missed scrape, ``stale`` the marker Prometheus writes when a target goes)."""
    every = {**where, "job": where["service"], "pod": pod, "instance": f"{pod}:8080",
             **labels}
    body = ", ".join(f'{k}="{v}"' for k, v in every.items())
    return {"series": f"{name}{{{body}}}", "values": values}


@dataclass(frozen=True)
class Case:
    """At ``at``, ``alert`` fires once with ``labels`` (besides its own), or not at all."""

    alert: str
    series: list[dict[str, str]]
    at: str
    fires: dict[str, str] | None = field(default=None)


def up(where: dict[str, str], pod: str, values: str) -> dict[str, str]:
    return _series("up", where, pod, values)


def leading(where: dict[str, str], pod: str, values: str) -> dict[str, str]:
    return _series("fgentic_operator_leading", where, pod, values)


def store_up(pod: str, values: str) -> dict[str, str]:
    return _series("fgentic_store_up", MEMORY_API, pod, values)


def erasures(reason: str, values: str) -> dict[str, str]:
    return _series("fgentic_memory_store_operations_total", OPERATOR, "fg-operator-0", values,
                   operation="erase_scope", reason=reason)


NO_LABELS: dict[str, str] = {}
"""The aggregate's answer (sum/min over the replicas): no label but the rule's own."""

CASES = {
    # The webhook: `for: 2m`.
    "webhook/no pod scraped": Case("FgenticWebhookUnavailable", [], "5m", WEBHOOK),
    "webhook/scaled to 0": Case("FgenticWebhookUnavailable",
                                [up(WEBHOOK, "a", "1x4 stale"), up(WEBHOOK, "b", "1x4 stale")],
                                "5m", WEBHOOK),
    "webhook/only another release's is up": Case(
        "FgenticWebhookUnavailable", [up({**WEBHOOK, "namespace": "other-team"}, "a", "1x10")],
        "5m", WEBHOOK),
    "webhook/one pod up": Case("FgenticWebhookUnavailable", [up(WEBHOOK, "a", "1x10")], "5m"),
    "webhook/two pods, one down": Case(
        "FgenticWebhookUnavailable", [up(WEBHOOK, "a", "1x10"), up(WEBHOOK, "b", "0x10")], "5m"),
    "webhook/two pods down": Case(
        "FgenticWebhookUnavailable", [up(WEBHOOK, "a", "0x10"), up(WEBHOOK, "b", "0x10")], "5m",
        NO_LABELS),
    "webhook/down for less than 2m": Case(
        "FgenticWebhookUnavailable", [up(WEBHOOK, "a", "1x8 0x2")], "5m"),
    # The operator: `for: 5m`.
    "operator/no pod scraped": Case("FgenticOperatorNotLeading", [], "10m", OPERATOR),
    "operator/only another release's leads": Case(
        "FgenticOperatorNotLeading", [leading(ELSEWHERE, "x", "1x20")], "10m", OPERATOR),
    "operator/ours stands by while another release's leads": Case(
        "FgenticOperatorNotLeading",
        [leading(ELSEWHERE, "x", "1x20"), leading(OPERATOR, "a", "0x20")], "10m", NO_LABELS),
    "operator/one pod leads": Case("FgenticOperatorNotLeading",
                                   [leading(OPERATOR, "a", "1x20")], "10m"),
    "operator/two pods, one leads": Case(
        "FgenticOperatorNotLeading",
        [leading(OPERATOR, "a", "1x20"), leading(OPERATOR, "b", "0x20")], "10m"),
    "operator/the leader went, the standby never took over": Case(
        "FgenticOperatorNotLeading",
        [leading(OPERATOR, "a", "1x4 stale"), leading(OPERATOR, "b", "0x20")], "10m", NO_LABELS),
    # The memory API's view of the store: `for: 5m`.
    "store/no memory API pod scraped": Case("FgenticStoreDown", [], "10m", MEMORY_API),
    "store/one pod, store up": Case("FgenticStoreDown", [store_up("a", "1x20")], "10m"),
    "store/two pods, store up": Case(
        "FgenticStoreDown", [store_up("a", "1x20"), store_up("b", "1x20")], "10m"),
    "store/two pods, one cannot reach it": Case(
        "FgenticStoreDown", [store_up("a", "1x20"), store_up("b", "0x20")], "10m", NO_LABELS),
    # An erasure not verified: no `for`; often the first count of its label set.
    "erasure/first failure of its kind": Case(
        "FgenticErasureVerificationFailed", [erasures("STORE_UNAVAILABLE", "_x10 1x10")], "6m",
        NO_LABELS),
    "erasure/failed again": Case(
        "FgenticErasureVerificationFailed", [erasures("STORE_UNAVAILABLE", "1x20 2x10")],
        "12m", NO_LABELS),
    "erasure/a failure older than 15 min": Case(
        "FgenticErasureVerificationFailed", [erasures("STORE_UNAVAILABLE", "1x60")], "30m"),
    "erasure/verified ones": Case(
        "FgenticErasureVerificationFailed", [erasures("OK", "0+1x20")], "10m"),
    "erasure/no pod scraped": Case("FgenticErasureVerificationFailed", [], "10m"),
    # Reconciled every resync while Failed / not Ready: the counters keep rising.
    "scopes/one pod, a scope Failed": Case(
        "FgenticScopesFailed", [_series("fgentic_scope_reconciles_total", OPERATOR, "a",
                                        "0+1x60", phase="Failed", reason="STORE_UNAVAILABLE")],
        "25m", NO_LABELS),
    "scopes/another release's scope Failed": Case(
        "FgenticScopesFailed", [_series("fgentic_scope_reconciles_total", ELSEWHERE, "x",
                                        "0+1x60", phase="Failed", reason="STORE_UNAVAILABLE")],
        "25m"),
    "bindings/one not Ready": Case(
        "FgenticRetrievalBindingNotReady",
        [_series("fgentic_retrieval_binding_reconciles_total", OPERATOR, "a", "0+1x80",
                 ready="false", reason="APPLY_FAILED")], "35m", NO_LABELS),
    "bindings/all Ready": Case(
        "FgenticRetrievalBindingNotReady",
        [_series("fgentic_retrieval_binding_reconciles_total", OPERATOR, "a", "0+1x80",
                 ready="true", reason="OK")], "35m"),
    "cleanup/failing for over an hour": Case(
        "FgenticExpiryCleanupFailing",
        [_series("fgentic_store_cleanup_failures_total", OPERATOR, "a", "0+1x180",
                 reason="STORE_UNAVAILABLE")], "85m", NO_LABELS),
    "cleanup/failing for half an hour": Case(
        "FgenticExpiryCleanupFailing",
        [_series("fgentic_store_cleanup_failures_total", OPERATOR, "a", "0+1x180",
                 reason="STORE_UNAVAILABLE")], "30m"),
    # The webhook's own series: `for: 10m` / `15m`.
    "certificate/one replica's expires in 10 days": Case(
        "FgenticWebhookCertificateExpiring",
        [_series("fgentic_webhook_certificate_expiry_timestamp_seconds", WEBHOOK, "a",
                 f"{30 * DAY}x40"),
         _series("fgentic_webhook_certificate_expiry_timestamp_seconds", WEBHOOK, "b",
                 f"{10 * DAY}x40")], "15m", NO_LABELS),
    "certificate/30 days left": Case(
        "FgenticWebhookCertificateExpiring",
        [_series("fgentic_webhook_certificate_expiry_timestamp_seconds", WEBHOOK, "a",
                 f"{30 * DAY}x40")], "15m"),
    "audit/violations": Case(
        "FgenticAuditViolations",
        [_series("fgentic_admission_audit_violations", WEBHOOK, "a", "2x60",
                 reason="MEMORY_TTL_MISSING")], "20m", NO_LABELS),
    "audit/another release's violations": Case(
        "FgenticAuditViolations",
        [_series("fgentic_admission_audit_violations", {**WEBHOOK, "namespace": "other-team"},
                 "x", "2x60", reason="MEMORY_TTL_MISSING")], "20m"),
}


def _rendered_rule(*sets: str) -> dict[str, Any]:
    args = [str(binary("helm")), "template", "fg", str(CHART), "--namespace", NS,
            "--set-json", "webhook.networkPolicy.apiServerSources=[]",
            "--set", "metrics.prometheusRule.enabled=true"]
    for value in sets:
        args += ["--set", value]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    (rule,) = [d for d in yaml.safe_load_all(done.stdout)
               if d and d["kind"] == "PrometheusRule"]
    return dict(rule)


@pytest.fixture(scope="module")
def rule() -> dict[str, Any]:
    """Every alert rendered: the memory API on (FgenticStoreDown watches it)."""
    return _rendered_rule("memoryApi.enabled=true", "store.dsnSecret.name=pg",
                          "localHomeserver=example.org")


def _alert(rule: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for g in rule["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == name]
    return dict(found)


def _promtool(tmp_path: Path, rule: dict[str, Any], test: dict[str, Any]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "30s", "tests": [test]}))
    done = subprocess.run([str(binary("promtool")), "test", "rules", "test.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_alert_fires_exactly_when_it_should(case: Case, rule: dict[str, Any],
                                                  tmp_path: Path) -> None:
    alert = _alert(rule, case.alert)
    expected = [] if case.fires is None else [
        {"exp_labels": {**alert["labels"], **case.fires},
         "exp_annotations": alert["annotations"]}]
    _promtool(tmp_path, rule, {
        "interval": "30s", "input_series": case.series,
        "alert_rule_test": [{"eval_time": case.at, "alertname": case.alert,
                             "exp_alerts": expected}]})


def test_components_that_are_off_have_no_alert_that_would_always_fire() -> None:
    """absent() fires while nothing is scraped: a component the values turn off gets none."""
    names = {r["alert"] for g in _rendered_rule("webhook.enabled=false")["spec"]["groups"]
             for r in g["rules"]}
    assert names.isdisjoint({"FgenticWebhookUnavailable", "FgenticStoreDown",
                             "FgenticWebhookCertificateExpiring", "FgenticAuditViolations"})
    assert "FgenticOperatorNotLeading" in names


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", markdown, flags=re.M)}


def test_every_alert_is_tested_and_has_a_runbook_in_the_docs(rule: dict[str, Any]) -> None:
    """runbook_url: <runbookBaseUrl>/observability.md#<anchor>, each anchor a heading there."""
    anchors = _anchors((ROOT / "docs" / "observability.md").read_text())
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {a["alert"] for a in alerts} == {c.alert for c in CASES.values()}, "untested alert"
    for alert in alerts:
        base, _, anchor = alert["annotations"]["runbook_url"].partition("#")
        assert base.endswith("/docs/observability.md") and base.startswith("https://")
        assert anchor in anchors, (alert["alert"], anchor)
    mirror = _rendered_rule("metrics.prometheusRule.runbookBaseUrl=https://docs.example/fg/")
    assert {r["annotations"]["runbook_url"].split("#")[0] for g in mirror["spec"]["groups"]
            for r in g["rules"]} == {"https://docs.example/fg/observability.md"}
