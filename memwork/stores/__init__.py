"""Memory stores, chosen by one string (see :func:`open_store`)."""

from __future__ import annotations

from pathlib import Path

from memwork.embedded_pg import is_embedded_url
from memwork.errors import UsageError
from memwork.stores.base import EntryInfo, Store
from memwork.stores.filesystem import FilesystemStore
from memwork.stores.sql import DEFAULT_DIMENSION, SQLStore

__all__ = ["EntryInfo", "FilesystemStore", "SQLStore", "Store", "open_store"]

_SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg", "mysql", "mariadb", "mysql+pymysql")


def open_store(spec: str, *, dimension: int = DEFAULT_DIMENSION) -> Store:
    """Open the store a spec names, so every command takes one ``--store`` string.

    * a directory path (created when missing) -> :class:`FilesystemStore`
    * ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...`` -> :class:`SQLStore`
    * ``pg://embedded`` or ``pg://embedded/NAME`` -> the embedded PostgreSQL, then :class:`SQLStore`
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(
            "store", spec, "must be a directory, sqlite:///file.db, postgresql://... or pg://embedded"
        )
    spec = spec.strip()
    if "://" not in spec:
        return FilesystemStore(Path(spec))
    scheme = spec.split("://", 1)[0].lower()
    if is_embedded_url(spec) or scheme in _SQL_SCHEMES:
        return SQLStore(spec, dimension=dimension)
    from memwork.redaction import redact_url

    raise UsageError(
        "store",
        redact_url(spec),
        f"unknown scheme {scheme!r}; use a directory, sqlite:///file.db, postgresql://... or pg://embedded[/NAME]",
    )
