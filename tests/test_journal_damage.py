"""The journal survives damage (issue 8 point 6) and undo refuses another store (point 5).

Damaged files are skipped and named, a torn last line is undone up to the last complete line, the
summary index is used instead of re-parsing unchanged files, and undo never writes into a store the
run was not journaled for, not even with --force.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.defrag import list_runs, run_action, undo
from memwork.defrag.journal import INDEX_NAME, journal_dir, read_run, scan_journal
from memwork.embed import HashEmbedder
from memwork.entry import Entry, utcnow
from memwork.errors import UsageError
from memwork.stores import open_store

EMB = HashEmbedder(384)
NOW = utcnow().replace(microsecond=0)
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "omicron",
    "sigma",
    "tau",
    "upsilon",
]


def new_store(spec: str):
    """Open a store that may not exist yet (reading commands no longer create one)."""
    if "create" in inspect.signature(open_store).parameters:
        return open_store(spec, create=True)
    return open_store(spec)  # pragma: no cover - before open_store(create=)


def seed(store, clusters: int = 4) -> list[dict]:
    """``clusters`` groups of three near-duplicates; returns the store's records (the pre-run export)."""
    for c in range(clusters):
        base = " ".join(f"{w}{c}" for w in WORDS)
        for k, extra in enumerate(("", " one", " two")):
            text = base + extra
            store.put(Entry(path=f"c{c}/e{k}.md", content=text, embedding=EMB.embed([text])[0]))
    return records(store)


def records(store) -> list[dict]:
    return [e.to_record() for e in store.all_entries()]


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(params=["filesystem", "sqlite"])
def spec(request, tmp_path) -> str:
    return str(tmp_path / "fs") if request.param == "filesystem" else f"sqlite:///{tmp_path / 's.db'}"


DAMAGED = {
    "zz-notjson.jsonl": "not json\n",
    "zz-foo.jsonl": '{"foo": 1}\n',
    "zz-norunid.jsonl": '{"type": "run"}\n',
    "zz-empty.jsonl": "",
    "zz-list.jsonl": "[1, 2]\n",
    "zz-badutf8.jsonl": b"\xff\xfe{}\n",
}


def _write_damaged(folder: Path) -> None:
    for name, text in DAMAGED.items():
        data = text if isinstance(text, bytes) else text.encode()
        (folder / name).write_bytes(data)


def test_damaged_files_are_skipped_and_named(spec):
    with new_store(spec) as store:
        original = seed(store)
        run_id = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
    _write_damaged(journal_dir())
    # a real run file with a bad line in the middle: damaged too (its changes cannot be trusted)
    good = (journal_dir() / f"{run_id}.jsonl").read_text().splitlines()
    middle = journal_dir() / "20000101T000000Z-000000.jsonl"
    middle.write_text("\n".join([good[0].replace(run_id, middle.stem), "{broken", *good[1:]]) + "\n")

    listed = cli("defrag", "journal", "--json")
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.stdout)
    assert [r["run_id"] for r in data["runs"]] == [run_id]
    problems = {d["file"]: d["problem"] for d in data["damaged"]}
    assert set(problems) == set(DAMAGED) | {middle.name}
    assert "line 2 is not JSON" in problems[middle.name]
    assert "does not match the file name" in problems["zz-norunid.jsonl"]
    for name in problems:  # named on stderr, one line each
        assert f"skipped damaged journal file {name}" in listed.stderr

    text = cli("defrag", "journal")
    assert text.exit_code == 0 and run_id in text.stdout and "zz-foo.jsonl" in text.stderr

    undone = cli("defrag", "undo", run_id, "--store", spec)
    assert undone.exit_code == 0, undone.output
    with open_store(spec) as store:
        assert records(store) == original

    broken = cli("defrag", "undo", middle.stem, "--store", spec)
    assert broken.exit_code == 2
    assert middle.name in broken.output and "line 2" in broken.output


def _tear_last_change(run_file: Path, keep_bytes: int = 40) -> dict:
    """Drop the footer and cut the last change line short, as ENOSPC or power loss would."""
    lines = run_file.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "end"
    last = json.loads(lines[-2])
    run_file.write_bytes(b"".join(lines[:-2]) + lines[-2][:keep_bytes])
    return last


def test_torn_last_line_is_undone_up_to_the_last_complete_line(spec):
    with new_store(spec) as store:
        original = seed(store)
        run_id = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
        run_file = journal_dir() / f"{run_id}.jsonl"
        torn = _tear_last_change(run_file)
        # write-ahead: a change whose journal line is torn never reached the store
        store.put(Entry.from_record(torn["before"]))

    run = read_run(run_id)
    assert run.torn and run.footer is None and len(run.changes) == torn["seq"] - 1
    (summary,) = list_runs()
    assert summary["status"] == "incomplete" and summary["torn"] is True

    undone = cli("defrag", "undo", run_id, "--store", spec, "--json")
    assert undone.exit_code == 0, undone.output
    with open_store(spec) as store:
        assert records(store) == original


def test_undo_refuses_another_store_even_with_force(spec, tmp_path):
    other = str(tmp_path / "other") if "://" not in spec else f"sqlite:///{tmp_path / 'other.db'}"
    with new_store(spec) as store:
        original = seed(store)
        run_id = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
    with new_store(other) as store:
        seed(store, clusters=1)
        other_before = records(store)
    for extra in ([], ["--force"]):
        refused = cli("defrag", "undo", run_id, "--store", other, *extra)
        assert refused.exit_code == 2, refused.output
        line = refused.output.strip()
        assert "\n" not in line and f"run {run_id} was journaled for" in line
        assert read_run(run_id).header["store_id"] in line and "not this store" in line
    with open_store(other) as store:
        assert records(store) == other_before  # nothing written into the wrong store
    assert [r["undone_by"] for r in list_runs() if r["run_id"] == run_id] == [None]
    # the same store spelled differently (relative path / relative SQLite URL) is the same store
    same = os.path.relpath(spec) if "://" not in spec else "sqlite:///" + os.path.relpath(spec[10:])
    assert cli("defrag", "undo", run_id, "--store", same).exit_code == 0
    with open_store(spec) as store:
        assert records(store) == original


def test_index_lists_unchanged_files_without_parsing_them(tmp_path):
    with new_store(str(tmp_path / "fs")) as store:
        seed(store)
        first = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
        second = run_action(store, "compact", apply=True, now=NOW, min_quality_score=100, min_age_days=0)
    index = journal_dir() / INDEX_NAME
    assert index.exists()  # written when each run closed
    assert {r["run_id"] for r in scan_journal().runs} == {first, second.run_id}
    cached = json.loads(index.read_text())["files"][f"{first}.jsonl"]
    assert cached["summary"]["changes"] > 0

    # garbage of the same size and mtime: the index is trusted, so the file was not parsed again
    run_file = journal_dir() / f"{first}.jsonl"
    stat = run_file.stat()
    run_file.write_bytes(b"x" * stat.st_size)
    os.utime(run_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [r["run_id"] for r in scan_journal().runs if r["run_id"] == first] == [first]

    # a changed file (new mtime/size) is parsed again, and now shows up as damaged
    run_file.write_bytes(b"x" * (stat.st_size + 1))
    scan = scan_journal()
    assert first not in {r["run_id"] for r in scan.runs}
    assert [d["file"] for d in scan.damaged] == [run_file.name]

    # a missing or damaged index is rebuilt from the files
    for broken in (None, "not json", '{"version": 1, "files": []}'):
        if broken is None:
            index.unlink()
        else:
            index.write_text(broken)
        assert [r["run_id"] for r in scan_journal().runs] == [second.run_id]
        assert json.loads(index.read_text())["files"][f"{second.run_id}.jsonl"]["summary"]


def test_undo_reads_only_its_own_run(tmp_path):
    with new_store(str(tmp_path / "fs")) as store:
        original = seed(store)
        run_id = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
        _write_damaged(journal_dir())
        (journal_dir() / "zz-deep.jsonl").write_text("[" * 100_000 + "\n")
        undo(run_id, store)
        assert records(store) == original
    assert "zz-deep.jsonl" in {d["file"] for d in scan_journal().damaged}


def test_bad_image_in_a_run_names_file_and_seq(tmp_path):
    with new_store(str(tmp_path / "fs")) as store:
        seed(store)
        run_id = run_action(store, "merge_duplicates", apply=True, now=NOW).run_id
        run_file = journal_dir() / f"{run_id}.jsonl"
        lines = run_file.read_text().splitlines()
        change = json.loads(lines[1])
        change["before"]["path"] = "../escape.md"
        lines[1] = json.dumps(change)
        run_file.write_text("\n".join(lines) + "\n")
        with pytest.raises(UsageError, match=r"seq 1: bad before image") as info:
            undo(run_id, store, force=True)
        assert info.value.field == "journal" and info.value.value == run_file.name
