"""``fgentic-governance corpus load`` and ``corpus stats`` as shipped, against a real PostgreSQL +
pgvector database and an embeddings stub: good rows loaded (embedded in batches or with their
own vectors), bad rows refused by line and code without their content, the indexes built after
a bulk load, idempotent re-loads, ``--strict``, a failing endpoint, content-free stats, and
the loaded chunks served by the prefilter to exactly who may read them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance import contract
from fgentic_governance.retrieval.search import corpus, prefilter
from tests.support.projector import AGENT, ALICE, room_context
from tests.support.retrieval_server import QueryEmbeddings
from tests.support.vectors import unit_vector

pytestmark = pytest.mark.integration

SECRET = "sentinel-c0rpus-9d1e"
ALICE_KEY = {"kind": "matrix", "principal": ALICE}


def row(chunk_id: int, text: str, **changes: Any) -> dict[str, Any]:
    return {"id": chunk_id, "text": text, "source": f"docs/{chunk_id}.md",
            "classification": "public", "allowed_principals": [ALICE_KEY], **changes}


GOOD = [row(1, "retention keeps chat logs thirty days"),
        row(2, "gateway keys rotate monthly", embedding=unit_vector("gateway keys rotate")),
        row(3, "partner docs", allowed_principals=[], allowed_groups=["partner/org-b/docs"]),
        row(4, "restricted notes", classification="restricted")]
BAD = [(row(5, f"{SECRET} wrong class", classification="Secret"), "CLASSIFICATION_INVALID"),
       (row(6, f"{SECRET} nobody", allowed_principals=[]), "ACL_EMPTY"),
       (row(1, f"{SECRET} repeated id"), "DUPLICATE_ID")]


def write(path: Path, rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(extra))
    return path


async def cli(*args: str, dsn_file: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a thread: the embeddings stub answers in this test's event loop."""
    return await asyncio.to_thread(
        subprocess.run,[sys.executable, "-m", "fgentic_governance.cli", "corpus", *args,
                           "--store-dsn-file", str(dsn_file)],
        capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
async def dsn_file(postgres: LocalPostgres, tmp_path: Path) -> AsyncIterator[Path]:
    name = f"t_corpus_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    path = tmp_path / "dsn"
    path.write_text(dsn)
    yield path
    await postgres.drop_database(name)


@pytest.fixture
async def embeddings() -> AsyncIterator[QueryEmbeddings]:
    async with QueryEmbeddings() as stub:
        yield stub  # type: ignore[misc]


def endpoint(stub: QueryEmbeddings) -> list[str]:
    return ["--embeddings-url", stub.url, "--embeddings-model", "stub", "--batch", "2"]


async def rows_in(dsn_file: Path) -> dict[int, tuple[str, str]]:
    conn = await asyncpg.connect(dsn_file.read_text())
    try:
        found = await conn.fetch("SELECT id, content, acl_classification FROM chunks")
        return {r["id"]: (r["content"], r["acl_classification"]) for r in found}
    finally:
        await conn.close()


async def test_good_rows_load_and_bad_rows_are_refused_by_line_and_code(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    data = write(tmp_path / "c.jsonl", [*GOOD, *(r for r, _ in BAD)], ("\n", "not json\n"))
    done = await cli("load", str(data), *endpoint(embeddings), dsn_file=dsn_file)
    assert done.returncode == 2, done.stderr
    refusals = [line for line in done.stderr.splitlines() if line.startswith("line ")]
    assert refusals == ["line 5: CLASSIFICATION_INVALID", "line 6: ACL_EMPTY",
                        "line 7: DUPLICATE_ID", "line 9: NOT_JSON"]
    assert "4 chunks loaded, 4 rows refused of 8" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert set(await rows_in(dsn_file)) == {1, 2, 3, 4}
    # Embedded in batches of two (rows 1, 3 and 4 had no vector of their own).
    batches = [r.json()["input"] for r in embeddings.requests]
    assert sorted(t for b in batches for t in b) == sorted(
        [GOOD[0]["text"], GOOD[2]["text"], GOOD[3]["text"]])
    assert max(len(b) for b in batches) <= 2


async def test_the_indexes_come_after_a_bulk_load_and_the_prefilter_serves_the_rows(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    done = await cli("load", str(write(tmp_path / "c.jsonl", GOOD)), *endpoint(embeddings),
               dsn_file=dsn_file)
    assert done.returncode == 0, done.stderr
    conn = await asyncpg.connect(dsn_file.read_text())
    try:
        indexes = {r["indexname"] for r in await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'chunks'")}
        assert {"chunks_embedding_hnsw", "chunks_acl_principals_gin",
                "chunks_acl_groups_gin"} <= indexes
        identity = contract.decode_verified_identity([contract.encode_identity(
            contract.stamp_matrix(room_context(), agent=AGENT, iat=int(time.time())))],
            now=int(time.time()), agent=AGENT)
        hits = await prefilter.search(conn, identity, unit_vector(GOOD[0]["text"]), 10)
    finally:
        await conn.close()
    # Alice's public rows only: not the partner-group row, not the restricted one.
    assert [h.id for h in hits][:1] == [1]
    assert {h.id for h in hits} == {1, 2}
    assert {h.source for h in hits} == {"docs/1.md", "docs/2.md"}


async def test_a_reload_replaces_by_id_and_duplicates_nothing(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    data = write(tmp_path / "c.jsonl", GOOD)
    assert (await cli("load", str(data), *endpoint(embeddings), dsn_file=dsn_file)).returncode == 0
    edited = [row(1, "retention keeps chat logs ninety days"), *GOOD[1:]]
    again = await cli("load", str(write(tmp_path / "c2.jsonl", edited)), *endpoint(embeddings),
                dsn_file=dsn_file)
    assert again.returncode == 0, again.stderr
    stored = await rows_in(dsn_file)
    assert len(stored) == 4 and stored[1][0] == "retention keeps chat logs ninety days"


async def test_strict_loads_nothing_when_a_row_is_refused(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    data = write(tmp_path / "c.jsonl", [*GOOD, BAD[0][0]])
    done = await cli("load", str(data), "--strict", *endpoint(embeddings), dsn_file=dsn_file)
    assert done.returncode == 1
    assert "line 5: CLASSIFICATION_INVALID" in done.stderr and "nothing loaded" in done.stderr
    assert await rows_in_or_none(dsn_file) is None
    assert embeddings.requests == []


async def rows_in_or_none(dsn_file: Path) -> dict[int, tuple[str, str]] | None:
    conn = await asyncpg.connect(dsn_file.read_text())
    try:
        if await conn.fetchval("SELECT to_regclass('chunks') IS NULL"):
            return None
    finally:
        await conn.close()
    return await rows_in(dsn_file)


async def test_without_an_endpoint_rows_need_their_own_vectors(
    dsn_file: Path, tmp_path: Path,
) -> None:
    done = await cli("load", str(write(tmp_path / "c.jsonl", GOOD)), dsn_file=dsn_file)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("line ")] == [
        "line 1: EMBEDDING_MISSING", "line 3: EMBEDDING_MISSING", "line 4: EMBEDDING_MISSING"]
    assert set(await rows_in(dsn_file)) == {2}


async def test_a_failing_endpoint_stops_the_load_and_a_rerun_completes_it(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    data = write(tmp_path / "c.jsonl", [row(i, f"{SECRET} chunk {i}") for i in range(1, 7)])
    embeddings.fail = True
    failed = await cli("load", str(data), *endpoint(embeddings), dsn_file=dsn_file)
    assert failed.returncode == 1
    assert "run the same command again" in failed.stderr
    assert SECRET not in failed.stdout + failed.stderr  # the provider's body quoted the input
    embeddings.fail = False
    done = await cli("load", str(data), *endpoint(embeddings), dsn_file=dsn_file)
    assert done.returncode == 0, done.stderr
    assert set(await rows_in(dsn_file)) == set(range(1, 7))


async def test_stats_count_by_classification_without_content(
    dsn_file: Path, embeddings: QueryEmbeddings, tmp_path: Path,
) -> None:
    empty = await cli("stats", "--json", dsn_file=dsn_file)
    assert json.loads(empty.stdout)["chunks"] == 0
    await cli("load", str(write(tmp_path / "c.jsonl", GOOD)), *endpoint(embeddings),
              dsn_file=dsn_file)
    done = await cli("stats", "--json", dsn_file=dsn_file)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"chunks": 4, "with_principals": 3, "with_groups": 1,
                                       "by_classification": {"public": 3, "restricted": 1}}
    text = (await cli("stats", dsn_file=dsn_file)).stdout
    assert "chunks: 4" in text and "restricted: 1" in text
    assert not any(str(r["text"]) in text for r in GOOD)


async def test_missing_files_are_one_sentence_not_a_traceback(tmp_path: Path) -> None:
    dsn = tmp_path / "dsn"
    dsn.write_text("postgresql://127.0.0.1:1/none")
    for args in (["load", str(tmp_path / "absent.jsonl")], ["stats"]):
        done = await cli(*args, dsn_file=tmp_path / "no-dsn" if args[0] == "stats" else dsn)
        assert done.returncode == 1
        assert "no such file" in done.stderr and "Traceback" not in done.stderr
    unreachable = await cli("load", str(write(tmp_path / "c.jsonl", GOOD)), dsn_file=dsn)
    assert unreachable.returncode == 1
    assert "unavailable" in unreachable.stderr and "Traceback" not in unreachable.stderr


async def test_a_1024_dimension_corpus_is_chosen_once_and_kept(
    dsn_file: Path, tmp_path: Path,
) -> None:
    """ADR 0024's BGE-M3 embeds in 1,024 dimensions: the dimension is chosen when the corpus is
    created, read back from the table after, and a load that disagrees changes nothing."""
    async with QueryEmbeddings(dimensions=1024) as wide:
        url = ["--embeddings-url", wide.url, "--embeddings-model", "bge-m3"]  # type: ignore[attr-defined]
        data = write(tmp_path / "c.jsonl", GOOD[:1] + GOOD[2:])
        done = await cli("load", str(data), *url, "--dimensions", "1024", dsn_file=dsn_file)
        assert done.returncode == 0, done.stderr
        again = await cli("load", str(data), *url, dsn_file=dsn_file)  # the table's: 1024
        assert again.returncode == 0, again.stderr
    conn = await asyncpg.connect(dsn_file.read_text())
    try:
        assert await corpus.table_dimensions(conn) == 1024
    finally:
        await conn.close()
    narrow = await cli("load", str(data), "--dimensions", "768", dsn_file=dsn_file)
    assert narrow.returncode == 1
    assert "the corpus has 1024 dimensions, not 768" in narrow.stderr
    assert "chunks loaded" not in narrow.stdout
    # A row's own vector must have the corpus's dimension.
    own = write(tmp_path / "own.jsonl", [row(9, "own vector", embedding=unit_vector("x"))])
    refused = await cli("load", str(own), dsn_file=dsn_file)
    assert refused.returncode == 2 and "line 1: EMBEDDING_INVALID" in refused.stderr


# -- rows the database would have refused, chunks of another source, long lines, a BOM ----------


async def test_a_vector_float4_cannot_hold_or_cosine_cannot_rank_is_refused_by_line(
    dsn_file: Path, tmp_path: Path,
) -> None:
    """1e39 is a finite double but beyond float4: it used to fail the whole batch in the
    database (exit 1, no line), also under --strict; an all-zero vector has a NaN distance to
    every query."""
    good = unit_vector("own")
    data = write(tmp_path / "c.jsonl", [
        row(1, "kept", embedding=good),
        row(2, f"{SECRET} huge", embedding=[1e39, *good[1:]]),
        row(3, f"{SECRET} zero", embedding=[0.0] * len(good)),
        row(4, "kept too", embedding=good)])
    strict = await cli("load", str(data), "--strict", dsn_file=dsn_file)
    assert strict.returncode == 1, strict.stderr
    assert [line for line in strict.stderr.splitlines() if line.startswith("line ")] == [
        "line 2: EMBEDDING_INVALID", "line 3: EMBEDDING_INVALID"]
    assert "nothing loaded" in strict.stderr and await rows_in_or_none(dsn_file) is None
    done = await cli("load", str(data), dsn_file=dsn_file)
    assert done.returncode == 2, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("line ")] == [
        "line 2: EMBEDDING_INVALID", "line 3: EMBEDDING_INVALID"]
    assert "2 chunks loaded, 2 rows refused of 4" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    assert set(await rows_in(dsn_file)) == {1, 4}


async def chunk(dsn_file: Path, chunk_id: int) -> tuple[str, str, list[str]]:
    """(content, source, principal keys) of one stored chunk."""
    conn = await asyncpg.connect(dsn_file.read_text())
    try:
        found = await conn.fetchrow(
            "SELECT content, source, acl_principals FROM chunks WHERE id = $1", chunk_id)
    finally:
        await conn.close()
    assert found is not None
    return found["content"], found["source"], list(found["acl_principals"])


async def test_a_chunk_of_another_source_is_replaced_only_when_asked(
    dsn_file: Path, tmp_path: Path,
) -> None:
    """A chunk id belongs to the source that created it: another file naming the same id with
    another source (and its own ACL) is refused by line, also under --strict, unless
    --replace-other-sources, which reports what it replaced."""
    bob = {"kind": "matrix", "principal": "@bob:org-a.example"}
    vector = {"embedding": unit_vector("x")}
    first = write(tmp_path / "a.jsonl", [row(1, "alice's", source="docs/a.md", **vector)])
    assert (await cli("load", str(first), dsn_file=dsn_file)).returncode == 0
    before = await chunk(dsn_file, 1)
    other = write(tmp_path / "b.jsonl", [
        row(2, "new", source="docs/b.md", **vector),
        row(1, f"{SECRET} bob's", source="docs/b.md", allowed_principals=[bob], **vector)])
    strict = await cli("load", str(other), "--strict", dsn_file=dsn_file)
    assert strict.returncode == 1
    assert "line 2: ID_OF_ANOTHER_SOURCE" in strict.stderr and "nothing loaded" in strict.stderr
    assert set(await rows_in(dsn_file)) == {1}
    refused = await cli("load", str(other), dsn_file=dsn_file)
    assert refused.returncode == 2, refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("line ")] == [
        "line 2: ID_OF_ANOTHER_SOURCE"]
    assert "1 chunks loaded, 1 rows refused of 2" in refused.stdout
    assert SECRET not in refused.stdout + refused.stderr
    assert await chunk(dsn_file, 1) == before and set(await rows_in(dsn_file)) == {1, 2}
    # The same source may edit its own chunk; the flag lets another source take it over.
    again = await cli("load", str(first), dsn_file=dsn_file)
    assert again.returncode == 0, again.stderr
    replaced = await cli("load", str(other), "--replace-other-sources", dsn_file=dsn_file)
    assert replaced.returncode == 0, replaced.stderr
    assert "2 chunks loaded (1 replaced another source's), 0 rows refused of 2" in replaced.stdout
    content, source, principals = await chunk(dsn_file, 1)
    assert (content, source) == (f"{SECRET} bob's", "docs/b.md")
    assert principals == ["matrix  @bob:org-a.example"]


def _run_measured(args: list[str]) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in KiB) of one CLI run: wait4 reports that child's own."""
    process = subprocess.Popen([sys.executable, "-m", "fgentic_governance.cli", *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, stderr, usage.ru_maxrss


async def test_a_very_long_line_is_refused_without_being_held_and_the_load_goes_on(
    dsn_file: Path, tmp_path: Path,
) -> None:
    """A 256 MiB line used to be read whole (a 64 MiB one took the CLI to 306 MiB): now it is
    read and dropped 4 MiB at a time, refused by line, and the next line still loads."""
    vector = json.dumps(row(3, "after", embedding=unit_vector("x")))
    data = tmp_path / "c.jsonl"
    with data.open("wb") as out:
        out.write((json.dumps(row(1, "before", embedding=unit_vector("x"))) + "\n").encode())
        out.write(b'{"id": 2, "text": "' + SECRET.encode())
        block = b"x" * (1 << 20)
        for _ in range(256):
            out.write(block)
        out.write(b'"}\n' + vector.encode() + b"\n")
    small = write(tmp_path / "small.jsonl", [row(9, "small", embedding=unit_vector("x"))])
    load = ["corpus", "load", "--store-dsn-file", str(dsn_file)]
    _, _, baseline = await asyncio.to_thread(_run_measured, [*load, str(small)])
    code, stderr, peak = await asyncio.to_thread(_run_measured, [*load, str(data)])
    assert code == 2, stderr
    assert [line for line in stderr.splitlines() if line.startswith("line ")] == [
        "line 2: LINE_TOO_LONG"]
    assert SECRET not in stderr
    assert set(await rows_in(dsn_file)) == {1, 3, 9}
    assert peak - baseline < 64 * 1024, (baseline, peak)  # KiB: far below the line's 256 MiB


async def test_a_utf8_bom_before_the_first_line_is_accepted(
    dsn_file: Path, tmp_path: Path,
) -> None:
    data = tmp_path / "c.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + json.dumps(row(1, "first", embedding=unit_vector("x")))
                     .encode() + b"\n")
    done = await cli("load", str(data), dsn_file=dsn_file)
    assert done.returncode == 0, done.stderr
    assert set(await rows_in(dsn_file)) == {1}
