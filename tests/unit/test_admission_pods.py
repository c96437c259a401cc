"""The Pod routing rules (issue 17 §3) as pure functions: which Pods, the patch, the check."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.admission.pods import pod_denials, pod_patch
from fgentic_governance.admission.policy import AdmissionCode
from fgentic_governance.admission.render import webhook_configuration
from fgentic_governance.api.kagent import ROUTED_LABEL, memory_agent_of

URL = "http://fgentic-memory-api.fgentic-system.svc:8083"
TRACE_PINS = ["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "TRACELOOP_TRACE_CONTENT",
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]
SUBSTRATE_PINS = ["KAGENT_CONFIG_JSON", "KAGENT_AGENT_CARD_JSON", "KAGENT_SRT_SETTINGS_JSON",
                  "KAGENT_TOKEN"]
GOVERNED_NAMES = ["KAGENT_URL", "LOG_LEVEL", *TRACE_PINS, *SUBSTRATE_PINS, "HTTP_PROXY",
                  "http_proxy", "ALL_PROXY", "all_proxy"]
"""What a routed container sees, set last: the memory API, errors only, content-free traces,
no config or token from the env (kagent-adk 0.10.4), no proxy for http."""


def governed_env(url: str = URL) -> list[dict[str, str]]:
    values = {"KAGENT_URL": url, "LOG_LEVEL": "ERROR", **dict.fromkeys(TRACE_PINS, "false")}
    return [{"name": name, "value": values.get(name, "")} for name in GOVERNED_NAMES]


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
    "name": st.sampled_from(["KAGENT_URL", "LOG_LEVEL", "HTTP_PROXY", "all_proxy", "TEAM",
                             "X", *TRACE_PINS, *SUBSTRATE_PINS]),
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
        assert all(names.count(name) == 1 for name in GOVERNED_NAMES)
        assert names[-len(GOVERNED_NAMES):] == GOVERNED_NAMES
    others = [e for e in env if e["name"] not in GOVERNED_NAMES]
    governed = patched["spec"]["containers"][0]["env"]
    assert governed[:-len(GOVERNED_NAMES)] == others  # the rest kept, in order


@pytest.mark.parametrize(("env", "labels", "where"), [
    ([{"name": "KAGENT_URL", "value": URL}, {"name": "LOG_LEVEL", "value": "ERROR"},
      {"name": "KAGENT_URL", "value": "http://controller:8083"}], {ROUTED_LABEL: "true"},
     "spec.containers[0].env"),  # the last duplicate wins
    ([{"name": "KAGENT_URL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
      {"name": "LOG_LEVEL", "value": "ERROR"}], {ROUTED_LABEL: "true"},
     "spec.containers[0].env"),  # a reference is not the governed value
    ([{"name": "KAGENT_URL", "value": URL}], {ROUTED_LABEL: "true"}, "spec.containers[0].env"),
    (governed_env(URL), {}, "metadata.labels"),
])
def test_an_unrouted_pod_is_refused(env: list[dict[str, Any]], labels: dict[str, str],
                                    where: str) -> None:
    denials = pod_denials(pod(env, labels=labels), URL)
    assert [(d.code, d.path) for d in denials] == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, where)]


def routed_pod(**spec: Any) -> dict[str, Any]:
    """A Pod as the mutating webhook leaves it, with ``spec`` fields added."""
    routed = pod(governed_env(URL), labels={ROUTED_LABEL: "true"})
    routed["spec"].update(spec)
    return routed


def where(denials: list[Any]) -> list[tuple[AdmissionCode, str]]:
    return [(d.code, d.path) for d in denials]


@pytest.mark.parametrize("proxy", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
def test_a_proxy_for_the_memory_api_is_refused(proxy: str) -> None:
    """N8: kagent-adk's controller client trusts the environment; the proxy would see (and
    could answer) every memory call. Set last and empty, it also overrides envFrom."""
    assert pod_denials(routed_pod(), URL) == []  # The control: as the webhook patches it.
    bare = routed_pod()  # The API server drops an empty value: no value is the empty string.
    bare["spec"]["containers"][0]["env"] = [
        {k: v for k, v in e.items() if v} for e in governed_env(URL)]
    assert pod_denials(bare, URL) == []
    for entry in ({"name": proxy, "value": "http://proxy.example:3128"},
                  {"name": proxy, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}):
        leaky = routed_pod()
        leaky["spec"]["containers"][0]["env"].append(entry)
        assert where(pod_denials(leaky, URL)) == [
            (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]
    unset = routed_pod()  # Not set in the Pod: an envFrom source or the image could set it.
    unset["spec"]["containers"][0]["env"] = [
        e for e in governed_env(URL) if e["name"] != proxy]
    unset["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "proxies"}}]
    assert where(pod_denials(unset, URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]


@pytest.mark.parametrize("spelling", ["Http_proxy", "HTTP_Proxy", "hTTP_pROXY", "All_Proxy"])
def test_a_proxy_spelled_in_another_case_is_refused_or_blanked(spelling: str) -> None:
    """R4-10: Python's getproxies() (httpx's source) reads ``*_proxy`` in any case, and which
    spelling wins depends on the environment's order: ``Http_proxy`` is a proxy too."""
    leaky = routed_pod()  # Denied: another spelling, set to a proxy, beside the governed ones.
    leaky["spec"]["containers"][0]["env"].append(
        {"name": spelling, "value": "http://proxy.example:3128"})
    assert where(pod_denials(leaky, URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]
    by_reference = routed_pod()  # Denied: what a reference holds is not known to be empty.
    by_reference["spec"]["containers"][0]["env"].insert(
        0, {"name": spelling, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}})
    assert where(pod_denials(by_reference, URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]
    blank = routed_pod()  # Allowed, the near miss: the same spelling, empty.
    blank["spec"]["containers"][0]["env"].insert(0, {"name": spelling, "value": ""})
    assert pod_denials(blank, URL) == []
    # The mutation blanks every spelling it finds, once, before the governed variables.
    original = pod([{"name": spelling, "value": "http://proxy.example:3128"},
                    {"name": "TEAM", "value": "a"}, {"name": spelling, "value": "x"}])
    patched = jsonpatch.apply_patch(copy.deepcopy(original), pod_patch(original, URL))
    assert patched["spec"]["containers"][0]["env"] == [
        {"name": "TEAM", "value": "a"}, {"name": spelling, "value": ""}, *governed_env()]
    assert pod_denials(patched, URL) == []


def test_a_proxy_of_another_scheme_in_any_case_is_not_the_routes() -> None:
    """The near miss across schemes: an https proxy, in any case, does not carry an http
    memory API's calls, and is left as the Pod sets it."""
    from fgentic_governance.admission import pods

    secure = "https://memory.example:8443"
    proxy = "http://proxy.example:3128"
    for url, spelling, refused in ((URL, "Https_proxy", False), (URL, "Http_proxy", True),
                                   (secure, "Http_proxy", False), (secure, "Https_proxy", True)):
        routed = pod([{"name": spelling, "value": proxy}, *pods.governed_env(url)],
                     labels={ROUTED_LABEL: "true"})
        assert bool(pod_denials(routed, url)) is refused, (url, spelling)


def test_the_proxies_blanked_follow_the_memory_apis_scheme() -> None:
    from fgentic_governance.admission import pods

    assert pods.governed_env(URL) == governed_env()
    names = [e["name"] for e in pods.governed_env("https://memory.example:8443")]
    assert names == ["KAGENT_URL", "LOG_LEVEL", *TRACE_PINS, *SUBSTRATE_PINS, "HTTPS_PROXY",
                     "https_proxy", "ALL_PROXY", "all_proxy"]


@pytest.mark.parametrize("pin", TRACE_PINS)
def test_content_in_traces_is_pinned_off(pin: str) -> None:
    """Issue 38 §3: with tracing on, google-adk and the traceloop instrumentations put facts,
    queries and summaries in spans and log records unless these are exactly ``false``; the
    mutation sets them last, and the check refuses any other effective value, as LOG_LEVEL."""
    original = pod([{"name": pin, "value": "true"}, {"name": "TEAM", "value": "a"}])
    patched = jsonpatch.apply_patch(copy.deepcopy(original), pod_patch(original, URL))
    assert patched["spec"]["containers"][0]["env"] == [{"name": "TEAM", "value": "a"},
                                                       *governed_env()]
    for entry in ({"name": pin, "value": "true"}, {"name": pin, "value": ""},
                  {"name": pin, "value": "False "}, {"name": pin, "value": "0"},
                  {"name": pin, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}):
        leaky = routed_pod()  # A later duplicate wins; a reference is not the pinned value.
        leaky["spec"]["containers"][0]["env"].append(entry)
        assert where(pod_denials(leaky, URL)) == [
            (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")], entry
    unset = routed_pod()  # Not set in the Pod: envFrom, the image or kagent's controller could.
    unset["spec"]["containers"][0]["env"] = [e for e in governed_env() if e["name"] != pin]
    assert where(pod_denials(unset, URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]
    earlier = routed_pod()  # The near miss: an earlier entry is overridden by the pinned one.
    earlier["spec"]["containers"][0]["env"].insert(0, {"name": pin, "value": "true"})
    assert pod_denials(earlier, URL) == []


@pytest.mark.parametrize("pin", SUBSTRATE_PINS)
def test_kagent_0_10_4s_config_and_token_inputs_are_pinned_empty(pin: str) -> None:
    """Issue 38 §5: kagent-adk 0.10.4 writes each of these, when set, over its config.json,
    agent card, sandbox settings or projected token before loading them; a routed Pod gets
    them empty (last), and any other effective value, a reference included, is refused."""
    value = '{"memory": {"embedding": {"base_url": "http://elsewhere/v1"}}}'
    original = pod([{"name": pin, "value": value}, {"name": "TEAM", "value": "a"}])
    patched = jsonpatch.apply_patch(copy.deepcopy(original), pod_patch(original, URL))
    assert patched["spec"]["containers"][0]["env"] == [{"name": "TEAM", "value": "a"},
                                                       *governed_env()]
    for entry in ({"name": pin, "value": value}, {"name": pin, "value": " x"},
                  {"name": pin, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}):
        leaky = routed_pod()
        leaky["spec"]["containers"][0]["env"].append(entry)
        assert where(pod_denials(leaky, URL)) == [
            (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")], entry
    unset = routed_pod()
    unset["spec"]["containers"][0]["env"] = [e for e in governed_env() if e["name"] != pin]
    assert where(pod_denials(unset, URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]


def test_an_ephemeral_container_is_routed_or_refused() -> None:
    """N8: ``kubectl debug`` adds a container through pods/ephemeralcontainers."""
    debug = {"name": "debug", "image": "busybox",
             "env": [{"name": "KAGENT_URL", "value": "http://kagent-controller.kagent:8083"}]}
    assert where(pod_denials(routed_pod(ephemeralContainers=[debug]), URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.ephemeralContainers[0].env")]
    assert where(pod_denials(routed_pod(ephemeralContainers=[{"name": "bare"}]), URL)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.ephemeralContainers[0].env")]
    governed = {"name": "debug", "image": "busybox", "env": governed_env(URL)}
    assert pod_denials(routed_pod(ephemeralContainers=[governed]), URL) == []


ADDRESS_URL = "http://10.96.77.12:8083"
"""A memory API reached by address (``memoryApi.url`` with a pinned Service address)."""


@pytest.mark.parametrize(("spec", "path", "near_miss"), [
    ({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["cache"]},
                      {"ip": "203.0.113.9",
                       "hostnames": ["fgentic-memory-api.fgentic-system.svc"]}]},
     "spec.hostAliases[1]",
     {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["cache"]},
                      {"ip": "203.0.113.9", "hostnames": ["fgentic-memory-api.other"]}]}),
    ({"hostAliases": [{"ip": "203.0.113.9",
                       "hostnames": ["FGENTIC-MEMORY-API.fgentic-system.svc."]}]},
     "spec.hostAliases[0]", {"hostAliases": [{"ip": "203.0.113.9", "hostnames": ["cache."]}]}),
    ({"hostAliases": [{"ip": "203.0.113.9", "hostnames": [
        "fgentic-memory-api.fgentic-system.svc.team-a.svc.cluster.local"]}]},
     "spec.hostAliases[0]",  # the name with a search domain, tried first (ndots 5)
     {"hostAliases": [{"ip": "203.0.113.9", "hostnames": ["team-a.svc.cluster.local"]}]}),
    ({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["203.0.113.53"]}}, "spec.dnsPolicy",
     {"dnsPolicy": "ClusterFirst"}),
    ({"dnsPolicy": "Default"}, "spec.dnsPolicy", {"dnsPolicy": "ClusterFirstWithHostNet"}),
    ({"dnsConfig": {"searches": ["evil.example"]}}, "spec.dnsConfig",
     {"dnsConfig": {"options": [{"name": "ndots", "value": "2"}]}}),
    ({"dnsConfig": {"nameservers": ["203.0.113.53"]}}, "spec.dnsConfig",
     {"dnsConfig": {"nameservers": []}}),
    ({"hostNetwork": True}, "spec.hostNetwork", {"hostNetwork": False}),
])
def test_a_routed_pod_may_not_rename_or_bypass_the_memory_api(
        spec: dict[str, Any], path: str, near_miss: dict[str, Any]) -> None:
    """N8: host aliases or DNS can answer the memory API's name with another address; the
    host network is outside every NetworkPolicy. The near miss is admitted."""
    found = where(pod_denials(routed_pod(**spec), URL))
    assert (AdmissionCode.MEMORY_ROUTING_BYPASS, path) in found
    assert {code for code, _ in found} == {AdmissionCode.MEMORY_ROUTING_BYPASS}
    assert pod_denials(routed_pod(**near_miss), URL) == []
    # Names do not matter when the memory API is reached by address; the host network does.
    by_address = pod(governed_env(ADDRESS_URL), labels={ROUTED_LABEL: "true"})
    by_address["spec"].update(spec)
    assert where(pod_denials(by_address, ADDRESS_URL)) == (
        [(AdmissionCode.MEMORY_ROUTING_BYPASS, path)] if path == "spec.hostNetwork" else [])


@pytest.mark.parametrize(("new", "old", "refused"), [
    ({ROUTED_LABEL: "true"}, None, True),            # CREATE with the label
    ({ROUTED_LABEL: "false"}, None, True),           # any value: the key is reserved
    ({ROUTED_LABEL: "true"}, {}, True),              # UPDATE that adds it
    ({ROUTED_LABEL: "true"}, {ROUTED_LABEL: "x"}, True),  # UPDATE that changes it
    ({ROUTED_LABEL: "true"}, {ROUTED_LABEL: "true"}, False),  # kept from its creation
    ({}, {ROUTED_LABEL: "true"}, False),             # dropped: the Pod is not routed
    ({"app": "web"}, None, False),
])
def test_only_the_webhook_sets_the_routed_label(new: dict[str, str], old: dict[str, str] | None,
                                                refused: bool) -> None:
    """N7: a Pod the webhook does not route may not take the label (the memory API admits
    its bearer, the embeddings route names the caller's Pod by it)."""
    from fgentic_governance.admission.pods import label_denials

    old_pod = None if old is None else pod([], labels=old)
    expected = [(AdmissionCode.ROUTED_LABEL_RESERVED, "metadata.labels")] if refused else []
    assert where(label_denials(pod([], labels=new), old_pod)) == expected


def test_routed_pods_status_and_ephemeral_container_writes_are_checked() -> None:
    """N6: the label could be dropped through ``pods/status`` (the check covered ``pods``
    only), and ``pods/ephemeralcontainers`` added containers unchecked."""
    config = webhook_configuration("x", "https://h", b"ca", memory_routing=True)
    covered = {(resource, operation)
               for hook in config["webhooks"] if hook["clientConfig"]["url"] == "https://h/podcheck"
               and hook.get("objectSelector") == {"matchExpressions": [
                   {"key": ROUTED_LABEL, "operator": "Exists"}]}
               and "matchLabels" not in hook["namespaceSelector"]
               and hook["failurePolicy"] == "Fail"
               for rule in hook["rules"] for resource in rule["resources"]
               for operation in rule["operations"]}
    assert {("pods/status", "UPDATE"), ("pods/ephemeralcontainers", "UPDATE"),
            ("pods", "CREATE"), ("pods", "UPDATE")} <= covered


def test_an_update_judges_only_what_can_still_change() -> None:
    """A Pod routed by an earlier release (KAGENT_URL and LOG_LEVEL only) or before the memory
    API's URL changed keeps its status, label and finalizer writes: the API server keeps a
    container's env as created, so an UPDATE re-judges only the label and new containers."""
    earlier = pod([{"name": "KAGENT_URL", "value": URL}, {"name": "LOG_LEVEL", "value": "ERROR"}],
                  labels={ROUTED_LABEL: "true"})
    earlier["spec"]["dnsConfig"] = {"searches": ["corp.example"]}
    assert where(pod_denials(earlier, URL)) == [  # As a new Pod it is refused ...
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env"),
        (AdmissionCode.MEMORY_ROUTING_BYPASS, "spec.dnsConfig")]
    status = copy.deepcopy(earlier)
    status["status"] = {"phase": "Running"}
    assert pod_denials(status, URL, earlier) == []  # ... its status write is not.
    unlabelled = copy.deepcopy(earlier)
    unlabelled["metadata"]["labels"] = {}
    assert where(pod_denials(unlabelled, URL, earlier)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "metadata.labels")]
    debug = copy.deepcopy(earlier)
    debug["spec"]["ephemeralContainers"] = [{"name": "debug", "env": []}]
    assert where(pod_denials(debug, URL, earlier)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.ephemeralContainers[0].env")]
    changed = copy.deepcopy(earlier)  # Not something the API server lets through; judged.
    changed["spec"]["containers"][0]["env"] = []
    assert where(pod_denials(changed, URL, earlier)) == [
        (AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "spec.containers[0].env")]
