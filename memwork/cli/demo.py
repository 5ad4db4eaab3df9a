"""CLI command ``demo``: the main job on embedded defaults -- call memwork, print, exit."""

from __future__ import annotations

from typing import Any

import click

from memwork.cli.options import emit_json, json_option


@click.command("demo")
@click.option("--workspace", type=click.Path(file_okay=False), default=None, help="Workspace folder.")
# hidden size knobs (tests and quick tries); the documented demo is the default size
@click.option("--users", type=click.IntRange(1), default=None, hidden=True)
@click.option("--entries", type=click.IntRange(1), default=None, hidden=True)
@json_option
def demo(workspace: str | None, users: int | None, entries: int | None, as_json: bool) -> None:
    """The main job on embedded defaults: demo data, schema, backfill and all four reports.

    \b
    Example:
        memwork demo
    """
    from memwork.samples.demo import run_demo

    sizes: dict[str, Any] = {k: v for k, v in {"users": users, "entries": entries}.items() if v is not None}
    result = run_demo(workspace, quiet=as_json, **sizes)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.describe())
    raise SystemExit(result.exit_code)


commands = [demo]
