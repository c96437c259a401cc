"""`fgentic-governance test PATH [...]`: offline admission policy tests, for GitOps.

A PATH is a suite (docs/policy-testing.md: the webhook's settings, the setup objects and, per
test, an object, an operation and the expected verdict), a manifest file (one or many YAML
documents, ``kind: List`` too) or a directory (every ``*.yaml``/``*.yml`` below it, each a
suite or manifests; the files a suite names are not read again as manifests). Every object of
a kind the webhook reviews in the manifests is judged as a CREATE with all the other manifest
objects as its setup (so a rule that reads another object finds it there), and passes when
admitted; a suite's tests pass when the verdict is the expected one. Each verdict is the
webhook's own (``admission.offline``).

Output (``--output``): ``text``, one line per test and a summary, a failing line with what to
change (``guidance.fix``); ``json``; ``junit`` (JUnit XML). Codes, paths, test names, files and
kinds only, never a value from an object. Exit 0 when every test passes, 1 when one fails, 2
when the input cannot be used (then one line on stderr, nothing on stdout, no test runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from xml.etree import ElementTree

from fgentic_governance.admission.guidance import GUIDANCE, fix
from fgentic_governance.admission.offline import (
    Options,
    Setup,
    UnusableObject,
    check_setup_object,
    evaluate,
    route_of,
)
from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.api import appservice
from fgentic_governance.api.appservice import RegistryError, parse_registry
from fgentic_governance.cli.errors import InputError
from fgentic_governance.cli.inputs import yaml_documents

SUITE_FIELDS: Final = frozenset({"settings", "setup", "tests"})
SETTINGS: Final[Mapping[str, tuple[str, type]]] = {
    "localHomeserver": ("local_homeserver", str), "memoryApiUrl": ("memory_api_url", str),
    "memoryModelUrl": ("memory_model_url", str), "assumeGated": ("assume_gated", bool),
    "namespace": ("namespace", str), "appserviceNamespaces": ("appservice", list)}
"""Suite field -> (Options field, type)."""
TEST_FIELDS: Final = frozenset({"name", "setup", "object", "operation", "assumeGated", "expect"})
EXPECT_FIELDS: Final = frozenset({"deny", "path"})
ALLOW: Final = "allow"
OUTPUTS: Final = ("text", "json", "junit")
MANIFEST_SUFFIXES: Final = (".yaml", ".yml")
MANIFESTS: Final = "manifests"
"""The group (JUnit testsuite) of every manifest object."""


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


@dataclass(frozen=True)
class Result:
    """One decided test: of a suite (``group`` its file) or a manifest object (``group``
    MANIFESTS, ``name`` its file, document and kind)."""

    group: str
    name: str
    expect: Expectation
    denials: list[Denial] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.expect.met_by(self.denials)

    def failure(self) -> str:
        """What a failing test got, each denial with what to change."""
        return "deny " + "; ".join(fix(d) for d in self.denials) if self.denials else ALLOW


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
              for key, (field, kind) in SETTINGS.items() if kind is not list}
    namespaces = _typed(settings, "appserviceNamespaces", list, [], where)
    try:  # the webhook's --appservice-namespaces, in the suite's YAML
        values["appservice"] = parse_registry(json.dumps(namespaces))
    except RegistryError as exc:
        raise Unusable(f"{where}.appserviceNamespaces: {exc}") from None
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


# -- paths: suites, manifests, directories -------------------------------------------------------


def is_suite(docs: Sequence[Any]) -> bool:
    """One mapping that is not an object (no apiVersion, no kind)."""
    return len(docs) == 1 and isinstance(docs[0], Mapping) \
        and "apiVersion" not in docs[0] and "kind" not in docs[0]


def _files(path: Path) -> list[Path]:
    """A file, or a directory's YAML files in path order."""
    if not path.is_dir():
        return [path]
    found = sorted(f for f in path.rglob("*") if f.suffix in MANIFEST_SUFFIXES and f.is_file())
    if not found:
        raise Unusable(f"{path}: a directory without a *.yaml or *.yml file")
    return found


def named_files(suite: Path, docs: Sequence[Any]) -> set[Path]:
    """The files a suite names (setup and object files), resolved."""
    node = docs[0]
    entries = [*_listed(node, "setup")]
    for test in _listed(node, "tests"):
        if isinstance(test, Mapping):
            entries += [*_listed(test, "setup"), test.get("object")]
    return {(suite.parent / entry).resolve() for entry in entries if isinstance(entry, str)}


def _listed(node: Mapping[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Inputs:
    suites: list[Path]
    manifests: list[tuple[Path, list[Any]]]


def classify(paths: Sequence[Path]) -> Inputs:
    """Suites and manifest files, in the order given; a directory's files that one of its
    suites names are that suite's, not manifests."""
    suites: list[Path] = []
    manifests: list[tuple[Path, list[Any]]] = []
    walked: list[tuple[Path, list[Any]]] = []
    for path in paths:
        for file in _files(path):
            docs = documents(file)
            if is_suite(docs):
                suites.append(file)
            elif file == path:
                manifests.append((file, docs))
            else:
                walked.append((file, docs))
    named = set().union(*(named_files(s, documents(s)) for s in suites))
    manifests += [(f, docs) for f, docs in walked if f.resolve() not in named]
    return Inputs(suites, manifests)


def manifest_objects(file: Path, docs: Sequence[Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(``FILE#N``, object) of every document; a ``kind: List``'s items as ``FILE#N.items[i]``."""
    for position, doc in enumerate(docs, 1):
        where = f"{file}#{position}"
        if isinstance(doc, Mapping) and doc.get("kind") == "List" \
                and isinstance(doc.get("items"), list):
            for index, item in enumerate(doc["items"]):
                yield f"{where}.items[{index}]", _checked(f"{where}.items[{index}]", item)
        else:
            yield where, _checked(where, doc)


def _checked(where: str, obj: Any) -> Mapping[str, Any]:
    try:
        return check_setup_object(obj)
    except UnusableObject as exc:
        raise Unusable(f"{where}: {exc}") from None


def manifest_results(manifests: Sequence[tuple[Path, list[Any]]], options: Options
                     ) -> tuple[list[Result], int]:
    """Every reviewed object judged as a CREATE among all the others; (results, how many
    objects are of kinds the webhook does not review)."""
    objects = [found for file, docs in manifests for found in manifest_objects(file, docs)]
    results, unreviewed = [], 0
    for where, obj in objects:
        try:
            route_of(obj)
        except UnusableObject:
            unreviewed += 1
            continue
        setup = Setup.of([other for _, other in objects if other is not obj], options.namespace)
        try:
            denials = evaluate(obj, setup, options)
        except UnusableObject as exc:
            raise Unusable(f"{where}: {exc}") from None
        results.append(Result(MANIFESTS, f"{where} {obj['kind']}", Expectation(), denials))
    return results, unreviewed


# -- output ---------------------------------------------------------------------------------------


def line(label: str, result: Result) -> str:
    status = "PASS" if result.passed else "FAIL"
    verdict = got(result.denials) if result.passed else result.failure()
    return f"{status} {label}{result.name}: expected {result.expect}, got {verdict}"


def summary(results: Sequence[Result], unreviewed: int) -> str:
    failed = sum(not r.passed for r in results)
    text = f"{len(results) - failed} passed, {failed} failed"
    return text + (f", {unreviewed} not reviewed (kinds the webhook does not review)"
                   if unreviewed else "")


def as_text(results: Sequence[Result], unreviewed: int) -> str:
    labelled = len({r.group for r in results if r.group != MANIFESTS}) > 1 or (
        any(r.group == MANIFESTS for r in results) and any(r.group != MANIFESTS
                                                           for r in results))
    lines = [line(f"{r.group}: " if labelled and r.group != MANIFESTS else "", r)
             for r in results]
    return "\n".join([*lines, summary(results, unreviewed)]) + "\n"


def _denial(denial: Denial) -> dict[str, str]:
    return {"code": denial.code.value, "path": denial.path, "fix": GUIDANCE[denial.code]}


def as_json(results: Sequence[Result], unreviewed: int) -> str:
    failed = sum(not r.passed for r in results)
    document = {
        "results": [{"group": r.group, "name": r.name, "passed": r.passed,
                     "expected": str(r.expect), "got": got(r.denials),
                     "denials": [_denial(d) for d in r.denials]} for r in results],
        "summary": {"passed": len(results) - failed, "failed": failed,
                    "notReviewed": unreviewed}}
    return json.dumps(document, indent=2) + "\n"


def as_junit(results: Sequence[Result], unreviewed: int) -> str:
    """JUnit XML: a testsuite per suite file (and one for the manifests), a testcase per test,
    a failure with the expected and the got verdict and, per denial, what to change."""
    failed = sum(not r.passed for r in results)
    root = ElementTree.Element("testsuites", name="fgentic-governance test",
                               tests=str(len(results)), failures=str(failed), errors="0",
                               skipped=str(unreviewed))
    groups = list(dict.fromkeys(r.group for r in results))
    for group in groups:
        mine = [r for r in results if r.group == group]
        suite = ElementTree.SubElement(root, "testsuite", name=group, tests=str(len(mine)),
                                       failures=str(sum(not r.passed for r in mine)),
                                       errors="0", skipped="0")
        for result in mine:
            case = ElementTree.SubElement(suite, "testcase", classname=group, name=result.name)
            if not result.passed:
                failure = ElementTree.SubElement(
                    case, "failure", type="AdmissionVerdict",
                    message=f"expected {result.expect}, got {got(result.denials)}")
                failure.text = "\n".join(fix(d) for d in result.denials) or \
                    f"admitted, expected {result.expect}"
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


RENDER: Final = {"text": as_text, "json": as_json, "junit": as_junit}


# -- running -------------------------------------------------------------------------------------


def run(paths: Sequence[Path], output: str = "text", options: Options | None = None) -> int:
    """Every test of every suite and every manifest object; nothing is printed to stdout
    until all could be decided."""
    inputs = classify(paths)
    suites = [(path, load_suite(path)) for path in inputs.suites]
    results = [Result(str(path), case.name, case.expect, verdict(path, case))
               for path, cases in suites for case in cases]
    judged, unreviewed = manifest_results(inputs.manifests, options or Options())
    results += judged
    sys.stdout.write(RENDER[output](results, unreviewed))
    return 1 if any(not r.passed for r in results) else 0


def options_from(args: argparse.Namespace) -> Options:
    """The webhook's settings for manifests, from the flags (a suite names its own)."""
    return Options(local_homeserver=args.local_homeserver,
                   appservice=args.appservice_namespaces, memory_api_url=args.memory_api_url,
                   memory_model_url=args.memory_model_url, assume_gated=args.assume_gated,
                   namespace=args.namespace)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a suite, a manifest file (one or many documents) or a directory")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                        help="text (default), json or junit (JUnit XML), on stdout")
    manifests = parser.add_argument_group("the webhook's settings for manifests (a suite names "
                                          "its own)")
    manifests.add_argument("--local-homeserver", default="", help="as the webhook's flag")
    appservice.add_flag(manifests)
    manifests.add_argument("--memory-api-url", default="",
                           help="as the webhook's flag; empty: memory-enabled Agents are "
                                "refused")
    manifests.add_argument("--memory-model-url", default="",
                           help="as the webhook's flag; empty: ModelConfigs are not checked")
    manifests.add_argument("--assume-gated", action=argparse.BooleanOptionalAction,
                           default=True, help="MemoryScopes have the operator's gates "
                                              "(default; --no-assume-gated reads their status)")
    manifests.add_argument("--namespace", default="default",
                           help="for objects that name none (default: default)")


def run_policy_test(args: argparse.Namespace) -> int:
    try:
        return run(args.paths, args.output, options_from(args))
    except Unusable as exc:
        print(f"fgentic-governance test: {exc}", file=sys.stderr)
        return 2
