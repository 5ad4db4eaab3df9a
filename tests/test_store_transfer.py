"""JSON-lines import/export and the ``memwork store`` CLI, on real stores."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.entry import Entry
from memwork.errors import ImportLineError, UsageError
from memwork.samples.entries import generate_entries
from memwork.stores import open_store
from memwork.stores.transfer import (
    RECORD_FIELDS,
    entry_line,
    export_jsonl,
    load_jsonl,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _dump(store, **kw) -> str:
    buf = io.StringIO()
    export_jsonl(store, buf, **kw)
    return buf.getvalue()


def _line(**record) -> str:
    base = {"path": "a.md", "content": "x"}
    base.update(record)
    return json.dumps(base)


def test_export_line_has_the_record_fields():
    entry = Entry(path="a.md", content="x", metadata={"b": 1, "a": {"d": 2, "c": 3}})
    record = json.loads(entry_line(entry))
    assert tuple(record) == RECORD_FIELDS == tuple(entry.to_record())
    assert list(record["metadata"]) == ["a", "b"] and list(record["metadata"]["a"]) == ["c", "d"]


@pytest.mark.parametrize("target", ["filesystem", "sqlite", "postgresql"])
def test_round_trip_across_store_kinds(any_store, target, tmp_path, request):
    """export -> import into another kind of store -> export gives the same bytes."""
    any_store.put_many(generate_entries(120, scopes=("default", "agent-2"), seed=4, now=NOW))
    first = _dump(any_store)
    spec = {
        "filesystem": str(tmp_path / "target-fs"),
        "sqlite": f"sqlite:///{tmp_path / 'target.db'}",
        "postgresql": "pg://embedded/rt_target",
    }[target]
    if target == "postgresql":
        request.getfixturevalue("pg_server")
    with open_store(spec, create=True) as other:
        for entry in other.all_entries():  # the named embedded database may be reused
            other.delete(entry.path, scope=entry.scope)
        report = load_jsonl(other, first.splitlines(), apply=True)
        assert (report.new, report.updated, report.unchanged) == (120, 0, 0)
        assert report.scopes["agent-2"]["new"] == 60
        assert _dump(other) == first
        again = load_jsonl(other, first.splitlines())
        assert (again.new, again.updated, again.unchanged) == (0, 0, 120)


def test_export_one_scope(any_store, tmp_path):
    any_store.write("a.md", "x")
    any_store.write("b.md", "y", scope="agent-1")
    out = tmp_path / "one.jsonl"
    assert export_jsonl(any_store, out, scope="agent-1") == 1
    assert json.loads(out.read_text())["scope"] == "agent-1"


def test_import_is_a_dry_run_by_default(any_store):
    any_store.write("a.md", "old")
    lines = [_line(path="a.md", content="new"), _line(path="b.md")]
    report = load_jsonl(any_store, lines)
    assert (report.applied, report.new, report.updated) == (False, 1, 1)
    assert [e.content for e in any_store.all_entries()] == ["old"]
    load_jsonl(any_store, lines, apply=True)
    assert [e.content for e in any_store.all_entries()] == ["new", "x"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_line(path="../x"), "line 3: path='../x': must not contain '..'"),
        (_line(path="/abs"), "line 3: path='/abs': must be relative"),
        (_line(content=5), "line 3: content=5: must be a string"),
        (_line(metadata=[1]), "line 3: metadata=[1]: must be a JSON object"),
        (_line(hits=-1), "line 3: hits=-1: must be an integer from 0 to 2147483647"),
        (_line(scope="a b"), "line 3: scope='a b'"),
        (_line(created_at="yesterday"), "line 3: created_at='yesterday': must be an ISO 8601 date-time"),
        (_line(embedding=[1.0, "x"]), "line 3: embedding="),
        (_line(colour="red"), "line 3: field='colour': unknown"),
        (_line(path="first.md"), "line 3: path='first.md': already on line 1"),
        ("{not json", "line 3: json='{not json': not valid JSON"),
        ('["a"]', "line 3: record='list': must be a JSON object"),
    ],
)
def test_import_errors_write_nothing(any_store, bad, message):
    lines = [_line(path="first.md"), "", bad, _line(path="last.md")]
    with pytest.raises(ImportLineError) as info:
        load_jsonl(any_store, lines, apply=True)
    assert str(info.value).startswith(message)
    assert info.value.line == 3
    assert any_store.all_entries() == []


def test_import_wrong_dimension_is_fine_for_filesystem(tmp_path):
    store = open_store(str(tmp_path / "fs"), create=True)
    report = load_jsonl(store, [_line(embedding=[0.1, 0.2])], apply=True)
    assert report.new == 1 and store.read_entry("a.md").embedding.shape == (2,)


def test_import_many_lines_uses_one_scan(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}", create=True)
    entries = generate_entries(2500, seed=1, now=NOW)
    lines = [entry_line(e) for e in entries]
    assert load_jsonl(store, lines, apply=True).new == 2500
    changed = json.loads(lines[7])
    changed["content"] += " more"
    lines[7] = json.dumps(changed)
    report = load_jsonl(store, lines)
    assert (report.new, report.updated, report.unchanged) == (0, 1, 2499)


def test_import_missing_file(any_store, tmp_path):
    with pytest.raises(UsageError, match="file="):
        load_jsonl(any_store, tmp_path / "nope.jsonl")


@pytest.mark.parametrize("count", [40, 2600])  # one get per line / one scan of the store
def test_import_export_progress_totals(progress_recorder, tmp_path, count):
    store = open_store(f"sqlite:///{tmp_path / 'p.db'}", create=True)
    lines = [entry_line(e) for e in generate_entries(count, seed=3, now=NOW)]
    rec = progress_recorder()
    report = load_jsonl(store, lines, apply=True, progress=rec)
    assert report.new == count
    assert rec.stages == [
        ["checking lines", count, count],
        ["comparing with the store", count if count <= 2000 else 0, count if count <= 2000 else 0],
        ["writing", count, count],
    ]
    rec = progress_recorder()
    assert load_jsonl(store, lines, progress=rec).unchanged == count  # dry run: no writing stage
    assert [s[0] for s in rec.stages] == ["checking lines", "comparing with the store"]
    assert all(total == done for _, total, done in rec.stages)
    rec = progress_recorder()
    assert export_jsonl(store, io.StringIO(), progress=rec) == count
    assert rec.stages == [["exporting", count, count]]


# ---- CLI ------------------------------------------------------------------------------------------
def test_cli_import_export_show_progress_but_not_under_json(tmp_path, fake_bar):
    runner = CliRunner()
    spec = f"sqlite:///{tmp_path / 'src.db'}"
    with open_store(spec, create=True) as store:
        store.put_many(generate_entries(25, seed=4, now=NOW))
    out = tmp_path / "dump.jsonl"
    assert runner.invoke(main, ["store", "export", "--store", spec, "-o", str(out)]).exit_code == 0
    assert list(fake_bar[-1].tasks.values()) == [["exporting", 25, 25]]
    target = str(tmp_path / "copy")
    done = runner.invoke(main, ["store", "import", "--store", target, str(out), "--apply"])
    assert done.exit_code == 0
    assert [t[0] for t in fake_bar[-1].tasks.values()] == [
        "checking lines",
        "comparing with the store",
        "writing",
    ]
    assert all(t[1] == t[2] == 25 for t in fake_bar[-1].tasks.values())
    bars = len(fake_bar)
    quiet = runner.invoke(main, ["store", "import", "--store", target, str(out), "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["unchanged"] == 25 and quiet.stderr == ""
    assert len(fake_bar) == bars  # no bar under --json


def test_cli_export_import_info(store_spec, tmp_path):
    runner = CliRunner()
    with open_store(store_spec, create=True) as store:
        store.put_many(generate_entries(30, scopes=("default", "agent-1"), seed=2, now=NOW))
    dump = runner.invoke(main, ["store", "export", "--store", store_spec])
    assert dump.exit_code == 0, dump.output
    source = tmp_path / "dump.jsonl"
    source.write_text(dump.stdout)

    target = str(tmp_path / "copy")
    dry = runner.invoke(main, ["store", "import", "--store", target, str(source), "--json"])
    assert dry.exit_code == 0 and json.loads(dry.stdout)["new"] == 30
    assert not (tmp_path / "copy").exists()  # a dry run creates no store
    done = runner.invoke(main, ["store", "import", "--store", target, str(source), "--apply"])
    assert done.exit_code == 0 and "imported: 30 new" in done.stdout

    out = tmp_path / "copy.jsonl"
    again = runner.invoke(main, ["store", "export", "--store", target, "-o", str(out)])
    assert again.exit_code == 0
    assert out.read_text() == dump.stdout

    info = runner.invoke(main, ["store", "info", "--store", target, "--json"])
    data = json.loads(info.stdout)
    assert data["entries"] == 30 and set(data["scopes"]) == {"default", "agent-1"}
    text = runner.invoke(main, ["store", "info", "--store", target])
    assert text.exit_code == 0 and "entries: 30" in text.stdout


def test_cli_import_error_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_line(path="ok.md") + "\n" + _line(path="a|b") + "\n")
    target = str(tmp_path / "fs")
    result = CliRunner().invoke(main, ["store", "import", "--store", target, str(bad), "--apply"])
    assert result.exit_code == 2
    assert result.stderr == "Error: line 2: path='a|b': must not contain '|'\n"
    assert not (tmp_path / "fs").exists()  # a bad file creates no store


def test_cli_export_to_unwritable_file_names_the_option(tmp_path):
    (tmp_path / "fs").mkdir()
    result = CliRunner().invoke(
        main, ["store", "export", "--store", str(tmp_path / "fs"), "-o", str(tmp_path / "no" / "x.jsonl")]
    )
    assert result.exit_code == 2
    assert result.stderr == f"Error: output={str(tmp_path / 'no' / 'x.jsonl')!r}: No such file or directory\n"


def test_cli_unknown_store_scheme_hides_password():
    result = CliRunner().invoke(main, ["store", "info", "--store", "redis://bob:hunter2@host/0"])
    assert result.exit_code == 2
    assert "hunter2" not in result.output and "store=" in result.stderr and "unknown scheme" in result.stderr


@pytest.mark.parametrize("command", ["import", "export", "info"])
def test_cli_help_has_example(command):
    result = CliRunner().invoke(main, ["store", command, "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "memwork store" in result.output


def test_cli_import_from_stdin_names_the_line_of_invalid_utf8(tmp_path):
    spec = f"sqlite:///{tmp_path / 'in.db'}"
    data = b'{"path": "a.md", "content": "x"}\n{"path": "b.md", "title": "caf\xe9", "content": "x"}\n'
    bad = CliRunner().invoke(main, ["store", "import", "--store", spec, "-", "--apply"], input=data)
    assert bad.exit_code == 2
    assert bad.stderr == "Error: line 2: title='<byte 0xe9 at byte 31 of the line>': not valid UTF-8\n"
    assert not (tmp_path / "in.db").exists()
    good = CliRunner().invoke(
        main, ["store", "import", "--store", spec, "-", "--apply"], input=data.split(b"\n")[0]
    )
    assert good.exit_code == 0 and "imported: 1 new" in good.stdout
