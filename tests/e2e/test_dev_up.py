"""The main job end to end: `fgentic-dev up` on this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_dev_up_runs_the_demo_and_prints_content_free_status(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fgentic_devenv.cli", "up", "--workdir",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "memoryscope.governance.fgentic.dev/alice-docs-agent created" in out
    assert "denied as expected: agent-propagates-authorization.yaml" in out
    assert "FORBIDDEN_HEADER" in out
    status, _, demo = out.split("content-free status of every governance object:")[1].partition(
        "-- governed memory in kagent's path")
    lines = [line for line in status.splitlines() if line.strip()]
    kinds = sorted(line.split()[0] for line in lines)
    assert kinds == ["ConsentRecord", "MemoryScope", "PrincipalOffboarding", "RetrievalBinding"]
    # Content-free: no MXID, room or purpose text in the status lines.
    for secret in ("@alice", "@bob", "!alice-control", "personal-preferences"):
        assert secret not in status
    # The memory API: an unconsented save refused, a consented one outside a lease refused,
    # inside a lease stored and found; only the consenting subject has a row.
    assert "save for bob (no consent):            403 {'error': 'LEASE_MISSING'}" in demo
    assert "save for alice (consent and lease):   201 ['id']" in demo
    assert "search for alice:                     200 1 fact(s)" in demo
    assert "stored rows: alice 1, bob 0" in demo
    assert "prefers" not in demo  # no fact text printed
    # Retrieval: the demo corpus through the real gateway's MCP route to the real server; the
    # prefilter answers Alice with her public chunks only (not Bob's, not the restricted one),
    # nearest first, and a search without a projection never reaches the server.
    retrieval = out.split("-- permission-aware retrieval")[1]
    assert "corpus: 4 chunks loaded, 0 rows refused of 4" in retrieval
    assert ("search with Alice's projection:   200, chunks 1 (handbook/retention.md), "
            "2 (handbook/keys.md)") in retrieval
    assert "search without a projection:      403 (refused by the gateway)" in retrieval
    assert "thirty days" not in retrieval  # ids and sources only, never chunk text
