"""Library log records are reduced to their logger's name and exception type, children of the
scrubbed loggers included (the `mcp` SDK logs a handler's exception, whose text may quote a
request, as ``mcp.shared.jsonrpc_dispatcher``); our own records are left alone."""

from __future__ import annotations

import io
import logging

from fgentic_governance.serving.http import scrub_library_logs

SECRET = "sentinel-query-4b7d"


def test_a_child_loggers_exception_is_reduced_to_its_type() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    undo = scrub_library_logs()
    try:
        try:
            raise ValueError(f"cannot parse {SECRET}")
        except ValueError:
            logging.getLogger("mcp.shared.jsonrpc_dispatcher").exception("handler for %r raised",
                                                                         SECRET)
        logging.getLogger("fgentic_governance.retrievalserver").warning("refused code=%s", "X")
    finally:
        undo()
        root.removeHandler(handler)
    text = stream.getvalue()
    assert SECRET not in text
    assert "mcp.shared.jsonrpc_dispatcher: details withheld (ValueError)" in text
    assert "refused code=X" in text  # ours are not touched
