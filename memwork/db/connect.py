"""Connections, written once: SQLAlchemy engines for every store and backend, made from a parsed
:class:`~memwork.db.url.DatabaseURL`, and the psycopg connection (and MySQL error wrapper) that turns an
unreachable server into one clear error.

Connecting needs a server: :func:`get_engine` and :func:`pg_connect` resolve ``pg://embedded[/NAME]``
through :func:`memwork.db.embedded.ensure` (starting the server, creating database NAME and the
``vector`` extension when missing -- a connection is for using the database). A reading store asks
``ensure(url, create=False)`` itself before it connects.

Statements run under a call's deadline (:mod:`memwork.deadline`, the facade's worker pool) are bounded
on the server by :func:`_bound_by_deadline`, an engine event on every engine made here.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from math import ceil
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event

from memwork.db import embedded
from memwork.db.url import DatabaseURL, parse_url
from memwork.deadline import current_scope
from memwork.errors import CutOff, ServiceUnavailable, UsageError
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
            if key.startswith("sqlite"):
                _prepare_sqlite_file(key)
            engine = create_engine(key, **kwargs)
            if key.startswith("sqlite"):
                event.listen(engine, "connect", _sqlite_pragmas)
            event.listen(engine, "before_cursor_execute", _bound_by_deadline, retval=True)
            event.listen(engine, "handle_error", _deadline_error)
            _engines[key] = engine
        return engine


def _prepare_sqlite_file(sqlalchemy_url: str) -> None:
    """A SQLite file in the workspace (the default legacy store): the workspace is created now, when
    the file is about to be opened, not when its URL was merely computed."""
    from sqlalchemy.engine import make_url

    from memwork.workspace import prepare_workspace_file

    database = make_url(sqlalchemy_url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        prepare_workspace_file(database)


SQLITE_BUSY_MS = 5000  #: how long SQLite waits for another writer's lock outside a bounded call


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


#: statements MariaDB's ``SET STATEMENT ... FOR`` may prefix (DDL and session statements are left alone)
_BOUNDABLE = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|WITH)\b", re.IGNORECASE)
_BUSY_KEY = "memwork_busy_ms"


#: server errors that mean "the statement's time was up": MariaDB max_statement_time, MySQL
#: max_execution_time, PostgreSQL statement_timeout (SQLSTATE 57014)
_TIMEOUT_ERRNOS = (1969, 3024)
_TIMEOUT_SQLSTATE = "57014"


def ran_out_of_time(error: BaseException | None, budget_left: float) -> bool:
    """The database ended the statement because the call's time was up (not a real failure)."""
    args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
    if args and args[0] in _TIMEOUT_ERRNOS:
        return True
    if getattr(error, "sqlstate", None) == _TIMEOUT_SQLSTATE:
        return True
    # SQLite: its busy timeout (the time left) ran out waiting for another writer
    return "database is locked" in str(error) and budget_left <= 0.05


def _deadline_error(context: Any) -> BaseException | None:
    """A statement the server ended at the call's deadline is :class:`~memwork.errors.CutOff` (a
    timeout whose transaction rolls back), not a database failure."""
    scope = current_scope()
    if scope is None or not ran_out_of_time(context.original_exception, scope.deadline.statement_budget()):
        return None
    scope.timed_out = True
    return CutOff(f"{scope.label} timed out after {scope.deadline.budget_ms} ms (cancelled by the server)")


def _bound_by_deadline(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    """Bound each statement of a call running under a deadline by the time it has left, on the server.

    Nothing is sent once the time is up or the caller gave up (:class:`~memwork.errors.CutOff`).
    MariaDB: ``SET STATEMENT max_statement_time=<s> FOR <statement>`` (it also ends waits for table
    and row locks); PostgreSQL: ``statement_timeout`` for the rest of the transaction; SQLite: the
    busy timeout. MySQL (not MariaDB) has no statement timeout for writes below a second: there the
    commit gate alone decides (a write cut off at the deadline waits for its lock, then rolls back).
    Outside a bounded call this costs one context-variable read (SQLite: the usual busy timeout back).
    """
    scope = current_scope()
    dialect = conn.dialect.name
    if scope is None:
        if dialect == "sqlite" and conn.info.get(_BUSY_KEY, SQLITE_BUSY_MS) != SQLITE_BUSY_MS:
            cursor.connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
            conn.info[_BUSY_KEY] = SQLITE_BUSY_MS
        return statement, parameters
    budget = max(scope.check(), 0.001)  # MariaDB reads 0 as "no limit"
    if dialect == "mysql":
        if getattr(conn.dialect, "is_mariadb", False) and _BOUNDABLE.match(statement):
            statement = f"SET STATEMENT max_statement_time={budget:.3f} FOR {statement}"
    elif dialect == "postgresql":
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", (f"{ceil(budget * 1000)}ms",))
    elif dialect == "sqlite":
        ms = ceil(budget * 1000)
        cursor.connection.execute(f"PRAGMA busy_timeout={ms}")
        conn.info[_BUSY_KEY] = ms
    return statement, parameters


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
