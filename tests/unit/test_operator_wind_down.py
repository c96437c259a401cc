"""The operator's Kopf cleanup leaves no task pending: Kopf waits 5 s for any task still
pending after its cleanup before the process may exit (kopf/_core/reactor/running.py)."""

from __future__ import annotations

import asyncio
import signal

from kopf._core.reactor import running

from fgentic_governance.controller import main
from fgentic_governance.controller.context import OperatorContext
from tests.support.polling import until_async


def _pending() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks()
            if task is not asyncio.current_task() and not task.done()}


async def test_after_a_sigterm_the_cleanup_leaves_no_task_for_kopf_to_wait_for() -> None:
    stop = asyncio.Event()  # the stop flag the operator hands Kopf
    ours = asyncio.create_task(asyncio.sleep(3600), name="sweep")
    # Kopf's own SIGTERM handler stops it, not the flag: its waiter on the flag stays.
    sigterm = asyncio.get_running_loop().create_future()
    sigterm.set_result(signal.SIGTERM)
    await running.stop_flag_checker(sigterm, stop)
    assert "stop-flag waiter" in _pending()

    await main.wind_down(OperatorContext(), [ours], stop)

    # Bounded: a cancelled or woken task needs a turn of the loop to finish.
    assert await until_async(lambda: not _pending(), "no task pending after the cleanup")
