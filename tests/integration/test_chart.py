"""The Helm chart lints, renders, and its manifests pass a server-side dry run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_devenv.binaries import binary
from fgentic_governance.admission import render as admission
from fgentic_governance.api.appservice import FLAG, AppserviceNamespace, AppserviceRegistry
from fgentic_governance.api.common import GROUP
from fgentic_governance.api.registry import KINDS
from fgentic_governance.cli import _parser as cli_parser
from fgentic_governance.retrieval.render.names import RENDERED_KINDS
from tests.support.appservice import telegram
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration
CHART = ROOT / "charts" / "fgentic-governance"
NS = "fgentic-system"
API_SERVER = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
"""The review port's sources: the chart renders nothing until they are chosen."""
SOURCES = ("--set-json", f"webhook.networkPolicy.apiServerSources={json.dumps(API_SERVER)}")


def _helm(*args: str) -> str:
    result = subprocess.run([str(binary("helm")), *args], capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _render(*sets: str, json_sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", "fg", str(CHART), "--namespace", NS, *SOURCES]
    for value in sets:
        args += ["--set", value]
    for value in json_sets:
        args += ["--set-json", value]
    return [d for d in yaml.safe_load_all(_helm(*args)) if d]


def test_chart_lints() -> None:
    assert "1 chart(s) linted, 0 chart(s) failed" in _helm("lint", str(CHART))


def test_webhook_configuration_is_ours_and_fails_closed() -> None:
    (vwc,) = [d for d in _render() if d["kind"] == "ValidatingWebhookConfiguration"]
    assert len(vwc["webhooks"]) == 2
    for hook in vwc["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] <= 5
        excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert {"kube-system", NS} <= set(excluded)
        # The default bootstrap mode: the webhook injects its CA at run time, so none is
        # rendered (a GitOps diff then has no caBundle to reset).
        assert "caBundle" not in hook["clientConfig"]
    (vwc,) = [d for d in _render("webhook.tls.mode=generate")
              if d["kind"] == "ValidatingWebhookConfiguration"]
    assert all(hook["clientConfig"]["caBundle"] for hook in vwc["webhooks"])  # generated CA


def test_chart_admission_rules_equal_the_python_renderers() -> None:
    docs = _render()
    (vwc,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    rendered = admission.webhook_configuration("x", "https://h", b"ca")
    assert [h["name"] for h in vwc["webhooks"]] == [h["name"] for h in rendered["webhooks"]]
    for chart_hook, python_hook in zip(vwc["webhooks"], rendered["webhooks"], strict=True):
        assert chart_hook["rules"] == python_hook["rules"]
        assert chart_hook["clientConfig"]["service"]["path"] == \
            python_hook["clientConfig"]["url"].removeprefix("https://h")
    policies = {d["metadata"]["name"]: d for d in docs
                if d["kind"] == "ValidatingAdmissionPolicy"}
    assert set(policies) == {"fg-agents"}  # no homeserver: no scope policy
    agents, _ = admission.admission_policy()
    assert policies["fg-agents"]["spec"] == agents["spec"]
    with_home = {d["metadata"]["name"]: d for d in _render("localHomeserver=example.org")
                 if d["kind"] == "ValidatingAdmissionPolicy"}
    scopes, _ = admission.scope_policy("example.org")
    assert with_home["fg-memoryscopes"]["spec"] == scopes["spec"]


def test_chart_appservice_rule_equals_the_python_renderer() -> None:
    """The registry's regexes reach the MemoryScope policy's CEL as the Python renderer writes
    them, through Helm's and YAML's quoting: backslashes, quotes and characters Helm's toJson
    escapes (<, >, &) included."""
    registry = AppserviceRegistry([
        *telegram("example.org").namespaces,
        AppserviceNamespace(network="odd", user_regex='@odd_[<>&"]+\\\\:example\\.org')])
    docs = _render("localHomeserver=example.org",
                   json_sets=(f"appserviceNamespaces={json.dumps(registry.wire())}",))
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"] == "fg-memoryscopes"]
    scopes, _ = admission.scope_policy("example.org", appservice=registry)
    assert policy["spec"] == scopes["spec"]
    assert [v["message"].split(":")[0] for v in policy["spec"]["validations"]] == [
        "FEDERATION_DENIED", "APPSERVICE_IDENTITY_DENIED"]
    done = subprocess.run([sys.executable, "-m", "fgentic_devenv.cli", "chart-policy",
                           "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_webhook_has_probes_and_knows_the_local_homeserver() -> None:
    docs = _render("localHomeserver=example.org")
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "fg-webhook"]
    container = webhook["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--local-homeserver=example.org" in container["args"]


def test_every_process_gets_the_one_appservice_registry() -> None:
    """One value, one flag: the operator, the webhook, the memory API and the control API
    read the same --appservice-namespaces, as their own parsers take it; unset, none gets it;
    an entry of another shape is refused at render time."""
    namespaces = telegram("x.org").wire()
    workloads = ("controlApi.enabled=true", "store.dsnSecret.name=store",
                 "controlApi.tokenSecret.name=bridge-token", "controlApi.botMxid=@bot:x.org",
                 "memoryApi.enabled=true", "localHomeserver=x.org")
    docs = _render(*workloads, json_sets=(f"appserviceNamespaces={json.dumps(namespaces)}",))
    deployments = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
                   for d in docs if d["kind"] == "Deployment"}
    readers = {"fg-operator", "fg-webhook", "fg-memory-api", "fg-control-api"}
    assert readers <= set(deployments)
    parser = cli_parser()
    for name in readers:
        assert sum(a.startswith(FLAG) for a in deployments[name]) == 1, name
        assert parser.parse_args(deployments[name]).appservice_namespaces.wire() == \
            namespaces, name
    assert not [name for name, args in
                {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
                 for d in _render(*workloads) if d["kind"] == "Deployment"}.items()
                if any(a.startswith(FLAG) for a in args)]
    with pytest.raises(AssertionError, match="appserviceNamespaces"):
        _render(*workloads, json_sets=('appserviceNamespaces=[{"network": "telegram"}]',))


def test_bootstrap_mode_wires_the_webhook_to_manage_its_own_ca() -> None:
    docs = _render("webhook.tls.mode=bootstrap")
    assert not any(d["kind"] == "Secret" for d in docs)  # The webhook makes it at run time.
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "fg-webhook"]
    pod = webhook["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--bootstrap-secret=fg-webhook-tls" in args
    assert "--bootstrap-webhook-config=fg" in args
    assert "emptyDir" in pod["volumes"][0]
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "fg-webhook-tls"]
    assert {"get", "update"} <= {v for r in role["rules"] if r.get("resourceNames")
                                 for v in r["verbs"]}
    (inject,) = [d for d in docs if d["kind"] == "ClusterRole"
                 and d["metadata"]["name"] == "fg-webhook-cainjection"]
    assert inject["rules"][0]["resourceNames"] == ["fg"]


def test_control_api_is_reachable_only_from_the_bridge() -> None:
    docs = _render("controlApi.enabled=true", "store.dsnSecret.name=store",
                   "controlApi.tokenSecret.name=bridge-token", "controlApi.botMxid=@bot:x.org",
                   "localHomeserver=x.org")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"
                 and d["metadata"]["name"] == "fg-control-api"]
    (peer,) = policy["spec"]["ingress"][0]["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "matrix"}
    assert peer["podSelector"]["matchLabels"]
    (deploy,) = [d for d in docs if d["metadata"]["name"] == "fg-control-api"
                 and d["kind"] == "Deployment"]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--token-file=/var/run/fgentic/token/token" in args
    # Confirmations live in the store: two replicas by default, spread, with a PDB; one
    # replica has neither; none is refused at render time.
    assert deploy["spec"]["replicas"] == 2
    assert "strategy" not in deploy["spec"]  # rolling: a confirmation survives an upgrade
    spread = deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"
    (budget,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"
                 and d["metadata"]["name"] == "fg-control-api"]
    assert budget["spec"]["minAvailable"] == 1
    single = _render("controlApi.enabled=true", "store.dsnSecret.name=store",
                     "controlApi.tokenSecret.name=bridge-token", "controlApi.botMxid=@bot:x.org",
                     "controlApi.replicas=1", "localHomeserver=x.org")
    (deploy,) = [d for d in single if d["metadata"]["name"] == "fg-control-api"
                 and d["kind"] == "Deployment"]
    assert deploy["spec"]["replicas"] == 1 and "affinity" not in deploy["spec"]["template"][
        "spec"]
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"
                and d["metadata"]["name"] == "fg-control-api"]
    with pytest.raises(AssertionError, match=r"at '/controlApi/replicas': minimum"):
        _render("controlApi.enabled=true", "store.dsnSecret.name=store",
                "controlApi.tokenSecret.name=bridge-token", "controlApi.botMxid=@bot:x.org",
                "controlApi.replicas=0", "localHomeserver=x.org")


def _webhook_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"
                 and d["metadata"]["name"] == "fg-webhook"]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "webhook"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    return policy


def test_webhook_network_policy_separates_the_review_and_metrics_ports() -> None:
    docs = _render()
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "fg-webhook"]
    ports = {p["name"] for p in webhook["spec"]["template"]["spec"]["containers"][0]["ports"]}
    review, metrics = _webhook_policy(docs)["spec"]["ingress"]
    # Named container ports: the review port open to the chosen API server sources, the
    # health/metrics port to in-cluster pods only by default.
    assert review == {"ports": [{"protocol": "TCP", "port": "https"}], "from": API_SERVER}
    assert metrics == {"ports": [{"protocol": "TCP", "port": "http-health"}],
                       "from": [{"namespaceSelector": {}}]}
    assert {"https", "http-health"} <= ports
    scraper = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    review, metrics = _webhook_policy(_render(json_sets=(
        "webhook.networkPolicy.apiServerSources=[]",
        f"webhook.networkPolicy.metricsSources={json.dumps(scraper)}")))["spec"]["ingress"]
    assert "from" not in review and metrics["from"] == scraper  # [] chosen: any source
    assert not [d for d in _render("webhook.networkPolicy.enabled=false")
                if d["kind"] == "NetworkPolicy"]


def test_the_review_port_sources_must_be_chosen() -> None:
    """N9: no default admits every Pod of the cluster to the unauthenticated review port."""
    result = subprocess.run([str(binary("helm")), "template", "fg", str(CHART)],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "webhook.networkPolicy.apiServerSources must be set" in result.stderr
    # Without the webhook's NetworkPolicy there is nothing to choose.
    assert not [d for d in yaml.safe_load_all(_helm(
        "template", "fg", str(CHART), "--set", "webhook.networkPolicy.enabled=false"))
        if d and d["kind"] == "NetworkPolicy"]


def test_the_webhook_can_require_the_api_servers_client_certificate() -> None:
    """N9: with webhook.clientAuth.caSecret the review port answers only that CA's clients."""
    def webhook(*sets: str) -> dict[str, Any]:
        (deployment,) = [d for d in _render(*sets) if d["kind"] == "Deployment"
                         and d["metadata"]["name"] == "fg-webhook"]
        return dict(deployment["spec"]["template"]["spec"])

    pod = webhook("webhook.clientAuth.caSecret=apiserver-client-ca")
    container = pod["containers"][0]
    assert "--client-ca-file=/var/run/fgentic/client-ca/ca.crt" in container["args"]
    assert {"name": "client-ca", "mountPath": "/var/run/fgentic/client-ca",
            "readOnly": True} in container["volumeMounts"]
    assert {"name": "client-ca", "secret": {"secretName": "apiserver-client-ca", "items": [
        {"key": "ca.crt", "path": "ca.crt"}]}} in pod["volumes"]
    assert not any(a.startswith("--client-ca-file")
                   for a in webhook()["containers"][0]["args"])


def test_control_api_refuses_to_render_without_its_secrets() -> None:
    result = subprocess.run([str(binary("helm")), "template", "fg", str(CHART), *SOURCES,
                             "--set", "controlApi.enabled=true"], capture_output=True,
                            text=True, check=False)
    assert result.returncode != 0 and "controlApi needs" in result.stderr


MEMORY_API = ("memoryApi.enabled=true", "store.dsnSecret.name=pg",
              "localHomeserver=example.org")


def test_memory_routing_equals_the_python_renderers() -> None:
    docs = _render(*MEMORY_API)
    (vwc,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (mwc,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    python_vwc = admission.webhook_configuration("x", "https://h", b"ca", memory_routing=True)
    python_mwc = admission.mutating_configuration("x", "https://h", b"ca")
    for chart, python in ((vwc, python_vwc), (mwc, python_mwc)):
        assert [h["name"] for h in chart["webhooks"]] == [h["name"] for h in python["webhooks"]]
        for chart_hook, python_hook in zip(chart["webhooks"], python["webhooks"], strict=True):
            for key in ("rules", "objectSelector", "failurePolicy", "sideEffects"):
                assert chart_hook.get(key) == python_hook.get(key), (chart_hook["name"], key)
            assert chart_hook.get("reinvocationPolicy") == python_hook.get("reinvocationPolicy")
            assert chart_hook["namespaceSelector"].get("matchLabels") == \
                python_hook["namespaceSelector"].get("matchLabels")
            # The same namespace rules, apart from the excluded names (the chart adds its own).
            assert [e for e in chart_hook["namespaceSelector"]["matchExpressions"]
                    if e["key"] != "kubernetes.io/metadata.name"] == \
                [e for e in python_hook["namespaceSelector"]["matchExpressions"]
                 if e["key"] != "kubernetes.io/metadata.name"]
            assert chart_hook["clientConfig"]["service"]["path"] == \
                python_hook["clientConfig"]["url"].removeprefix("https://h")
    # Without the memory API there is no Pod routing at all (and memory Agents are refused).
    plain = _render()
    assert not [d for d in plain if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = [d for d in plain if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "fg-webhook"]
    assert not any(a.startswith("--memory-api-url")
                   for a in webhook["spec"]["template"]["spec"]["containers"][0]["args"])


def test_memory_api_may_have_its_own_least_privileged_login() -> None:
    """memoryApi.dsnSecret: the memory API mounts its own login's DSN and is not ready while
    that login could act as the store's owner; without it, the operator's DSN and no check."""
    def pod(*sets: str) -> tuple[list[str], dict[str, Any]]:
        [deployment] = [d for d in _render(*MEMORY_API, *sets) if d["kind"] == "Deployment"
                        and d["metadata"]["name"] == "fg-memory-api"]
        spec = deployment["spec"]["template"]["spec"]
        [volume] = [v for v in spec["volumes"] if v["name"] == "store-dsn"]
        return spec["containers"][0]["args"], volume["secret"]

    args, secret = pod()
    assert "--require-delegate-login" not in args
    store = next(s for s in MEMORY_API if s.startswith("store.dsnSecret.name="))
    assert secret["secretName"] == store.partition("=")[2]
    assert secret["items"] == [{"key": "dsn", "path": "dsn"}]
    args, secret = pod("memoryApi.dsnSecret.name=fg-memory-api-login",
                       "memoryApi.dsnSecret.key=uri")
    assert "--require-delegate-login" in args
    assert secret == {"secretName": "fg-memory-api-login",
                      "items": [{"key": "uri", "path": "dsn"}]}


def test_memory_api_runs_replicated_least_privileged_and_fenced_by_policy() -> None:
    docs = _render(*MEMORY_API, "memoryApi.agentNamespaces={team-a}")
    named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    deployment = named[("Deployment", "fg-memory-api")]
    assert deployment["spec"]["replicas"] >= 2
    assert ("PodDisruptionBudget", "fg-memory-api") in named
    # A Pod's calls reach one replica, which attributes its embeddings and summaries.
    assert named[("Service", "fg-memory-api")]["spec"]["sessionAffinity"] == "ClientIP"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "memory-api"
    assert "--local-homeserver=example.org" in container["args"]
    webhook = named[("Deployment", "fg-webhook")]["spec"]["template"]["spec"]["containers"][0]
    assert "--memory-api-url=http://fg-memory-api.fgentic-system.svc:8083" in webhook["args"]
    role = named[("ClusterRole", "fg-memory-api")]
    assert role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["kagent.dev"], "resources": ["agents"], "verbs": ["list"]}]
    embedding = {(d["kind"], d["metadata"]["name"]): d for d in _render(
        *MEMORY_API, "memoryApi.embeddingsUpstream=http://gw/v1/embeddings",
        "memoryApi.networkPolicy.embeddingsPort=8080")}
    args = embedding[("Deployment", "fg-memory-api")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--embeddings-upstream=http://gw/v1/embeddings" in args
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]} in embedding[
        ("ClusterRole", "fg-memory-api")]["rules"]
    assert {"protocol": "TCP", "port": 8080} in [
        port for rule in embedding[("NetworkPolicy", "fg-memory-api")]["spec"]["egress"]
        for port in rule["ports"]]
    policy = named[("NetworkPolicy", "fg-memory-api")]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    sources = policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "fgentic.dev/memory-routed": "true"}}} in sources
    egress = named[("NetworkPolicy", "fg-memory-routed-egress")]
    assert egress["metadata"]["namespace"] == "team-a"
    assert egress["spec"]["podSelector"] == {"matchLabels": {"fgentic.dev/memory-routed": "true"}}
    assert egress["spec"]["policyTypes"] == ["Egress"]


@pytest.mark.parametrize(("sets", "message"), [
    (("memoryApi.enabled=true",), "memoryApi needs store.dsnSecret.name"),
    ((*MEMORY_API, "memoryApi.replicas=1"), "at '/memoryApi/replicas': minimum"),
])
def test_memory_api_refuses_to_render_unsafely(sets: tuple[str, ...], message: str) -> None:
    args = [str(binary("helm")), "template", "fg", str(CHART), *SOURCES]
    for value in sets:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and message in result.stderr


def test_webhook_runs_two_replicas_behind_a_pdb() -> None:
    docs = _render()
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "fg-webhook"]
    assert webhook["spec"]["replicas"] >= 2
    assert any(d["kind"] == "PodDisruptionBudget" for d in docs)


def test_store_dsn_comes_from_a_secret_file_only() -> None:
    docs = _render("store.dsnSecret.name=store")
    (operator,) = [d for d in docs if d["metadata"]["name"] == "fg-operator"
                   and d["kind"] == "Deployment"]
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert "--store-dsn-file=/var/run/fgentic/store/dsn" in container["args"]
    # The environment holds the tuning knobs only: never the DSN, never a secret reference.
    env = container.get("env", [])
    assert {e["name"] for e in env} == set(TUNING_ENV.values())
    assert all(set(e) == {"name", "value"} and "postgres" not in e["value"] for e in env)
    assert operator["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "store"


TUNING_ENV = {
    "scopeResyncSeconds": "FGENTIC_SCOPE_RESYNC_SECONDS",
    "bindingResyncSeconds": "FGENTIC_BINDING_RESYNC_SECONDS",
    "apiConnections": "FGENTIC_API_CONNECTIONS",
}


def test_operator_tuning_values_reach_the_environment() -> None:
    overrides = ",".join(f"operator.tuning.{key}={i + 7}" for i, key in enumerate(TUNING_ENV))
    (operator,) = [d for d in _render(overrides) if d["metadata"]["name"] == "fg-operator"
                   and d["kind"] == "Deployment"]
    env = {e["name"]: e["value"]
           for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {name: str(i + 7) for i, name in enumerate(TUNING_ENV.values())}


def test_uninstall_hook_detaches_with_the_store_and_least_privilege() -> None:
    hooks = [d for d in _render("store.dsnSecret.name=store")
             if "helm.sh/hook" in (d["metadata"].get("annotations") or {})
             and d["metadata"]["annotations"]["helm.sh/hook"] != "test"]
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                          "Role", "RoleBinding", "Job"}
    assert all(d["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete" for d in hooks)
    (job,) = [d for d in hooks if d["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["detach", f"--operator-deployment={NS}/fg-operator",
                                 f"--operator-lease={NS}/fg-operator",
                                 "--store-dsn-file=/var/run/fgentic/store/dsn"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (role,) = [d for d in hooks if d["kind"] == "ClusterRole"]
    verbs = {(group, resource): set(rule["verbs"]) for rule in role["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    # Our kinds: release the finalizer. What bindings rendered: delete it, and nothing else.
    rendered = {(api_version.rpartition("/")[0], plural)
                for (api_version, _), plural in RENDERED_KINDS.items()}
    assert verbs == {**{(GROUP, kind.plural): {"list", "patch"} for kind in KINDS},
                     **{key: {"list", "delete"} for key in rendered}}
    # Without a store there is nothing to fence; opting out renders no hook at all.
    (job,) = [d for d in _render() if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "detach", f"--operator-deployment={NS}/fg-operator", f"--operator-lease={NS}/fg-operator"]
    assert not [d for d in _render("detachOnUninstall=false") if d["kind"] == "Job"]


def test_operator_role_is_least_privilege() -> None:
    (role,) = [d for d in _render() if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "fg-operator"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "secrets" not in rule["resources"]


def test_rendered_manifests_pass_server_side_dry_run(control_plane: Any, tmp_path: Path) -> None:
    control_plane.ensure_namespace(NS)
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(_helm("template", "fg", str(CHART), "--namespace", NS, *SOURCES,
                              "--set", "localHomeserver=example.org",
                              "--set", "store.dsnSecret.name=store",
                              "--set", "controlApi.enabled=true",
                              "--set", "controlApi.tokenSecret.name=bridge-token",
                              "--set", "controlApi.botMxid=@bot:example.org",
                              "--set", "memoryApi.enabled=true",
                              "--set", "memoryApi.agentNamespaces={" + NS + "}"))
    # Every object names its namespace (the helm test's Role lives in the one it probes).
    out = control_plane.kubectl("apply", "--dry-run=server", "-f", str(manifest))
    assert "validatingwebhookconfiguration.admissionregistration.k8s.io/fg created" in out
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/fg created" in out
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/fg-agents created" in out
    assert out.count("(server dry run)") == len(
        [d for d in yaml.safe_load_all(manifest.read_text()) if d])


RETRIEVAL = ("retrievalServer.enabled=true", "retrievalServer.binding.namespace=fgentic-demo",
             "retrievalServer.binding.name=docs-agent-retrieval",
             "retrievalServer.namespace=fgentic-retrieval",
             "retrievalServer.corpusDsnSecret.name=corpus-dsn",
             "retrievalServer.embeddings.url=http://gw.agentgateway-system:4001/v1/embeddings",
             "retrievalServer.embeddings.model=bge-m3")


def test_the_retrieval_server_runs_replicated_from_its_bindings_configuration() -> None:
    named = {(d["kind"], d["metadata"]["name"]): d for d in _render(*RETRIEVAL)}
    deployment = named[("Deployment", "fg-retrieval-server")]
    assert deployment["metadata"]["namespace"] == "fgentic-retrieval"
    assert deployment["spec"]["replicas"] >= 2
    assert ("PodDisruptionBudget", "fg-retrieval-server") in named
    assert named[("Service", "fg-retrieval-server")]["metadata"]["namespace"] == (
        "fgentic-retrieval")
    pod = deployment["spec"]["template"]
    # The example binding's retrievalService.selector: its rendered policies select these Pods.
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "knowledge-retrieval"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "retrieval-server"
    text = _helm("template", "fg", str(CHART), "--namespace", NS, *SOURCES,
                 *(a for v in RETRIEVAL for a in ("--set", v)))
    block = text.split("kind: Deployment\nmetadata:\n  name: fg-retrieval-server")[1]
    labels = block.split("labels:")[2].split("spec:")[0]  # the pod template's labels
    keys = [line.split(":")[0].strip() for line in labels.splitlines() if ":" in line]
    assert len(keys) == len(set(keys)), keys  # no key written twice (strict YAML refuses it)
    assert pod["spec"]["automountServiceAccountToken"] is False
    container = pod["spec"]["containers"][0]
    assert container["args"][:2] == ["retrieval-server",
                                     "--config=/etc/fgentic/retrieval/retrieval-server.json"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    # The ConfigMap the operator renders from the binding (render.names.SERVER_CONFIG_SUFFIX).
    assert volumes["config"]["configMap"]["name"] == (
        "fgentic-demo.docs-agent-retrieval.retrieval-server")
    assert volumes["corpus-dsn"]["secret"]["secretName"] == "corpus-dsn"
    assert "embeddings-key" not in volumes
    keyed = {(d["kind"], d["metadata"]["name"]): d for d in _render(
        *RETRIEVAL, "retrievalServer.embeddings.keySecret.name=embeddings-key")}
    args = keyed[("Deployment", "fg-retrieval-server")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--embeddings-key-file=/var/run/fgentic/embeddings/key" in args
    assert "--dimensions=768" in container["args"]


@pytest.mark.parametrize(("sets", "message"), [
    (("retrievalServer.enabled=true",), "retrievalServer needs binding.namespace"),
    ((*RETRIEVAL, "retrievalServer.corpusDsnSecret.name="), "needs corpusDsnSecret.name"),
    ((*RETRIEVAL, "retrievalServer.embeddings.model="), "needs embeddings.url and"),
    ((*RETRIEVAL, "retrievalServer.replicas=1"), "at '/retrievalServer/replicas': minimum"),
    ((*RETRIEVAL, "retrievalServer.dimensions=512"), "at '/retrievalServer/dimensions'"),
])
def test_the_retrieval_server_refuses_to_render_incomplete(sets: tuple[str, ...],
                                                           message: str) -> None:
    args = [str(binary("helm")), "template", "fg", str(CHART), *SOURCES]
    for value in sets:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and message in result.stderr


@pytest.mark.parametrize(("sets", "message"), [
    (("webhook.replicas=abc",), "at '/webhook/replicas'"),
    (("webhook.tls.mode=bogus",), "at '/webhook/tls/mode'"),
    (("operator.replicas=0",), "at '/operator/replicas': minimum"),
    (("webhok.replicas=2",), "additional properties 'webhok' not allowed"),
    (("webhook.failurePolicy=Ignore",), "at '/webhook/failurePolicy'"),
    (("memoryApi.url=memory-api:8083",), "at '/memoryApi/url'"),
    (("controlApi.enabled=true", "store.dsnSecret.name=store",
      "controlApi.tokenSecret.name=t", "controlApi.botMxid=@bot:example.org",
      "localHomeserver=fgentic.local"),
     "controlApi.botMxid must be a user of localHomeserver (fgentic.local)"),
    (("memoryApi.enabled=true", "store.dsnSecret.name=store"), "memoryApi needs localHomeserver"),
    # Issue 37 §11: each of these rendered, to fail (or crash-loop) only in the cluster.
    (("webhook.tls.mode=secret",), "at '/webhook/tls/caBundle'"),
    (("webhook.replicas=1",), "at '/webhook/replicas': minimum"),
    (("webhook.networkPolicy.apiServerSources[0].ipBlock.cidr=10.0.0.300/24",),
     "at '/webhook/networkPolicy/apiServerSources/0/ipBlock/cidr'"),
    (("memoryApi.networkPolicy.storePeers[0].ipBlock.cidr=10.0.0.0",),
     "at '/memoryApi/networkPolicy/storePeers/0/ipBlock/cidr'"),
    (("webhook.resources.limits.memory=lots",), "at '/webhook/resources/limits/memory'"),
    (("operator.resources.requests.cpu=fast",), "at '/operator/resources/requests/cpu'"),
], ids=["replicas-not-a-number", "tls-mode", "no-operator", "misspelt-key", "fail-open",
        "url-without-scheme", "bot-on-another-server", "memory-without-homeserver",
        "secret-mode-without-ca", "one-webhook-replica", "malformed-cidr", "cidr-without-prefix",
        "memory-not-a-quantity", "cpu-not-a-quantity"])
def test_contradictory_values_are_refused_at_render_time(sets: tuple[str, ...],
                                                         message: str) -> None:
    """Issue 27: values.schema.json (generated: `fgentic-dev chart-schema`) and the templates'
    own checks refuse what would otherwise crash-loop at run time."""
    with pytest.raises(AssertionError) as refused:
        _render(*sets)
    assert message in str(refused.value)


def test_the_crds_are_templates_that_upgrade_with_the_chart() -> None:
    """Issue 37 §8: Helm never upgrades a chart's crds/ directory, so the CRDs are templates
    (as cert-manager's crds.enabled): the generated files verbatim, labelled as the release's
    and kept on uninstall by default; none with crds.install=false, not kept without
    crds.keep. The chart has no crds/ directory (Helm would install those the old way too)."""
    crds = {d["metadata"]["name"]: d for d in _render()
            if d["kind"] == "CustomResourceDefinition"}
    generated = {d["metadata"]["name"]: d for d in (
        yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml")))}
    assert crds.keys() == generated.keys() and len(crds) == 5
    for name, crd in crds.items():
        assert crd["spec"] == generated[name]["spec"], name
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fgentic-governance"
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert not [d for d in _render("crds.install=false")
                if d["kind"] == "CustomResourceDefinition"]
    unkept = [d for d in _render("crds.keep=false") if d["kind"] == "CustomResourceDefinition"]
    assert len(unkept) == 5 and not any(d["metadata"].get("annotations") for d in unkept)
    assert not (CHART / "crds").exists()


def test_webhook_tls_modes_can_follow_each_other() -> None:
    """Issue 37 §8: the generate mode's Secret has a name no run-time writer uses (Helm
    refused to adopt the bootstrap webhook's or cert-manager's), and the modes in which Helm
    writes caBundle hand it over from the webhook or cert-manager before an upgrade."""
    def secret_and_hooks(*sets: str) -> tuple[str, list[str]]:
        docs = _render(*sets)
        (deploy,) = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "fg-webhook"]
        (tls,) = [v for v in deploy["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "tls"]
        hooks = [d["kind"] for d in docs if (d["metadata"].get("annotations") or {}).get(
            "helm.sh/hook") == "pre-upgrade"]
        return tls.get("secret", {}).get("secretName", "emptyDir"), hooks

    assert secret_and_hooks() == ("emptyDir", [])
    assert secret_and_hooks("webhook.tls.mode=certManager") == ("fg-webhook-tls", [])
    handover = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"]
    assert secret_and_hooks("webhook.tls.mode=generate") == (
        "fg-webhook-tls-generated", handover)
    assert secret_and_hooks("webhook.tls.mode=secret", "webhook.tls.secretName=mine",
                            "webhook.tls.caBundle=QUJD") == ("mine", handover)
    (role,) = [d for d in _render("webhook.tls.mode=generate") if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "fg-tls-handover"]
    assert role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"], "resources": [
        "validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
        "resourceNames": ["fg"], "verbs": ["get", "patch"]}]


def test_helm_test_asks_the_api_server_for_a_webhook_denial() -> None:
    """Issue 37 §11: `helm test` passed with a wrong apiServerSources. Its Pod now sends a
    dry-run ConsentRecord for a missing scope through the API server and passes only on the
    webhook's own denial; it may create only that kind, only in the probed namespace."""
    docs = [d for d in _render() if (d["metadata"].get("annotations") or {}).get(
        "helm.sh/hook") == "test"]
    named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    pod = named[("Pod", "fg-smoke")]["spec"]
    assert pod["serviceAccountName"] == "fg-smoke"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["WEBHOOK_PROBE_NAMESPACE"] == "default"
    script = pod["containers"][0]["args"][0]
    assert "dryRun=All" in script
    assert 'admission webhook "objects.governance.fgentic.dev" denied' in script
    role = named[("Role", "fg-smoke")]
    assert role["metadata"]["namespace"] == "default"
    assert role["rules"] == [{"apiGroups": ["governance.fgentic.dev"],
                              "resources": ["consentrecords"], "verbs": ["create"]}]
    assert named[("RoleBinding", "fg-smoke")]["metadata"]["namespace"] == "default"
    excluded = [d for d in _render("webhook.helmTestNamespace=kube-system")
                if d["kind"] == "Pod" and d["metadata"]["name"] == "fg-smoke"]
    env = {e["name"]: e.get("value") for e in excluded[0]["spec"]["containers"][0]["env"]}
    assert env["WEBHOOK_PROBE_NAMESPACE"] == "-"  # the Pod fails, saying why


def test_the_values_schema_is_generated_from_values_yaml() -> None:
    done = subprocess.run([sys.executable, "-m", "fgentic_devenv.cli", "chart-schema",
                           "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_workload_takes_the_usual_pod_knobs() -> None:
    """Issue 27: podAnnotations, podLabels, nodeSelector, tolerations, affinity,
    topologySpreadConstraints, priorityClassName, imagePullSecrets and per-workload security
    contexts on every workload; a PodDisruptionBudget only where there is more than one
    replica (at one it would block every node drain)."""
    workloads = {"operator": "operator", "webhook": "webhook", "memoryApi": "memory-api",
                 "controlApi": "control-api", "retrievalServer": "retrieval-server"}
    sets = ["store.dsnSecret.name=store", "memoryApi.enabled=true",
            "controlApi.enabled=true", "controlApi.tokenSecret.name=t",
            "controlApi.botMxid=@bot:x.org", "localHomeserver=x.org",
            *RETRIEVAL, "imagePullSecrets[0].name=regcred"]
    for key in workloads:
        sets += [f"{key}.podAnnotations.team=a", f"{key}.nodeSelector.pool=system",
                 f"{key}.tolerations[0].key=dedicated", f"{key}.priorityClassName=critical",
                 f"{key}.podSecurityContext.runAsUser=1000",
                 f"{key}.securityContext.readOnlyRootFilesystem=true"]
    docs = _render(*sets)
    for key, component in workloads.items():
        (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["spec"]["selector"][
            "matchLabels"].get("app.kubernetes.io/component") == component]
        pod = deploy["spec"]["template"]
        assert pod["metadata"]["annotations"] == {"team": "a"}, key
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == component
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"pool": "system"}, key
        assert spec["tolerations"] == [{"key": "dedicated"}], key
        assert spec["priorityClassName"] == "critical", key
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], key
        assert spec["securityContext"] == {"runAsUser": 1000}, key
        assert spec["containers"][0]["securityContext"] == {"readOnlyRootFilesystem": True}
        replicated = deploy["spec"]["replicas"] > 1
        assert ("affinity" in spec) is replicated, key
    budgets = {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert "fg-operator" not in budgets  # one replica: no budget
    assert {"fg-webhook", "fg-memory-api", "fg-control-api", "fg-retrieval-server"} <= budgets


def test_operator_replicas_elect_a_leader() -> None:
    """Issue 27: every operator replica takes part in the Lease election (its Role may touch
    only that Lease); more than one gets a PodDisruptionBudget and is spread over nodes."""
    for replicas in (1, 3):
        docs = _render(f"operator.replicas={replicas}")
        (deploy,) = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "fg-operator"]
        assert deploy["spec"]["replicas"] == replicas
        assert deploy["spec"]["strategy"] == {"type": "RollingUpdate"}
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert f"--leader-lease={NS}/fg-operator" in container["args"]
        (role,) = [d for d in docs if d["kind"] == "Role"
                   and d["metadata"]["name"] == "fg-operator-leader"]
        named = [r for r in role["rules"] if "resourceNames" in r]
        assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                          "resourceNames": ["fg-operator"], "verbs": ["get", "update"]}]
        budgets = {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"}
        assert ("fg-operator" in budgets) is (replicas > 1)
        assert ("affinity" in deploy["spec"]["template"]["spec"]) is (replicas > 1)


def test_an_operator_shard_owns_its_namespaces_and_may_leave_the_cluster_kinds() -> None:
    """Issue 39: a shard release lists its namespaces and, unless it is the one shard that
    handles the cluster-scoped kinds, --no-cluster-kinds; its Role may list the release
    namespace's Leases, where the other shards' claims are (kube/shards.py)."""
    def operator(*sets: str) -> tuple[list[str], list[dict[str, Any]]]:
        docs = _render(*sets)
        (deploy,) = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "fg-operator"]
        (role,) = [d for d in docs if d["kind"] == "Role"
                   and d["metadata"]["name"] == "fg-operator-leader"]
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        return container["args"], role["rules"]

    args, rules = operator()
    assert "--no-cluster-kinds" not in args and not any(a.startswith("--namespace") for a in args)
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["create", "list"]} in rules
    args, _ = operator("operator.watchNamespaces={team-b,team-c}", "operator.clusterKinds=false")
    assert {"--namespace=team-b", "--namespace=team-c", "--no-cluster-kinds"} <= set(args)


def test_the_erasure_process_is_a_switch_off_by_default() -> None:
    """operator.erasureProcess: each offboarding's flow in a process of its own (issue 39)."""
    def args(*sets: str) -> list[str]:
        (deploy,) = [d for d in _render(*sets) if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "fg-operator"]
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        return list(container["args"])

    assert "--erasure-process" not in args()
    assert "--erasure-process" in args("operator.erasureProcess=true")


def _defined_metric_series() -> set[str]:
    """Every series name the code can export: counters as <name>_total, histograms as
    _bucket/_sum/_count, gauges as they are (prometheus_client's naming)."""
    import re

    found: set[str] = set()
    for path in (ROOT / "src" / "fgentic_governance").rglob("*.py"):
        for kind, name in re.findall(r'(Counter|Gauge|Histogram)\(\s*"(fgentic_[a-z_]+)"',
                                     path.read_text()):
            base = name.removesuffix("_total")
            if kind == "Counter":
                found.add(base + "_total")
            elif kind == "Histogram":
                found |= {base + "_bucket", base + "_sum", base + "_count"}
            else:
                found.add(name)
    return found


def test_monitoring_objects_use_only_metrics_the_code_exports() -> None:
    """Issue 27: the optional ServiceMonitor, PrometheusRule and Grafana dashboard; every
    fgentic_* series their expressions name is one the code defines (a renamed metric fails
    here, not silently in a cluster)."""
    import re

    docs = _render("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                   "metrics.grafanaDashboard.enabled=true")
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == "http-metrics"
    services = [d for d in docs if d["kind"] == "Service"
                and any(p["name"] == "http-metrics" for p in d["spec"]["ports"])]
    assert {s["metadata"]["name"] for s in services} >= {"fg-webhook", "fg-operator-metrics"}
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len({a["alert"] for a in alerts}) == len(alerts) >= 7
    (board,) = [d for d in docs if d["kind"] == "ConfigMap"
                and d["metadata"]["name"] == "fg-dashboard"]
    dashboard = json.loads(board["data"]["fgentic-governance.json"])
    exprs = [a["expr"] for a in alerts] + [t["expr"] for p in dashboard["panels"]
                                          for t in p["targets"]]
    named = {m for e in exprs for m in re.findall(r"fgentic_[a-z_]+", e)}
    assert named and named <= _defined_metric_series(), named - _defined_metric_series()
    assert not [d for d in _render() if d["kind"] in ("ServiceMonitor", "PrometheusRule")]


def test_tls_modes_render_what_each_promises() -> None:
    """Issue 27: the default (bootstrap) renders no key material, so `helm template` is stable;
    certManager renders a Certificate (a self-signed CA chain without issuerRef) and asks
    cert-manager's CA injector to fill the configurations' caBundle."""
    first, second = _render(), _render()
    assert first == second  # nothing generated per render
    assert not [d for d in first if d["kind"] == "Secret"]
    (role,) = [d for d in first if d["kind"] == "Role"
               and d["metadata"]["name"] == "fg-webhook-tls"]
    assert {"watch", "list"} <= set(role["rules"][0]["verbs"])
    docs = _render("webhook.tls.mode=certManager")
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs
                   if d["apiVersion"].startswith("cert-manager.io/"))
    assert kinds == [("Certificate", "fg-webhook"), ("Certificate", "fg-webhook-ca"),
                     ("Issuer", "fg-webhook-ca"), ("Issuer", "fg-webhook-selfsigned")]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for config in [d for d in docs if d["kind"] == kind]:
            assert config["metadata"]["annotations"] == {
                "cert-manager.io/inject-ca-from": f"{NS}/fg-webhook"}
            assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"
                 and d["metadata"]["name"] == "fg-webhook"]
    (tls,) = [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "fg-webhook-tls"
    given = _render("webhook.tls.mode=certManager", "webhook.tls.certManager.issuerRef.name=corp",
                    "webhook.tls.certManager.issuerRef.kind=ClusterIssuer")
    (cert,) = [d for d in given if d["kind"] == "Certificate"]
    assert cert["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer",
                                         "group": "cert-manager.io"}


def test_the_chart_packages_for_an_oci_registry(tmp_path: Path) -> None:
    """Issue 27: hack/chart.sh checks the generated files, lints and packages the chart (push
    with an oci:// repository); the package carries the schema, the CRDs and the helm test,
    and its image is the one docs/image.md builds (image.repository:appVersion)."""
    import os
    import tarfile

    done = subprocess.run(["bash", "hack/chart.sh"], cwd=ROOT, capture_output=True, text=True,
                          check=False, env={**os.environ, "FGENTIC_CHART_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    package = Path(done.stdout.strip().splitlines()[-1])
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert package == tmp_path / f"fgentic-governance-{chart['version']}.tgz"
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
    for member in ("values.schema.json", "templates/tests/smoke.yaml", "templates/NOTES.txt",
                   "files/crds/governance.fgentic.dev_memoryscopes.yaml",
                   "templates/crds.yaml",
                   "files/grafana-dashboard.json"):
        assert f"fgentic-governance/{member}" in names, member
    assert not [n for n in names if n.startswith("fgentic-governance/crds/")]
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    assert image["repository"] == "ghcr.io/fgentic/fgentic-governance" and not image["tag"]
    assert f"ghcr.io/fgentic/fgentic-governance:{chart['appVersion']}" in \
        (ROOT / "docs" / "image.md").read_text()
    refused = subprocess.run(["bash", "hack/chart.sh", "https://example.org"], cwd=ROOT,
                             capture_output=True, text=True, check=False,
                             env={**os.environ, "FGENTIC_CHART_DIR": str(tmp_path)})
    assert refused.returncode == 2 and "oci://" in refused.stderr
