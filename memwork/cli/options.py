"""Options shared between commands, as plain decorators, and the output helpers every command uses."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    import rich.progress
    from rich.progress import Task, TaskID
    from rich.text import Text

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


def database_url_option(
    envvar: str | None = None, required: bool = False, help: str | None = None
) -> Callable[[F], F]:
    return click.option(
        "--database-url",
        "database_url",
        envvar=envvar,
        required=required,
        help=help or "Database URL (sqlite:///..., mysql://..., postgresql://..., pg://embedded).",
    )


def emit_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout (datetimes, numpy numbers and paths as text)."""
    click.echo(json_text(data))


#: a UTF-16 surrogate code point: in a Python string only ever a lone one (from a source's bytes
#: decoded with ``surrogateescape``, a JSON ``\udc00`` escape, ...), which no UTF-8 stream can write
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(data: Any) -> str:
    """``data`` as indented JSON that any stream can write, whatever strings it holds.

    Non-ASCII text stays readable (``ensure_ascii=False``); a lone surrogate -- which a UTF-8 stream
    refuses -- is written as its JSON escape ``\udc00``, so the output is valid JSON and reads back
    as the very same string. Raw characters outside strings cannot occur: JSON's syntax is ASCII."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def tolerant_stdout() -> None:
    """Text output escapes what the stream's encoding cannot hold (``\udc00``) instead of failing,
    as stderr always does: a value read from a source must never turn a finished run into exit 1."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if callable(reconfigure):
        with contextlib.suppress(ValueError, OSError):  # a detached or closed stream: nothing to do
            reconfigure(errors="backslashreplace")


def emit_verdict(payload: Any, as_json: bool, lines: Iterable[str], failure: str | None) -> None:
    """A checking command's ending: ``payload`` as JSON with ``--json``, else its text ``lines``;
    then exit 1 (:class:`~memwork.errors.CheckFailed`) with ``failure`` when it found a problem."""
    from memwork.errors import CheckFailed

    if as_json:
        emit_json(payload)
    else:
        for line in lines:
            click.echo(line)
    if failure is not None:
        raise CheckFailed(failure)


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


def progress_shown(quiet: bool) -> bool:
    """A bar is drawn only on a terminal (stderr) and never under ``--json``."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def _rich_bar(unit: str = "") -> Iterator[rich.progress.Progress]:
    """A transient rich ``Progress`` on stderr: description, bar, n/total, %, rate and ETA."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    per_second = f" {unit}/s" if unit else "/s"

    class RateColumn(TransferSpeedColumn):
        def render(self, task: Task) -> Text:
            from rich.text import Text

            speed = task.finished_speed or task.speed
            text = "?" + per_second if speed is None else f"{speed:,.0f}{per_second}"
            return Text(text, style="progress.data.speed")

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,  # stdout may carry data (export, --json): never divert it to stderr
    ) as bar:
        yield bar


class _StageBar:
    """The CLI's one adapter: :class:`memwork.progress.Progress` on a rich bar, one bar per stage
    (the last replaced), with rate and ETA."""

    def __init__(self, bar: rich.progress.Progress) -> None:
        self.bar = bar
        self.task: TaskID | None = None

    def start(self, description: str, total: int | None) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(description, total=total)

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.bar.advance(self.task, n)


@contextmanager
def stage_progress(*, quiet: bool, unit: str = "") -> Iterator[_StageBar | None]:
    """The ``progress=`` object for every long library call (defrag, store load/export, backfill).

    Yields None (no reporting at all) under ``--json`` or when stderr is not a terminal. ``unit``
    labels the rate (``"rows"`` -> ``1,234 rows/s``); the bar is drawn on stderr, the stream whose
    terminal check decides whether it is shown.
    """
    if not progress_shown(quiet):
        yield None
        return
    with _rich_bar(unit) as bar:
        yield _StageBar(bar)
