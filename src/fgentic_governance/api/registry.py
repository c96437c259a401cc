"""The five kinds and their CRD-level metadata (names, scope, printer columns)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from fgentic_governance.api.common import GROUP
from fgentic_governance.api.floors import MemoryPostureFloorSpec, MemoryPostureFloorStatus
from fgentic_governance.api.memory import (
    ConsentRecordSpec,
    ConsentRecordStatus,
    MemoryScopeSpec,
    MemoryScopeStatus,
)
from fgentic_governance.api.offboarding import OffboardingSpec, OffboardingStatus
from fgentic_governance.api.retrieval import RetrievalBindingSpec, RetrievalBindingStatus

CATEGORY = "fgentic"


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def wire(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            out["priority"] = self.priority
        return out


_AGE = Column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class CustomResource:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[BaseModel]
    status: type[BaseModel]
    namespaced: bool = True
    columns: tuple[Column, ...] = field(default=())

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


MEMORY_SCOPE = CustomResource(
    kind="MemoryScope", plural="memoryscopes", short_names=("mscope",),
    spec=MemoryScopeSpec, status=MemoryScopeStatus,
    columns=(
        Column("Agent", ".spec.agent.name"),
        Column("Phase", ".status.phase"),
        Column("Consent Generation", ".status.consentGeneration", "integer"),
        Column("Entries", ".status.entryCount", "integer"),
        Column("Reason", ".status.reasonCode", priority=1),
        _AGE,
    ),
)
CONSENT_RECORD = CustomResource(
    kind="ConsentRecord", plural="consentrecords", short_names=("consent",),
    spec=ConsentRecordSpec, status=ConsentRecordStatus,
    columns=(
        Column("Scope", ".spec.scopeRef.name"),
        Column("Decision", ".spec.decision"),
        Column("Result", ".status.receipt.result"),
        Column("Consent Generation", ".status.receipt.generation", "integer"),
        _AGE,
    ),
)
RETRIEVAL_BINDING = CustomResource(
    kind="RetrievalBinding", plural="retrievalbindings", short_names=("rbind",),
    spec=RetrievalBindingSpec, status=RetrievalBindingStatus,
    columns=(
        Column("Agent", ".spec.agent.name"),
        Column("Tool", ".spec.mcpServer.tool"),
        Column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        Column("Digest", ".status.renderedDigest", priority=1),
        _AGE,
    ),
)
PRINCIPAL_OFFBOARDING = CustomResource(
    kind="PrincipalOffboarding", plural="principaloffboardings", short_names=("offboard",),
    spec=OffboardingSpec, status=OffboardingStatus, namespaced=False,
    columns=(
        Column("Phase", ".status.phase"),
        Column("Found", ".status.scopesFound", "integer"),
        Column("Erased", ".status.scopesErased", "integer"),
        Column("Failed", ".status.scopesFailed", "integer"),
        _AGE,
    ),
)
MEMORY_POSTURE_FLOOR = CustomResource(
    kind="MemoryPostureFloor", plural="memoryposturefloors", short_names=("mfloor",),
    spec=MemoryPostureFloorSpec, status=MemoryPostureFloorStatus, namespaced=False,
    columns=(
        Column("Level", ".spec.target.level"),
        Column("Posture", ".spec.posture"),
        Column("Phase", ".status.phase"),
        Column("Purge", ".status.purge.result"),
        Column("Reason", ".status.reasonCode", priority=1),
        _AGE,
    ),
)

KINDS: tuple[CustomResource, ...] = (
    MEMORY_SCOPE, CONSENT_RECORD, RETRIEVAL_BINDING, PRINCIPAL_OFFBOARDING, MEMORY_POSTURE_FLOOR,
)
