"""Checkpoints: the crash-safe one in PostgreSQL (committed with each batch) and the workspace JSON copy."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwork.db import pg_connect, pg_value
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.backfill_options import BackfillReport, Cursor
from memwork.migrate.quarantine import printable
from memwork.pgvector.schema import CHECKPOINT_TABLE, DEFAULT_TABLE

if TYPE_CHECKING:
    import psycopg


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


def store_checkpoint(
    cur: psycopg.Cursor[Any], table: str, cursor: Cursor, rows_total: int, model_id: str, dimensions: int
) -> None:
    """Write the batch's cursor and running total in the batch's own transaction."""
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


def read_checkpoint(pg: psycopg.Connection[Any], table: str) -> Cursor | None:
    """The last committed checkpoint for ``table`` (the crash-safe copy, in the destination)."""
    row = pg.execute(
        f"SELECT cursor_updated_at, cursor_id FROM {quote_identifier(CHECKPOINT_TABLE)} "
        "WHERE target_table = %s",
        (table,),
    ).fetchone()
    pg.commit()
    return Cursor.parse(row[0], _decode_cursor_id(row[1])) if row else None


def read_rows_written(pg: psycopg.Connection[Any], table: str) -> int:
    """The running total of rows written, as committed with the last checkpoint."""
    row = pg.execute(
        f"SELECT rows_written FROM {quote_identifier(CHECKPOINT_TABLE)} WHERE target_table = %s", (table,)
    ).fetchone()
    pg.commit()
    return int(row[0]) if row else 0


def load_checkpoint(database_url: str, table: str = DEFAULT_TABLE) -> dict[str, Any] | None:
    """The committed checkpoint row for ``table`` as JSON (``None`` when the backfill never ran)."""
    check_identifier(table)
    with pg_connect(database_url) as pg:
        if pg_value(pg, "SELECT to_regclass(%s)", (CHECKPOINT_TABLE,)) is None:
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


def save_json_checkpoint(
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
