"""Shared building blocks of the API types: base model, identities, references, conditions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from fgentic_governance.contract import limits

GROUP = "governance.fgentic.dev"
FINALIZER: Final = f"{GROUP}/finalizer"
"""The operator's finalizer on our objects (Kopf's persistence setting; `detach` releases it)."""
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY: Final = ("app.kubernetes.io/managed-by", "fgentic-governance")
"""The label on every object our processes create at run time (rendered objects, the Leases,
the webhook's TLS Secret, PolicyReports): the removal recipe and its test select by it."""

# Go RE2 and pydantic's Rust regex both accept these patterns (no look-around). The grammars
# live in contract/limits.py; these names are the forms our CRDs use.
DNS1123_LABEL = limits.DNS1123_LABEL
MXID_PATTERN = limits.SUBJECT_MXID
ROOM_ID_PATTERN = limits.CONTROL_ROOM_ID
TOKEN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def cel(rule: str, message: str, **extra: str) -> dict[str, str]:
    """One `x-kubernetes-validations` entry."""
    return {"rule": rule, "message": message, **extra}


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def immutable(what: str) -> dict[str, Any]:
    return validations(cel("self == oldSelf", f"{what} is immutable"))


class Model(BaseModel):
    """Base of every API type: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        use_attribute_docstrings=True,
        frozen=True,
    )

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """Parse an object as Kubernetes stores it: camelCase only. The API server prunes a
        snake_case key as unknown, so accepting it offline would validate what it drops."""
        return cls.model_validate(data, by_alias=True, by_name=False)

    def wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase, unset optionals omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
Mxid = Annotated[str, Field(min_length=3, max_length=255, pattern=MXID_PATTERN)]
RoomId = Annotated[str, Field(min_length=2, max_length=255, pattern=ROOM_ID_PATTERN)]
Token = Annotated[str, Field(min_length=1, max_length=63, pattern=TOKEN_PATTERN)]
ReasonCode = Annotated[str, Field(max_length=64, pattern=r"^[A-Z][A-Z0-9_]*$")]


class OriginKind(StrEnum):
    """How a principal reached the homeserver; kinds are never merged."""

    NATIVE_LOCAL = "native-local"
    REMOTE_FEDERATED = "remote-federated"
    BRIDGED = "bridged"
    EXTERNAL_APPSERVICE = "external-appservice"
    OAUTH_CLIENT = "oauth-client"


class Principal(Model):
    """A typed principal: the complete MXID and its origin kind."""

    mxid: Mxid
    """Complete Matrix user ID, e.g. @alice:example.org (at most 255 bytes)."""
    origin_kind: OriginKind
    """Origin of the identity; only native-local may hold memory in v1."""


class AgentRef(Model):
    """An exact kagent Agent."""

    namespace: DnsLabel
    """Namespace of the kagent Agent."""
    name: DnsLabel
    """Name of the kagent Agent."""


class LocalObjectRef(Model):
    """A same-namespace object reference."""

    name: DnsLabel
    """Name of the object, in this object's namespace."""


class Condition(Model):
    """A Kubernetes-style status condition; reason is a bounded code, message is content-free."""

    type: Annotated[str, Field(max_length=64, pattern=r"^[A-Z][A-Za-z0-9]*$")]
    """Condition type in CamelCase, e.g. Ready; one condition per type."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds: True, False or Unknown."""
    reason: ReasonCode
    """Reason code of the current status (UPPER_SNAKE_CASE; OK when nothing is wrong)."""
    message: Annotated[str, Field(max_length=256)] = ""
    """The reason's constant human sentence; never a value from an object, store or request."""
    last_transition_time: datetime
    """When the status last changed (RFC 3339)."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation this condition was computed for."""


Conditions = Annotated[
    list[Condition],
    Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "map",
                                            "x-kubernetes-list-map-keys": ["type"]}),
]
