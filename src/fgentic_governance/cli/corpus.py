"""``fgentic-governance corpus load FILE.jsonl`` and ``corpus stats``: the knowledge corpus.

``load`` checks every row against the ingestion contract (``retrieval.search.ingest``). It
refuses a bad row with its line number and a bounded code, never its content, and loads the
good rows, unless ``--strict``, which loads nothing when any row is refused (the whole load is
then one transaction). Rows without an ``embedding`` are embedded in batches through an
OpenAI-compatible endpoint. The load is an upsert by chunk id, so a re-run after a failure or an
edit duplicates nothing; a chunk of another ``source`` is replaced only with
``--replace-other-sources``. Lines are read within ``ingest.MAX_LINE_BYTES``. Into an empty
corpus it loads first and builds the indexes after; otherwise the indexes stay and follow.

Exit codes: 0 every row loaded; 2 some rows refused, the rest loaded; 1 nothing more could be
done (a missing or unreadable file, the store or the embeddings endpoint unavailable,
``--strict`` refusals). An input file that cannot be used is one line naming its flag
(``cli.errors``), with this command's documented 1 rather than the CLI's usual 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from fgentic_governance.cli import inputs
from fgentic_governance.cli.errors import EXIT_FAILED, fail

if TYPE_CHECKING:
    import asyncpg

    from fgentic_governance.retrieval.search.ingest import Row
    from fgentic_governance.retrievalserver.embeddings import Embedder

BATCH = 64
BATCH_SECONDS = 120.0
"""One embeddings call of a batch (a slow model on a large batch)."""
REPORTED = -1
"""_load's answer when it has already said why nothing was loaded (exit 1, no summary)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="corpus_command", required=True)
    load = sub.add_parser("load", help="check and load chunks from a JSON Lines file")
    load.add_argument("file", type=Path)
    load.add_argument("--store-dsn-file", type=Path, required=True,
                      help="file holding the corpus database's DSN")
    load.add_argument("--embeddings-url", default="",
                      help="OpenAI-compatible embeddings endpoint for rows without 'embedding'")
    load.add_argument("--embeddings-model", default="")
    load.add_argument("--embeddings-key-file", type=Path, default=None)
    load.add_argument("--batch", type=int, default=BATCH, help="rows per embedding call and "
                      "per upsert (default: %(default)s)")
    load.add_argument("--strict", action="store_true",
                      help="load nothing if any row is refused")
    load.add_argument("--replace-other-sources", action="store_true",
                      help="let a row replace a stored chunk of the same id that another "
                           "source created, ACL included (refused by default)")
    load.add_argument("--dimensions", type=int, choices=(768, 1024), default=None,
                      help="the corpus's dimension: chosen when the corpus is created "
                           "(default 768), and it must match an existing corpus's")
    load.set_defaults(func=run_load, unusable_exit=EXIT_FAILED)
    stats = sub.add_parser("stats", help="content-free counts of the corpus")
    stats.add_argument("--store-dsn-file", type=Path, required=True)
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(func=run_stats, unusable_exit=EXIT_FAILED)


@dataclass
class Outcome:
    total: int = 0
    loaded: int = 0
    replaced: int = 0
    """Of ``loaded``: chunks of another source replaced (``--replace-other-sources``)."""
    refused: list[tuple[int, str]] = field(default_factory=list)


class StrictRefusal(Exception):
    """A row refused while a --strict load was writing: the load's transaction rolls back."""


def _fail(args: argparse.Namespace, message: str) -> int:
    """``fgentic-governance corpus load: <message>``; exit 1, for an input file it cannot use
    too (docs/cli.md: corpus's 2 means some rows were refused)."""
    return fail(args, message, EXIT_FAILED)


def _lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """Each line that is not blank, bounded (``None``: too long); bytes, as parse_row reads
    them."""
    from fgentic_governance.retrieval.search.ingest import read_lines

    with path.open("rb") as handle:
        yield from read_lines(handle)


def _checked(path: Path, outcome: Outcome, *, can_embed: bool,
             dimensions: int) -> Iterator[tuple[int, Row]]:
    """The good rows with their line numbers; refusals (a repeated id, a row without an
    embedding when nothing can make one) go to ``outcome``."""
    from fgentic_governance.retrieval.search.ingest import RowCode, RowRefused, parse_row

    seen: set[int] = set()
    for number, line in _lines(path):
        outcome.total += 1
        if line is None:
            outcome.refused.append((number, RowCode.LINE_TOO_LONG.value))
            continue
        try:
            row = parse_row(line, dimensions)
        except RowRefused as refused:
            outcome.refused.append((number, refused.code.value))
            continue
        if row.id in seen:
            outcome.refused.append((number, RowCode.DUPLICATE_ID.value))
            continue
        if row.embedding is None and not can_embed:
            outcome.refused.append((number, RowCode.EMBEDDING_MISSING.value))
            continue
        seen.add(row.id)
        yield number, row


class Progress:
    """A progress bar on a terminal; a line now and then otherwise (a CI log)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self._total, self._stream = max(total, 1), stream
        self._tty = stream.isatty()
        self._last = 0.0

    def show(self, done: int, refused: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.1 if self._tty else 5.0):
            return
        self._last = now
        width = 30
        filled = width * min(done + refused, self._total) // self._total
        bar = "#" * filled + "." * (width - filled)
        text = f"[{bar}] {done}/{self._total} loaded, {refused} refused"
        if self._tty:
            self._stream.write("\r" + text + ("\n" if final else ""))
        else:
            self._stream.write(text + "\n")
        self._stream.flush()


async def _embed(rows: list[Row], embedder: Embedder | None) -> list[list[float]]:
    """Each row's vector: its own, else the endpoint's (``_checked`` let a row without one
    through only when there is an endpoint)."""
    missing = [r.text for r in rows if r.embedding is None]
    fetched: list[list[float]] = []
    if missing:
        assert embedder is not None
        fetched = await embedder.embed_many(missing)
    produced = iter(fetched)
    return [list(r.embedding) if r.embedding is not None else next(produced) for r in rows]


async def _prepare(conn: asyncpg.Connection, dimensions: int) -> bool:
    """The table and functions in place; True when the corpus is empty (indexes come after)."""
    from fgentic_governance.retrieval.search import corpus, ingest

    fresh = await ingest.is_empty(conn)
    await corpus.create_chunks_table(conn, indexes=not fresh, dimensions=dimensions)
    if fresh:  # an empty table that already had indexes: load first, build them after
        await corpus.drop_chunk_indexes(conn)
    return fresh


async def _load(args: argparse.Namespace, outcome: Outcome, progress: Progress) -> int:
    import aiohttp
    import asyncpg

    from fgentic_governance.memory.dsn import read_write
    from fgentic_governance.retrieval.search import corpus
    from fgentic_governance.retrievalserver.codes import RetrievalServerError
    from fgentic_governance.retrievalserver.embeddings import Embedder

    conn = await asyncpg.connect(read_write(inputs.dsn(args.store_dsn_file)), timeout=10)
    session = aiohttp.ClientSession()
    try:
        existing = await corpus.table_dimensions(conn)
        dimensions = args.dimensions or existing or corpus.EMBEDDING_DIMENSIONS
        if existing is not None and existing != dimensions:
            _fail(args, f"the corpus has {existing} dimensions, not {dimensions}")
            return REPORTED
        if args.strict and await _refused_any(conn, args, dimensions):
            return REPORTED
        embedder = None
        if args.embeddings_url:
            key = (inputs.read_text(args.embeddings_key_file, "embeddings_key_file").strip()
                   if args.embeddings_key_file else "")
            # A batch is up to 2,048 texts: the server's 5 s for one query is too short.
            embedder = Embedder(session, args.embeddings_url, args.embeddings_model,
                                dimensions=dimensions, api_key=key, timeout=BATCH_SECONDS)
        async with _all_or_nothing(conn, strict=args.strict):
            await _write(conn, args, embedder=embedder, outcome=outcome, progress=progress,
                         dimensions=dimensions)
    except RetrievalServerError:
        if args.strict:
            outcome.loaded = 0  # rolled back
        progress.show(outcome.loaded, len(outcome.refused), final=True)
        return _fail(args, f"the embeddings endpoint failed after {outcome.loaded} chunks were "
                     "loaded; run the same command again to continue (the load is idempotent)")
    except StrictRefusal:  # rolled back: only the refusals, no counts of a partial read
        _print_refusals(outcome)
        _fail(args, "--strict: nothing loaded")
        return REPORTED
    finally:
        await session.close()
        await conn.close()
    return 0


@contextlib.asynccontextmanager
async def _all_or_nothing(conn: asyncpg.Connection, *, strict: bool) -> AsyncIterator[None]:
    """--strict: one transaction for the whole load (each batch a savepoint in it), so a row
    refused only while writing (another load took its id in between) rolls everything back."""
    if not strict:
        yield
        return
    async with conn.transaction():
        yield


async def _write(conn: asyncpg.Connection, args: argparse.Namespace, *,
                 embedder: Embedder | None, outcome: Outcome, progress: Progress,
                 dimensions: int) -> None:
    from fgentic_governance.retrieval.search import corpus

    fresh = await _prepare(conn, dimensions)
    batch: list[tuple[int, Row]] = []
    for numbered in _checked(args.file, outcome, can_embed=embedder is not None,
                             dimensions=dimensions):
        batch.append(numbered)
        if len(batch) >= args.batch:
            await _flush(conn, batch, embedder=embedder, outcome=outcome, args=args,
                               dimensions=dimensions)
            batch = []
            progress.show(outcome.loaded, len(outcome.refused))
    await _flush(conn, batch, embedder=embedder, outcome=outcome, args=args,
                               dimensions=dimensions)
    if fresh:
        await corpus.create_chunk_indexes(conn)
    await conn.execute("ANALYZE " + corpus.TABLE)
    # The ACL key census the search function plans each call from (exact below its
    # threshold, a bucket's own graph above): it follows every load, as ANALYZE does.
    await corpus.refresh_buckets(conn)


async def _flush(conn: asyncpg.Connection, batch: list[tuple[int, Row]], *,
                 embedder: Embedder | None, outcome: Outcome, args: argparse.Namespace,
                 dimensions: int) -> None:
    from fgentic_governance.retrieval.search import ingest

    if not batch:
        return
    rows = [row for _, row in batch]
    vectors = await _embed(rows, embedder)
    loaded = await ingest.load(conn, rows, vectors, dimensions=dimensions,
                               replace_other_sources=args.replace_other_sources)
    outcome.loaded += len(loaded.written)
    outcome.replaced += len(loaded.replaced)
    outcome.refused += [(number, ingest.RowCode.ID_OF_ANOTHER_SOURCE.value)
                        for number, row in batch if row.id in loaded.refused]
    if loaded.refused and args.strict:
        raise StrictRefusal


async def _refused_any(conn: asyncpg.Connection, args: argparse.Namespace,
                       dimensions: int) -> bool:
    """--strict's first pass: every row checked (and, unless --replace-other-sources, none a
    stored chunk of another source), the refusals reported, nothing loaded or embedded."""
    checked = Outcome()
    batch: list[tuple[int, Row]] = []
    for numbered in _checked(args.file, checked, can_embed=bool(args.embeddings_url),
                             dimensions=dimensions):
        batch.append(numbered)
        if len(batch) >= args.batch:
            await _other_sources(conn, batch, checked, args)
            batch = []
    await _other_sources(conn, batch, checked, args)
    if checked.refused:
        _report(checked)
        _fail(args, "--strict: nothing loaded")
    return bool(checked.refused)


async def _other_sources(conn: asyncpg.Connection, batch: list[tuple[int, Row]],
                         outcome: Outcome, args: argparse.Namespace) -> None:
    from fgentic_governance.retrieval.search import ingest

    if args.replace_other_sources or not batch:
        return
    other = await ingest.other_source_ids(conn, [row for _, row in batch])
    outcome.refused += [(number, ingest.RowCode.ID_OF_ANOTHER_SOURCE.value)
                        for number, row in batch if row.id in other]


def _print_refusals(outcome: Outcome) -> None:
    for number, code in sorted(outcome.refused):
        print(f"line {number}: {code}", file=sys.stderr)


def _report(outcome: Outcome, *, replacing: bool = False) -> None:
    _print_refusals(outcome)
    replaced = f" ({outcome.replaced} replaced another source's)" if replacing else ""
    print(f"{outcome.loaded} chunks loaded{replaced}, {len(outcome.refused)} rows refused "
          f"of {outcome.total}")


def _count(path: Path) -> int:
    return sum(1 for _ in _lines(path))


def _unusable(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot be used, in one sentence (None: they can)."""
    for path in (args.file, args.store_dsn_file, args.embeddings_key_file):
        if path is not None and not path.is_file():
            return f"{path}: no such file"
    if not 1 <= args.batch <= 2048:
        return "--batch must be 1..2048"
    if args.embeddings_url and not args.embeddings_model:
        return "--embeddings-model is required with --embeddings-url"
    return None


def run_load(args: argparse.Namespace) -> int:
    problem = _unusable(args)
    if problem is not None:
        return _fail(args, problem)
    outcome = Outcome()
    progress = Progress(_count(args.file), sys.stderr)
    try:
        code = asyncio.run(_load(args, outcome, progress))
    except (OSError, TimeoutError) as exc:
        return _fail(args, f"the corpus database is unavailable ({type(exc).__name__})")
    except Exception as exc:  # asyncpg's errors: the class only, never its text
        if type(exc).__module__.startswith("asyncpg"):
            return _fail(args, f"the corpus database refused the load ({type(exc).__name__})")
        raise
    if code == REPORTED:
        return 1
    progress.show(outcome.loaded, len(outcome.refused), final=True)
    _report(outcome, replacing=args.replace_other_sources)
    if code:
        return code
    return 2 if outcome.refused else 0


async def _stats(dsn: str) -> dict[str, object]:
    import asyncpg

    from fgentic_governance.retrieval.search import ingest

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        if await conn.fetchval("SELECT to_regclass('chunks') IS NULL"):
            return {"chunks": 0, "with_principals": 0, "with_groups": 0,
                    "by_classification": {}}
        return await ingest.stats(conn)
    finally:
        await conn.close()


def run_stats(args: argparse.Namespace) -> int:
    if not args.store_dsn_file.is_file():
        return _fail(args, f"{args.store_dsn_file}: no such file")
    try:
        found = asyncio.run(_stats(inputs.dsn(args.store_dsn_file)))
    except (OSError, TimeoutError) as exc:
        return _fail(args, f"the corpus database is unavailable ({type(exc).__name__})")
    if args.json:
        print(json.dumps(found, sort_keys=True))
        return 0
    print(f"chunks: {found['chunks']} (with principals {found['with_principals']}, "
          f"with groups {found['with_groups']})")
    by_class = found["by_classification"]
    assert isinstance(by_class, dict)
    for name, count in by_class.items():
        print(f"  {name}: {count}")
    return 0
