"""The layout of the test code, read from source (nothing here imports what it checks).

* A module under tests/ imports helpers only from the ``tests.support`` package and gets its
  fixtures from conftest.py files; it never imports a test module or another helper module,
  and every helper module lives in tests/support/.
* benchmarks/ and fuzz/ import our packages, ``tests.support``, their own modules, the standard
  library and installed third-party packages: never a test module.
* Each helper has one home: no function or class is defined twice in tests/support, and a
  name one support module imports from another is imported from its home, not through it.
* One way to wait: no module of tests/ (nor a benchmark that uses tests.support) writes its
  own polling loop; every wait calls ``until``/``until_async`` of tests/support/polling.py.
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


POLLING_HOME = SUPPORT / "polling.py"
CLOCKS = {"monotonic", "time", "perf_counter"}  # time.monotonic(), time.time(), loop.time()
WAITERS = {"until", "until_async"}


def _calls(node: ast.AST) -> set[str]:
    """The names called anywhere inside ``node`` (``a.b.c()`` counts as ``c``)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name != "sleep" or not _yields_only(call):
                names.add(name)
    return names


def _yields_only(sleep: ast.Call) -> bool:
    """``asyncio.sleep(0)``: a yield to the loop, no wait."""
    return (len(sleep.args) == 1 and isinstance(sleep.args[0], ast.Constant)
            and sleep.args[0].value == 0)


def _leaves_early(loop: ast.For | ast.AsyncFor) -> bool:
    return any(isinstance(node, ast.Break | ast.Return) for node in ast.walk(loop))


def hand_written_waits(source: str) -> list[int]:
    """Lines of the polling loops in ``source``: a ``while`` whose test or body reads a clock
    and sleeps (a deadline loop), or a ``for`` over ``range`` that sleeps and leaves early (a
    count-bounded poll). A loop that calls the one helper only repeats a bounded wait."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.While | ast.For | ast.AsyncFor) and _polls(node)]


def _polls(loop: ast.While | ast.For | ast.AsyncFor) -> bool:
    called = _calls(loop)
    if "sleep" not in called or called & WAITERS:
        return False
    if isinstance(loop, ast.While):
        return bool(called & CLOCKS)
    counted = isinstance(loop.iter, ast.Call) and getattr(loop.iter.func, "id", "") == "range"
    return counted and _leaves_early(loop)


def _waiting_modules() -> list[Path]:
    """Every module of tests/, and the benchmarks that use tests.support."""
    benchmarks = [path for path in _sources(REPO / "benchmarks")
                  if any(_is_support(module) for _, module, _ in _imports(path))]
    return [*_sources(TESTS), *benchmarks]


def test_every_wait_goes_through_the_one_polling_helper() -> None:
    assert POLLING_HOME.is_file(), "tests/support/polling.py is the home of every wait"
    offenders = [_where(path, line) for path in _waiting_modules()
                 if path != POLLING_HOME
                 for line in hand_written_waits(path.read_text())]
    assert not offenders, (
        "a hand-written polling loop (a deadline or a count with a sleep): wait with "
        "tests.support.polling.until or until_async instead, which bounds the wait and says "
        "what it waited for and what it last saw:\n" + "\n".join(offenders))


SAMPLE = """\
import asyncio, time

def deadline_loop(check):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)

async def silent_fall_through(check):
    deadline = asyncio.get_running_loop().time() + 10
    while not check() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)

async def count_bounded(check):
    for _ in range(50):
        if check():
            break
        await asyncio.sleep(0.2)

async def yields(n):
    for _ in range(n):
        await asyncio.sleep(0)

def samples(check):
    for _ in range(5):
        assert check()
        time.sleep(0.5)

async def retries(attempt):
    for _ in range(3):
        await asyncio.sleep(1.0)
        try:
            return await until_async(attempt, "an attempt", 10)
        except AssertionError:
            continue

def timed(work):
    started = time.monotonic()
    while work():
        pass
    return time.monotonic() - started
"""


def test_the_wait_rule_finds_deadline_and_count_loops_only() -> None:
    """The rule itself: the three polls of the sample are found (by line); yields, a sampling
    loop, a loop around the helper and a timed loop without a sleep are not."""
    assert hand_written_waits(SAMPLE) == [5, 12, 16]
