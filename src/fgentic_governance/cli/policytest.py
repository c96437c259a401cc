"""`fgentic-governance test SUITE.yaml [...]`: offline admission policy tests, for GitOps.

A suite (docs/policy-testing.md) names the webhook's settings, the setup objects and, per test,
an object, an operation and the expected verdict; each object gets the webhook's own verdict
from ``admission.offline``. One line per test and a summary on stdout, codes and paths only
(never a value from an object). Exit 0 when every test passes, 1 when one fails, 2 when the
input cannot be used (then one line on stderr and no test runs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from fgentic_governance.admission.offline import (
    Options,
    Setup,
    UnusableObject,
    check_setup_object,
    evaluate,
    route_of,
)
from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.cli.errors import InputError
from fgentic_governance.cli.inputs import yaml_documents

SUITE_FIELDS: Final = frozenset({"settings", "setup", "tests"})
SETTINGS: Final[Mapping[str, tuple[str, type]]] = {
    "localHomeserver": ("local_homeserver", str), "memoryApiUrl": ("memory_api_url", str),
    "memoryModelUrl": ("memory_model_url", str), "assumeGated": ("assume_gated", bool),
    "namespace": ("namespace", str)}
"""Suite field -> (Options field, type)."""
TEST_FIELDS: Final = frozenset({"name", "setup", "object", "operation", "assumeGated", "expect"})
EXPECT_FIELDS: Final = frozenset({"deny", "path"})
ALLOW: Final = "allow"


class Unusable(Exception):
    """Input no test can run on; the message is one content-free line."""


@dataclass(frozen=True)
class Expectation:
    """Admitted (``code`` None), or refused with exactly one denial of ``code`` (at ``path``
    when given)."""

    code: AdmissionCode | None = None
    path: str | None = None

    def met_by(self, denials: Sequence[Denial]) -> bool:
        if self.code is None:
            return not denials
        return len(denials) == 1 and denials[0].code == self.code \
            and self.path in (None, denials[0].path)

    def __str__(self) -> str:
        if self.code is None:
            return ALLOW
        return f"deny {self.code.value}" + (f" at {self.path}" if self.path else "")


@dataclass(frozen=True)
class Case:
    name: str
    obj: Mapping[str, Any]
    setup: Setup
    operation: str
    options: Options
    expect: Expectation


def got(denials: Sequence[Denial]) -> str:
    """The verdict as codes and paths (a header name is left out)."""
    return "deny " + "; ".join(f"{d.code.value} at {d.path}" for d in denials) if denials \
        else ALLOW


# -- reading a suite ---------------------------------------------------------------------------


def documents(path: Path) -> list[Any]:
    """The YAML documents of a file (empty ones dropped), read as every tool reads them."""
    try:
        return yaml_documents(path, "file")
    except InputError as exc:
        raise Unusable(str(exc)) from None


def _fields(node: Any, where: str, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        raise Unusable(f"{where}: not a mapping")
    unknown = sorted(str(key) for key in node if key not in allowed)
    if unknown:
        raise Unusable(f"{where}: unknown field {unknown[0]!r}")
    return node


def _typed(node: Mapping[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    value = node.get(key, default)
    if not isinstance(value, kind):
        raise Unusable(f"{where}.{key}: not a {kind.__name__}")
    return value


def options_of(node: Any, where: str) -> Options:
    settings = _fields(node if node is not None else {}, where, frozenset(SETTINGS))
    values = {field: _typed(settings, key, kind, getattr(Options(), field), where)
              for key, (field, kind) in SETTINGS.items()}
    return Options(**values)


def _objects(entry: Any, base: Path, where: str) -> list[Any]:
    """A setup entry: a file (relative to the suite) or one inline object."""
    if isinstance(entry, str):
        return documents(base / entry)
    if isinstance(entry, Mapping):
        return [entry]
    raise Unusable(f"{where}: neither a file name nor an object")


def setup_objects(entries: Any, base: Path, where: str) -> list[Any]:
    if not isinstance(entries, list):
        raise Unusable(f"{where}: not a list")
    found = []
    for index, entry in enumerate(entries):
        for position, obj in enumerate(_objects(entry, base, f"{where}[{index}]")):
            source = base / entry if isinstance(entry, str) else f"{where}[{index}]"
            try:
                found.append(check_setup_object(obj))
            except UnusableObject as exc:
                raise Unusable(f"{source}: document {position + 1}: {exc}") from None
    return found


def object_of(entry: Any, base: Path, where: str) -> Mapping[str, Any]:
    """The object under test: a file holding one document, or inline."""
    docs = _objects(entry, base, where)
    source = str(base / entry) if isinstance(entry, str) else where
    if len(docs) != 1:
        raise Unusable(f"{source}: holds {len(docs)} documents, a test's object is one")
    try:
        route_of(docs[0])
    except UnusableObject as exc:
        raise Unusable(f"{source}: {exc}") from None
    obj: Mapping[str, Any] = docs[0]
    return obj


def expectation_of(node: Any, where: str) -> Expectation:
    if node == ALLOW:
        return Expectation()
    if not isinstance(node, Mapping):
        raise Unusable(f"{where}: neither {ALLOW} nor a mapping with deny (and path)")
    expect = _fields(node, where, EXPECT_FIELDS)
    try:
        code = AdmissionCode(str(expect.get("deny")))
    except ValueError:
        raise Unusable(f"{where}.deny: not an admission code (or expect: {ALLOW})") from None
    return Expectation(code, _typed(expect, "path", str, "", where) or None)


def name_of(node: Mapping[str, Any], index: int, where: str) -> str:
    name = _typed(node, "name", str, f"tests[{index}]", where)
    if not name or not name.isprintable():
        raise Unusable(f"{where}.name: empty or not one printable line")
    return str(name)


def case_of(node: Any, index: int, suite: Path, common: list[Any], options: Options) -> Case:
    where = f"{suite}: tests[{index}]"
    test = _fields(node, where, TEST_FIELDS)
    if "object" not in test or "expect" not in test:
        raise Unusable(f"{where}: needs an object and an expect")
    gated = _typed(test, "assumeGated", bool, options.assume_gated, where)
    mine = replace(options, assume_gated=gated)
    objects = common + setup_objects(test.get("setup", []), suite.parent, f"{where}.setup")
    operation = _typed(test, "operation", str, "CREATE", where)
    return Case(name_of(test, index, where), object_of(test["object"], suite.parent, where),
                Setup.of(objects, options.namespace), operation, mine,
                expectation_of(test["expect"], f"{where}.expect"))


def load_suite(path: Path) -> list[Case]:
    docs = documents(path)
    if len(docs) != 1:
        raise Unusable(f"{path}: holds {len(docs)} documents, a suite is one")
    suite = _fields(docs[0], str(path), SUITE_FIELDS)
    options = options_of(suite.get("settings"), f"{path}: settings")
    common = setup_objects(suite.get("setup", []), path.parent, f"{path}: setup")
    tests = suite.get("tests")
    if not isinstance(tests, list) or not tests:
        raise Unusable(f"{path}: tests: not a non-empty list")
    cases = [case_of(test, index, path, common, options) for index, test in enumerate(tests)]
    names = [case.name for case in cases]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise Unusable(f"{path}: two tests are named {twice[0]}")
    return cases


# -- running -------------------------------------------------------------------------------------


def verdict(suite: Path, case: Case) -> list[Denial]:
    try:
        return evaluate(case.obj, case.setup, case.options, case.operation)
    except UnusableObject as exc:
        raise Unusable(f"{suite}: test {case.name}: {exc}") from None


def line(label: str, case: Case, denials: Sequence[Denial]) -> str:
    status = "PASS" if case.expect.met_by(denials) else "FAIL"
    return f"{status} {label}{case.name}: expected {case.expect}, got {got(denials)}"


def run(paths: Sequence[Path]) -> int:
    """Every test of every suite; nothing is printed to stdout until all could be decided."""
    suites = [(path, load_suite(path)) for path in paths]
    results = [(f"{path}: " if len(paths) > 1 else "", case, verdict(path, case))
               for path, cases in suites for case in cases]
    failed = sum(not case.expect.met_by(denials) for _, case, denials in results)
    for label, case, denials in results:
        print(line(label, case, denials))
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def run_policy_test(args: argparse.Namespace) -> int:
    try:
        return run(args.suite)
    except Unusable as exc:
        print(f"fgentic-governance test: {exc}", file=sys.stderr)
        return 2
