"""CLI commands ``import`` and ``import-verify``: any source -> pgvector, and the check of the copy --
parse, call, print."""

from __future__ import annotations

from typing import Any

import click

from memwork.cli.options import F, apply_option, emit_json, emit_verdict, json_option, stage_progress
from memwork.cli.pgvector import table_option
from memwork.errors import UsageError


def _from_option(f: F) -> F:
    return click.option(
        "--from",
        "source",
        required=True,
        help="Source: qdrant, weaviate, mem0, letta, langgraph, redis-streams (or module:PATH).",
    )(f)


def _to_option(f: F) -> F:
    return click.option(
        "--to",
        "database_url",
        envvar="MEMORY_PGVECTOR_DATABASE_URL",
        show_envvar=True,
        help="Destination PostgreSQL (postgresql://... or pg://embedded, the default).",
    )(f)


def _set_option(f: F) -> F:
    return click.option(
        "--set",
        "settings",
        multiple=True,
        metavar="VAR=VALUE",
        help="Override a source variable (repeatable), e.g. --set MEMORY_QDRANT_URL=http://...",
    )(f)


def _page_size_option(f: F) -> F:
    return click.option("--page-size", type=int, default=200, show_default=True, help="Records per page.")(f)


def parse_settings(settings: tuple[str, ...]) -> dict[str, str]:
    """``("VAR=VALUE", ...)`` as a dict; a pair without ``=`` or a name is a usage error naming it."""
    out: dict[str, str] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError("set", item.split("=", 1)[0], "must be VAR=VALUE")
        out[name.strip()] = value
    return out


@click.command("import")
@_from_option
@_to_option
@table_option
@apply_option
@click.option("--resume", is_flag=True, help="Continue from the last committed checkpoint of this source.")
@_page_size_option
@click.option("--limit", type=int, default=None, help="At most this many records in this run.")
@click.option(
    "--vectors",
    type=click.Choice(["auto", "keep", "reembed"]),
    default="auto",
    show_default=True,
    help="keep the source's vectors, reembed content, or auto (keep when the source has vectors).",
)
@click.option("--embedder", "embedder_spec", default=None, help="hash[:DIM], minilm[:st] or module:PATH.")
@click.option("--create-schema", is_flag=True, help="Create the destination table when it is missing.")
@_set_option
@json_option
def import_command(
    source: str,
    database_url: str | None,
    table: str,
    apply: bool,
    resume: bool,
    page_size: int,
    limit: int | None,
    vectors: str,
    embedder_spec: str | None,
    create_schema: bool,
    settings: tuple[str, ...],
    as_json: bool,
) -> None:
    """Import every memory of a source into pgvector (dry run by default: reads the source only).

    The source reads its backend's own variables (MEMORY_QDRANT_URL, ...) from the environment;
    --set overrides them. Applying is checkpointed per page and idempotent; --resume continues a
    killed run. An id another source (or the MySQL backfill) holds in the table is quarantined,
    never overwritten, and the run exits 3 (its own rows are done; a person decides about the others).

    \b
    Example:
        MEMORY_QDRANT_URL=http://localhost:6333 memwork import --from qdrant
        memwork import --from redis-streams --apply --embedder hash:384 --create-schema \\
            --to postgresql://localhost/memwork --resume
    """
    from memwork.migrate.run import ImportOptions, environment, run_import

    options = ImportOptions(
        source=source,
        env=environment(parse_settings(settings)),
        database_url=database_url,
        table=table,
        apply=apply,
        resume=resume,
        page_size=page_size,
        limit=limit,
        vectors=vectors,
        embedder=embedder_spec or None,
        create_schema=create_schema,
    )
    with stage_progress(quiet=as_json, unit="rows") as bar:
        report = run_import(options, progress=bar)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_import(report.to_dict())
    if report.owned_elsewhere:
        from memwork.migrate.ownership import OWNED_ELSEWHERE_EXIT

        raise click.exceptions.Exit(OWNED_ELSEWHERE_EXIT)


def _print_import(data: dict[str, Any]) -> None:
    click.echo(f"mode: {data['mode']}  source: {data['sourceKey']}  table: {data['table']}")
    click.echo(
        f"read: {data['rowsRead']}  written: {data['rowsWritten']}  quarantined: {data['rowsQuarantined']}  "
        f"pages: {data['pages']}  users: {len(data['users'])}"
    )
    users = list(data["users"].items())
    shown = ", ".join(f"{user!r}: {n}" for user, n in users[:20]) + (" …" if len(users) > 20 else "")
    click.echo(f"per user: {shown}")
    click.echo(f"vectors: {data['vectors']}  model: {data['model']}  dimensions: {data['dimensions']}")
    click.echo(f"models: {data['models']}  vector dimensions: {data['vectorDimensions']}")
    click.echo(f"start cursor: {data['startCursor']}  resumed: {data['resumed']}")
    if data["checkpoint"]:
        click.echo(f"checkpoint: {data['checkpoint']}")
    click.echo(f"elapsed: {data['elapsedSeconds']} s  ({data['rowsPerSecond']} rows/s)  run: {data['runId']}")
    if data["ownedElsewhere"]:
        click.echo(
            f"owned elsewhere: {data['ownedElsewhere']} id(s) another source holds in {data['table']} "
            "were quarantined, not overwritten (exit 3)"
        )
    for reject in data["quarantined"]:
        click.echo(f"  rejected {reject['id']}: {reject['reason']}")
    for note in data["notes"]:
        click.echo(f"note: {note}")
    for row in data["sample"]:
        click.echo(f"  {row['id']}  {row['userId']}  {row['content']}")


@click.command("import-verify")
@_from_option
@_to_option
@table_option
@_page_size_option
@click.option("--allow-quarantined", is_flag=True, help="Quarantined rows are listed but not a FAIL.")
@_set_option
@json_option
def import_verify_command(
    source: str,
    database_url: str | None,
    table: str,
    page_size: int,
    allow_quarantined: bool,
    settings: tuple[str, ...],
    as_json: bool,
) -> None:
    """Verify an import against its source: counts per user, missing/extra ids, checksums, vectors.

    Only the destination rows of this source are compared; exit 1 on FAIL.

    \b
    Example:
        memwork import-verify --from qdrant --to postgresql://localhost/memwork --json
    """
    from memwork.migrate.run import environment
    from memwork.migrate.verify import ImportVerifyOptions, verify_import

    result = verify_import(
        ImportVerifyOptions(
            source=source,
            env=environment(parse_settings(settings)),
            database_url=database_url,
            table=table,
            page_size=page_size,
            allow_quarantined=allow_quarantined,
        )
    )
    lines = [f"verdict: {result.verdict}  source: {result.source_key}  table: {result.table}"]
    lines.append(f"source rows: {result.source_rows}  destination rows: {result.dest_rows}")
    lines += [f"  {reason}" for reason in result.reasons]
    lines += [f"note: {note}" for note in result.notes]
    failure = f"import verification FAIL: {result.reasons[0]}" if result.reasons else None
    emit_verdict(result.to_dict(), as_json, lines, failure)


commands: list = [import_command, import_verify_command]
