"""The fault-injection hook itself, in real child processes: inert unless armed, exact when
armed, and a misspelt step refuses to start rather than silently never firing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fgentic_devenv import alive
from fgentic_governance.faults import ENV, STEPS
from tests.support.polling import until

pytestmark = pytest.mark.integration


def _run(code: str, armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if armed is not None:
        env[ENV] = armed
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_points_are_inert_unless_armed_at_that_step() -> None:
    calls = "; ".join(f"faults.point({step!r})" for step in sorted(STEPS))
    code = f"from fgentic_governance import faults; {calls}; print('survived')"
    assert _run(code, None).stdout.strip() == "survived"
    first, *others = sorted(STEPS)
    for step in others:
        result = _run(f"from fgentic_governance import faults; faults.point({first!r}); "
                      f"print('survived'); faults.point({step!r}); print('not reached')", step)
        assert result.returncode == -signal.SIGKILL, result
        assert result.stdout.split() == ["survived"]


def test_an_unknown_step_refuses_to_start() -> None:
    result = _run("import fgentic_governance.consent.flow", "withdraw.after_typo")
    assert result.returncode == 1 and "unknown step" in result.stderr


def test_an_armed_point_kills_the_process_it_serves_first() -> None:
    """The erasure process kills the operator with itself: the crash is the whole Pod's."""
    code = ("import subprocess, sys\n"
            "kin = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(kin.pid, flush=True)\n"
            "from fgentic_governance import faults\n"
            "faults.kill_with(kin.pid)\n"
            "faults.point('offboard.after_erase')\n"
            "print('not reached')\n")
    result = _run(code, "offboard.after_erase")
    assert result.returncode == -signal.SIGKILL, result
    kin = int(result.stdout.split()[0])
    until(lambda: not alive(kin), "the killed kin gone", 10)
