"""``memwork scaffold``: code skeletons for a new facade backend or migration source -- parse, call, print."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from memwork.facade.scaffold import Scaffold


@click.group("scaffold")
def scaffold() -> None:
    """Generate code skeletons: a facade backend, a migration source.

    \b
    Examples:
        memwork scaffold backend --name qdrant --category semantic --role scale-out-vector-store \\
            --capability resolve --capability write --write --dir adapters/
        memwork scaffold source --name zep --write --dir sources/
    """


@scaffold.command("backend")
@click.option("--name", required=True, help="Kebab-case backend name (what MEMORY_BACKEND selects).")
@click.option("--category", required=True, help="semantic | extraction | lifecycle | behavior | policy.")
@click.option("--role", required=True, help="One-line role, e.g. scale-out-vector-store.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    required=True,
    help="resolve | write | compact; repeat for several.",
)
@click.option("--write", "write", is_flag=True, help="Write the files (default: print them).")
@click.option(
    "--dir",
    "directory",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where --write puts the adapter and its test.",
)
def scaffold_backend(
    name: str, category: str, role: str, capabilities: tuple[str, ...], write: bool, directory: str
) -> None:
    """Render a disabled-by-default adapter module and its test; --write writes them (never overwrites).

    \b
    Example:
        memwork scaffold backend --name mem0 --category extraction \\
            --role automatic-memory-generation --capability write --capability compact --write
    """
    from memwork.facade.scaffold import render_backend

    rendered = render_backend(name, category, role, list(capabilities))
    _emit(rendered, write, directory, "--adapter")


@scaffold.command("source")
@click.option("--name", required=True, help="Kebab-case source name (what `memwork import --from` takes).")
@click.option("--write", "write", is_flag=True, help="Write the files (default: print them).")
@click.option(
    "--dir",
    "directory",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where --write puts the source and its test.",
)
def scaffold_source(name: str, write: bool, directory: str) -> None:
    """Render a migration source module and its test; --write writes them (never overwrites).

    The module's source_from_env(env) reads a JSON-lines export (MEMORY_<NAME>_EXPORT) until you
    replace its listing with the service's; `check contracts --source FILE` checks it.

    \b
    Example:
        memwork scaffold source --name zep --write --dir sources/
    """
    from memwork.facade.scaffold import render_source

    _emit(render_source(name), write, directory, "--source")


def _emit(rendered: Scaffold, write: bool, directory: str, check_option: str) -> None:
    """Print both files, or write them and say how to check the module."""
    from memwork.facade.scaffold import write_scaffold

    if not write:
        for path, text in rendered.files.items():
            click.echo(f"# ---- {path} ----\n{text}")
        return
    for written in write_scaffold(rendered, directory):
        click.echo(f"wrote {written}")
    click.echo(
        f"next: memwork check contracts {check_option} {os.path.join(directory, rendered.module_path)}"
    )


commands = [scaffold]
