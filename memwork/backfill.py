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
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import String, Text, and_, cast, func, or_, select, type_coerce

from memwork.embed import Embedder, embed_memories
from memwork.entry import as_utc
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.legacy.schema import memory_items
from memwork.pgvector.conn import mysql_errors, pg_connection
from memwork.pgvector.schema import CHECKPOINT_TABLE, DEFAULT_TABLE, checkpoint_table_sql, table_dimensions

DEFAULT_BATCH_SIZE = 500
MAX_BATCH_SIZE = 50_000
SMOKE_PREFIX = "memory-v2-smoke-"
STAGE_TABLE = "memwork_backfill_stage"
REJECTS_TABLE = "memwork_backfill_rejects"
MAX_LISTED_REJECTS = 50
_REASON_CHARS = 300
# SQLSTATE classes that blame the row's values, not the server or the schema: data exception (22),
# integrity constraint violation (23), program limit exceeded (54: e.g. a value too large to index)
_ROW_ERROR_CLASSES = ("22", "23", "54")
_ID_CHUNK = 5000
_SOURCE_COLUMNS = (
    memory_items.c.id,
    memory_items.c.user_id,
    memory_items.c.content,
    memory_items.c.type,
    # metadata and timestamps travel as text: no JSON decode/encode or datetime objects per row in
    # Python; PostgreSQL casts them once in the merge (``::jsonb``, ``AT TIME ZONE 'UTC'``)
    type_coerce(memory_items.c.metadata, Text).label("metadata"),
    memory_items.c.source_session_id,
    memory_items.c.source_message_id,
    cast(memory_items.c.created_at, String).label("created_at"),
    cast(memory_items.c.updated_at, String).label("updated_at"),
)
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
_COPY_TYPES = ["text", "text", "text", "vector", "text", "text", "text", "text", "text", "text", "text"]

Progress = Callable[[int, int | None], None]
"""``progress(rows_just_done, total_planned)``: called once with 0 before the first batch, then per batch."""


# ---- cursor -------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Cursor:
    """A keyset position ``(updated_at, id)``: rows strictly after it come next. Naive UTC, like MySQL."""

    updated_at: datetime
    id: str

    @classmethod
    def parse(cls, updated_at: object, id: object = "") -> Cursor:
        """From CLI/JSON values: ISO 8601 text or epoch seconds (``0`` = the beginning), and an id."""
        if isinstance(updated_at, str) and updated_at.strip().lstrip("-").replace(".", "", 1).isdigit():
            updated_at = float(updated_at)
        try:
            moment = as_utc(updated_at)  # type: ignore[arg-type]
        except (UsageError, OverflowError, OSError, ValueError):
            raise UsageError("cursor_updated_at", updated_at, "must be ISO 8601 or epoch seconds") from None
        if not isinstance(id, str):
            raise UsageError("cursor_id", id, "must be a string")
        return cls(moment.astimezone(UTC).replace(tzinfo=None), id)

    def to_json(self) -> dict[str, str]:
        return {"updatedAt": self.updated_at.isoformat(timespec="microseconds"), "id": self.id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cursor:
        return cls.parse(data.get("updatedAt"), data.get("id", ""))


# ---- options and report -------------------------------------------------------------------------
@dataclass
class BackfillOptions:
    """What one backfill run does. Dry run (``apply=False``) needs only ``mysql_url``."""

    mysql_url: str | None = None
    database_url: str | None = None
    apply: bool = False
    embedder: Embedder | None = None
    table: str = DEFAULT_TABLE
    batch_size: int = DEFAULT_BATCH_SIZE
    limit: int | None = None
    cursor: Cursor | None = None
    resume: bool = False
    prune_inactive: bool = False
    sample_size: int = 5
    checkpoint_path: Path | None = None

    def validate(self, *, require_embedder: bool = True) -> None:
        """Every input problem as one usage error naming the field and value, before any I/O.

        The CLI checks everything else first (``require_embedder=False``) so a bad flag is reported
        before a large model is loaded."""
        check_identifier(self.table)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise UsageError("batch_size", self.batch_size, "must be an integer")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise UsageError("batch_size", self.batch_size, f"must be from 1 to {MAX_BATCH_SIZE}")
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise UsageError("limit", self.limit, "must be a positive integer")
        if self.resume and self.cursor is not None:
            raise UsageError("resume", True, "cannot be combined with --cursor-updated-at/--cursor-id")
        if not self.mysql_url:
            raise UsageError("mysql_url", self.mysql_url, "set MEMORY_BACKFILL_MYSQL_URL or --mysql-url")
        if not self.apply:
            return
        if not self.database_url:
            raise UsageError(
                "database_url",
                self.database_url,
                "--apply needs MEMORY_PGVECTOR_DATABASE_URL or --database-url",
            )
        if require_embedder and self.embedder is None:
            raise UsageError("embedder", None, "--apply needs --embedder SPEC or --embedding-module PATH")


@dataclass
class BackfillReport:
    """What a run did (or, in a dry run, would do); ``to_dict`` is the ``--json`` output."""

    mode: str
    table: str
    source: dict[str, int] = field(default_factory=dict)
    planned: int = 0
    rows_read: int = 0
    rows_written: int = 0
    batches: int = 0
    start_cursor: dict[str, str] | None = None
    first_checkpoint: dict[str, str] | None = None
    last_checkpoint: dict[str, str] | None = None
    resumed: bool = False
    sample: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    dimensions: int | None = None
    inactive: dict[str, Any] | None = None
    models_in_table: dict[str, int] | None = None
    elapsed_seconds: float = 0.0
    rows_per_second: float = 0.0
    checkpoint_file: str | None = None
    run_id: str | None = None
    rows_quarantined: int = 0
    quarantined: list[dict[str, str]] = field(default_factory=list)  # the first few {id, reason}
    rejects_table: str | None = None
    rejects_total: int | None = None  # rejects recorded for the table, this run's and earlier ones

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {_camel(k): v for k, v in data.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# ---- public entry point -------------------------------------------------------------------------
def run_backfill(options: BackfillOptions, progress: Progress | None = None) -> BackfillReport:
    """Dry run (MySQL only) or apply (MySQL -> embed -> PostgreSQL), per ``options.apply``."""
    options.validate()
    if options.apply:
        return _apply(options, progress)
    return _dry_run(options)


def checkpoint_path(table: str, override: Path | None = None) -> Path:
    """The workspace JSON copy of the checkpoint: ``<workspace>/backfill/<table>.checkpoint.json``."""
    if override is not None:
        return override
    from memwork.workspace import workspace_dir

    return workspace_dir() / "backfill" / f"{check_identifier(table)}.checkpoint.json"


def read_json_checkpoint(path: Path) -> Cursor | None:
    """The cursor saved in the workspace JSON copy, or None when there is none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError("checkpoint", str(path), f"unreadable: {exc}") from None
    return Cursor.from_json(data.get("cursor") or {})


# ---- dry run ------------------------------------------------------------------------------------
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
        report.source = _status_counts(conn)
        remaining = _count_after(conn, cursor)
        report.planned = remaining if options.limit is None else min(remaining, options.limit)
        first = _read_batch(conn, cursor, max(options.sample_size, 1))
        report.sample = [_sample(row) for row in first[: min(options.sample_size, report.planned)]]
        if first:
            report.first_checkpoint = _cursor_of(first[0]).to_json()
            last = _last_cursor(conn, cursor, options.limit)
            report.last_checkpoint = last.to_json() if last else None
    report.rows_read = report.planned
    return report


def _status_counts(conn: Any) -> dict[str, int]:
    rows = conn.execute(select(memory_items.c.status, func.count()).group_by(memory_items.c.status)).all()
    counts = {str(status): int(n) for status, n in rows}
    counts["total"] = sum(counts.values())
    counts.setdefault("active", 0)
    return counts


def _after(cursor: Cursor | None) -> Any:
    """The keyset predicate: active rows strictly after ``cursor`` in (updated_at, id) order."""
    active = memory_items.c.status == "active"
    if cursor is None:
        return active
    t = memory_items.c
    return and_(
        active,
        or_(t.updated_at > cursor.updated_at, and_(t.updated_at == cursor.updated_at, t.id > cursor.id)),
    )


def _count_after(conn: Any, cursor: Cursor | None) -> int:
    return int(conn.execute(select(func.count()).select_from(memory_items).where(_after(cursor))).scalar())


def _read_batch(conn: Any, cursor: Cursor | None, size: int) -> list[dict[str, Any]]:
    """The next ``size`` active rows after ``cursor``, keyset order, never OFFSET.

    The Core statement runs on the DBAPI cursor (half the per-row cost of SQLAlchemy result rows),
    and the read transaction ends right after, so a long backfill never pins an InnoDB snapshot.
    """
    query = (
        select(*_SOURCE_COLUMNS)
        .where(_after(cursor))
        .order_by(memory_items.c.updated_at, memory_items.c.id)
        .limit(size)
    )
    if conn.dialect.name not in ("mysql", "mariadb"):
        # SQLite and others: SQLAlchemy's result processing turns stored text back into datetimes/JSON.
        rows = [dict(row) for row in conn.execute(query).mappings()]
        conn.rollback()
        return rows
    compiled = query.compile(dialect=conn.dialect)
    dbapi = conn.connection.dbapi_connection
    cur = dbapi.cursor()
    try:
        cur.execute(str(compiled), compiled.params)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        cur.close()
        dbapi.rollback()
    return rows


def _iter_batches(
    conn: Any, cursor: Cursor | None, planned: int, batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    """Keyset pages of at most ``batch_size`` rows until ``planned`` rows were read or none are left."""
    done = 0
    while done < planned:
        rows = _read_batch(conn, cursor, min(batch_size, planned - done))
        if not rows:
            return
        done += len(rows)
        cursor = _cursor_of(rows[-1])
        yield rows


def _last_cursor(conn: Any, cursor: Cursor | None, limit: int | None) -> Cursor | None:
    """Where a run of ``limit`` rows would stop: the newest row, or walking keys-only pages to ``limit``."""
    t = memory_items.c
    if limit is None:
        query = select(t.updated_at, t.id).where(_after(cursor)).order_by(t.updated_at.desc(), t.id.desc())
        row = conn.execute(query.limit(1)).first()
        return Cursor(row[0], row[1]) if row else None
    position, left = cursor, limit
    while left > 0:
        step = min(left, _ID_CHUNK)
        query = select(t.updated_at, t.id).where(_after(position)).order_by(t.updated_at, t.id).limit(step)
        keys = conn.execute(query).all()
        if not keys:
            break
        position, left = Cursor(keys[-1][0], keys[-1][1]), left - len(keys)
        if len(keys) < step:
            break
    return position if position != cursor else None


def _cursor_of(row: Mapping[str, Any]) -> Cursor:
    return Cursor(_timestamp(row["updated_at"]), row["id"])


def _timestamp(value: datetime | str) -> datetime:
    """MySQL's ``CAST(datetime AS CHAR)`` text (or a datetime) as a naive UTC datetime."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _sample(row: Mapping[str, Any]) -> dict[str, Any]:
    content = str(row["content"] or "")
    return {
        "id": row["id"],
        "userId": row["user_id"],
        "type": row["type"],
        "updatedAt": _timestamp(row["updated_at"]).isoformat(timespec="microseconds"),
        "content": content if len(content) <= 80 else content[:77] + "...",
    }


# ---- apply --------------------------------------------------------------------------------------
def _apply(options: BackfillOptions, progress: Progress | None) -> BackfillReport:
    from pgvector.psycopg import register_vector

    from memwork.db import get_engine

    embedder = options.embedder
    assert embedder is not None  # validate() guarantees it
    report = BackfillReport(mode="apply", table=options.table, model=embedder.model_id)
    report.dimensions = int(embedder.dimension)
    json_path = checkpoint_path(options.table, options.checkpoint_path)
    report.checkpoint_file = str(json_path)
    started = time.perf_counter()
    with (
        pg_connection(options.database_url or "", autocommit=True) as pg,
        mysql_errors(options.mysql_url or ""),
    ):
        _check_destination(pg, options.table, report.dimensions, embedder.model_id)
        register_vector(pg)
        _register_packed_vectors(pg)
        _prepare(pg)
        cursor = _load_checkpoint(pg, options.table) if options.resume else options.cursor
        report.resumed = options.resume and cursor is not None
        report.start_cursor = cursor.to_json() if cursor else None
        report.run_id, report.rejects_table = _new_run_id(), REJECTS_TABLE
        rows_total = _load_rows_written(pg, options.table) if report.resumed else 0
        engine = get_engine(options.mysql_url or "")
        with engine.connect() as my:
            report.source = _status_counts(my)
            remaining = _count_after(my, cursor)
            report.planned = remaining if options.limit is None else min(remaining, options.limit)
            if progress:
                progress(0, report.planned)
            writer = _BatchWriter(
                pg, options.table, embedder.model_id, json_path, report, progress, rows_total
            )
            row_embedder = _RowEmbedder(embedder, report.dimensions)
            with writer:
                for rows in _iter_batches(my, cursor, report.planned, options.batch_size):
                    good, rejects = _precheck(rows)
                    good, vectors, failed = row_embedder.embed(good)
                    report.rows_read += len(rows)
                    writer.submit(_Batch(rows, good, vectors, rejects + failed, _cursor_of(rows[-1])))
            report.inactive = _inactive(my, pg, options.table, options.prune_inactive)
        report.models_in_table = _models_in_table(pg, options.table)
        report.rejects_total = _count_rejects(pg, options.table)
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    if report.elapsed_seconds > 0:
        report.rows_per_second = round(report.rows_written / report.elapsed_seconds, 1)
    return report


class _BatchWriter:
    """Commits batches (rows + checkpoint, one transaction each) on its own thread, in order.

    While PostgreSQL merges batch *n* (the thread waits on the socket, GIL released) the caller reads
    and embeds batch *n+1*. At most one batch waits in the queue, so memory stays bounded. A write
    error that blames the rows is retried row by row (the failing rows are quarantined); any other
    write error stops the run: ``submit`` and ``__exit__`` re-raise it in the caller's thread.
    """

    def __init__(
        self,
        pg: Any,
        table: str,
        model_id: str,
        json_path: Path,
        report: BackfillReport,
        progress: Progress | None,
        rows_total: int = 0,
    ) -> None:
        self.pg, self.table, self.model_id, self.json_path = pg, table, model_id, json_path
        self.report, self.progress, self.rows_total = report, progress, rows_total
        self.has_rejects = _count_rejects(pg, table) > 0  # only then do written rows clear rejects
        self.pending: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="memwork-backfill-writer", daemon=True)

    def __enter__(self) -> _BatchWriter:
        self.thread.start()
        return self

    def submit(self, batch: _Batch) -> None:
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
                written, rejects = _write_batch(
                    self.pg,
                    self.table,
                    batch,
                    self.model_id,
                    self.report.dimensions or 0,
                    self.rows_total,
                    self.report.run_id or "",
                    clear_rejects=self.has_rejects,
                )
                self.rows_total += written
                self.has_rejects = self.has_rejects or bool(rejects)
                _save_json_checkpoint(self.json_path, self.table, batch.cursor, self.rows_total, self.report)
                self._committed(batch, written, rejects)
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc

    def _committed(self, batch: _Batch, written: int, rejects: list[Reject]) -> None:
        report = self.report
        report.first_checkpoint = report.first_checkpoint or _cursor_of(batch.read[0]).to_json()
        report.last_checkpoint = batch.cursor.to_json()
        report.rows_written += written
        report.rows_quarantined += len(rejects)
        room = MAX_LISTED_REJECTS - len(report.quarantined)
        report.quarantined.extend(reject.to_json() for reject in rejects[: max(room, 0)])
        report.batches += 1
        if self.progress:
            self.progress(len(batch.read), report.planned)


def _check_destination(pg: Any, table: str, dimensions: int, model_id: str) -> None:
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


def _prepare(pg: Any) -> None:
    """Checkpoint and rejects tables (bookkeeping, created if missing) and this session's staging table."""
    pg.execute(checkpoint_table_sql())
    pg.execute(rejects_table_sql())
    pg.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ("
        "source_memory_id TEXT, user_id TEXT, content TEXT, embedding vector, embedding_model TEXT, "
        "type TEXT, source_session_id TEXT, source_message_id TEXT, metadata TEXT, "
        "created_at TEXT, updated_at TEXT) ON COMMIT DELETE ROWS"
    )
    pg.commit()


# ---- quarantine ---------------------------------------------------------------------------------
_TEXT_FIELDS = (
    "id",
    "user_id",
    "content",
    "type",
    "source_session_id",
    "source_message_id",
    "metadata",
    "created_at",
    "updated_at",
)


def rejects_table_sql() -> str:
    """Quarantined source rows: one row per (destination table, source id), cleared once written."""
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(REJECTS_TABLE)} (\n"
        "  target_table TEXT NOT NULL,\n"
        "  source_memory_id TEXT NOT NULL,\n"
        "  source_updated_at TEXT,\n"
        "  reason TEXT NOT NULL,\n"
        "  run_id TEXT NOT NULL,\n"
        "  first_seen TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  last_seen TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  PRIMARY KEY (target_table, source_memory_id)\n"
        ")"
    )


def printable(value: object) -> str:
    """``value`` as text PostgreSQL can store: NUL as ``\\x00``, lone surrogates as ``\\udXXX``.

    Reject ids and reasons pass through it (the id itself may be the poison); the verification
    compares source ids through it too."""
    text = str(value).replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Reject:
    """A source row that could not be written, and why (``id`` is :func:`printable`)."""

    id: str
    reason: str
    updated_at: str

    @classmethod
    def of(cls, row: Mapping[str, Any], reason: str) -> Reject:
        return cls(printable(row["id"]), printable(reason)[:_REASON_CHARS], printable(row["updated_at"]))

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "reason": self.reason}


@dataclass
class _Batch:
    """One keyset page: every row read, the rows to write with their vectors, the rows quarantined."""

    read: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    vectors: np.ndarray
    rejects: list[Reject]
    cursor: Cursor


def _value_problem(row: Mapping[str, Any]) -> str | None:
    """Why PostgreSQL text cannot hold one of the row's values, found before any I/O (or None)."""
    joined = "".join([v for v in map(row.get, _TEXT_FIELDS) if type(v) is str])
    if joined.isascii() and "\x00" not in joined:
        return None  # the common case, at half the cost of the per-field look below
    for name in _TEXT_FIELDS:
        value = row.get(name)
        if not isinstance(value, str):
            continue
        if "\x00" in value:
            return f"{name}: NUL byte at offset {value.index(chr(0))} (PostgreSQL text cannot hold it)"
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{name}: invalid text (lone surrogate at offset {exc.start})"
    return None


def _precheck(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Reject]]:
    """The rows worth embedding, and the rejects whose values can never be written."""
    good: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for row in rows:
        problem = _value_problem(row)
        if problem is None:
            good.append(row)
        else:
            rejects.append(Reject.of(row, problem))
    return good, rejects


def _describe(exc: BaseException) -> str:
    """One line for a reject's reason: the error class, its first line, where PostgreSQL says."""
    first = (str(exc).strip().splitlines() or [""])[0]
    context = getattr(getattr(exc, "diag", None), "context", None) or ""
    where = f" ({context.strip().splitlines()[0]})" if context.strip() else ""
    return f"{type(exc).__name__}: {first}{where}"


class _RowEmbedder:
    """Embeds a batch; when a batch fails, retries it row by row and quarantines the rows that fail.

    A row counts as poison only while the embedder still embeds the last row it embedded well (a
    probe): a broken model or a dead embedding service stops the run instead of quarantining it."""

    def __init__(self, embedder: Embedder, dimensions: int) -> None:
        self.embedder, self.dimensions = embedder, dimensions
        self.last_good: dict[str, Any] | None = None

    def embed(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], np.ndarray, list[Reject]]:
        if not rows:
            return [], np.zeros((0, self.dimensions), dtype=np.float32), []
        try:
            vectors = self._vectors(rows)
        except UsageError:
            raise  # wrong shape for the whole batch: the embedder, not a row
        except Exception as exc:
            return self._one_by_one(rows, exc)
        finite = np.isfinite(vectors).all(axis=1)
        kept = [row for row, ok in zip(rows, finite, strict=True) if ok]
        if not kept and not self._still_works():
            raise UsageError("embedder", self.embedder.model_id, "returned non-finite values")
        if kept:
            self.last_good = kept[-1]
        rejects = [
            Reject.of(row, "embedder returned non-finite values")
            for row, ok in zip(rows, finite, strict=True)
            if not ok
        ]
        return kept, vectors[finite], rejects

    def _one_by_one(
        self, rows: list[dict[str, Any]], batch_error: Exception
    ) -> tuple[list[dict[str, Any]], np.ndarray, list[Reject]]:
        kept: list[dict[str, Any]] = []
        vectors: list[np.ndarray] = []
        rejects: list[Reject] = []
        for row in rows:
            try:
                vector = self._vectors([row])
                if not np.isfinite(vector).all():
                    raise ValueError("non-finite values")
            except Exception as exc:
                if not self._still_works():
                    raise batch_error from None
                rejects.append(Reject.of(row, f"embedder: {_describe(exc)}"))
                continue
            self.last_good = row
            kept.append(row)
            vectors.append(vector[0])
        stacked = np.vstack(vectors) if vectors else np.zeros((0, self.dimensions), dtype=np.float32)
        return kept, stacked, rejects

    def _still_works(self) -> bool:
        """The probe: does the last row embedded well still embed (finite, right shape)?"""
        if self.last_good is None:
            return False
        try:
            return bool(np.isfinite(self._vectors([self.last_good])).all())
        except Exception:
            return False

    def _vectors(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        embedder = self.embedder
        if callable(getattr(embedder, "embed_memories", None)):
            rows = [_public_row(row) for row in rows]
        vectors = np.asarray(embed_memories(embedder, rows), dtype=np.float32)
        if vectors.shape != (len(rows), self.dimensions):
            raise UsageError(
                "embedder",
                embedder.model_id,
                f"returned shape {vectors.shape}, not ({len(rows)}, {self.dimensions})",
            )
        return vectors


def _blames_rows(exc: BaseException) -> bool:
    """True when a write error is about the values written (retry row by row), not the server."""
    import psycopg

    if isinstance(exc, UnicodeError | psycopg.DataError | psycopg.IntegrityError):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state[:2] in _ROW_ERROR_CLASSES


def _store_rejects(cur: Any, table: str, rejects: Sequence[Reject], run_id: str) -> None:
    cur.executemany(
        f"INSERT INTO {quote_identifier(REJECTS_TABLE)} AS r "
        "(target_table, source_memory_id, source_updated_at, reason, run_id) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (target_table, source_memory_id) DO UPDATE SET "
        "source_updated_at = EXCLUDED.source_updated_at, reason = EXCLUDED.reason, "
        "run_id = EXCLUDED.run_id, last_seen = NOW()",
        [(table, r.id, r.updated_at, r.reason, run_id) for r in rejects],
    )


def _clear_rejects(cur: Any, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows written now are no longer quarantined (fixed at the source and read again)."""
    cur.execute(
        f"DELETE FROM {quote_identifier(REJECTS_TABLE)} "
        "WHERE target_table = %s AND source_memory_id = ANY(%s)",
        (table, [printable(row["id"]) for row in rows]),
    )


def _count_rejects(pg: Any, table: str) -> int:
    if pg.execute("SELECT to_regclass(%s)", (REJECTS_TABLE,)).fetchone()[0] is None:
        pg.commit()
        return 0
    row = pg.execute(
        f"SELECT count(*) FROM {quote_identifier(REJECTS_TABLE)} WHERE target_table = %s", (table,)
    ).fetchone()
    pg.commit()
    return int(row[0])


def read_rejects(pg: Any, table: str = DEFAULT_TABLE) -> list[dict[str, Any]]:
    """Every quarantined row recorded for ``table`` (id order), on an open psycopg connection."""
    if pg.execute("SELECT to_regclass(%s)", (REJECTS_TABLE,)).fetchone()[0] is None:
        return []
    rows = pg.execute(
        "SELECT source_memory_id, reason, source_updated_at, first_seen, last_seen, run_id "
        f"FROM {quote_identifier(REJECTS_TABLE)} WHERE target_table = %s ORDER BY source_memory_id",
        (table,),
    ).fetchall()
    return [
        {
            "id": r[0],
            "reason": r[1],
            "sourceUpdatedAt": r[2],
            "firstSeen": r[3].isoformat(),
            "lastSeen": r[4].isoformat(),
            "runId": r[5],
        }
        for r in rows
    ]


def load_rejects(database_url: str, table: str = DEFAULT_TABLE) -> list[dict[str, Any]]:
    """:func:`read_rejects` from a URL (``pg://embedded`` works too)."""
    check_identifier(table)
    with pg_connection(database_url) as pg:
        return read_rejects(pg, table)


def _new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _public_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row a module's ``embed_memory(memory)`` sees: metadata decoded, timestamps ISO text."""
    public = dict(row)
    try:
        public["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
    except ValueError:
        public["metadata"] = {}
    for stamp in ("created_at", "updated_at"):
        public[stamp] = _timestamp(row[stamp]).isoformat()
    return public


class PackedVector(bytes):
    """A vector already in pgvector's binary wire format (``>HH`` dims, 0, then ``>f4`` values)."""


def _pack_vectors(vectors: np.ndarray) -> list[PackedVector]:
    """Encode a whole batch at once with numpy instead of one pgvector dumper call per row."""
    header = struct.pack(">HH", vectors.shape[1], 0)
    big_endian = np.ascontiguousarray(vectors, dtype=">f4")
    return [PackedVector(header + row.tobytes()) for row in big_endian]


def _register_packed_vectors(pg: Any) -> None:
    """On this connection only, dump the ``vector`` type from :class:`PackedVector` bytes as they are."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    oid = pg.execute("SELECT 'vector'::regtype::oid").fetchone()[0]

    class PackedVectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj  # already the wire format

    PackedVectorDumper.oid = oid
    pg.adapters.register_dumper(PackedVector, PackedVectorDumper)


def _write_batch(
    pg: Any,
    table: str,
    batch: _Batch,
    model_id: str,
    dimensions: int,
    rows_before: int,
    run_id: str,
    *,
    clear_rejects: bool = False,
) -> tuple[int, list[Reject]]:
    """Upsert the batch and commit it with its rejects and checkpoint; returns (rows written, rejects).

    The batch is tried whole first (inside a savepoint); an error that blames the values is retried
    row by row, each row in its own savepoint, so one poison row costs only itself."""
    rejects = list(batch.rejects)
    with pg.transaction(), pg.cursor() as cur:
        written = batch.rows
        if written:
            try:
                with pg.transaction():
                    _upsert(cur, table, batch.rows, batch.vectors, model_id)
            except Exception as exc:
                if not _blames_rows(exc):
                    raise
                written, failed = _upsert_one_by_one(pg, cur, table, batch, model_id)
                rejects.extend(failed)
        if clear_rejects and written:
            _clear_rejects(cur, table, written)
        if rejects:
            _store_rejects(cur, table, rejects, run_id)
        _store_checkpoint(cur, table, batch.cursor, rows_before + len(written), model_id, dimensions)
    # leaving pg.transaction() commits; the stage table empties itself ON COMMIT
    return len(written), rejects


def _upsert_one_by_one(
    pg: Any, cur: Any, table: str, batch: _Batch, model_id: str
) -> tuple[list[dict[str, Any]], list[Reject]]:
    written: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for k, row in enumerate(batch.rows):
        try:
            with pg.transaction():
                _upsert(cur, table, [row], batch.vectors[k : k + 1], model_id)
                cur.execute(f"DELETE FROM {STAGE_TABLE}")  # the next row's INSERT must not see it
        except Exception as exc:
            if not _blames_rows(exc):
                raise
            rejects.append(Reject.of(row, f"postgresql: {_describe(exc)}"))
            continue
        written.append(row)
    return written, rejects


def _upsert(
    cur: Any, table: str, rows: Sequence[Mapping[str, Any]], vectors: np.ndarray, model_id: str
) -> None:
    """COPY ``rows`` into the staging table, then one ``INSERT ... ON CONFLICT`` into ``table``."""
    target = quote_identifier(table)
    columns = ", ".join(_DEST_COLUMNS)
    merged = columns.replace("metadata", "coalesce(metadata::jsonb, '{}'::jsonb)")
    for stamp in ("created_at", "updated_at"):
        merged = merged.replace(stamp, f"({stamp}::timestamp AT TIME ZONE 'UTC')")
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _DEST_COLUMNS if c != "source_memory_id")
    with cur.copy(f"COPY {STAGE_TABLE} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_COPY_TYPES)
        for row, vector in zip(rows, _pack_vectors(vectors), strict=True):
            copy.write_row(
                (
                    row["id"],
                    row["user_id"],
                    row["content"],
                    vector,
                    model_id,
                    row["type"] or "fact",
                    row["source_session_id"],
                    row["source_message_id"],
                    row["metadata"],
                    row["created_at"],
                    row["updated_at"],
                )
            )
    cur.execute(
        f"INSERT INTO {target} ({columns}) SELECT {merged} FROM {STAGE_TABLE} "
        f"ON CONFLICT (source_memory_id) DO UPDATE SET {updates}"
    )


def _store_checkpoint(
    cur: Any, table: str, cursor: Cursor, rows_total: int, model_id: str, dimensions: int
) -> None:
    cur.execute(
        f"INSERT INTO {quote_identifier(CHECKPOINT_TABLE)} AS c "
        "(target_table, cursor_updated_at, cursor_id, rows_written, embedding_model, dimensions, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, NOW()) ON CONFLICT (target_table) DO UPDATE SET "
        "cursor_updated_at = EXCLUDED.cursor_updated_at, cursor_id = EXCLUDED.cursor_id, "
        "rows_written = EXCLUDED.rows_written, embedding_model = EXCLUDED.embedding_model, "
        "dimensions = EXCLUDED.dimensions, updated_at = NOW()",
        (
            table,
            cursor.to_json()["updatedAt"],
            _encode_cursor_id(cursor.id),
            rows_total,
            model_id,
            dimensions,
        ),
    )


_ENCODED_ID = "\x1bjson:"  # marks a cursor id stored as JSON text (ESC: never the start of a real id)


def _encode_cursor_id(id: str) -> str:
    """The cursor id as PostgreSQL text: a poison id (NUL, lone surrogate) as JSON, so the checkpoint
    can still move past the row that holds it."""
    if printable(id) == id and not id.startswith(_ENCODED_ID):
        return id
    return _ENCODED_ID + json.dumps(id)


def _decode_cursor_id(stored: str) -> str:
    return json.loads(stored[len(_ENCODED_ID) :]) if stored.startswith(_ENCODED_ID) else stored


def _load_checkpoint(pg: Any, table: str) -> Cursor | None:
    """The last committed checkpoint for ``table`` (the crash-safe copy, in the destination)."""
    row = pg.execute(
        f"SELECT cursor_updated_at, cursor_id FROM {quote_identifier(CHECKPOINT_TABLE)} "
        "WHERE target_table = %s",
        (table,),
    ).fetchone()
    pg.commit()
    return Cursor.parse(row[0], _decode_cursor_id(row[1])) if row else None


def _load_rows_written(pg: Any, table: str) -> int:
    row = pg.execute(
        f"SELECT rows_written FROM {quote_identifier(CHECKPOINT_TABLE)} WHERE target_table = %s", (table,)
    ).fetchone()
    pg.commit()
    return int(row[0]) if row else 0


def load_checkpoint(database_url: str, table: str = DEFAULT_TABLE) -> dict[str, Any] | None:
    """The committed checkpoint row for ``table`` as JSON (``None`` when the backfill never ran)."""
    check_identifier(table)
    with pg_connection(database_url) as pg:
        if pg.execute("SELECT to_regclass(%s)", (CHECKPOINT_TABLE,)).fetchone()[0] is None:
            return None
        row = pg.execute(
            "SELECT cursor_updated_at, cursor_id, rows_written, embedding_model, dimensions "
            f"FROM {quote_identifier(CHECKPOINT_TABLE)} WHERE target_table = %s",
            (table,),
        ).fetchone()
    if row is None:
        return None
    return {
        "cursor": {"updatedAt": row[0], "id": _decode_cursor_id(row[1])},
        "rowsWritten": int(row[2]),
        "model": row[3],
        "dimensions": row[4],
    }


def _save_json_checkpoint(
    path: Path, table: str, cursor: Cursor, rows_total: int, report: BackfillReport
) -> None:
    """Atomic write of the operator-facing copy (after the batch committed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "table": table,
        "cursor": cursor.to_json(),
        "rowsWritten": rows_total,
        "model": report.model,
        "dimensions": report.dimensions,
        "savedAt": datetime.now(UTC).isoformat(),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    os.replace(tmp, path)


# ---- inactive sources ---------------------------------------------------------------------------
def _inactive(my: Any, pg: Any, table: str, prune: bool) -> dict[str, Any]:
    """Destination rows whose source is archived/deleted (pruned only when asked) and orphans.

    Orphans -- destination rows with no source row at all -- are counted only in a pruning run (it
    costs a pass over the destination) and never deleted: that needs a human decision (a backfill
    pointed at the wrong MySQL database would otherwise wipe the table).
    """
    target = quote_identifier(table)
    t = memory_items.c
    inactive_ids: list[str] = []
    last_id = ""
    while True:
        query = select(t.id).where(t.status != "active", t.id > last_id).order_by(t.id).limit(_ID_CHUNK)
        ids = [row[0] for row in my.execute(query)]
        if not ids:
            break
        last_id = ids[-1]
        found = pg.execute(f"SELECT source_memory_id FROM {target} WHERE source_memory_id = ANY(%s)", (ids,))
        inactive_ids.extend(row[0] for row in found)
    pg.commit()
    orphans = _orphans(my, pg, target) if prune else None
    pruned = 0
    if prune and inactive_ids:
        with pg.transaction():
            pruned = pg.execute(
                f"DELETE FROM {target} WHERE source_memory_id = ANY(%s)", (inactive_ids,)
            ).rowcount
    return {
        "count": len(inactive_ids),
        "sample": sorted(inactive_ids)[:10],
        "pruned": pruned,
        "orphans": None if orphans is None else len(orphans),
        "orphanSample": None if orphans is None else sorted(orphans)[:10],
    }


def _orphans(my: Any, pg: Any, target: str) -> list[str]:
    """Destination ``source_memory_id``s missing from the source table (smoke rows excluded)."""
    orphans: list[str] = []
    last = ""
    while True:
        ids = [
            row[0]
            for row in pg.execute(
                f"SELECT source_memory_id FROM {target} WHERE source_memory_id > %s "
                "AND source_memory_id NOT LIKE %s ORDER BY source_memory_id LIMIT %s",
                (last, SMOKE_PREFIX + "%", _ID_CHUNK),
            )
        ]
        if not ids:
            break
        last = ids[-1]
        present = {row[0] for row in my.execute(select(memory_items.c.id).where(memory_items.c.id.in_(ids)))}
        orphans.extend(i for i in ids if i not in present)
    pg.commit()
    return orphans


def _models_in_table(pg: Any, table: str) -> dict[str, int]:
    """Rows per ``embedding_model`` -- more than one key means mixed vectors."""
    rows = pg.execute(
        f"SELECT coalesce(embedding_model, 'unknown'), count(*) FROM {quote_identifier(table)} GROUP BY 1"
    ).fetchall()
    pg.commit()
    return {str(model): int(n) for model, n in rows}
