"""A migration source: any backend that can list every memory it holds, page by page, to the end.

A source is built from the same variables as its backend (``MEMORY_QDRANT_URL``, ...; the feature
flag is not needed to read) by a factory ``source_from_env(env) -> Source`` in the backend's own
module, registered like backends are: entry points of group ``memwork.sources`` (the built-ins are
declared in code in :mod:`memwork.plugins`, exactly as a plugin declares its own in ``pyproject.toml``;
a plugin that fails to load is reported there, like a backend plugin).

Paging is by an opaque ``cursor`` the source itself returns (Qdrant's next point id, Letta's last
passage id, a Redis stream id, a page number): :func:`iter_pages` follows it until the source says
there is nothing more, and refuses a source whose next cursor is one the run has already read from
(the same one, or an earlier one: A -> B -> A), so a listing is never silently cut at the first page
nor looped forever. The import run stores the cursor of each
committed page as its checkpoint, so ``--resume`` continues where a killed run stopped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from memwork.contracts import Page, Source, SourceFactory, SourceRecord, require
from memwork.errors import BackendError, UsageError
from memwork.plugins import SOURCES as SOURCE_GROUP
from memwork.plugins import open_source, source_names
from memwork.redaction import redact_text

__all__ = [  # the contract's names, re-exported for source modules that import them from here
    "SOURCE_GROUP",
    "Page",
    "Source",
    "SourceFactory",
    "SourceRecord",
    "iter_pages",
    "open_source",
    "require",
    "shown_cursor",
    "source_names",
]


def iter_pages(source: Source, cursor: str | None, size: int) -> Iterator[tuple[Page, str | None]]:
    """Every page from ``cursor`` to the end, each with the cursor it was read from.

    Raises BackendError, before the offending page is handed on, when the source's next cursor is one
    this run has already read from -- the same cursor (A -> A) or an earlier one (A -> B -> A, or a
    step backwards): followed, it would loop forever. Pages handed on before stay committed, and the
    checkpoint never stores the looping cursor.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError("page_size", size, "must be a positive integer")
    seen = {_cursor_key(cursor)}
    pages = 0
    while True:
        page = source.read_page(cursor, size)
        pages += 1
        following = page.next_cursor
        if following is not None and _cursor_key(following) in seen:
            raise BackendError(_loop_message(source, cursor, following, pages))
        yield page, cursor
        if following is None:
            return
        seen.add(_cursor_key(following))
        cursor = following


#: cursors longer than this are shown cut (an opaque token may be kilobytes long)
_SHOWN_CURSOR_CHARS = 60


def _cursor_key(cursor: object) -> bytes:
    """A fixed-size fingerprint of a cursor: a long run remembers every cursor it read from."""
    text = cursor if isinstance(cursor, str) else repr(cursor)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def shown_cursor(cursor: object) -> str:
    """A cursor for an error message: secrets in URLs redacted, unprintable characters escaped, cut."""
    text = redact_text(cursor if isinstance(cursor, str) else repr(cursor))
    if not text.isprintable():  # control characters, lone surrogates
        text = text.encode("unicode_escape").decode("ascii")
    if len(text) > _SHOWN_CURSOR_CHARS:
        text = text[:_SHOWN_CURSOR_CHARS] + f"... ({len(text)} chars)"
    return repr(text)


def _loop_message(source: Source, read_from: str | None, following: str, pages: int) -> str:
    where = f"{source.name} ({redact_text(str(source.key))})"
    if following == read_from:
        problem = f"the listing did not advance past cursor {shown_cursor(following)}"
    else:
        problem = (
            f"the listing looped back to cursor {shown_cursor(following)}, already read in this run "
            f"(next cursor of the page read from {shown_cursor(read_from)})"
        )
    return (
        f"{where}: {problem}; stopped at page {pages} of this run (not imported; the pages before are kept)"
    )
