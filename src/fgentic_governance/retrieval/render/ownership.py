"""Pure helpers for applying a rendered set: owner references, label selector, pruning."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fgentic_governance.retrieval.render.names import (
    BINDING_LABEL,
    MANAGED_BY,
    RENDERED_KINDS,
    BindingId,
)

OwnerKey = tuple[str, str, str, str]
"""(apiVersion, kind, namespace, name) of a rendered object."""


@dataclass(frozen=True)
class Owner:
    """The RetrievalBinding as an owner reference target."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


RENDERED_SELECTOR = f"{BINDING_LABEL},{MANAGED_BY[0]}={MANAGED_BY[1]}"
"""Selects what any binding rendered: the binding label, set by us (the renderer sets both)."""


def selector(binding: BindingId) -> str:
    """Selects what ``binding`` rendered. The managed-by label too: an object someone else
    labelled with a binding's name (a copy, another tool) is not ours to delete."""
    return f"{BINDING_LABEL}={binding.label},{MANAGED_BY[0]}={MANAGED_BY[1]}"


def rendered_by(obj: dict[str, Any], binding: BindingId | None = None) -> bool:
    """Labelled as rendered by ``binding`` (by any binding when None) and managed by us; checked
    again on what a label-selected LIST returned, before anything is deleted."""
    labels = obj.get("metadata", {}).get("labels") or {}
    label = labels.get(BINDING_LABEL)
    return (labels.get(MANAGED_BY[0]) == MANAGED_BY[1] and label is not None
            and (binding is None or label == binding.label))


def plural(obj: dict[str, Any]) -> str:
    return RENDERED_KINDS[(obj["apiVersion"], obj["kind"])]


def key(obj: dict[str, Any]) -> OwnerKey:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]


def with_owner(objects: Iterable[dict[str, Any]], owner: Owner) -> list[dict[str, Any]]:
    """Copies of ``objects``; those in the owner's namespace get a controller reference, so the
    garbage collector removes them with the binding. Owner references cannot cross namespaces:
    the others are found by their binding label and deleted by the operator."""
    out = []
    for original in objects:
        obj = copy.deepcopy(original)
        if obj["metadata"]["namespace"] == owner.namespace:
            obj["metadata"]["ownerReferences"] = [{
                "apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
                "uid": owner.uid, "controller": True}]
        out.append(obj)
    return out


def stale(existing: Iterable[dict[str, Any]], rendered: Iterable[dict[str, Any]],
          binding: BindingId) -> list[OwnerKey]:
    """Objects labelled for ``binding`` that the current rendering no longer contains (a
    removed public route, a changed namespace)."""
    wanted = {key(obj) for obj in rendered}
    return sorted(key(obj) for obj in existing
                  if rendered_by(obj, binding) and key(obj) not in wanted)
