"""CLI: ``memwork store load|export|info|read|list`` -- load any store from JSON lines, dump it,
summarise it, read one entry or list them (with ``--history``: superseded entries as kept).

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
from memwork.entry import DEFAULT_SCOPE
from memwork.errors import MissingStore
from memwork.stores import DEFAULT_DIMENSION, Store, open_store
from memwork.stores.transfer import entry_view, export_jsonl, list_view, load_jsonl, store_info

#: ``--history`` on read and list: superseded entries (``defrag supersede``) as kept
HISTORY_HELP = (
    "Show superseded entries (defrag supersede) as kept, with superseded_by and valid_until, "
    "instead of following them to the newer entry / leaving them out."
)


@click.group("store")
def store_group() -> None:
    """Load, dump, summarise, read and list memory stores.

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
@click.option(
    "--history/--no-history",
    default=True,
    show_default=True,
    help="Keep superseded entries (a backup restores them exactly); --no-history writes what a "
    "reader sees: superseded entries and the stubs leading into them left out.",
)
@json_option
def export_command(store_spec: str, scope: str | None, output: str, history: bool, as_json: bool) -> None:
    """Write every entry (stubs and superseded entries included) as JSON lines, in (scope, path) order.

    \b
    Example:
        memwork store export --store pg://embedded --scope agent-7 -o agent-7.jsonl
    """
    out = sys.stdout if output == "-" else output
    # no bar when the lines themselves go to the terminal
    quiet = as_json or (output == "-" and sys.stdout.isatty())
    with open_store(store_spec) as store, stage_progress(quiet=quiet) as bar:
        count = export_jsonl(store, out, scope=scope, progress=bar, history=history)
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


@store_group.command("read")
@store_option()
@click.option("--scope", default=DEFAULT_SCOPE, show_default=True, help="The entry's scope.")
@click.argument("path")
@click.option("--history", is_flag=True, help=HISTORY_HELP)
@json_option
def read_command(store_spec: str, scope: str, path: str, history: bool, as_json: bool) -> None:
    """Show the entry at PATH as a user reads it: a stub is followed to its target, a superseded
    entry to the newer one that replaced it. With --history a superseded entry is shown itself.

    Reading here counts no hit (an inspection does not keep an entry alive).

    \b
    Example:
        memwork store read --store ./memory --scope alice facts/allergy.md --history
    """
    with open_store(store_spec) as store:
        entry = store.read(path, scope=scope, count_hit=False, history=history)
    view = entry_view(entry, requested=path)
    if as_json:
        emit_json(view)
        return
    followed = f" (asked for {path}, followed)" if view["path"] != view["requested"] else ""
    click.echo(f"{view['scope']}/{view['path']}{followed}")
    if view["title"]:
        click.echo(f"title: {view['title']}")
    click.echo(f"updated: {view['updated_at']}  hits: {view['hits']}  size: {view['size']} bytes")
    if view["superseded_by"]:
        click.echo(f"superseded by: {view['superseded_by']}  valid until: {view['valid_until'] or '-'}")
    if view["stub"]:
        click.echo(f"stub: redirects to {view['redirect_to'] or '-'}")
    click.echo("")
    click.echo(view["content"])


@store_group.command("list")
@store_option()
@scope_option
@click.option("--prefix", default=None, help="Only paths starting with this.")
@click.option("--history", is_flag=True, help=HISTORY_HELP)
@json_option
def list_command(
    store_spec: str, scope: str | None, prefix: str | None, history: bool, as_json: bool
) -> None:
    """List the entries (stubs included), in (scope, path) order; superseded entries only with
    --history, marked with what superseded them.

    \b
    Example:
        memwork store list --store ./memory --scope alice --history
    """
    with open_store(store_spec) as store:
        rows = list_view(store, scope=scope, prefix=prefix, history=history)
    if as_json:
        emit_json({"entries": rows, "history": history})
        return
    for row in rows:
        mark = " [stub]" if row["stub"] else ""
        if row["superseded_by"]:
            mark = f" [superseded by {row['superseded_by']}, valid until {row['valid_until'] or '-'}]"
        click.echo(f"{row['scope']}/{row['path']}  {row['size']} bytes  {row['updated_at']}{mark}")
    click.echo(f"{len(rows)} entries" + ("" if history else " (superseded ones: --history)"), err=True)


commands = [store_group]
