"""The operator's settings and store live in Kopf's own memo (controller/context.py, issue 41
item 2), not in a module-level singleton: ``main`` hands Kopf one memo, Kopf copies it
shallowly into every object's memo, and each handler reads the one context from its ``memo``."""

from __future__ import annotations

import copy
import importlib
import pkgutil

import pytest

from fgentic_governance import controller
from fgentic_governance.controller.context import OperatorContext, memo_of, of, owns_cluster_kinds
from tests.support.operator_memo import operator_memo


def test_no_module_of_the_operator_holds_a_context() -> None:
    """A process-wide instance is what the memo replaced: handlers would read it unseen."""
    held = []
    for info in pkgutil.walk_packages(controller.__path__, f"{controller.__name__}."):
        module = importlib.import_module(info.name)
        held += [f"{info.name}.{name}" for name, value in vars(module).items()
                 if isinstance(value, OperatorContext)]
    assert held == []


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
