"""The one way every process of ours builds its Kubernetes API client.

An explicit kubeconfig wins; inside a Pod the mounted service-account token is used; outside a
Pod, ``KUBECONFIG`` or ``~/.kube/config``. Nothing found is an error at start-up, never an
unauthenticated client (the operator once crash-looped in a cluster because it read only a
kubeconfig: NODE.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config


def in_cluster() -> bool:
    """Kubelet sets these for every container whose Pod can reach the API server."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and Path(
        "/var/run/secrets/kubernetes.io/serviceaccount/token").is_file()


def api_client(kubeconfig: str | os.PathLike[str] | None = None) -> client.ApiClient:
    """A client for the given kubeconfig, else the Pod's service account, else the default
    kubeconfig. Raises ``kubernetes.config.ConfigException`` when there is none."""
    if kubeconfig is not None:
        return config.new_client_from_config(  # type: ignore[no-untyped-call,no-any-return]
            config_file=os.fspath(kubeconfig))
    if in_cluster():
        configuration = client.Configuration()
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config()  # type: ignore[no-untyped-call,no-any-return]
