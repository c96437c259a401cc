"""Posture floors in the store (sql/0023): what a MemoryPostureFloor is to the fence.

A floor names the Agents it covers (every Agent, one namespace's, or one Agent) and the most
restrictive posture their scopes may have. The fence reads the floors on every capture and
recall; the operator only writes them (``MemoryStore.set_floor``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fgentic_governance.api.floors import FloorLevel, MemoryPostureFloorSpec
from fgentic_governance.api.memory import Posture, RecallPolicy

# The store's spelling of each level (posture_floor.level).
STORE_LEVEL = {FloorLevel.CLUSTER: "cluster", FloorLevel.NAMESPACE: "namespace",
               FloorLevel.AGENT: "agent"}
# Strictness of a posture: the floor with the highest rank over an Agent wins.
RANK = {Posture.ENABLED: 0, Posture.CAPTURE_DISABLED: 1, Posture.FULLY_DISABLED: 2}


@dataclass(frozen=True, slots=True)
class Floor:
    """One floor as the store keeps it, keyed by the MemoryPostureFloor's name."""

    key: str
    level: FloorLevel
    posture: Posture
    agent_namespace: str = ""
    agent_name: str = ""
    recall: RecallPolicy = field(default_factory=RecallPolicy)
    """What may enter recall under the floor (met with each scope's own, sql/0023)."""

    @classmethod
    def from_spec(cls, name: str, spec: MemoryPostureFloorSpec) -> Floor:
        return cls(key=name, level=spec.target.level, posture=spec.posture,
                   agent_namespace=spec.target.namespace or "",
                   agent_name=spec.target.agent or "", recall=spec.recall)

    def covers(self, agent_namespace: str, agent_name: str) -> bool:
        """Whether the floor covers this Agent (the store's floor_posture() in Python, for
        enumerating MemoryScope objects that may never have reached the store)."""
        if self.level is FloorLevel.CLUSTER:
            return True
        if self.level is FloorLevel.NAMESPACE:
            return agent_namespace == self.agent_namespace
        return (agent_namespace, agent_name) == (self.agent_namespace, self.agent_name)
