"""Connections, written once: SQLAlchemy engines for every store and backend, made from a parsed
:class:`~memwork.db.url.DatabaseURL`, and the psycopg connection (and MySQL error wrapper) that turns an
unreachable server into one clear error.

Connecting needs a server: :func:`get_engine` and :func:`pg_connect` resolve ``pg://embedded[/NAME]``
through :func:`memwork.db.embedded.ensure` (starting the server, creating database NAME and the
``vector`` extension when missing -- a connection is for using the database). A reading store asks
``ensure(url, create=False)`` itself before it connects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event

from memwork.db import embedded
from memwork.db.url import DatabaseURL, parse_url
from memwork.errors import ServiceUnavailable, UsageError
from memwork.redaction import first_line, redact_url

if TYPE_CHECKING:
    import psycopg

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def _ready(url: str | DatabaseURL) -> DatabaseURL:
    """The parsed URL with ``pg://embedded`` resolved (starting the server): a connection needs one."""
    return embedded.ensure(url, create=True)


def get_engine(url: str | DatabaseURL) -> Engine:
    """A cached SQLAlchemy engine for ``url`` (one per URL per process; ``pg://embedded`` started)."""
    key = _ready(url).sqlalchemy
    assert key is not None  # _ready resolved it
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


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
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


@contextmanager
def pg_connect(url: str | DatabaseURL, *, autocommit: bool = False) -> Iterator[psycopg.Connection[Any]]:
    """The one way memwork opens a psycopg connection: ``psycopg.connect`` on ``url``
    (``pg://embedded`` started and resolved); connection failures and a lost server become
    :class:`ServiceUnavailable` (exit 1, one line, password redacted)."""
    import psycopg

    given = parse_url(url)
    if given.dialect != "postgresql":
        raise UsageError(
            "database_url", given.redacted, "must be a PostgreSQL URL (postgresql:// or pg://embedded)"
        )
    target = _ready(given)
    assert target.libpq is not None  # a resolved PostgreSQL URL
    try:
        conn = psycopg.connect(target.libpq, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(f"PostgreSQL at {given.redacted} unreachable: {_line(exc)}") from None
    try:
        with conn:
            yield conn
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise ServiceUnavailable(f"PostgreSQL at {given.redacted} failed: {_line(exc)}") from exc


def pg_value(conn: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the one row ``query`` always returns (``count(*)``, ``to_regclass``, ...)."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return row[0]


def _line(exc: BaseException) -> str:
    return first_line(exc) or type(exc).__name__


@contextmanager
def mysql_errors(url: str) -> Iterator[None]:
    """SQLAlchemy/PyMySQL connection failures as :class:`ServiceUnavailable`."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        detail = _line(exc.orig if exc.orig is not None else exc)
        raise ServiceUnavailable(f"MySQL at {redact_url(url)} unreachable: {detail}") from None
