"""The store's SQL layout (docs/memory.md §4): version steps hold no function, view or trigger;
each of those has one file that defines it whole, names what it requires, and applies after
what it requires; the steps 0001-0024 verify as they were shipped."""

from __future__ import annotations

import hashlib
import re

import pytest

from fgentic_governance.memory import schema
from fgentic_governance.memory.schema import ObjectFile, migrations, object_files
from tests.support.store import shipped_v24

_DEFINES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|VIEW|TRIGGER)\s+"
                      r"(?:fgentic_memory\.)?(\w+)", re.IGNORECASE)
_CALLS = re.compile(r"fgentic_memory\.(\w+)\s*\(")
_KIND = {"FUNCTION": "functions", "VIEW": "views", "TRIGGER": "triggers"}


def test_no_version_step_defines_a_function_view_or_trigger() -> None:
    for step in migrations():
        assert not _DEFINES.search(step.sql), step.name


def test_each_object_file_defines_its_one_object_and_its_grants() -> None:
    for item in object_files():
        kind, name = item.name.split("/")
        assert [(_KIND[k.upper()], n) for k, n in _DEFINES.findall(item.sql)] == [(kind, name)]
        if kind == "triggers":
            assert f"DROP TRIGGER IF EXISTS {name} ON " in item.sql, item.name
        else:
            # Every privilege is restated, so re-applying the file sets exactly these.
            assert re.search(rf"REVOKE ALL ON (FUNCTION|TABLE) fgentic_memory\.{name}\b"
                             r"[^;]*FROM PUBLIC, fgentic_memory_runtime, "
                             r"fgentic_memory_delegate;", item.sql), item.name


def test_object_files_name_what_they_call_and_apply_after_it() -> None:
    functions = {f.name.removeprefix("functions/") for f in object_files()
                 if f.name.startswith("functions/")}
    seen: set[str] = set()
    for item in object_files():
        called = {f"functions/{n}" for n in _CALLS.findall(item.sql)
                  if n in functions} - {item.name}
        assert called == set(item.requires), item.name
        assert set(item.requires) <= seen, item.name
        seen.add(item.name)


def _file(name: str, *requires: str) -> ObjectFile:
    return ObjectFile(name, "", "", requires)


def test_the_order_is_by_requirement_then_by_name() -> None:
    files = {f.name: f for f in (_file("views/v", "functions/b"), _file("functions/b"),
                                 _file("functions/a"), _file("triggers/t", "functions/a"))}
    assert schema._ordered(files) == ["functions/a", "functions/b", "triggers/t", "views/v"]


@pytest.mark.parametrize("files", [
    (_file("functions/a", "functions/missing"),),
    (_file("functions/a", "functions/b"), _file("functions/b", "functions/a")),
])
def test_unknown_or_circular_requirements_are_refused(files: tuple[ObjectFile, ...]) -> None:
    with pytest.raises(RuntimeError):
        schema._ordered({f.name: f for f in files})


def test_steps_0001_to_0024_verify_as_they_were_shipped() -> None:
    """sql/shipped.sha256 is the checksum of each step as shipped, so an install that applied
    those files still verifies now that their restated functions moved out."""
    shipped = shipped_v24()
    steps = {m.name: m for m in migrations()}
    assert set(shipped) == {name for name in steps if name < "0025"}
    for name, text in shipped.items():
        assert steps[name].verifies(hashlib.sha256(text.encode()).hexdigest()), name
        assert not steps[name].verifies("0" * 64)
