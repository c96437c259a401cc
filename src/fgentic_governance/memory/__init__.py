"""Governed semantic memory: the content-store boundary of ADR 0023 (issue 3).

The fence lives in PostgreSQL (``sql/``) so that every writer - this package, an adapted
kagent issuing plain SQL, an operator's psql - passes the same gate: consent generation,
enabled scope, exact subject/Agent binding, entry cap, fact size, hard expiry and no expiry
extension. Python sequences the operator's and the control API's fenced operations
(``store``: the scope lifecycle, ``!memory`` inspect and forget, leases, counts, cleanup),
serves the runtime's data path under a live delegation lease (``delegated``, what the memory
API calls), admits cost before model work (``cost``), refuses credentials and standing
instructions (``write_policy``) and bounds every wait and every call (``bounds``). Every
refusal is ``StoreRefusal(reason)``.
"""

from fgentic_governance.memory.cost import CostGate
from fgentic_governance.memory.errors import SQLSTATE_REASONS, StoreRefusal
from fgentic_governance.memory.model import (
    Access,
    ConfirmationStatus,
    Entry,
    Envelope,
    ErasureKind,
    ErasureReceipt,
    Lease,
    Lifecycle,
    MemoryType,
    Operation,
    ScopeRecord,
    ScopeState,
    Sensitivity,
    SourceKind,
    WriteReason,
)
from fgentic_governance.memory.schema import migrate, schema_version
from fgentic_governance.memory.store import MemoryStore
from fgentic_governance.schema_version import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "SQLSTATE_REASONS",
    "Access",
    "ConfirmationStatus",
    "CostGate",
    "Entry",
    "Envelope",
    "ErasureKind",
    "ErasureReceipt",
    "Lease",
    "Lifecycle",
    "MemoryStore",
    "MemoryType",
    "Operation",
    "ScopeRecord",
    "ScopeState",
    "Sensitivity",
    "SourceKind",
    "StoreRefusal",
    "WriteReason",
    "migrate",
    "schema_version",
]
