"""What to change, one sentence per admission code (constant text: a denial never repeats a
value of the object but a header name that looks like one). The webhook's answer names the
rule (the code), where (the field path) and this sentence, as Kyverno and Gatekeeper name
policy, rule and message."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from fgentic_governance.admission.policy import AdmissionCode, Denial

GUIDANCE: Final = MappingProxyType({
    AdmissionCode.FORBIDDEN_HEADER:
        "remove the header from allowedHeaders, which may list only X-Fgentic-Identity",
    AdmissionCode.IDENTITY_HEADER_UNBOUND:
        "send X-Fgentic-Identity only to the server of the Agent's one active RetrievalBinding",
    AdmissionCode.IDENTITY_TOOL_MISMATCH:
        "with X-Fgentic-Identity, toolNames must be exactly the binding's one tool",
    AdmissionCode.REQUIRE_APPROVAL_ON_RETRIEVAL:
        "remove the bound retrieval tool from requireApproval",
    AdmissionCode.FORBIDDEN_HEADERS_FROM:
        "headersFrom may not set X-Fgentic-* headers, non-token names, or Authorization and "
        "X-User-Id on a retrieval server",
    AdmissionCode.MEMORY_UNGATED:
        "create a demo MemoryScope for this Agent and wait until it shows StoreReady and "
        "ConsentGated",
    AdmissionCode.MEMORY_RUNTIME_UNGOVERNED:
        "install the chart with memoryApi.enabled and keep the Pod's KAGENT_URL, LOG_LEVEL, "
        "trace-content switches and proxy variables as the webhook sets them",
    AdmissionCode.MEMORY_ROUTING_BYPASS:
        "remove hostNetwork, hostAliases naming the memory API, custom dnsPolicy and "
        "dnsConfig from the routed Pod",
    AdmissionCode.ROUTED_LABEL_RESERVED:
        "remove the fgentic.dev/memory-routed label, which only the webhook sets",
    AdmissionCode.MEMORY_MODEL_UNGOVERNED:
        "point the Agent's and its memory's ModelConfigs (OpenAI, in its namespace) at the "
        "memory API's /v1",
    AdmissionCode.MEMORY_TTL_MISSING:
        "set memory.ttlDays (kagent keeps entries 15 days otherwise)",
    AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION:
        "lower memory.ttlDays to at most the smallest maxRetentionDays of the Agent's scopes",
    AdmissionCode.CONSENT_SCOPE_MISSING:
        "create the MemoryScope named by scopeRef in this namespace first",
    AdmissionCode.CONSENT_SUBJECT_MISMATCH:
        "use the exact subject (MXID and originKind) of the scope",
    AdmissionCode.BINDING_DUPLICATE_AGENT:
        "edit the existing RetrievalBinding instead (one per Agent)",
    AdmissionCode.FEDERATION_DENIED:
        "use a native-local MXID of the local homeserver",
    AdmissionCode.APPSERVICE_IDENTITY_DENIED:
        "a bridged or appservice user (an MXID in appserviceNamespaces) cannot hold memory",
    AdmissionCode.OFFBOARDING_IN_PROGRESS:
        "grant no new consent while the principal is being offboarded",
    AdmissionCode.MALFORMED_OBJECT:
        "give the object the shape its kind's CRD describes",
    AdmissionCode.REVIEW_MALFORMED:
        "not an AdmissionReview of a CREATE or UPDATE",
    AdmissionCode.POLICY_STATE_UNAVAILABLE:
        "retry (the webhook could not read what this rule needs), and check its log and RBAC",
    AdmissionCode.UNSUPPORTED_KIND:
        "check the webhook configuration (this path does not review this kind)",
})


def explained(denial: Denial) -> str:
    """``CODE at PATH[ (header)]: what to change``."""
    return f"{denial.message()}: {GUIDANCE[denial.code]}"


def fix(denial: Denial) -> str:
    """``CODE at PATH: what to change``: the answer's text without the header name, for
    output that repeats nothing of the object (``fgentic-governance test``)."""
    return f"{denial.code.value} at {denial.path}: {GUIDANCE[denial.code]}"
