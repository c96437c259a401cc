"""The atheris harnesses in fuzz/ start, fuzz a fixed number of inputs and find nothing.

A short smoke run per harness (the long runs and their figures are in docs/reliability.md).
Crash artifacts, if any, go to a temporary directory, never into the checkout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = 3000


@pytest.mark.parametrize("harness", ["fuzz_projection", "fuzz_models", "fuzz_policy"])
def test_harness_runs_clean(harness: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / f"{harness}.py"), f"-runs={RUNS}", "-seed=7",
         f"-artifact_prefix={tmp_path}/"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    # Only the tail: a finding's traceback names code locations, not input.
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Done {RUNS} runs" in result.stderr
    assert not list(tmp_path.glob("crash-*"))
