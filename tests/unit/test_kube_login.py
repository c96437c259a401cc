"""The bound on the operator's API connections (controller/login.py): room for every watch stream
plus the shared handler connections, and no bound when namespace globs make the number of
watch streams unknown."""

from __future__ import annotations

from fgentic_governance.controller import login as kube_login
from fgentic_governance.controller.tuning import API_CONNECTIONS as CONNECTIONS

API_CONNECTIONS = CONNECTIONS.read()


def test_one_watch_per_kind_and_namespace_plus_the_shared_connections() -> None:
    try:
        kube_login.expect_namespaces([])
        assert kube_login.connection_limit() == 5 + API_CONNECTIONS
        kube_login.expect_namespaces(["a", "b", "c"])
        assert kube_login.connection_limit() == 15 + API_CONNECTIONS
        kube_login.expect_namespaces(["a", "team-*"])
        assert kube_login.connection_limit() == 0  # aiohttp: unbounded
    finally:
        kube_login.expect_namespaces([])
