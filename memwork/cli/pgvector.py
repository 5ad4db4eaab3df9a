"""CLI commands: ``pgvector schema|url``, ``backfill`` and ``smoke pgvector`` -- parse, call, print."""

from __future__ import annotations

import click

from memwork.cli.options import apply_option, emit_json, json_option, progress
from memwork.errors import CheckFailed, UsageError
from memwork.pgvector.schema import DEFAULT_DIMENSIONS, DEFAULT_TABLE

PG_URL_ENV = "MEMORY_PGVECTOR_DATABASE_URL"
MYSQL_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"


def _pg_url_option(f):  # type: ignore[no-untyped-def]
    return click.option(
        "--database-url",
        "database_url",
        envvar=PG_URL_ENV,
        show_envvar=True,
        help="Destination PostgreSQL (postgresql://... or pg://embedded). Never read from DATABASE_URL.",
    )(f)


def _table_option(f):  # type: ignore[no-untyped-def]
    return click.option("--table", default=DEFAULT_TABLE, show_default=True, help="Embeddings table.")(f)


@click.group("pgvector")
def pgvector_group() -> None:
    """pgvector semantic memory: schema setup and the embedded server's URL."""


@pgvector_group.command("schema")
@apply_option
@_table_option
@click.option("--dimensions", type=int, default=DEFAULT_DIMENSIONS, show_default=True)
@click.option("--create-extension", is_flag=True, help="Also CREATE EXTENSION IF NOT EXISTS vector.")
@click.option("--create-vector-index", is_flag=True, help="Also create the HNSW (cosine) index.")
@_pg_url_option
@json_option
def schema_command(
    apply: bool,
    table: str,
    dimensions: int,
    create_extension: bool,
    create_vector_index: bool,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Print (default) or apply the memory_embeddings schema; re-running is harmless.

    \b
    Example:
        memwork pgvector schema --dimensions 384 --create-extension
        MEMORY_PGVECTOR_DATABASE_URL=postgresql://... memwork pgvector schema --apply --dimensions 384
    """
    from memwork.pgvector.schema import ensure_schema, schema_sql

    statements = schema_sql(table, dimensions, create_extension, create_vector_index)
    if apply:
        if not database_url:
            raise UsageError("database_url", None, f"--apply needs {PG_URL_ENV} or --database-url")
        statements = ensure_schema(database_url, table, dimensions, create_extension, create_vector_index)
    if as_json:
        emit_json({"applied": apply, "table": table, "dimensions": dimensions, "statements": statements})
        return
    header = "-- applied" if apply else "-- dry run: nothing executed (use --apply)"
    click.echo(header)
    for statement in statements:
        click.echo(statement + ";")


@pgvector_group.command("url")
@click.option("--name", default="memwork", show_default=True, help="Database on the embedded server.")
@click.option("--stop", is_flag=True, help="Stop the embedded server instead of printing a URL.")
def url_command(name: str, stop: bool) -> None:
    """Start (or join) the embedded PostgreSQL + pgvector and print a postgresql:// URL for it.

    The server keeps running after this command exits, so the URL stays usable; `--stop` stops it.

    \b
    Example:
        export MEMORY_PGVECTOR_DATABASE_URL="$(memwork pgvector url)"
        memwork pgvector url --stop
    """
    from memwork import embedded_pg

    if stop:
        embedded_pg.release()
        click.echo("stopped", err=True)
        return
    # kept running past this process and every later pg://embedded user (see memwork.embedded_pg)
    embedded_pg.keep_running()
    click.echo(embedded_pg.server_url(name))


@click.command("backfill")
@apply_option
@click.option("--mysql-url", envvar=MYSQL_URL_ENV, show_envvar=True, help="Source MySQL/MariaDB.")
@_pg_url_option
@_table_option
@click.option("--limit", type=int, default=None, help="At most this many rows in this run.")
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option(
    "--cursor-updated-at", default=None, help="Start after this updated_at (ISO 8601 or epoch; 0 = start)."
)
@click.option("--cursor-id", default=None, help="... and after this id at that updated_at.")
@click.option("--resume", is_flag=True, help="Continue from the last committed checkpoint.")
@click.option("--embedder", "embedder_spec", default=None, help="hash[:DIM], minilm[:st] or module:PATH.")
@click.option("--embedding-module", default=None, help="Module exporting embed_memory(memory) or a default.")
@click.option("--prune-inactive", is_flag=True, help="Delete rows whose source is archived or deleted.")
@json_option
def backfill_command(
    apply: bool,
    mysql_url: str | None,
    database_url: str | None,
    table: str,
    limit: int | None,
    batch_size: int,
    cursor_updated_at: str | None,
    cursor_id: str | None,
    resume: bool,
    embedder_spec: str | None,
    embedding_module: str | None,
    prune_inactive: bool,
    as_json: bool,
) -> None:
    """Copy active h5_user_memory_items into pgvector (dry run by default: reads MySQL only).

    \b
    Example:
        MEMORY_BACKFILL_MYSQL_URL=mysql://... memwork backfill --limit 100
        MEMORY_BACKFILL_MYSQL_URL=mysql://... MEMORY_PGVECTOR_DATABASE_URL=postgresql://... \\
            memwork backfill --apply --embedder minilm --resume
    """
    from memwork.backfill import BackfillOptions, Cursor, run_backfill

    if embedder_spec and embedding_module:
        raise UsageError(
            "embedding_module", embedding_module, "give --embedder or --embedding-module, not both"
        )
    if cursor_id is not None and cursor_updated_at is None:
        raise UsageError("cursor_id", cursor_id, "needs --cursor-updated-at too")
    cursor = Cursor.parse(cursor_updated_at, cursor_id or "") if cursor_updated_at is not None else None
    options = BackfillOptions(
        mysql_url=mysql_url,
        database_url=database_url,
        apply=apply,
        table=table,
        batch_size=batch_size,
        limit=limit,
        cursor=cursor,
        resume=resume,
        prune_inactive=prune_inactive,
    )
    options.validate(require_embedder=False)  # usage errors before a (maybe large) model loads
    if apply:
        options.embedder = _load_backfill_embedder(embedder_spec, embedding_module)
        options.validate()
    # the total (rows planned) is known only after the count in MySQL: it arrives with advance(0, total)
    with progress("backfill", None, quiet=as_json or not apply, unit="rows") as advance:
        report = run_backfill(options, progress=advance)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_backfill(report.to_dict())


def _load_backfill_embedder(spec: str | None, module: str | None):  # type: ignore[no-untyped-def]
    from memwork.embed import MemoryModuleEmbedder, load_embedder

    if module:
        return MemoryModuleEmbedder(module)
    return load_embedder(spec)


def _print_backfill(data: dict) -> None:  # type: ignore[type-arg]
    click.echo(f"mode: {data['mode']}  table: {data['table']}")
    click.echo(f"source: {data['source']}")
    click.echo(f"planned: {data['planned']}  written: {data['rowsWritten']}  batches: {data['batches']}")
    click.echo(
        f"start: {data['startCursor']}  first: {data['firstCheckpoint']}  last: {data['lastCheckpoint']}"
    )
    if data["model"]:
        click.echo(f"model: {data['model']} ({data['dimensions']} dims)  in table: {data['modelsInTable']}")
        click.echo(f"elapsed: {data['elapsedSeconds']} s  ({data['rowsPerSecond']} rows/s)")
    if data["inactive"]:
        click.echo(f"inactive sources: {data['inactive']}")
    if data.get("rejectsTotal"):
        click.echo(
            f"quarantined: {data['rowsQuarantined']} row(s) in this run, {data['rejectsTotal']} in "
            f"{data['rejectsTable']} for {data['table']} "
            "(not written; the backfill_verification report lists them)"
        )
    for reject in data.get("quarantined", []):
        click.echo(f"  rejected {reject['id']}: {reject['reason']}")
    for row in data["sample"]:
        click.echo(f"  {row['updatedAt']}  {row['id']}  {row['userId']}  {row['content']}")


@click.group("smoke")
def smoke_group() -> None:
    """Post-migration smoke tests."""


@smoke_group.command("pgvector")
@_pg_url_option
@click.option("--create-schema", is_flag=True, help="Create the table first (local setups only).")
@click.option("--create-extension", is_flag=True, help="With --create-schema: also CREATE EXTENSION vector.")
@_table_option
@click.option("--dimensions", type=int, default=3, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the synthetic rows in place.")
@json_option
def smoke_pgvector_command(
    database_url: str | None,
    create_schema: bool,
    create_extension: bool,
    table: str,
    dimensions: int,
    keep: bool,
    as_json: bool,
) -> None:
    """Insert memory-v2-smoke-* rows, check nearest-first through the adapter, clean up. Exit 1 on failure.

    Without a URL it runs against the embedded PostgreSQL (pg://embedded).

    \b
    Example:
        memwork smoke pgvector --create-schema --create-extension --table memory_embeddings --dimensions 3
    """
    from memwork.smoke import run_smoke

    report = run_smoke(
        database_url,
        table=table,
        dimensions=dimensions,
        create_schema=create_schema,
        create_extension=create_extension,
        keep=keep,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        for check in report.checks:
            click.echo(
                f"{'ok  ' if check['ok'] else 'FAIL'} {check['check']} {check.get('error', '')}".rstrip()
            )
        click.echo(f"returned: {report.returned_order}  scores: {report.scores}")
    if not report.ok:
        raise CheckFailed(f"smoke pgvector failed on table {table}")


commands: list = [pgvector_group, backfill_command, smoke_group]
