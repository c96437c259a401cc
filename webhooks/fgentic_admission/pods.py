"""Routing kagent's runtime to the memory API: which Pods, what to set, what to refuse (pure).

Which Pods: ``memoryapi.identity.memory_agent_of`` (shared with the memory API). kagent v0.9.11
labels an Agent's Pods ``app: kagent`` and ``kagent: <agent name>`` and runs them
under the Agent's service account (``deployment.serviceAccountName``, else the Agent's name);
its controller appends its own ``KAGENT_URL`` after the Agent's ``deployment.env``, so only the
Pod can be changed. A Pod of a memory-enabled Agent - by those labels, or by running under a
memory-enabled Agent's account - gets ``KAGENT_URL`` = the memory API and ``LOG_LEVEL=ERROR``
(the runtime's INFO and WARNING lines quote memory queries) in every container, each set
exactly once and last. The validating side refuses such a Pod whose effective values differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from fgentic_admission.policy import AdmissionCode, Denial
from fgentic_governance.memoryapi.identity import ROUTED_LABEL

KAGENT_URL: Final = "KAGENT_URL"
LOG_LEVEL: Final = "LOG_LEVEL"
GOVERNED_LOG_LEVEL: Final = "ERROR"
CONTAINER_KINDS: Final = ("initContainers", "containers")


def _governed_env(env: Sequence[Mapping[str, Any]], url: str) -> list[dict[str, Any]]:
    kept = [dict(e) for e in env if e.get("name") not in (KAGENT_URL, LOG_LEVEL)]
    return [*kept, {"name": KAGENT_URL, "value": url},
            {"name": LOG_LEVEL, "value": GOVERNED_LOG_LEVEL}]


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
    """What a container sees: the last entry of a name wins; valueFrom is not a value."""
    entries = [e for e in env if e.get("name") == name]
    if not entries:
        return None
    last = entries[-1]
    return last.get("value") if "valueFrom" not in last else None


def pod_denials(pod: Mapping[str, Any], url: str) -> list[Denial]:
    """A routed Pod carries the routed label, and its every container sees the memory API and
    LOG_LEVEL=ERROR."""
    spec = pod.get("spec") or {}
    denials = []
    if ((pod.get("metadata") or {}).get("labels") or {}).get(ROUTED_LABEL) != "true":
        denials.append(Denial(AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, "metadata.labels"))
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(kind) or []):
            env = container.get("env") or []
            if _effective(env, KAGENT_URL) != url or \
                    _effective(env, LOG_LEVEL) != GOVERNED_LOG_LEVEL:
                denials.append(Denial(AdmissionCode.MEMORY_RUNTIME_UNGOVERNED,
                                      f"spec.{kind}[{index}].env"))
    return denials
