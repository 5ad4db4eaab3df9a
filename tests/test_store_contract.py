"""The storage contract, run against every store kind (filesystem, SQLite, embedded PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memwork.entry import MAX_CONTENT_BYTES, MAX_PATH_CHARS, MAX_TITLE_CHARS, Entry
from memwork.errors import ContentTooLarge, EntryNotFound, InvalidPath, StubChainError, UsageError
from memwork.stores.memory import MemoryStore

T0 = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _stub(store, path: str, target: str, scope: str = "default") -> None:
    store.write(path, f"moved to {target}", metadata={"stub": True, "redirect_to": target}, scope=scope)


def test_write_read_list_delete(any_store):
    written = any_store.write("concept/a.md", "alpha", title="A", metadata={"type": "concept"})
    assert written.path == "concept/a.md" and written.size == 5
    any_store.write("concept/b.md", "bravo ü", title="B")
    any_store.write("fact/c.md", "charlie")
    assert [i.path for i in any_store.list()] == ["concept/a.md", "concept/b.md", "fact/c.md"]
    assert [i.path for i in any_store.list("concept/")] == ["concept/a.md", "concept/b.md"]
    info = any_store.list("fact")[0]
    assert (info.title, info.size, info.scope) == ("", 7, "default")
    entry = any_store.read_entry("concept/a.md")
    assert (entry.content, entry.title, entry.metadata) == ("alpha", "A", {"type": "concept"})
    assert any_store.total_size() == 5 + len("bravo ü".encode()) + 7
    assert [e.path for e in any_store.all_entries()] == ["concept/a.md", "concept/b.md", "fact/c.md"]
    any_store.delete("concept/a.md")
    assert any_store.get("concept/a.md") is None
    with pytest.raises(EntryNotFound):
        any_store.delete("concept/a.md")
    with pytest.raises(EntryNotFound):
        any_store.read_entry("concept/a.md")


def test_paths_are_normalised(any_store):
    any_store.write("./x//y.md", "one")
    assert any_store.read_entry("x/y.md").content == "one"
    assert [i.path for i in any_store.list()] == ["x/y.md"]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/etc/passwd", "absolute"),
        ("C:/x.md", ":"),
        ("\\\\server\\x", "absolute"),
        ("a/../../x", ".."),
        ("", "empty"),
        ("   ", "empty"),
        ("a<b", "<"),
        ("a>b", ">"),
        ('a"b', '"'),
        ("a|b", "|"),
        ("a?b", "?"),
        ("a*b", "*"),
        ("a:b", ":"),
    ],
)
def test_invalid_paths_rejected(any_store, path, problem):
    with pytest.raises(InvalidPath) as info:
        any_store.write(path, "x")
    assert problem in str(info.value) and str(info.value).startswith("path=")
    assert any_store.all_entries() == []


def test_content_size_limit(any_store):
    any_store.write("ok.md", "x" * MAX_CONTENT_BYTES)
    with pytest.raises(ContentTooLarge, match="3000000 byte limit"):
        any_store.write("big.md", "x" * (MAX_CONTENT_BYTES + 1))
    with pytest.raises(ContentTooLarge):  # multi-byte characters count as bytes
        any_store.write("big.md", "é" * (MAX_CONTENT_BYTES // 2 + 1))
    assert [i.path for i in any_store.list()] == ["ok.md"]


def test_upsert_keeps_created_at_and_hits(any_store):
    first = any_store.write("a.md", "v1", updated_at=T0)
    any_store.read("a.md")
    any_store.read("a.md")
    second = any_store.write("a.md", "v2", title="new")
    stored = any_store.read_entry("a.md")
    assert stored.created_at == first.created_at
    assert stored.hits == 2
    assert stored.content == "v2" and stored.title == "new"
    assert stored.updated_at == second.updated_at > T0
    assert len(any_store.all_entries()) == 1


def test_put_round_trips_exactly(any_store):
    entry = Entry(
        path="p/q.md",
        scope="agent-1",
        title="Q",
        content="line1\r\nline2 中文",
        metadata={"type": "fact", "tags": ["a", "b"], "n": 1.5, "last_verified": "2024-01-15", "x": None},
        embedding=np.linspace(-1, 1, 384, dtype=np.float32),
        created_at=T0,
        updated_at=T0 + timedelta(days=3),
        hits=7,
    )
    any_store.put(entry)
    got = any_store.read_entry("p/q.md", scope="agent-1")
    assert got.to_record() == entry.to_record()
    assert got.embedding.dtype == np.float32
    assert np.array_equal(got.embedding, entry.embedding)


def test_put_many(any_store):
    entries = [
        Entry(path=f"n/{i:03d}", content=f"c{i}", hits=i, created_at=T0, updated_at=T0) for i in range(20)
    ]
    assert any_store.put_many(entries) == 20
    assert [e.to_record() for e in any_store.all_entries()] == [e.to_record() for e in entries]


def test_entry_without_embedding(any_store):
    any_store.write("e.md", "x", embedding=[0.5] * 384)
    any_store.write("e.md", "y")  # rewritten without one: not kept stale
    assert any_store.read_entry("e.md").embedding is None


def test_read_follows_stubs_and_counts_hits(any_store):
    any_store.write("target.md", "the real thing")
    _stub(any_store, "s1.md", "target.md")
    _stub(any_store, "s2.md", "s1.md")
    entry = any_store.read("s2.md")
    assert entry.path == "target.md" and entry.content == "the real thing"
    assert {e.path: e.hits for e in any_store.all_entries()} == {"s1.md": 1, "s2.md": 1, "target.md": 1}


def test_engine_reads_never_count_hits(any_store):
    any_store.write("a.md", "x")
    _stub(any_store, "s.md", "a.md")
    any_store.read_entry("a.md")
    any_store.read_entry("s.md")
    any_store.all_entries()
    any_store.list()
    any_store.get("a.md")
    any_store.read("s.md", count_hit=False)
    assert [e.hits for e in any_store.all_entries()] == [0, 0]


def test_stub_chain_of_five_hops_is_followed(any_store):
    any_store.write("h0", "end")
    for i in range(1, 6):
        _stub(any_store, f"h{i}", f"h{i - 1}")
    assert any_store.read("h5").path == "h0"


def test_stub_chain_longer_than_five_hops_fails(any_store):
    any_store.write("h0", "end")
    for i in range(1, 7):
        _stub(any_store, f"h{i}", f"h{i - 1}")
    with pytest.raises(StubChainError, match="more than 5 redirect hops"):
        any_store.read("h6")


def test_stub_cycle_names_the_chain(any_store):
    _stub(any_store, "a", "b")
    _stub(any_store, "b", "c")
    _stub(any_store, "c", "a")
    with pytest.raises(StubChainError) as info:
        any_store.read("a")
    assert "redirect cycle" in str(info.value)
    assert info.value.chain == ["a", "b", "c", "a"]
    assert "a -> b -> c -> a" in str(info.value)


def test_stub_to_missing_entry(any_store):
    _stub(any_store, "a", "gone")
    with pytest.raises(StubChainError, match="missing entry: a -> gone"):
        any_store.read("a")


def test_scopes_are_isolated(any_store):
    any_store.write("same.md", "default text")
    any_store.write("same.md", "agent text", scope="agent-7")
    any_store.write("only.md", "x", scope="user@example.com")
    assert any_store.scopes() == ["agent-7", "default", "user@example.com"]
    assert any_store.scope_counts() == {"agent-7": 1, "default": 1, "user@example.com": 1}
    any_store.write("two.md", "y", scope="agent-7")
    assert any_store.scope_counts() == {"agent-7": 2, "default": 1, "user@example.com": 1}
    assert MemoryStore(any_store.all_entries()).scope_counts() == any_store.scope_counts()
    any_store.delete("two.md", scope="agent-7")
    assert any_store.read_entry("same.md").content == "default text"
    assert any_store.read_entry("same.md", scope="agent-7").content == "agent text"
    assert [i.path for i in any_store.list(scope="agent-7")] == ["same.md"]
    assert any_store.total_size(scope="agent-7") == len("agent text")
    assert [e.key for e in any_store.all_entries()] == [
        ("agent-7", "same.md"),
        ("default", "same.md"),
        ("user@example.com", "only.md"),
    ]
    _stub(any_store, "s.md", "only.md")  # the target exists only in another scope
    with pytest.raises(StubChainError):
        any_store.read("s.md")
    any_store.delete("same.md", scope="agent-7")
    assert any_store.read_entry("same.md").content == "default text"
    assert any_store.scopes() == ["default", "user@example.com"]


def test_invalid_scope_rejected(any_store):
    with pytest.raises(UsageError, match="scope="):
        any_store.write("a.md", "x", scope="../etc")


def test_order_is_by_code_point(any_store):
    for path in ["b", "a-b", "a/b", "B", "a_b", "ä", "a.b"]:
        any_store.write(path, path)
    assert [i.path for i in any_store.list()] == sorted(["b", "a-b", "a/b", "B", "a_b", "ä", "a.b"])


def test_prefix_is_literal(any_store):
    any_store.write("a_1", "x")
    any_store.write("ab", "y")
    any_store.write("a%b", "z")
    assert [i.path for i in any_store.list("a_")] == ["a_1"]
    assert [i.path for i in any_store.list("a%")] == ["a%b"]


def test_bump_hits_keeps_updated_at(any_store):
    any_store.write("a.md", "x", updated_at=T0)
    any_store.bump_hits("a.md", by=3)
    got = any_store.read_entry("a.md")
    assert got.hits == 3 and got.updated_at == T0
    with pytest.raises(EntryNotFound):
        any_store.bump_hits("missing.md")


def test_count_and_put_many_progress(any_store, progress_recorder):
    rec = progress_recorder()
    rec.start("writing", 1203)  # the caller knows the total and starts the stage; put_many advances it
    entries = [Entry(path=f"c/{i:04d}", content=f"c{i}", scope=("a" if i % 3 else "b")) for i in range(1203)]
    assert any_store.put_many(entries, progress=rec) == 1203
    assert rec.stages == [["writing", 1203, 1203]]  # Recorder also asserts every advance is > 0
    _stub(any_store, "s.md", "c/0001", scope="a")
    assert any_store.count() == 1204 == len(any_store.all_entries())
    assert any_store.count(scope="a") == len(any_store.all_entries(scope="a")) == 803
    assert any_store.count(scope="nobody") == 0


# ---- the entry limits (memwork/entry.py), enforced alike by every store ------------------------------
def _path_of(chars: int) -> str:
    """A path of ``chars`` characters whose components every store can hold (99 characters each)."""
    head = "/".join(["p" * 99] * 5)  # 499 characters
    return head + "q" * (chars - len(head))


@pytest.mark.parametrize(
    ("field", "entry", "error"),
    [
        ("path", Entry(path=_path_of(MAX_PATH_CHARS + 1), content="x"), InvalidPath),
        ("title", Entry(path="t.md", content="x", title="t" * (MAX_TITLE_CHARS + 1)), UsageError),
        ("content", Entry(path="c.md", content="x" * (MAX_CONTENT_BYTES + 1)), ContentTooLarge),
    ],
    ids=["path", "title", "content"],
)
def test_every_store_refuses_what_is_over_the_entry_limits(any_store, field, entry, error):
    """Once the filesystem store took a 501-character path and a 201-character title that a SQL
    store refuses; now every store applies entry.check_limits, so an export imports anywhere."""
    with pytest.raises(error) as info:
        any_store.put(entry)
    assert info.value.field == field
    with pytest.raises(error):
        any_store.put_many([Entry(path="ok.md", content="fine"), entry])
    with pytest.raises(error):
        any_store.write(entry.path, entry.content, title=entry.title)
    assert any_store.count() == 0 or [e.path for e in any_store.all_entries()] == ["ok.md"]
    assert entry.path not in [e.path for e in any_store.all_entries()]


def test_every_store_takes_entries_at_the_limits(any_store):
    path = _path_of(MAX_PATH_CHARS)
    any_store.put(Entry(path=path, content="x", title="t" * MAX_TITLE_CHARS))
    got = any_store.read_entry(path)
    assert (len(got.path), len(got.title)) == (MAX_PATH_CHARS, MAX_TITLE_CHARS)
