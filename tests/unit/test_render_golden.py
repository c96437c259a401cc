"""Golden files of the RetrievalBinding renderer: any change to the rendered objects shows up
as a reviewable diff under tests/golden/.

Regenerate after an intended change with:

    FGENTIC_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_render_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.render import rendered

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("FGENTIC_UPDATE_GOLDEN") == "1"
CASES: dict[str, dict[str, Any]] = {
    "retrievalbinding-example": {},
    "retrievalbinding-local-only": {"publicRoute": None},
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("form", ["kubernetes", "standalone"])
def test_rendering_matches_the_golden_file(case: str, form: str) -> None:
    r = rendered(**CASES[case])
    text = r.kubernetes_yaml() if form == "kubernetes" else r.standalone_yaml()
    path = GOLDEN / f"{case}.{form}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with FGENTIC_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; review, then FGENTIC_UPDATE_GOLDEN=1"
