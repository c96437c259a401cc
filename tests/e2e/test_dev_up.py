"""The main job end to end: `fgentic-dev up` on this machine."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fgentic_devenv.binaries import binary
from tests.support.polling import until

pytestmark = pytest.mark.e2e
DEV = [sys.executable, "-m", "fgentic_devenv.cli"]


def test_dev_up_runs_the_demo_and_prints_content_free_status(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fgentic_devenv.cli", "up", "--workdir",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "memoryscope.governance.fgentic.dev/alice-docs-agent created" in out
    assert "denied as expected: agent-propagates-authorization.yaml" in out
    assert "denied as expected: posture-floor-purge-while-capturing.yaml" in out
    assert "FORBIDDEN_HEADER" in out
    status, _, demo = out.split("content-free status of every governance object:")[1].partition(
        "-- governed memory in kagent's path")
    lines = [line for line in status.splitlines() if line.strip()]
    kinds = sorted(line.split()[0] for line in lines)
    assert kinds == ["ConsentRecord", "MemoryPostureFloor", "MemoryScope",
                     "PrincipalOffboarding", "RetrievalBinding"]
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
    # Issue 37: it ends with its time and what to do next, and says why one condition is False.
    assert re.search(r"\ndone in \d+ s\.\n", retrieval)
    assert "ModelRouteGoverned=False(MODEL_ROUTE_UNCONFIGURED) above is expected" in retrieval
    assert "hack/up.sh down" in retrieval and "hack/up.sh --hold" in retrieval


def _stat(pid: str) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (field 3), or None for a gone or zombie one."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields


def _children(parent: int) -> set[tuple[str, str]]:
    """(pid, start time) of ``parent``'s live children: every process a run started."""
    found = set()
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None and fields[1] == str(parent):
            found.add((entry.name, fields[19]))
    return found


def _alive(processes: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(pid, start) for pid, start in processes if (_stat(pid) or [""] * 20)[19] == start}


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError):
        return ""


def _naming(run: Path) -> list[str]:
    """Command lines of live processes that name the run's directory."""
    return [line for entry in Path("/proc").iterdir() if entry.name.isdigit()
            and str(run) in (line := _cmdline(entry.name)) and _stat(entry.name) is not None]


def _held(run: Path, out: Path) -> subprocess.Popen[bytes]:
    """`fgentic-dev up --hold` once it holds (the whole demo has passed)."""
    with out.open("wb") as sink:
        proc = subprocess.Popen([*DEV, "up", "--workdir", str(run), "--hold"],
                                stdout=sink, stderr=subprocess.STDOUT)
    until(lambda: "\nrunning; KUBECONFIG=" in out.read_text() or proc.poll() is not None,
          "the held run", 300, interval=1.0)
    assert proc.poll() is None, out.read_text()
    return proc


def test_a_held_run_stops_on_sigterm_and_the_next_one_starts_fresh(tmp_path: Path) -> None:
    """Issue 37 item 7: SIGTERM stops every process of a held run; the next run in the same
    directory after a withdrawal works (its API server objects are as new as its database);
    `down` stops what a run killed outright left, and again finds nothing to stop."""
    run = tmp_path / "run"
    first = _held(run, tmp_path / "first.out")
    started = _children(first.pid)
    assert len(started) >= 9  # etcd, kube-apiserver, PostgreSQL, 3 servers, retrieval's 3
    subprocess.run([str(binary("kubectl")), "--kubeconfig", str(run / "controlplane" /
                    "kubeconfig"), "patch", "consentrecord", "-n", "fgentic-demo",
                    "alice-memory-demo-grant-1", "--type", "merge",
                    "-p", '{"spec":{"decision":"withdrawn"}}'], check=True, timeout=60)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 0
    assert not _alive(started) and not _naming(run)

    second = _held(run, tmp_path / "second.out")
    assert "Traceback" not in (tmp_path / "second.out").read_text()
    started = _children(second.pid)
    data = [line.split(" -D ")[1].split()[0] for pid, _ in started
            if " -D " in (line := _cmdline(pid))]
    assert len(data) == 1 and Path(data[0]).is_dir()  # PostgreSQL's data directory
    second.kill()
    second.wait(timeout=30)
    assert _alive(started) == started  # SIGKILL: nothing could stop them
    down = subprocess.run([*DEV, "down", "--workdir", str(run)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"stopped {len(started)} process(es)" in down.stdout
    assert not _alive(started) and not _naming(run)
    assert not Path(data[0]).exists()
    again = subprocess.run([*DEV, "down", "--workdir", str(run)], capture_output=True,
                           text=True, timeout=60, check=False)
    assert (again.returncode, again.stdout.strip()) == (0, f"nothing to stop in {run}")
