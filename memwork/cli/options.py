"""Options shared between commands, as plain decorators, and the output helpers every command uses."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def store_option(required: bool = True) -> Callable[[F], F]:
    return click.option(
        "--store",
        "store_spec",
        required=required,
        envvar="MEMWORK_STORE",
        help="Store: a directory, sqlite:///file.db, postgresql://... or pg://embedded[/NAME].",
    )


def scope_option(f: F) -> F:
    return click.option(
        "--scope", default=None, help="Only this scope (agent, bank or user). Default: every scope."
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def apply_option(f: F) -> F:
    return click.option(
        "--apply", "apply", is_flag=True, help="Really change things (default is a dry run)."
    )(f)


def database_url_option(envvar: str | None = None, required: bool = False, help: str | None = None):
    return click.option(
        "--database-url",
        "database_url",
        envvar=envvar,
        required=required,
        help=help or "Database URL (sqlite:///..., mysql://..., postgresql://..., pg://embedded).",
    )


def emit_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout (datetimes, numpy numbers and paths as text)."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


T = TypeVar("T")


@contextmanager
def progress(description: str, total: int | None, *, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar with rate and ETA on a terminal; silent under ``--json`` or when piped.

    Yields ``advance(n)``.
    """
    if quiet or not sys.stderr.isatty():
        yield lambda n=1: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    class RateColumn(TransferSpeedColumn):
        def render(self, task):  # type: ignore[no-untyped-def]
            from rich.text import Text

            speed = task.finished_speed or task.speed
            return Text("?/s" if speed is None else f"{speed:,.0f}/s", style="progress.data.speed")

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def iter_with_progress(
    items: Iterable[T], description: str, total: int | None, *, quiet: bool
) -> Iterator[T]:
    with progress(description, total, quiet=quiet) as advance:
        for item in items:
            yield item
            advance(1)
