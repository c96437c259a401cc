"""Fuzzing the CRD models: arbitrary JSON-like specs either fail with pydantic.ValidationError or
validate, and whatever a model accepts the generated CRD schema (crds/) accepts too.

Inputs are the examples/ specs with 1-4 structural mutations (a value replaced by arbitrary
JSON or a tweaked string, a key removed, a camelCase or random key added) plus wholly arbitrary
objects. The schema check mirrors what the API server does before validation: null values of
non-nullable fields are pruned (none of our fields is nullable). CEL rules
(x-kubernetes-validations) are not evaluated by jsonschema; they only make the CRD stricter.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from fgentic_governance.api.registry import KINDS, CustomResource
from tests.support.doc_paths import drop, get, paths, put
from tests.support.objects import ROOT, example

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def crd_schema(plural: str) -> dict[str, Any]:
    path = ROOT / "crds" / f"governance.fgentic.dev_{plural}.yaml"
    crd = yaml.safe_load(Path(path).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


@cache
def validator(plural: str) -> Draft202012Validator:
    return Draft202012Validator(crd_schema(plural))


def schema_keys(node: Any) -> set[str]:
    """Every property name the CRD schema knows (camelCase wire names)."""
    keys: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                keys |= set(value)
            keys |= schema_keys(value)
    elif isinstance(node, list):
        for value in node:
            keys |= schema_keys(value)
    return keys


def prune_nulls(value: Any) -> Any:
    """What the API server does to nulls of fields that are not nullable: drop them."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.sampled_from([0, 1, -1, 7, 8, 100, 101, 65535, 65536, 5.0, 0.5, 1e308])
           | st.text(max_size=30) | st.from_regex(r"[a-z0-9-]{0,70}", fullmatch=True))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=10)


def tweak(text: str, how: str) -> Any:
    """Near-miss variants of a valid string (the ones regex engines disagree on included)."""
    return {
        "newline": text + "\n", "space": f" {text}", "upper": text.upper(), "empty": "",
        "long": (text or "a") * 300, "fullwidth": text.translate(
            {c: c + 0xFEE0 for c in range(0x21, 0x7F)}), "number": str(len(text)),
        "zwj": text[:1] + "\u200d" + text[1:], "unicode": text + "\u0430",
    }[how]


def retyped(value: Any) -> list[Any]:
    """The same value in other JSON types (what a lax parser would coerce back)."""
    if isinstance(value, bool):
        return [int(value), str(value).lower(), None]
    if isinstance(value, int):
        return [str(value), float(value), value + 0.5, bool(value), [value], None]
    if isinstance(value, str):
        return [int(value) if value.isdigit() else len(value), [value], {"value": value}, None]
    if isinstance(value, list):
        return [value[:1] * 2, value[0] if value else "", {}]
    return [[value], json.dumps(value), None]


@st.composite
def mutated_spec(draw: st.DrawFn, kind: CustomResource) -> Any:
    # The example with every default written out, so each bounded field is a mutation target.
    doc: Any = kind.spec.model_validate(example(kind.kind)["spec"]).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    keys = sorted(schema_keys(crd_schema(kind.plural)))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(paths(doc)))
        action = draw(st.sampled_from(["replace", "retype", "tweak", "drop", "add"]))
        current = get(doc, where)
        if action == "replace":
            doc = put(doc, where, draw(JSON))
        elif action == "retype":
            doc = put(doc, where, draw(st.sampled_from(retyped(current))))
        elif action == "tweak" and isinstance(current, str):
            how = draw(st.sampled_from(["newline", "space", "upper", "empty", "long",
                                        "fullwidth", "number", "zwj", "unicode"]))
            doc = put(doc, where, tweak(current, how))
        elif action == "drop" and where:
            doc = drop(doc, where)
        elif action == "add" and isinstance(current, dict):
            key = draw(st.sampled_from(keys) | st.text(max_size=12))
            doc = put(doc, where, {**current, key: draw(JSON)})
    return doc


def check(kind: CustomResource, spec: Any) -> bool:
    """The property; returns whether the model accepted the spec."""
    try:
        model = kind.spec.from_wire(spec)
    except pydantic.ValidationError:
        return False
    errors = [e.message for e in validator(kind.plural).iter_errors(prune_nulls(spec))]
    assert errors == [], errors
    # What the operator writes back (defaults filled in) is schema-valid as well.
    wire = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert list(validator(kind.plural).iter_errors(wire)) == []
    # And it round-trips: the wire form means the same model.
    assert kind.spec.from_wire(json.loads(json.dumps(wire))) == model
    return True


@pytest.mark.parametrize("kind", KINDS, ids=[k.kind for k in KINDS])
@FUZZ
@given(data=st.data())
def test_model_acceptance_implies_crd_schema_acceptance(
    kind: CustomResource, data: st.DataObject,
) -> None:
    spec = data.draw(st.one_of(mutated_spec(kind), mutated_spec(kind), JSON), label="spec")
    check(kind, spec)


@pytest.mark.parametrize("kind", KINDS, ids=[k.kind for k in KINDS])
def test_the_unmutated_examples_are_accepted(kind: CustomResource) -> None:
    """Anchor: mutations start from a spec both sides accept."""
    assert check(kind, example(kind.kind)["spec"])


@pytest.mark.parametrize(("value", "accepted"), [
    (5, True), ("5", False), (True, False), (5.5, False), (None, False),
])
def test_integers_are_not_coerced(value: Any, accepted: bool) -> None:
    """Regression (found by this fuzzer): the lax models took "5" and true for 5 and 1."""
    kind = KINDS[0]
    spec = example(kind.kind)["spec"]
    spec["policy"] = {**spec.get("policy", {}), "entryCap": value}
    assert check(kind, spec) is accepted


def test_snake_case_names_are_refused() -> None:
    """Regression (found by this fuzzer): wire parsing took snake_case names, which the API
    server prunes as unknown fields."""
    kind = KINDS[0]
    spec = example(kind.kind)["spec"]
    spec["control_room"] = spec.pop("controlRoom")
    assert not check(kind, spec)
