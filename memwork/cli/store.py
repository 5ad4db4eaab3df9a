"""CLI: ``memwork store load|export|info`` -- load any store from JSON lines, dump it, summarise it.

``store load`` was ``store import`` (still accepted, hidden): ``memwork import`` is the migration of a
source into pgvector, an unrelated thing."""

from __future__ import annotations

import copy
import sys

import click

from memwork.cli.options import (
    apply_option,
    emit_json,
    json_option,
    scope_option,
    stage_progress,
    store_option,
)
from memwork.errors import MissingStore
from memwork.stores import DEFAULT_DIMENSION, Store, open_store
from memwork.stores.transfer import export_jsonl, load_jsonl, store_info


@click.group("store")
def store_group() -> None:
    """Load, dump and summarise memory stores.

    \b
    Example:
        memwork store info --store ./memory
    """


@store_group.command("load")
@store_option()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@apply_option
@json_option
def load_command(store_spec: str, file: str, apply: bool, as_json: bool) -> None:
    """Load FILE (JSON lines, as written by ``store export``) into the store.

    Every line is checked first -- against what every kind of store accepts -- and on any error
    nothing is written; SQL stores write the whole file in one transaction. Without --apply this is a
    dry run that only counts new, updated and unchanged entries (a store that does not exist yet
    counts everything as new; --apply creates it). Use - to read stdin.

    \b
    Example:
        memwork store load --store sqlite:///memory.db dump.jsonl --apply
    """
    source = sys.stdin.buffer if file == "-" else file
    try:
        store = open_store(store_spec)
    except MissingStore:
        store = None  # made by --apply only after every line passed

    def create() -> Store:
        return open_store(store_spec, create=True)

    dimension = None if "://" not in store_spec.strip() else DEFAULT_DIMENSION
    with stage_progress(quiet=as_json) as bar:
        try:
            report = load_jsonl(store, source, apply=apply, progress=bar, dimension=dimension, create=create)
        finally:
            if store is not None:
                store.close()
    if as_json:
        emit_json(report.to_dict())
        return
    verb = "imported" if apply else "would import (dry run; add --apply)"
    click.echo(f"{verb}: {report.new} new, {report.updated} updated, {report.unchanged} unchanged")
    for scope, counts in sorted(report.scopes.items()):
        click.echo(
            f"  {scope}: {counts['new']} new, {counts['updated']} updated, {counts['unchanged']} unchanged"
        )


def _hidden_alias(command: click.Command, name: str) -> click.Command:
    """``command`` under its former ``name`` too, left out of ``--help`` and docs/cli.md."""
    alias = copy.copy(command)
    alias.name, alias.hidden = name, True
    return alias


store_group.add_command(_hidden_alias(load_command, "import"))


@store_group.command("export")
@store_option()
@scope_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="File (default: stdout).",
)
@json_option
def export_command(store_spec: str, scope: str | None, output: str, as_json: bool) -> None:
    """Write every entry (stubs included) as JSON lines, in (scope, path) order.

    \b
    Example:
        memwork store export --store pg://embedded --scope agent-7 -o agent-7.jsonl
    """
    out = sys.stdout if output == "-" else output
    # no bar when the lines themselves go to the terminal
    quiet = as_json or (output == "-" and sys.stdout.isatty())
    with open_store(store_spec) as store, stage_progress(quiet=quiet) as bar:
        count = export_jsonl(store, out, scope=scope, progress=bar)
    if output != "-":
        if as_json:
            emit_json({"exported": count, "output": output})
        else:
            click.echo(f"exported {count} entries to {output}", err=True)


@store_group.command("info")
@store_option()
@json_option
def info_command(store_spec: str, as_json: bool) -> None:
    """Show entries, stubs, embedded entries and content size, overall and per scope.

    \b
    Example:
        memwork store info --store ./memory --json
    """
    with open_store(store_spec) as store:
        info = store_info(store)
    if as_json:
        emit_json(info)
        return
    click.echo(f"{info['store']}")
    click.echo(
        f"entries: {info['entries']}  stubs: {info['stubs']}  embedded: {info['embedded']}  "
        f"size: {info['size']} bytes"
    )
    for scope, per in info["scopes"].items():
        click.echo(f"  {scope}: {per['entries']} entries, {per['stubs']} stubs, {per['size']} bytes")


commands = [store_group]
