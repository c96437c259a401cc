"""A failed Kubernetes request in one bounded line: which request, its status and why."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from fgentic_governance.kube.client import request
from fgentic_governance.kube.failures import RequestFailed, describe, named

SECRET = "sk-do-not-print"  # stands for anything a Status message may quote


def _refusal(status: int, reason: str, message: str = f"user cannot read {SECRET}") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "reason": reason, "message": message})
    return exc


def test_a_refusal_names_the_request_the_status_and_the_meaning_never_the_message() -> None:
    line = describe("get", named("mutatingwebhookconfigurations", "fg"),
                    _refusal(403, "Forbidden"))
    assert line == ("Kubernetes request `get mutatingwebhookconfigurations/fg` failed: status "
                    "403 Forbidden: the service account lacks this permission (the chart's Role "
                    "or ClusterRole for this component; docs/troubleshooting.md)")
    assert SECRET not in line


def test_only_a_known_status_reason_is_repeated() -> None:
    odd = _refusal(418, f"Teapot {SECRET}")
    assert describe("get", "x", odd) == "Kubernetes request `get x` failed: status 418 I'm a Teapot"
    broken = ApiException(status=500)
    broken.body = "not json " + SECRET
    assert describe("patch", "y", broken).endswith("status 500 Internal Server Error")


def test_no_answer_names_the_request_and_the_failure_class() -> None:
    line = describe("get", named("secrets", "tls", "ns"), MaxRetryError(None, "/", SECRET))
    assert line == ("Kubernetes request `get secrets/ns/tls` failed: no answer from the API "
                    "server (MaxRetryError)")


def test_request_lets_an_expected_answer_through_and_names_any_other() -> None:
    with pytest.raises(ApiException), request("get", "s", expected=(404,)):
        raise _refusal(404, "NotFound")
    with pytest.raises(RequestFailed) as failed, request("get", "s", expected=(404,)):
        raise _refusal(403, "Forbidden")
    assert failed.value.status == 403 and failed.value.code == "API_STATUS_403"
    assert str(failed.value).startswith("Kubernetes request `get s` failed: status 403")
    with pytest.raises(ValueError), request("get", "s"):  # not a request's failure: as it is
        raise ValueError
