"""``fgentic-dev pgvector --self-test`` (hack/bootstrap.sh): the portable pgvector installed, then
the self-test, each in one line; a failure is one ``error:`` line and exit status 1. The build
and the server are stood in for here; tests/integration/test_postgres_portable.py runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fgentic_devenv import StartupError, cli, selftest

LIBRARY = Path("/pginstall/lib/postgresql/vector.so")


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    done: list[str] = []

    def install(pginstall: Path) -> Path:
        done.append("install")
        return LIBRARY

    def self_test() -> str:
        done.append("self-test")
        return "PostgreSQL self-test passed"

    monkeypatch.setattr(selftest, "wheel_install", lambda: Path("/pginstall"))
    monkeypatch.setattr(selftest.pgvector, "install", install)
    monkeypatch.setattr(selftest, "self_test", self_test)
    return done


def test_the_command_installs_then_runs_the_self_test(
        steps: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["pgvector", "--self-test"]) == 0
    assert steps == ["install", "self-test"]
    assert capsys.readouterr().out.splitlines() == [
        f"pgvector {selftest.pgvector.VERSION} (portable build) at {LIBRARY}",
        "PostgreSQL self-test passed"]


def test_without_the_flag_it_only_installs(steps: list[str]) -> None:
    assert cli.main(["pgvector"]) == 0
    assert steps == ["install"]


def test_a_failure_is_one_error_line(steps: list[str], monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    def crashed() -> str:
        raise StartupError("the embedded PostgreSQL failed to insert vectors")

    monkeypatch.setattr(selftest, "self_test", crashed)
    assert cli.main(["pgvector", "--self-test"]) == 1
    assert capsys.readouterr().err == "error: the embedded PostgreSQL failed to insert vectors\n"
