"""The legacy conversation-memory backend against real MariaDB and SQLite."""

import pytest
from click.testing import CliRunner
from sqlalchemy import func, inspect, select

from memwork.backends.legacy import LegacyConversationMemoryBackend, from_env
from memwork.backends.requests import MAX_MESSAGE_CHARS
from memwork.cli import main
from memwork.db import get_engine
from memwork.errors import UsageError
from memwork.legacy.extractor import ExtractedItem
from memwork.legacy.schema import init_schema, memory_items, messages
from memwork.legacy.store import LegacyMemoryStore


@pytest.fixture(params=["sqlite", "mysql"])
def legacy_url(request):
    url = request.getfixturevalue(f"{request.param}_url")
    init_schema(url, apply=True)
    return url


@pytest.fixture
def backend(legacy_url) -> LegacyConversationMemoryBackend:
    return from_env({"MEMORY_LEGACY_DATABASE_URL": legacy_url})


def _user(text, role="user"):
    return {"role": role, "content": text}


def _count(url, table, **where):
    query = select(func.count()).select_from(table)
    for key, value in where.items():
        query = query.where(table.c[key] == value)
    with get_engine(url).connect() as conn:
        return conn.execute(query).scalar_one()


def test_write_saves_then_analyzes(backend, legacy_url):
    result = backend.write(
        {
            "userId": "u1",
            "sessionId": "s1",
            "messages": [_user("My name is Alice. I like tea."), _user("ok", "assistant")],
        }
    )
    assert result["saved"] == 2 and result["analyzedMessages"] == 2
    assert sorted(i["type"] for i in result["created"]) == ["preference", "profile"]
    assert _count(legacy_url, messages, user_id="u1") == 2
    with get_engine(legacy_url).connect() as conn:
        pending = conn.execute(select(messages).where(messages.c.analyzed_at.is_(None))).fetchall()
    assert pending == []


def test_extraction_skips_items_the_user_already_has(backend, legacy_url):
    backend.write({"userId": "u1", "sessionId": "s1", "messages": [_user("I like green tea.")]})
    again = backend.write({"userId": "u1", "sessionId": "s2", "messages": [_user("I like green tea!")]})
    assert again["created"] == [] and again["duplicatesSkipped"] == 1
    assert _count(legacy_url, memory_items, user_id="u1") == 1
    other = backend.write({"userId": "u2", "sessionId": "s3", "messages": [_user("I like green tea")]})
    assert len(other["created"]) == 1  # scope: another user's items never count


def test_resolve_newest_first_with_limit_profile_and_goals(backend):
    texts = ["My name is Alice", "I live in Berlin", "I want to learn Rust", "我喜欢喝茶", "I have a dog"]
    for i, text in enumerate(texts):
        backend.write({"userId": "u1", "sessionId": f"s{i}", "messages": [_user(text)]})
    result = backend.resolve({"userId": "u1"})
    assert [m["content"] for m in result["memories"]] == list(reversed(texts))
    assert result["profile"]["attributes"] == {"name": "Alice", "location": "Berlin"}
    assert [g["content"] for g in result["activeGoals"]] == ["I want to learn Rust"]
    assert result["semanticMemories"] == [] and result["behaviorSummary"] is None
    limited = backend.resolve({"userId": "u1", "limit": 2})
    assert [m["content"] for m in limited["memories"]] == ["I have a dog", "我喜欢喝茶"]
    assert backend.resolve({"userId": "nobody"})["profile"] is None


def test_compact_analyzes_pending_archives_superseded_and_merges(backend, legacy_url):
    store = backend.store
    store.save_and_analyze("u1", "s1", [_user("I live in Berlin.")])
    # Pending message saved without analysis (e.g. by an older writer) is analyzed by compact.
    with get_engine(legacy_url).begin() as conn:
        store._save_message(conn, "u1", "s2", _user("I live in Paris."))
    # Near-duplicates inserted directly (a different extractor) are merged by compact.
    with get_engine(legacy_url).begin() as conn:
        for text in ("Enjoys long walks on the beach", "Enjoys long walks on the beach daily"):
            store._insert_item(conn, "u1", ExtractedItem(text, "fact", 0.6), None)
    report = backend.compact({"userId": "u1", "sessionId": "s2"})
    assert report["analyzedMessages"] == 1 and report["changed"] is True
    assert [s["key"] for s in report["superseded"]] == ["location"]
    assert len(report["merged"]) == 1 and report["merged"][0]["similarity"] >= 0.8
    active = [m["content"] for m in backend.resolve({"userId": "u1"})["memories"]]
    assert "I live in Berlin" not in active and "I live in Paris" in active
    assert "Enjoys long walks on the beach daily" in active
    assert _count(legacy_url, memory_items, user_id="u1", status="archived") == 2
    assert backend.compact({"userId": "u1"})["changed"] is False  # idempotent


def test_pluggable_extractor(legacy_url):
    def shout(msgs):
        return [
            {"content": m["content"].upper(), "type": "note", "source_index": i} for i, m in enumerate(msgs)
        ]

    backend = from_env({"MEMORY_LEGACY_DATABASE_URL": legacy_url}, extractor=shout)
    result = backend.write({"userId": "u1", "sessionId": "s", "messages": [_user("hello there")]})
    assert result["created"][0]["content"] == "HELLO THERE"
    assert backend.resolve({"userId": "u1"})["memories"][0]["sourceSessionId"] == "s"


def test_extractor_from_env_and_broken_spec(legacy_url):
    env = {
        "MEMORY_LEGACY_DATABASE_URL": legacy_url,
        "MEMORY_LEGACY_EXTRACTOR": "memwork.legacy.extractor:extract_rules",
    }
    assert from_env(env).availability().available
    env["MEMORY_LEGACY_EXTRACTOR"] = "no_such_module_xyz:f"
    avail = from_env(env).availability()
    assert not avail.available and "MEMORY_LEGACY_EXTRACTOR" in avail.reason


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"sessionId": "s", "messages": []}, "userId"),
        ({"userId": "u1", "messages": []}, "sessionId"),
        ({"userId": "u1", "sessionId": "s", "messages": "hi"}, "messages"),
        ({"userId": "u1", "sessionId": "s", "messages": [{"role": "user"}]}, "messages[0].content"),
        (
            {"userId": "u1", "sessionId": "s", "messages": [_user("ok"), {"role": "bot", "content": "x"}]},
            "messages[1].role",
        ),
        (
            {"userId": "u1", "sessionId": "s", "messages": [_user("x" * (MAX_MESSAGE_CHARS + 1))]},
            "messages[0].content",
        ),
    ],
)
def test_bad_write_names_the_field_and_writes_nothing(backend, legacy_url, request_, field):
    with pytest.raises(UsageError) as err:
        backend.write(request_)
    assert err.value.field == field
    assert _count(legacy_url, messages) == 0 and _count(legacy_url, memory_items) == 0


@pytest.mark.parametrize("limit", [0, 201, "10", True, 2.5])
def test_bad_limit(backend, limit):
    with pytest.raises(UsageError, match="limit"):
        backend.resolve({"userId": "u1", "limit": limit})


def test_purge_user(backend, legacy_url):
    backend.write({"userId": "gone", "sessionId": "s", "messages": [_user("I like tea")]})
    backend.write({"userId": "kept", "sessionId": "s", "messages": [_user("I like tea")]})
    assert backend.purge_user("gone") == {"messages": 1, "items": 1}
    assert _count(legacy_url, memory_items, user_id="kept") == 1


def test_legacy_init_cli_dry_run_then_apply(mysql_url):
    runner = CliRunner()
    dry = runner.invoke(main, ["legacy", "init", "--database-url", mysql_url])
    assert dry.exit_code == 0 and "CREATE TABLE h5_conversation_messages" in dry.output
    assert "DATETIME(6)" in dry.output
    assert inspect(get_engine(mysql_url)).get_table_names() == []
    applied = runner.invoke(main, ["legacy", "init", "--database-url", mysql_url, "--apply"])
    assert applied.exit_code == 0, applied.output
    assert "created h5_user_memory_items" in applied.output
    assert set(inspect(get_engine(mysql_url)).get_table_names()) == {
        "h5_conversation_messages",
        "h5_user_memory_items",
    }
    again = runner.invoke(main, ["legacy", "init", "--database-url", mysql_url, "--apply"])
    assert "exists  h5_conversation_messages" in again.output


def test_default_store_is_workspace_sqlite_created_on_first_use():
    backend = from_env({})
    assert backend.store.database_url.startswith("sqlite:///") and backend.store.auto_create
    backend.write({"userId": "u", "sessionId": "s", "messages": [_user("I like tea")]})
    assert backend.resolve({"userId": "u"})["memories"][0]["content"] == "I like tea"


def test_explicit_database_is_never_created_at_runtime(sqlite_url):
    store = LegacyMemoryStore(sqlite_url)
    with pytest.raises(Exception, match="h5_"):
        store.resolve("u", 5)


def test_same_slot_new_value_is_an_update_not_a_duplicate(backend, legacy_url):
    """ "New York City" after "New York" shares most words but changes the location: keep it."""

    def write(text):
        return backend.write({"userId": "u1", "sessionId": "s", "messages": [_user(text)]})

    write("I live in New York.")
    assert len(write("I live in New York City.")["created"]) == 1
    report = backend.compact({"userId": "u1"})
    assert [s["key"] for s in report["superseded"]] == ["location"]
    assert backend.resolve({"userId": "u1"})["profile"]["attributes"] == {"location": "New York City"}
    # Same slot, same value, other wording: the user already has it.
    again = write("Call me Alice. My name is alice.")
    assert len(again["created"]) == 1 and again["duplicatesSkipped"] == 1
    # Same words but the opposite polarity is not the same preference.
    write("I really like to drink green tea in the morning")
    flipped = write("I don't like to drink green tea in the morning")
    assert len(flipped["created"]) == 1 and flipped["duplicatesSkipped"] == 0
    backend.compact({"userId": "u1"})
    prefs = [m for m in backend.resolve({"userId": "u1"})["memories"] if m["type"] == "preference"]
    assert [m["metadata"]["polarity"] for m in prefs] == ["negative"]
    assert _count(legacy_url, memory_items, user_id="u1", status="active") == 3


def test_chinese_restatement_is_skipped_and_new_value_supersedes(backend):
    def write(text):
        return backend.write({"userId": "zh", "sessionId": "s", "messages": [_user(text)]})

    write("我住在北京市朝阳区")
    assert write("其实我住在北京市朝阳区。")["duplicatesSkipped"] == 1
    assert len(write("我住在北京市海淀区")["created"]) == 1
    assert [s["key"] for s in backend.compact({"userId": "zh"})["superseded"]] == ["location"]
    resolved = backend.resolve({"userId": "zh"})
    assert [m["content"] for m in resolved["memories"]] == ["我住在北京市海淀区"]


def test_keyed_items_without_values_fall_back_to_word_similarity(legacy_url):
    """A pluggable extractor may set a key but no value: then only the wording decides."""

    def keyed(msgs):
        return [{"content": m["content"], "type": "note", "key": "topic"} for m in msgs]

    backend = from_env({"MEMORY_LEGACY_DATABASE_URL": legacy_url}, extractor=keyed)
    first = backend.write({"userId": "u1", "sessionId": "s", "messages": [_user("Rust ownership rules")]})
    other = backend.write({"userId": "u1", "sessionId": "s", "messages": [_user("Sourdough baking times")]})
    same = backend.write({"userId": "u1", "sessionId": "s", "messages": [_user("Rust ownership rules!")]})
    assert len(first["created"]) == 1 and len(other["created"]) == 1
    assert same["created"] == [] and same["duplicatesSkipped"] == 1
