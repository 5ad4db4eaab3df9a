"""Legacy ``resolve`` on MariaDB/MySQL in one round trip, bounded by the call's deadline.

Why not the store's engine: a SQLAlchemy checkout pings the server and its return rolls back (two
round trips), and the three SELECTs (memories, profile, goals) are three more -- five per resolve
where the data needs one. Here the three SELECTs are one ``UNION ALL`` statement (compiled once by
SQLAlchemy from :data:`~memwork.legacy.schema.memory_items`, ids compared byte for byte by
:func:`~memwork.legacy.exact.exact_eq`) on an autocommit PyMySQL connection kept in a small LIFO
pool: read-only autocommit leaves no transaction to reset, so nothing is sent on return, and no
ping is sent on checkout -- a connection the server dropped while idle (``wait_timeout``, a restart)
fails its statement, which is retried once on a fresh connection (it only reads), and idle
connections older than :data:`RECYCLE_S` are replaced.

Every wait is bounded by the call's deadline (:mod:`memwork.deadline`), so the facade runs it on
the caller's thread: the wait for a connection slot by the time left; a new connection's connect,
handshake and login by the time left (``connect_timeout``, read and write timeouts); the statement
on the server by ``max_statement_time`` (MariaDB) and on the wire by the process-wide watchdog, which
shuts the socket down at the deadline (:meth:`~memwork.deadline.CallScope.on_abandon`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, bindparam, literal, select, union_all
from sqlalchemy.dialects import mysql

from memwork.db import ran_out_of_time
from memwork.deadline import ABANDONED, CallScope, current_scope
from memwork.errors import BackendError, CutOff
from memwork.legacy.exact import exact_text
from memwork.legacy.schema import memory_items

#: a PyMySQL connection (the package has no type information)
Conn = Any

MAX_OPEN = 16  #: connections open at once (each serves one resolve at a time)
MAX_IDLE = 4  #: idle connections kept for the next calls
RECYCLE_S = 300.0  #: an idle connection older than this is closed rather than reused
CONNECT_TIMEOUT_S = 5.0  #: outside a bounded call
PROFILE_LIMIT = 200  #: as :data:`memwork.legacy.store.PROFILE_LIMIT` (the store imports this module)
#: PyMySQL errors meaning the connection is gone (server gone away, lost, or a dead socket)
_DISCONNECTED = (2006, 2013, 2055, 0)
#: the parts of the one statement, in its order: memories, profile items, goals
MEMORIES, PROFILE, GOALS = 0, 1, 2


def _compile() -> tuple[str, dict[str, Any]]:
    """The three newest-first SELECTs as one ``UNION ALL`` of parenthesized parts, compiled once for
    MySQL (pyformat). No derived tables and no ORDER BY over the union: both make MariaDB copy the rows
    (TEXT columns: into an on-disk temporary table), which cost more than the two round trips saved.
    Each part's LIMIT picks its newest rows (its own ORDER BY decides which); the order in which the
    union's rows arrive is not promised by SQL, so rows are told apart by their ``part`` column and
    each part is put in newest-first order again here (:func:`_split`: at most ``limit`` rows)."""
    mine = and_(
        memory_items.c.user_id == exact_text(bindparam("user", type_=memory_items.c.user_id.type)),
        memory_items.c.status == "active",
    )
    parts = []
    for part, item_type, limit in (
        (MEMORIES, None, "memories"),
        (PROFILE, "profile", "profiles"),
        (GOALS, "goal", "goals"),
    ):
        query = select(literal(part).label("part"), *memory_items.c).where(mine)
        if item_type is not None:
            query = query.where(memory_items.c.type == item_type)
        order = (memory_items.c.updated_at.desc(), memory_items.c.id.desc())
        parts.append(query.order_by(*order).limit(bindparam(limit, type_=None)))
    compiled = union_all(*parts).compile(dialect=mysql.dialect(paramstyle="pyformat"))
    return str(compiled), dict(compiled.params)


class Reader:
    """A small pool of autocommit PyMySQL connections answering :meth:`read` (thread-safe)."""

    def __init__(self, sqlalchemy_url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        from sqlalchemy.engine import make_url

        self.url = make_url(sqlalchemy_url)
        self.clock = clock
        self.sql, self._params = _compile()
        self._idle: list[tuple[float, Conn]] = []  # (opened at, connection)
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_OPEN)
        #: send ``max_statement_time`` with the statement (MariaDB; detected on first connect). False
        #: leaves the deadline to the watchdog alone (MySQL; tests of the watchdog path)
        self.bound_on_server: bool | None = None
        self.counters = {"reads": 0, "connects": 0, "retried": 0}

    def has_idle(self) -> bool:
        """A connection is ready: a read now sends its statement at once (no connect)."""
        return bool(self._idle)

    def read(self, user_id: str, limit: int) -> list[list[dict[str, Any]]]:
        """``[memories, profile items, goals]`` of ``user_id``, each newest first (rows as dicts).

        A dropped idle connection is retried once on a new one; under a deadline the retry is sent
        only while time is left."""
        scope = current_scope()
        params = {
            **self._params,
            "user": user_id,
            "memories": limit,
            "profiles": PROFILE_LIMIT,
            "goals": PROFILE_LIMIT,
        }
        budget = None if scope is None else scope.check()
        if not self._slots.acquire(timeout=budget):
            raise CutOff(f"{_label(scope)} timed out waiting for a legacy connection")
        try:
            for attempt in (1, 2):
                conn = None
                try:
                    conn = self._checkout(scope)
                    rows = self._run(conn, scope, params)
                except Exception as exc:
                    if conn is not None:
                        _close(conn)
                    if attempt == 1 and _disconnected(exc) and (scope is None or scope.state != ABANDONED):
                        with self._lock:
                            self.counters["retried"] += 1
                        continue
                    raise _mapped(exc, scope) from exc
                self._checkin(conn)
                break
        finally:
            self._slots.release()
        with self._lock:
            self.counters["reads"] += 1
        return _split(rows)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, conn in idle:
            _close(conn)

    # ---- internals ------------------------------------------------------------------------------
    def _checkout(self, scope: CallScope | None) -> Conn:
        now = self.clock()
        with self._lock:
            while self._idle:
                opened, conn = self._idle.pop()
                if now - opened <= RECYCLE_S:
                    return conn
                _close(conn)
        return self._connect(scope)

    def _checkin(self, conn: Conn) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((conn.memwork_opened, conn))
                return
        _close(conn)

    def _connect(self, scope: CallScope | None) -> Conn:
        import pymysql  # type: ignore[import-untyped]

        wait = CONNECT_TIMEOUT_S if scope is None else min(CONNECT_TIMEOUT_S, scope.check())
        url = self.url
        conn = pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database or "",
            unix_socket=url.query.get("unix_socket"),
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=wait,
            read_timeout=wait,  # bounds the handshake and login too; lifted once connected
            write_timeout=wait,
        )
        conn._read_timeout = conn._write_timeout = None  # the watchdog bounds the statements
        conn.memwork_opened = self.clock()
        if self.bound_on_server is None:
            self.bound_on_server = "mariadb" in conn.get_server_info().lower()
        with self._lock:
            self.counters["connects"] += 1
        return conn

    def _run(
        self, conn: Conn, scope: CallScope | None, params: dict[str, Any]
    ) -> tuple[tuple[Any, ...], ...]:
        sql = self.sql
        if scope is not None:
            if not scope.on_abandon(lambda: _abort(conn)):
                scope.check()  # the caller gave up while we connected: CutOff, nothing sent
            budget = max(scope.check(), 0.001)  # MariaDB reads 0 as "no limit"
            if self.bound_on_server:
                sql = f"SET STATEMENT max_statement_time={budget:.3f} FOR {sql}"
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return tuple(cur.fetchall())
        finally:
            if scope is not None:
                scope.clear_abandon()  # before the connection is reused


_COLUMNS = tuple(c.name for c in memory_items.c)


def _split(rows: tuple[tuple[Any, ...], ...]) -> list[list[dict[str, Any]]]:
    """The statement's rows as ``[memories, profile, goals]`` of row dicts (``metadata`` decoded)."""
    out: list[list[dict[str, Any]]] = [[], [], []]
    names = _COLUMNS
    for row in rows:
        item = dict(zip(names, row[1:], strict=True))
        meta = item["metadata"]
        if isinstance(meta, str | bytes):
            item["metadata"] = json.loads(meta)
        out[int(row[0])].append(item)
    for part in out:  # newest first, as each part's ORDER BY chose them (the union keeps no order)
        part.sort(key=_newest_first, reverse=True)
    return out


def _newest_first(item: dict[str, Any]) -> tuple[Any, Any]:
    """The ``(updated_at, id)`` keyset, the order of the three SELECTs (both columns NOT NULL)."""
    return item["updated_at"], item["id"]


def _label(scope: CallScope | None) -> str:
    return "legacy.resolve" if scope is None else scope.label


def _disconnected(exc: BaseException) -> bool:
    """The connection was gone before the server answered (safe to retry: the statement only reads)."""
    import pymysql

    if isinstance(exc, pymysql.err.InterfaceError | ConnectionError | BrokenPipeError):
        return True
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return isinstance(exc, pymysql.err.OperationalError) and bool(args) and args[0] in _DISCONNECTED


def _mapped(exc: Exception, scope: CallScope | None) -> Exception:
    """A timeout at the deadline is :class:`CutOff`; anything else one :class:`BackendError`."""
    if isinstance(exc, CutOff | BackendError):
        return exc
    if scope is not None and scope.state == ABANDONED:
        scope.timed_out = True
        return CutOff(
            f"{scope.label} timed out after {scope.deadline.budget_ms} ms (connection closed at the deadline)"
        )
    if scope is not None and ran_out_of_time(exc, scope.deadline.statement_budget()):
        scope.timed_out = True
        return CutOff(
            f"{scope.label} timed out after {scope.deadline.budget_ms} ms (cancelled by the server)"
        )
    return BackendError(f"legacy resolve failed: {type(exc).__name__}: {exc}")


def _abort(conn: Conn) -> None:
    """Shut the connection's socket down (from the watchdog's thread): a read blocked on a hung
    server returns at once with an error, and the connection is then closed, never reused."""
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        sock.shutdown(socket.SHUT_RDWR)


def _close(conn: Conn) -> None:
    with contextlib.suppress(Exception):
        conn.close()
