"""Progress reporting for long library operations, with no UI dependency.

The one progress protocol. Library functions that can take long (loading a store, finding pairs,
applying a plan, import and export, the backfill) accept an optional ``progress`` object: the function
that knows a stage's total calls :meth:`Progress.start` once for it (None when unknown), and the work
then calls :meth:`Progress.advance` as it is done, so that the advances of a stage sum to its total.
A part of a stage never starts one of its own: a pair search (``similarity``) or ``Store.put_many``
only advances the stage its caller started. The CLI passes its one rich-bar adapter
(``memwork.cli.options.stage_progress``); tests pass a recorder.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")

#: how many items :func:`track` groups into one ``advance`` call
TRACK_EVERY = 256


class Progress(Protocol):
    """Receives the stages of a long operation and how far each has got."""

    def start(self, description: str, total: int | None) -> None:
        """A new stage begins (``total`` units of work, None when unknown)."""

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the current stage are done."""


def track(
    items: Iterable[T],
    progress: Progress | None,
    description: str,
    total: int | None,
    *,
    every: int = TRACK_EVERY,
) -> Iterator[T]:
    """Yield ``items``, starting a stage and advancing it every ``every`` items (and at the end)."""
    if progress is None:
        yield from items
        return
    progress.start(description, total)
    pending = 0
    for item in items:
        yield item
        pending += 1
        if pending >= every:
            progress.advance(pending)
            pending = 0
    if pending:
        progress.advance(pending)
