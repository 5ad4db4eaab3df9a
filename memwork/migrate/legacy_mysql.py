"""The legacy table ``h5_user_memory_items`` as a migration source (``legacy-mysql``), registered like
every other source: keyset pages of active rows in ``(updated_at, id)`` order, never OFFSET.

The keyset position ``{updatedAt, id}`` travels as the source protocol's opaque cursor (its JSON text,
:meth:`Cursor.encode`). Besides :meth:`LegacyMySQLSource.read_page` (records, like any source) the
source has a fast row path, :meth:`LegacyMySQLSource.read_rows`: the writer's text rows straight from
the DBAPI cursor, no Python object per value, so the legacy migration keeps its speed. Two optional
capabilities the run uses when a source has them: ``count(cursor)`` (the dry run's plan) and
``inactive_ids()`` (the destination rows whose source row is archived or deleted: the prune).

The legacy table's rows are written without an owner marker: every unmarked row is this source's
(:data:`memwork.migrate.ownership.LEGACY_OWNER`).
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, Text, and_, cast, func, or_, select, true, type_coerce

from memwork.contracts import Page, Row, SourceRecord, record_page, require
from memwork.entry import as_utc
from memwork.errors import BackendError, UsageError
from memwork.legacy.schema import memory_items
from memwork.redaction import redact_url

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: the registry name of the legacy table's source
SOURCE_NAME = "legacy-mysql"
#: where the source reads its database URL (the variable the ``backfill`` command always read)
MYSQL_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"

ID_CHUNK = 5000


#: MySQL's text of a DATETIME (``CAST(updated_at AS CHAR)``), also one that is no date at all: with the
#: default ``sql_mode`` MariaDB stores zero and partial dates (``0000-00-00``, ``2024-00-15``)
_MYSQL_DATETIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")


@dataclass(frozen=True, order=True)
class Cursor:
    """A keyset position ``(updated_at, id)``: rows strictly after it come next. Naive UTC, like MySQL.

    ``text``: MySQL's own text of an ``updated_at`` that is no datetime (a zero or partial date,
    which sorts before or between real ones); the keyset binds it as it is, so such a row is passed
    like any other (``updated_at`` is then :data:`datetime.min`, for display only)."""

    updated_at: datetime
    id: str
    text: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, updated_at: object, id: object = "") -> Cursor:
        """From CLI/JSON values: ISO 8601 text or epoch seconds (``0`` = the beginning), and an id."""
        if not isinstance(id, str):
            raise UsageError("cursor_id", id, "must be a string")
        if isinstance(updated_at, str) and updated_at.strip().lstrip("-").replace(".", "", 1).isdigit():
            updated_at = float(updated_at)
        try:
            moment = as_utc(updated_at)
        except (UsageError, OverflowError, OSError, ValueError):
            if isinstance(updated_at, str) and _MYSQL_DATETIME_RE.fullmatch(updated_at.strip()):
                return cls(datetime.min, id, updated_at.strip())  # a zero or partial MySQL date
            raise UsageError("cursor_updated_at", updated_at, "must be ISO 8601 or epoch seconds") from None
        return cls(moment.astimezone(UTC).replace(tzinfo=None), id)

    def to_json(self) -> dict[str, str]:
        shown = self.text if self.text is not None else self.updated_at.isoformat(timespec="microseconds")
        return {"updatedAt": shown, "id": self.id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cursor:
        return cls.parse(data.get("updatedAt"), data.get("id", ""))

    def encode(self) -> str:
        """The cursor as the source protocol's opaque text (JSON of :meth:`to_json`)."""
        return json.dumps(self.to_json(), ensure_ascii=True)

    @classmethod
    def decode(cls, text: str | None) -> Cursor | None:
        """:meth:`encode`'s text back (None: the beginning); anything else is a usage error."""
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UsageError("cursor", text, 'must be {"updatedAt": ..., "id": ...}')
        return cls.from_json(data)

    def bound(self) -> datetime | str:
        """The value the keyset compares ``updated_at`` with (MySQL's text for a zero date)."""
        return self.text if self.text is not None else self.updated_at

    def follows(self, earlier: Cursor) -> bool:
        """False when this cursor, taken after ``earlier``, did not move forward: the same position,
        or an earlier ``updated_at`` (ids are compared by the database's collation, not here)."""
        if self.text is not None or earlier.text is not None:
            return (self.text, self.updated_at, self.id) != (earlier.text, earlier.updated_at, earlier.id)
        if self.updated_at != earlier.updated_at:
            return self.updated_at > earlier.updated_at
        return self.id != earlier.id


def cursor_of(row: Mapping[str, Any]) -> Cursor:
    """The keyset position of a source row (where the next page starts); a zero or partial MySQL date
    keeps MySQL's text (see :class:`Cursor`)."""
    value = row["updated_at"]
    try:
        return Cursor(row_timestamp(value), row["id"])
    except ValueError:
        return Cursor(datetime.min, row["id"], str(value))


def row_timestamp(value: datetime | str) -> datetime:
    """MySQL's ``CAST(datetime AS CHAR)`` text (or a datetime) as a naive UTC datetime.

    ValueError for a text that is no date (MySQL's ``0000-00-00``)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


_SOURCE_COLUMNS = (
    memory_items.c.id,
    memory_items.c.user_id,
    memory_items.c.content,
    memory_items.c.type,
    # metadata and timestamps travel as text: no JSON decode/encode or datetime objects per row in
    # Python; PostgreSQL casts them once in the merge (``::jsonb``, ``AT TIME ZONE 'UTC'``)
    type_coerce(memory_items.c.metadata, Text).label("metadata"),
    memory_items.c.source_session_id,
    memory_items.c.source_message_id,
    cast(memory_items.c.created_at, String).label("created_at"),
    cast(memory_items.c.updated_at, String).label("updated_at"),
)


def status_counts(conn: Connection) -> dict[str, int]:
    """Source rows per status, plus ``total`` (``active`` always present)."""
    rows = conn.execute(select(memory_items.c.status, func.count()).group_by(memory_items.c.status)).all()
    counts = {str(status): int(n) for status, n in rows}
    counts["total"] = sum(counts.values())
    counts.setdefault("active", 0)
    return counts


def _after(cursor: Cursor | None, upper: Cursor | None = None, *, active_only: bool = True) -> Any:
    """The keyset predicate: active rows strictly after ``cursor`` in (updated_at, id) order (and,
    for a key range, at or before ``upper``); ``active_only=False``: rows of any status (what the
    ``(updated_at, id)`` index alone answers, without reading a row)."""
    t = memory_items.c
    active = t.status == "active" if active_only else true()
    if upper is not None:
        top = upper.bound()
        active = and_(active, or_(t.updated_at < top, and_(t.updated_at == top, t.id <= upper.id)))
    if cursor is None:
        return active
    at = cursor.bound()
    return and_(active, or_(t.updated_at > at, and_(t.updated_at == at, t.id > cursor.id)))


def count_after(conn: Connection, cursor: Cursor | None, upper: Cursor | None = None) -> int:
    """Active source rows strictly after ``cursor`` (what a run without a limit would read)."""
    return int(
        conn.execute(select(func.count()).select_from(memory_items).where(_after(cursor, upper))).scalar_one()
    )


def read_batch(conn: Connection, cursor: Cursor | None, size: int, upper: Cursor | None = None) -> list[Row]:
    """The next ``size`` active rows after ``cursor`` (up to ``upper``), keyset order, never OFFSET.

    The Core statement runs on the DBAPI cursor (half the per-row cost of SQLAlchemy result rows),
    and the read transaction ends right after, so a long backfill never pins an InnoDB snapshot.
    """
    query = (
        select(*_SOURCE_COLUMNS)
        .where(_after(cursor, upper))
        .order_by(memory_items.c.updated_at, memory_items.c.id)
        .limit(size)
    )
    return _fetch_rows(conn, query)


def count_keys(conn: Connection, cursor: Cursor | None) -> int:
    """Rows of any status after ``cursor``: counted on the ``(updated_at, id)`` index alone."""
    query = select(func.count()).select_from(memory_items).where(_after(cursor, active_only=False))
    count = int(conn.execute(query).scalar_one())
    conn.rollback()
    return count


def nth_cursor(conn: Connection, cursor: Cursor | None, n: int) -> Cursor | None:
    """The keyset position of the ``n``-th row (any status) after ``cursor`` (1-based; None: fewer
    rows): the inclusive upper bound of a key range. Rows of every status are counted so the walk
    stays on the ``(updated_at, id)`` index (a status test would read every row it passes); bounds
    are bounds whatever they count, only the ranges' balance depends on it."""
    t = memory_items.c
    where = _after(cursor, active_only=False)
    query = select(t.updated_at, t.id).where(where).order_by(t.updated_at, t.id).limit(1).offset(n - 1)
    row = conn.execute(query).first()
    conn.rollback()
    return cursor_of({"updated_at": row[0], "id": row[1]}) if row else None


def _fetch_rows(conn: Connection, query: Any) -> list[Row]:
    """Run ``query`` (columns of :data:`_SOURCE_COLUMNS`) as the writer's text rows, then end the
    read transaction."""
    if conn.dialect.name not in ("mysql", "mariadb"):
        # SQLite and others: SQLAlchemy's result processing turns stored text back into datetimes/JSON.
        rows = [dict(row) for row in conn.execute(query).mappings()]
        conn.rollback()
        return typing.cast("list[Row]", rows)
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # an open connection
    cur = dbapi.cursor()
    try:
        cur.execute(str(compiled), compiled.params)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row, strict=False)) for row in cur.fetchall()]  # len(names) values each
    finally:
        cur.close()
        dbapi.rollback()
    return typing.cast("list[Row]", rows)  # the columns of _SOURCE_COLUMNS, as text


def rows_by_id(conn: Connection, ids: list[str]) -> dict[str, tuple[str, Row]]:
    """``{id: (status, row)}`` of the rows of ``ids`` the table holds, whatever their status (a
    repair re-copies exactly the keys a certificate named; an id absent here is gone at the source)."""
    found: dict[str, tuple[str, Row]] = {}
    for start in range(0, len(ids), ID_CHUNK):
        chunk = ids[start : start + ID_CHUNK]
        query = select(*_SOURCE_COLUMNS, memory_items.c.status).where(memory_items.c.id.in_(chunk))
        for row in _fetch_rows(conn, query):
            fields = typing.cast("dict[str, Any]", row)
            status = str(fields.pop("status"))
            found[str(row["id"])] = (status, row)
    return found


def last_cursor(conn: Connection, cursor: Cursor | None, limit: int | None) -> Cursor | None:
    """Where a run of ``limit`` rows would stop: the newest row, or walking keys-only pages to ``limit``."""
    t = memory_items.c
    if limit is None:
        query = select(t.updated_at, t.id).where(_after(cursor)).order_by(t.updated_at.desc(), t.id.desc())
        row = conn.execute(query.limit(1)).first()
        return cursor_of({"updated_at": row[0], "id": row[1]}) if row else None
    position, left = cursor, limit
    while left > 0:
        step = min(left, ID_CHUNK)
        query = select(t.updated_at, t.id).where(_after(position)).order_by(t.updated_at, t.id).limit(step)
        keys = conn.execute(query).all()
        if not keys:
            break
        position, left = cursor_of({"updated_at": keys[-1][0], "id": keys[-1][1]}), left - len(keys)
        if len(keys) < step:
            break
    return position if position != cursor else None


def sample_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A short, display-safe view of a source row for the dry run's sample."""
    content = str(row["content"] or "")
    return {
        "id": row["id"],
        "userId": row["user_id"],
        "type": row["type"],
        "updatedAt": cursor_of(row).to_json()["updatedAt"],
        "content": content if len(content) <= 80 else content[:77] + "...",
    }


@dataclass(frozen=True)
class RowPage:
    """A page of the fast row path: the writer's rows as they are and the cursor of the next page."""

    rows: list[Row]
    next_cursor: str | None


@dataclass
class LegacyMySQLSource:
    """The legacy table ``h5_user_memory_items`` (MySQL, MariaDB, or SQLite for tests and notebooks)."""

    url: str
    name: str = SOURCE_NAME
    #: a key range ``(lower, upper]`` of encoded cursors (None: the table's start / end); a source with
    #: either bound is one partition of a parallel migration (:mod:`memwork.migrate.partitioned`)
    lower: str | None = None
    upper: str | None = None
    _conn: Connection | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """``legacy-mysql:<url without password>/h5_user_memory_items``; a key range appends
        ``#range(LOWER,UPPER]``, so each range keeps its own checkpoint and lock."""
        whole = f"{SOURCE_NAME}:{redact_url(self.url)}/{memory_items.name}"
        if not self.partial:
            return whole
        return f"{whole}#range({self.lower or ''},{self.upper or ''}]"

    @property
    def partial(self) -> bool:
        """True for one key range of the table (a partition), not the whole of it."""
        return self.lower is not None or self.upper is not None

    def _from(self, cursor: str | None) -> Cursor | None:
        """Where a read starts: after ``cursor``, else after the range's lower bound."""
        return Cursor.decode(cursor if cursor is not None else self.lower)

    def connection(self) -> Connection:
        """The one read connection of this source (opened on first use)."""
        if self._conn is None:
            from memwork.db import get_engine, mysql_errors

            with mysql_errors(self.url):
                self._conn = get_engine(self.url).connect()
        return self._conn

    def read_rows(self, cursor: str | None, size: int) -> RowPage:
        """The fast path: up to ``size`` active rows after ``cursor`` as the writer's text rows."""
        from memwork.db import mysql_errors

        position = self._from(cursor)
        with mysql_errors(self.url):
            rows = read_batch(self.connection(), position, size, Cursor.decode(self.upper))
        if not rows:
            return RowPage(rows, None)
        following = cursor_of(rows[-1])
        if position is not None and not following.follows(position):
            raise BackendError(
                f"{memory_items.name}: the keyset did not advance past {position.to_json()} "
                f"(next {following.to_json()}): a page would be read again, forever"
            )
        return RowPage(rows, following.encode())  # the keyset position; an empty page ends the listing

    def read_page(self, cursor: str | None, size: int) -> Page:
        """The same page as records (what every source returns; verification and contract checks)."""
        page = self.read_rows(cursor, size)
        return record_page([record_fields(row) for row in page.rows], page.next_cursor)

    def count(self, cursor: str | None = None) -> int:
        """Active rows after ``cursor`` (what a run without a limit would read)."""
        from memwork.db import mysql_errors

        with mysql_errors(self.url):
            return count_after(self.connection(), self._from(cursor), Cursor.decode(self.upper))

    def nth_cursor(self, cursor: str | None, n: int) -> str | None:
        """The encoded position of the ``n``-th row after ``cursor`` (a range's upper bound)."""
        from memwork.db import mysql_errors

        with mysql_errors(self.url):
            found = nth_cursor(self.connection(), Cursor.decode(cursor), n)
        return found.encode() if found else None

    def count_keys(self, cursor: str | None) -> int:
        """Rows of any status after ``cursor`` (what a plan splits; the index alone answers it)."""
        from memwork.db import mysql_errors

        with mysql_errors(self.url):
            return count_keys(self.connection(), Cursor.decode(cursor))

    def status_counts(self) -> dict[str, int]:
        """Rows per status, plus ``total``."""
        from memwork.db import mysql_errors

        with mysql_errors(self.url):
            return status_counts(self.connection())

    def last_cursor(self, cursor: str | None, limit: int | None) -> str | None:
        """Where a run of ``limit`` rows from ``cursor`` would stop (the dry run's last checkpoint)."""
        found = last_cursor(self.connection(), Cursor.decode(cursor), limit)
        return found.encode() if found else None

    def inactive_ids(self, after: str, size: int) -> dict[str, Any]:
        """``{id: updated_at}`` of up to ``size`` archived or deleted rows with ids after ``after``."""
        t = memory_items.c
        query = (
            select(t.id, t.updated_at).where(t.status != "active", t.id > after).order_by(t.id).limit(size)
        )
        return {row[0]: row[1] for row in self.connection().execute(query)}

    def rows_by_id(self, ids: list[str]) -> dict[str, tuple[str, Row]]:
        """``{id: (status, row)}`` of ``ids`` (any status), the writer's text rows (a repair)."""
        from memwork.db import mysql_errors

        with mysql_errors(self.url):
            return rows_by_id(self.connection(), ids)

    def present_ids(self, ids: list[str]) -> set[str]:
        """Which of ``ids`` the table holds at all (any status): the orphan count."""
        query = select(memory_items.c.id).where(memory_items.c.id.in_(ids))
        return {row[0] for row in self.connection().execute(query)}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def source_from_env(env: Mapping[str, str]) -> LegacyMySQLSource:
    """The ``memwork.sources`` factory: ``MEMORY_BACKFILL_MYSQL_URL`` names the legacy database."""
    from memwork.db import parse_url

    url = require(env, MYSQL_URL_ENV)
    parse_url(url)  # a malformed URL is bad input before anything connects
    return LegacyMySQLSource(url)


def record_of(row: Mapping[str, Any]) -> SourceRecord:
    """A legacy row as a :class:`SourceRecord` (the slow, general path; the run uses the rows)."""
    return SourceRecord(**record_fields(row))


def record_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A legacy row as the fields of its :class:`SourceRecord` (a page is built in one call)."""
    try:
        metadata = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else row["metadata"]
    except ValueError:
        metadata = None
    problem = None if metadata is None or isinstance(metadata, dict) else "metadata: not a JSON object"
    return {
        "id": row["id"],
        "user_id": row["user_id"],
        "content": row["content"],
        "type": row["type"] or "fact",
        "metadata": metadata if isinstance(metadata, dict) else {},
        "created_at": _aware(row["created_at"]),
        "updated_at": _aware(row["updated_at"]),
        "session_id": row["source_session_id"],
        "message_id": row["source_message_id"],
        "problem": problem,
    }


def _aware(value: Any) -> datetime | None:
    try:
        return row_timestamp(value).replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None
