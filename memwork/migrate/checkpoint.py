"""The import's crash-safe checkpoint: one row per (destination table, source key), committed with each page.

A source's paging cursor is opaque (a Qdrant point id, a Redis stream id, a page number), so it is
stored as JSON text, not parsed. ``next_cursor`` is where the next page starts; ``last_cursor`` is
the cursor the last committed page was read from, so a resume of a *finished* import re-reads that
last page (harmless: the upsert is idempotent) and picks up whatever the source appended since.
Keyed by the source's ``key`` too, so two sources can be imported into one table side by side. It is
the one checkpoint of every migration, the legacy table's too: a legacy migration with no row here
reads the checkpoint an earlier version kept in ``memwork_backfill_checkpoints`` (one row per table,
cursor ``{updatedAt, id}``) once, as its starting point (:func:`read_legacy_checkpoint`), so a
migration interrupted on that version resumes where it stopped; its first committed page writes the
row here, which is read from then on.

The running totals count each page once: the last page's own counts are kept beside them, and a
resume that reads that page again (a finished import, or one cut by ``--limit`` inside the page)
starts from the totals without it (:meth:`ImportCheckpoint.starting`), so ``rowsWritten`` stays the
number of rows the import wrote, however often it is resumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memwork.db import pg_value
from memwork.identifiers import quote_identifier
from memwork.pgvector.schema import lock_ddl

if TYPE_CHECKING:
    import psycopg

CHECKPOINT_TABLE = "memwork_import_checkpoints"
#: where an earlier version kept the legacy table's checkpoint (read once, never written)
LEGACY_CHECKPOINT_TABLE = "memwork_backfill_checkpoints"
_CHECKPOINTS = quote_identifier(CHECKPOINT_TABLE)  # quoted once: every statement below names it


def import_checkpoint_table_sql() -> str:
    """The bookkeeping table (created if missing by every applying import)."""
    return (
        f"CREATE TABLE IF NOT EXISTS {_CHECKPOINTS} (\n"
        "  target_table TEXT NOT NULL,\n"
        "  source_key TEXT NOT NULL,\n"
        "  source_name TEXT NOT NULL,\n"
        "  next_cursor TEXT,\n"
        "  last_cursor TEXT,\n"
        "  finished BOOLEAN NOT NULL DEFAULT FALSE,\n"
        "  rows_read BIGINT NOT NULL DEFAULT 0,\n"
        "  rows_written BIGINT NOT NULL DEFAULT 0,\n"
        "  pages BIGINT NOT NULL DEFAULT 0,\n"
        "  vectors TEXT,\n"
        "  embedding_model TEXT,\n"
        "  dimensions INTEGER,\n"
        "  run_id TEXT,\n"
        "  updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  last_page_rows_read BIGINT,\n"
        "  last_page_rows_written BIGINT,\n"
        "  PRIMARY KEY (target_table, source_key)\n"
        ")"
    )


_LAST_PAGE_COLUMNS = ("last_page_rows_read", "last_page_rows_written")


def ensure_import_checkpoint_table(pg: psycopg.Connection[Any]) -> None:
    """Create the bookkeeping table, or add the last page's counts to one made before they existed
    (NULL there: unknown, so the first resume counts the re-read page as it always did).

    The columns are looked up first: ``ALTER TABLE`` takes an exclusive lock even when they exist."""
    with pg.transaction():
        lock_ddl(pg)
        create_or_upgrade_checkpoint_table(pg)


def create_or_upgrade_checkpoint_table(pg: psycopg.Connection[Any]) -> None:
    """:func:`ensure_import_checkpoint_table` inside the caller's DDL-locked transaction (the writer
    prepares every bookkeeping table under one lock)."""
    pg.execute(import_checkpoint_table_sql())
    present = pg_value(
        pg,
        "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attname = ANY(%s) AND NOT attisdropped",
        (CHECKPOINT_TABLE, list(_LAST_PAGE_COLUMNS)),
    )
    if present != len(_LAST_PAGE_COLUMNS):
        added = ", ".join(f"ADD COLUMN IF NOT EXISTS {c} BIGINT" for c in _LAST_PAGE_COLUMNS)
        pg.execute(f"ALTER TABLE {_CHECKPOINTS} {added}")


@dataclass
class ImportCheckpoint:
    """What the last committed page of an import left behind. ``rows_read``/``rows_written``/``pages``
    are running totals over every run of the import, each page counted once (as last read);
    ``last_page_*`` are the last page's share of them (None: a checkpoint from before they were kept)."""

    table: str
    source_key: str
    source_name: str
    next_cursor: str | None = None
    last_cursor: str | None = None
    finished: bool = False
    rows_read: int = 0
    rows_written: int = 0
    pages: int = 0
    vectors: str | None = None
    model: str | None = None
    dimensions: int | None = None
    run_id: str | None = None
    last_page_rows_read: int | None = None
    last_page_rows_written: int | None = None
    #: (rows read, rows written) the page a resume reads again had: it never counts fewer (not stored)
    reread_floor: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    @property
    def resume_cursor(self) -> str | None:
        """Where ``--resume`` starts: after the last page, or (finished) at the last page again."""
        return self.last_cursor if self.finished else self.next_cursor

    @property
    def rereads_last_page(self) -> bool:
        """A resume starts at the last page again: the import finished, or ``--limit`` cut it inside
        that page (its next cursor is then the page's own)."""
        return self.finished or self.next_cursor == self.last_cursor

    @classmethod
    def starting(
        cls, table: str, source_key: str, source_name: str, resumed: ImportCheckpoint | None = None
    ) -> ImportCheckpoint:
        """The checkpoint a run starts from: empty, or the totals of the one it resumes. When the
        resume reads the last page again, that page is taken out of the totals and counted as it is
        read now -- but never as fewer rows than before (a smaller ``--limit`` re-reads only part of
        it, and the rows written from the rest are still in the table)."""
        fresh = cls(table, source_key, source_name)
        if resumed is None:
            return fresh
        r = resumed
        if not r.rereads_last_page or r.last_page_rows_read is None:
            return replace(fresh, rows_read=r.rows_read, rows_written=r.rows_written, pages=r.pages)
        last_written = r.last_page_rows_written or 0
        return replace(
            fresh,
            rows_read=r.rows_read - r.last_page_rows_read,
            rows_written=r.rows_written - last_written,
            pages=max(r.pages - 1, 0),
            reread_floor=(r.last_page_rows_read, last_written),
        )

    def after_page(
        self,
        *,
        read_cursor: str | None,
        next_cursor: str | None,
        finished: bool,
        rows_read: int,
        run_id: str | None,
    ) -> ImportCheckpoint:
        """One more page read from ``read_cursor`` (its rows written: :meth:`with_written`)."""
        floor_read, floor_written = self.reread_floor or (0, 0)
        counted = max(rows_read, floor_read)
        return replace(
            self,
            next_cursor=next_cursor,
            last_cursor=read_cursor,
            finished=finished,
            rows_read=self.rows_read + counted,
            rows_written=self.rows_written + floor_written,
            pages=self.pages + 1,
            run_id=run_id,
            last_page_rows_read=counted,
            last_page_rows_written=floor_written,
            reread_floor=None,
        )

    def with_written(self, rows: int) -> ImportCheckpoint:
        """The page just read wrote ``rows`` rows (a page read again: only what it adds)."""
        before = self.last_page_rows_written or 0
        return replace(
            self,
            rows_written=self.rows_written + max(rows - before, 0),
            last_page_rows_written=max(rows, before),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sourceKey": self.source_key,
            "nextCursor": self.next_cursor,
            "lastCursor": self.last_cursor,
            "finished": self.finished,
            "rowsRead": self.rows_read,
            "rowsWritten": self.rows_written,
            "pages": self.pages,
            "vectors": self.vectors,
            "model": self.model,
            "dimensions": self.dimensions,
            "runId": self.run_id,
        }


def _encode(cursor: str | None) -> str | None:
    return None if cursor is None else json.dumps(cursor)  # ASCII: NUL and lone surrogates escaped


def decode_cursor(stored: str | None) -> str | None:
    """A stored cursor column back to the source's opaque cursor text (stored as JSON text)."""
    return None if stored is None else str(json.loads(stored))


def store_import_checkpoint(cur: psycopg.Cursor[Any], checkpoint: ImportCheckpoint) -> None:
    """Upsert the checkpoint in the page's own transaction."""
    c = checkpoint
    cur.execute(
        f"INSERT INTO {_CHECKPOINTS} (target_table, source_key, source_name, "
        "next_cursor, last_cursor, finished, rows_read, rows_written, pages, vectors, embedding_model, "
        "dimensions, run_id, last_page_rows_read, last_page_rows_written, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NOW()) "
        "ON CONFLICT (target_table, source_key) DO UPDATE SET source_name = EXCLUDED.source_name, "
        "next_cursor = EXCLUDED.next_cursor, last_cursor = EXCLUDED.last_cursor, "
        "finished = EXCLUDED.finished, rows_read = EXCLUDED.rows_read, "
        "rows_written = EXCLUDED.rows_written, pages = EXCLUDED.pages, vectors = EXCLUDED.vectors, "
        "embedding_model = EXCLUDED.embedding_model, dimensions = EXCLUDED.dimensions, "
        "run_id = EXCLUDED.run_id, last_page_rows_read = EXCLUDED.last_page_rows_read, "
        "last_page_rows_written = EXCLUDED.last_page_rows_written, updated_at = NOW()",
        (
            c.table,
            c.source_key,
            c.source_name,
            _encode(c.next_cursor),
            _encode(c.last_cursor),
            c.finished,
            c.rows_read,
            c.rows_written,
            c.pages,
            c.vectors,
            c.model,
            c.dimensions,
            c.run_id,
            c.last_page_rows_read,
            c.last_page_rows_written,
        ),
    )


def read_import_checkpoint(
    pg: psycopg.Connection[Any], table: str, source_key: str
) -> ImportCheckpoint | None:
    """The committed checkpoint of ``source_key`` into ``table`` (None: never imported; read only)."""
    if pg_value(pg, "SELECT to_regclass(%s)", (CHECKPOINT_TABLE,)) is None:
        return None
    # the whole row as JSON: a table made before a column existed reads as that column missing
    found = pg.execute(
        f"SELECT to_jsonb(c) FROM {_CHECKPOINTS} AS c WHERE target_table = %s AND source_key = %s",
        (table, source_key),
    ).fetchone()
    if found is None:
        return None
    row: dict[str, Any] = found[0]
    return ImportCheckpoint(
        table=table,
        source_key=source_key,
        source_name=row["source_name"],
        next_cursor=decode_cursor(row["next_cursor"]),
        last_cursor=decode_cursor(row["last_cursor"]),
        finished=bool(row["finished"]),
        rows_read=int(row["rows_read"]),
        rows_written=int(row["rows_written"]),
        pages=int(row["pages"]),
        vectors=row["vectors"],
        model=row["embedding_model"],
        dimensions=row["dimensions"],
        run_id=row["run_id"],
        last_page_rows_read=_count_or_none(row.get("last_page_rows_read")),
        last_page_rows_written=_count_or_none(row.get("last_page_rows_written")),
    )


def _count_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


_ENCODED_ID = "\x1bjson:"  # how the earlier version stored a cursor id PostgreSQL text cannot hold


def read_legacy_checkpoint(pg: psycopg.Connection[Any], table: str) -> dict[str, Any] | None:
    """The checkpoint an earlier version kept for the legacy table's migration into ``table``:
    ``{"updatedAt", "id"}`` (the keyset position), ``rowsWritten``, ``model``, ``dimensions``; None
    when there is none. Read only: the upgrade path of a migration interrupted on that version."""
    if pg_value(pg, "SELECT to_regclass(%s)", (LEGACY_CHECKPOINT_TABLE,)) is None:
        return None
    row = pg.execute(
        "SELECT cursor_updated_at, cursor_id, rows_written, embedding_model, dimensions "
        f"FROM {quote_identifier(LEGACY_CHECKPOINT_TABLE)} WHERE target_table = %s",
        (table,),
    ).fetchone()
    if row is None:
        return None
    stored = str(row[1])
    cursor_id = json.loads(stored[len(_ENCODED_ID) :]) if stored.startswith(_ENCODED_ID) else stored
    return {
        "cursor": {"updatedAt": row[0], "id": cursor_id},
        "rowsWritten": int(row[2]),
        "model": row[3],
        "dimensions": row[4],
    }


def upgraded_checkpoint(
    table: str, source_key: str, source_name: str, legacy: dict[str, Any], next_cursor: str
) -> ImportCheckpoint:
    """An earlier version's legacy checkpoint as this table's row (not finished: the run goes on
    after its cursor; rows read are taken as the rows it wrote, the only count it kept)."""
    written = int(legacy["rowsWritten"])
    return ImportCheckpoint(
        table=table,
        source_key=source_key,
        source_name=source_name,
        next_cursor=next_cursor,
        last_cursor=None,
        rows_read=written,
        rows_written=written,
        vectors="reembed",
        model=legacy.get("model"),
        dimensions=legacy.get("dimensions"),
    )
