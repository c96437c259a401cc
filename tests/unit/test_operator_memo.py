"""The operator's settings, store and API client live in Kopf's own memo
(controller/context.py, issue 41 item 2), not in module-level singletons: ``main`` hands Kopf
one memo, Kopf copies it shallowly into every object's memo, and each handler reads the one
context from its ``memo``."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from collections.abc import Iterator
from types import FunctionType, ModuleType

import pytest
from kubernetes.client import ApiClient

from fgentic_governance import controller
from fgentic_governance.controller.context import OperatorContext, memo_of, of, owns_cluster_kinds
from tests.support.operator_memo import operator_memo, unsent_client


def _operator_modules() -> Iterator[ModuleType]:
    for info in pkgutil.walk_packages(controller.__path__, f"{controller.__name__}."):
        yield importlib.import_module(info.name)


def _held(kind: type) -> list[str]:
    """Every module-level slot of the operator's modules for a ``kind``: a value of it, one
    held by a module-level object (as the binding applier), or a name declared for one (set
    at start-up, so None while tests import the module)."""
    held = []
    for module in _operator_modules():
        for name, value in vars(module).items():
            inner = () if isinstance(value, (type, ModuleType, FunctionType)) else (
                getattr(value, "__dict__", {}).values())
            if isinstance(value, kind) or any(isinstance(v, kind) for v in inner):
                held.append(f"{module.__name__}.{name}")
        held += [f"{module.__name__}.{name}" for name, hint in
                 vars(module).get("__annotations__", {}).items() if kind.__name__ in str(hint)]
    return held


def test_no_module_of_the_operator_holds_a_context() -> None:
    """A process-wide instance is what the memo replaced: handlers would read it unseen."""
    assert _held(OperatorContext) == []


def test_no_module_of_the_operator_holds_an_api_client() -> None:
    """Nor a process-wide API client set at start-up: every call is handed the memo's."""
    assert _held(ApiClient) == []


def test_the_api_client_travels_in_the_memo_and_fails_closed_without_one() -> None:
    api = unsent_client()
    assert of(operator_memo(api=api)).kube() is api
    with pytest.raises(RuntimeError):
        OperatorContext().kube()


def test_every_objects_memo_reads_the_operators_one_context() -> None:
    ctx = OperatorContext(cluster_kinds=False)
    memo = memo_of(ctx)
    per_object = copy.copy(memo)  # as Kopf makes each object's memo (kopf inventory.recall)
    per_object["pending"] = "an object's own entry"
    assert of(per_object) is ctx and "pending" not in memo
    ctx.update(cluster_kinds=True)  # set later (the store at start-up): every copy sees it
    assert owns_cluster_kinds(memo=per_object)


def test_a_memo_without_the_context_fails_closed() -> None:
    with pytest.raises(RuntimeError):
        of({})
    with pytest.raises(AttributeError):  # a misspelt field fails loudly, not silently
        of(operator_memo()).update(stor=None)
