"""Drift decisions for rendered objects (controller/retrieval_apply.py): apply unless every
rendered object is live at exactly the version our last apply left it at."""

from __future__ import annotations

from fgentic_governance.controller.retrieval_apply import AppliedVersions, unchanged
from fgentic_governance.retrieval.render.names import BindingId

A = ("v1", "ConfigMap", "ns", "a")
B = ("networking.k8s.io/v1", "NetworkPolicy", "ns", "b")
X = BindingId("ns", "x")


def test_unchanged_only_when_every_object_is_at_its_applied_version() -> None:
    applied = {A: "10", B: "11"}
    assert unchanged(applied, {A: "10", B: "11", ("v1", "ConfigMap", "x", "y"): "3"}, {A, B})
    assert not unchanged(applied, {A: "10", B: "12"}, {A, B})  # edited by someone
    assert not unchanged(applied, {A: "10"}, {A, B})  # deleted
    assert not unchanged(applied, {A: "10", B: "11"}, {A})  # the rendering changed
    assert not unchanged({A: "10"}, {A: "10", B: "11"}, {A, B})  # never applied B


def test_applied_versions_are_per_binding_and_forgotten() -> None:
    versions = AppliedVersions()
    assert versions.get(X) is None
    versions.record(X, {A: "1"})
    at, recorded = versions.get(X) or (0.0, {})
    assert recorded == {A: "1"} and at > 0
    versions.forget(X)
    assert versions.get(X) is None
