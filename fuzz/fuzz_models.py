"""atheris harness: the CRD spec models against their generated CRD schemas.

For each kind, a JSON-like value built from fuzzer bytes (object keys mostly drawn from the
CRD's own property names) is validated by the spec model. Only pydantic.ValidationError or
success is allowed; success must imply that the generated CRD schema accepts the value (nulls
pruned, as the API server does) and that the model's wire form is schema-valid too. Run:

    .venv/bin/python fuzz/fuzz_models.py -runs=100000
"""

from __future__ import annotations

import sys
from typing import Any

import atheris
import yaml
from jsonschema import Draft202012Validator

with atheris.instrument_imports(include=["_common", "fgentic_governance"]):
    import _common  # first: it puts a plain checkout on sys.path
    import pydantic

    from fgentic_governance.api.registry import KINDS


def _schema(plural: str) -> dict[str, Any]:
    path = _common.ROOT / "crds" / f"governance.fgentic.dev_{plural}.yaml"
    crd = yaml.safe_load(path.read_text())
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]
    return spec


def _keys(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found |= set(value)
            found |= _keys(value)
    elif isinstance(node, list):
        for value in node:
            found |= _keys(value)
    return found


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _example(kind: str) -> Any:
    for path in sorted((_common.ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                return doc["spec"]
    raise LookupError(kind)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index))
    return out


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _put(doc[head], rest, value)}
    copy = list(doc)
    copy[head] = _put(doc[head], rest, value)
    return copy


# (model, schema validator, schema keys, seed spec with defaults written out, its paths)
TARGETS = []
for _kind in KINDS:
    _seed = _kind.spec.from_wire(_example(_kind.kind)).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    TARGETS.append((_kind.spec, Draft202012Validator(_schema(_kind.plural)),
                    sorted(_keys(_schema(_kind.plural))), _seed, _paths(_seed)))


def run(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    model, validator, keys, seed, paths = TARGETS[fdp.ConsumeIntInRange(0, len(TARGETS) - 1)]
    if fdp.ConsumeBool():  # an example with up to three values replaced
        spec = seed
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            where = paths[fdp.ConsumeIntInRange(0, len(paths) - 1)]
            try:
                spec = _put(spec, where, _common.json_value(fdp, keys))
            except (KeyError, IndexError, TypeError):  # path gone after an earlier change
                break
    else:
        spec = _common.json_value(fdp, keys)
    try:
        parsed = model.from_wire(spec)
    except pydantic.ValidationError:
        return
    if not validator.is_valid(_prune(spec)):
        raise AssertionError("the model accepted a spec the CRD schema refuses")
    if not validator.is_valid(parsed.model_dump(mode="json", by_alias=True, exclude_none=True)):
        raise AssertionError("the model's wire form is not schema-valid")


def main() -> None:
    atheris.Setup(sys.argv, run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
