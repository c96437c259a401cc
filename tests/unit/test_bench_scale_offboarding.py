"""bench_scale's offboarding row (issue 39 §1): the offboarding during the creation burst is set
against the direct flow at rest (the issue's figure) *and* against the same flow under the same
load, with the split a client can see; pure formatting, no servers and no timings asserted."""

from __future__ import annotations

from benchmarks.bench_scale import ISSUE_ROWS, Issue39, Offboarding, Usage

FOUND = {"phase": "ReadyForDeactivation", "scopesFound": 10, "scopesErased": 10,
         "scopesFailed": 0}


def _offboarding(seconds: float, created: float,
                 loaded: tuple[tuple[float, int, int], tuple[float, int, int]] | None
                 ) -> Offboarding:
    return Offboarding(seconds=seconds, direct=0.05, status=FOUND, rows_before=100,
                       rows_left=0, usage=Usage(pid=1), polled=seconds, created=created,
                       loaded=loaded)


def test_the_burst_offboarding_row_gives_both_ratios_and_the_client_split() -> None:
    issue = Issue39(1000)
    issue.offboarding = _offboarding(0.1, 0.02, None)
    issue.burst = _offboarding(1.0, 0.35, ((0.2, 10, 0), (0.3, 10, 0)))
    row = dict(issue.rows())[ISSUE_ROWS[5]]
    # the existing figure keeps its meaning: against the flow at rest
    assert row.startswith("0.10 s for 10 scopes (2.00x the flow's 0.05 s; ")
    burst = row.split("; during the creation burst: ", 1)[1]
    assert burst.startswith("1.00 s (20.00x the flow at rest; 4.00x the flow under the same "
                            "load (0.25 s: 0.20 s right before, 0.30 s right after; 10 + 10 "
                            "verified, 0 rows left); "), burst
    assert ("create's own round trip 0.35 s, create returned -> Ready seen by the watch "
            "0.65 s") in burst
    assert "found 10, erased 10, failed 0; rows 100 -> 0" in burst
