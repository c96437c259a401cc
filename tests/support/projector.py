"""Builders for the identity projector (ADR 0017 §4, §6-§8, §12): the example binding's
projector config and the check-request headers the rendered agentgateway config sends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fgentic_governance import contract
from fgentic_governance.api.retrieval import A2aWire, RetrievalBindingSpec
from fgentic_governance.contract import AgentRef, RoomContext
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector_config import ProjectorConfig, projector_config
from tests.support.objects import example

NOW = 1_784_116_800
AGENT = AgentRef(namespace="fgentic-demo", name="docs-agent")
ALICE = "@alice:org-a.example"
SLACK_BOB = "@slack-bob:org-a.example"
WORKLOAD = "serviceaccount:matrix/matrix-a2a-bridge"
ISSUER = "https://issuer.example"
AUDIENCE = "fgentic-a2a"
STATE = "58e67efe5cd7f5ff2805eb0f35192ea90ef64244c896417b5504af8ad102be17"
DELEGATION = "9f4e9e8b6a8d33bdb85d8fd5bc13ed101cb42a1c9d9b49ccf42c0a49387eddb6"


def spec(**changes: Any) -> RetrievalBindingSpec:
    doc = example("RetrievalBinding")["spec"]
    doc.update(changes)
    return RetrievalBindingSpec.model_validate(doc)


def config(**changes: Any) -> ProjectorConfig:
    return projector_config(spec(**changes))


def room_context(*, caller: dict[str, str] | None = None,
                 audience: list[dict[str, str]] | None = None,
                 classes: tuple[str, ...] = ("public",)) -> RoomContext:
    caller = caller or {"kind": "matrix", "principal": ALICE}
    return RoomContext.model_validate_json(json.dumps({  # strict models: JSON lists
        "allowed_classifications": classes,
        "audience": audience if audience is not None else [caller],
        "caller": caller,
        "delegation_id": DELEGATION,
        "room": {"event_id": "$event", "history_visibility": "joined",
                 "id": "!room:org-a.example", "join_rule": "invite", "state_sha256": STATE},
        "v": 1,
    }))


def wire_config(wire: A2aWire) -> ProjectorConfig:
    """The example binding's projector config for an Agent whose runtime speaks ``wire``."""
    return config(kagent={"a2aVersion": wire.value})


def _version(wire: A2aWire) -> dict[str, list[str]]:
    """The A2A-Version a well-formed request of ``wire`` carries (0.3: none)."""
    rules = n.WIRES[wire]
    return {} if rules.version_optional else {n.A2A_VERSION_HEADER: [rules.versions[0]]}


def local_headers(context: RoomContext | None = None, *, user: str = ALICE,
                  changes: Mapping[str, list[str] | None] | None = None,
                  wire: A2aWire = A2aWire.V0_3) -> dict[str, list[str]]:
    """The check request of the rendered local route for one well-formed bridge request."""
    headers: dict[str, list[str]] = {
        n.USER_ID: [user],
        n.ROOM_CONTEXT: [contract.encode_room_context(context or room_context())],
        **_version(wire),
        n.CHECK_AGENT: ["fgentic-demo/docs-agent"],
        n.CHECK_HTTP_METHOD: ["POST"],
        n.CHECK_PATH: ["/a2a/fgentic-demo/docs-agent"],
        n.CHECK_A2A_METHOD: [n.WIRES[wire].send],
        n.CHECK_WORKLOAD: [WORKLOAD],
        n.CHECK_USER_ID_COUNT: ["1"],
        n.CHECK_ROOM_CONTEXT_COUNT: ["1"],
        "host": ["projector:9090"],
    }
    return _apply(headers, changes or {})


def public_headers(*, token_exp: int = NOW + 3600, azp: str = "org-b-a2a",
                   changes: Mapping[str, list[str] | None] | None = None,
                   wire: A2aWire = A2aWire.V0_3) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {
        **_version(wire),
        n.CHECK_AGENT: ["fgentic-demo/docs-agent"],
        n.CHECK_HTTP_METHOD: ["POST"],
        n.CHECK_PATH: ["/a2a/fgentic-demo/docs-agent"],
        n.CHECK_A2A_METHOD: [n.WIRES[wire].send],
        n.CHECK_ISSUER: [ISSUER],
        n.CHECK_AUDIENCE: [AUDIENCE],
        n.CHECK_AZP: [azp],
        n.CHECK_TOKEN_EXP: [str(token_exp)],
        n.CHECK_TIMEOUT: ["30"],
    }
    return _apply(headers, changes or {})


def _apply(headers: dict[str, list[str]],
           changes: Mapping[str, list[str] | None]) -> dict[str, list[str]]:
    for name, value in changes.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def ceiling_room_context(*, extra: int = 0) -> RoomContext:
    """A room context whose stamped projection encodes to exactly 8,192 bytes (the carrier's
    ceiling; ``extra`` bytes more of one MXID go over it): 16 bridged members (the audience's
    maximum) with 63-character networks and long MXIDs. The caller is the first member."""
    def member(index: int, length: int) -> dict[str, str]:
        suffix = ":org-a.example"
        head = f"@b{index:02d}"
        return {"kind": "bridged_matrix", "network": "n" * 63,
                "principal": head + "x" * (length - len(head) - len(suffix)) + suffix}

    members = [member(i, 219) for i in range(15)] + [member(15, 221 + extra)]
    return RoomContext.model_validate_json(json.dumps({
        "allowed_classifications": ["public"], "audience": members, "caller": members[0],
        "delegation_id": DELEGATION,
        "room": {"event_id": "$event", "history_visibility": "joined",
                 "id": "!room:org-a.example", "join_rule": "invite", "state_sha256": STATE},
        "v": 1}))
