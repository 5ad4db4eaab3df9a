"""Tenant isolation with look-alike user ids on SQLite, MariaDB (production collation) and pgvector.

The legacy tables exist in production with the server default collation (``utf8mb4_general_ci``), where
``TenantX``, ``tenantx``, ``TENANTX``, ``tenantẍ`` and ``tenantx `` compare equal. Every operation must
still see exactly one user's rows: resolve (memories and profile), write's dedupe, compact's supersede
and merge, purge_user -- and the same user gets the same answer from every backend.
"""

from __future__ import annotations

from collections import Counter

import pymysql
import pytest
from click.testing import CliRunner
from sqlalchemy import insert, select
from sqlalchemy.engine import make_url

from memwork.backends.pgvector import PgvectorBackend
from memwork.cli import main
from memwork.db import get_engine
from memwork.embed import HashEmbedder
from memwork.facade import facade_from_env
from memwork.legacy.exact import exact_eq
from memwork.legacy.schema import init_schema, memory_items, messages
from memwork.legacy.store import LegacyMemoryStore, now
from memwork.migrate.backfill import legacy_options, run_backfill
from memwork.pgvector.schema import ensure_schema

LOOK_ALIKES = ["TenantX", "tenantx", "TENANTX", "tenantẍ", "tenantx "]
NAMES = dict(zip(LOOK_ALIKES, ["Xavier", "Yusuf", "Zoe", "Wanda", "Viktor"], strict=True))
TARGET = "tenantx"
DIMS = 8

# The legacy tables as a production server created them: no memwork DDL, the server's collation.
PRODUCTION_DDL = [
    """CREATE TABLE h5_conversation_messages (
        id BIGINT NOT NULL AUTO_INCREMENT,
        user_id VARCHAR(64) NOT NULL,
        session_id VARCHAR(128) NOT NULL,
        `role` VARCHAR(16) NOT NULL,
        content MEDIUMTEXT NOT NULL,
        created_at DATETIME(6) NOT NULL,
        analyzed_at DATETIME(6),
        PRIMARY KEY (id),
        KEY ix_h5_msg_user_pending (user_id, analyzed_at),
        KEY ix_h5_msg_session (session_id, id)
    ) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci""",
    """CREATE TABLE h5_user_memory_items (
        id VARCHAR(64) NOT NULL,
        user_id VARCHAR(64) NOT NULL,
        content MEDIUMTEXT NOT NULL,
        type VARCHAR(32) NOT NULL DEFAULT 'fact',
        status VARCHAR(16) NOT NULL DEFAULT 'active',
        confidence FLOAT NOT NULL DEFAULT 0.5,
        metadata JSON,
        source_session_id VARCHAR(128),
        source_message_id VARCHAR(64),
        created_at DATETIME(6) NOT NULL,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (id),
        KEY ix_h5_items_updated_id (updated_at, id),
        KEY ix_h5_items_user_status (user_id, status, updated_at)
    ) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci""",
]
ID_COLUMNS = {
    ("h5_conversation_messages", "user_id"),
    ("h5_conversation_messages", "session_id"),
    ("h5_user_memory_items", "id"),
    ("h5_user_memory_items", "user_id"),
    ("h5_user_memory_items", "source_session_id"),
    ("h5_user_memory_items", "source_message_id"),
}


def _mysql(url: str) -> pymysql.Connection:
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, database=parsed.database, charset="utf8mb4"
    )


def _collations(url: str) -> dict[tuple[str, str], str]:
    with _mysql(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE()"
        )
        return {(table, column): collation for table, column, collation in cur.fetchall()}


@pytest.fixture
def production_mysql(mysql_url) -> str:
    """MariaDB legacy tables created the way production has them: ``utf8mb4_general_ci`` id columns."""
    with _mysql(mysql_url) as conn, conn.cursor() as cur:
        for ddl in PRODUCTION_DDL:
            cur.execute(ddl)
        cur.execute("SELECT 'tenantx' = 'TENANTX ' COLLATE utf8mb4_general_ci")
        assert cur.fetchone()[0] == 1  # the premise: this collation folds case and trailing spaces
    assert _collations(mysql_url)[("h5_user_memory_items", "user_id")] == "utf8mb4_general_ci"
    return mysql_url


@pytest.fixture(params=["sqlite", "mariadb-production", "mariadb-memwork-init"])
def legacy_url(request) -> str:
    if request.param == "mariadb-production":
        return request.getfixturevalue("production_mysql")
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "mysql_url")
    init_schema(url, apply=True)
    return url


def _say(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _write_every_look_alike(store: LegacyMemoryStore) -> dict[str, dict]:
    """Each look-alike user says the same sentence plus their own name; the write results by user."""
    return {
        user: store.save_and_analyze(user, f"s-{i}", _say(f"I live in Berlin. My name is {NAMES[user]}."))
        for i, user in enumerate(LOOK_ALIKES)
    }


def _rows(url: str) -> list[dict]:
    with get_engine(url).connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(memory_items))]


def _active_ids_by_user(url: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {user: set() for user in LOOK_ALIKES}
    for row in _rows(url):
        if row["status"] == "active":
            found.setdefault(row["user_id"], set()).add(row["id"])
    return found


def _insert_items(url: str, rows: list[dict]) -> None:
    with get_engine(url).begin() as conn:
        for row in rows:
            stamp = now()
            defaults = {"type": "preference", "status": "active", "confidence": 0.5, "metadata": {}}
            values = {**defaults, "created_at": stamp, "updated_at": stamp, **row}
            conn.execute(insert(memory_items).values(**values))


# ---- the legacy store, on every dialect and collation ---------------------------------------------
def test_write_never_dedupes_against_a_look_alike_user(legacy_url):
    store = LegacyMemoryStore(legacy_url)
    written = _write_every_look_alike(store)
    for user, result in written.items():
        assert result["duplicatesSkipped"] == 0, user
        assert sorted(c["content"] for c in result["created"]) == [
            "I live in Berlin",
            f"My name is {NAMES[user]}",
        ]
    by_user = Counter(row["user_id"] for row in _rows(legacy_url))
    assert by_user == dict.fromkeys(LOOK_ALIKES, 2)


def test_resolve_returns_only_the_exact_users_memories_and_profile(legacy_url):
    store = LegacyMemoryStore(legacy_url)
    written = _write_every_look_alike(store)
    for user in LOOK_ALIKES:
        result = store.resolve(user, 40)
        assert {m["id"] for m in result["memories"]} == {c["id"] for c in written[user]["created"]}, user
        assert result["profile"]["attributes"] == {"name": NAMES[user], "location": "Berlin"}, user
    assert store.resolve("tenantX", 40)["memories"] == []  # yet another spelling: nobody


def test_compact_supersedes_and_merges_only_the_exact_users_items(legacy_url):
    store = LegacyMemoryStore(legacy_url)
    _write_every_look_alike(store)
    teas = [
        {"id": f"tea-{i}-{copy}", "user_id": user, "content": "I like green tea"}
        for i, user in enumerate(LOOK_ALIKES)
        for copy in "ab"
    ]
    _insert_items(legacy_url, teas)
    store.save_and_analyze(TARGET, "s-move", _say("I live in Paris."))
    before = _active_ids_by_user(legacy_url)

    report = store.analyze_user(TARGET)

    target_ids = {row["id"] for row in _rows(legacy_url) if row["user_id"] == TARGET}
    assert len(report["superseded"]) == 1 and len(report["merged"]) == 1
    for change in report["superseded"] + report["merged"]:
        assert {change["kept"], change["archived"]} <= target_ids
    after = _active_ids_by_user(legacy_url)
    for user in LOOK_ALIKES:
        if user != TARGET:
            assert after[user] == before[user], f"{user!r} lost items to {TARGET!r}'s compact"
    assert len(after[TARGET]) == len(before[TARGET]) - 2
    resolved = store.resolve(TARGET, 40)
    assert resolved["profile"]["attributes"] == {"name": NAMES[TARGET], "location": "Paris"}


def test_purge_user_deletes_only_the_exact_user(legacy_url):
    store = LegacyMemoryStore(legacy_url)
    _write_every_look_alike(store)
    assert store.purge_user(TARGET) == {"messages": 1, "items": 2}
    assert Counter(row["user_id"] for row in _rows(legacy_url)) == {
        user: 2 for user in LOOK_ALIKES if user != TARGET
    }
    with get_engine(legacy_url).connect() as conn:
        left = Counter(r[0] for r in conn.execute(select(messages.c.user_id)))
    assert left == {user: 1 for user in LOOK_ALIKES if user != TARGET}


def test_pending_messages_of_a_look_alike_are_never_analyzed(legacy_url):
    store = LegacyMemoryStore(legacy_url)
    with get_engine(legacy_url).begin() as conn:
        for user in LOOK_ALIKES:  # saved but not analyzed yet (e.g. by another app server)
            row = {"user_id": user, "session_id": "s", "role": "user", "created_at": now()}
            conn.execute(insert(messages).values(**row, content=f"My name is {NAMES[user]}."))
    report = store.analyze_user(TARGET)
    assert report["analyzedMessages"] == 1
    assert [c["content"] for c in report["created"]] == [f"My name is {NAMES[TARGET]}"]
    with get_engine(legacy_url).connect() as conn:
        pending = {
            r[0] for r in conn.execute(select(messages.c.user_id).where(messages.c.analyzed_at.is_(None)))
        }
    assert pending == set(LOOK_ALIKES) - {TARGET}


# ---- the facade on a production MariaDB table -------------------------------------------------------
def test_every_facade_operation_isolates_look_alikes_on_a_production_table(production_mysql):
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": production_mysql})
    users = [u for u in LOOK_ALIKES if u == u.strip()]
    for user in users:
        sentence = f"I live in Berlin. My name is {NAMES[user]}."
        written = facade.write({"userId": user, "sessionId": "s1", "messages": _say(sentence)})
        assert written["ok"] and written["duplicatesSkipped"] == 0 and len(written["created"]) == 2, user
    assert facade.write({"userId": TARGET, "sessionId": "s2", "messages": _say("I live in Paris.")})["ok"]
    before = _active_ids_by_user(production_mysql)

    compacted = facade.compact({"userId": TARGET, "sessionId": "s2"})

    assert compacted["ok"] and len(compacted["superseded"]) == 1
    after = _active_ids_by_user(production_mysql)
    assert all(after[u] == before[u] for u in users if u != TARGET)
    for user in users:
        resolved = facade.resolve({"userId": user, "limit": 40})
        assert resolved["ok"] and {m["id"] for m in resolved["memories"]} == after[user], user
        location = "Paris" if user == TARGET else "Berlin"
        assert resolved["profile"]["attributes"] == {"name": NAMES[user], "location": location}, user
    padded = facade.resolve({"userId": "tenantx ", "limit": 40})  # never trimmed into tenantx
    assert not padded["ok"] and padded["field"] == "userId" and padded["memories"] == []
    status = facade.status()  # status reads no user data; it names the legacy backend available
    assert status["selectedBackend"] == "legacy-conversation-memory"
    legacy = facade.registry.find("legacy")
    assert legacy.purge_user(TARGET) == {"messages": 2, "items": 3}
    assert {u for u, ids in _active_ids_by_user(production_mysql).items() if ids} == set(users) - {TARGET}


# ---- the same answer from every backend -------------------------------------------------------------
def test_sqlite_mariadb_and_pgvector_give_each_user_the_same_memories(sqlite_url, production_mysql, pg_url):
    for url in (sqlite_url, production_mysql):
        if url == sqlite_url:
            init_schema(url, apply=True)
        store = LegacyMemoryStore(url)
        _write_every_look_alike(store)
        store.save_and_analyze(TARGET, "s-more", _say("I want to learn Rust."))
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    options = legacy_options(
        mysql_url=production_mysql, database_url=pg_url, apply=True, embedder=HashEmbedder(DIMS)
    )
    assert run_backfill(options).rows_written == 2 * len(LOOK_ALIKES) + 1
    pgvector = PgvectorBackend(pg_url, search="exact")
    try:
        for user in LOOK_ALIKES:
            sqlite_side = LegacyMemoryStore(sqlite_url).resolve(user, 40)["memories"]
            mariadb_side = LegacyMemoryStore(production_mysql).resolve(user, 40)["memories"]
            vector_side = pgvector.resolve({"userId": user, "embedding": [1.0] * DIMS, "limit": 40})
            vector_side = vector_side["semanticMemories"]
            expected = {"I live in Berlin", f"My name is {NAMES[user]}"}
            if user == TARGET:
                expected.add("I want to learn Rust")
            assert {m["content"] for m in sqlite_side} == expected, user
            assert {m["content"] for m in mariadb_side} == expected, user
            assert {m["content"] for m in vector_side} == expected, user
            assert {m["id"] for m in vector_side} == {m["id"] for m in mariadb_side}, user
            assert {m["userId"] for m in vector_side} == {user}
    finally:
        pgvector.close()


# ---- schema and index ---------------------------------------------------------------------------------
def test_legacy_init_apply_creates_binary_collated_id_columns(mysql_url):
    result = CliRunner().invoke(main, ["legacy", "init", "--database-url", mysql_url, "--apply"])
    assert result.exit_code == 0, result.output
    collations = _collations(mysql_url)
    assert {column: collations[column] for column in ID_COLUMNS} == dict.fromkeys(ID_COLUMNS, "utf8mb4_bin")
    assert collations[("h5_user_memory_items", "content")] != "utf8mb4_bin"  # only identifiers


def test_legacy_init_dry_run_prints_the_binary_collation(mysql_url):
    result = CliRunner().invoke(main, ["legacy", "init", "--database-url", mysql_url])
    assert result.exit_code == 0
    assert result.stdout.count("COLLATE utf8mb4_bin") == len(ID_COLUMNS)


def test_legacy_init_leaves_a_production_table_alone_and_names_its_folding_id_columns(production_mysql):
    before = _collations(production_mysql)
    result = CliRunner().invoke(main, ["legacy", "init", "--database-url", production_mysql, "--apply"])
    assert result.exit_code == 0, result.output
    assert "exists  h5_user_memory_items" in result.stdout
    notes = [line for line in result.stderr.splitlines() if line.startswith("note")]
    assert len(notes) == len(ID_COLUMNS)
    assert "note    h5_user_memory_items.user_id is utf8mb4_general_ci" in result.stderr
    assert _collations(production_mysql) == before  # never altered


def test_legacy_init_on_its_own_tables_has_no_note(mysql_url):
    init_schema(mysql_url, apply=True)
    assert init_schema(mysql_url, apply=True).inexact_ids == {}


def test_exact_comparison_still_uses_the_user_index(production_mysql):
    rows = [
        {"id": f"bulk-{i}", "user_id": f"user-{i % 400}", "content": f"fact {i}", "type": "fact"}
        for i in range(4000)
    ]
    _insert_items(production_mysql, rows)
    query = select(memory_items.c.id).where(
        exact_eq(memory_items.c.user_id, "user-7"), memory_items.c.status == "active"
    )
    engine = get_engine(production_mysql)
    compiled = query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
    with _mysql(production_mysql) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("ANALYZE TABLE h5_user_memory_items")
        cur.fetchall()
        cur.execute(f"EXPLAIN {compiled}")
        plan = cur.fetchone()
    assert plan["key"] == "ix_h5_items_user_status" and plan["type"] in ("ref", "range"), plan
    with engine.connect() as conn:
        assert len(conn.execute(query).all()) == 10


# ---- input a store cannot keep is bad input, never a backend error ------------------------------
BAD_TEXT = {"NUL": "a\x00b", "lone surrogate": "a\ud800b"}
WHERE = {
    "userId": lambda bad: {"userId": bad, "sessionId": "s", "messages": _say("I like tea.")},
    "sessionId": lambda bad: {"userId": "u", "sessionId": bad, "messages": _say("I like tea.")},
    "messages[0].content": lambda bad: {"userId": "u", "sessionId": "s", "messages": _say(f"I like {bad}.")},
}


@pytest.fixture(params=["sqlite", "mariadb-production"])
def facade_url(request) -> str:
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
        init_schema(url, apply=True)
        return url
    return request.getfixturevalue("production_mysql")


@pytest.mark.parametrize("kind", BAD_TEXT)
@pytest.mark.parametrize("field", WHERE)
def test_write_refuses_nul_and_lone_surrogates_naming_the_field(facade_url, field, kind):
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": facade_url})
    result = facade.write(WHERE[field](BAD_TEXT[kind]))
    assert result["ok"] is False and result["field"] == field, result
    assert result["reason"].startswith("invalid input: ") and " at position " in result["reason"]
    with get_engine(facade_url).connect() as conn:
        assert conn.execute(select(messages.c.id)).all() == []


@pytest.mark.parametrize("kind", BAD_TEXT)
@pytest.mark.parametrize("field", ["userId", "sessionId", "query"])
def test_resolve_and_compact_refuse_nul_and_lone_surrogates(facade_url, field, kind):
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": facade_url})
    request = {"userId": "u", "sessionId": "s", "query": "tea", field: BAD_TEXT[kind]}
    for operation in ("resolve", "compact") if field != "query" else ("resolve",):
        result = getattr(facade, operation)(request)
        assert result["ok"] is False and result["field"] == field, (operation, result)
        assert result["reason"].startswith("invalid input: ")


@pytest.mark.parametrize("field", ["userId", "sessionId"])
@pytest.mark.parametrize("padded", ["tenantx ", " tenantx", "tenantx\n"])
def test_ids_with_surrounding_whitespace_are_refused_not_trimmed(facade_url, field, padded):
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": facade_url})
    request = {"userId": "tenantx", "sessionId": "s", "messages": _say("I like tea."), field: padded}
    result = facade.write(request)
    assert result["ok"] is False and result["field"] == field
    assert "whitespace" in result["reason"]
    with get_engine(facade_url).connect() as conn:
        assert conn.execute(select(messages.c.id)).all() == []


def test_a_long_bad_content_is_shown_around_the_bad_character(sqlite_url):
    init_schema(sqlite_url, apply=True)
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": sqlite_url})
    content = "x" * 5000 + "\x00" + "y" * 5000
    result = facade.write({"userId": "u", "sessionId": "s", "messages": _say(content)})
    assert result["field"] == "messages[0].content" and "position 5000" in result["reason"]
    assert len(result["reason"]) < 200
