"""The one way every process of ours builds its Kubernetes API client.

An explicit kubeconfig wins; inside a Pod the mounted service-account token is used; outside a
Pod, ``KUBECONFIG`` or ``~/.kube/config``. Nothing found is an error at start-up, never an
unauthenticated client (the operator once crash-looped in a cluster because it read only a
kubeconfig: NODE.md). :func:`request` names a request whose failure a process reports
(kube/failures.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Container, Iterator
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from fgentic_governance.kube.failures import RequestFailed


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


@contextlib.contextmanager
def request(verb: str, what: str, *, expected: Container[int] = ()) -> Iterator[None]:
    """Turn a failure of the request inside into :class:`RequestFailed` naming it (``what``:
    ``failures.named``), except an answer whose status the caller handles (``expected``:
    404, 409...), which passes as it is."""
    try:
        yield
    except ApiException as exc:
        if exc.status in expected:
            raise
        raise RequestFailed(verb, what, exc) from exc
    except HTTPError as exc:  # urllib3's: refused, reset, timed out (never a file's error)
        raise RequestFailed(verb, what, exc) from exc
