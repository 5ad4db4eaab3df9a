"""CLI group ``pgvector schema|url`` -- parse, call, print -- and the options the migration commands share."""

from __future__ import annotations

import click

from memwork.cli.options import F, apply_option, emit_json, json_option
from memwork.errors import UsageError
from memwork.identifiers import check_identifier
from memwork.pgvector.schema import DEFAULT_DIMENSIONS, EMBEDDINGS_TABLE

PG_URL_ENV = "MEMORY_PGVECTOR_DATABASE_URL"


def pg_url_option(f: F) -> F:
    """The destination PostgreSQL: ``--to`` everywhere (``--database-url`` kept as its alias)."""
    return click.option(
        "--to",
        "--database-url",
        "database_url",
        envvar=PG_URL_ENV,
        show_envvar=True,
        help="Destination PostgreSQL (postgresql://... or pg://embedded); alias --database-url. "
        "Never read from DATABASE_URL.",
    )(f)


def table_option(f: F) -> F:
    return click.option("--table", default=EMBEDDINGS_TABLE, show_default=True, help="Embeddings table.")(f)


@click.group("pgvector")
def pgvector_group() -> None:
    """pgvector semantic memory: schema setup and the embedded server's URL.

    \b
    Examples:
        memwork pgvector schema --dimensions 384 --create-extension
        memwork pgvector schema --apply --database-url "$(memwork pgvector url)" --create-extension
        memwork pgvector url --json
    """


@pgvector_group.command("schema")
@apply_option
@table_option
@click.option("--dimensions", type=int, default=DEFAULT_DIMENSIONS, show_default=True)
@click.option("--create-extension", is_flag=True, help="Also CREATE EXTENSION IF NOT EXISTS vector.")
@click.option("--create-vector-index", is_flag=True, help="Also create the HNSW (cosine) index.")
@pg_url_option
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
@json_option
def url_command(name: str, stop: bool, as_json: bool) -> None:
    """Start (or join) the embedded PostgreSQL + pgvector and print a postgresql:// URL for it.

    The server keeps running after this command exits, so the URL stays usable; `--stop` stops it.

    \b
    Example:
        export MEMORY_PGVECTOR_DATABASE_URL="$(memwork pgvector url)"
        memwork pgvector url --name demo --json
        memwork pgvector url --stop
    """
    from memwork.db import embedded

    if stop:
        was_running = embedded.release()
        if as_json:
            emit_json({"stopped": True, "wasRunning": was_running})
        else:
            click.echo("stopped" if was_running else "not running (nothing to stop)", err=True)
        return
    check_identifier(name, field="database")  # bad input: refused before a server starts
    # kept running past this process and every later pg://embedded user (see memwork.db.embedded)
    embedded.keep_running()
    url = embedded.server_url(name)
    if as_json:
        emit_json({"url": url, "database": name, "embedded": f"pg://embedded/{name}"})
    else:
        click.echo(url)


commands: list = [pgvector_group]
