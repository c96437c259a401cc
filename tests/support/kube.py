"""Our custom objects in a real kube-apiserver: the API group, the project's CRDs and bounded
waits on an object's status."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, VERSION
from tests.support.objects import ROOT
from tests.support.polling import until_async

Check = Callable[[dict[str, Any]], bool]


def project_crds() -> list[Path]:
    """This repo's generated CRDs (none yet is fine)."""
    return sorted((ROOT / "crds").glob("*.yaml"))


def get_object(api: client.CustomObjectsApi, plural: str, namespace: str, name: str,
               request_timeout: float | None = None) -> dict[str, Any]:
    """One object of our group (cluster-scoped when ``namespace`` is empty);
    ``request_timeout`` bounds the call if given."""
    timeout: dict[str, Any] = ({} if request_timeout is None
                               else {"_request_timeout": request_timeout})
    if not namespace:
        return api.get_cluster_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, plural, name, **timeout)
    return api.get_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, plural, name, **timeout)


async def until_status(api: client.CustomObjectsApi, plural: str, namespace: str, name: str,
                       check: Check, *, timeout: float = 30, interval: float = 0.2,
                       tolerate: tuple[type[BaseException], ...] = (),
                       request_timeout: float | None = None) -> dict[str, Any]:
    """Poll the object until ``check`` holds for its status and return the object; fail after
    ``timeout`` seconds. Errors of the ``tolerate`` types count as a poll that did not hold."""
    latest: dict[str, Any] = {}

    async def status() -> dict[str, Any]:
        obj = await asyncio.to_thread(get_object, api, plural, namespace, name, request_timeout)
        latest.clear()
        latest.update(obj)
        return dict(obj.get("status") or {})

    await until_async(status, f"{plural}/{name} to reach the state", timeout, holds=check,
                      interval=interval, tolerate=tolerate)
    return latest


def phase(expected: str, reason: str | None = None) -> Check:
    """A check: the status is in phase ``expected`` (with reason code ``reason`` if given)."""
    return lambda s: s.get("phase") == expected and (reason is None
                                                     or s.get("reasonCode") == reason)


def replay(list_call: Callable[..., Any], *args: Any, since: str, quiet: int = 2,
           **selectors: Any) -> list[dict[str, Any]]:
    """Every change of the listed objects after resourceVersion ``since``, in the API server's
    order (a watch from there replays them, then ends after ``quiet`` quiet seconds)."""
    from kubernetes import watch

    stream = watch.Watch().stream(list_call, *args, resource_version=since,
                                  timeout_seconds=quiet, _request_timeout=30, **selectors)
    return [event["object"] for event in stream]


@contextlib.contextmanager
def refusing(api_client: client.ApiClient, *, resource: str, label: str,
             allow: str) -> Iterator[None]:
    """A real API error for the operator to meet: a ValidatingAdmissionPolicy (and its binding)
    that refuses every UPDATE of ``resource`` (a plural of our group, or ``<plural>/status``)
    on objects labelled ``<label>: "true"`` unless the CEL expression ``allow`` holds. The API
    server loads and unloads policies within moments: see ``until_refused``."""
    name = f"refuse-{uuid.uuid4().hex[:8]}"
    admission = client.AdmissionregistrationV1Api(api_client)
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": [GROUP], "apiVersions": [VERSION],
                     "operations": ["UPDATE"], "resources": [resource]}]},
                 "validations": [{"expression": allow, "message": "refused by the test"}]}})
    admission.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"objectSelector": {"matchLabels": {label: "true"}}}}})
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


async def until_refused(call: Callable[[], object], *, refused: bool = True,
                        timeout: float = 30) -> None:
    """Repeat ``call`` (bounded) until the API server refuses it (422/403), or with
    ``refused=False`` accepts it: a policy just created or deleted is then in force or gone."""

    async def answer() -> bool:
        try:
            await asyncio.to_thread(call)
        except ApiException as exc:
            if exc.status not in (403, 422):
                raise
            return True
        return False

    await until_async(answer, f"the API server to {'refuse' if refused else 'accept'} it",
                      timeout, holds=lambda was_refused: was_refused == refused)
