"""CLI group ``smoke``: ``smoke pgvector`` (the post-migration round trip) and ``smoke external`` (one
synthetic call on one backend) -- parse, call, print."""

from __future__ import annotations

import click

from memwork.cli.options import emit_verdict, json_option
from memwork.cli.pgvector import pg_url_option, table_option


@click.group("smoke")
def smoke_group() -> None:
    """Smoke tests: the pgvector round trip, and one synthetic call on any backend.

    \b
    Examples:
        MEMORY_PGVECTOR_DATABASE_URL=postgresql://... memwork smoke pgvector --dimensions 384 --json
        memwork smoke external --backend qdrant --operation resolve
    """


@smoke_group.command("pgvector")
@pg_url_option
@click.option("--create-schema", is_flag=True, help="Create the table first (local setups only).")
@click.option("--create-extension", is_flag=True, help="With --create-schema: also CREATE EXTENSION vector.")
@table_option
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
    from memwork.rollout.smoke import run_smoke

    report = run_smoke(
        database_url,
        table=table,
        dimensions=dimensions,
        create_schema=create_schema,
        create_extension=create_extension,
        keep=keep,
    )
    lines = [
        f"{'ok  ' if check['ok'] else 'FAIL'} {check['check']} {check.get('error', '')}".rstrip()
        for check in report.checks
    ]
    lines.append(f"returned: {report.returned_order}  scores: {report.scores}")
    failure = None if report.ok else f"smoke pgvector failed on table {table}"
    emit_verdict(report.to_dict(), as_json, lines, failure)


@smoke_group.command("external")
@click.option("--backend", required=True, help="Backend name, e.g. qdrant, mem0, letta, redis-streams.")
@click.option(
    "--operation",
    type=click.Choice(["resolve", "write", "compact"]),
    default="resolve",
    show_default=True,
    help="The operation to call once with a synthetic user.",
)
@json_option
def smoke_external_command(backend: str, operation: str, as_json: bool) -> None:
    """Call one operation of BACKEND directly (not through the fail-open facade) with a synthetic user.

    not_configured (exit 0) when its flag or a required variable is missing; failed (exit 1, with the
    reason) when it is configured and the call fails; ok (exit 0) otherwise.

    \b
    Example:
        MEMORY_MEM0_ENABLED=1 MEMORY_MEM0_API_KEY=... memwork smoke external --backend mem0 --operation write
    """
    from memwork.rollout.smoke import run_external_smoke

    report = run_external_smoke(backend, operation)
    line = f"{report.backend} {report.operation}: {report.status}"
    if report.reason:
        line += f" ({report.reason})"
    lines = [line]
    if report.status == "ok":
        lines.append(
            f"elapsed: {report.elapsed_ms} ms  returned: {report.returned}  cleanup: {report.cleanup}"
        )
    failure = (
        None if report.ok else f"smoke external {report.backend} {report.operation} failed: {report.reason}"
    )
    emit_verdict(report.to_dict(), as_json, lines, failure)


commands: list = [smoke_group]
