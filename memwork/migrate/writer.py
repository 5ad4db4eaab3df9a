"""The PostgreSQL side: binary COPY into a staging table, one ``INSERT ... ON CONFLICT`` per batch, committed
with its rejects and checkpoint in one transaction, on a writer thread that overlaps the next batch's
embedding.

Every write goes through :func:`write_batch` with its ``owner`` (the source key; the backfill's is
:data:`~memwork.migrate.ownership.BACKFILL_OWNER`): a row another source owns is never
overwritten -- the upsert itself checks the owner (:mod:`memwork.migrate.ownership`) and the
record is quarantined, naming the owner."""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.contracts import Row
from memwork.db import pg_value
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.backfill_checkpoint import save_json_checkpoint, store_checkpoint
from memwork.migrate.backfill_options import BackfillReport, Cursor, cursor_of
from memwork.migrate.ownership import (
    BACKFILL_OWNER,
    OwnedElsewhere,
    owned_elsewhere_count,
    owners_of,
    stamped_metadata_sql,
    upsert_sql,
)
from memwork.migrate.quarantine import (
    MAX_LISTED_REJECTS,
    REJECTS_TABLE,
    Reject,
    blames_rows,
    clear_written_rejects,
    count_rejects,
    printable,
    reject_reason,
    rejects_table_sql,
    store_rejects,
)
from memwork.pgvector.schema import checkpoint_table_sql, lock_ddl, table_dimensions
from memwork.progress import Progress

if TYPE_CHECKING:
    import psycopg

STAGE_TABLE = "memwork_backfill_stage"


_DEST_COLUMNS = (
    "source_memory_id",
    "user_id",
    "content",
    "embedding",
    "embedding_model",
    "type",
    "source_session_id",
    "source_message_id",
    "metadata",
    "created_at",
    "updated_at",
)


_SELECTED = {stamp: f"({stamp}::timestamp AT TIME ZONE 'UTC')" for stamp in ("created_at", "updated_at")}


_COPY_TYPES = ["text", "text", "text", "vector", "text", "text", "text", "text", "text", "text", "text"]


class BatchWriter:
    """Commits batches (rows + checkpoint, one transaction each) on its own thread, in order.

    While PostgreSQL merges batch *n* (the thread waits on the socket, GIL released) the caller reads
    and embeds batch *n+1*. At most one batch waits in the queue, so memory stays bounded. A write
    error that blames the rows is retried row by row (the failing rows are quarantined); any other
    write error stops the run: ``submit`` and ``__exit__`` re-raise it in the caller's thread.
    """

    def __init__(
        self,
        pg: psycopg.Connection[Any],
        table: str,
        model_id: str,
        json_path: Path,
        report: BackfillReport,
        progress: Progress | None,
        rows_total: int = 0,
    ) -> None:
        self.pg, self.table, self.model_id, self.json_path = pg, table, model_id, json_path
        self.report, self.progress, self.rows_total = report, progress, rows_total
        self.has_rejects = count_rejects(pg, table) > 0  # only then do written rows clear rejects
        self.pending: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="memwork-backfill-writer", daemon=True)

    def __enter__(self) -> BatchWriter:
        self.thread.start()
        return self

    def submit(self, batch: Batch) -> None:
        while True:
            self._raise_if_failed()
            try:
                self.pending.put(batch, timeout=0.2)
                return
            except queue.Full:
                continue

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        while self.thread.is_alive():  # the writer may be blocked on a full queue only if it died
            try:
                self.pending.put(None, timeout=0.2)
                break
            except queue.Full:
                continue
        self.thread.join()
        if exc is None:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            while (batch := self.pending.get()) is not None:
                assert batch.cursor is not None  # the backfill's batches always carry their keyset cursor
                written, rejects = write_batch(
                    self.pg,
                    self.table,
                    batch,
                    self.model_id,
                    self.report.dimensions or 0,
                    self.rows_total,
                    self.report.run_id or "",
                    owner=BACKFILL_OWNER,
                    clear_rejects=self.has_rejects,
                )
                self.rows_total += written
                self.has_rejects = self.has_rejects or bool(rejects)
                save_json_checkpoint(self.json_path, self.table, batch.cursor, self.rows_total, self.report)
                self._committed(batch, written, rejects)
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc

    def _committed(self, batch: Batch, written: int, rejects: list[Reject]) -> None:
        report = self.report
        report.first_checkpoint = report.first_checkpoint or cursor_of(batch.read[0]).to_json()
        report.last_checkpoint = batch.cursor.to_json() if batch.cursor is not None else None
        report.rows_written += written
        report.rows_quarantined += len(rejects)
        report.owned_elsewhere += owned_elsewhere_count(rejects)
        room = MAX_LISTED_REJECTS - len(report.quarantined)
        report.quarantined.extend(reject.to_json() for reject in rejects[: max(room, 0)])
        report.batches += 1
        if self.progress is not None:
            self.progress.advance(len(batch.read))


def check_destination(pg: psycopg.Connection[Any], table: str, dimensions: int, model_id: str) -> None:
    """Refuse before writing anything: no table, or a table whose vectors have another dimension."""
    existing = table_dimensions(pg, table)
    if existing is None:
        raise UsageError("table", table, "does not exist; run `memwork pgvector schema --apply` first")
    if existing != dimensions:
        raise UsageError(
            "embedder",
            model_id,
            f"makes {dimensions}-dim vectors but {table}.embedding is vector({existing})",
        )


def prepare_session(pg: psycopg.Connection[Any]) -> None:
    """Checkpoint and rejects tables (bookkeeping, created if missing) and this session's staging table."""
    with pg.transaction():
        lock_ddl(pg)
        pg.execute(checkpoint_table_sql())
        pg.execute(rejects_table_sql())
        _add_rejects_source_column(pg)
    pg.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ("
        "source_memory_id TEXT, user_id TEXT, content TEXT, embedding vector, embedding_model TEXT, "
        "type TEXT, source_session_id TEXT, source_message_id TEXT, metadata TEXT, "
        "created_at TEXT, updated_at TEXT) ON COMMIT DELETE ROWS"
    )
    pg.commit()


def _add_rejects_source_column(pg: psycopg.Connection[Any]) -> None:
    """Rejects tables made before rejects had their source: add ``source_key`` (NULL for old rows).

    Looked up first: ``ALTER TABLE`` takes an exclusive lock even when the column exists."""
    if pg_value(
        pg,
        "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attname = 'source_key' AND NOT attisdropped",
        (REJECTS_TABLE,),
    ):
        return
    pg.execute(f"ALTER TABLE {quote_identifier(REJECTS_TABLE)} ADD COLUMN IF NOT EXISTS source_key TEXT")


@dataclass
class Batch:
    """One keyset page: every row read, the rows to write with their vectors, the rows quarantined.

    ``cursor`` is the backfill's keyset position; a caller with its own checkpoint (the import run,
    ``write_batch(save_checkpoint=...)``) leaves it None."""

    read: list[Row]
    rows: list[Row]
    vectors: np.ndarray
    rejects: list[Reject]
    cursor: Cursor | None


class PackedVector(bytes):
    """A vector already in pgvector's binary wire format (``>HH`` dims, 0, then ``>f4`` values)."""


def _pack_vectors(vectors: np.ndarray) -> list[PackedVector]:
    """Encode a whole batch at once with numpy instead of one pgvector dumper call per row."""
    header = struct.pack(">HH", vectors.shape[1], 0)
    big_endian = np.ascontiguousarray(vectors, dtype=">f4")
    return [PackedVector(header + row.tobytes()) for row in big_endian]


def register_packed_vectors(pg: psycopg.Connection[Any]) -> None:
    """On this connection only, dump the ``vector`` type from :class:`PackedVector` bytes as they are."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    oid = pg_value(pg, "SELECT 'vector'::regtype::oid")

    class PackedVectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj  # already the wire format

    PackedVectorDumper.oid = oid
    pg.adapters.register_dumper(PackedVector, PackedVectorDumper)


def write_batch(
    pg: psycopg.Connection[Any],
    table: str,
    batch: Batch,
    model_id: str,
    dimensions: int,
    rows_before: int,
    run_id: str,
    *,
    owner: str,
    clear_rejects: bool = False,
    save_checkpoint: Callable[[psycopg.Cursor[Any], int], None] | None = None,
) -> tuple[int, list[Reject]]:
    """Upsert the batch as ``owner``'s rows and commit it with its rejects and checkpoint; returns
    (rows written, rejects).

    A row another source owns is not overwritten: the upsert checks the owner in the same statement
    and the row becomes an :class:`~memwork.migrate.ownership.OwnedElsewhere` reject. The
    batch is tried whole first (inside a savepoint); an error that blames the values is retried row by
    row, each row in its own savepoint, so one poison row costs only itself. The checkpoint is the
    backfill's keyset cursor, or ``save_checkpoint(cur, rows_total)`` (the import run's own checkpoint
    table) -- either way in the batch's transaction. A row's own ``embedding_model`` key, when present,
    overrides ``model_id`` (vectors kept from a source carry their model)."""
    rejects = list(batch.rejects)
    with pg.transaction(), pg.cursor() as cur:
        written: list[Row] = []
        if batch.rows:
            failed: list[Reject] = []
            try:
                with pg.transaction():
                    done = _upsert(cur, table, batch.rows, batch.vectors, model_id, owner)
            except Exception as exc:
                if not blames_rows(exc):
                    raise
                done, failed = _upsert_one_by_one(pg, cur, table, batch, model_id, owner)
            failed_ids = {reject.id for reject in failed}
            written = [row for row in batch.rows if row["id"] in done]
            left = [row for row in batch.rows if row["id"] not in done]
            rejects += failed
            rejects += _owned_elsewhere(cur, table, [r for r in left if printable(r["id"]) not in failed_ids])
        if clear_rejects and written:
            clear_written_rejects(cur, table, written, source_key=owner)
        if rejects:
            store_rejects(cur, table, rejects, run_id, source_key=owner)
        if save_checkpoint is not None:
            save_checkpoint(cur, rows_before + len(written))
        else:
            assert batch.cursor is not None  # a backfill batch
            store_checkpoint(cur, table, batch.cursor, rows_before + len(written), model_id, dimensions)
    # leaving pg.transaction() commits; the stage table empties itself ON COMMIT
    return len(written), rejects


def _owned_elsewhere(cur: psycopg.Cursor[Any], table: str, taken: list[Row]) -> list[OwnedElsewhere]:
    """The rows the upsert left alone, each named with the source that owns it (locked since the
    upsert, so the owner read here is the one that stands at commit)."""
    if not taken:
        return []
    owner = owners_of(cur, table, [row["id"] for row in taken])
    return [OwnedElsewhere.taken(row, table, owner.get(row["id"], "an unknown writer")) for row in taken]


def _upsert_one_by_one(
    pg: psycopg.Connection[Any],
    cur: psycopg.Cursor[Any],
    table: str,
    batch: Batch,
    model_id: str,
    owner: str,
) -> tuple[set[str], list[Reject]]:
    done: set[str] = set()
    rejects: list[Reject] = []
    for k in _in_table_order(cur, batch.rows):
        row = batch.rows[k]
        try:
            with pg.transaction():
                got = _upsert(cur, table, [row], batch.vectors[k : k + 1], model_id, owner)
                cur.execute(f"DELETE FROM {STAGE_TABLE}")  # the next row's INSERT must not see it
        except Exception as exc:
            if not blames_rows(exc):
                raise
            rejects.append(Reject.of(row, f"postgresql: {reject_reason(exc)}"))
            continue
        done |= got
    return done, rejects


def _in_table_order(cur: psycopg.Cursor[Any], rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Positions of ``rows`` in the table's id order (its collation, as the upsert's ORDER BY sorts)."""
    cur.execute(
        "SELECT k - 1 FROM unnest(%s::text[]) WITH ORDINALITY AS r(id, k) ORDER BY id, k",
        ([printable(row["id"]) for row in rows],),
    )
    return [int(r[0]) for r in cur.fetchall()]


def _upsert(
    cur: psycopg.Cursor[Any],
    table: str,
    rows: Sequence[Mapping[str, Any]],
    vectors: np.ndarray,
    model_id: str,
    owner: str,
) -> set[str]:
    """COPY ``rows`` into the staging table, then one ``INSERT ... ON CONFLICT`` into ``table`` that
    touches only ``owner``'s rows; returns the ids written."""
    columns = ", ".join(_DEST_COLUMNS)
    with cur.copy(f"COPY {STAGE_TABLE} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_COPY_TYPES)
        for row, vector in zip(rows, _pack_vectors(vectors), strict=True):
            copy.write_row(
                (
                    row["id"],
                    row["user_id"],
                    row["content"],
                    vector,
                    row.get("embedding_model") or model_id,
                    row["type"] or "fact",
                    row["source_session_id"],
                    row["source_message_id"],
                    row["metadata"],
                    row["created_at"],
                    row["updated_at"],
                )
            )
    metadata, params = stamped_metadata_sql("parsed.m", owner)
    values = [_SELECTED.get(c, c) for c in _DEST_COLUMNS]
    values[_DEST_COLUMNS.index("metadata")] = metadata
    # in id order: every writer locks the rows it meets in one order, so two never deadlock
    select_sql = (
        f"SELECT {', '.join(values)} FROM {STAGE_TABLE} "
        "CROSS JOIN LATERAL (SELECT coalesce(metadata::jsonb, '{}'::jsonb) AS m) AS parsed "
        "ORDER BY source_memory_id"
    )
    cur.execute(upsert_sql(table, _DEST_COLUMNS, select_sql), params)
    return {str(r[0]) for r in cur.fetchall()}
