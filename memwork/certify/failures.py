"""Every discrepancy a certificate finds, kept: a failures table in the destination and ``summary.json``.

The table (``memwork_certify_failures``) holds one row per (run id, key, kind) with the differing
fields as JSON, so a repair can re-copy exactly the failed keys and a second run can show them
cleared. Writing it is the only change a verification makes to the destination, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwork.identifiers import quote_identifier

if TYPE_CHECKING:
    import psycopg

FAILURES_TABLE = "memwork_certify_failures"


def failures_table_sql() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(FAILURES_TABLE)} (\n"
        "  run_id TEXT NOT NULL,\n"
        "  target_table TEXT NOT NULL,\n"
        "  key TEXT NOT NULL,\n"
        "  kind TEXT NOT NULL,\n"
        "  user_id TEXT,\n"
        "  fields JSONB NOT NULL DEFAULT '{}'::jsonb,\n"
        "  recorded_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  PRIMARY KEY (run_id, key, kind)\n"
        ")"
    )


def store_failures(
    conn: psycopg.Connection[Any], run_id: str, table: str, failures: Iterable[dict[str, Any]]
) -> int:
    """Insert the run's failures (``key``, ``kind``, ``user``, ``fields``); returns how many."""
    from memwork.migrate.quarantine import printable
    from memwork.pgvector.schema import lock_ddl

    rows = [
        (
            run_id,
            table,
            printable(str(f["key"])),  # a NUL (PostgreSQL text cannot hold it) written as \x00
            str(f["kind"]),
            None if f.get("user") is None else printable(str(f["user"])),
            json.dumps(_storable(f.get("fields") or {}), default=str),
        )
        for f in failures
    ]
    with conn.transaction():
        lock_ddl(conn)
        conn.execute(failures_table_sql())
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {quote_identifier(FAILURES_TABLE)} "
                "(run_id, target_table, key, kind, user_id, fields) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT DO NOTHING",
                rows,
            )
    return len(rows)


def _storable(value: Any) -> Any:
    """``value`` with every NUL in its text written ``\\x00`` (jsonb cannot hold ``\\u0000``)."""
    if isinstance(value, str):
        return value.replace("\x00", "\\x00")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def read_failures(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """The failures a run recorded (key order, each with its ``table``); empty when the table does
    not exist."""
    exists = conn.execute("SELECT to_regclass(%s)", (FAILURES_TABLE,)).fetchone()
    if not exists or exists[0] is None:
        return []
    cur = conn.execute(
        f"SELECT key, kind, user_id, fields, target_table FROM {quote_identifier(FAILURES_TABLE)} "
        "WHERE run_id = %s ORDER BY key, kind",
        (run_id,),
    )
    return [
        {"key": k, "kind": kind, "user": u, "fields": f, "table": t} for k, kind, u, f, t in cur.fetchall()
    ]


def write_summary(path: Path, summary: dict[str, Any]) -> Path:
    """``summary.json`` (sorted keys, so two runs diff cleanly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return path
