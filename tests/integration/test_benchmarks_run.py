"""The memory benchmarks still run against the current schema (smallest sizes; nothing about
their figures is asserted: performance is shown by running them, docs/performance.md).

Both broke silently once when the store gained a bound (a claim before every insert, the
per-lease recall and cadence bounds); this catches the next one. ``bench_scale`` runs small
too: its last block must carry every row of issue 39's table (docs/scale.md), with the counts
that prove the run did what the figures claim; its times are never asserted.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.objects import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("argv", [
    ["benchmarks.bench_memory", "--skip-operator", "--erase-rounds", "1", "--inserts", "50"],
    ["benchmarks.bench_memory_api", "--rounds", "1", "--subjects", "2", "--saves", "32",
     "--clients", "2"],
    ["benchmarks.bench_memory_size", "--large", "1000", "--small", "500", "--rounds", "1",
     "--batch", "2", "--erasures", "1"],
], ids=["bench_memory", "bench_memory_api", "bench_memory_size"])
def test_the_memory_benchmarks_run(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== summary (figures only; nothing is asserted)" in done.stdout


ISSUE_39_ROWS = (  # pinned on purpose: the issue's rows in its order, not what the bench prints
    "first create -> all `Enabled`",
    "watch events per object until converged",
    "API writes per object",
    "operator resident memory",
    "operator CPU at rest",
    "offboarding one person: PrincipalOffboarding -> `ReadyForDeactivation`",
    "writes at rest",
)


def test_bench_scale_prints_every_row_of_the_issue_table_from_one_small_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_scale", "--scopes", "24", "--bindings", "2",
         "--offboard-scopes", "3", "--burst-offboardings", "2", "--entries", "2", "--settle", "3",
         "--namespaces", "2", "--threads", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    head, _, block = done.stdout.rpartition("== issue 39 table (24 scopes, one run)")
    assert head, done.stdout[-3000:]
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert rows[0] == "| | 24 scopes |"
    cells = dict(row[2:-2].split(" | ", 1) for row in rows[1:])
    assert list(cells) == list(ISSUE_39_ROWS), block
    assert "-" not in cells.values(), block  # every row measured in this one run
    assert "(24/24 Enabled;" in cells[ISSUE_39_ROWS[0]]
    # every scope of the person offboarded at rest found and erased, every entry gone
    at_rest, _, burst = cells[ISSUE_39_ROWS[5]].partition("; during the creation burst: ")
    assert "found 3, erased 3, failed 0; rows 6 -> 0; polled every 20 ms: " in at_rest
    # the operator's own split of its run, read from its /metrics (a stage it never timed
    # would read 0 ms)
    split = r"in the operator: erasure (\d+) ms, Ready write (\d+) ms"
    rest_line = re.search(r"^  offboarding 3 scopes x 2 entries: PrincipalOffboarding create -> "
                          r"ReadyForDeactivation: .*; " + split, head, re.M)
    assert rest_line and int(rest_line[1]) > 0 and int(rest_line[2]) > 0, head[-3000:]
    # each write of a scope or a consent by what it changed (finalizer, status: names only)
    causes = re.findall(r"^  (MemoryScopes|ConsentRecords): writes per object by what they "
                        r"changed [^:]*: (.*)$", head, re.M)
    assert [kind for kind, _ in causes] == ["MemoryScopes", "ConsentRecords"], head[-3000:]
    assert "finalizers " in causes[0][1] and "status " in causes[1][1], causes
    # ...and of both offboarded during the creation burst, and of the three direct flows
    # around them (each shared between two)
    assert burst.endswith("all 2: found 6, erased 6, failed 0; rows 12 -> 0; their 3 direct "
                          "flows 9 verified, 0 rows left"), burst
    # the medians over those within the burst (how many is timing: this burst is short)
    assert re.match(r"median of [12]: [\d.]+ s \([\d.]+x the flow at rest; [\d.]+x the flow "
                    r"under the same load; [12] of 2 within the burst; min/max |none of 2 "
                    r"within the burst", burst), burst
    if burst.startswith("median of"):
        assert ", create returned -> Ready seen by the watch " in burst, burst
        assert "; an API write under the same load: " in burst, burst
    # each printed against the flow at rest and the flow under the same load (both its
    # brackets erased), with the split a client sees and a plain API write around it
    label = (r"^  offboarding 3 scopes during \(a\)'s creation burst, (\d) of 2"
             r"(?: \(after the burst\))?")
    samples = re.findall(label + r": PrincipalOffboarding create -> ReadyForDeactivation: (.*)$",
                         head, re.M)
    assert [i for i, _ in samples] == ["1", "2"], head[-3000:]
    for _, sample in samples:
        assert "x the flow at rest; " in sample and "x the flow under the same load (" in sample
        assert "3 + 3 verified, 0 rows left); create's own round trip " in sample, sample
        assert ", create returned -> Ready seen by the watch " in sample, sample
        assert re.search(split + r", the rest -?\d+ ms\)", sample), sample
        # ReadyForDeactivation as a watch from before the create saw it, the 20 ms poll's beside
        assert "found 3, erased 3, failed 0; rows 6 -> 0; polled every 20 ms: " in sample
    plain_writes = re.findall(label + r": an API write under the same load: \d+ ms right before, "
                        r"\d+ ms right after$", head, re.M)
    assert plain_writes == ["1", "2"], head[-3000:]
    writes = cells[ISSUE_39_ROWS[6]]
    assert writes.startswith("while 2 RetrievalBindings converged (")
    # (the windows last --settle plus the probes' own seconds: not asserted)
    assert re.search(r"; at rest \d+ s after all Enabled: ", writes), writes
    assert re.search(r"; at rest \d+ s after all bindings Applied: ", writes), writes
    # store rows written in each window, by xmin (exact, not pg_stat's late counters)
    assert len(re.findall(r"store rows written [\d,]+ of fgentic_memory\.scope", writes)) == 3


def test_bench_prefilter_runs_small_with_no_leak_and_every_path() -> None:
    """The prefilter benchmark, as by hand at 100k (docs/prefilter.md) but on 3,000 rows: the
    census, the three paths and the leak/fill/recall lines; no timing is asserted."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_prefilter", "--rows", "3000", "--queries", "3",
         "--ef-search", "100"], cwd=ROOT, capture_output=True, text=True, timeout=900,
        check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # one pass at the census's ef_search, one at --ef-search's value, each with its own figures
    assert out.count("rows leaked: 0; variants returning < 10 rows although >= 10 visible: "
                     "none") == 2, out
    assert "bucket graphs at hnsw.ef_search = 100" in out, out
    assert "bucket graphs at hnsw.ef_search = the census's own" in out, out
    assert len(re.findall(r"^recall@10: Matrix 1 % \d\.\d{3}", out, re.M)) == 2, out
    assert re.search(r"ratio to the unfiltered query \(median\): 1 %: .*; 10 %: .*; 50 %: ", out)
    census = re.search(r"^census: \d+ keys over \d+ rows, (\d+) bucket indexes", out, re.M)
    assert census, out
    # every bucket's graph prewarmed through its own partial index, as the searches walk it
    walked = re.search(r"^prewarmed in [\d.]+ s \(the whole graph; (\d+) of (\d+) bucket graphs "
                       r"through their own index\)$", out, re.M)
    assert walked and walked[1] == walked[2] == census[1] != "0", out
    table = out.rpartition("variant ")[2]
    assert " exact " in table and " bucket " in table, table
