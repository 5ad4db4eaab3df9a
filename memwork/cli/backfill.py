"""CLI command ``backfill``: ``import --from legacy-mysql`` under its old name and flags -- parse, call,
print."""

from __future__ import annotations

import click

from memwork.cli.migrate import (
    check_workers,
    page_size_option,
    repair_and_print,
    repair_option,
    run_and_print,
    workers_options,
)
from memwork.cli.options import apply_option, json_option
from memwork.cli.pgvector import pg_url_option, table_option
from memwork.errors import UsageError

MYSQL_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"


@click.command("backfill")
@apply_option
@click.option("--mysql-url", envvar=MYSQL_URL_ENV, show_envvar=True, help="Source MySQL/MariaDB.")
@pg_url_option
@table_option
@click.option("--limit", type=int, default=None, help="At most this many rows in this run.")
@page_size_option(2000)  # memwork.migrate.backfill.DEFAULT_BATCH_SIZE (not imported: CLI start-up)
@click.option(
    "--cursor-updated-at", default=None, help="Start after this updated_at (ISO 8601 or epoch; 0 = start)."
)
@click.option("--cursor-id", default=None, help="... and after this id at that updated_at.")
@click.option("--resume", is_flag=True, help="Continue from the last committed checkpoint.")
@click.option("--embedder", "embedder_spec", default=None, help="hash[:DIM], minilm[:st] or module:PATH.")
@click.option("--embedding-module", default=None, help="Module exporting embed_memory(memory) or a default.")
@click.option("--prune-inactive", is_flag=True, help="Delete rows whose source is archived or deleted.")
@click.option("--create-schema", is_flag=True, help="Create the destination table when it is missing.")
@repair_option
@workers_options
@json_option
def backfill_command(
    apply: bool,
    mysql_url: str | None,
    database_url: str | None,
    table: str,
    limit: int | None,
    page_size: int,
    cursor_updated_at: str | None,
    cursor_id: str | None,
    resume: bool,
    embedder_spec: str | None,
    embedding_module: str | None,
    prune_inactive: bool,
    create_schema: bool,
    repair_run_id: str | None,
    workers: int | None,
    executor_spec: str | None,
    as_json: bool,
) -> None:
    """Copy active h5_user_memory_items into pgvector: `memwork import --from legacy-mysql` under
    its old name (dry run by default: reads MySQL only).

    Writes and prunes only the legacy table's own rows: an id another source holds in the table is
    quarantined, never overwritten or deleted, and the run exits 3 (its own rows are done; a person
    decides about the others). `memwork verify --from legacy-mysql` checks the copy.

    \b
    Example:
        MEMORY_BACKFILL_MYSQL_URL=mysql://... memwork backfill --limit 100
        MEMORY_BACKFILL_MYSQL_URL=mysql://... MEMORY_PGVECTOR_DATABASE_URL=postgresql://... \\
            memwork backfill --apply --embedder minilm --resume
        memwork backfill --repair cert-20260601T120000-ab12cd --apply
        memwork backfill --apply --embedder hash:384 --workers 2 --executor dask://sched:8786

    --workers N splits the table into N disjoint key ranges (quantiles of (updated_at, id)), each
    with its own checkpoint and lock, run by --executor (local processes by default); --resume reuses
    the recorded ranges whatever N is, and a killed worker's range resumes where it committed.
    """
    from memwork.embed import MemoryModuleEmbedder
    from memwork.migrate.backfill import Cursor, legacy_options

    if embedder_spec and embedding_module:
        raise UsageError(
            "embedding_module", embedding_module, "give --embedder or --embedding-module, not both"
        )
    if cursor_id is not None and cursor_updated_at is None:
        raise UsageError("cursor_id", cursor_id, "needs --cursor-updated-at too")
    if not (mysql_url or "").strip():
        raise UsageError("mysql_url", mysql_url, f"set {MYSQL_URL_ENV} or --mysql-url")
    if apply and not (database_url or "").strip():
        raise UsageError("database_url", None, "--apply needs MEMORY_PGVECTOR_DATABASE_URL or --to")
    parallel = check_workers(workers, executor_spec, repair_run_id)
    cursor = Cursor.parse(cursor_updated_at, cursor_id or "") if cursor_updated_at is not None else None
    options = legacy_options(
        mysql_url,
        database_url,
        apply=apply,
        table=table,
        batch_size=page_size,
        limit=limit,
        cursor=cursor,
        resume=resume,
        prune_inactive=prune_inactive,
    )
    options.create_schema = create_schema
    options.validate()  # usage errors before a (maybe large) model loads
    if repair_run_id is not None:  # the embedder defaults to the table's model (hash-N)
        options.embedder = MemoryModuleEmbedder(embedding_module) if embedding_module else embedder_spec
        repair_and_print(repair_run_id, options, as_json)
        return
    if apply and embedding_module:
        options.embedder = MemoryModuleEmbedder(embedding_module)
    elif apply and not embedder_spec:
        raise UsageError("embedder", None, "--apply needs --embedder SPEC or --embedding-module PATH")
    else:
        options.embedder = embedder_spec or None
    run_and_print(options, as_json, parallel=parallel, workers=workers, executor=executor_spec)


commands: list = [backfill_command]
