"""CLI command ``backfill``: MySQL -> pgvector, dry run by default -- parse, call, print."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from memwork.cli.options import apply_option, emit_json, json_option, stage_progress
from memwork.cli.pgvector import pg_url_option, table_option
from memwork.errors import UsageError

if TYPE_CHECKING:
    from memwork.embed import Embedder

MYSQL_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"


@click.command("backfill")
@apply_option
@click.option("--mysql-url", envvar=MYSQL_URL_ENV, show_envvar=True, help="Source MySQL/MariaDB.")
@pg_url_option
@table_option
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

    Writes and prunes only the backfill's own rows: an id another source (an import) holds in the
    table is quarantined, never overwritten or deleted, and the run exits 3 (its own rows are done;
    a person decides about the others).

    \b
    Example:
        MEMORY_BACKFILL_MYSQL_URL=mysql://... memwork backfill --limit 100
        MEMORY_BACKFILL_MYSQL_URL=mysql://... MEMORY_PGVECTOR_DATABASE_URL=postgresql://... \\
            memwork backfill --apply --embedder minilm --resume
    """
    from memwork.migrate.backfill import BackfillOptions, Cursor, run_backfill

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
    # the total (rows planned) is known only after the count in MySQL: run_backfill starts the stage
    with stage_progress(quiet=as_json or not apply, unit="rows") as bar:
        report = run_backfill(options, progress=bar)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_backfill(report.to_dict())
    if report.owned_elsewhere:
        from memwork.migrate.ownership import OWNED_ELSEWHERE_EXIT

        raise click.exceptions.Exit(OWNED_ELSEWHERE_EXIT)


def _load_backfill_embedder(spec: str | None, module: str | None) -> Embedder | None:
    from memwork.embed import MemoryModuleEmbedder, load_embedder

    if module:
        return MemoryModuleEmbedder(module)
    return load_embedder(spec)


def _print_backfill(data: dict[str, Any]) -> None:
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
    if data["ownedElsewhere"]:
        click.echo(
            f"owned elsewhere: {data['ownedElsewhere']} id(s) another source holds in {data['table']} "
            "were quarantined, not overwritten or deleted (exit 3)"
        )
    for reject in data.get("quarantined", []):
        click.echo(f"  rejected {reject['id']}: {reject['reason']}")
    for row in data["sample"]:
        click.echo(f"  {row['updatedAt']}  {row['id']}  {row['userId']}  {row['content']}")


commands: list = [backfill_command]
