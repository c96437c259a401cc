"""The identity projector's configuration (ADR 0017 §4, §6, §12, §15), and its derivation from a
RetrievalBindingSpec.

It sits one floor below both of its users: the renderer writes this document into the
projector's ConfigMap and the projector loads it, so neither imports the other.

The file is operator-owned input: which authenticated workload may use the local route, which
Agent each route serves, the public route's issuer/audience/timeout and the partner registry.
`projector_config(spec, registry)` is pure so the operator and `fgentic-governance render` can
emit the same document the projector loads. Everything is checked when the file is loaded,
including that every registry entry can be projected, so a bad entry fails at start-up rather
than per request. The appservice namespaces are the operator's registry (api/appservice.py),
the one the webhook, memory API and control API refuse bridged identities by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from fgentic_governance.api.appservice import (
    EMPTY,
    AppserviceNamespace,
    AppserviceRegistry,
    registry_of,
)
from fgentic_governance.api.common import AgentRef, DnsLabel, Model
from fgentic_governance.api.retrieval import (
    A2aWire,
    ClassificationCeiling,
    HttpPath,
    PartnerEntry,
    RetrievalBindingSpec,
)
from fgentic_governance.contract import AgentRef as ContractAgentRef
from fgentic_governance.contract import (
    ContractError,
    OAuthClient,
    OAuthProjection,
    encode_identity,
)
from fgentic_governance.contract import limits as contract_limits
from fgentic_governance.retrieval import vocabulary as n

# The two classification sets a projection may carry (contract: exactly these tuples).
PUBLIC_ONLY: tuple[str, ...] = ("public",)
APPROVED: tuple[str, ...] = ("approved_non_public", "public")
Classifications = Annotated[
    tuple[Literal["public"]] | tuple[Literal["approved_non_public"], Literal["public"]],
    Field(description="exactly [public] or [approved_non_public, public]"),
]


class ProjectorConfigError(ValueError):
    """The configuration is unusable; the message names a field, never a credential."""


class LocalRoute(Model):
    """The bridge's route: API key → projector for SendMessage."""

    workload: Annotated[str, Field(min_length=1, max_length=253)]
    """The apiKey `workload` metadata the gateway must report (the bridge's identity)."""
    agent: AgentRef
    path: HttpPath
    """The exact gateway path of the Agent's A2A route."""
    appservice_namespaces: Annotated[list[AppserviceNamespace], Field(max_length=64)] = []
    """The operator's appservice-namespace registry (api/appservice.py), the one the memory
    path refuses by; empty: the bridge's kind classification is taken as given."""

    @model_validator(mode="after")
    def _registry(self) -> LocalRoute:
        registry_of(self.appservice_namespaces)  # a duplicate network is refused at load
        return self

    def registry(self) -> AppserviceRegistry:
        return registry_of(self.appservice_namespaces)


class Partner(Model):
    """One registry entry keyed by (issuer, audience, azp) of its public route."""

    azp: Annotated[str, Field(min_length=1, max_length=contract_limits.MAX_ID_BYTES)]
    policy_id: DnsLabel
    groups: Annotated[list[DnsLabel], Field(min_length=1,
                                            max_length=contract_limits.MAX_PARTNER_GROUPS)]
    allowed_classifications: Classifications = ("public",)


class PublicRoute(Model):
    """The partner route: jwtAuth → projector for synchronous SendMessage."""

    agent: AgentRef
    path: HttpPath
    issuer: Annotated[str, Field(min_length=1, max_length=contract_limits.MAX_ISSUER_BYTES)]
    audience: Annotated[str, Field(min_length=1, max_length=contract_limits.MAX_ID_BYTES)]
    timeout_seconds: Annotated[int, Field(ge=1, le=60)]
    """public_retrieval_timeout_seconds: the gateway's request timeout on this route."""
    partners: Annotated[list[Partner], Field(min_length=1, max_length=64)]

    @model_validator(mode="after")
    def _unique(self) -> PublicRoute:
        # "One exact, unique registry entry": two entries for one azp (the key within one
        # issuer/audience) or one policy_id reused by two entries would make the mapping
        # ambiguous, so the whole registry is refused.
        for attr in ("azp", "policy_id"):
            values = [getattr(p, attr) for p in self.partners]
            if len(set(values)) != len(values):
                raise ValueError(f"partners: duplicate {attr}")
        for index, partner in enumerate(self.partners):
            if len(set(partner.groups)) != len(partner.groups):
                raise ValueError(f"partners[{index}].groups: duplicate group")
        return self


class ProjectorConfig(Model):
    version: Literal[1] = 1
    classification_ceiling: ClassificationCeiling = ClassificationCeiling.PUBLIC
    """No projection carries a class above this (room contexts above it are denied)."""
    a2a_version: Annotated[A2aWire, Field(alias="a2aVersion")] = A2aWire.V0_3
    """The A2A version the Agent's runtime speaks: which operation starts a task and which
    A2A-Version values the routes admit (``names.WIRES``)."""
    local: LocalRoute
    public: PublicRoute | None = None

    @model_validator(mode="after")
    def _partners_projectable(self) -> ProjectorConfig:
        if self.public is None:
            return self
        for index, partner in enumerate(self.public.partners):
            if (self.classification_ceiling is ClassificationCeiling.PUBLIC
                    and partner.allowed_classifications != PUBLIC_ONLY):
                raise ValueError(f"partners[{index}].allowedClassifications exceeds "
                                 "classificationCeiling")
            try:
                encode_identity(sample_projection(self.public, partner))
            except (ContractError, ValidationError):
                raise ValueError(f"partners[{index}] cannot be projected (byte limits or "
                                 "names)") from None
        return self


def partner_groups(partner: Partner) -> tuple[str, ...]:
    """partner/<policy_id>/<group>, ASCII-sorted (the contract's order)."""
    return tuple(sorted(f"partner/{partner.policy_id}/{g}" for g in partner.groups))


def oauth_client(route: PublicRoute, partner: Partner) -> OAuthClient:
    return OAuthClient(audience=route.audience, azp=partner.azp, issuer=route.issuer,
                       policy_id=partner.policy_id)


def sample_projection(route: PublicRoute, partner: Partner) -> OAuthProjection:
    """A projection of this entry with placeholder times and ID: proves it fits the contract."""
    return OAuthProjection(
        agent=contract_agent(route.agent), allowed_classifications=partner.allowed_classifications,
        client=oauth_client(route, partner), delegation_id="0" * 64, exp=2, groups=partner_groups(
            partner), iat=1, kind="oidc_client", v=1)


def contract_agent(agent: AgentRef) -> ContractAgentRef:
    """The route's Agent in the contract's shape (the projection's `agent`)."""
    return ContractAgentRef(name=agent.name, namespace=agent.namespace)


def _partner(entry: PartnerEntry) -> Partner:
    # The contract admits only [public] or [approved_non_public, public]; approved_non_public
    # implies public (a class below it), so any entry naming it gets the pair.
    classes = APPROVED if "approved_non_public" in entry.allowed_classifications else PUBLIC_ONLY
    return Partner(azp=entry.azp, policy_id=entry.policy_id, groups=list(entry.groups),
                   allowed_classifications=classes)


def projector_config(spec: RetrievalBindingSpec,
                     appservice: AppserviceRegistry = EMPTY) -> ProjectorConfig:
    """The projector configuration a binding implies under the operator's appservice-namespace
    registry (pure; raises ProjectorConfigError). The binding's own (deprecated) list may only
    repeat registry entries: a second source could classify an MXID apart from the memory
    path."""
    if any(ns not in appservice.namespaces for ns in spec.appservice_namespaces):
        raise ProjectorConfigError("appserviceNamespaces: an entry is not in the operator's "
                                   "appservice-namespace registry (--appservice-namespaces)")
    agent = AgentRef(namespace=spec.agent.namespace, name=spec.agent.name)
    path = n.agent_route_path(spec.agent.namespace, spec.agent.name)
    bridge = spec.bridge_identity
    data: dict[str, Any] = {
        "classification_ceiling": spec.classification_ceiling,
        "a2a_version": spec.kagent.a2a_version,
        "local": LocalRoute(
            workload=f"serviceaccount:{bridge.namespace}/{bridge.service_account}",
            agent=agent, path=path,
            appservice_namespaces=list(appservice.namespaces)),
    }
    public = spec.public_route
    try:
        if public is not None:
            data["public"] = PublicRoute(
                agent=agent, path=path, issuer=public.issuer, audience=public.audience,
                timeout_seconds=public.public_retrieval_timeout_seconds,
                partners=[_partner(p) for p in public.partners])
        return ProjectorConfig(**data)
    except ValidationError as exc:
        raise ProjectorConfigError(_first_error(exc)) from None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def parse_config(text: str) -> ProjectorConfig:
    """A configuration from JSON or YAML text (YAML is a superset of JSON)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ProjectorConfigError("not JSON or YAML") from None
    if not isinstance(doc, dict):
        raise ProjectorConfigError("the configuration must be a mapping")
    try:
        return ProjectorConfig.from_wire(doc)
    except ValidationError as exc:
        raise ProjectorConfigError(_first_error(exc)) from None


def load_config(path: Path) -> ProjectorConfig:
    return parse_config(path.read_text())


def dump_config(config: ProjectorConfig) -> str:
    """Canonical JSON (camelCase, sorted keys): what the operator writes to a ConfigMap."""
    return json.dumps(config.wire(), sort_keys=True, indent=2) + "\n"
