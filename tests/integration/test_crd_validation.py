"""Our CRDs in the real kube-apiserver: good objects are admitted, each bound and CEL rule
rejects a bad object with a clear message."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, VERSION
from tests.support.objects import api_message, example, set_path

pytestmark = pytest.mark.integration

NS = "crd-tests"
CLEANUP = "test.fgentic.dev/crd-validation"
PLURALS = {
    "MemoryScope": "memoryscopes",
    "ConsentRecord": "consentrecords",
    "RetrievalBinding": "retrievalbindings",
    "PrincipalOffboarding": "principaloffboardings",
    "MemoryPostureFloor": "memoryposturefloors",
}
CLUSTER_SCOPED = {"PrincipalOffboarding", "MemoryPostureFloor"}


@pytest.fixture(scope="module")
def api(control_plane: Any, k8s_client: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    control_plane.ensure_namespace(NS)
    yield client.CustomObjectsApi(k8s_client)
    control_plane.kubectl("delete", "principaloffboardings,memoryposturefloors", "-l",
                          f"{CLEANUP}=true", "--ignore-not-found")


def _fresh(kind: str) -> dict[str, Any]:
    obj = example(kind)
    obj["metadata"]["name"] = f"{kind.lower()}-{uuid.uuid4().hex[:8]}"
    if kind == "MemoryPostureFloor":
        # Cluster-scoped: a floor of an Agent no other test has keeps the session's operators'
        # stores untouched should one of them see it before the module's cleanup.
        obj["spec"]["target"]["agent"] = f"crd-{uuid.uuid4().hex[:8]}"
        obj["metadata"]["labels"] = {CLEANUP: "true"}
    elif kind != "PrincipalOffboarding":
        obj["metadata"]["namespace"] = NS
    else:
        # Cluster-scoped and indexed by principal by the operator: a unique principal keeps
        # these objects from putting a real test principal "in offboarding" for the session.
        obj["spec"]["principal"]["mxid"] = f"@crd-{uuid.uuid4().hex[:8]}:fgentic.local"
        obj["metadata"]["labels"] = {CLEANUP: "true"}
    return obj


def _create(api: client.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    plural = PLURALS[obj["kind"]]
    if obj["kind"] in CLUSTER_SCOPED:
        return api.create_cluster_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, plural, obj, field_validation="Strict")
    return api.create_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, NS, plural, obj, field_validation="Strict")


def _replace(api: client.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    plural, name = PLURALS[obj["kind"]], obj["metadata"]["name"]
    if obj["kind"] in CLUSTER_SCOPED:
        return api.replace_cluster_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, plural, name, obj)
    return api.replace_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, NS, plural, name, obj)


@pytest.mark.parametrize("kind", sorted(PLURALS))
def test_examples_are_admitted_with_defaults(api: client.CustomObjectsApi, kind: str) -> None:
    created = _create(api, _fresh(kind))
    assert created["metadata"]["uid"]
    if kind == "MemoryScope":
        policy = created["spec"]["policy"]
        # Defaults are filled in by the server from the generated schema.
        assert policy["hourlyOperationCeiling"] == 60
        assert policy["automaticSave"] == {"minUserTurns": 5, "maxInputBytes": 16384,
                                           "maxFacts": 10}
        assert policy["recall"] == {}  # nothing narrowed: every readable fact may be recalled


def test_a_scope_with_a_recall_policy_is_admitted(api: client.CustomObjectsApi) -> None:
    recall = {"memoryTypes": ["preference", "fact"], "sourceKinds": ["save_memory_tool"],
              "confirmationStatuses": ["user_confirmed", "model_inferred"],
              "sensitivities": ["normal"], "maxAgeHours": 168}
    created = _create(api, set_path(_fresh("MemoryScope"), "spec.policy.recall", recall))
    assert created["spec"]["policy"]["recall"] == recall


BAD_CREATES = [
    ("MemoryScope", "spec.subject.mxid", "alice", "spec.subject.mxid"),
    ("MemoryScope", "spec.subject.mxid", "@" + "a" * 250 + ":fgentic.local", "Too long"),
    ("MemoryScope", "spec.subject.originKind", "remote-federated", "FEDERATION_DENIED"),
    ("MemoryScope", "spec.subject.originKind", "bridged", "FEDERATION_DENIED"),
    ("MemoryScope", "spec.subject.originKind", "martian", "Unsupported value"),
    ("MemoryScope", "spec.profile", "production", "PROFILE_NOT_DEMO"),
    ("MemoryScope", "spec.policy.maxRetentionDays", 8, "less than or equal to 7"),
    ("MemoryScope", "spec.policy.entryCap", 101, "less than or equal to 100"),
    ("MemoryScope", "spec.policy.maxFactBytes", 513, "less than or equal to 512"),
    ("MemoryScope", "spec.policy.prefetch", {"maxSubqueries": 9}, "less than or equal to 8"),
    ("MemoryScope", "spec.policy.hourlyOperationCeiling", 61, "less than or equal to 60"),
    ("MemoryScope", "spec.policy.explicitOperations", {"perMinute": 7}, "less than or equal to 6"),
    ("MemoryScope", "spec.policy.automaticSave", {"minUserTurns": 4}, "greater than or equal to 5"),
    ("MemoryScope", "spec.policy.automaticSave", {"maxInputBytes": 16385}, "16384"),
    ("MemoryScope", "spec.policy.recall", {"memoryTypes": ["secret"]},
     'spec.policy.recall.memoryTypes[0]: Unsupported value: "secret"'),
    ("MemoryScope", "spec.policy.recall", {"confirmationStatuses": ["operator_confirmed"]},
     "spec.policy.recall.confirmationStatuses[0]: Unsupported value"),
    ("MemoryScope", "spec.policy.recall", {"sensitivities": []},
     "spec.policy.recall.sensitivities in body should have at least 1 items"),
    ("MemoryScope", "spec.policy.recall", {"sourceKinds": ["unknown", "unknown"]},
     'spec.policy.recall.sourceKinds[1]: Duplicate value: "unknown"'),
    ("MemoryScope", "spec.policy.recall", {"maxAgeHours": 169},
     "spec.policy.recall.maxAgeHours in body should be less than or equal to 168"),
    ("MemoryScope", "spec.policy.recall", {"maxAgeHours": 0},
     "spec.policy.recall.maxAgeHours in body should be greater than or equal to 1"),
    ("MemoryScope", "spec.policy.recall", {"maxAge": 3},
     'unknown field "spec.policy.recall.maxAge"'),
    ("MemoryScope", "spec.controlRoom", "#alias:fgentic.local", "spec.controlRoom"),
    ("MemoryScope", "spec.agent.name", "Docs_Agent", "spec.agent.name"),
    ("MemoryScope", "spec.surprise", "x", 'unknown field "spec.surprise"'),
    ("ConsentRecord", "spec.decision", "maybe", "Unsupported value"),
    ("ConsentRecord", "spec.subject.mxid", "@alice", "spec.subject.mxid"),
    ("RetrievalBinding", "spec.publicRoute.publicRetrievalTimeoutSeconds", 61,
     "less than or equal to 60"),
    ("RetrievalBinding", "spec.publicRoute.issuer", "http://issuer.example",
     "spec.publicRoute.issuer"),
    ("RetrievalBinding", "spec.retrievalService.selector", {}, "spec.retrievalService.selector"),
    ("RetrievalBinding", "spec.retrievalService.selector", {"Bad Key!": "x"},
     "keys must be valid label keys"),
    ("RetrievalBinding", "spec.mcpServer.kind", "MCPServer", "Unsupported value"),
    ("RetrievalBinding", "spec.classificationCeiling", "secret", "Unsupported value"),
    ("PrincipalOffboarding", "spec.principal.mxid", "bob", "spec.principal.mxid"),
    ("MemoryPostureFloor", "spec.posture", "off", "Unsupported value"),
    ("MemoryPostureFloor", "spec.target.level", "Galaxy", "Unsupported value"),
    ("MemoryPostureFloor", "spec.target.level", "Cluster",
     "a Cluster floor names no namespace and no Agent"),
    ("MemoryPostureFloor", "spec.target.level", "Namespace",
     "a Namespace floor names its namespace and no Agent"),
    ("MemoryPostureFloor", "spec.target", {"level": "Agent", "agent": "docs-agent"},
     "an Agent floor names the Agent's namespace and name"),
    ("MemoryPostureFloor", "spec.target.agent", "Docs_Agent", "spec.target.agent"),
    ("MemoryPostureFloor", "spec", {"target": {"level": "Cluster"},
                                    "posture": "capture_disabled", "purge": {"requestId": "r1"}},
     "a purge runs only under a fully_disabled floor"),
    ("MemoryPostureFloor", "spec.purge", {"requestId": "no spaces"}, "spec.purge.requestId"),
    ("MemoryPostureFloor", "spec.recall", {"memoryTypes": ["gossip"]}, "Unsupported value"),
    ("MemoryPostureFloor", "spec.recall", {"maxAgeHours": 169}, "less than or equal to 168"),
]


@pytest.mark.parametrize(("kind", "path", "value", "expected"), BAD_CREATES,
                         ids=[f"{k}:{p}={v!r}"[:80] for k, p, v, _ in BAD_CREATES])
def test_bad_object_is_rejected(
    api: client.CustomObjectsApi, kind: str, path: str, value: Any, expected: str
) -> None:
    obj = set_path(_fresh(kind), path, value)
    with pytest.raises(ApiException) as info:
        _create(api, obj)
    # Schema violations are 422 Invalid; strict decoding of unknown fields is 400 BadRequest.
    assert info.value.status in {400, 422}, api_message(info.value)
    assert expected in api_message(info.value)


BAD_UPDATES = [
    ("MemoryScope", "spec.policy.maxRetentionDays", 6, "maxRetentionDays is immutable"),
    ("MemoryScope", "spec.subject.mxid", "@carol:fgentic.local", "subject is immutable"),
    ("MemoryScope", "spec.agent.name", "other-agent", "agent is immutable"),
    ("MemoryScope", "spec.controlRoom", "!other:fgentic.local", "controlRoom is immutable"),
    ("ConsentRecord", "spec.purpose", "marketing", "a ConsentRecord is immutable"),
    ("ConsentRecord", "spec.policyVersion", "2027-01", "a ConsentRecord is immutable"),
    ("RetrievalBinding", "spec.agent.name", "other-agent", "agent is immutable"),
    ("PrincipalOffboarding", "spec.principal.mxid", "@carol:fgentic.local", "spec is immutable"),
    ("MemoryPostureFloor", "spec.target.agent", "other-agent", "target is immutable"),
]


@pytest.mark.parametrize(("kind", "path", "value", "expected"), BAD_UPDATES,
                         ids=[f"{k}:{p}" for k, p, _, _ in BAD_UPDATES])
def test_immutable_fields_reject_updates(
    api: client.CustomObjectsApi, kind: str, path: str, value: Any, expected: str
) -> None:
    created = _create(api, _fresh(kind))
    with pytest.raises(ApiException) as info:
        _replace(api, set_path(created, path, value))
    assert info.value.status == 422
    assert expected in api_message(info.value)


def test_consent_moves_one_way_from_granted_to_withdrawn(api: client.CustomObjectsApi) -> None:
    created = _create(api, _fresh("ConsentRecord"))
    withdrawn = _replace(api, set_path(created, "spec.decision", "withdrawn"))
    assert withdrawn["spec"]["decision"] == "withdrawn"
    with pytest.raises(ApiException) as info:
        _replace(api, set_path(withdrawn, "spec.decision", "granted"))
    assert "decision may only change from granted to withdrawn" in api_message(info.value)


def test_fully_disabled_scope_needs_no_demo_profile(api: client.CustomObjectsApi) -> None:
    obj = set_path(_fresh("MemoryScope"), "spec.profile", "production")
    obj["spec"]["posture"] = "fully_disabled"
    assert _create(api, obj)["spec"]["profile"] == "production"


def control_plane_client(control_plane: Any) -> client.ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


def test_crds_carry_names_category_and_columns(control_plane: Any) -> None:
    # api-resources refreshes kubectl's discovery cache (it predates our CRDs).
    text = control_plane.kubectl("api-resources", "--api-group", GROUP, "-o", "wide")
    for short in ("mscope", "consent", "rbind", "offboard", "mfloor"):
        assert short in text
    _create(client.CustomObjectsApi(control_plane_client(control_plane)), _fresh("MemoryScope"))
    names = control_plane.kubectl("get", "fgentic", "-A", "-o", "name")
    assert "memoryscope.governance.fgentic.dev/" in names
