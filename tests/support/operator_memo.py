"""Kopf's memo as the operator hands it over (controller/context.py): the one way a unit test
gives a handler, a queued scope or the operator's start-up code its settings and store."""

from __future__ import annotations

from typing import Any

import kopf

from fgentic_governance.controller.context import OperatorContext, memo_of


def operator_memo(**values: Any) -> kopf.Memo:
    """A memo holding a fresh context with ``values`` (the rest at their defaults: no store,
    no model routes): what ``main`` hands Kopf, and so what every object's memo copies."""
    return memo_of(OperatorContext(**values))
