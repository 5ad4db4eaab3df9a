"""The MySQL side: keyset pages of active source rows in ``(updated_at, id)`` order, never OFFSET."""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, Text, and_, cast, func, or_, select, type_coerce

from memwork.contracts import Row
from memwork.errors import BackendError
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill_options import Cursor, cursor_of

if TYPE_CHECKING:
    from sqlalchemy import Connection

ID_CHUNK = 5000


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


def _after(cursor: Cursor | None) -> Any:
    """The keyset predicate: active rows strictly after ``cursor`` in (updated_at, id) order."""
    active = memory_items.c.status == "active"
    if cursor is None:
        return active
    t = memory_items.c
    at = cursor.bound()
    return and_(active, or_(t.updated_at > at, and_(t.updated_at == at, t.id > cursor.id)))


def count_after(conn: Connection, cursor: Cursor | None) -> int:
    """Active source rows strictly after ``cursor`` (what a run without a limit would read)."""
    return int(
        conn.execute(select(func.count()).select_from(memory_items).where(_after(cursor))).scalar_one()
    )


def read_batch(conn: Connection, cursor: Cursor | None, size: int) -> list[Row]:
    """The next ``size`` active rows after ``cursor``, keyset order, never OFFSET.

    The Core statement runs on the DBAPI cursor (half the per-row cost of SQLAlchemy result rows),
    and the read transaction ends right after, so a long backfill never pins an InnoDB snapshot.
    """
    query = (
        select(*_SOURCE_COLUMNS)
        .where(_after(cursor))
        .order_by(memory_items.c.updated_at, memory_items.c.id)
        .limit(size)
    )
    if conn.dialect.name not in ("mysql", "mariadb"):
        # SQLite and others: SQLAlchemy's result processing turns stored text back into datetimes/JSON.
        rows = [dict(row) for row in conn.execute(query).mappings()]
        conn.rollback()
        return typing.cast("list[Row]", rows)
    compiled = query.compile(dialect=conn.dialect)
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # an open connection
    cur = dbapi.cursor()
    try:
        cur.execute(str(compiled), compiled.params)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        cur.close()
        dbapi.rollback()
    return typing.cast("list[Row]", rows)  # the columns of _SOURCE_COLUMNS, as text


def iter_batches(
    conn: Connection, cursor: Cursor | None, planned: int, batch_size: int
) -> Iterator[list[Row]]:
    """Keyset pages of at most ``batch_size`` rows until ``planned`` rows were read or none are left."""
    done = 0
    while done < planned:
        rows = read_batch(conn, cursor, min(batch_size, planned - done))
        if not rows:
            return
        done += len(rows)
        following = cursor_of(rows[-1])
        if cursor is not None and not following.follows(cursor):
            raise BackendError(
                f"{memory_items.name}: the keyset did not advance past {cursor.to_json()} "
                f"(next {following.to_json()}): a page would be read again, forever"
            )
        cursor = following
        yield rows


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
