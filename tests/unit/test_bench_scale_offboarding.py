"""bench_scale's offboarding row (issue 39 §1): the offboardings during the creation burst are
set against the direct flow at rest (the issue's figure) *and* against the same flow under the
same load, with the split a client sees; several in sequence, each between two direct flows,
summed up by their medians. Pure helpers and formatting: no servers, no timings asserted."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace

import pytest
from benchmarks.bench_scale import (
    DIRECT_BOUND,
    ISSUE_ROWS,
    OFFBOARD_BOUND,
    BurstOffboardings,
    DirectRun,
    Issue39,
    Offboarding,
    Usage,
    burst_bound,
    burst_figures,
    burst_schedule,
    parse_args,
    run_burst,
)

from fgentic_governance.api.common import OriginKind, Principal

FOUND = {"phase": "ReadyForDeactivation", "scopesFound": 10, "scopesErased": 10,
         "scopesFailed": 0}


def _offboarding(seconds: float, created: float,
                 loaded: tuple[DirectRun, DirectRun] | None, *,
                 writes: tuple[float, float] | None = None,
                 after_burst: bool = False) -> Offboarding:
    return Offboarding(seconds=seconds, direct=0.05, status=FOUND, rows_before=100,
                       rows_left=0, usage=Usage(pid=1), polled=seconds, created=created,
                       loaded=loaded, writes=writes, after_burst=after_burst)


def _sample(seconds: float, flow: float, write: float, *, after_burst: bool = False
            ) -> Offboarding:
    """A burst sample whose under-load baseline is ``flow`` (both brackets equal)."""
    return _offboarding(seconds, 0.1, ((flow, 10, 0), (flow, 10, 0)),
                        writes=(write, write), after_burst=after_burst)


def test_each_burst_offboarding_gives_both_ratios_and_the_client_split() -> None:
    sample = _offboarding(1.0, 0.35, ((0.2, 10, 0), (0.3, 10, 0)))
    assert sample.burst_text().startswith(
        "1.00 s (20.00x the flow at rest; 4.00x the flow under the same load (0.25 s: 0.20 s "
        "right before, 0.30 s right after; 10 + 10 verified, 0 rows left); ")
    assert ("create's own round trip 0.35 s, create returned -> Ready seen by the watch "
            "0.65 s") in sample.burst_text()
    assert "found 10, erased 10, failed 0; rows 100 -> 0" in sample.burst_text()


def test_the_table_row_keeps_the_flow_at_rest_and_gives_the_burst_medians() -> None:
    issue = Issue39(1000)
    issue.offboarding = _offboarding(0.1, 0.02, None)
    issue.burst = BurstOffboardings((_sample(1.0, 0.25, 0.010), _sample(3.0, 0.5, 0.030),
                                     _sample(2.0, 0.1, 0.020)))
    row = dict(issue.rows())[ISSUE_ROWS[5]]
    # the existing figure keeps its meaning: against the flow at rest
    assert row.startswith("0.10 s for 10 scopes (2.00x the flow's 0.05 s; ")
    burst = row.split("; during the creation burst: ", 1)[1]
    # seconds 1, 3, 2 -> 2; at rest 20x, 60x, 40x -> 40x; under load 4x, 6x, 20x -> 6x (not
    # the ratio of the medians, 2 / 0.25 = 8x)
    assert burst.startswith("median of 3: 2.00 s (40.00x the flow at rest; 6.00x the flow "
                            "under the same load; 3 of 3 within the burst; min/max 1.00/3.00 s, "
                            "20.00/60.00x the flow at rest, 4.00/20.00x under the same load); "
                            ), burst
    assert ("medians: create's own round trip 0.10 s, create returned -> Ready seen by the "
            "watch 1.90 s, polled every 20 ms: 2.00 s") in burst
    assert "an API write under the same load: 20 ms median (6 writes, min/max 10/30 ms)" in burst
    # every erasure counted, each shared bracket once (3 offboardings, 4 direct flows)
    assert burst.endswith("all 3: found 30, erased 30, failed 0; rows 300 -> 0; their 4 direct "
                          "flows 40 verified, 0 rows left"), burst


def test_offboardings_after_the_burst_are_printed_but_left_out_of_the_medians() -> None:
    burst = BurstOffboardings((_sample(1.0, 0.25, 0.010), _sample(3.0, 0.5, 0.030),
                               _sample(90.0, 0.1, 0.900, after_burst=True)))
    summary = burst.summary()
    assert summary.startswith("median of 2: 2.00 s (40.00x the flow at rest; 5.00x the flow "
                              "under the same load; 2 of 3 within the burst; min/max "
                              "1.00/3.00 s, "), summary
    assert "an API write under the same load: 20 ms median (4 writes, min/max 10/30 ms)" in summary
    assert "all 3: found 30, erased 30" in summary  # the one after still erased what it found
    names = [figure.name for figure in burst_figures("during", burst)]
    assert names[:3] == ["during, 1 of 3: PrincipalOffboarding create -> ReadyForDeactivation",
                         "during, 1 of 3: an API write under the same load", "during, 1 of 3: CPU"]
    assert names[6] == ("during, 3 of 3 (after the burst): PrincipalOffboarding create -> "
                        "ReadyForDeactivation")
    figures = burst_figures("during", burst)
    assert figures[1].value == "10 ms right before, 10 ms right after"
    assert figures[-2].value == summary
    assert figures[-1].value.startswith("20 ms median")


def test_no_offboarding_within_the_burst_gives_no_median() -> None:
    burst = BurstOffboardings((_sample(1.0, 0.25, 0.01, after_burst=True),
                               _sample(2.0, 0.25, 0.01, after_burst=True)))
    assert burst.summary().startswith("none of 2 within the burst (each is printed, after it); "
                                      "all 2: found 20")
    assert burst.api_write() == "none within the burst"
    assert "median" not in burst.summary()


def test_the_schedule_brackets_each_operator_offboarding_between_shared_direct_flows() -> None:
    schedule = burst_schedule(3)
    assert [op for _, op, _ in schedule] == [f"@burst-op-{i}:fgentic.local" for i in (1, 2, 3)]
    assert schedule[0][0] == "@burst-direct-0:fgentic.local"
    assert schedule[-1][2] == "@burst-direct-3:fgentic.local"
    for (_, _, after), (before, _, _) in itertools.pairwise(schedule):
        assert after == before  # a shared bracket
    everyone = {mxid for triple in schedule for mxid in triple}
    assert len(everyone) == 3 + 4  # n operator principals, n + 1 direct ones, none reused
    for mxid in everyone:  # complete MXIDs, as a PrincipalOffboarding takes them
        assert Principal(mxid=mxid, origin_kind=OriginKind.NATIVE_LOCAL).mxid == mxid
    assert burst_schedule(0) == []
    assert [op for _, op, _ in burst_schedule(1)] == ["@burst-op-1:fgentic.local"]


def test_the_burst_runs_in_sequence_and_marks_what_ended_after_it() -> None:
    schedule = burst_schedule(3)
    calls: list[str] = []
    over = threading.Event()
    flows = iter([(0.1, 1, 0), (0.2, 2, 0), (0.3, 3, 0), (0.4, 4, 0)])

    def direct(mxid: str) -> DirectRun:
        calls.append(f"direct {mxid.partition(':')[0]}")
        return next(flows)

    def operator(mxid: str) -> Offboarding:
        calls.append(f"op {mxid.partition(':')[0]}")
        if mxid == schedule[1][1]:
            over.set()  # the burst ends during the second offboarding
        return _offboarding(1.0, 0.1, None)

    writes = iter([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])

    def write() -> float:
        calls.append("write")
        return next(writes)

    samples = run_burst(schedule, direct, operator, write, over)
    assert calls == ["direct @burst-direct-0", "write", "op @burst-op-1", "write",
                     "direct @burst-direct-1", "write", "op @burst-op-2", "write",
                     "direct @burst-direct-2", "write", "op @burst-op-3", "write",
                     "direct @burst-direct-3"]
    assert [s.loaded for s in samples] == [((0.1, 1, 0), (0.2, 2, 0)), ((0.2, 2, 0), (0.3, 3, 0)),
                                           ((0.3, 3, 0), (0.4, 4, 0))]
    assert [s.writes for s in samples] == [(0.01, 0.02), (0.03, 0.04), (0.05, 0.06)]
    # the remaining ones still ran, marked after the burst
    assert [s.after_burst for s in samples] == [False, True, True]
    assert run_burst([], direct, operator, write, over) == []


def test_the_burst_offboardings_option() -> None:
    assert parse_args([]).burst_offboardings == 3
    assert parse_args(["--burst-offboardings", "0"]).burst_offboardings == 0
    assert parse_args(["--burst-offboardings", "1"]).burst_offboardings == 1
    with pytest.raises(SystemExit):
        parse_args(["--burst-offboardings", "-1"])
    # every wait of the burst's work bounded, and the bound grows with each offboarding
    assert burst_bound(2) > burst_bound(1) >= OFFBOARD_BOUND + 2 * DIRECT_BOUND


def test_a_single_sample_reproduces_the_old_under_load_figure() -> None:
    sample = replace(_offboarding(1.0, 0.35, ((0.2, 10, 0), (0.3, 10, 0))), writes=(0.01, 0.02))
    summary = BurstOffboardings((sample,)).summary()
    assert summary.startswith("median of 1: 1.00 s (20.00x the flow at rest; 4.00x the flow "
                              "under the same load; 1 of 1 within the burst; ")
    assert "an API write under the same load: 15 ms median (2 writes" in summary


def test_the_operators_own_split_is_read_from_its_metrics(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """fgentic_offboarding_stage_seconds_sum by stage, from the /metrics text; the split shows
    beside the client's, with what neither stage holds (the event's way in, Ready's way out)."""
    import io

    import benchmarks.bench_scale as bench

    page = ("# TYPE fgentic_offboarding_stage_seconds histogram\n"
            'fgentic_offboarding_stage_seconds_bucket{le="0.01",stage="erasure"} 0.0\n'
            'fgentic_offboarding_stage_seconds_sum{stage="erasure"} 0.42\n'
            'fgentic_offboarding_stage_seconds_sum{stage="ready_write"} 0.125\n'
            'fgentic_offboarding_stage_seconds_count{stage="erasure"} 3.0\n')
    monkeypatch.setattr(bench.urllib.request, "urlopen",
                        lambda *_, **__: io.BytesIO(page.encode()))
    assert bench.stage_sums(1) == {"erasure": 0.42, "ready_write": 0.125}

    sample = replace(_offboarding(1.0, 0.1, ((0.2, 10, 0), (0.2, 10, 0))), stages=(0.5, 0.25))
    assert ("create returned -> Ready seen by the watch 0.90 s (in the operator: erasure "
            "500 ms, Ready write 250 ms, the rest 150 ms)") in sample.burst_text()
    assert "the operator's split not read" in _offboarding(1.0, 0.1, None).text()
    burst = BurstOffboardings((sample, replace(sample, stages=(0.3, 0.05)),
                               replace(sample, stages=(0.9, 0.4), after_burst=True)))
    assert "in the operator: erasure 400 ms, Ready write 150 ms" in burst.summary()
