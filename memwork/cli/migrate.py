"""CLI command ``import``: any source -> pgvector -- parse, call, print. ``backfill``
(:mod:`memwork.cli.backfill`) is ``import --from legacy-mysql`` under its old name; ``verify``
(:mod:`memwork.cli.certify`) checks the copy."""

from __future__ import annotations

from typing import Any

import click

from memwork.cli.options import F, apply_option, emit_json, json_option, stage_progress
from memwork.cli.pgvector import pg_url_option, table_option
from memwork.errors import UsageError


def _from_option(f: F) -> F:
    return click.option(
        "--from",
        "source",
        required=True,
        help="Source: legacy-mysql, qdrant, weaviate, mem0, letta, langgraph, redis-streams, "
        "pgvector (or module:PATH).",
    )(f)


def _set_option(f: F) -> F:
    return click.option(
        "--set",
        "settings",
        multiple=True,
        metavar="VAR=VALUE",
        help="Override a source variable (repeatable), e.g. --set MEMORY_QDRANT_URL=http://...",
    )(f)


def repair_option(f: F) -> F:
    """``--repair RUN_ID``: re-copy exactly the keys a certificate run recorded as failed."""
    return click.option(
        "--repair",
        "repair_run_id",
        default=None,
        metavar="RUN_ID",
        help="Re-copy exactly the keys certificate run RUN_ID recorded as failed (dry run unless --apply).",
    )(f)


def page_size_option(default: int) -> Any:
    """Records per page: ``--page-size`` everywhere (``--batch-size`` kept as its alias)."""
    return click.option(
        "--page-size",
        "--batch-size",
        "page_size",
        type=int,
        default=default,
        show_default=True,
        help="Records per page (one COPY and one commit each); alias --batch-size.",
    )


def workers_options(f: F) -> F:
    """``--workers N`` and ``--executor SPEC``: the legacy table over N disjoint key ranges at once."""
    f = click.option(
        "--executor",
        "executor_spec",
        default=None,
        metavar="SPEC",
        help="Where --workers' key ranges run: local (default), local:N or dask://HOST:8786.",
    )(f)
    return click.option(
        "--workers",
        type=int,
        default=None,
        help="Split the legacy table into N disjoint key ranges run at once, each resumable alone.",
    )(f)


def check_workers(workers: int | None, executor_spec: str | None, repair_run_id: str | None) -> bool:
    """True when the run is split into key ranges; usage errors for what cannot be."""
    if workers is not None and workers < 1:
        raise UsageError("workers", workers, "must be a positive integer")
    if executor_spec is not None:
        from memwork.executor import parse_executor

        parse_executor(executor_spec)  # a bad value is bad input before anything connects
    parallel = executor_spec is not None or (workers or 1) > 1
    if parallel and repair_run_id is not None:
        raise UsageError("workers", workers, "cannot be combined with --repair (it copies failed keys only)")
    return parallel


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
@pg_url_option
@table_option
@apply_option
@click.option("--resume", is_flag=True, help="Continue from the last committed checkpoint of this source.")
@page_size_option(200)
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
@click.option(
    "--prune-inactive", is_flag=True, help="Delete this source's rows it holds as archived or deleted."
)
@repair_option
@workers_options
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
    prune_inactive: bool,
    repair_run_id: str | None,
    workers: int | None,
    executor_spec: str | None,
    settings: tuple[str, ...],
    as_json: bool,
) -> None:
    """Import every memory of a source into pgvector (dry run by default: reads the source only).

    The source reads its backend's own variables (MEMORY_BACKFILL_MYSQL_URL, MEMORY_QDRANT_URL, ...)
    from the environment; --set overrides them. Applying is checkpointed per page and idempotent;
    --resume continues a killed run. An id another source holds in the table is quarantined, never
    overwritten, and the run exits 3 (its own rows are done; a person decides about the others).
    --repair RUN_ID re-copies (or deletes) exactly the keys `memwork verify` run RUN_ID named.

    \b
    Example:
        MEMORY_QDRANT_URL=http://localhost:6333 memwork import --from qdrant
        memwork import --from legacy-mysql --repair cert-20260601T120000-ab12cd --apply
        memwork import --from redis-streams --apply --embedder hash:384 --create-schema \\
            --to postgresql://localhost/memwork --resume
        memwork import --from legacy-mysql --set MEMORY_BACKFILL_MYSQL_URL=mysql://... \\
            --apply --embedder minilm
        memwork import --from legacy-mysql --apply --embedder hash:384 --workers 2 --resume
        memwork import --from pgvector --set MEMORY_PGVECTOR_SOURCE_URL=postgresql://old/db \
            --set MEMORY_PGVECTOR_SOURCE_TABLE=memory_embeddings --table memories_v2 \
            --vectors reembed --embedder minilm --create-schema --apply

    --workers N (legacy-mysql only) splits the table into N disjoint key ranges, each with its own
    checkpoint, run by --executor (local processes, or dask://HOST:8786); --resume reuses the
    recorded ranges whatever N is.
    """
    from memwork.migrate.run import ImportOptions, environment

    parallel = check_workers(workers, executor_spec, repair_run_id)

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
        prune_inactive=prune_inactive,
    )
    if repair_run_id is not None:
        repair_and_print(repair_run_id, options, as_json)
        return
    run_and_print(options, as_json, parallel=parallel, workers=workers, executor=executor_spec)


def repair_and_print(run_id: str, options: Any, as_json: bool) -> None:
    """``--repair RUN_ID`` (``import`` and ``backfill``): plan or apply, print, exit 3 when rows
    another source owns were (or would be) quarantined."""
    from memwork.certify.repair import run_repair, shown_items
    from memwork.migrate.ownership import OWNED_ELSEWHERE_EXIT

    for name, value in (
        ("resume", options.resume),
        ("limit", options.limit),
        ("cursor", options.cursor),
        ("prune_inactive", options.prune_inactive),
        ("create_schema", options.create_schema),
    ):
        if value:
            raise UsageError(name, value, "cannot be combined with --repair (it copies the failed keys only)")
    report = run_repair(run_id, options).to_dict()
    if as_json:
        emit_json(report)
    else:
        click.echo(
            f"repair ({report['mode']}) of certificate run {report['certificateRunId']}  "
            f"table: {report['table']}  source: {report['sourceKey']}"
        )
        click.echo(f"planned: {report['planned']}  model: {report['model']}")
        for line in shown_items(report):
            click.echo(line)
        for skipped in report["skipped"]:
            click.echo(f"  skipped    {skipped['key']}  [{skipped['kind']}]  {skipped['reason']}")
        if report["mode"] == "apply":
            click.echo(
                f"written: {len(report['written'])}  deleted: {len(report['deleted'])}  "
                f"quarantined: {len(report['quarantined'])}  repair run: {report['repairRunId']}"
            )
            click.echo("run `memwork verify` again to see the keys cleared")
        else:
            click.echo("dry run: nothing written; --apply writes")
        for note in report["notes"]:
            click.echo(f"note: {note}")
    if report["ownedElsewhere"]:
        raise click.exceptions.Exit(OWNED_ELSEWHERE_EXIT)


def run_and_print(
    options: Any,
    as_json: bool,
    *,
    parallel: bool = False,
    workers: int | None = None,
    executor: str | None = None,
) -> None:
    """Run one migration (``import`` and ``backfill``; ``parallel``: over key ranges), print its
    report, exit 3 when it left rows another source owns."""
    from memwork.migrate.ownership import OWNED_ELSEWHERE_EXIT
    from memwork.migrate.run import run_import

    with stage_progress(quiet=as_json or not options.apply, unit="rows") as bar:
        if parallel:
            from memwork.migrate.partitioned import run_partitioned

            report = run_partitioned(options, workers=workers, executor=executor, progress=bar)
        else:
            report = run_import(options, progress=bar)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_import(report.to_dict())
    if report.owned_elsewhere:
        raise click.exceptions.Exit(OWNED_ELSEWHERE_EXIT)


def _print_import(data: dict[str, Any]) -> None:
    click.echo(f"mode: {data['mode']}  source: {data['sourceKey']}  table: {data['table']}")
    planned = f"planned: {data['planned']}  " if data["planned"] is not None else ""
    click.echo(
        f"{planned}read: {data['rowsRead']}  written: {data['rowsWritten']}  "
        f"quarantined: {data['rowsQuarantined']}  pages: {data['pages']}  users: {len(data['users'])}"
    )
    if data["sourceCounts"]:
        click.echo(f"source: {data['sourceCounts']}")
    users = list(data["users"].items())
    shown = ", ".join(f"{user!r}: {n}" for user, n in users[:20]) + (" …" if len(users) > 20 else "")
    click.echo(f"per user: {shown}")
    click.echo(f"vectors: {data['vectors']}  model: {data['model']}  dimensions: {data['dimensions']}")
    click.echo(f"models: {data['models']}  vector dimensions: {data['vectorDimensions']}")
    click.echo(f"start cursor: {data['startCursor']}  resumed: {data['resumed']}")
    click.echo(f"first: {data['firstCheckpoint']}  last: {data['lastCheckpoint']}")
    if data["checkpoint"]:
        click.echo(f"checkpoint: {data['checkpoint']}")
    if data["modelsInTable"]:
        click.echo(f"models in table: {data['modelsInTable']}")
    click.echo(f"elapsed: {data['elapsedSeconds']} s  ({data['rowsPerSecond']} rows/s)  run: {data['runId']}")
    if data["inactive"]:
        click.echo(f"inactive sources: {data['inactive']}")
    if data.get("rejectsTotal"):
        click.echo(
            f"quarantined: {data['rowsQuarantined']} row(s) in this run, {data['rejectsTotal']} of this "
            f"source in {data['rejectsTable']} for {data['table']} (not written; `memwork verify` lists them)"
        )
    if data["ownedElsewhere"]:
        click.echo(
            f"owned elsewhere: {data['ownedElsewhere']} id(s) another source holds in {data['table']} "
            "were quarantined, not overwritten or deleted (exit 3)"
        )
    for part in data.get("partitions") or []:
        done = f"written: {part['rowsWritten']}" if "rowsWritten" in part else f"planned: {part['planned']}"
        click.echo(f"  range {part['index']}: ({part['lower']}, {part['upper']}]  {done}")
    for reject in data["quarantined"]:
        click.echo(f"  rejected {reject['id']}: {reject['reason']}")
    for note in data["notes"]:
        click.echo(f"note: {note}")
    for row in data["sample"]:
        click.echo(f"  {row['id']}  {row['userId']}  {row['content']}")


commands: list = [import_command]
