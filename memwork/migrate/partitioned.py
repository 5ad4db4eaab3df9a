"""One migration over N disjoint key ranges at once: a coordinator plans, an executor runs the ranges.

The legacy table's keyset order ``(updated_at, id)`` is split at quantiles read from the source
(:func:`plan_ranges`: the ``k*total/N``-th row's position, walked on the ``(updated_at, id)`` index
alone): range ``i`` holds the rows strictly after bound ``i`` and at or before bound ``i+1`` (the
first starts at the run's start,
the last runs to the table's end -- where a row updated during the run moves, as in one process).
Adjacent ranges share a bound, one exclusive and one inclusive, so no row is in two ranges and none
in none (a property test holds :func:`split_positions` and :class:`KeyRange` to it).

Each range is a :class:`PartitionSpec` (picklable: URLs, bounds, run id, options) run by the top-level
:func:`run_partition` in whatever process the executor picks (:mod:`memwork.executor`: ``local:N``
processes or a Dask cluster): it opens its own connections and runs the one pipeline
(:func:`memwork.migrate.run.run_import`) over a :class:`~memwork.migrate.legacy_mysql.LegacyMySQLSource`
bounded to its range -- whose key carries the bounds, so each range keeps its own checkpoint and its own
advisory lock (resumable alone; one range never runs twice at once).

The coordinator holds the lock of the whole migration (the same one a one-process run takes: a
one-process and a parallel run of one table never overlap) and records the plan in
``memwork_import_plans`` before any range runs. ``--resume`` reuses the recorded plan whatever N is
now: each range's checkpoint is keyed by its bounds, so a new split would strand their progress and
re-read committed pages under other keys; N then only sets how many ranges run at once. A run without
``--resume`` starts over, as a one-process run does: a new plan of N ranges replaces the old one (and
the old ranges' checkpoints). After the ranges, the coordinator reconciles inactive rows once for the
whole table (never per range).
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memwork.embed import Embedder
from memwork.errors import BackendError, UsageError
from memwork.executor import Executor, ExecutorSpec, open_executor
from memwork.identifiers import quote_identifier
from memwork.migrate.checkpoint import (
    CHECKPOINT_TABLE,
    ensure_import_checkpoint_table,
    read_import_checkpoint,
)
from memwork.migrate.legacy_mysql import LegacyMySQLSource
from memwork.migrate.lock import import_lock
from memwork.migrate.run import (
    ImportOptions,
    MigrationReport,
    destination,
    resolve_source,
    run_import,
    stored_key,
)
from memwork.pgvector.schema import lock_ddl
from memwork.progress import Progress

if TYPE_CHECKING:
    import psycopg

PLANS_TABLE = "memwork_import_plans"
_PLANS = quote_identifier(PLANS_TABLE)


@dataclass(frozen=True)
class KeyRange:
    """Rows strictly after ``lower`` and at or before ``upper`` (encoded keyset cursors; None: the
    table's start / end)."""

    lower: str | None
    upper: str | None

    def to_json(self) -> dict[str, Any]:
        return {"lower": _shown(self.lower), "upper": _shown(self.upper)}


def split_positions(total: int, parts: int) -> list[int]:
    """The 1-based row ordinals that end each range but the last, splitting ``total`` rows into
    ``parts`` ranges whose sizes differ by at most one (fewer ranges when there are fewer rows)."""
    count = max(1, min(parts, total))
    return [(k * total) // count for k in range(1, count)]


def ranges_between(start: str | None, bounds: Sequence[str]) -> list[KeyRange]:
    """Consecutive ranges from ``start`` through each bound to the end: bound ``i`` is range ``i``'s
    inclusive upper and range ``i+1``'s exclusive lower, so they tile the key space."""
    lowers = [start, *bounds]
    uppers: list[str | None] = [*bounds, None]
    return [KeyRange(lo, hi) for lo, hi in zip(lowers, uppers, strict=True)]


def plan_ranges(source: LegacyMySQLSource, start: str | None, parts: int) -> list[KeyRange]:
    """``parts`` ranges of near-equal row counts after ``start``, their bounds read from the source's
    ``(updated_at, id)`` index (rows of any status: see ``nth_cursor``)."""
    total = source.count_keys(start)
    bounds: list[str] = []
    position, cursor = 0, start
    for ordinal in split_positions(total, parts):
        found = source.nth_cursor(cursor, ordinal - position)
        if found is None:  # rows went away since the count: fewer ranges
            break
        bounds.append(found)
        position, cursor = ordinal, found
    return ranges_between(start, bounds)


@dataclass(frozen=True)
class PartitionSpec:
    """One key range of a parallel migration, everything a worker needs (picklable)."""

    index: int
    key_range: KeyRange
    # URLs may hold passwords: never in repr() (a worker's traceback, a scheduler's log)
    mysql_url: str = field(repr=False)
    database_url: str = field(repr=False)  # a server URL (``pg://embedded`` resolved by the coordinator)
    table: str
    page_size: int
    embedder: Embedder | str
    resume: bool
    run_id: str


def run_partition(spec: PartitionSpec) -> MigrationReport:
    """Migrate one key range on this worker's own connections (top-level: executors pickle it)."""
    source = LegacyMySQLSource(spec.mysql_url, lower=spec.key_range.lower, upper=spec.key_range.upper)
    options = ImportOptions(
        source=source,
        database_url=spec.database_url,
        table=spec.table,
        apply=True,
        resume=spec.resume,
        page_size=spec.page_size,
        embedder=spec.embedder,
        run_id=spec.run_id,
    )
    return run_import(options)


def partition_count(workers: int | None, executor: Executor) -> int:
    """Ranges to plan: ``--workers``, else as many as the executor runs at once."""
    return workers if workers is not None else executor.workers


def check_partitionable(options: ImportOptions, workers: int | None) -> None:
    """A usage error for what cannot be split into key ranges (before anything is read)."""
    shown = workers if workers is not None else "executor"
    if isinstance(options.source, str) and options.source.strip() != "legacy-mysql":
        raise UsageError(
            "workers", shown, f"source {options.source} cannot be split into key ranges (only legacy-mysql)"
        )
    if options.limit is not None:
        raise UsageError(
            "limit", options.limit, "cannot be combined with --workers (ranges run to their end)"
        )
    if options.vectors == "keep":
        raise UsageError("vectors", "keep", "the legacy table has no vectors: --workers re-embeds")


def run_partitioned(
    options: ImportOptions,
    *,
    workers: int | None = None,
    executor: str | ExecutorSpec | Executor | None = None,
    progress: Progress | None = None,
) -> MigrationReport:
    """The migration of ``options`` over ``workers`` disjoint key ranges run by ``executor``
    (``local:N`` by default). Dry run unless ``options.apply``: the plan and the counts, nothing
    written. See the module docstring for the plan's recording and reuse."""
    options.validate()
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise UsageError("workers", workers, "must be a positive integer")
    check_partitionable(options, workers)
    source = resolve_source(options.source, options.env)
    if not isinstance(source, LegacyMySQLSource) or source.partial:
        source.close()
        raise UsageError("workers", workers, f"source {source.name} cannot be split into key ranges")
    if executor is None:
        executor = f"local:{workers}" if workers else "local"
    runner = open_executor(executor) if isinstance(executor, (str, ExecutorSpec)) else executor
    try:
        parts = partition_count(workers, runner)
        if not options.apply:
            return _dry_run(options, source, parts)
        return _apply(options, source, parts, runner, progress)
    finally:
        source.close()
        if runner is not executor:
            runner.close()


def _dry_run(options: ImportOptions, source: LegacyMySQLSource, parts: int) -> MigrationReport:
    """The one-process dry run (counts, sample) plus the ranges a run would split into."""
    report = run_import(replace(options, source=source))
    start = options.cursor
    if options.resume and report.start_cursor is not None:
        start = report.start_cursor
    ranges = plan_ranges(source, start, parts)
    report.partitions = [
        {"index": i, **r.to_json(), "planned": _count(_bounded(source, r))} for i, r in enumerate(ranges)
    ]
    report.notes.append(
        f"{len(ranges)} key range(s) planned; --resume reuses a plan recorded by an earlier --apply"
    )
    return report


def _apply(
    options: ImportOptions,
    source: LegacyMySQLSource,
    parts: int,
    executor: Executor,
    progress: Progress | None,
) -> MigrationReport:
    from memwork.db import embedded, pg_connect
    from memwork.migrate.run import checked_embedder, new_run_id

    url = embedded.ensure(destination(options), create=True)  # workers get the server's URL
    assert url.libpq is not None
    key = stored_key(source)
    embedder = checked_embedder(options.embedder)  # a bad --embedder fails here, not in N workers
    if embedder is None:
        raise UsageError("embedder", None, "--apply with --workers needs --embedder SPEC")
    sent = options.embedder if options.embedder is not None else embedder
    try:
        pickle.dumps(sent)
    except Exception:
        raise UsageError(
            "embedder", _spec(sent), "cannot be sent to worker processes; give --embedder SPEC"
        ) from None
    started = time.perf_counter()
    run_id = options.run_id or new_run_id()
    with pg_connect(url, autocommit=True) as pg, import_lock(pg, options.table, key):
        _prepare_table(pg, options, embedder)
        ranges, reused = _plan(pg, options, source, key, parts, run_id)
        specs = [
            PartitionSpec(
                index=i,
                key_range=r,
                mysql_url=source.url,
                database_url=url.libpq,
                table=options.table,
                page_size=options.page_size,
                embedder=sent,
                resume=True,  # its own checkpoint (this plan's: see _plan), else its lower bound
                run_id=run_id,
            )
            for i, r in enumerate(ranges)
        ]
        if progress is not None:
            progress.start(f"import {source.name} ({len(specs)} ranges)", None)
        reports = _run_ranges(executor, specs, progress)
        report = _merged(options, source, key, run_id, [reports[i] for i in range(len(specs))], ranges)
        report.destination = url.redacted
        if reused:
            report.notes.append(
                f"resumed the recorded plan of {len(ranges)} key range(s) (asked for {parts}): "
                "each range's checkpoint is keyed by its bounds"
            )
        from memwork.migrate.ownership import LEGACY_OWNER
        from memwork.migrate.reconcile import inactive_report, models_in_table

        report.inactive = inactive_report(
            source, pg, options.table, options.prune_inactive, run_id, owner=LEGACY_OWNER
        )
        report.models_in_table = models_in_table(pg, options.table)
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    if report.elapsed_seconds > 0:
        report.rows_per_second = round(report.rows_written / report.elapsed_seconds, 1)
    return report


def _run_ranges(
    executor: Executor, specs: list[PartitionSpec], progress: Progress | None
) -> dict[int, MigrationReport]:
    """Every range's report; a worker that died (killed, out of memory) is one clear error --
    every page a range committed stays, and ``--resume`` continues each range where it stopped."""
    reports: dict[int, MigrationReport] = {}
    try:
        for index, part in executor.map_unordered(run_partition, specs):
            reports[index] = part
            if progress is not None:
                progress.advance(part.rows_read)
    except Exception as exc:
        if type(exc).__name__ not in ("BrokenProcessPool", "KilledWorker"):
            raise
        left = len(specs) - len(reports)
        raise BackendError(
            f"a worker process died ({type(exc).__name__}); {left} of {len(specs)} key range(s) "
            "unfinished, their committed pages kept: run again with --resume"
        ) from exc
    return reports


def _prepare_table(pg: psycopg.Connection[Any], options: ImportOptions, embedder: Embedder) -> None:
    """The destination table (``create_schema``) and the bookkeeping tables, made once here so N
    ranges starting together never race on DDL."""
    from memwork.pgvector.schema import schema_sql, table_dimensions

    ensure_import_checkpoint_table(pg)
    with pg.transaction():
        lock_ddl(pg)
        pg.execute(
            f"CREATE TABLE IF NOT EXISTS {_PLANS} (target_table TEXT NOT NULL, source_key TEXT NOT NULL, "
            "ranges TEXT NOT NULL, run_id TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), "
            "PRIMARY KEY (target_table, source_key))"
        )
    existing = table_dimensions(pg, options.table)
    if existing is None and options.create_schema:
        with pg.transaction():
            lock_ddl(pg)
            for statement in schema_sql(options.table, int(embedder.dimension), create_extension=True):
                pg.execute(statement)
    # a missing table without --create-schema, or another dimension: each range refuses it, as one
    # process does, before it writes anything


def _plan(
    pg: psycopg.Connection[Any],
    options: ImportOptions,
    source: LegacyMySQLSource,
    key: str,
    parts: int,
    run_id: str,
) -> tuple[list[KeyRange], bool]:
    """The ranges of this run and whether they are a recorded plan reused (see the module docstring)."""
    recorded = load_plan(pg, options.table, key)
    if options.resume and recorded is not None:
        return recorded, True
    start = options.cursor
    if options.resume:  # no plan yet: go on after a one-process run's checkpoint, if any
        found = read_import_checkpoint(pg, options.table, key)
        start = found.resume_cursor if found else None
    ranges = plan_ranges(source, start, parts)
    with pg.transaction():
        # a fresh start: every earlier range's progress is void (so a range resumes only its own
        # pages of this plan -- a range re-run by the executor after its worker died among them)
        stale = [stored_key(_bounded(source, r)) for r in [*(recorded or []), *ranges]]
        pg.execute(
            f"DELETE FROM {quote_identifier(CHECKPOINT_TABLE)} "
            "WHERE target_table = %s AND source_key = ANY(%s)",
            (options.table, stale),
        )
        pg.execute(
            f"INSERT INTO {_PLANS} (target_table, source_key, ranges, run_id) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (target_table, source_key) DO UPDATE SET ranges = EXCLUDED.ranges, "
            "run_id = EXCLUDED.run_id, created_at = NOW()",
            (options.table, key, json.dumps([[r.lower, r.upper] for r in ranges]), run_id),
        )
    return ranges, False


def load_plan(pg: psycopg.Connection[Any], table: str, source_key: str) -> list[KeyRange] | None:
    """The recorded ranges of the parallel migration of ``source_key`` into ``table`` (None: none)."""
    from memwork.db import pg_value

    if pg_value(pg, "SELECT to_regclass(%s)", (PLANS_TABLE,)) is None:
        return None
    row = pg.execute(
        f"SELECT ranges FROM {_PLANS} WHERE target_table = %s AND source_key = %s", (table, source_key)
    ).fetchone()
    if row is None:
        return None
    return [KeyRange(lo, hi) for lo, hi in json.loads(row[0])]


def _merged(
    options: ImportOptions,
    source: LegacyMySQLSource,
    key: str,
    run_id: str,
    parts: list[MigrationReport],
    ranges: list[KeyRange],
) -> MigrationReport:
    """The ranges' reports as one: counts summed, users merged, one entry per range."""
    report = MigrationReport(mode="apply", source=source.name, source_key=key, table=options.table)
    report.run_id, report.rejects_table = run_id, parts[0].rejects_table if parts else None
    report.planned = 0
    for part in parts:
        report.planned += part.planned or 0
        report.rows_read += part.rows_read
        report.rows_written += part.rows_written
        report.rows_quarantined += part.rows_quarantined
        report.owned_elsewhere += part.owned_elsewhere
        report.pages += part.pages
        for user, n in part.users.items():
            report.users[user] = report.users.get(user, 0) + n
        report.quarantined.extend(part.quarantined[: max(100 - len(report.quarantined), 0)])
        report.notes.extend(n for n in part.notes if n not in report.notes)
        report.resumed = report.resumed or part.resumed
        report.vectors = report.vectors or part.vectors
        report.model = report.model or part.model
        report.dimensions = report.dimensions or part.dimensions
    report.sample = [row for part in parts for row in part.sample][: options.sample_size]
    report.rejects_total = max((part.rejects_total or 0 for part in parts), default=0)
    report.first_checkpoint = parts[0].first_checkpoint if parts else None
    report.last_checkpoint = parts[-1].last_checkpoint if parts else None
    report.partitions = [
        {
            "index": i,
            **r.to_json(),
            "rowsRead": part.rows_read,
            "rowsWritten": part.rows_written,
            "elapsedSeconds": part.elapsed_seconds,
            "resumed": part.resumed,
            "checkpoint": part.checkpoint,
        }
        for i, (r, part) in enumerate(zip(ranges, parts, strict=True))
    ]
    totals = [part.checkpoint or {} for part in parts]
    report.checkpoint = {
        "ranges": len(parts),
        "finished": all(bool(t.get("finished")) for t in totals),
        "rowsRead": sum(int(t.get("rowsRead") or 0) for t in totals),
        "rowsWritten": sum(int(t.get("rowsWritten") or 0) for t in totals),
        "model": report.model,
        "dimensions": report.dimensions,
        "runId": run_id,
    }
    return report


def _bounded(source: LegacyMySQLSource, key_range: KeyRange) -> LegacyMySQLSource:
    """The source read over one key range only."""
    return LegacyMySQLSource(source.url, lower=key_range.lower, upper=key_range.upper)


def _count(source: LegacyMySQLSource) -> int:
    """The rows of a range source, its connection closed after (no transaction left open)."""
    try:
        return source.count()
    finally:
        source.close()


def _spec(embedder: Embedder | str) -> str:
    return embedder if isinstance(embedder, str) else embedder.model_id


def _shown(cursor: str | None) -> Any:
    return None if cursor is None else json.loads(cursor)
