"""The policy's stateless rules as CEL, for ValidatingAdmissionPolicies the API server runs
itself (defence in depth that holds while the webhook is down). One definition per rule:
its code and its sentence come from the webhook's own vocabulary (``guidance``), so a denial
reads the same whichever refuses first. Rules that read other objects (bindings, scopes,
ModelConfigs, the memory API's readiness) stay the webhook's alone.

The chart's template is generated from here (``fgentic-dev chart-policy``, drift-checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fgentic_governance.admission.guidance import GUIDANCE
from fgentic_governance.admission.policy import IDENTITY_HEADER, AdmissionCode

# CEL over optional fields: absent lists count as empty (kagent omits them freely).
_TOOLS: Final = "object.spec.?declarative.?tools.orValue([])"
_TOKEN: Final = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""RFC 9110 tchar: a header name; anything else cannot be compared reliably."""
HOMESERVER: Final = "__LOCAL_HOMESERVER__"
"""Stands for the local homeserver in an expression (a literal at render time)."""


@dataclass(frozen=True)
class CelRule:
    code: AdmissionCode
    resource: str
    """The plural of the kind it checks: ``agents`` (kagent.dev/v1alpha2) or ``memoryscopes``."""
    expression: str

    def validation(self, local_homeserver: str = "") -> dict[str, str]:
        # Single quotes cannot occur in a homeserver name (the schema's pattern refuses them).
        expression = self.expression.replace(HOMESERVER, local_homeserver)
        return {"expression": expression,
                "message": f"{self.code.value}: {GUIDANCE[self.code]}",
                "reason": "Forbidden"}


STATELESS_RULES: Final = (
    CelRule(AdmissionCode.FORBIDDEN_HEADER, "agents",
            f"{_TOOLS}.all(t, t.?mcpServer.?allowedHeaders.orValue([])"
            f".all(h, h.lowerAscii() == '{IDENTITY_HEADER.lower()}'))"),
    CelRule(AdmissionCode.FORBIDDEN_HEADERS_FROM, "agents",
            f"{_TOOLS}.all(t, t.?headersFrom.orValue([]).all(h, "
            f"!h.name.lowerAscii().startsWith('x-fgentic-') && h.name.matches(\"{_TOKEN}\")))"),
    CelRule(AdmissionCode.MEMORY_TTL_MISSING, "agents",
            "!has(object.spec.declarative) || !has(object.spec.declarative.memory) || "
            "object.spec.declarative.memory.?ttlDays.orValue(0) > 0"),
    CelRule(AdmissionCode.FEDERATION_DENIED, "memoryscopes",
            f"object.spec.subject.mxid.endsWith(':{HOMESERVER}')"),
)


def rules(resource: str, local_homeserver: str = "") -> list[CelRule]:
    """The rules of one resource's policy; the homeserver rule only with a homeserver
    (without one the webhook refuses every scope anyway)."""
    return [rule for rule in STATELESS_RULES if rule.resource == resource
            and (HOMESERVER not in rule.expression or local_homeserver)]


def validations(resource: str, local_homeserver: str = "") -> list[dict[str, str]]:
    return [rule.validation(local_homeserver) for rule in rules(resource, local_homeserver)]
