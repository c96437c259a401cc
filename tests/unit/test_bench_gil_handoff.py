"""benchmarks/bench_gil_handoff runs and prints its three rows (its figures are not asserted)."""

from __future__ import annotations

import sys

import pytest
from benchmarks import bench_gil_handoff


def test_the_gil_handoff_benchmark_runs_and_restores_the_interval(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.getswitchinterval()
    assert bench_gil_handoff.main(["--trips", "20"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("round trip ")]
    assert [row.split(":")[0] for row in rows] == [
        "round trip alone",
        "round trip beside a busy thread, switch 5 ms (CPython's default)",
        "round trip beside a busy thread, switch 1 ms (the operator's)"]
    assert all("20 trips" in row for row in rows)
    assert sys.getswitchinterval() == before
