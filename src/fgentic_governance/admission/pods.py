"""Routing kagent's runtime to the memory API: which Pods, what to set, what to refuse (pure).

Which Pods: ``memoryapi.identity.memory_agent_of`` (shared with the memory API). kagent v0.9.11
labels an Agent's Pods ``app: kagent`` and ``kagent: <agent name>`` and runs them
under the Agent's service account (``deployment.serviceAccountName``, else the Agent's name);
its controller appends its own ``KAGENT_URL`` after the Agent's ``deployment.env``, so only the
Pod can be changed. A Pod of a memory-enabled Agent - by those labels, or by running under a
memory-enabled Agent's account - gets ``KAGENT_URL`` = the memory API, ``LOG_LEVEL=ERROR``
(the runtime's INFO and WARNING lines quote memory queries), ``CONTENT_FREE_TRACES`` (its
traces would carry them), ``SUBSTRATE_INPUTS`` empty (kagent-adk 0.10.4 would write them
over its config and token) and, empty, every proxy variable
that applies to the memory API's scheme (kagent-adk's controller client trusts the
environment, so ``HTTP_PROXY`` would carry memory calls elsewhere; any other spelling of their
names, ``Http_proxy``, is blanked too) in every container, each set exactly once and last: set
in the Pod, they also override ``envFrom`` and the image.

The validating side refuses such a Pod whose effective values differ (in any container,
ephemeral ones included), or whose host aliases, DNS or host network could send the memory
API's name elsewhere or leave the routed-egress NetworkPolicy (MEMORY_ROUTING_BYPASS). The
routed label is the webhook's: any other Pod that sets it is refused (ROUTED_LABEL_RESERVED).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.api.kagent import ROUTED_LABEL

KAGENT_URL: Final = "KAGENT_URL"
LOG_LEVEL: Final = "LOG_LEVEL"
GOVERNED_LOG_LEVEL: Final = "ERROR"
CONTENT_FREE_TRACES: Final[Mapping[str, str]] = {
    "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
    "TRACELOOP_TRACE_CONTENT": "false",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false",
}
"""With tracing or logging on (``OTEL_TRACING_ENABLED``, kagent's chart and controller pass
it), google-adk puts prompts (prefetched facts), tool arguments and results (queries, saved
facts) in span attributes unless the first is false or 0; the traceloop OpenAI, Anthropic
and google-genai instrumentations put prompts, completions (summaries) and embedded text in
spans and events unless the second is off (``false`` is off for all three parsers, an empty
value is not); the third is GenAI semantic conventions' switch, which kagent's controller may
copy in as true. Exactly ``false``, set last, wins over every other spelling."""
SUBSTRATE_INPUTS: Final = ("KAGENT_CONFIG_JSON", "KAGENT_AGENT_CARD_JSON",
                            "KAGENT_SRT_SETTINGS_JSON", "KAGENT_TOKEN")
"""kagent-adk 0.10.4 (``_config_materialize.py``, for Agent Substrate) writes each, when not
empty after strip, over ``/config/config.json``, ``agent-card.json``, ``srt-settings.json`` and
the projected token file before it loads them: from the Pod's env, an Agent could swap its
memory config (embedding endpoint, TTL) or present another workload's token to the memory API.
kagent's controller renders none of them on a Deployment, so they are set empty (a no-op),
last, and any other effective value is refused, like ``LOG_LEVEL``."""
CONTAINER_KINDS: Final = ("initContainers", "containers", "ephemeralContainers")
PROXY_VARIABLES: Final[Mapping[str, tuple[str, ...]]] = {
    "http": ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"),
    "https": ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"),
}
"""The variables an environment-trusting HTTP client (httpx, urllib, aiohttp) takes a proxy
for a URL of that scheme from; an empty value means no proxy. NO_PROXY only removes proxies."""
CLUSTER_DNS_POLICIES: Final = frozenset({"ClusterFirst", "ClusterFirstWithHostNet"})
"""The cluster's DNS (the second differs only for host-network Pods, refused anyway)."""


def governed_env(url: str) -> list[dict[str, str]]:
    """The variables a routed container must see, in the order they are set (last)."""
    proxies = PROXY_VARIABLES.get(urlsplit(url).scheme, PROXY_VARIABLES["http"])
    return [{"name": KAGENT_URL, "value": url}, {"name": LOG_LEVEL, "value": GOVERNED_LOG_LEVEL},
            *({"name": name, "value": value} for name, value in CONTENT_FREE_TRACES.items()),
            *({"name": name, "value": ""} for name in (*SUBSTRATE_INPUTS, *proxies))]


def _proxy_names(url: str) -> frozenset[str]:
    """The proxy variables of the URL's scheme, folded: Python's ``getproxies()`` (httpx's
    source) reads ``*_proxy`` in any case, and which spelling wins depends on the order of
    the environment, which the Pod does not fix (the kubelet merges ``env`` and ``envFrom``)."""
    return frozenset(name.lower() for name in
                     PROXY_VARIABLES.get(urlsplit(url).scheme, PROXY_VARIABLES["http"]))


def _spellings(env: Sequence[Mapping[str, Any]], url: str) -> list[str]:
    """The names in ``env`` that spell a governed proxy variable in another case
    (``Http_proxy``), in order, once each."""
    governed = {entry["name"] for entry in governed_env(url)}
    folded = _proxy_names(url)
    names = (e.get("name") for e in env)
    return list(dict.fromkeys(name for name in names if isinstance(name, str)
                              and name.lower() in folded and name not in governed))


def _governed_env(env: Sequence[Mapping[str, Any]], url: str) -> list[dict[str, Any]]:
    """The env kept in order, every other spelling of a proxy variable blanked (once, so it
    also overrides envFrom and the image), then the governed variables last."""
    governed = governed_env(url)
    spellings = _spellings(env, url)
    names = {entry["name"] for entry in governed} | set(spellings)
    return [*(dict(e) for e in env if e.get("name") not in names),
            *({"name": name, "value": ""} for name in spellings), *governed]


def pod_patch(pod: Mapping[str, Any], url: str) -> list[dict[str, Any]]:
    """JSON Patch operations that route every container of the Pod to the memory API."""
    spec = pod.get("spec") or {}
    labels = (pod.get("metadata") or {}).get("labels")
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/metadata/labels/" + ROUTED_LABEL.replace("/", "~1"),
         "value": "true"} if labels else
        {"op": "add", "path": "/metadata/labels", "value": {ROUTED_LABEL: "true"}}]
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(kind) or []):
            ops.append({"op": "add", "path": f"/spec/{kind}/{index}/env",
                        "value": _governed_env(container.get("env") or [], url)})
    return ops


def _effective(env: Sequence[Mapping[str, Any]], name: str) -> Any:
    """What a container sees: the last entry of a name wins (an entry without a value is the
    empty string); None when the Pod does not set it or takes it from a reference."""
    entries = [e for e in env if e.get("name") == name]
    if not entries:
        return None
    last = entries[-1]
    return last.get("value", "") if "valueFrom" not in last else None


def pod_denials(pod: Mapping[str, Any], url: str,
                old: Mapping[str, Any] | None = None) -> list[Denial]:
    """A routed Pod carries the routed label, its every container sees the governed
    variables, and nothing in its spec resolves or reaches the memory API another way.

    On an UPDATE (``old``: a Pod, its status or its ephemeral containers) only what can still
    change is judged: the label, and containers whose env is not the one admitted before
    (the API server keeps a container's env, host aliases, DNS and host network as created,
    and adds ephemeral containers only). So Pods routed by an earlier release, or before the
    memory API's URL changed, keep their status and finalizer writes until recreated."""
    spec = pod.get("spec") or {}
    denials = []
    if _routed_label(pod) != "true":
        denials.append(Denial(AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "metadata.labels"))
    governed = governed_env(url)
    admitted = _envs(old) if old is not None else {}
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(kind) or []):
            env = container.get("env") or []
            if admitted.get((kind, container.get("name"))) == env:
                continue
            required = [*governed, *({"name": n, "value": ""} for n in _spellings(env, url))]
            if any(_effective(env, e["name"]) != e["value"] for e in required):
                denials.append(Denial(AdmissionCode.MEMORY_RUNTIME_UNGOVERNED,
                                      f"spec.{kind}[{index}].env"))
    return denials + (_bypass_denials(spec, url) if old is None else [])


def _envs(pod: Mapping[str, Any]) -> dict[tuple[str, Any], Any]:
    spec = pod.get("spec") or {}
    return {(kind, c.get("name")): c.get("env") or []
            for kind in CONTAINER_KINDS for c in spec.get(kind) or []}


def _host_name(url: str) -> str | None:
    """The memory API's host when it is a DNS name (an address resolves nowhere)."""
    host = (urlsplit(url).hostname or "").rstrip(".")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return None


def _names_host(alias: Any, host: str) -> bool:
    """The alias is the host, or the host with a search domain appended."""
    name = str(alias).lower().rstrip(".")
    return name == host or name.startswith(host + ".")


def _bypass_denials(spec: Mapping[str, Any], url: str) -> list[Denial]:
    """Host network leaves every NetworkPolicy; host aliases naming the memory API's host, a
    DNS policy other than the cluster's, or extra nameservers or search domains can answer
    that name with another address (cluster DNS answers NXDOMAIN while its Service is gone)."""
    denials = []
    if spec.get("hostNetwork") is True:
        denials.append(Denial(AdmissionCode.MEMORY_ROUTING_BYPASS, "spec.hostNetwork"))
    host = _host_name(url)
    if host is None:
        return denials
    for index, alias in enumerate(spec.get("hostAliases") or []):
        if any(_names_host(name, host) for name in (alias or {}).get("hostnames") or []):
            denials.append(Denial(AdmissionCode.MEMORY_ROUTING_BYPASS,
                                  f"spec.hostAliases[{index}]"))
    if spec.get("dnsPolicy", "ClusterFirst") not in CLUSTER_DNS_POLICIES:
        denials.append(Denial(AdmissionCode.MEMORY_ROUTING_BYPASS, "spec.dnsPolicy"))
    dns = spec.get("dnsConfig") or {}
    if dns.get("nameservers") or dns.get("searches"):
        denials.append(Denial(AdmissionCode.MEMORY_ROUTING_BYPASS, "spec.dnsConfig"))
    return denials


def _routed_label(pod: Mapping[str, Any] | None) -> Any:
    return (((pod or {}).get("metadata") or {}).get("labels") or {}).get(ROUTED_LABEL)


def label_denials(pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Denial]:
    """For a Pod the webhook does not route: refused when it sets the routed label (carries
    it on CREATE, or changes it on UPDATE). Keeping a label set at creation is not refused,
    so a Pod whose Agent later turned memory off is still updated (its status, finalizers)."""
    label = _routed_label(pod)
    if label is not None and label != _routed_label(old):
        return [Denial(AdmissionCode.ROUTED_LABEL_RESERVED, "metadata.labels")]
    return []
