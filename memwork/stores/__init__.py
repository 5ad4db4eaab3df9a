"""Memory stores, chosen by one string (see :func:`open_store`)."""

from __future__ import annotations

from pathlib import Path

from memwork.embedded_pg import is_embedded_url
from memwork.errors import UsageError
from memwork.stores.base import EntryInfo, Store
from memwork.stores.filesystem import FilesystemStore
from memwork.stores.sql import DEFAULT_DIMENSION, MissingStore, SQLStore

__all__ = [
    "DEFAULT_DIMENSION",
    "EntryInfo",
    "FilesystemStore",
    "MissingStore",
    "SQLStore",
    "Store",
    "open_store",
]

_SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg", "mysql", "mariadb", "mysql+pymysql")


def open_store(spec: str, *, dimension: int = DEFAULT_DIMENSION, create: bool = False) -> Store:
    """Open the store a spec names, so every command takes one ``--store`` string.

    * a directory path -> :class:`FilesystemStore`
    * ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...`` -> :class:`SQLStore`
    * ``pg://embedded`` or ``pg://embedded/NAME`` -> the embedded PostgreSQL, then :class:`SQLStore`

    A store that does not exist is an error (:class:`MissingStore`, exit 2), never an empty store:
    only ``create=True`` (a writing command such as ``store import --apply``) makes the directory,
    the SQLite file or the table. A server database (PostgreSQL, MySQL) must always exist already;
    ``pg://embedded/NAME`` is the workspace's own server, where the database is made on first use.
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
    scheme = spec.split("://", 1)[0].lower()
    if is_embedded_url(spec) or scheme in _SQL_SCHEMES:
        if not create and scheme == "sqlite":
            create = _require_sqlite_file(spec)  # an in-memory database is always new
        try:
            return SQLStore(spec, dimension=dimension, create=create)
        except MissingStore as exc:
            from memwork.redaction import redact_url

            raise MissingStore("store", redact_url(spec), exc.problem) from None
    from memwork.redaction import redact_url

    raise UsageError(
        "store",
        redact_url(spec),
        f"unknown scheme {scheme!r}; use a directory, sqlite:///file.db, postgresql://... or pg://embedded[/NAME]",
    )


def _require_sqlite_file(spec: str) -> bool:
    """Refuse a SQLite URL naming a file that does not exist; True for an in-memory database (which
    is new on every open, so it needs its table)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(spec).database
    except ArgumentError:
        return False  # SQLStore reports a malformed URL
    if not database or database == ":memory:":
        return True
    if not database.startswith("file:") and not Path(database).expanduser().exists():
        raise MissingStore("store", spec, "no such SQLite file (a reading command never creates a store)")
    return False
