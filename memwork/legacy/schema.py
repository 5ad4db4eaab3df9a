"""The legacy conversation-memory tables (MySQL/MariaDB in production, SQLite embedded).

The application's two tables are ``h5_conversation_messages`` and ``h5_user_memory_items``; these are
the columns memwork reads and writes. ``id`` of a memory item is a string (UUID-like) so it travels
unchanged into ``memory_embeddings.source_memory_id`` (TEXT). Timestamps are UTC, microsecond
precision (``DATETIME(6)`` on MySQL) so the ``(updated_at, id)`` keyset is total and stable.

Identifier columns (ids of users, sessions, items, messages) are ``utf8mb4_bin`` on MySQL/MariaDB: a
server default such as ``utf8mb4_general_ci`` would make ``TenantX`` and ``tenantx`` one tenant. Tables
that already exist keep their collation, so queries still compare ids through
:func:`memwork.legacy.exact.exact_eq` (``utf8mb4_bin`` pads trailing spaces; bytes do not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_mock_engine,
    inspect,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine
from sqlalchemy.sql.ddl import ExecutableDDLElement

from memwork.db import get_engine, parse_url

metadata = MetaData()

_BigIntId = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrement needs INTEGER
_Timestamp = DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
_LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
ID_COLLATION = "utf8mb4_bin"  #: MySQL/MariaDB collation of every identifier column memwork creates


def _identifier(length: int) -> String:
    """A VARCHAR id: binary-collated on MySQL/MariaDB, plain elsewhere (SQLite, PostgreSQL are exact)."""
    exact = mysql.VARCHAR(length, charset="utf8mb4", collation=ID_COLLATION)
    return String(length).with_variant(exact, "mysql", "mariadb")


def _id_column(name: str, length: int, **kw: Any) -> Column:
    """An identifier column, marked so :func:`identifier_columns` (and ``legacy init``) find it."""
    return Column(name, _identifier(length), info={"identifier": True}, **kw)


MESSAGE_ROLES = ("user", "assistant", "system", "tool")
ITEM_TYPES = ("fact", "preference", "goal", "profile", "event", "skill", "note")
ITEM_STATUSES = ("active", "archived", "deleted")

messages = Table(
    "h5_conversation_messages",
    metadata,
    Column("id", _BigIntId, primary_key=True, autoincrement=True),
    _id_column("user_id", 64, nullable=False),
    _id_column("session_id", 128, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", _LongText, nullable=False),
    Column("created_at", _Timestamp, nullable=False),
    Column("analyzed_at", _Timestamp, nullable=True),  # NULL while pending analysis
    Index("ix_h5_msg_user_pending", "user_id", "analyzed_at"),
    Index("ix_h5_msg_session", "session_id", "id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

memory_items = Table(
    "h5_user_memory_items",
    metadata,
    _id_column("id", 64, primary_key=True),
    _id_column("user_id", 64, nullable=False),
    Column("content", _LongText, nullable=False),
    Column("type", String(32), nullable=False, server_default="fact"),
    Column("status", String(16), nullable=False, server_default="active"),
    Column("confidence", Float, nullable=False, server_default="0.5"),
    Column("metadata", JSON, nullable=True),
    _id_column("source_session_id", 128, nullable=True),
    _id_column("source_message_id", 64, nullable=True),
    Column("created_at", _Timestamp, nullable=False),
    Column("updated_at", _Timestamp, nullable=False),
    Index("ix_h5_items_updated_id", "updated_at", "id"),  # keyset reads (backfill)
    Index("ix_h5_items_user_status", "user_id", "status", "updated_at"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)


def identifier_columns() -> list[tuple[str, str]]:
    """``(table, column)`` of every id column -- the ones that must compare exactly."""
    return [
        (table.name, column.name)
        for table in metadata.sorted_tables
        for column in table.columns
        if column.info.get("identifier")
    ]


# ---- DDL: printed (dry run) or applied by ``memwork legacy init`` --------------------------------
def schema_ddl(database_url: str) -> list[str]:
    """The CREATE TABLE / CREATE INDEX statements for this URL's dialect, without connecting."""
    statements: list[ExecutableDDLElement] = []
    driver = parse_url(database_url).driver + "://"  # the dialect alone: nothing connects
    mock = create_mock_engine(driver, lambda sql, *a, **k: statements.append(sql))
    metadata.create_all(mock, checkfirst=False)
    return [str(s.compile(dialect=mock.dialect)).strip() + ";" for s in statements]


@dataclass(frozen=True)
class InitResult:
    statements: list[str]
    applied: bool
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    #: ``table.column -> collation`` of existing MySQL id columns that are not binary-collated
    inexact_ids: dict[str, str] = field(default_factory=dict)


def init_schema(database_url: str, *, apply: bool = False) -> InitResult:
    """Dry run: the DDL. ``apply=True``: create the missing tables, report which already existed.

    Existing tables are never altered (production owns their DDL); their id columns that a
    case-insensitive collation would fold are listed, since only the queries keep those exact.
    """
    statements = schema_ddl(database_url)
    if not apply:
        return InitResult(statements, applied=False)
    engine = get_engine(database_url)
    before = set(inspect(engine).get_table_names())
    metadata.create_all(engine, checkfirst=True)
    names = [t.name for t in metadata.sorted_tables]
    existing = [n for n in names if n in before]
    return InitResult(
        statements,
        applied=True,
        created=[n for n in names if n not in before],
        existing=existing,
        inexact_ids=_inexact_id_columns(engine, existing),
    )


def _inexact_id_columns(engine: Engine, tables: list[str]) -> dict[str, str]:
    """MySQL/MariaDB id columns of ``tables`` whose collation is not binary (``*_bin``)."""
    if engine.dialect.name not in ("mysql", "mariadb") or not tables:
        return {}
    wanted = {(t, c) for t, c in identifier_columns() if t in tables}
    query = text(
        "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE()"
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return {
        f"{table}.{column}": collation
        for table, column, collation in rows
        if (table, column) in wanted and collation and not collation.endswith("_bin")
    }
