"""Opening a store to read only reads: no DDL, no catalog walk, the embedded server resolved once.

``store info --store pg://embedded`` used to send 39 statements to read 2 rows: the embedded database
asked for twice on two admin connections, ``CREATE EXTENSION`` on a read, and 28 catalog queries to
create a table and five indexes that existed.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from sqlalchemy import Engine, event

from memwork.db import embedded, parse_url
from memwork.errors import MissingStore
from memwork.stores import open_store
from memwork.stores.sql import SQLStore

DROPPED = "ix_agent_memories_meta_type"


def _indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'agent_memories'").fetchall()
    return {row[0] for row in rows}


def _statements_while(action) -> list[str]:
    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        action()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    return sent


def test_a_reading_open_asks_two_questions_and_changes_nothing(pg_url):
    SQLStore(pg_url).close()  # the store exists, its engine is warm
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {DROPPED}")  # as an interrupted bulk load leaves it
    sent = _statements_while(lambda: open_store(pg_url).close())
    assert len(sent) == 2, sent  # has the table? which vector dimension?
    assert "pg_class" in sent[0] and "format_type" in sent[1]
    assert DROPPED not in _indexes(pg_url)  # a read never runs DDL
    open_store(pg_url, create=True).close()
    assert DROPPED in _indexes(pg_url)  # a writing open repairs it


def test_a_writing_open_still_creates_everything(pg_url):
    store = open_store(pg_url, create=True)
    store.close()
    assert len(_indexes(pg_url)) == 7  # primary key, unique (scope, path), updated_at, 3 metadata, HNSW


@pytest.fixture
def database(pg_server):
    """A database NAME on the embedded server, created bare (no vector extension); dropped after."""
    name = f"bare_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _exists(pg_server, name: str) -> bool:
    with psycopg.connect(pg_server.get_uri()) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _has_vector(pg_server, name: str) -> bool:
    with psycopg.connect(pg_server.get_uri(database=name)) as conn:
        return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None


def test_ensure_without_create_refuses_a_missing_database_and_creates_nothing(pg_server, database):
    with pytest.raises(MissingStore, match=f"no database '{database}' on the embedded PostgreSQL"):
        embedded.ensure(f"pg://embedded/{database}", create=False)
    assert not _exists(pg_server, database)


def test_ensure_without_create_runs_no_ddl_on_an_existing_database(pg_server, database):
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    resolved = embedded.ensure(f"pg://embedded/{database}", create=False)
    assert resolved.embedded == database and resolved.libpq is not None
    assert resolved.libpq == parse_url(pg_server.get_uri(database=database)).libpq
    assert not _has_vector(pg_server, database)  # reading never creates the extension
    embedded.ensure(f"pg://embedded/{database}", create=True)
    assert _has_vector(pg_server, database)


def test_ensure_with_create_makes_the_database_and_the_extension(pg_server, database):
    embedded.ensure(f"pg://embedded/{database}", create=True)
    assert _exists(pg_server, database) and _has_vector(pg_server, database)


def test_a_reading_open_of_a_missing_embedded_database_names_it(pg_server, database):
    with pytest.raises(MissingStore) as info:
        open_store(f"pg://embedded/{database}")
    assert str(info.value) == (
        f"store='pg://embedded/{database}': no database '{database}' on the embedded PostgreSQL"
        " (a reading command never creates a store)"
    )
    assert not _exists(pg_server, database)
