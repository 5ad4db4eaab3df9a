"""``memwork scaffold``: code skeletons for a new facade backend -- parse, call, print."""

from __future__ import annotations

import os

import click


@click.group("scaffold")
def scaffold() -> None:
    """Generate code skeletons.

    \b
    Example:
        memwork scaffold backend --name qdrant --category semantic --role scale-out-vector-store \\
            --capability resolve --capability write --write --dir adapters/
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
    from memwork.facade.scaffold import render_backend, write_scaffold

    rendered = render_backend(name, category, role, list(capabilities))
    if not write:
        for path, text in rendered.files.items():
            click.echo(f"# ---- {path} ----\n{text}")
        return
    for written in write_scaffold(rendered, directory):
        click.echo(f"wrote {written}")
    click.echo(f"next: memwork check contracts --adapter {os.path.join(directory, rendered.module_path)}")


commands = [scaffold]
