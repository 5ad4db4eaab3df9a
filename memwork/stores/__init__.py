"""Memory stores, chosen by one string (see :func:`open_store`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memwork.db import DatabaseURL, is_database_url, parse_url
from memwork.errors import MissingStore, UsageError
from memwork.redaction import redact_url
from memwork.stores.base import EntryInfo, Store
from memwork.stores.filesystem import FilesystemStore
from memwork.stores.sql import DEFAULT_DIMENSION, SQLStore

__all__ = [
    "DEFAULT_DIMENSION",
    "EntryInfo",
    "FilesystemStore",
    "SQLStore",
    "Store",
    "open_store",
    "opened_store",
]


def open_store(spec: str, *, dimension: int = DEFAULT_DIMENSION, create: bool = False) -> Store:
    """Open the store a spec names, so every command takes one ``--store`` string.

    * a directory path -> :class:`FilesystemStore`
    * ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...`` (any scheme of
      :data:`memwork.db.SCHEMES`) -> :class:`SQLStore`
    * ``pg://embedded`` or ``pg://embedded/NAME`` -> the embedded PostgreSQL, then :class:`SQLStore`

    A store that does not exist is an error (:class:`MissingStore`, exit 2), never an empty store:
    only ``create=True`` (a writing command such as ``store load --apply``) makes the directory,
    the SQLite file or the table (and the database NAME of ``pg://embedded/NAME``). A database on
    another server (``postgresql://``, ``mysql://``) must always exist already.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(
            "store", spec, "must be a directory, sqlite:///file.db, postgresql://... or pg://embedded"
        )
    spec = spec.strip()
    if "://" not in spec:
        if not create and not Path(spec).expanduser().exists():
            raise MissingStore("store", spec, "no such directory (a reading command never creates a store)")
        return FilesystemStore(Path(spec))
    if not is_database_url(spec):
        scheme = spec.split("://", 1)[0].lower()
        raise UsageError(
            "store",
            redact_url(spec),
            f"unknown scheme {scheme!r}; use a directory, sqlite:///file.db, postgresql://... "
            "or pg://embedded[/NAME]",
        )
    url = parse_url(spec)  # parsed once; nothing connects or starts yet
    if not create and url.dialect == "sqlite":
        create = _require_sqlite_file(url)  # an in-memory database is always new
    try:  # pg://embedded/NAME: SQLStore resolves it once, creating the database only with ``create``
        return SQLStore(url, dimension=dimension, create=create)
    except MissingStore as exc:
        raise MissingStore("store", url.redacted, exc.problem) from None


@contextmanager
def opened_store(store: str | Store) -> Iterator[Store]:
    """``store`` open for the block: a spec is opened here and closed after it; a :class:`Store` the
    caller opened is used as it is and left open (its owner closes it), so every library call and the
    notebooks can take either."""
    if isinstance(store, Store):
        yield store
        return
    with open_store(store) as opened:
        yield opened


def _require_sqlite_file(url: DatabaseURL) -> bool:
    """Refuse a SQLite URL naming a file that does not exist; True for an in-memory database (which
    is new on every open, so it needs its table)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(url.text).database
    except ArgumentError:
        return False  # SQLStore reports a malformed URL
    if not database or database == ":memory:":
        return True
    if not database.startswith("file:") and not Path(database).expanduser().exists():
        raise MissingStore(
            "store", url.redacted, "no such SQLite file (a reading command never creates a store)"
        )
    return False
