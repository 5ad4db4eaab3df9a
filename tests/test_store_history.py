"""Superseded entries asked for as history (issue 19): ``read_entry`` / ``list_entries`` and ``memwork
store read|list --history``, and ``store export`` keeping them by default (a backup) or leaving them out
with ``--no-history`` -- on every store kind."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import memwork
from memwork.cli import main
from memwork.defrag import run_action, undo
from memwork.entry import Entry
from memwork.errors import EntryNotFound, StubChainError, UsageError
from memwork.stores import open_store
from memwork.stores.transfer import export_jsonl, load_jsonl

T0 = datetime(2025, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=3)


@pytest.fixture
def superseded(store_spec: str) -> str:
    """a.md superseded by b.md (a negation), c.md a stub to a.md, d.md unrelated; returns the spec."""
    with open_store(store_spec, create=True) as store:
        store.put(Entry(path="a.md", content="User is allergic to peanuts.", updated_at=T0, created_at=T0))
        store.put(
            Entry(path="b.md", content="User is not allergic to peanuts.", updated_at=LATER, created_at=LATER)
        )
        store.put(
            Entry(path="c.md", content="", metadata={"stub": True, "redirect_to": "a.md"}, updated_at=T0)
        )
        store.put(Entry(path="d.md", content="The garden needs water on Sundays.", updated_at=T0))
        done = run_action(store, "supersede", apply=True)
        assert [(op.path, op.target) for op in done.plan] == [("a.md", "b.md")]
    return store_spec


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_library_read_and_list_with_history(superseded):
    assert memwork.read_entry(superseded, "a.md").path == "b.md"
    assert memwork.read_entry(superseded, "c.md").path == "b.md"  # stub -> superseded -> newer
    kept = memwork.read_entry(superseded, "a.md", history=True)
    assert kept.path == "a.md" and kept.superseded_by == "b.md"
    assert kept.metadata["valid_until"] == LATER.isoformat()
    assert memwork.read_entry(superseded, "c.md", history=True).path == "a.md"
    with open_store(superseded) as store:
        assert store.get("a.md").hits == 0  # an inspection counts no hit
    now = memwork.list_entries(superseded)
    assert list(now["path"]) == ["b.md", "c.md", "d.md"]
    everything = memwork.list_entries(superseded, history=True)
    assert list(everything["path"]) == ["a.md", "b.md", "c.md", "d.md"]
    row = everything.set_index("path").loc["a.md"]
    assert row["superseded_by"] == "b.md" and row["valid_until"] == LATER.isoformat()
    assert list(everything["stub"]) == [False, False, True, False]
    with pytest.raises(EntryNotFound):
        memwork.read_entry(superseded, "nope.md", history=True)


def test_cli_read_follows_unless_history(superseded):
    plain = _cli("store", "read", "--store", superseded, "a.md", "--json")
    assert plain.exit_code == 0, plain.output
    data = json.loads(plain.output)
    assert (data["requested"], data["path"], data["superseded_by"]) == ("a.md", "b.md", None)
    assert data["content"] == "User is not allergic to peanuts." and "embedding" not in data
    kept = json.loads(_cli("store", "read", "--store", superseded, "a.md", "--history", "--json").output)
    assert (kept["path"], kept["superseded_by"], kept["valid_until"]) == ("a.md", "b.md", LATER.isoformat())
    text = _cli("store", "read", "--store", superseded, "--scope", "default", "a.md", "--history")
    assert text.exit_code == 0 and "superseded by: b.md" in text.output
    assert "User is allergic to peanuts." in text.output
    followed = _cli("store", "read", "--store", superseded, "a.md")
    assert "asked for a.md, followed" in followed.output and "superseded by" not in followed.output


def test_cli_list_with_history(superseded):
    plain = json.loads(_cli("store", "list", "--store", superseded, "--json").output)
    assert [r["path"] for r in plain["entries"]] == ["b.md", "c.md", "d.md"]
    full = _cli("store", "list", "--store", superseded, "--history")
    assert full.exit_code == 0, full.output
    assert "a.md" in full.output and "[superseded by b.md, valid until" in full.output
    assert "c.md" in full.output and "[stub]" in full.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["read", "../x.md"], "path='../x.md'"),
        (["read", "missing.md"], "path='missing.md'"),
        (["read", "--scope", "bad scope", "a.md"], "scope='bad scope'"),
        (["list", "--scope", "bad scope"], "scope='bad scope'"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(superseded, args, needle):
    result = _cli("store", args[0], "--store", superseded, *args[1:])
    assert result.exit_code == 2, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_export_keeps_history_so_a_load_restores_it_and_undo_still_works(superseded, tmp_path):
    """A backup is the default: the superseded entry, the stub to it and the newer entry, exactly."""
    dump = tmp_path / "dump.jsonl"
    result = _cli("store", "export", "--store", superseded, "-o", str(dump), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["exported"] == 4
    target = f"sqlite:///{tmp_path / 'restored.db'}"
    with open_store(target, create=True) as restored:
        load_jsonl(restored, dump, apply=True)
        assert restored.get("a.md").superseded_by == "b.md"
        assert restored.read("c.md", count_hit=False).path == "b.md"
        with open_store(superseded) as source:
            assert [e.to_record() for e in restored.all_entries()] == [
                e.to_record() for e in source.all_entries()
            ]
    with open_store(superseded) as store:
        run_id = memwork.run_action(store, "supersede", pair=["d.md", "b.md"], apply=True).run_id
        export_jsonl(store, tmp_path / "again.jsonl")
        undo(run_id, store)
        assert store.get("d.md").superseded_by is None


def test_export_without_history_writes_what_a_reader_sees(superseded, tmp_path):
    dump = tmp_path / "current.jsonl"
    result = _cli("store", "export", "--store", superseded, "--no-history", "-o", str(dump), "--json")
    assert result.exit_code == 0, result.output
    paths = [json.loads(line)["path"] for line in dump.read_text(encoding="utf-8").splitlines()]
    assert paths == ["b.md", "d.md"]  # a.md superseded, c.md a stub leading into it
    assert json.loads(result.output)["exported"] == 2
    target = f"sqlite:///{tmp_path / 'current.db'}"
    with open_store(target, create=True) as current:
        load_jsonl(current, dump, apply=True)
        for entry in current.all_entries():
            assert current.read(entry.path, count_hit=False).path == entry.path


# ---- the invariant: an export without history loads into a store where every entry reads ----------------
@st.composite
def _histories(draw: st.DrawFn) -> list[Entry]:
    """Up to 8 entries; some superseded by another, some stubs pointing at any entry (chains too)."""
    n = draw(st.integers(2, 8))
    paths = [f"e{i}.md" for i in range(n)]
    entries = []
    for i, path in enumerate(paths):
        role = draw(st.sampled_from(["live", "superseded", "stub"]))
        target = draw(st.sampled_from([p for p in paths if p != path]))
        metadata: dict = {}
        if role == "superseded":
            metadata = {"superseded_by": target, "valid_until": T0.isoformat()}
        elif role == "stub":
            metadata = {"stub": True, "redirect_to": target}
        entries.append(Entry(path=path, content=f"fact {i}", metadata=metadata, updated_at=T0))
    return entries


@settings(max_examples=60, deadline=None)
@given(_histories())
def test_no_history_export_leaves_no_redirect_into_a_missing_entry(entries):
    from memwork.stores.memory import MemoryStore

    source = MemoryStore(entries)
    lines = io.StringIO()
    export_jsonl(source, lines, history=False)
    kept = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert not any((r["metadata"] or {}).get("superseded_by") for r in kept)
    readable = set()
    for entry in entries:  # what a reader reached before: every path it could read, to where
        try:
            readable.add(source.read(entry.path, count_hit=False).path)
        except UsageError:
            continue
    target = MemoryStore([])
    load_jsonl(target, lines.getvalue().splitlines(), apply=True)
    for record in kept:
        try:
            assert target.read(record["path"], count_hit=False).path in readable
        except StubChainError as exc:  # only a cycle among stubs, which the source had too
            assert "cycle" in str(exc) or "hops" in str(exc)
