"""The legacy table's migration by its old name: ``backfill`` is ``import --from legacy-mysql``.

Nothing here runs a migration of its own: :func:`legacy_options` builds the one
:class:`~memwork.migrate.run.ImportOptions` for the source ``legacy-mysql`` from the backfill's
vocabulary (a MySQL URL, a batch size, a keyset :class:`Cursor`), and :func:`run_backfill` is
:func:`~memwork.migrate.run.run_import`. :func:`load_checkpoint` shows that source's committed
checkpoint as the backfill always showed it (``{"cursor": {"updatedAt", "id"}, "rowsWritten", ...}``).
"""

from __future__ import annotations

import json
from typing import Any

from memwork.db import pg_connect, pg_value
from memwork.embed import Embedder
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.checkpoint import CHECKPOINT_TABLE
from memwork.migrate.legacy_mysql import MYSQL_URL_ENV, SOURCE_NAME, Cursor
from memwork.migrate.quarantine import REJECTS_TABLE, load_rejects, printable, read_rejects
from memwork.migrate.run import ImportOptions, MigrationReport, environment, run_import, shown_cursor_value
from memwork.pgvector.schema import EMBEDDINGS_TABLE
from memwork.progress import Progress

__all__ = [
    "REJECTS_TABLE",
    "Cursor",
    "legacy_apply_options",
    "legacy_options",
    "load_checkpoint",
    "load_rejects",
    "printable",
    "read_rejects",
    "run_backfill",
]

#: the backfill's page size (the import's is smaller: its sources answer over HTTP)
DEFAULT_BATCH_SIZE = 2000  # fewer keyset queries and commits per row; a crash re-reads one page


def legacy_options(
    mysql_url: str | None = None,
    database_url: str | None = None,
    embedder: Embedder | str | None = None,
    *,
    apply: bool = False,
    table: str = EMBEDDINGS_TABLE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    limit: int | None = None,
    cursor: Cursor | None = None,
    resume: bool = False,
    prune_inactive: bool = False,
    sample_size: int = 5,
) -> ImportOptions:
    """The migration of the legacy table: ``mysql_url`` (else ``MEMORY_BACKFILL_MYSQL_URL``) into
    ``database_url`` (else ``MEMORY_PGVECTOR_DATABASE_URL``, else the embedded PostgreSQL)."""
    return ImportOptions(
        source=SOURCE_NAME,
        env=environment({MYSQL_URL_ENV: mysql_url} if mysql_url else {}),
        database_url=database_url,
        table=table,
        apply=apply,
        resume=resume,
        page_size=batch_size,
        limit=limit,
        embedder=embedder,
        cursor=cursor.encode() if cursor is not None else None,
        prune_inactive=prune_inactive,
        sample_size=sample_size,
    )


def legacy_apply_options(
    mysql_url: str,
    database_url: str,
    embedder: Embedder | str,
    *,
    table: str = EMBEDDINGS_TABLE,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> ImportOptions:
    """An applying migration of the legacy table from its beginning (the sample migrations, the
    benchmark)."""
    return legacy_options(mysql_url, database_url, embedder, apply=True, table=table, batch_size=batch_size)


def run_backfill(options: ImportOptions, progress: Progress | None = None) -> MigrationReport:
    """:func:`~memwork.migrate.run.run_import` (the legacy table is a source like any other)."""
    return run_import(options, progress)


def load_checkpoint(database_url: str, table: str = EMBEDDINGS_TABLE) -> dict[str, Any] | None:
    """The legacy table's committed checkpoint into ``table`` as the backfill showed it (``None``: it
    never ran): ``cursor`` ``{updatedAt, id}`` (after the last row committed), ``rowsWritten``,
    ``model``, ``dimensions``."""
    check_identifier(table)
    with pg_connect(database_url) as pg:
        if pg_value(pg, "SELECT to_regclass(%s)", (CHECKPOINT_TABLE,)) is None:
            return None
        row = pg.execute(
            "SELECT next_cursor, last_cursor, rows_written, embedding_model, dimensions "
            f"FROM {quote_identifier(CHECKPOINT_TABLE)} WHERE target_table = %s AND source_name = %s "
            "ORDER BY updated_at DESC LIMIT 1",
            (table, SOURCE_NAME),
        ).fetchone()
    if row is None:
        return None
    stored = row[0] if row[0] is not None else row[1]
    cursor = shown_cursor_value(json.loads(stored)) if stored is not None else None
    return {"cursor": cursor, "rowsWritten": int(row[2]), "model": row[3], "dimensions": row[4]}
