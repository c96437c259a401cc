"""The policy's stateless rules as CEL, for ValidatingAdmissionPolicies the API server runs
itself (defence in depth that holds while the webhook is down). One definition per rule:
its code and its sentence come from the webhook's own vocabulary (``guidance``), so a denial
reads the same whichever refuses first. Rules that read other objects (bindings, scopes,
ModelConfigs, the memory API's readiness) stay the webhook's alone.

The chart's template is generated from here (``fgentic-dev chart-policy``, drift-checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from fgentic_governance.admission.guidance import GUIDANCE
from fgentic_governance.admission.policy import IDENTITY_HEADER, AdmissionCode
from fgentic_governance.api import kagent
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.registry import MEMORY_SCOPE

# CEL over optional fields: absent lists count as empty (kagent omits them freely).
_TOOLS: Final = "object.spec.?declarative.?tools.orValue([])"
_TOKEN: Final = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""RFC 9110 tchar: a header name; anything else cannot be compared reliably."""
HOMESERVER: Final = "__LOCAL_HOMESERVER__"
"""Stands for the local homeserver in an expression (a literal at render time)."""
APPSERVICE: Final = "__APPSERVICE_REGEXES__"
"""Stands for the appservice-namespace registry's regexes in an expression: a CEL list of
string literals at render time (:func:`regex_list`)."""


_GO_JSON: Final = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                 "\u2028": "\\u2028", "\u2029": "\\u2029"})
"""What Go's JSON encoder (Helm's ``toJson``, the chart's copy of this list) escapes beyond
Python's, so both write the same expression."""


def regex_list(registry: AppserviceRegistry) -> str:
    """The registry's ``userRegex`` values as a CEL list literal. A JSON string is a CEL string
    literal (the same escapes; neither encoder writes ``\\/``), and the registry admits only
    expressions RE2 (CEL's ``matches``) reads as Python does."""
    return "[" + ", ".join(json.dumps(ns.user_regex, ensure_ascii=False).translate(_GO_JSON)
                           for ns in registry.namespaces) + "]"


@dataclass(frozen=True)
class CelRule:
    code: AdmissionCode
    resource: str
    """The plural of the kind it checks: ``agents`` (kagent.dev/v1alpha2) or ``memoryscopes``."""
    expression: str

    def validation(self, local_homeserver: str = "", appservice: str = "") -> dict[str, str]:
        # Single quotes cannot occur in a homeserver name (the schema's pattern refuses them).
        expression = self.expression.replace(HOMESERVER, local_homeserver).replace(
            APPSERVICE, appservice)
        return {"expression": expression,
                "message": f"{self.code.value}: {GUIDANCE[self.code]}",
                "reason": "Forbidden"}


STATELESS_RULES: Final = (
    CelRule(AdmissionCode.FORBIDDEN_HEADER, kagent.AGENT.plural,
            f"{_TOOLS}.all(t, t.?mcpServer.?allowedHeaders.orValue([])"
            f".all(h, h.lowerAscii() == '{IDENTITY_HEADER.lower()}'))"),
    CelRule(AdmissionCode.FORBIDDEN_HEADERS_FROM, kagent.AGENT.plural,
            f"{_TOOLS}.all(t, t.?headersFrom.orValue([]).all(h, "
            f"!h.name.lowerAscii().startsWith('x-fgentic-') && h.name.matches(\"{_TOKEN}\")))"),
    CelRule(AdmissionCode.MEMORY_TTL_MISSING, kagent.AGENT.plural,
            "!has(object.spec.declarative) || !has(object.spec.declarative.memory) || "
            "object.spec.declarative.memory.?ttlDays.orValue(0) > 0"),
    CelRule(AdmissionCode.FEDERATION_DENIED, MEMORY_SCOPE.plural,
            f"object.spec.subject.mxid.endsWith(':{HOMESERVER}')"),
    # A full match, as the registry's: RE2's matches() finds a match anywhere.
    CelRule(AdmissionCode.APPSERVICE_IDENTITY_DENIED, MEMORY_SCOPE.plural,
            f"!{APPSERVICE}.exists(r, object.spec.subject.mxid.matches('^(?:' + r + ')$'))"),
)


def rules(resource: str, local_homeserver: str = "", appservice: str = "") -> list[CelRule]:
    """The rules of one resource's policy; the homeserver rule only with a homeserver
    (without one the webhook refuses every scope anyway), the appservice rule only with a
    registry (``appservice``: its :func:`regex_list`)."""
    return [rule for rule in STATELESS_RULES if rule.resource == resource
            and (HOMESERVER not in rule.expression or local_homeserver)
            and (APPSERVICE not in rule.expression or appservice)]


def validations(resource: str, local_homeserver: str = "",
                appservice: AppserviceRegistry = EMPTY) -> list[dict[str, str]]:
    regexes = regex_list(appservice) if appservice else ""
    return [rule.validation(local_homeserver, regexes)
            for rule in rules(resource, local_homeserver, regexes)]
