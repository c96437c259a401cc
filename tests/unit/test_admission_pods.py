"""The Pod routing rules (issue 17 §3) as pure functions: which Pods, the patch, the check."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_admission.pods import pod_denials, pod_patch
from fgentic_admission.policy import AdmissionCode
from fgentic_governance.memoryapi.identity import ROUTED_LABEL, memory_agent_of

URL = "http://fgentic-memory-api.fgentic-system.svc:8083"


def agent(name: str, *, memory: bool = True, account: str | None = None) -> dict[str, Any]:
    declarative: dict[str, Any] = {"memory": {"ttlDays": 1}} if memory else {}
    if account:
        declarative["deployment"] = {"serviceAccountName": account}
    return {"metadata": {"name": name}, "spec": {"declarative": declarative}}


def pod(env: list[dict[str, Any]], *, labels: dict[str, str] | None = None,
        account: str | None = None, init_env: list[dict[str, Any]] | None = None
        ) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "kagent", "env": env}]}
    if account:
        spec["serviceAccountName"] = account
    if init_env is not None:
        spec["initContainers"] = [{"name": "init", "env": init_env}]
    return {"kind": "Pod", "metadata": {"labels": labels} if labels is not None else {},
            "spec": spec}


AGENTS = [agent("plain", memory=False), agent("mem"), agent("shared-sa", account="runner")]


@pytest.mark.parametrize(("labels", "account", "expected"), [
    ({"app": "kagent", "kagent": "mem"}, None, "mem"),
    ({"app": "kagent", "kagent": "plain"}, None, None),  # memory off: not routed
    ({"app": "other", "kagent": "mem"}, None, None),
    ({}, "mem", "mem"),                 # the Agent's own service account (its default)
    ({}, "runner", "shared-sa"),        # an explicit deployment.serviceAccountName
    ({}, "plain", None),
    ({}, None, None),                   # "default"
])
def test_which_pods_are_routed(labels: dict[str, str], account: str | None,
                               expected: str | None) -> None:
    assert memory_agent_of(pod([], labels=labels, account=account), AGENTS) == expected


env_entries = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["KAGENT_URL", "LOG_LEVEL", "TEAM", "X"]),
    "value": st.text(max_size=10)}), max_size=6)


@given(env_entries, st.none() | env_entries, st.none() | st.dictionaries(
    st.sampled_from(["app", "kagent", ROUTED_LABEL]), st.sampled_from(["kagent", "false"])))
def test_the_patch_always_yields_a_pod_the_check_admits(
        env: list[dict[str, Any]], init_env: list[dict[str, Any]] | None,
        labels: dict[str, str] | None) -> None:
    original = pod(env, labels=labels, init_env=init_env)
    patched = jsonpatch.apply_patch(copy.deepcopy(original), pod_patch(original, URL))
    assert pod_denials(patched, URL) == []
    for container in patched["spec"]["containers"] + patched["spec"].get("initContainers", []):
        names = [e["name"] for e in container["env"]]
        assert names.count("KAGENT_URL") == names.count("LOG_LEVEL") == 1
        assert names[-2:] == ["KAGENT_URL", "LOG_LEVEL"]
    others = [e for e in env if e["name"] not in ("KAGENT_URL", "LOG_LEVEL")]
    assert patched["spec"]["containers"][0]["env"][:-2] == others  # the rest kept, in order


@pytest.mark.parametrize(("env", "labels", "where"), [
    ([{"name": "KAGENT_URL", "value": URL}, {"name": "LOG_LEVEL", "value": "ERROR"},
      {"name": "KAGENT_URL", "value": "http://controller:8083"}], {ROUTED_LABEL: "true"},
     "spec.containers[0].env"),  # the last duplicate wins
    ([{"name": "KAGENT_URL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
      {"name": "LOG_LEVEL", "value": "ERROR"}], {ROUTED_LABEL: "true"},
     "spec.containers[0].env"),  # a reference is not the governed value
    ([{"name": "KAGENT_URL", "value": URL}], {ROUTED_LABEL: "true"}, "spec.containers[0].env"),
    ([{"name": "KAGENT_URL", "value": URL}, {"name": "LOG_LEVEL", "value": "ERROR"}], {},
     "metadata.labels"),
])
def test_an_unrouted_pod_is_refused(env: list[dict[str, Any]], labels: dict[str, str],
                                    where: str) -> None:
    denials = pod_denials(pod(env, labels=labels), URL)
    assert [(d.code, d.path) for d in denials] == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, where)]
