"""The bounded vocabulary of content-free reason codes.

Every denial, failure and receipt in logs, events, status, metrics and exceptions carries one
of these codes and nothing derived from user content. Adding a code is an API change.
:class:`Coded` is the one exception shape that carries such a code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Generic, TypeVar


class Reason(StrEnum):
    """A content-free reason code."""

    OK = "OK"
    # Consent and scope gates.
    CONSENT_MISSING = "CONSENT_MISSING"
    CONSENT_WITHDRAWN = "CONSENT_WITHDRAWN"
    CONSENT_SUBJECT_MISMATCH = "CONSENT_SUBJECT_MISMATCH"
    CONSENT_PURPOSE_MISMATCH = "CONSENT_PURPOSE_MISMATCH"
    CONSENT_POLICY_VERSION_MISMATCH = "CONSENT_POLICY_VERSION_MISMATCH"
    FEDERATION_DENIED = "FEDERATION_DENIED"
    # The MXID is in a configured appservice namespace (api/appservice.py): a bridged or
    # external-appservice identity, whatever originKind a scope declares (ADR 0023 §3, §31).
    APPSERVICE_IDENTITY_DENIED = "APPSERVICE_IDENTITY_DENIED"
    PROFILE_NOT_DEMO = "PROFILE_NOT_DEMO"
    POSTURE_DISABLED = "POSTURE_DISABLED"
    OFFBOARDING_IN_PROGRESS = "OFFBOARDING_IN_PROGRESS"
    # Delegation leases: kagent's runtime's calls need exactly one live lease.
    LEASE_MISSING = "LEASE_MISSING"
    SCOPE_AMBIGUOUS = "SCOPE_AMBIGUOUS"
    LEASE_LIMIT_REACHED = "LEASE_LIMIT_REACHED"
    # Per-delegation bounds (ADR 0023 §43): searches per lease, facts per automatic summary.
    RECALL_LIMIT_REACHED = "RECALL_LIMIT_REACHED"
    SUMMARY_TOO_LARGE = "SUMMARY_TOO_LARGE"
    SUMMARY_CADENCE_REACHED = "SUMMARY_CADENCE_REACHED"
    SUMMARY_INPUT_TOO_LARGE = "SUMMARY_INPUT_TOO_LARGE"
    # Another A2A context of the (subject, Agent) is in progress, or not the lease's alone
    # (sql/0021): which context a memory call serves cannot be told, so neither is served.
    CONTEXT_CONFLICT = "CONTEXT_CONFLICT"
    # Recall policy (sql/0022): why a stored, readable fact was withheld from recall, counted
    # in MemoryScope status.recallWithheld; never a refusal of a request.
    RECALL_TYPE_WITHHELD = "RECALL_TYPE_WITHHELD"
    RECALL_SOURCE_WITHHELD = "RECALL_SOURCE_WITHHELD"
    RECALL_CONFIRMATION_WITHHELD = "RECALL_CONFIRMATION_WITHHELD"
    RECALL_SENSITIVITY_WITHHELD = "RECALL_SENSITIVITY_WITHHELD"
    RECALL_AGE_WITHHELD = "RECALL_AGE_WITHHELD"
    # Content-store fence.
    SCOPE_MISSING = "SCOPE_MISSING"
    SCOPE_DISABLED = "SCOPE_DISABLED"
    CAPTURE_DISABLED = "CAPTURE_DISABLED"
    # A MemoryPostureFloor (cluster, namespace or Agent) disables memory, or capture, for the
    # scope's Agent: the most restrictive floor wins and nothing below it can loosen it.
    POSTURE_FLOOR_DISABLED = "POSTURE_FLOOR_DISABLED"
    POSTURE_FLOOR_CAPTURE_DISABLED = "POSTURE_FLOOR_CAPTURE_DISABLED"
    STALE_GENERATION = "STALE_GENERATION"
    # A scope is entered only at READ COMMITTED: no snapshot may outlive an erasure's fence.
    ISOLATION_REFUSED = "ISOLATION_REFUSED"
    ENTRY_CAP_REACHED = "ENTRY_CAP_REACHED"
    FACT_TOO_LARGE = "FACT_TOO_LARGE"
    RETENTION_EXCEEDED = "RETENTION_EXCEEDED"
    EXPIRY_EXTENSION_DENIED = "EXPIRY_EXTENSION_DENIED"
    CREDENTIAL_CONTENT = "CREDENTIAL_CONTENT"
    HIGH_RISK_INSTRUCTION_CONTENT = "HIGH_RISK_INSTRUCTION_CONTENT"
    COST_CEILING_REACHED = "COST_CEILING_REACHED"
    RATE_LIMITED = "RATE_LIMITED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    # The database is recovering from a crashed backend (or starting, or shutting down).
    STORE_RESTARTING = "STORE_RESTARTING"
    STORE_SCHEMA_MISMATCH = "STORE_SCHEMA_MISMATCH"
    STORE_LOCK_TIMEOUT = "STORE_LOCK_TIMEOUT"
    STORE_SETTINGS_UNSAFE = "STORE_SETTINGS_UNSAFE"
    # The store's pgvector is older than memory/extension.py MIN_PGVECTOR (HNSW vacuum fixes).
    STORE_EXTENSION_OUTDATED = "STORE_EXTENSION_OUTDATED"
    # The memory API was told to use its own login, and that login could act as the store's
    # owner (a superuser, or a member of the owner role).
    STORE_LOGIN_PRIVILEGED = "STORE_LOGIN_PRIVILEGED"
    ERASURE_VERIFY_FAILED = "ERASURE_VERIFY_FAILED"
    # Spec and admission.
    INVALID_SPEC = "INVALID_SPEC"
    BINDING_CONFLICT = "BINDING_CONFLICT"
    APPLY_FAILED = "APPLY_FAILED"
    # A kind a RetrievalBinding renders is not served (its CRDs are not installed): the
    # condition names it, from the renderer's fixed set (names.RENDERED_KINDS).
    KIND_NOT_SERVED = "KIND_NOT_SERVED"
    # A RetrievalBinding's Agent does not exist, or does not list the bound server's tool.
    AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
    TOOL_NOT_BOUND = "TOOL_NOT_BOUND"
    # A MemoryScope's Agent: its memory's model work (kagent's summarisation, its embeddings)
    # does not go through the governed model route, or no route is configured (ADR 0023 §42).
    MODEL_ROUTE_UNGOVERNED = "MODEL_ROUTE_UNGOVERNED"
    MODEL_ROUTE_UNCONFIGURED = "MODEL_ROUTE_UNCONFIGURED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


C = TypeVar("C", bound=StrEnum)


class Coded(Exception, Generic[C]):
    """An exception that carries only a bounded code: ``str()`` is the code's value, ``args``
    is that value alone, and nothing else (no message, no input) is ever attached.

    Every code-only exception of ours derives from it (``StoreRefusal``, the memory API's
    ``ApiError``, the control API's ``ControlError``, ``serving``'s ``Refused``).
    """

    code: C

    def __init__(self, code: C) -> None:
        super().__init__(code.value)
        self.code = code

    def __str__(self) -> str:
        return self.code.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code,))
