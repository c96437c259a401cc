"""Per-rule roll-out: the rules a platform may set to warn instead of deny (pure).

Kyverno's Audit and Gatekeeper's warn actions let a rule be rolled out before it refuses.
Here only a rule whose guarantee also holds elsewhere may warn, so warning never admits what
the product exists to refuse:

- MEMORY_TTL_MISSING, MEMORY_TTL_EXCEEDS_RETENTION: the store bounds every entry's expiry by
  its scope's immutable maximum retention, whatever TTL kagent sends (a longer one is cut to it,
  sql/0002 and memory/delegated.py); the Agent's ttlDays only states the same bound twice.

Every other rule guards identity propagation, the governed memory path, consent or cost, and
always denies. A warned rule admits with a Kubernetes admission warning (``kubectl`` prints it)
and an audit result ``warn`` instead of ``fail``.

Audit-only mode (``--enforcement audit``, the chart's ``webhook.enforcement: audit``) is the
roll-out of the whole policy on a cluster that already runs Agents: every rule (AUDITED) admits
with a warning, and the audit's PolicyReports still say ``fail`` for what enforcement would
refuse. Nothing the rules guard holds at admission then; for the rules that guard memory
(MEMORY_RISK) the warning and the start-up line say so, and what the store holds regardless
(AUDIT_RISK).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fgentic_governance.admission.guidance import explained
from fgentic_governance.admission.policy import AdmissionCode, Denial

WARNABLE: Final = frozenset({AdmissionCode.MEMORY_TTL_MISSING,
                             AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION})


NOT_RULES: Final = frozenset({AdmissionCode.REVIEW_MALFORMED, AdmissionCode.UNSUPPORTED_KIND})
"""Not rules but requests our configuration never sends (not a CREATE or UPDATE, a kind no
route reviews): refused in every mode."""
AUDITED: Final = frozenset(AdmissionCode) - NOT_RULES
"""The rules that only warn in audit-only mode: every one."""
MEMORY_RISK: Final = frozenset({
    AdmissionCode.MEMORY_UNGATED, AdmissionCode.MEMORY_RUNTIME_UNGOVERNED,
    AdmissionCode.MEMORY_ROUTING_BYPASS, AdmissionCode.ROUTED_LABEL_RESERVED,
    AdmissionCode.MEMORY_MODEL_UNGOVERNED, AdmissionCode.CONSENT_SCOPE_MISSING,
    AdmissionCode.CONSENT_SUBJECT_MISMATCH, AdmissionCode.OFFBOARDING_IN_PROGRESS,
    AdmissionCode.FEDERATION_DENIED, AdmissionCode.APPSERVICE_IDENTITY_DENIED})
"""The rules that guard memory and whose guarantee nothing else gives at admission (the TTL
rules, WARNABLE, are bounded by the store anyway)."""
AUDIT_WARNING: Final = "audit-only, not denied"
MEMORY_WARNING: Final = "audit-only, not denied: a memory rule, memory may bypass governance"
AUDIT_RISK: Final = (
    "webhook enforcement=audit: no rule denies (admission warnings and PolicyReports only); "
    "the memory rules (" + ", ".join(sorted(MEMORY_RISK)) + ") do not hold at admission, so "
    "an Agent's runtime may keep memory outside the memory API (kagent's own store: no "
    "consent, retention or erasure); the store still refuses every memory call through the "
    "memory API without the subject's live consent lease and bounds each entry by its "
    "scope's retention")
"""The start-up line of an audit-only webhook (docs/install.md, "Rolling out")."""


class Mode(StrEnum):
    """``--enforcement`` (``webhook.enforcement``)."""

    DENY = "deny"
    AUDIT = "audit"


@dataclass(frozen=True)
class Enforcement:
    """What refuses: every rule but the ``warned`` ones, or (``audit_only``) none of AUDITED."""

    warned: frozenset[AdmissionCode] = frozenset()
    audit_only: bool = False

    def warns(self, code: AdmissionCode) -> bool:
        return code in self.warned or (self.audit_only and code in AUDITED)

    def split(self, denials: Sequence[Denial]) -> tuple[list[Denial], list[Denial]]:
        """(denials that refuse, denials that only warn)."""
        return ([d for d in denials if not self.warns(d.code)],
                [d for d in denials if self.warns(d.code)])

    def warning(self, denial: Denial) -> str:
        """The admission warning: the denial's text, and in audit-only mode that it was not
        enforced (with the risk, for a memory rule)."""
        if not self.audit_only or denial.code in self.warned:
            return explained(denial)
        note = MEMORY_WARNING if denial.code in MEMORY_RISK else AUDIT_WARNING
        return f"{explained(denial)} ({note})"


ENFORCE: Final = Enforcement()
"""Every rule refuses."""


def warned_rules(codes: Iterable[str]) -> frozenset[AdmissionCode]:
    """The codes a platform set to warn; an unknown code or one that must deny stops start-up
    (one line naming the code and what may warn)."""
    allowed = ", ".join(sorted(WARNABLE))
    chosen = set()
    for code in codes:
        if code not in {c.value for c in WARNABLE}:
            raise SystemExit(f"--warn-rule {code}: only {allowed} may warn; every other rule "
                             "guards what must be refused")
        chosen.add(AdmissionCode(code))
    return frozenset(chosen)


def split(denials: Sequence[Denial], warned: frozenset[AdmissionCode]
          ) -> tuple[list[Denial], list[Denial]]:
    """(denials that refuse, denials that only warn)."""
    return Enforcement(warned).split(denials)
