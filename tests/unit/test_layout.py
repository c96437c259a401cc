"""The layout of the test code, read from source (nothing here imports what it checks).

* A module under tests/ imports helpers only from the ``tests.support`` package and gets its
  fixtures from conftest.py files; it never imports a test module or another helper module,
  and every helper module lives in tests/support/.
* benchmarks/ and fuzz/ import our packages, ``tests.support``, their own modules, the standard
  library and installed third-party packages: never a test module.
* Each helper has one home: no function or class is defined twice in tests/support, and a
  name one support module imports from another is imported from its home, not through it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

# Not tests.support's ROOT: this check must still report when that package does not import.
REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SUPPORT = TESTS / "support"
SUPPORT_MODULE = "tests.support"
OUR_PACKAGES = {"fgentic_governance", "fgentic_devenv"}
# A `python -m tests.x.y` target, or any other module path written as a string.
MODULE_STRING = re.compile(r"tests(\.[A-Za-z_]\w*)+")


def _sources(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_support(module: str) -> bool:
    return module == SUPPORT_MODULE or module.startswith(SUPPORT_MODULE + ".")


def _is_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def _imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import anywhere in the file; names are
    empty for a plain ``import x``. Relative imports are resolved against the file's package."""
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module, [alias.name for alias in node.names]


def _targets(module: str, names: list[str]) -> list[str]:
    """The modules an import reaches: ``from package import a`` may import ``package.a``."""
    if names and (REPO / module.replace(".", "/")).is_dir():
        return [f"{module}.{name}" for name in names]
    return [module]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def test_tests_import_helpers_only_from_tests_support() -> None:
    offenders = []
    for path in _sources(TESTS):
        rel = path.relative_to(TESTS)
        if rel.parts[0] != "support" and not (
                path.name.startswith("test_") or path.name in {"conftest.py", "__init__.py"}):
            offenders.append(f"{path.relative_to(REPO)}: a helper module outside tests/support "
                             "(move it into the tests.support package)")
        for line, module, names in _imports(path):
            if _is_tests(module):
                offenders += [f"{_where(path, line)}: imports {target}"
                              for target in _targets(module, names) if not _is_support(target)]
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and MODULE_STRING.fullmatch(node.value) and not _is_support(node.value)):
                offenders.append(f"{_where(path, node.lineno)}: names the module {node.value}")
    assert not offenders, (
        "tests must import helpers from tests.support and fixtures through conftest.py, never "
        "a test module or a helper outside tests/support:\n" + "\n".join(offenders))


def _third_party() -> set[str]:
    return set(importlib.metadata.packages_distributions())


def test_benchmarks_and_fuzz_import_no_test_module() -> None:
    allowed_top = set(sys.stdlib_module_names) | OUR_PACKAGES | _third_party()
    offenders = []
    for directory in (REPO / "benchmarks", REPO / "fuzz"):
        local = {p.stem for p in directory.glob("*.py")} | {directory.name}
        for path in _sources(directory):
            for line, module, names in _imports(path):
                if _is_tests(module):
                    offenders += [f"{_where(path, line)}: imports {target}"
                                  for target in _targets(module, names)
                                  if not _is_support(target)]
                elif module.split(".")[0] not in allowed_top | local:
                    offenders.append(f"{_where(path, line)}: imports {module}, which is not "
                                     "ours, tests.support, local, stdlib or installed")
    assert not offenders, (
        "benchmarks/ and fuzz/ may import fgentic_governance, fgentic_devenv, tests.support, "
        "their own modules, the standard library and installed packages only:\n"
        + "\n".join(offenders))


def _top_level_definitions(path: Path) -> dict[str, int]:
    """Functions and classes defined at the top of the module, by name, with their line."""
    tree = ast.parse(path.read_text(), str(path))
    return {node.name: node.lineno for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def test_every_support_helper_has_one_home() -> None:
    assert (SUPPORT / "__init__.py").is_file(), "tests/support/ must be a package"
    homes: dict[str, list[str]] = defaultdict(list)
    for path in _sources(SUPPORT):
        for name, line in _top_level_definitions(path).items():
            homes[name].append(_where(path, line))
    offenders = [f"{name}: defined at {', '.join(places)}"
                 for name, places in sorted(homes.items()) if len(places) > 1]
    # A support module that imports a helper from another does not pass it on.
    passed_on: dict[str, dict[str, str]] = defaultdict(dict)
    for path in _sources(SUPPORT):
        for _, module, names in _imports(path):
            if _is_support(module) and module != _module_name(path):
                for name in names:
                    passed_on[_module_name(path)][name] = module
    if (SUPPORT / "__init__.py").is_file():
        offenders += [f"{_where(SUPPORT / '__init__.py', line)}: the package re-exports "
                      f"{module} (import helpers from their own module)"
                      for line, module, _ in _imports(SUPPORT / "__init__.py")
                      if module != "__future__"]
    for path in [*_sources(TESTS), *_sources(REPO / "benchmarks"), *_sources(REPO / "fuzz")]:
        for line, module, names in _imports(path):
            offenders += [f"{_where(path, line)}: imports {name} from {module}, its home is "
                          f"{passed_on[module][name]}" for name in names
                          if name in passed_on.get(module, {})]
    assert not offenders, (
        "each helper is defined once in tests/support and imported from that module:\n"
        + "\n".join(offenders))
