"""MySQL ``h5_user_memory_items`` -> pgvector ``memory_embeddings``: keyset reader, batch embed,
binary COPY into a staging table, one ``INSERT ... ON CONFLICT`` per batch, checkpoint per batch.

Crash safety: each batch's rows, its rejects *and* its ``{updatedAt, id}`` checkpoint are committed
in one PostgreSQL transaction (table ``memwork_backfill_checkpoints``), so a process killed at any moment
either committed a batch with its checkpoint or neither; ``resume`` re-reads the last committed
checkpoint, and the upsert on ``source_memory_id`` makes a repeated batch harmless. A JSON copy of
the checkpoint goes to the workspace after each commit for operators (and for dry runs, which never
touch PostgreSQL).

Poison rows: a row that cannot be written (NUL or a lone surrogate in a text column, a value
PostgreSQL rejects, an embedder failure on that row alone) is *quarantined* -- recorded with its id
and the reason in ``memwork_backfill_rejects`` (like pgloader's reject file, but queryable by the
verification) -- and the run continues past it: the checkpoint advances, so ``--resume`` does not
retry it forever. Fixed at the source (which moves its ``updated_at`` past the checkpoint), the row
is read again, written, and its reject is cleared.

Ownership: the backfill writes and prunes only its own rows (:mod:`.ownership`: rows without an
``_memworkSource`` marker). An id an import already wrote into the table is quarantined, named with
its owner and counted in ``owned_elsewhere`` -- never overwritten or deleted.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from memwork.db import mysql_errors, pg_connect
from memwork.migrate.backfill_checkpoint import (
    checkpoint_path,
    load_checkpoint,
    read_checkpoint,
    read_json_checkpoint,
    read_rows_written,
)
from memwork.migrate.backfill_options import BackfillOptions, BackfillReport, Cursor, cursor_of
from memwork.migrate.quarantine import (
    MAX_LISTED_REJECTS,
    REJECTS_TABLE,
    RowEmbedder,
    count_rejects,
    load_rejects,
    precheck,
    printable,
    read_rejects,
)
from memwork.migrate.legacy_mysql import (
    count_after,
    iter_batches,
    last_cursor,
    read_batch,
    sample_row,
    status_counts,
)
from memwork.migrate.reconcile import inactive_report, models_in_table
from memwork.migrate.writer import (
    Batch,
    BatchWriter,
    check_destination,
    prepare_session,
    register_packed_vectors,
)
from memwork.progress import Progress

__all__ = [
    "REJECTS_TABLE",
    "BackfillOptions",
    "BackfillReport",
    "Cursor",
    "checkpoint_path",
    "load_checkpoint",
    "load_rejects",
    "printable",
    "read_json_checkpoint",
    "read_rejects",
    "run_backfill",
]


def run_backfill(options: BackfillOptions, progress: Progress | None = None) -> BackfillReport:
    """Dry run (MySQL only) or apply (MySQL -> embed -> PostgreSQL), per ``options.apply``."""
    options.validate()
    if options.apply:
        return _apply(options, progress)
    return _dry_run(options)


def _dry_run(options: BackfillOptions) -> BackfillReport:
    """Counts, first and last checkpoint and a sample -- from MySQL only (no embedder, no PostgreSQL)."""
    from memwork.db import get_engine

    json_path = checkpoint_path(options.table, options.checkpoint_path)
    cursor = read_json_checkpoint(json_path) if options.resume else options.cursor
    report = BackfillReport(
        mode="dry-run", table=options.table, resumed=options.resume and cursor is not None
    )
    report.start_cursor = cursor.to_json() if cursor else None
    report.checkpoint_file = str(json_path)
    with mysql_errors(options.mysql_url or ""), get_engine(options.mysql_url or "").connect() as conn:
        report.source = status_counts(conn)
        remaining = count_after(conn, cursor)
        report.planned = remaining if options.limit is None else min(remaining, options.limit)
        first = read_batch(conn, cursor, max(options.sample_size, 1))
        report.sample = [sample_row(row) for row in first[: min(options.sample_size, report.planned)]]
        if first:
            report.first_checkpoint = cursor_of(first[0]).to_json()
            last = last_cursor(conn, cursor, options.limit)
            report.last_checkpoint = last.to_json() if last else None
    report.rows_read = report.planned
    return report


def _apply(options: BackfillOptions, progress: Progress | None) -> BackfillReport:
    from pgvector.psycopg import register_vector

    from memwork.db import get_engine

    embedder = options.embedder
    assert embedder is not None  # validate() guarantees it
    report = BackfillReport(mode="apply", table=options.table, model=embedder.model_id)
    report.dimensions = int(embedder.dimension)
    row_embedder = RowEmbedder(embedder, report.dimensions)
    row_embedder.check()  # broken for every row: exit 2 before anything is opened or written
    json_path = checkpoint_path(options.table, options.checkpoint_path)
    report.checkpoint_file = str(json_path)
    started = time.perf_counter()
    with (
        pg_connect(options.database_url or "", autocommit=True) as pg,
        mysql_errors(options.mysql_url or ""),
    ):
        check_destination(pg, options.table, report.dimensions, embedder.model_id)
        register_vector(pg)
        register_packed_vectors(pg)
        prepare_session(pg)
        cursor = read_checkpoint(pg, options.table) if options.resume else options.cursor
        report.resumed = options.resume and cursor is not None
        report.start_cursor = cursor.to_json() if cursor else None
        report.run_id, report.rejects_table = _new_run_id(), REJECTS_TABLE
        rows_total = read_rows_written(pg, options.table) if report.resumed else 0
        engine = get_engine(options.mysql_url or "")
        with engine.connect() as my:
            report.source = status_counts(my)
            remaining = count_after(my, cursor)
            report.planned = remaining if options.limit is None else min(remaining, options.limit)
            if progress is not None:
                progress.start("backfill", report.planned)  # one stage: the rows planned
            writer = BatchWriter(
                pg, options.table, embedder.model_id, json_path, report, progress, rows_total
            )
            with writer:
                for rows in iter_batches(my, cursor, report.planned, options.batch_size):
                    good, rejects = precheck(rows)
                    good, vectors, failed = row_embedder.embed(good)
                    report.rows_read += len(rows)
                    writer.submit(Batch(rows, good, vectors, rejects + failed, cursor_of(rows[-1])))
            report.inactive = inactive_report(my, pg, options.table, options.prune_inactive, report.run_id)
            if options.prune_inactive:
                _note_prune_quarantine(report)
        report.models_in_table = models_in_table(pg, options.table)
        report.rejects_total = count_rejects(pg, options.table)
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    if report.elapsed_seconds > 0:
        report.rows_per_second = round(report.rows_written / report.elapsed_seconds, 1)
    return report


def _note_prune_quarantine(report: BackfillReport) -> None:
    """The rows a prune left because another source owns them (each quarantined) count as this
    run's quarantine."""
    assert report.inactive is not None
    left = int(report.inactive["ownedElsewhere"])
    report.owned_elsewhere += left
    report.rows_quarantined += left
    room = MAX_LISTED_REJECTS - len(report.quarantined)
    report.quarantined.extend(report.inactive["quarantined"][: max(room, 0)])


def _new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
