"""A table of hostile objects run through the pure decoder, the CRD models and the admission
policy: each must be rejected with the expected bounded code (and, for the policy, the message
must not echo a confusable).

Decoder rows start from the ADR's valid projections (contract/testdata) and change one thing;
model rows from the examples/ specs; policy rows from a minimal retrieval Agent.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest

from fgentic_governance import contract
from fgentic_governance.admission.policy import (
    AdmissionCode,
    BindingView,
    PolicyState,
    agent_denials,
)
from fgentic_governance.api.memory import ConsentRecordSpec, MemoryScopeSpec
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.contract import Code as CCode
from fgentic_governance.contract import ContractError, MatrixProjection, OAuthProjection
from tests.support.objects import example

DATA = Path(contract.__file__).parent / "testdata"
NOW = 1784117000


def doc(stem: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"adr0017_{stem}.json").read_text())
    return loaded


def jcs(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def matrix(**changes: Any) -> dict[str, Any]:
    return {**doc("matrix_projection"), **changes}


def oauth(**changes: Any) -> dict[str, Any]:
    return {**doc("oauth_projection"), **changes}


def client(**changes: Any) -> dict[str, Any]:
    return oauth(client={**doc("oauth_projection")["client"], **changes})


def replace_once(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert raw.count(old) >= 1
    return raw.replace(old, new, 1)


# (id, header values, expected code, expected path or None)
HeaderRow = tuple[str, list[str | bytes], CCode, str | None]
VALID_MATRIX = jcs(doc("matrix_projection"))
VALID_OAUTH = jcs(doc("oauth_projection"))
DECODER_ROWS: list[HeaderRow] = [
    # Size and carrier.
    ("oversized-header", ["A" * 8193], CCode.HEADER_TOO_LARGE, None),
    ("oversized-bytes-header", [b"A" * 100_000], CCode.HEADER_TOO_LARGE, None),
    ("no-value", [], CCode.HEADER_MISSING, None),
    ("two-values", [b64(VALID_MATRIX), b64(VALID_MATRIX)], CCode.HEADER_DUPLICATE, None),
    ("padded-base64", [b64(VALID_MATRIX) + "=="], CCode.NOT_BASE64URL, None),
    ("standard-alphabet", [base64.b64encode(VALID_MATRIX + b"??>").decode()],
     CCode.NOT_BASE64URL, None),
    ("trailing-newline", [b64(VALID_MATRIX) + "\n"], CCode.NOT_BASE64URL, None),
    ("non-ascii-value", ["\uff21" + b64(VALID_MATRIX)], CCode.NOT_BASE64URL, None),
    ("oversized-issuer", [b64(jcs(client(issuer="https://" + "i" * 600)))],
     CCode.SHAPE_INVALID, "client.issuer"),
    ("oversized-audience", [b64(jcs(matrix(audience=[
        {"kind": "matrix", "principal": f"@u{i:02d}:org-a.example"} for i in range(17)])))],
     CCode.SHAPE_INVALID, "audience"),
    ("huge-integer", [b64(jcs(matrix(exp=2**53)))], CCode.NUMBER_INVALID, None),
    ("float-version", [b64(replace_once(VALID_MATRIX, b'"v":1', b'"v":1.0'))],
     CCode.NUMBER_INVALID, None),
    # Non-canonical JSON.
    ("whitespace", [b64(json.dumps(doc("matrix_projection"), sort_keys=True).encode())],
     CCode.NOT_CANONICAL, None),
    ("key-order", [b64(json.dumps(dict(reversed(doc("matrix_projection").items())),
                                  separators=(",", ":")).encode())],
     CCode.NOT_CANONICAL, None),
    ("escaped-ascii", [b64(replace_once(VALID_MATRIX, b'"kind":"matrix","principal"',
                                        b'"kind":"m\\u0061trix","principal"'))],
     CCode.NOT_CANONICAL, None),
    ("escaped-slash", [b64(replace_once(VALID_OAUTH, b"https://", b"https:\\/\\/"))],
     CCode.NOT_CANONICAL, None),
    ("escaped-non-ascii", [b64(jcs(client(azp="org-b-\u00e9")).replace(
        "\u00e9".encode(), b"\\u00e9"))], CCode.NOT_CANONICAL, None),
    ("bom", [b64(b"\xef\xbb\xbf" + VALID_MATRIX)], CCode.NOT_JSON, None),
    ("invalid-utf8", [b64(replace_once(VALID_OAUTH, b"org-b-a2a", b"org-b-\xff"))],
     CCode.NOT_UTF8, None),
    ("lone-surrogate", [b64(replace_once(VALID_OAUTH, b"org-b-a2a", b"org-\\ud800"))],
     CCode.NOT_UTF8, None),
    # Duplicate names, top level and nested, same or different values.
    ("duplicate-top", [b64(VALID_MATRIX[:-1] + b',"v":1}')], CCode.DUPLICATE_NAME, None),
    ("duplicate-nested", [b64(replace_once(VALID_MATRIX, b'"namespace":"kagent"}',
                                           b'"namespace":"kagent","name":"other"}'))],
     CCode.DUPLICATE_NAME, None),
    # Mixed kinds: Matrix and OAuth fields in one projection.
    ("matrix-with-client", [b64(jcs(matrix(client=doc("oauth_projection")["client"])))],
     CCode.UNKNOWN_FIELD, None),
    ("oauth-with-principal", [b64(jcs(oauth(principal="@alice:org-a.example")))],
     CCode.UNKNOWN_FIELD, None),
    ("oauth-kind-matrix-body", [b64(jcs(matrix(kind="oidc_client")))], CCode.FIELD_MISSING,
     "client"),
    ("matrix-with-groups", [b64(jcs(matrix(groups=["partner/org-b/docs"])))],
     CCode.SHAPE_INVALID, "groups"),
    ("unknown-kind", [b64(jcs(matrix(kind="m\u0430trix")))], CCode.SHAPE_INVALID, "kind"),
    # Prefix groups: another partner's namespace, a longer policy id, bad grammar, order.
    ("group-other-partner", [b64(jcs(oauth(groups=["partner/org-c/docs"])))],
     CCode.GROUPS_INVALID, "groups"),
    ("group-prefix-policy", [b64(jcs(oauth(groups=["partner/org-bb/docs"])))],
     CCode.GROUPS_INVALID, "groups"),
    ("group-no-id", [b64(jcs(oauth(groups=["partner/org-b"])))], CCode.SHAPE_INVALID,
     "groups[0]"),
    ("group-nested", [b64(jcs(oauth(groups=["partner/org-b/docs/x"])))], CCode.SHAPE_INVALID,
     "groups[0]"),
    ("group-unsorted", [b64(jcs(oauth(groups=["partner/org-b/docs", "partner/org-b/doc"])))],
     CCode.GROUPS_INVALID, "groups"),
    ("group-duplicate", [b64(jcs(oauth(groups=["partner/org-b/docs"] * 2)))],
     CCode.GROUPS_INVALID, "groups"),
    # Confusables inside identifiers.
    ("cyrillic-mxid", [b64(jcs(matrix(principal="@\u0430lice:org-a.example")))],
     CCode.SHAPE_INVALID, "principal"),
    ("fullwidth-agent", [b64(jcs(matrix(agent={"name": "knowledge-\uff41gent",
                                               "namespace": "kagent"})))],
     CCode.SHAPE_INVALID, "agent.name"),
    ("zwj-policy-id", [b64(jcs(client(policy_id="org\u200d-b")))], CCode.SHAPE_INVALID,
     "client.policy_id"),
]


@pytest.mark.parametrize(("values", "code", "path"), [r[1:] for r in DECODER_ROWS],
                         ids=[r[0] for r in DECODER_ROWS])
def test_hostile_headers_are_rejected_with_their_code(
    values: list[str | bytes], code: CCode, path: str | None,
) -> None:
    with pytest.raises(ContractError) as info:
        contract.decode_identity(values, now=NOW, agent=None)
    assert info.value.code is code
    if path is not None:
        assert info.value.path == path
    # Nothing of the input in the message: a code and a contract field path only.
    assert str(info.value) in {code.value, f"{code.value} at {info.value.path}"}


@pytest.mark.parametrize(("document", "kind"), [
    (doc("matrix_projection"), MatrixProjection),
    (doc("oauth_projection"), OAuthProjection),
    (oauth(groups=["partner/org-b/doc", "partner/org-b/docs"]), OAuthProjection),
], ids=["matrix", "oauth", "oauth-two-groups"])
def test_the_unchanged_documents_are_accepted(document: dict[str, Any],
                                              kind: type[pydantic.BaseModel]) -> None:
    """Anchor: every row above differs from an accepted header in the one way it names; the
    accepted header decodes to exactly the document it carries."""
    decoded = contract.decode_identity([b64(jcs(document))], now=NOW, agent=None)
    assert type(decoded) is kind
    assert decoded.model_dump(mode="json") == document


# -- CRD models ---------------------------------------------------------------------------------

ModelRow = tuple[str, type[pydantic.BaseModel], str, Callable[[dict[str, Any]], Any], str, str]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def apply(spec: dict[str, Any]) -> Any:
        node = spec
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        return spec
    return apply


MODEL_ROWS: list[ModelRow] = [
    ("oversized-purpose", MemoryScopeSpec, "MemoryScope", _set("purpose", "p" * 64),
     "string_too_long", "purpose"),
    ("oversized-room", MemoryScopeSpec, "MemoryScope",
     _set("controlRoom", "!" + "r" * 255), "string_too_long", "controlRoom"),
    ("cap-above-ceiling", MemoryScopeSpec, "MemoryScope", _set("policy.entryCap", 101),
     "less_than_equal", "policy.entryCap"),
    ("retention-above-ceiling", MemoryScopeSpec, "MemoryScope",
     _set("policy.maxRetentionDays", 8), "less_than_equal", "policy.maxRetentionDays"),
    ("cap-as-string", MemoryScopeSpec, "MemoryScope", _set("policy.entryCap", "5"),
     "int_type", "policy.entryCap"),
    ("cap-as-bool", MemoryScopeSpec, "MemoryScope", _set("policy.entryCap", True),
     "int_type", "policy.entryCap"),
    ("cyrillic-mxid", MemoryScopeSpec, "MemoryScope",
     _set("subject.mxid", "@\u0430lice:fgentic.local"), "string_pattern_mismatch",
     "subject.mxid"),
    ("mxid-trailing-newline", MemoryScopeSpec, "MemoryScope",
     _set("subject.mxid", "@alice:fgentic.local\n"), "string_pattern_mismatch",
     "subject.mxid"),
    ("fullwidth-origin", MemoryScopeSpec, "MemoryScope",
     _set("subject.originKind", "native-\uff4cocal"), "enum", "subject.originKind"),
    ("unknown-field", MemoryScopeSpec, "MemoryScope", _set("policy.entryCapp", 5),
     "extra_forbidden", "policy.entryCapp"),
    ("zwj-purpose", ConsentRecordSpec, "ConsentRecord", _set("purpose", "personal\u200d"),
     "string_pattern_mismatch", "purpose"),
    ("decision-case", ConsentRecordSpec, "ConsentRecord", _set("decision", "Granted"),
     "enum", "decision"),
    ("port-as-string", RetrievalBindingSpec, "RetrievalBinding",
     _set("retrievalService.port", "8080"), "int_type", "retrievalService.port"),
    ("port-out-of-range", RetrievalBindingSpec, "RetrievalBinding",
     _set("retrievalService.port", 65536), "less_than_equal", "retrievalService.port"),
    ("tool-with-space", RetrievalBindingSpec, "RetrievalBinding",
     _set("mcpServer.tool", "search knowledge"), "string_pattern_mismatch", "mcpServer.tool"),
    ("mcp-kind-mixed", RetrievalBindingSpec, "RetrievalBinding",
     _set("mcpServer.kind", "MCPServer"), "literal_error", "mcpServer.kind"),
]


@pytest.mark.parametrize(("model", "kind", "change", "error", "loc"),
                         [r[1:] for r in MODEL_ROWS], ids=[r[0] for r in MODEL_ROWS])
def test_hostile_specs_are_rejected_with_their_error(
    model: type[pydantic.BaseModel], kind: str, change: Callable[[dict[str, Any]], Any],
    error: str, loc: str,
) -> None:
    spec = change(copy.deepcopy(example(kind)["spec"]))
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate(spec)
    first = info.value.errors()[0]
    assert (first["type"], ".".join(str(p) for p in first["loc"])) == (error, loc)


# -- admission policy ---------------------------------------------------------------------------

SERVER = ("kagent.dev", "RemoteMCPServer", "ns", "knowledge")
BOUND = PolicyState(bindings={("ns", "retriever"): [
    BindingView("ns", "b", ("ns", "retriever"), SERVER, "search")]})
CARRIER = "x-fgentic-identity"


def agent(allowed: list[Any] | None = None, headers_from: list[str] | None = None,
          name: str = "retriever") -> dict[str, Any]:
    mcp: dict[str, Any] = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer",
                           "namespace": "ns", "name": "knowledge", "toolNames": ["search"]}
    if allowed is not None:
        mcp["allowedHeaders"] = allowed
    tool: dict[str, Any] = {"type": "McpServer", "mcpServer": mcp}
    if headers_from is not None:
        tool["headersFrom"] = [{"name": n, "valueFrom": {"type": "Secret", "name": "s",
                                                         "key": "k"}} for n in headers_from]
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"type": "Declarative", "declarative": {"tools": [tool]}}}


PolicyRow = tuple[str, dict[str, Any], list[AdmissionCode]]
POLICY_ROWS: list[PolicyRow] = [
    # allowedHeaders: only the exact carrier name (ASCII case-insensitive, SP/HTAB padding).
    ("cyrillic-e", agent([CARRIER.replace("e", "\u0435")]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("cyrillic-a-like", agent(["x-fgentic-identity".replace("i", "\u0456", 1)]),
     [AdmissionCode.FORBIDDEN_HEADER]),
    ("cyrillic-y", agent(["x-fgentic-identit\u0443"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("fullwidth", agent(["\uff58-fgentic-identity"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("fullwidth-all", agent([CARRIER.translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)})]),
     [AdmissionCode.FORBIDDEN_HEADER]),
    ("zero-width-joiner", agent(["x-fgentic-\u200didentity"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("zero-width-space-end", agent([CARRIER + "\u200b"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("soft-hyphen", agent(["x-fgentic\u00ad-identity"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("underscore-variant", agent(["x_fgentic_identity"]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("oversized-name", agent(["x-" + "a" * 5000]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("non-string-name", agent([{"name": CARRIER}]), [AdmissionCode.FORBIDDEN_HEADER]),
    ("trailing-space-unbound", agent([CARRIER + " "], name="other"),
     [AdmissionCode.IDENTITY_HEADER_UNBOUND]),
    ("trailing-tab-unbound", agent(["X-Fgentic-Identity\t"], name="other"),
     [AdmissionCode.IDENTITY_HEADER_UNBOUND]),
    ("carrier-and-credential", agent([CARRIER, "Authorization"]), [AdmissionCode.FORBIDDEN_HEADER]),
    # headersFrom: never an X-Fgentic-* name, and never a name that is not an HTTP token.
    ("from-carrier", agent(headers_from=[CARRIER]), [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-trailing-space", agent(headers_from=["X-Fgentic-Identity "]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-room-context", agent(headers_from=["X-Fgentic-Room-Context"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-cyrillic-e", agent(headers_from=["x-fg\u0435ntic-identity"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-fullwidth", agent(headers_from=["\uff58-fgentic-identity"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-zwj", agent(headers_from=["x-\u200dfgentic-identity"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-nbsp-prefix", agent(headers_from=["\u00a0x-fgentic-identity"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-authorization", agent(headers_from=["Authorization"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-cyrillic-i-authorization", agent(headers_from=["authorizat\u0456on"]),
     [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-x-user-id", agent(headers_from=["X-User-Id"]), [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    ("from-empty-name", agent(headers_from=[""]), [AdmissionCode.FORBIDDEN_HEADERS_FROM]),
    # Mixed shapes fail closed.
    ("tools-not-a-list", {**agent(), "spec": {"declarative": {"tools": "x"}}},
     [AdmissionCode.MALFORMED_OBJECT]),
    ("mcp-server-list", {**agent(), "spec": {"declarative": {"tools": [
        {"mcpServer": [CARRIER]}]}}}, [AdmissionCode.MALFORMED_OBJECT]),
]


@pytest.mark.parametrize(("obj", "expected"), [r[1:] for r in POLICY_ROWS],
                         ids=[r[0] for r in POLICY_ROWS])
def test_hostile_agents_are_denied_with_their_code(obj: dict[str, Any],
                                                   expected: list[AdmissionCode]) -> None:
    denials = agent_denials(obj, BOUND)
    assert [d.code for d in denials] == expected
    for denial in denials:
        assert len(denial.message()) < 200


def test_the_plain_carrier_is_admitted_when_bound() -> None:
    """Anchor: the exact carrier (and ASCII case/SP-HTAB padding) on the bound tool passes."""
    for name in (CARRIER, "X-Fgentic-Identity", " x-fgentic-identity\t"):
        assert agent_denials(agent([name]), BOUND) == []
    assert agent_denials(agent(headers_from=["X-Api-Key"]), BOUND) == []


@pytest.mark.parametrize("name", [CARRIER + "\u3000", "\u2003" + CARRIER, CARRIER + "\x1f"])
def test_unicode_padded_carrier_is_refused(name: str) -> None:
    assert [d.code for d in agent_denials(agent([name]), BOUND)] == [AdmissionCode.FORBIDDEN_HEADER]


@pytest.mark.parametrize("name", ["x-fgentic-identit\u0443", "\uff58-fgentic-identity"])
def test_confusables_are_not_echoed(name: str) -> None:
    (denial,) = agent_denials(agent([name]), BOUND)
    assert denial.message().isascii()
