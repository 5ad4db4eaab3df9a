"""The import's crash-safe checkpoint: one row per (destination table, source key), committed with each page.

A source's paging cursor is opaque (a Qdrant point id, a Redis stream id, a page number), so it is
stored as JSON text, not parsed. ``next_cursor`` is where the next page starts; ``last_cursor`` is
the cursor the last committed page was read from, so a resume of a *finished* import re-reads that
last page (harmless: the upsert is idempotent) and picks up whatever the source appended since.
Keyed by the source's ``key`` too, so two sources can be imported into one table side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwork.db import pg_value
from memwork.identifiers import quote_identifier

if TYPE_CHECKING:
    import psycopg

IMPORT_CHECKPOINT_TABLE = "memwork_import_checkpoints"


def import_checkpoint_table_sql() -> str:
    """The bookkeeping table (created if missing by every applying import)."""
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(IMPORT_CHECKPOINT_TABLE)} (\n"
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
        "  PRIMARY KEY (target_table, source_key)\n"
        ")"
    )


@dataclass
class ImportCheckpoint:
    """What the last committed page of an import left behind. ``rows_read``/``rows_written``/``pages``
    are running totals over every run of the import (``rows_written`` counts upserts: a page read
    again by a resume of a finished import counts again)."""

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

    @property
    def resume_cursor(self) -> str | None:
        """Where ``--resume`` starts: after the last page, or (finished) at the last page again."""
        return self.last_cursor if self.finished else self.next_cursor

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


def _decode(stored: str | None) -> str | None:
    return None if stored is None else str(json.loads(stored))


def store_import_checkpoint(cur: psycopg.Cursor[Any], checkpoint: ImportCheckpoint) -> None:
    """Upsert the checkpoint in the page's own transaction."""
    c = checkpoint
    cur.execute(
        f"INSERT INTO {quote_identifier(IMPORT_CHECKPOINT_TABLE)} (target_table, source_key, source_name, "
        "next_cursor, last_cursor, finished, rows_read, rows_written, pages, vectors, embedding_model, "
        "dimensions, run_id, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NOW()) "
        "ON CONFLICT (target_table, source_key) DO UPDATE SET source_name = EXCLUDED.source_name, "
        "next_cursor = EXCLUDED.next_cursor, last_cursor = EXCLUDED.last_cursor, "
        "finished = EXCLUDED.finished, rows_read = EXCLUDED.rows_read, "
        "rows_written = EXCLUDED.rows_written, pages = EXCLUDED.pages, vectors = EXCLUDED.vectors, "
        "embedding_model = EXCLUDED.embedding_model, dimensions = EXCLUDED.dimensions, "
        "run_id = EXCLUDED.run_id, updated_at = NOW()",
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
        ),
    )


def read_import_checkpoint(
    pg: psycopg.Connection[Any], table: str, source_key: str
) -> ImportCheckpoint | None:
    """The committed checkpoint of ``source_key`` into ``table`` (None: never imported; read only)."""
    if pg_value(pg, "SELECT to_regclass(%s)", (IMPORT_CHECKPOINT_TABLE,)) is None:
        return None
    row = pg.execute(
        "SELECT source_name, next_cursor, last_cursor, finished, rows_read, rows_written, pages, vectors, "
        f"embedding_model, dimensions, run_id FROM {quote_identifier(IMPORT_CHECKPOINT_TABLE)} "
        "WHERE target_table = %s AND source_key = %s",
        (table, source_key),
    ).fetchone()
    if row is None:
        return None
    return ImportCheckpoint(
        table=table,
        source_key=source_key,
        source_name=row[0],
        next_cursor=_decode(row[1]),
        last_cursor=_decode(row[2]),
        finished=bool(row[3]),
        rows_read=int(row[4]),
        rows_written=int(row[5]),
        pages=int(row[6]),
        vectors=row[7],
        model=row[8],
        dimensions=row[9],
        run_id=row[10],
    )
