"""The PostgreSQL side of every migration: binary COPY into a staging table, one ``INSERT ... ON CONFLICT``
per page, committed with its rejects and its checkpoint in one transaction, on a writer thread that
overlaps the next page's reading and embedding.

Every write goes through :func:`write_batch` with its ``owner`` (:func:`memwork.migrate.ownership.owner_of`):
a row another source owns is never overwritten -- the upsert itself checks the owner
(:mod:`memwork.migrate.ownership`) and the record is quarantined, naming the owner."""

from __future__ import annotations

import json
import queue
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.contracts import Row
from memwork.db import pg_value
from memwork.identifiers import quote_identifier
from memwork.migrate.checkpoint import (
    ImportCheckpoint,
    create_or_upgrade_checkpoint_table,
    store_import_checkpoint,
)
from memwork.migrate.ownership import (
    LEGACY_OWNER,
    SOURCE_MARKER,
    OwnedElsewhere,
    owners_of,
    stamped_metadata_sql,
    upsert_sql,
)
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
from memwork.pgvector.wire import register_packed_vector_dumper

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

#: the fast path's COPY straight into the table: metadata and timestamps as the table's own types
_DIRECT_TYPES = [*_COPY_TYPES[:8], "jsonb", "timestamptz", "timestamptz"]

#: SQLSTATEs after which the fast path gives the page to the upsert: an id that appeared meanwhile
#: (another source's run), or two such runs inserting the same new ids in another order
_TAKEN_MEANWHILE = ("23505", "40P01")


@dataclass(frozen=True)
class PageMark:
    """Where a page was read and what it means for the checkpoint (:meth:`ImportCheckpoint.after_page`)."""

    read_cursor: str | None
    next_cursor: str | None
    finished: bool
    rows_read: int


@dataclass(frozen=True)
class Prepared:
    """A page's COPY inputs made ahead on the caller's thread (:meth:`BatchWriter.submit`), so the
    writer thread starts its COPY at once -- PostgreSQL does not idle while they are made."""

    owner: str
    packed: list[memoryview]
    #: :func:`_direct_values` for ``owner`` (None: the page needs the merge)
    direct: list[tuple[str, datetime, datetime]] | None


@dataclass
class Batch:
    """One page: the rows to write with their vectors, the rows quarantined, and its checkpoint mark."""

    rows: list[Row]
    vectors: np.ndarray
    rejects: list[Reject]
    mark: PageMark
    prepared: Prepared | None = None


def prepared(batch: Batch, owner: str) -> Batch:
    """``batch`` with its COPY inputs for ``owner`` made now (see :class:`Prepared`)."""
    if not batch.rows:
        return batch
    ready = Prepared(owner, _pack_vectors(batch.vectors), _direct_values(batch.rows, owner))
    return replace(batch, prepared=ready)


#: ``(batch, rows written, rejects, checkpoint committed)`` after each committed page
Committed = Callable[[Batch, int, list[Reject], ImportCheckpoint], None]


#: pages read and embedded ahead of the one being written (a page of 2,000 rows is ~4 MB here)
PAGES_AHEAD = 2


class BatchWriter:
    """Commits pages (rows + rejects + checkpoint, one transaction each) on its own thread, in order.

    While PostgreSQL merges page *n* (the thread waits on the socket, GIL released) the caller reads
    and embeds the next pages. At most :data:`PAGES_AHEAD` pages wait in the queue, so memory stays
    bounded. The writer owns the running checkpoint: each page moves it
    (:meth:`ImportCheckpoint.after_page`, then the rows written), so the totals are exactly what was
    committed. A write error that blames the rows is retried row by row (the failing rows are
    quarantined); any other write error stops the run: ``submit`` and ``__exit__`` re-raise it in the
    caller's thread.
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
        self.fast = FastPath(adaptive=True)
        self.pending: queue.Queue[Batch | None] = queue.Queue(maxsize=PAGES_AHEAD)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="memwork-migration-writer", daemon=True)

    def __enter__(self) -> BatchWriter:
        self.thread.start()
        return self

    def submit(self, batch: Batch) -> None:
        """Queue ``batch`` (its COPY inputs made here, on the caller's thread: :class:`Prepared`)."""
        batch = prepared(batch, self.owner)
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
                    fast=self.fast,
                )
                assert stored is not None  # a page's checkpoint is always stored
                self.checkpoint = stored
                self.has_rejects = self.has_rejects or bool(rejects)
                self.committed(batch, written, rejects, self.checkpoint)
            flush_commits(self.pg)
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc


def flush_commits(pg: psycopg.Connection[Any]) -> None:
    """Wait until every page committed so far is on disk: one synchronous commit of a transaction
    with an id flushes the WAL up to it, so the pages' asynchronous commits before it as well."""
    with pg.transaction():
        pg.execute("SET LOCAL synchronous_commit = on")
        pg.execute("SELECT pg_catalog.txid_current()")


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


def _pack_vectors(vectors: np.ndarray) -> list[memoryview]:
    """Encode a whole batch at once with numpy: one buffer of every row's wire format (header, then
    big-endian values), handed on as one slice per row -- no bytes object per row (a third of the
    cost). A COPY that names the ``vector`` type (``set_types``) dumps a slice as it is."""
    n, dimensions = vectors.shape
    width = 4 + 4 * dimensions
    packed = np.empty((n, width), dtype=np.uint8)
    packed[:, :4] = np.frombuffer(struct.pack(">HH", dimensions, 0), dtype=np.uint8)
    packed[:, 4:] = np.ascontiguousarray(vectors, dtype=">f4").view(np.uint8).reshape(n, 4 * dimensions)
    flat = memoryview(packed.reshape(-1).data)
    return [flat[k : k + width] for k in range(0, n * width, width)]


def register_packed_vectors(pg: psycopg.Connection[Any]) -> None:
    """On this connection only, dump the ``vector`` type from packed wire-form bytes as they are
    (:func:`memwork.pgvector.wire.register_packed_vector_dumper`), and ``jsonb`` from JSON text as it
    is (:func:`register_raw_jsonb`)."""
    register_raw_jsonb(pg)
    vector = pg.adapters.types.get("vector")  # known once pgvector's register_vector ran
    oid = vector.oid if vector is not None else pg_value(pg, "SELECT 'vector'::regtype::oid")
    register_packed_vector_dumper(pg, oid)


def register_raw_jsonb(pg: psycopg.Connection[Any]) -> None:
    """On this connection only, a binary ``jsonb`` dumper that sends JSON *text* as it is
    (PostgreSQL parses it, as ``::jsonb`` in the merge does) instead of encoding the text as a JSON
    string; any other value is JSON-encoded. The fast path's COPY chooses dumpers by type oid."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class RawJsonbDumper(Dumper):
        """``jsonb``'s binary format: version 1, then the JSON text."""

        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            text = obj if isinstance(obj, str) else json.dumps(obj)
            return b"\x01" + text.encode()

    RawJsonbDumper.oid = pg_value(pg, "SELECT 'jsonb'::regtype::oid")
    pg.adapters.register_dumper(None, RawJsonbDumper)  # by oid only: COPY set_types(["jsonb"])


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
    fast: FastPath | None = None,
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
    :func:`merge_statement` of (``table``, ``owner``), when the caller keeps it across pages.
    ``fast``: what the previous pages taught the fast path (:class:`FastPath`), kept across pages."""
    merge = merge or merge_statement(table, owner)
    if batch.rows:
        tail = (owner, clear_rejects, run_id)
        committed = _write_new(pg, table, batch, model_id, checkpoint, tail, fast or FastPath())
        if committed is not None:
            return committed
    rejects = list(batch.rejects)
    written: list[Row] = []
    with pg.transaction(), pg.cursor() as cur:
        _defer_flush(cur, checkpoint)
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
        checkpoint = _page_tail(cur, table, written, rejects, checkpoint, (owner, clear_rejects, run_id))
    # leaving pg.transaction() commits; the stage table empties itself ON COMMIT
    return len(written), rejects, checkpoint


def _defer_flush(cur: psycopg.Cursor[Any], checkpoint: ImportCheckpoint | None) -> None:
    """A page of a run commits without waiting for the WAL on disk: its rows and its checkpoint
    commit together, so a commit a server crash loses takes both, and the resume reads that page
    again. The run's end waits for all of them (:func:`flush_commits`). A lone write waits."""
    if checkpoint is not None:
        cur.execute("SET LOCAL synchronous_commit = off")


def _page_tail(
    cur: psycopg.Cursor[Any],
    table: str,
    written: Sequence[Row],
    rejects: list[Reject],
    checkpoint: ImportCheckpoint | None,
    tail: tuple[str, bool, str | None],
) -> ImportCheckpoint | None:
    """What every page stores after its rows, in their transaction: its rejects (clearing the ones
    written now) and its checkpoint; ``tail`` is (owner, clear_rejects, run_id)."""
    owner, clear_rejects, run_id = tail
    if clear_rejects and written:
        clear_written_rejects(cur, table, written, source_key=owner)
    if rejects:
        marked = run_id or (checkpoint.run_id if checkpoint is not None else None) or ""
        store_rejects(cur, table, rejects, marked, source_key=owner)
    if checkpoint is not None:
        checkpoint = checkpoint.with_written(len(written))
        store_import_checkpoint(cur, checkpoint)
    return checkpoint


class _StepAside(Exception):
    """The fast path found one of its page's ids in the table: the upsert takes the page."""


def _write_new(
    pg: psycopg.Connection[Any],
    table: str,
    batch: Batch,
    model_id: str,
    checkpoint: ImportCheckpoint | None,
    tail: tuple[str, bool, str | None],
    fast: FastPath,
) -> tuple[int, list[Reject], ImportCheckpoint | None] | None:
    """The fast path of a page whose ids are all new to ``table`` (a first migration): one binary
    COPY straight into the table -- no staging copy, no speculative insertion, no savepoint -- then
    the page's rejects and checkpoint, one transaction; returns what :func:`write_batch` returns.

    None, with nothing of it left (rolled back), and the caller upserts the page: when a row's
    values need the merge's SQL (metadata to stamp, timestamps that are not plain ISO text), when
    one of the ids is already in the table (its owner decides: the upsert checks it), or when the
    COPY fails on an id written meanwhile or on a value (the upsert then tells which rows)."""
    ready = batch.prepared if batch.prepared is not None and batch.prepared.owner == tail[0] else None
    values = ready.direct if ready is not None else _direct_values(batch.rows, tail[0])
    if values is None:
        return None
    target = quote_identifier(table)
    rejects = list(batch.rejects)
    try:
        with pg.transaction(), pg.cursor() as cur:
            _defer_flush(cur, checkpoint)
            if fast.check_first and _any_taken(cur, target, batch.rows):
                raise _StepAside
            packed = ready.packed if ready is not None else _pack_vectors(batch.vectors)
            _copy_direct(cur, target, batch, packed, values, model_id)
            checkpoint = _page_tail(cur, table, batch.rows, rejects, checkpoint, tail)
    except _StepAside:
        return None
    except Exception as exc:
        if getattr(exc, "sqlstate", None) in _TAKEN_MEANWHILE or blames_rows(exc):
            fast.check_first = True
            return None
        raise
    fast.check_first = not fast.adaptive
    return len(batch.rows), rejects, checkpoint


def _any_taken(cur: psycopg.Cursor[Any], target: str, rows: Sequence[Mapping[str, Any]]) -> bool:
    ids = [str(row["id"]) for row in rows]
    cur.execute(f"SELECT EXISTS (SELECT 1 FROM {target} WHERE source_memory_id = ANY(%s))", (ids,))
    found = cur.fetchone()
    return found is None or bool(found[0])


@dataclass
class FastPath:
    """Whether the fast path looks for the page's ids in the table before its COPY.

    A lone call checks every time (``adaptive`` False). A run's writer checks until a page had none
    of its ids in the table, then trusts that the key range stays new -- each check costs an index
    probe per row -- until a COPY fails on an id already there (the page is then upserted, and the
    next pages are checked again), so a re-run pays the check, not a failed COPY, per page."""

    adaptive: bool = False
    check_first: bool = True


def _copy_row(
    row: Mapping[str, Any], vector: Any, model_id: str, metadata: Any, created: Any, updated: Any
) -> tuple[Any, ...]:
    """One row in ``_DEST_COLUMNS`` order for a binary COPY (the table's or the staging table's)."""
    return (
        row["id"],
        row["user_id"],
        row["content"],
        vector,
        row.get("embedding_model") or model_id,
        row["type"] or "fact",
        row["source_session_id"],
        row["source_message_id"],
        metadata,
        created,
        updated,
    )


def _copy_direct(
    cur: psycopg.Cursor[Any],
    target: str,
    batch: Batch,
    packed: list[memoryview],
    values: list[tuple[str, datetime, datetime]],
    model_id: str,
) -> None:
    columns = ", ".join(_DEST_COLUMNS)
    with cur.copy(f"COPY {target} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_DIRECT_TYPES)
        for row, vector, (metadata, created, updated) in zip(batch.rows, packed, values, strict=True):
            copy.write_row(_copy_row(row, vector, model_id, metadata, created, updated))


def _direct_values(
    rows: Sequence[Mapping[str, Any]], owner: str
) -> list[tuple[str, datetime, datetime]] | None:
    """Each row's (metadata text, created_at, updated_at) exactly as the merge would store them,
    or None when one row needs the merge's SQL.

    Metadata: the backfill's text when it cannot hold a marker (neither ``_memworkSource`` nor a
    ``\\u`` escape in it; NULL as ``{}``); an import's object when its marker already names
    ``owner`` (:func:`memwork.migrate.rows.record_row` sets it). Timestamps: naive ISO text read as
    UTC (``::timestamp AT TIME ZONE 'UTC'``)."""
    texts: list[str] = []
    legacy = owner == LEGACY_OWNER
    for row in rows:
        metadata = row["metadata"]
        if metadata is None and legacy:
            metadata = "{}"
        elif not isinstance(metadata, str):
            return None
        elif legacy:
            if SOURCE_MARKER in metadata or "\\u" in metadata:
                return None
        elif not _marked_by(metadata, owner):
            return None
        texts.append(metadata)
    created = _utc_all([row["created_at"] for row in rows])
    updated = _utc_all([row["updated_at"] for row in rows]) if created is not None else None
    if created is None or updated is None:
        return None
    return list(zip(texts, created, updated, strict=True))


def _marked_by(text: str, owner: str) -> bool:
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get(SOURCE_MARKER) == owner


def _utc_all(texts: list[object]) -> list[datetime] | None:
    """A page's timestamps, each ``YYYY-MM-DD[ T]HH:MM:SS[.ffffff]`` as an aware UTC datetime (one
    loop, no call per text); None when one is anything else."""
    parse = datetime.fromisoformat
    out: list[datetime] = []
    try:
        for text in texts:
            if not isinstance(text, str) or len(text) < 19 or text[4] != "-" or text[10] not in " T":
                return None
            moment = parse(text)
            if moment.tzinfo is not None:
                return None
            out.append(moment.replace(tzinfo=UTC))
    except ValueError:
        return None
    return out


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
                _copy_row(row, vector, model_id, row["metadata"], row["created_at"], row["updated_at"])
            )
    cur.execute(*merge)
    return {str(r[0]) for r in cur.fetchall()}
