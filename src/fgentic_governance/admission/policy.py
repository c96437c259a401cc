"""Admission policy as pure functions of an object plus the bindings and scopes it depends on.

No I/O and no framework: the webhook server, the periodic audit and the tests all call these.
A denial carries a bounded code and a field path; its message never repeats a value from the
object other than a header name, and only one that looks like a header name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fgentic_governance.api import kagent
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.contract.codec import IDENTITY_HEADER as CARRIER

IDENTITY_HEADER = CARRIER.lower()
"""The carrier, as header names compare here (ASCII lowercase)."""
RESERVED_PREFIX = "x-fgentic-"
# Never set on the retrieval server by headersFrom: credentials, attribution, our carriers.
RETRIEVAL_FORBIDDEN_SET = frozenset({"authorization", "x-user-id"})
# RFC 9110 §5.6.2 tchar, lower case: anything else is not a header name at all.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")
# Echoed in a denial message only when made of these (a subset of tchar without punctuation).
_ECHO = frozenset("-_*0123456789abcdefghijklmnopqrstuvwxyz")


class AdmissionCode(StrEnum):
    """Bounded admission reason codes."""

    FORBIDDEN_HEADER = "FORBIDDEN_HEADER"
    IDENTITY_HEADER_UNBOUND = "IDENTITY_HEADER_UNBOUND"
    IDENTITY_TOOL_MISMATCH = "IDENTITY_TOOL_MISMATCH"
    REQUIRE_APPROVAL_ON_RETRIEVAL = "REQUIRE_APPROVAL_ON_RETRIEVAL"
    FORBIDDEN_HEADERS_FROM = "FORBIDDEN_HEADERS_FROM"
    MEMORY_UNGATED = "MEMORY_UNGATED"
    MEMORY_RUNTIME_UNGOVERNED = "MEMORY_RUNTIME_UNGOVERNED"
    """Memory is enabled but kagent's runtime would not reach memory through the governed
    memory API: the Pod routing is not installed or the API is not ready (an Agent), or a
    Pod's KAGENT_URL, LOG_LEVEL, trace-content switches or proxy variables are not the
    governed ones (a Pod)."""
    MEMORY_ROUTING_BYPASS = "MEMORY_ROUTING_BYPASS"
    """A routed Pod could reach memory around the routing: host network (outside every
    NetworkPolicy), or host aliases or DNS settings that can resolve the memory API's name to
    another address."""
    ROUTED_LABEL_RESERVED = "ROUTED_LABEL_RESERVED"
    """A Pod the webhook does not route sets ``fgentic.dev/memory-routed``: the label admits
    its bearer to the memory API and names it to the embeddings route."""
    MEMORY_MODEL_UNGOVERNED = "MEMORY_MODEL_UNGOVERNED"
    """A memory-enabled Agent's model or its memory's embedding model is not an
    OpenAI-compatible ModelConfig of its namespace with the memory API's governed base URL,
    or such a ModelConfig in use would stop being one: kagent's summarisation or embeddings
    would reach a model before any admission (ADR 0023 §42)."""
    MEMORY_TTL_MISSING = "MEMORY_TTL_MISSING"
    MEMORY_TTL_EXCEEDS_RETENTION = "MEMORY_TTL_EXCEEDS_RETENTION"
    CONSENT_SCOPE_MISSING = "CONSENT_SCOPE_MISSING"
    CONSENT_SUBJECT_MISMATCH = "CONSENT_SUBJECT_MISMATCH"
    BINDING_DUPLICATE_AGENT = "BINDING_DUPLICATE_AGENT"
    FEDERATION_DENIED = "FEDERATION_DENIED"
    APPSERVICE_IDENTITY_DENIED = "APPSERVICE_IDENTITY_DENIED"
    """A MemoryScope's native-local subject is in a configured appservice namespace
    (``--appservice-namespaces``): a bridged or external-appservice identity (ADR 0023 §31)."""
    OFFBOARDING_IN_PROGRESS = "OFFBOARDING_IN_PROGRESS"
    MALFORMED_OBJECT = "MALFORMED_OBJECT"
    REVIEW_MALFORMED = "REVIEW_MALFORMED"
    """The AdmissionReview itself: not JSON, no request, or no CREATE/UPDATE of an object."""
    POLICY_STATE_UNAVAILABLE = "POLICY_STATE_UNAVAILABLE"
    UNSUPPORTED_KIND = "UNSUPPORTED_KIND"


@dataclass(frozen=True)
class Denial:
    code: AdmissionCode
    path: str
    header: str = ""

    def message(self) -> str:
        suffix = f" ({self.header})" if self.header else ""
        return f"{self.code.value} at {self.path}{suffix}"


# -- the state the policy reads ---------------------------------------------------------------

AgentKey = tuple[str, str]


@dataclass(frozen=True)
class BindingView:
    """The content-free facts of one RetrievalBinding that admission needs."""

    namespace: str
    name: str
    agent: AgentKey
    server: tuple[str, str, str, str]  # apiGroup, kind, namespace, name
    tool: str
    active: bool = True


@dataclass(frozen=True)
class ScopeView:
    """The content-free facts of one MemoryScope that admission needs."""

    namespace: str
    name: str
    agent: AgentKey
    profile: str
    max_retention_days: int
    gates_hold: bool
    """Status shows StoreReady and ConsentGated at the current schema version, observed."""


@dataclass(frozen=True)
class PolicyState:
    """Bindings and scopes indexed by the Agent they name."""

    bindings: Mapping[AgentKey, Sequence[BindingView]] = field(default_factory=dict)
    scopes: Mapping[AgentKey, Sequence[ScopeView]] = field(default_factory=dict)
    memory_routed: bool = False
    """The Pod routing to the memory API is installed and the API answers ready:
    kagent's runtime then reaches memory only through the per-request gate."""

    def binding_for(self, agent: AgentKey) -> BindingView | None:
        """The one active binding of an Agent; none when absent or ambiguous (fail closed)."""
        active = [b for b in self.bindings.get(agent, ()) if b.active]
        return active[0] if len(active) == 1 else None


# -- kagent Agents ------------------------------------------------------------------------------


def agent_denials(agent: Mapping[str, Any], state: PolicyState) -> list[Denial]:
    """Every rule for a kagent Agent (v1alpha2; v1alpha1 where it can express the field)."""
    try:
        meta = agent.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        spec = agent.get("spec") or {}
        if str(agent.get("apiVersion", "")).endswith(f"/{kagent.LEGACY_VERSION}"):
            return _memory_denials(spec.get("memory"), None, "spec.memory", key, state)
        declarative = spec.get("declarative") or {}
        binding = state.binding_for(key)
        denials = []
        for index, tool in _tools(declarative):
            denials += _tool_denials(tool, f"spec.declarative.tools[{index}]", key, binding,
                                     state)
        memory = declarative.get("memory")
        denials += _memory_denials(memory, memory, "spec.declarative.memory", key, state)
        return denials
    except (TypeError, AttributeError, ValueError):
        return [Denial(AdmissionCode.MALFORMED_OBJECT, "spec")]


def _tools(declarative: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    tools = declarative.get("tools") or []
    if not isinstance(tools, list):
        raise TypeError("tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TypeError("tool")
        yield index, tool


def _server_ref(mcp: Mapping[str, Any], agent: AgentKey) -> tuple[str, str, str, str]:
    # kagent resolves an omitted namespace to the Agent's own.
    return (str(mcp.get("apiGroup", "")), str(mcp.get("kind", "")),
            str(mcp.get("namespace") or agent[0]), str(mcp.get("name", "")))


def _tool_denials(
    tool: Mapping[str, Any], path: str, agent: AgentKey, binding: BindingView | None,
    state: PolicyState,
) -> list[Denial]:
    mcp = tool.get("mcpServer") or {}
    server = _server_ref(mcp, agent) if mcp else None
    bound = binding is not None and server == binding.server
    denials = _header_denials(mcp, f"{path}.mcpServer", binding, bound)
    if bound and binding is not None:
        approvals = mcp.get("requireApproval") or []
        if binding.tool in [str(a) for a in approvals]:
            denials.append(Denial(AdmissionCode.REQUIRE_APPROVAL_ON_RETRIEVAL,
                                  f"{path}.mcpServer.requireApproval"))
    retrieval = server is not None and _is_retrieval_server(server, state)
    for position, entry in enumerate(tool.get("headersFrom") or []):
        name = _header_name((entry or {}).get("name", ""))
        # A name that is not an HTTP token (a confusable such as a Cyrillic or fullwidth
        # letter, or a zero-width joiner) cannot be compared reliably: fail closed.
        if name.startswith(RESERVED_PREFIX) or (retrieval and name in RETRIEVAL_FORBIDDEN_SET) \
                or not _only(name, _TCHAR):
            denials.append(Denial(AdmissionCode.FORBIDDEN_HEADERS_FROM,
                                  f"{path}.headersFrom[{position}]",
                                  _safe_name(name)))
    return denials


def _header_denials(
    mcp: Mapping[str, Any], path: str, binding: BindingView | None, bound: bool
) -> list[Denial]:
    """Only the identity carrier may propagate, and only to the bound server and tool."""
    denials = []
    for position, header in enumerate(mcp.get("allowedHeaders") or []):
        where = f"{path}.allowedHeaders[{position}]"
        name = _header_name(header)
        if name != IDENTITY_HEADER:
            denials.append(Denial(AdmissionCode.FORBIDDEN_HEADER, where, _safe_name(name)))
        elif not bound or binding is None:
            denials.append(Denial(AdmissionCode.IDENTITY_HEADER_UNBOUND, where, IDENTITY_HEADER))
        elif [str(t) for t in mcp.get("toolNames") or []] != [binding.tool]:
            denials.append(Denial(AdmissionCode.IDENTITY_TOOL_MISMATCH, f"{path}.toolNames"))
    return denials


def _is_retrieval_server(server: tuple[str, str, str, str], state: PolicyState) -> bool:
    return any(b.server == server for group in state.bindings.values() for b in group)


def _memory_denials(
    memory: Any, declarative_memory: Mapping[str, Any] | None, path: str, agent: AgentKey,
    state: PolicyState,
) -> list[Denial]:
    """Memory's presence alone enables it in kagent v0.9.11, for every user of the Agent. It is
    admitted only when the runtime's memory calls are routed through the memory API (consent
    is then checked per request, never per Agent) and a demo scope for the Agent shows its
    gates; a scope alone, without the routing, would admit an Agent-wide collector."""
    if memory is None:
        return []
    if not state.memory_routed:
        return [Denial(AdmissionCode.MEMORY_RUNTIME_UNGOVERNED, path)]
    scopes = state.scopes.get(agent, ())
    if not any(s.gates_hold and s.profile == "demo" for s in scopes):
        return [Denial(AdmissionCode.MEMORY_UNGATED, path)]
    return _ttl_denials(declarative_memory, path, scopes)


def _ttl_denials(declarative_memory: Mapping[str, Any] | None, path: str,
                 scopes: Sequence[ScopeView]) -> list[Denial]:
    if declarative_memory is None:  # v1alpha1 cannot express a TTL at all.
        return [Denial(AdmissionCode.MEMORY_TTL_MISSING, path)]
    ttl = declarative_memory.get("ttlDays")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
        return [Denial(AdmissionCode.MEMORY_TTL_MISSING, f"{path}.ttlDays")]
    if ttl > min(s.max_retention_days for s in scopes):
        return [Denial(AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION, f"{path}.ttlDays")]
    return []


def _header_name(raw: Any) -> str:
    """Trim optional whitespace (SP / HTAB only, RFC 9110 OWS) and fold ASCII case only:
    str.strip() would also drop Unicode spaces and C0 separators, and str.lower() folds some
    non-ASCII letters (KELVIN SIGN) into ASCII ones."""
    name = str(raw).strip(" \t")
    return name.lower() if name.isascii() else name


def _only(name: str, chars: frozenset[str]) -> bool:
    """A non-empty name made of ``chars`` only."""
    return bool(name) and all(c in chars for c in name)


def _safe_name(name: str) -> str:
    """A header name is echoed only when it looks like one (bounded token characters)."""
    return name if len(name) <= 64 and _only(name, _ECHO) else "<invalid header name>"


def header_denials(agent: Mapping[str, Any]) -> list[Denial]:
    """The stateless header rules alone (what the ValidatingAdmissionPolicy also enforces)."""
    return [d for d in agent_denials(agent, PolicyState())
            if d.code in {AdmissionCode.FORBIDDEN_HEADER, AdmissionCode.IDENTITY_HEADER_UNBOUND,
                          AdmissionCode.MALFORMED_OBJECT}]


# -- our own kinds: cross-object rules the CRD schema cannot express ----------------------------


def consent_denials(consent: Mapping[str, Any], scope: Mapping[str, Any] | None,
                    offboarding: bool = False) -> list[Denial]:
    """A ConsentRecord's subject must equal its scope's; none while the principal offboards."""
    spec = consent.get("spec") or {}
    if scope is None:
        return [Denial(AdmissionCode.CONSENT_SCOPE_MISSING, "spec.scopeRef.name")]
    if spec.get("subject") != (scope.get("spec") or {}).get("subject"):
        return [Denial(AdmissionCode.CONSENT_SUBJECT_MISMATCH, "spec.subject")]
    if offboarding and spec.get("decision") == "granted":
        return [Denial(AdmissionCode.OFFBOARDING_IN_PROGRESS, "spec.decision")]
    return []


def binding_denials(
    binding: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> list[Denial]:
    """One RetrievalBinding per Agent."""
    meta = binding.get("metadata") or {}
    me = (meta.get("namespace"), meta.get("name"))
    agent = (binding.get("spec") or {}).get("agent")
    for other in others:
        other_meta = other.get("metadata") or {}
        if (other_meta.get("namespace"), other_meta.get("name")) == me:
            continue
        if (other.get("spec") or {}).get("agent") == agent:
            return [Denial(AdmissionCode.BINDING_DUPLICATE_AGENT, "spec.agent")]
    return []


def scope_denials(scope: Mapping[str, Any], local_homeserver: str,
                  appservice: AppserviceRegistry = EMPTY) -> list[Denial]:
    """No MemoryScope for a non-local principal (the schema cannot know the local server),
    nor for a native-local one whose MXID an appservice namespace holds: a bridge's puppet or
    another appservice's user is never native, whatever the scope declares."""
    spec = scope.get("spec")
    subject = spec.get("subject") if isinstance(spec, Mapping) else None
    if not isinstance(subject, Mapping):  # fail closed with a bounded code, never raise
        return [Denial(AdmissionCode.FEDERATION_DENIED, "spec.subject")]
    mxid = str(subject.get("mxid", ""))
    server = mxid.split(":", 1)[1] if ":" in mxid else ""
    if subject.get("originKind") != "native-local" or not local_homeserver \
            or server != local_homeserver:
        return [Denial(AdmissionCode.FEDERATION_DENIED, "spec.subject")]
    if appservice.holds(mxid):
        return [Denial(AdmissionCode.APPSERVICE_IDENTITY_DENIED, "spec.subject.mxid")]
    return []
