"""A condition's human message: one sentence per reason code, constant text only (never a
value from an object, a store or a request), so `kubectl describe` and `kubectl wait` say what
happened and what to change. A code without its own sentence is spelt out."""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Final

from fgentic_governance.memory.extension import MIN_PGVECTOR_TEXT
from fgentic_governance.reasons import Reason

MESSAGES: Final = MappingProxyType({
    Reason.OK: "Reconciled.",
    Reason.CONSENT_MISSING: "No ConsentRecord grants this scope yet.",
    Reason.CONSENT_WITHDRAWN: "Consent was withdrawn; the scope's memory was erased.",
    Reason.CONSENT_PURPOSE_MISMATCH: "The ConsentRecord's purpose is not the scope's.",
    Reason.CONSENT_POLICY_VERSION_MISMATCH: "The ConsentRecord's policy version is not the "
                                            "scope's.",
    Reason.ERASURE_VERIFY_FAILED: "An erasure could not be verified; the operator retries.",
    Reason.CONSENT_SUBJECT_MISMATCH: "The ConsentRecord's subject is not the scope's subject.",
    Reason.POSTURE_DISABLED: "The scope's posture is fully_disabled.",
    Reason.PROFILE_NOT_DEMO: "Only the demo profile may enable memory in this release.",
    Reason.OFFBOARDING_IN_PROGRESS: "The subject is being offboarded.",
    Reason.FEDERATION_DENIED: "The subject is not a native user of the local homeserver.",
    Reason.APPSERVICE_IDENTITY_DENIED:
        "The subject is in an appservice namespace: a bridged identity is never native-local.",
    Reason.STORE_UNAVAILABLE: "The content store is not reachable; the operator retries.",
    Reason.STORE_RESTARTING: "The content store is recovering from a restart.",
    Reason.STORE_LOCK_TIMEOUT: "A runtime transaction held the scope; the operator retries.",
    Reason.STORE_SCHEMA_MISMATCH: "The store's schema is not this release's; the operator "
                                  "migrates it.",
    Reason.STORE_SETTINGS_UNSAFE: "The memory database lacks its pinned settings (docs/"
                                  "memory.md §3b).",
    Reason.STORE_EXTENSION_OUTDATED: f"The memory database's pgvector is older than "
                                     f"{MIN_PGVECTOR_TEXT} (HNSW vacuum defects): upgrade "
                                     f"it, then ALTER EXTENSION vector UPDATE.",
    Reason.INVALID_SPEC: "The spec is invalid; see the CRD's schema and docs.",
    Reason.BINDING_CONFLICT: "Another RetrievalBinding already binds this Agent.",
    Reason.APPLY_FAILED: "Applying the rendered objects failed; the operator retries.",
    Reason.KIND_NOT_SERVED: "A rendered kind is not served by the API server: install the "
                            "agentgateway and Gateway API CRDs (docs/install.md).",
    Reason.AGENT_NOT_FOUND: "The bound kagent Agent does not exist.",
    Reason.TOOL_NOT_BOUND: "The Agent does not list the bound server's tool.",
    Reason.MODEL_ROUTE_UNGOVERNED: "The Agent's model or memory embedding ModelConfig is not "
                                   "at the memory API's governed /v1: kagent's summaries and "
                                   "embeddings reach a model before any admission.",
    Reason.MODEL_ROUTE_UNCONFIGURED: "No governed model route is configured (chart "
                                     "memoryApi.modelUpstream): kagent's summaries reach the "
                                     "Agent's model before any admission.",
})


def message(reason: Reason) -> str:
    return MESSAGES.get(reason) or reason.value.replace("_", " ").capitalize() + "."


MESSAGE_LIMIT: Final = 256
"""A condition message's maxLength in our CRDs (the API server refuses a longer status)."""


def kinds_not_served(kinds: Iterable[tuple[str, str]]) -> str:
    """KIND_NOT_SERVED's sentence naming the (apiVersion, kind)s the API server does not serve.
    Content-free: the caller passes only kinds of the renderer's fixed set
    (``retrieval.render.names.RENDERED_KINDS``), never a value read from an object. Within
    MESSAGE_LIMIT: the kinds without their apiVersions if all of them would not fit."""
    kinds = list(kinds)
    for named in (", ".join(f"{kind} ({api_version})" for api_version, kind in kinds),
                  ", ".join(kind for _, kind in kinds)):
        text = f"Not served by the API server: {named}. Install their CRDs (docs/install.md)."
        if len(text) <= MESSAGE_LIMIT:
            return text
    return message(Reason.KIND_NOT_SERVED)
