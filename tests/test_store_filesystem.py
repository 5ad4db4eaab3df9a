"""What only the filesystem store has: the on-disk layout, sidecars, atomic and locked writes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import numpy as np
import pytest
import yaml

from memwork.errors import InvalidPath
from memwork.stores import FilesystemStore, open_store


@pytest.fixture
def fs(tmp_path):
    return FilesystemStore(tmp_path / "mem")


def test_layout_of_one_entry(fs):
    vector = np.arange(384, dtype=np.float32) / 384
    fs.write(
        "concept/ruby/classes.md", "Classes!", title="Classes", embedding=vector, metadata={"type": "concept"}
    )
    base = fs.root / "concept" / "ruby" / "classes.md"
    assert base.read_bytes() == b"Classes!"
    side = yaml.safe_load(base.with_name("classes.md.yml").read_text())
    assert side["title"] == "Classes" and side["metadata"] == {"type": "concept"} and side["hits"] == 0
    assert {"created_at", "updated_at"} <= set(side)
    raw = base.with_name("classes.md.emb").read_bytes()
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), vector)


def test_other_scopes_live_under_dot_scopes(fs):
    fs.write("a.md", "x", scope="agent-1")
    assert (fs.root / ".scopes" / "agent-1" / "a.md").is_file()
    assert not (fs.root / "a.md").exists()
    assert fs.scopes() == ["agent-1"]


def test_delete_removes_all_three_files_and_empty_dirs(fs):
    fs.write("x/y/z.md", "x", embedding=[0.1] * 4)
    fs.write("x/keep.md", "k")
    fs.delete("x/y/z.md")
    assert sorted(p.name for p in fs.root.rglob("*") if not p.name.startswith(".")) == [
        "keep.md",
        "keep.md.yml",
        "x",
    ]


def test_bump_hits_touches_only_the_sidecar(fs):
    fs.write("a.md", "content", embedding=[0.5] * 4)
    content = fs.root / "a.md"
    before = (content.stat().st_mtime_ns, (fs.root / "a.md.emb").stat().st_mtime_ns)
    fs.read("a.md")
    after = (content.stat().st_mtime_ns, (fs.root / "a.md.emb").stat().st_mtime_ns)
    assert before == after
    assert yaml.safe_load((fs.root / "a.md.yml").read_text())["hits"] == 1


def test_existing_guide_directory_opens_as_is(tmp_path):
    root = tmp_path / "guide"
    (root / "fact").mkdir(parents=True)
    (root / "fact" / "plain.md").write_text("no sidecar at all")
    (root / "fact" / "old.md").write_text("old style")
    (root / "fact" / "old.md.yml").write_text(
        "title: Old\nupdated_at: 2024-01-15 10:00:00\ncreated_at: 2023-12-01\nhits: 4\n"
        "metadata:\n  type: fact\n  tags: [a, b]\n"
    )
    store = open_store(str(root))
    plain = store.read_entry("fact/plain.md")
    assert plain.title == "" and plain.metadata == {} and plain.hits == 0 and plain.embedding is None
    old = store.read_entry("fact/old.md")
    assert old.title == "Old" and old.hits == 4 and old.metadata == {"type": "fact", "tags": ["a", "b"]}
    assert old.updated_at == datetime(2024, 1, 15, 10, tzinfo=UTC)
    assert old.created_at == datetime(2023, 12, 1, tzinfo=UTC)


def test_lock_temp_and_hidden_files_are_ignored(fs):
    fs.write("a.md", "x")
    (fs.root / ".a.md.123.tmp").write_text("half written")
    (fs.root / ".hidden").mkdir()
    (fs.root / ".hidden" / "b.md").write_text("y")
    (fs.root / "orphan.md.yml").write_text("title: nothing\n")
    assert (fs.root / ".memwork.lock").exists()
    assert [i.path for i in fs.list()] == ["a.md"]


def test_path_colliding_with_a_directory(fs):
    fs.write("a", "file")
    with pytest.raises(InvalidPath, match="collides"):
        fs.write("a/b", "x")
    fs.write("c/d", "x")
    with pytest.raises(InvalidPath, match="collides"):
        fs.write("c", "x")


def test_concurrent_writers_lose_nothing(tmp_path):
    def writer(k: int) -> None:
        store = FilesystemStore(tmp_path / "shared")  # own lock object, same lock file
        for i in range(40):
            store.write(f"w{k}/e{i}.md", f"{k}-{i}", embedding=[float(k)] * 8)
            store.write("contended.md", f"{k}-{i}")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = FilesystemStore(tmp_path / "shared")
    assert len(store.all_entries()) == 4 * 40 + 1
    assert not [p for p in store.root.rglob("*.tmp")]
    assert store.read_entry("contended.md").content.split("-")[1] == "39"


def test_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="not a directory"):
        FilesystemStore(tmp_path / "file")
