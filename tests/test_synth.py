"""The synthetic data generators: deterministic, valid, and holding the planted problems."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import create_engine, insert, select

from memwork.embed import HashEmbedder
from memwork.entry import normalize_path
from memwork.legacy import schema
from memwork.samples.entries import generate_entries
from memwork.samples.legacy import generate_conversations, generate_legacy_items

NOW = datetime(2025, 6, 1, tzinfo=UTC)
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_entries_are_deterministic():
    a = generate_entries(300, scopes=("a", "b"), seed=5, now=NOW)
    b = generate_entries(300, scopes=("a", "b"), seed=5, now=NOW)
    assert [e.to_record() for e in a] == [e.to_record() for e in b]
    c = generate_entries(300, scopes=("a", "b"), seed=6, now=NOW)
    assert [e.content for e in a] != [e.content for e in c]


def test_entries_are_valid_and_spread_over_scopes():
    entries = generate_entries(1000, scopes=("default", "agent-1", "agent-2"), now=NOW)
    assert len(entries) == 1000
    assert len({e.key for e in entries}) == 1000
    assert all(normalize_path(e.path) == e.path for e in entries)
    assert Counter(e.scope for e in entries) == {"default": 334, "agent-1": 333, "agent-2": 333}
    assert all(e.created_at <= e.updated_at <= NOW for e in entries)
    assert all(len(e.title) <= 200 for e in entries)


def test_entries_hold_the_planted_problems():
    entries = generate_entries(3000, scopes=("s1", "s2"), now=NOW)
    real = [e for e in entries if not e.is_stub]
    by_key = {e.key: e for e in entries}
    contents = Counter((e.scope, e.content) for e in real if len(e.content) > 40)
    assert sum(n - 1 for n in contents.values()) > 0.02 * len(entries)  # exact duplicates in a scope
    stubs = [e for e in entries if e.is_stub]
    assert 0.01 * len(entries) < len(stubs) < 0.05 * len(entries)
    for stub in stubs:  # every stub points at a real entry of its own scope
        target = by_key[(stub.scope, stub.redirect_to)]
        assert not target.is_stub and stub.metadata["reason"]
    chinese = [e for e in real if CJK.search(e.content)]
    assert 0.02 * len(entries) < len(chinese) < 0.1 * len(entries)
    stale = [e for e in real if e.updated_at < NOW - timedelta(days=90) and e.hits == 0]
    assert len(stale) > 0.05 * len(entries)
    assert sum(1 for e in real if not e.metadata) > 0.1 * len(entries)
    full = [e for e in real if {"type", "confidence", "tags", "domain", "last_verified"} <= set(e.metadata)]
    assert len(full) > 0.3 * len(entries)
    assert Counter(e.metadata.get("type") for e in full).keys() == {"concept", "fact", "skill", "experience"}
    assert sum(1 for e in real if len(e.content) < 20) > 0.02 * len(entries)  # low-quality notes
    for e in full:
        for link in e.metadata.get("related", []):
            assert (e.scope, link.removeprefix("memory://")) in by_key


def test_near_duplicates_differ_by_a_word_or_two():
    entries = [e for e in generate_entries(2000, now=NOW) if not e.is_stub]
    words = [set(e.content.split()) for e in entries]
    near = 0
    for i, a in enumerate(words):
        for b in words[max(0, i - 200) : i]:
            if a != b and len(a ^ b) <= 4 and len(a) > 8:
                near += 1
                break
    assert near > 0.02 * len(entries)


def test_embeddings_come_from_the_embedder():
    entries = generate_entries(400, now=NOW)
    embedded = [e for e in entries if e.embedding is not None]
    assert 0.9 * len(entries) < len(embedded) < len(entries)
    assert all(e.embedding is None for e in entries if e.is_stub)
    expected = HashEmbedder(384).embed([e.content for e in embedded])
    assert np.array_equal(np.vstack([e.embedding for e in embedded]), expected)
    small = generate_entries(50, embedder=HashEmbedder(16), now=NOW)
    assert {e.embedding.shape for e in small if e.embedding is not None} == {(16,)}


def test_legacy_items_fit_the_table(tmp_path):
    rows = generate_legacy_items(20, 30, seed=3, now=NOW)
    assert len(rows) == 600
    assert set(rows[0]) == {c.name for c in schema.memory_items.columns}
    assert len({r["id"] for r in rows}) == 600
    assert {r["type"] for r in rows} <= set(schema.ITEM_TYPES)
    statuses = Counter(r["status"] for r in rows)
    assert statuses["active"] > 0.7 * len(rows) and statuses["archived"] and statuses["deleted"]
    assert any(CJK.search(r["content"]) for r in rows)
    per_user = Counter((r["user_id"], r["content"]) for r in rows)
    assert any(n > 1 for n in per_user.values())  # exact duplicates within a user
    assert all(r["created_at"] <= r["updated_at"] and r["updated_at"].tzinfo is None for r in rows)
    assert rows == generate_legacy_items(20, 30, seed=3, now=NOW)
    engine = create_engine(f"sqlite:///{tmp_path / 'legacy.db'}")
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(schema.memory_items), rows)
        stored = conn.execute(select(schema.memory_items).order_by(schema.memory_items.c.id)).mappings().all()
    assert sorted(rows, key=lambda r: r["id"]) == [dict(r) for r in stored]


def test_conversations_hold_first_person_statements():
    rows = generate_conversations(5, 4, seed=1, now=NOW)
    assert set(rows[0]) == {"user_id", "session_id", "role", "content", "created_at"}
    user_text = [r["content"] for r in rows if r["role"] == "user"]
    for phrase in ("I prefer", "My name is", "I want to", "我喜欢"):
        assert any(phrase in t for t in user_text + [r["content"] for r in generate_conversations(40, 5)]), (
            phrase
        )
    sessions: dict[str, list[dict]] = {}
    for r in rows:
        sessions.setdefault(r["session_id"], []).append(r)
    assert len(sessions) == 20
    for turns in sessions.values():
        assert [t["role"] for t in turns[:2]] == ["user", "assistant"]
        assert all(a["created_at"] < b["created_at"] for a, b in itertools.pairwise(turns))
