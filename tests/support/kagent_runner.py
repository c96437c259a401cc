"""Serve the real kagent Python runtime exactly as ``kagent-adk static`` does, for tests.

Executed by the python of the kagent runtime venv (``hack/kagent-runtime.sh``), never imported
by the test process (our venv has no ``kagent``): ``python -P kagent_runner.py CONFIG_DIR PORT``
(``-P``: this directory holds our ``kagent.py``, which must not shadow the ``kagent`` package).
``CONFIG_DIR`` holds ``config.json`` (an ``AgentConfig``) and ``agent-card.json``, as the
controller mounts them at ``/config``. The environment carries what a Pod's does: ``KAGENT_URL``,
``KAGENT_NAME``, ``KAGENT_NAMESPACE``, ``LOG_LEVEL`` and the model's ``OPENAI_API_KEY``.

The two deviations from a Pod, and why:

* kagent-adk 0.9.11 reads the projected service-account token from the module constant
  ``kagent.adk._token.KAGENT_TOKEN_PATH`` (``/var/run/secrets/tokens/kagent-token``), with no
  environment override, and a test may not write under /var/run. ``read_token()`` looks the
  constant up on every call, so rebinding it here, before the CLI builds the app, points the
  unmodified runtime at ``KAGENT_TEST_TOKEN_PATH``.
* The cyclic garbage collector is off. kagent-adk 0.9.11 makes a new ``AsyncOpenAI`` client
  for every embeddings call (``models/_embedding.py``) and never closes it; a used client is
  always in a reference cycle (its cached resources point back at it), so the cyclic
  collector finalises it together with its open connection's transport. The transport's
  ``__del__`` closes the socket, while openai's ``__del__`` schedules ``aclose()`` for later,
  which then calls ``transport.close()`` with the old file descriptor number: if a new
  connection has meanwhile been given that number, its pending connect is unregistered and
  never completes (the model client waits its 600 s). Seen with this runtime (a turn stuck
  in ``anyio`` ``connect_tcp`` with a cancelled writer handle, after ``__del__`` closed that
  fd; docs/memory.md section 14). It is kagent's defect, not ours, and it depends on when the
  collector happens to run, so the tests take it out rather than fail at random
  (``kagent_client_hazard.py`` reproduces it on demand; a test keeps it checked).

Nothing else is patched; SIGUSR1 dumps the stacks (``RunningAgent.dump_stacks``).
"""

from __future__ import annotations

import gc
import os
import signal
import sys


def _dump_tasks(signum: int, frame: object) -> None:
    """SIGUSR1: every thread's and every asyncio task's stack to stderr (the runtime log), so
    a test whose turn times out can say where the runtime waits. Runs in the main thread,
    which is the event loop's."""
    import asyncio
    import faulthandler

    faulthandler.dump_traceback(all_threads=True)
    try:
        tasks = asyncio.all_tasks(asyncio.get_running_loop())
    except RuntimeError:
        return
    for task in tasks:
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()


if __name__ == "__main__":
    config_dir, port = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGUSR1, _dump_tasks)
    gc.disable()  # see the module docstring: kagent's unclosed per-call clients

    import kagent.adk._token as kagent_token

    kagent_token.KAGENT_TOKEN_PATH = os.environ["KAGENT_TEST_TOKEN_PATH"]

    from kagent.adk.cli import run_cli

    sys.argv = ["kagent-adk", "static", "--host", "127.0.0.1", "--port", port,
                "--filepath", config_dir]
    run_cli()
