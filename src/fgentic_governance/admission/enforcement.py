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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from fgentic_governance.admission.policy import AdmissionCode, Denial

WARNABLE: Final = frozenset({AdmissionCode.MEMORY_TTL_MISSING,
                             AdmissionCode.MEMORY_TTL_EXCEEDS_RETENTION})


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
    return ([d for d in denials if d.code not in warned],
            [d for d in denials if d.code in warned])
