"""Database connections, written once: URL normalisation, SQLAlchemy engines for every store and backend, and
the psycopg connection (and MySQL error wrapper) that turns an unreachable server into one clear error.

Accepted URLs: ``sqlite:///file.db``, ``mysql://`` / ``mariadb://`` (through PyMySQL),
``postgresql://`` (through psycopg 3) and ``pg://embedded[/NAME]`` (the embedded server).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event

from memwork.embedded_pg import is_embedded_url, resolve_url
from memwork.errors import ServiceUnavailable, UsageError
from memwork.redaction import redact_url

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def sqlalchemy_url(url: str) -> str:
    """Map a user-facing URL to the SQLAlchemy dialect+driver form memwork uses."""
    if not isinstance(url, str) or "://" not in url:
        raise UsageError("database_url", url, "must be a URL like sqlite:///file.db or mysql://user@host/db")
    if is_embedded_url(url):
        url = resolve_url(url)
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme in ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql"):
        return f"mysql+pymysql://{rest}"
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return f"postgresql+psycopg://{rest}"
    if scheme == "sqlite":
        return url
    raise UsageError("database_url", url.split("@")[-1], f"unsupported scheme {scheme!r}")


def libpq_url(url: str) -> str:
    """A URL psycopg can connect to directly (``pg://embedded`` resolved, driver suffix removed)."""
    if is_embedded_url(url):
        return resolve_url(url)
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url.split("://", 1)[1]
    if url.startswith("postgres://"):
        return "postgresql://" + url.split("://", 1)[1]
    return url


def dialect_of(url: str) -> str:
    """``sqlite``, ``mysql`` or ``postgresql``."""
    return sqlalchemy_url(url).split("+", 1)[0].split(":", 1)[0]


def get_engine(url: str) -> Engine:
    """A cached SQLAlchemy engine for ``url`` (one per URL per process)."""
    key = sqlalchemy_url(url)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            kwargs: dict = {"future": True, "pool_pre_ping": True}
            if key.startswith("mysql"):
                kwargs["connect_args"] = {"charset": "utf8mb4", "connect_timeout": 5}
            engine = create_engine(key, **kwargs)
            if key.startswith("sqlite"):
                event.listen(engine, "connect", _sqlite_pragmas)
            _engines[key] = engine
        return engine


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def dispose_all() -> None:
    """Close every cached engine (tests and long-lived notebooks call this)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def pg_connect(url: str, *, autocommit: bool = False) -> Iterator[Any]:
    """``psycopg.connect`` on ``url`` (``pg://embedded`` resolved); connection failures and a lost
    server become :class:`ServiceUnavailable` (exit 1, one line, password redacted)."""
    import psycopg

    try:
        conn = psycopg.connect(libpq_url(url), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(f"PostgreSQL at {redact_url(url)} unreachable: {_first_line(exc)}") from None
    try:
        with conn:
            yield conn
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise ServiceUnavailable(f"PostgreSQL at {redact_url(url)} failed: {_first_line(exc)}") from exc


@contextmanager
def mysql_errors(url: str) -> Iterator[None]:
    """SQLAlchemy/PyMySQL connection failures as :class:`ServiceUnavailable`."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise ServiceUnavailable(f"MySQL at {redact_url(url)} unreachable: {detail}") from None
