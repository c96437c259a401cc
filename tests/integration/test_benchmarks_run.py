"""The memory benchmarks still run against the current schema (smallest sizes; nothing about
their figures is asserted: performance is shown by running them, docs/performance.md).

Both broke silently once when the store gained a bound (a claim before every insert, the
per-lease recall and cadence bounds); this catches the next one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.objects import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("argv", [
    ["benchmarks.bench_memory", "--skip-operator", "--erase-rounds", "1", "--inserts", "50"],
    ["benchmarks.bench_memory_api", "--rounds", "1", "--subjects", "2", "--saves", "32",
     "--clients", "2"],
], ids=["bench_memory", "bench_memory_api"])
def test_the_memory_benchmarks_run(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== summary (figures only; nothing is asserted)" in done.stdout
