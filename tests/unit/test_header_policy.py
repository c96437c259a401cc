"""The header-propagation rule of the admission policy (pure)."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.admission.policy import AdmissionCode, header_denials
from tests.support.objects import example


def _agent(headers: Any) -> dict[str, Any]:
    agent = example("Agent")
    agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = headers
    return agent


def test_agent_without_propagated_headers_is_admitted() -> None:
    assert header_denials(example("Agent")) == []


def test_forbidden_headers_are_denied_case_insensitively() -> None:
    denials = header_denials(_agent(["Authorization", "COOKIE", "x-user-id", "*"]))
    assert [d.code for d in denials] == [AdmissionCode.FORBIDDEN_HEADER] * 4
    assert [d.header for d in denials] == ["authorization", "cookie", "x-user-id", "*"]
    assert denials[0].path == "spec.declarative.tools[0].mcpServer.allowedHeaders[0]"


def test_unbound_identity_carrier_is_denied() -> None:
    (denial,) = header_denials(_agent(["X-Fgentic-Identity"]))
    assert denial.code is AdmissionCode.IDENTITY_HEADER_UNBOUND


def test_malformed_tools_fail_closed() -> None:
    agent = example("Agent")
    agent["spec"]["declarative"]["tools"] = "not-a-list"
    assert [d.code for d in header_denials(agent)] == [AdmissionCode.MALFORMED_OBJECT]


@given(st.text(min_size=1, max_size=300))
def test_any_header_is_denied_and_only_token_names_are_echoed(name: str) -> None:
    (denial,) = header_denials(_agent([name]))
    assert denial.code in {AdmissionCode.FORBIDDEN_HEADER, AdmissionCode.IDENTITY_HEADER_UNBOUND}
    # RFC 9110: only SP/HTAB are optional whitespace and header names are case-insensitive in
    # ASCII only; a name is echoed only when made of these plain token characters.
    normalized = name.strip(" \t")
    normalized = normalized.lower() if normalized.isascii() else normalized
    echoed = set(string.ascii_lowercase + string.digits + "-_*")  # tokens without punctuation
    token = 0 < len(normalized) <= 64 and set(normalized) <= echoed
    assert denial.header == (normalized if token else "<invalid header name>")
    assert len(denial.message()) < 200
