"""The memory API's pure checks from the review of f3c355e (N3, N4, N5, N7, N10): request
targets, vector components beyond float4, the embeddings caller's Agent, the pass-through
shares. Behaviour through the real server is in tests/integration/test_memory_api_hardening.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from yarl import URL

from fgentic_governance.api import kagent
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.memory.model import vector_literal
from fgentic_governance.memoryapi import identity, proxy, wire
from fgentic_governance.memoryapi.codes import ApiError
from fgentic_governance.memoryapi.http import governed_path
from fgentic_governance.memoryapi.wire import parse_batch, parse_save, parse_search

ITEM = {"agent_name": "ns__NS__a", "user_id": "@a:example.org", "content": "fact"}
SEARCH = {"agent_name": "ns__NS__a", "user_id": "@a:example.org"}


def code_of(call: Any, *args: Any) -> str | None:
    try:
        call(*args)
    except (ApiError, StoreRefusal) as refused:
        return str(refused)
    return None


# -- N5: a component beyond float4 is refused before any cost, not a 500 from PostgreSQL ----


@pytest.mark.parametrize("spelled", ["1e39", "3.5e38", "-3.5e38", "1e300",
                                     "340282360000000000000000000000000000000"])
def test_components_beyond_float4_are_malformed_requests(spelled: str) -> None:
    vector = "[" + ",".join(["0.5"] * 767 + [spelled]) + "]"
    item = json.dumps(ITEM)[:-1] + f', "vector": {vector}}}'
    search = json.dumps(SEARCH)[:-1] + f', "vector": {vector}}}'
    assert code_of(parse_save, item.encode()) == "REQUEST_MALFORMED"
    assert code_of(parse_batch, f'{{"items": [{item}]}}'.encode()) == "REQUEST_MALFORMED"
    assert code_of(parse_search, search.encode()) == "REQUEST_MALFORMED"


def test_the_bound_is_float4s_own_range() -> None:
    for extreme in (3.4028234663852886e38, -3.4028235e38, 1.4e-45):  # float4's extremes
        item = parse_save(json.dumps({**ITEM, "vector": [extreme] * 768}).encode())
        assert item.vector == [extreme] * 768 and item.text is not None
    beyond = json.dumps({**ITEM, "vector": [3.40282357e38] * 768}).encode()  # strtof: inf
    assert code_of(parse_save, beyond) == "REQUEST_MALFORMED"
    large = [3e38, -3e38] + [0.0] * 766  # a norm beyond float4, every component within it
    assert vector_literal(large).startswith("[3e+38,-3e+38,0.0,")


@pytest.mark.parametrize("component", [1e39, -3.5e38, 10**39])
def test_the_store_refuses_a_component_beyond_float4_itself(component: float) -> None:
    """Every other writer (the operator's client, the store) goes through vector_literal."""
    assert code_of(vector_literal, [0.25] * 767 + [component]) == "INVALID_SPEC"


# -- N3, N4: one reading of the target, origin-form only ------------------------------------


@pytest.mark.parametrize(("method", "raw"), [
    ("CONNECT", "x@127.0.0.1:9"), ("CONNECT", "127.0.0.1:9"), ("CONNECT", "/api/sessions"),
    ("OPTIONS", "*"), ("GET", "http://127.0.0.1:9/api/sessions"), ("GET", "x@h:1/api"),
    ("GET", "/api/memories#x"), ("DELETE", "/api/memories?user_id=a#x"),
    ("POST", "/api/sessions#/../memories"), ("GET", ""),
])
def test_only_origin_form_targets_are_read(method: str, raw: str) -> None:
    assert code_of(wire.request_target, method, raw) == "TARGET_REFUSED"


def test_a_target_is_split_once_into_path_and_query() -> None:
    target = wire.request_target("GET", "/api/sessions/s?user_id=%40a%3Ab&limit=-1")
    assert (target.path, target.query) == ("/api/sessions/s", "user_id=%40a%3Ab&limit=-1")
    assert wire.request_target("POST", "/api/tasks") == wire.Target("/api/tasks", "")


@pytest.mark.parametrize("path", ["/api/memories;x", "/api;x/memories",
                                  "/api/sessions;jsessionid=1"])
def test_params_spellings_are_governed_paths(path: str) -> None:
    assert governed_path(path)


def test_forwarded_urls_keep_the_controllers_authority() -> None:
    base = proxy.upstream_base("http://kagent-controller.kagent:8083")
    for raw in ("/x@127.0.0.1:9/api", "/api/sessions?next=http://evil:1/"):
        url = proxy.joined(base, wire.request_target("GET", raw))
        assert (url.scheme, url.host, url.port, url.user) == (
            "http", "kagent-controller.kagent", 8083, None)
    url = proxy.joined(proxy.upstream_base("http://c:1/prefix/"),
                       wire.request_target("GET", "/api/s%2Fx?user_id=%40a"))
    assert str(url) == "http://c:1/prefix/api/s%2Fx?user_id=%40a"  # raw, not re-quoted
    assert url == URL("http://c:1/prefix/api/s%2Fx?user_id=%40a", encoded=True)


@pytest.mark.parametrize("url", ["http://u@c:1", "http://c:1/?q=1", "ftp://c:1", "c:1",
                                 "http://c:1/#f"])
def test_an_upstream_url_beyond_scheme_host_and_path_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="upstream"):
        proxy.upstream_base(url)


# -- N10: one client's share of the upstream pool -------------------------------------------


def test_one_client_holds_at_most_its_share_and_the_pool_reports_exhaustion() -> None:
    shares = proxy.InFlight(pool=4, per_client=2)
    with shares.hold("10.0.0.1"), shares.hold("10.0.0.1"):
        assert code_of(lambda: shares.hold("10.0.0.1").__enter__()) == "CLIENT_BUSY"
        with shares.hold("10.0.0.2"):
            assert not shares.exhausted
            with shares.hold("10.0.0.2"):
                assert shares.exhausted and shares.total == 4
        assert not shares.exhausted
    assert shares.total == 0
    with shares.hold("10.0.0.1"), shares.hold("10.0.0.1"):
        pass  # released shares are reusable


@pytest.mark.parametrize(("pool", "per_client"), [(100, 100), (100, 0), (0, 1)])
def test_a_share_that_could_take_the_whole_pool_is_refused(pool: int, per_client: int) -> None:
    with pytest.raises(ValueError, match="pool"):
        proxy.InFlight(pool, per_client)


# -- N7: the embeddings caller's Agent is its service account's, never its labels ----------


def _agent(name: str, account: str | None = None) -> dict[str, Any]:
    declarative: dict[str, Any] = {"memory": {"ttlDays": 1}}
    if account:
        declarative["deployment"] = {"serviceAccountName": account}
    return {"metadata": {"name": name}, "spec": {"declarative": declarative}}


def _pod(account: str | None, labels: dict[str, str]) -> dict[str, Any]:
    spec = {"serviceAccountName": account} if account else {}
    return {"metadata": {"namespace": "team", "labels": labels}, "spec": spec}


AGENTS = [_agent("helper"), _agent("other"), _agent("shared-1", "runner"),
          _agent("shared-2", "runner")]
KAGENT = {"app": "kagent", kagent.ROUTED_LABEL: "true"}


@pytest.mark.parametrize(("account", "labels", "expected"), [
    ("helper", {**KAGENT, "kagent": "helper"}, "helper"),
    ("helper", {kagent.ROUTED_LABEL: "true"}, "helper"),  # the account alone names it
    ("intruder", {**KAGENT, "kagent": "helper"}, "AGENT_UNRESOLVED"),  # labels never do
    (None, {**KAGENT, "kagent": "helper"}, "AGENT_UNRESOLVED"),  # "default"
    ("other", {**KAGENT, "kagent": "helper"}, "AGENT_MISMATCH"),
    ("runner", {**KAGENT, "kagent": "shared-1"}, "AGENT_UNRESOLVED"),  # two Agents share it
])
def test_a_routed_pods_agent_is_its_service_accounts(
        account: str | None, labels: dict[str, str], expected: str) -> None:
    try:
        found = identity.routed_pod_agent(_pod(account, labels), AGENTS)
    except ApiError as refused:
        assert str(refused) == expected
    else:
        assert found == kagent.AgentRef("team", expected)
