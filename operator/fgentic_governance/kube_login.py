"""Kopf login without a client library: in-cluster service account first, then kubeconfig."""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.login()  # type: ignore[arg-type]
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
