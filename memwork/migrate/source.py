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
from typing import Any

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


#: a listing that keeps answering empty pages with a next cursor this many times in a row never ends
MAX_EMPTY_PAGES = 1000


def iter_pages(
    source: Source, cursor: str | None, size: int, *, rows: bool = False, limit: int | None = None
) -> Iterator[tuple[Any, str | None]]:
    """Every page from ``cursor`` to the end, each with the cursor it was read from.

    ``rows``: read through the source's fast row path (``read_rows``: pages of the writer's rows, a
    keyset source whose cursor does not depend on the page size) instead of ``read_page``; then a
    ``limit`` asks for no more rows than it leaves, so the last page ends exactly at it (a record
    source's cursor may count pages of ``size``: it is always asked for ``size``, and the run cuts).

    Raises BackendError, before the offending page is handed on, when the listing does not advance:

    * the source's next cursor is one this run has already read from -- the same cursor (A -> A) or an
      earlier one (A -> B -> A, or a step backwards);
    * a page holds exactly the records of an earlier page of this run while the listing goes on -- a
      cursor that is always new over pages that are not (a server that ignores the offset it is sent,
      a cursor growing a character a page);
    * :data:`MAX_EMPTY_PAGES` empty pages in a row, each with a next cursor.

    Followed, any of these would loop forever. Pages handed on before stay committed, and the
    checkpoint never stores the looping cursor. A record repeated on a later page with other content
    (a listing that moved) is not a loop: the later copy wins, as ever.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError("page_size", size, "must be a positive integer")
    seen = {_cursor_key(cursor)}
    contents: dict[bytes, int] = {}  # fingerprint of a page's records -> the page that first held them
    pages = empty = 0
    read: Any = source.read_rows if rows else source.read_page  # type: ignore[attr-defined]
    left = limit
    while True:
        page: Any = read(cursor, min(size, left) if rows and left is not None else size)
        pages += 1
        following = page.next_cursor
        if following is not None and _cursor_key(following) in seen:
            raise BackendError(_loop_message(source, cursor, following, pages))
        if following is not None:
            empty = 0 if (page.rows if rows else page.records) else empty + 1
            if empty >= MAX_EMPTY_PAGES:
                raise BackendError(_stalled_message(source, f"{empty} empty pages in a row", cursor, pages))
            held = page.rows if rows else page.records
            first = pages if rows or not held else contents.setdefault(_page_key(page), pages)
            if first != pages:
                problem = f"a page with the same records as page {first} of this run, under a new cursor"
                raise BackendError(_stalled_message(source, problem, cursor, pages))
        yield page, cursor
        if left is not None:
            left -= len(page.rows if rows else page.records)
            if left <= 0:
                return
        if following is None:
            return
        seen.add(_cursor_key(following))
        cursor = following


def _page_key(page: Page) -> bytes:
    """A fixed-size fingerprint of a page's records (id, owner, content, times; not the vectors)."""
    digest = hashlib.blake2b(digest_size=16)
    for record in page.records:
        try:
            fields = (record.id, record.user_id, record.content, record.created_at, record.updated_at)
            digest.update(repr(fields).encode("utf-8", "surrogatepass") + b"\x1e")
        except Exception:  # a record that cannot even be shown: fingerprint it by its position
            digest.update(b"\x00%d" % id(record))
    return digest.digest()


def _stalled_message(source: Source, problem: str, read_from: str | None, pages: int) -> str:
    where = f"{source.name} ({redact_text(str(source.key))})"
    return (
        f"{where}: the listing does not advance: {problem} (read from cursor {shown_cursor(read_from)}); "
        f"stopped at page {pages} of this run (not imported; the pages before are kept)"
    )


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
