"""Kopf's memo as the operator hands it over (controller/context.py): the one way a unit test
gives a handler, a queued scope or the operator's start-up code its settings, store and API
client."""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes import client

from fgentic_governance.controller.context import OperatorContext, memo_of

UNSENT_HOST = "https://unsent.invalid"
"""Where :func:`unsent_client` would send a request: a reserved name that never resolves
(RFC 6761), so a call a unit test failed to replace fails at once instead of reaching a
cluster."""


def unsent_client() -> client.ApiClient:
    """An API client for unit tests that replace the calls it would carry
    (``controller.kube_calls``): the operator's context holds one, as ``main``'s does."""
    return client.ApiClient(client.Configuration(host=UNSENT_HOST))


def operator_memo(**values: Any) -> kopf.Memo:
    """A memo holding a fresh context with ``values`` (the rest at their defaults: no store,
    no model routes, an :func:`unsent_client`): what ``main`` hands Kopf, and so what every
    object's memo copies."""
    values.setdefault("api", unsent_client())
    return memo_of(OperatorContext(**values))
