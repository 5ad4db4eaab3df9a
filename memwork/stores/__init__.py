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
    scheme = spec.split("://", 1)[0].lower()
    if is_embedded_url(spec) or scheme in _SQL_SCHEMES:
        if not create and scheme == "sqlite":
            create = _require_sqlite_file(spec)  # an in-memory database is always new
        if not create and is_embedded_url(spec):
            _require_embedded_database(spec)
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


def _require_embedded_database(spec: str) -> None:
    """Refuse ``pg://embedded/NAME`` when the workspace's server has no database NAME (asking it
    directly: resolving the URL would create the database)."""
    from urllib.parse import urlsplit

    import psycopg

    from memwork import embedded_pg
    from memwork.identifiers import check_identifier

    parts = urlsplit(spec)
    if parts.netloc != "embedded":
        return  # resolve_url names the mistake
    name = check_identifier(parts.path.strip("/") or embedded_pg.DEFAULT_DATABASE, field="database")
    admin_url = embedded_pg.start().get_uri()  # type: ignore[attr-defined]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if not found:
        problem = f"no database {name!r} on the embedded PostgreSQL (a reading command never creates a store)"
        raise MissingStore("store", spec, problem)
