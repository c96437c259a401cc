"""The TLS bootstrap's decision (pure): one CA per Secret, a leaf for the union of names."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from cryptography import x509
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission.bootstrap import KEPT_CAS, Pacer, Target, inject_ca, planned
from fgentic_governance.kube.failures import RequestFailed
from fgentic_governance.serving.tls import CertificateAuthority

A = ["webhook-a.ns.svc", "127.0.0.1"]
B = ["webhook-b.ns.svc", "127.0.0.1"]


def _certs(data: dict[str, str], key: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(base64.b64decode(data[key]))


def _names(data: dict[str, str]) -> set[str]:
    [leaf] = _certs(data, "tls.crt")
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {*sans.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))}


def test_replicas_with_different_names_settle_on_one_ca_and_the_union() -> None:
    """Issue 36 §2: each replica minted a new CA and a leaf for its own names whenever the
    stored leaf lacked them, so two replicas rewrote the Secret in turn forever."""
    data = planned(None, A)
    assert data is not None
    writes = 1
    for hosts in (B, A, B, A):  # the replicas take turns, as their watches do
        new = planned(data, hosts)
        if new is not None:
            assert new["ca.crt"] == data["ca.crt"] and new["ca.key"] == data["ca.key"]
            data, writes = new, writes + 1
    assert writes == 2
    assert _names(data) == {*A, *B}
    [leaf], [ca] = _certs(data, "tls.crt"), _certs(data, "ca.crt")
    leaf.verify_directly_issued_by(ca)


def test_a_pair_whose_key_does_not_match_is_reissued_by_the_same_ca() -> None:
    data, other = planned(None, A), planned(None, A)
    assert data is not None and other is not None
    new = planned({**data, "tls.key": other["tls.key"]}, A)
    assert new is not None and new["ca.crt"] == data["ca.crt"]
    assert new["tls.crt"] != data["tls.crt"]
    assert planned(new, A) is None


def test_a_new_ca_keeps_the_earlier_valid_ones_within_a_bound() -> None:
    data = planned(None, A)
    assert data is not None
    for _ in range(KEPT_CAS + 2):  # a Secret without its CA key: an earlier release's
        previous = data
        renewed = planned({k: v for k, v in data.items() if k != "ca.key"}, A)
        assert renewed is not None
        data, bundle = renewed, _certs(renewed, "ca.crt")
        assert bundle[1] == _certs(previous, "ca.crt")[0]  # the one just replaced, second
    assert len(bundle) == KEPT_CAS
    assert _names(data) >= set(A)


def test_a_leaf_of_another_ca_is_reissued() -> None:
    data = planned(None, A)
    assert data is not None
    stranger = CertificateAuthority().issue_server(A)
    new = planned({**data, "tls.crt": base64.b64encode(stranger.cert_pem).decode(),
                   "tls.key": base64.b64encode(stranger.key_pem).decode()}, A)
    assert new is not None and new["ca.crt"] == data["ca.crt"]
    [leaf], [ca] = _certs(new, "tls.crt"), _certs(new, "ca.crt")
    leaf.verify_directly_issued_by(ca)


def test_writes_in_a_row_are_paced_and_the_pace_resets_when_quiet() -> None:
    now: list[float] = [0.0]
    slept: list[float] = []
    pacer = Pacer(clock=lambda: now[0], sleep=slept.append)
    for _ in range(10):
        pacer.before_write()
        pacer.wrote()
    assert slept[0] == 0.5 and slept[-1] == 30.0 and slept == sorted(slept)
    now[0] += 301
    pacer.before_write()
    assert len(slept) == 9  # the first write after a quiet spell waits for nothing


class _Configurations:
    """AdmissionregistrationV1Api as the chart's RBAC answers a webhook without the memory API:
    its validating configuration readable, the Pod routing's mutating one refused (403)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def read_validating_webhook_configuration(self, name: str, **_: object) -> object:
        self.asked.append(f"get validating {name}")
        hook = SimpleNamespace(client_config=SimpleNamespace(ca_bundle="CA"))
        return SimpleNamespace(webhooks=[hook])

    def read_mutating_webhook_configuration(self, name: str, **_: object) -> object:
        self.asked.append(f"get mutating {name}")
        raise ApiException(status=403, reason="Forbidden")


def _target(*, pod_routing: bool) -> Target:
    return Target(namespace="ns", secret="tls", service="svc", webhook_config="fg",
                  pod_routing=pod_routing)


def test_without_the_pod_routing_its_configuration_is_not_read() -> None:
    """Issue 37 §1: with the chart's defaults (no memory API) the webhook read the Pod
    routing's configuration, was refused (403) and exited: the webhook never started."""
    api = _Configurations()
    inject_ca(api, _target(pod_routing=False), "CA")  # type: ignore[arg-type]
    assert api.asked == ["get validating fg"]


def test_with_the_pod_routing_a_refused_read_fails_naming_the_request() -> None:
    api = _Configurations()
    with pytest.raises(RequestFailed) as failed:
        inject_ca(api, _target(pod_routing=True), "CA")  # type: ignore[arg-type]
    assert str(failed.value).startswith(
        "Kubernetes request `get mutatingwebhookconfigurations/fg` failed: status 403 Forbidden")
