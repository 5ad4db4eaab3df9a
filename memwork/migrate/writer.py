"""The PostgreSQL side of every migration: binary COPY into a staging table, one ``INSERT ... ON CONFLICT``
per page, committed with its rejects and its checkpoint in one transaction, on a writer thread that
overlaps the next page's reading and embedding.

Every write goes through :func:`write_batch` with its ``owner`` (:func:`memwork.migrate.ownership.owner_of`):
a row another source owns is never overwritten -- the upsert itself checks the owner
(:mod:`memwork.migrate.ownership`) and the record is quarantined, naming the owner."""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.contracts import Row
from memwork.db import pg_value
from memwork.migrate.checkpoint import (
    ImportCheckpoint,
    create_or_upgrade_checkpoint_table,
    store_import_checkpoint,
)
from memwork.migrate.ownership import OwnedElsewhere, owners_of, stamped_metadata_sql, upsert_sql
from memwork.migrate.quarantine import (
    Reject,
    blames_rows,
    clear_written_rejects,
    ensure_rejects_table,
    printable,
    reject_reason,
    store_rejects,
)
from memwork.pgvector.schema import lock_ddl

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


@dataclass(frozen=True)
class PageMark:
    """Where a page was read and what it means for the checkpoint (:meth:`ImportCheckpoint.after_page`)."""

    read_cursor: str | None
    next_cursor: str | None
    finished: bool
    rows_read: int


@dataclass
class Batch:
    """One page: the rows to write with their vectors, the rows quarantined, and its checkpoint mark."""

    rows: list[Row]
    vectors: np.ndarray
    rejects: list[Reject]
    mark: PageMark


#: ``(batch, rows written, rejects, checkpoint committed)`` after each committed page
Committed = Callable[[Batch, int, list[Reject], ImportCheckpoint], None]


class BatchWriter:
    """Commits pages (rows + rejects + checkpoint, one transaction each) on its own thread, in order.

    While PostgreSQL merges page *n* (the thread waits on the socket, GIL released) the caller reads
    and embeds page *n+1*. At most one page waits in the queue, so memory stays bounded. The writer
    owns the running checkpoint: each page moves it (:meth:`ImportCheckpoint.after_page`, then the
    rows written), so the totals are exactly what was committed. A write error that blames the rows
    is retried row by row (the failing rows are quarantined); any other write error stops the run:
    ``submit`` and ``__exit__`` re-raise it in the caller's thread.
    """

    def __init__(
        self,
        pg: psycopg.Connection[Any],
        table: str,
        *,
        owner: str,
        model_id: str,
        checkpoint: ImportCheckpoint,
        has_rejects: bool,
        committed: Committed,
    ) -> None:
        self.pg, self.table, self.owner, self.model_id = pg, table, owner, model_id
        self.checkpoint, self.has_rejects, self.committed = checkpoint, has_rejects, committed
        self.merge = merge_statement(table, owner)  # the same statement for every page
        self.pending: queue.Queue[Batch | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="memwork-migration-writer", daemon=True)

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
                mark = batch.mark
                page = self.checkpoint.after_page(
                    read_cursor=mark.read_cursor,
                    next_cursor=mark.next_cursor,
                    finished=mark.finished,
                    rows_read=mark.rows_read,
                    run_id=self.checkpoint.run_id,
                )
                written, rejects, stored = write_batch(
                    self.pg,
                    self.table,
                    batch,
                    self.model_id,
                    page,
                    owner=self.owner,
                    clear_rejects=self.has_rejects,
                    merge=self.merge,
                )
                assert stored is not None  # a page's checkpoint is always stored
                self.checkpoint = stored
                self.has_rejects = self.has_rejects or bool(rejects)
                self.committed(batch, written, rejects, self.checkpoint)
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc


def prepare_session(pg: psycopg.Connection[Any]) -> None:
    """The bookkeeping tables (checkpoints, rejects; created or upgraded if needed, in one DDL-locked
    transaction) and this session's staging table."""
    with pg.transaction():
        lock_ddl(pg)
        ensure_rejects_table(pg)
        create_or_upgrade_checkpoint_table(pg)
    pg.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ("
        "source_memory_id TEXT, user_id TEXT, content TEXT, embedding vector, embedding_model TEXT, "
        "type TEXT, source_session_id TEXT, source_message_id TEXT, metadata TEXT, "
        "created_at TEXT, updated_at TEXT) ON COMMIT DELETE ROWS"
    )
    pg.commit()


class PackedVector(bytes):
    """A vector already in pgvector's binary wire format (``>HH`` dims, 0, then ``>f4`` values)."""


def _pack_vectors(vectors: np.ndarray) -> list[PackedVector]:
    """Encode a whole batch at once with numpy instead of one pgvector dumper call per row."""
    header = struct.pack(">HH", vectors.shape[1], 0)
    big_endian = np.ascontiguousarray(vectors, dtype=">f4")
    return [PackedVector(header + row.tobytes()) for row in big_endian]


def register_packed_vectors(pg: psycopg.Connection[Any]) -> None:
    """On this connection only, dump the ``vector`` type from :class:`PackedVector` bytes as they are
    (psycopg's own binary bytes dumper, under the ``vector`` type's oid)."""
    from psycopg.types.string import BytesBinaryDumper

    vector = pg.adapters.types.get("vector")  # known once pgvector's register_vector ran
    oid = vector.oid if vector is not None else pg_value(pg, "SELECT 'vector'::regtype::oid")

    class PackedVectorDumper(BytesBinaryDumper):
        """The bytes as they are: already the wire format."""

    PackedVectorDumper.oid = oid
    pg.adapters.register_dumper(PackedVector, PackedVectorDumper)


def write_batch(
    pg: psycopg.Connection[Any],
    table: str,
    batch: Batch,
    model_id: str,
    checkpoint: ImportCheckpoint | None,
    *,
    owner: str,
    clear_rejects: bool = False,
    run_id: str | None = None,
    merge: tuple[str, tuple[str, ...]] | None = None,
) -> tuple[int, list[Reject], ImportCheckpoint | None]:
    """Upsert the page as ``owner``'s rows and commit it with its rejects and ``checkpoint`` (the
    page's mark already applied; its rows written are added here); returns (rows written, rejects,
    the checkpoint committed).

    A row another source owns is not overwritten: the upsert checks the owner in the same statement
    and the row becomes an :class:`~memwork.migrate.ownership.OwnedElsewhere` reject. The page is
    tried whole first (inside a savepoint); an error that blames the values is retried row by row,
    each row in its own savepoint, so one poison row costs only itself. A row's own
    ``embedding_model`` key, when present, overrides ``model_id`` (vectors kept from a source carry
    their model). ``checkpoint`` None: a write outside the import's paging (a repair, whose own
    ``run_id`` then marks its rejects) -- the import's checkpoint is left as it is. ``merge``: the
    :func:`merge_statement` of (``table``, ``owner``), when the caller keeps it across pages."""
    merge = merge or merge_statement(table, owner)
    rejects = list(batch.rejects)
    with pg.transaction(), pg.cursor() as cur:
        written: list[Row] = []
        if batch.rows:
            failed: list[Reject] = []
            try:
                with pg.transaction():
                    done = _upsert(cur, batch.rows, batch.vectors, model_id, merge)
            except Exception as exc:
                if not blames_rows(exc):
                    raise
                done, failed = _upsert_one_by_one(pg, cur, batch, model_id, merge)
            failed_ids = {reject.id for reject in failed}
            written = [row for row in batch.rows if row["id"] in done]
            left = [row for row in batch.rows if row["id"] not in done]
            rejects += failed
            rejects += _owned_elsewhere(cur, table, [r for r in left if printable(r["id"]) not in failed_ids])
        if clear_rejects and written:
            clear_written_rejects(cur, table, written, source_key=owner)
        if rejects:
            marked = run_id or (checkpoint.run_id if checkpoint is not None else None) or ""
            store_rejects(cur, table, rejects, marked, source_key=owner)
        if checkpoint is not None:
            checkpoint = checkpoint.with_written(len(written))
            store_import_checkpoint(cur, checkpoint)
    # leaving pg.transaction() commits; the stage table empties itself ON COMMIT
    return len(written), rejects, checkpoint


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
    batch: Batch,
    model_id: str,
    merge: tuple[str, tuple[str, ...]],
) -> tuple[set[str], list[Reject]]:
    done: set[str] = set()
    rejects: list[Reject] = []
    for k in _in_table_order(cur, batch.rows):
        row = batch.rows[k]
        try:
            with pg.transaction():
                got = _upsert(cur, [row], batch.vectors[k : k + 1], model_id, merge)
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


def merge_statement(table: str, owner: str) -> tuple[str, tuple[str, ...]]:
    """The ``INSERT ... ON CONFLICT`` (and its parameters) that moves the staged page into ``table``,
    touching only ``owner``'s rows: built once per run, the same for every page."""
    metadata, params = stamped_metadata_sql("parsed.m", owner)
    values = [_SELECTED.get(c, c) for c in _DEST_COLUMNS]
    values[_DEST_COLUMNS.index("metadata")] = metadata
    # in id order: every writer locks the rows it meets in one order, so two never deadlock
    select_sql = (
        f"SELECT {', '.join(values)} FROM {STAGE_TABLE} "
        "CROSS JOIN LATERAL (SELECT coalesce(metadata::jsonb, '{}'::jsonb) AS m) AS parsed "
        "ORDER BY source_memory_id"
    )
    return upsert_sql(table, _DEST_COLUMNS, select_sql), params


def _upsert(
    cur: psycopg.Cursor[Any],
    rows: Sequence[Mapping[str, Any]],
    vectors: np.ndarray,
    model_id: str,
    merge: tuple[str, tuple[str, ...]],
) -> set[str]:
    """COPY ``rows`` into the staging table, then the :func:`merge_statement` into the table;
    returns the ids written."""
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
    cur.execute(*merge)
    return {str(r[0]) for r in cur.fetchall()}
