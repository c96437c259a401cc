"""The admission policy and review routing, as pure functions (property tests included)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgentic_governance.admission.policy import (
    AdmissionCode,
    BindingView,
    Denial,
    PolicyState,
    ScopeView,
    agent_denials,
    consent_denials,
    scope_denials,
)
from fgentic_governance.admission.review import Reviewer, Unanswerable
from fgentic_governance.api.kagent import ROUTED_LABEL
from tests.support.appservice import puppet, telegram
from tests.support.objects import example
from tests.support.reviews import (
    SENTINEL,
    SERVER,
    STATE,
    agent,
    lookups,
    ready_routing,
    review,
)


def codes(doc: dict[str, Any], state: PolicyState = STATE) -> list[AdmissionCode]:
    return [d.code for d in agent_denials(doc, state)]


header_names = st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=40)


@given(header_names)
def test_every_name_but_the_carrier_is_forbidden(name: str) -> None:
    result = codes(agent(headers=[name]))
    if name.strip().lower() == "x-fgentic-identity":
        assert result == []
    else:
        assert result == [AdmissionCode.FORBIDDEN_HEADER]


@given(st.sampled_from(["x-fgentic-identity", "X-FGENTIC-IDENTITY", " X-Fgentic-Identity "]))
def test_the_carrier_needs_the_exact_binding(name: str) -> None:
    assert codes(agent(headers=[name])) == []
    assert codes(agent("other", headers=[name])) == [AdmissionCode.IDENTITY_HEADER_UNBOUND]
    assert codes(agent(headers=[name], name="elsewhere")) == [AdmissionCode.IDENTITY_HEADER_UNBOUND]
    assert codes(agent(headers=[name], toolNames=["search", "x"])) == [
        AdmissionCode.IDENTITY_TOOL_MISMATCH]


def test_ambiguous_bindings_fail_closed() -> None:
    twice = PolicyState(bindings={("ns", "retriever"): [*STATE.bindings[("ns", "retriever")]] * 2})
    assert codes(agent(headers=["x-fgentic-identity"]), twice) == [
        AdmissionCode.IDENTITY_HEADER_UNBOUND]


def test_inactive_binding_admits_nothing() -> None:
    view = BindingView("ns", "b", ("ns", "retriever"), SERVER, "search", active=False)
    state = PolicyState(bindings={("ns", "retriever"): [view]})
    assert codes(agent(headers=["x-fgentic-identity"]), state) == [
        AdmissionCode.IDENTITY_HEADER_UNBOUND]


@pytest.mark.parametrize(("memory", "scope", "expected"), [
    ({"modelConfig": "e", "ttlDays": 3}, ("demo", 3, True), []),
    ({"modelConfig": "e", "ttlDays": 4}, ("demo", 3, True),
     [AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION]),
    ({"modelConfig": "e"}, ("demo", 3, True), [AdmissionCode.MEMORY_TTL_MISSING]),
    ({"modelConfig": "e", "ttlDays": True}, ("demo", 3, True), [AdmissionCode.MEMORY_TTL_MISSING]),
    ({"modelConfig": "e", "ttlDays": 1}, ("demo", 3, False), [AdmissionCode.MEMORY_UNGATED]),
    ({"modelConfig": "e", "ttlDays": 1}, ("production", 3, True), [AdmissionCode.MEMORY_UNGATED]),
    ({}, ("demo", 3, True), [AdmissionCode.MEMORY_TTL_MISSING]),
])
def test_memory_gates(memory: dict[str, Any], scope: tuple[str, int, bool],
                      expected: list[AdmissionCode]) -> None:
    doc = example("Agent")
    doc["metadata"] = {"name": "mem", "namespace": "ns"}
    doc["spec"]["declarative"]["memory"] = memory
    state = PolicyState(scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), *scope)]},
                        memory_routed=True)
    assert codes(doc, state) == expected


@pytest.mark.parametrize("gates_hold", [True, False])
def test_without_the_pod_routing_a_demo_scope_admits_no_collector(gates_hold: bool) -> None:
    """Issue 17: a gated demo scope used to admit memory for every user of the Agent."""
    doc = example("Agent")
    doc["metadata"] = {"name": "mem", "namespace": "ns"}
    doc["spec"]["declarative"]["memory"] = {"modelConfig": "e", "ttlDays": 3}
    state = PolicyState(scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), "demo", 3,
                                                          gates_hold)]})
    assert codes(doc, state) == [AdmissionCode.MEMORY_RUNTIME_UNGOVERNED]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=300)
@given(json_values)
def test_arbitrary_spec_never_crashes_the_policy(spec: Any) -> None:
    doc = {"apiVersion": "kagent.dev/v1alpha2", "metadata": {"name": "a", "namespace": "ns"},
           "spec": {"declarative": spec}}
    denials = agent_denials(doc, STATE)
    assert all(len(d.message()) < 200 for d in denials)


@given(st.text(min_size=1, max_size=100))
def test_denial_messages_never_echo_values(text: str) -> None:
    value = f"{SENTINEL}{text}"
    doc = agent(headers=[value])
    doc["spec"]["declarative"]["tools"][0]["headersFrom"] = [{"name": value}]
    doc["spec"]["declarative"]["memory"] = {"modelConfig": value, "ttlDays": value}
    for denial in agent_denials(doc, PolicyState()):
        assert SENTINEL not in denial.message()


def test_cross_object_rules() -> None:
    scope, consent = example("MemoryScope"), example("ConsentRecord")
    assert consent_denials(consent, scope) == []
    assert [d.code for d in consent_denials(consent, None)] == [AdmissionCode.CONSENT_SCOPE_MISSING]
    assert [d.code for d in consent_denials(consent, scope, offboarding=True)] == [
        AdmissionCode.OFFBOARDING_IN_PROGRESS]
    scope["spec"]["subject"]["mxid"] = "@bob:fgentic.local"
    assert [d.code for d in consent_denials(consent, scope)] == [
        AdmissionCode.CONSENT_SUBJECT_MISMATCH]
    assert scope_denials(example("MemoryScope"), "fgentic.local") == []
    for home in ("", "other.example"):
        assert [d.code for d in scope_denials(example("MemoryScope"), home)] == [
            AdmissionCode.FEDERATION_DENIED]


async def test_a_bridged_puppet_declared_native_local_is_refused() -> None:
    """ADR 0023 §31: an MXID in a configured appservice namespace holds no memory, whatever
    originKind its scope declares; the same scope without the registry, or a native user
    beside the puppet, is admitted."""
    registry = telegram("fgentic.local")
    bridged = example("MemoryScope")
    bridged["spec"]["subject"] = {"mxid": puppet("fgentic.local"), "originKind": "native-local"}
    assert [(d.code, d.path) for d in scope_denials(bridged, "fgentic.local", registry)] == [
        (AdmissionCode.APPSERVICE_IDENTITY_DENIED, "spec.subject.mxid")]
    assert scope_denials(bridged, "fgentic.local") == []  # no registry: nothing to tell
    assert scope_denials(example("MemoryScope"), "fgentic.local", registry) == []
    reviewer = Reviewer(lookups(PolicyState(), STATE), "fgentic.local", appservice=registry)
    out = await reviewer(review(bridged), webhook="governance")
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["message"].startswith(
        "APPSERVICE_IDENTITY_DENIED at spec.subject.mxid")
    assert (await reviewer(review(example("MemoryScope")), webhook="governance"))[
        "response"]["allowed"] is True


async def test_lagging_cache_is_rechecked_live_before_denying() -> None:
    reviewer = Reviewer(lookups(PolicyState(), STATE), "fgentic.local")
    out = await reviewer(review(agent(headers=["x-fgentic-identity"])), webhook="agents")
    assert out["response"] == {"uid": "u-1", "allowed": True}


async def test_errors_deny_without_echoing() -> None:
    reviewer = Reviewer(lookups(None, STATE, fail=True), "fgentic.local")
    out = await reviewer(review(agent(headers=[SENTINEL])), webhook="agents")
    assert out["response"]["allowed"] is False
    assert SENTINEL not in str(out)
    assert "POLICY_STATE_UNAVAILABLE" in out["response"]["status"]["message"]


async def test_unknown_routes_are_denied() -> None:
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    unknown = await reviewer(review(agent()), webhook="nope")
    assert "UNSUPPORTED_KIND" in unknown["response"]["status"]["message"]


def _other_agent_group() -> dict[str, Any]:
    doc = agent()
    doc["apiVersion"] = "example.com/v1alpha2"
    return doc


def _no_api_version() -> dict[str, Any]:
    doc = agent()
    del doc["apiVersion"]
    return doc


@pytest.mark.parametrize("obj", [
    example("ConsentRecord"), example("MemoryScope"),
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": SENTINEL}},
    _other_agent_group(), _no_api_version(),
], ids=["consent", "scope", "pod", "configmap", "other-group-agent", "no-api-version"])
async def test_the_agents_route_refuses_objects_that_are_not_agents(obj: dict[str, Any]) -> None:
    """L2: /agents judged any object by the Agent rules, and an object without tools or
    memory passed them all (``allowed: true``)."""
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    out = await reviewer(review(obj), webhook="agents")
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["message"].partition(": ")[0] == "UNSUPPORTED_KIND at kind"
    assert SENTINEL not in str(out)


@pytest.mark.parametrize(("route", "obj"), [
    ("governance", {"apiVersion": "example.com/v1alpha1", "kind": "MemoryScope"}),
    ("podcheck", {"apiVersion": "example.com/v1", "kind": "Pod"}),
], ids=["governance-other-group", "podcheck-other-group"])
async def test_every_route_refuses_kinds_it_is_not_configured_for(route: str,
                                                                  obj: dict[str, Any]) -> None:
    """L2 on the other routes: the kind alone was checked, not the API group."""
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    out = await reviewer(review(obj), webhook=route)
    assert out["response"]["status"]["message"].partition(": ")[0] == "UNSUPPORTED_KIND at kind"


@pytest.mark.parametrize("routing", [True, False], ids=["routing", "no-routing"])
async def test_podcheck_refuses_the_routed_label_on_a_pod_it_does_not_route(
        routing: bool) -> None:
    """N7: the label admits its bearer to the memory API; only the mutating webhook sets it."""
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local",
                        ready_routing([]) if routing else None)
    labelled = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "labels": {ROUTED_LABEL: "true"}},
                "spec": {"containers": [{"name": "c"}]}}
    out = await reviewer(review(labelled), webhook="podcheck")
    assert out["response"]["status"]["message"].partition(": ")[0] == \
        "ROUTED_LABEL_RESERVED at metadata.labels"
    kept = {"request": {"uid": "u-1", "operation": "UPDATE", "object": labelled,
                        "oldObject": labelled}}
    assert (await reviewer(kept, webhook="podcheck"))["response"]["allowed"] is True
    mutated = await reviewer(review(labelled), webhook="pods")  # refused by the check only
    assert mutated["response"] == {"uid": "u-1", "allowed": True}


def _pod(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", **meta},
            "spec": {"containers": [{"name": "c"}]}}


MALFORMED_METADATA: list[dict[str, Any]] = [
    {"labels": [SENTINEL]}, {"labels": SENTINEL}, {"labels": {"app": 7}},
    {"labels": {"app": [SENTINEL]}}, {"annotations": [SENTINEL]}, {"annotations": {"a": None}},
    {"name": [SENTINEL]}, {"namespace": {"n": SENTINEL}},
]


@pytest.mark.parametrize("routing", [True, False], ids=["routing", "no-routing"])
@pytest.mark.parametrize("route", ["pods", "podcheck", "agents", "governance"])
@pytest.mark.parametrize("meta", MALFORMED_METADATA)
async def test_malformed_metadata_is_review_malformed(meta: dict[str, Any], route: str,
                                                      routing: bool) -> None:
    """R4-13: a Pod whose labels were a list raised AttributeError, denied as
    POLICY_STATE_UNAVAILABLE (the cluster blamed). Any other shape of metadata, labels or
    annotations than the API server's, in the object or the old object, is REVIEW_MALFORMED on
    every route; a well-formed Pod is still allowed."""
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local",
                        ready_routing([]) if routing else None)
    for request in (review(_pod(**meta)),
                    {"request": {"uid": "u-1", "operation": "UPDATE", "object": _pod(),
                                 "oldObject": _pod(**meta)}}):
        out = await reviewer(request, webhook=route)
        assert out["response"]["allowed"] is False
        assert out["response"]["status"]["message"].partition(": ")[0] == \
            "REVIEW_MALFORMED at request"
        assert SENTINEL not in str(out)
    whole = {"request": {"uid": "u-1", "operation": "CREATE", "object": {**_pod(),
                                                                          "metadata": [SENTINEL]}}}
    out = await reviewer(whole, webhook=route)
    assert out["response"]["status"]["message"].partition(": ")[0] == "REVIEW_MALFORMED at request"
    if route in ("pods", "podcheck"):  # the control: well-formed labels and annotations
        fine = _pod(labels={"app": "web"}, annotations={"a": "b"})
        assert (await reviewer(review(fine), webhook=route))["response"]["allowed"] is True
        assert (await reviewer({"request": {"uid": "u-1", "operation": "UPDATE", "object": fine,
                                            "oldObject": fine}}, webhook=route)
                )["response"]["allowed"] is True


MALFORMED_REQUESTS: list[Any] = [
    {"uid": "u-1", "object": {}},  # no operation
    {"uid": "u-1", "operation": "create", "object": {}},  # not the API server's spelling
    {"uid": "u-1", "operation": "DELETE", "object": {}},  # not registered: never sent to us
    {"uid": "u-1", "operation": "CONNECT", "object": {}},
    {"uid": "u-1", "operation": "CREATE"},  # no object
    {"uid": "u-1", "operation": "UPDATE", "object": [SENTINEL]},
    {"uid": "u-1", "operation": "CREATE", "object": SENTINEL},
]


@pytest.mark.parametrize("request_", MALFORMED_REQUESTS)
async def test_malformed_reviews_are_denied_never_allowed(request_: Any) -> None:
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    out = await reviewer({"request": request_}, webhook="agents")
    assert out["response"]["uid"] == "u-1"
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["message"].partition(": ")[0] == "REVIEW_MALFORMED at request"
    assert SENTINEL not in str(out)


@pytest.mark.parametrize("body", [
    {}, {"request": None}, {"request": [SENTINEL]}, {"request": SENTINEL}, [SENTINEL], None,
    {"request": {"operation": "CREATE", "object": {}}},  # no uid
    *({"request": {"uid": uid, "operation": "CREATE", "object": {}}}
      for uid in ("", 7, None, ["u"], "u\n1", "u\x00", "u\u00e9", "u" * 129)),
])
async def test_reviews_without_a_usable_uid_are_unanswerable(body: Any) -> None:
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    with pytest.raises(Unanswerable) as info:
        await reviewer(body, webhook="agents")
    assert str(info.value) == "REVIEW_MALFORMED"


async def test_a_bounded_uid_is_echoed() -> None:
    reviewer = Reviewer(lookups(STATE, STATE), "fgentic.local")
    uid = "705ab4f5-6393-11e8-b7cc-42010a800002"
    out = await reviewer({"request": {"uid": uid, "operation": "CREATE", "object": agent()}},
                         webhook="agents")
    assert out["response"] == {"uid": uid, "allowed": True}


def test_every_denial_says_what_to_change() -> None:
    """Issue 27: a denial names the rule (code), the field and, in one constant sentence, what
    to change; the sentence keeps the message parseable (no ``; `` between denials)."""
    from fgentic_governance.admission.guidance import GUIDANCE, explained

    assert set(GUIDANCE) == set(AdmissionCode)
    for code, sentence in GUIDANCE.items():
        assert sentence and "; " not in sentence and ": " not in sentence, code
    denial = Denial(AdmissionCode.FORBIDDEN_HEADER, "spec.tools[0]", "x-api-key")
    assert explained(denial) == ("FORBIDDEN_HEADER at spec.tools[0] (x-api-key): "
                                 + GUIDANCE[AdmissionCode.FORBIDDEN_HEADER])
