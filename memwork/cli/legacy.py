"""``memwork legacy``: the legacy conversation-memory tables -- parse, call, print."""

from __future__ import annotations

import click

from memwork.cli.options import apply_option, database_url_option, emit_json, json_option


@click.group("legacy")
def legacy() -> None:
    """The legacy conversation-memory tables (h5_conversation_messages, h5_user_memory_items).

    \b
    Example:
        memwork legacy init --database-url sqlite:///legacy.db --apply --json
    """


@legacy.command("init")
@database_url_option(
    envvar="MEMORY_LEGACY_DATABASE_URL",
    required=True,
    help="Legacy database URL (mysql://..., sqlite:///...). Env: MEMORY_LEGACY_DATABASE_URL.",
)
@apply_option
@json_option
def legacy_init(database_url: str, apply: bool, as_json: bool) -> None:
    """Print the DDL of the two legacy tables; --apply creates the missing ones.

    \b
    Examples:
        memwork legacy init --database-url mysql://root@127.0.0.1:3306/memind
        memwork legacy init --database-url mysql://root@127.0.0.1:3306/memind --apply --json
    """
    from dataclasses import asdict

    from memwork.legacy.schema import init_schema
    from memwork.redaction import redact_url

    result = init_schema(database_url, apply=apply)
    if as_json:
        emit_json({"database": redact_url(database_url), **asdict(result)})
        return
    if not apply:
        click.echo("\n\n".join(result.statements))
        click.echo("-- dry run: nothing executed; add --apply to create", err=True)
        return
    target = redact_url(database_url)
    for name in result.created:
        click.echo(f"created {name} in {target}")
    for name in result.existing:
        click.echo(f"exists  {name} in {target}")
    for column, collation in result.inexact_ids.items():
        click.echo(f"note    {column} is {collation}: memwork compares ids exactly (binary) anyway", err=True)


commands = [legacy]
