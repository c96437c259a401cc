"""``corpus load``'s progress: a redrawn bar on a terminal, plain lines (rate-limited) in a log."""

from __future__ import annotations

import io

from fgentic_governance.cli.corpus import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_redrawn_bar() -> None:
    out = Terminal()
    progress = Progress(10, out)
    progress.show(4, 1)
    progress.show(10, 0, final=True)
    text = out.getvalue()
    assert text.startswith("\r[###############...............] 4/10 loaded, 1 refused")
    assert text.endswith("\r[##############################] 10/10 loaded, 0 refused\n")


def test_a_log_gets_lines_not_carriage_returns() -> None:
    out = io.StringIO()
    progress = Progress(4, out)
    for done in range(4):
        progress.show(done, 0)  # within 5 s of the first: only the first is written
    progress.show(4, 0, final=True)
    assert out.getvalue().splitlines() == ["[..............................] 0/4 loaded, 0 refused",
                                           "[##############################] 4/4 loaded, 0 refused"]
    assert "\r" not in out.getvalue()
