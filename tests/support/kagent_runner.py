"""Serve the real kagent Python runtime exactly as ``kagent-adk static`` does, for tests.

Executed by the python of the kagent runtime venv (``hack/kagent-runtime.sh``), never imported
by the test process (our venv has no ``kagent``): ``python -P kagent_runner.py CONFIG_DIR PORT``
(``-P``: this directory holds our ``kagent.py``, which must not shadow the ``kagent`` package).
``CONFIG_DIR`` holds ``config.json`` (an ``AgentConfig``) and ``agent-card.json``, as the
controller mounts them at ``/config``. The environment carries what a Pod's does: ``KAGENT_URL``,
``KAGENT_NAME``, ``KAGENT_NAMESPACE``, ``LOG_LEVEL`` and the model's ``OPENAI_API_KEY``.

The one deviation from a Pod, and why: kagent-adk 0.9.11 reads the projected service-account
token from the module constant ``kagent.adk._token.KAGENT_TOKEN_PATH``
(``/var/run/secrets/tokens/kagent-token``), with no environment override, and a test may not
write under /var/run. ``read_token()`` looks the constant up on every call, so rebinding it here,
before the CLI builds the app, points the unmodified runtime at ``KAGENT_TEST_TOKEN_PATH``.
Nothing else is patched.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    config_dir, port = sys.argv[1], sys.argv[2]

    import kagent.adk._token as kagent_token

    kagent_token.KAGENT_TOKEN_PATH = os.environ["KAGENT_TEST_TOKEN_PATH"]

    from kagent.adk.cli import run_cli

    sys.argv = ["kagent-adk", "static", "--host", "127.0.0.1", "--port", port,
                "--filepath", config_dir]
    run_cli()
