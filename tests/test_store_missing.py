"""A store that does not exist is an error, not an empty store (issue 8 point 10, D-14).

Reading commands and reports refuse a missing directory, SQLite file or table (exit 2, one line
naming the store) and create nothing; only a writing command (``store load --apply``) makes one.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import MissingStore, ReportInputRefused
from memwork.reports import run_report
from memwork.stores import open_store

READING_COMMANDS = [
    ["store", "info"],
    ["store", "export"],
    ["defrag", "analyze"],
    ["defrag", "find-duplicates"],
    ["defrag", "merge-duplicates", "--apply"],
    ["defrag", "compact", "--apply"],
]


def _missing(tmp_path, kind: str) -> tuple[str, str]:
    """A store string naming nothing, and the problem its error states."""
    if kind == "filesystem":
        return str(tmp_path / "typo"), "no such directory"
    return f"sqlite:///{tmp_path / 'typo.db'}", "no such SQLite file"


@pytest.mark.parametrize("kind", ["filesystem", "sqlite"])
@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_reading_commands_refuse_a_missing_store_and_create_nothing(tmp_path, kind, command):
    spec, problem = _missing(tmp_path, kind)
    result = CliRunner().invoke(main, [*command, "--store", spec])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"Error: store={spec!r}: {problem} (a reading command never creates a store)\n"
    assert list(tmp_path.glob("typo*")) == []


def test_a_database_without_the_table_is_refused_and_left_alone(pg_url):
    result = CliRunner().invoke(main, ["defrag", "analyze", "--store", pg_url])
    assert result.exit_code == 2, result.output
    assert "has no table agent_memories: no such store" in result.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('agent_memories')").fetchone()[0] is None


def test_a_missing_embedded_database_is_refused_and_not_created(pg_server):
    name = f"typo_{uuid.uuid4().hex[:8]}"
    result = CliRunner().invoke(main, ["store", "info", "--store", f"pg://embedded/{name}"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"Error: store='pg://embedded/{name}': no database {name!r} on the embedded PostgreSQL"
        " (a reading command never creates a store)\n"
    )
    with psycopg.connect(pg_server.get_uri()) as conn:
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None


def test_open_store_creates_only_when_asked(tmp_path, pg_url):
    for spec in (str(tmp_path / "fs"), f"sqlite:///{tmp_path / 'new.db'}", pg_url):
        with pytest.raises(MissingStore):
            open_store(spec)
        open_store(spec, create=True).close()
        assert open_store(spec).count() == 0  # exists now
    assert open_store("sqlite://").count() == 0  # an in-memory database always exists


@pytest.mark.parametrize("kind", ["filesystem", "sqlite"])
def test_import_dry_run_counts_a_new_store_and_apply_creates_it(tmp_path, kind):
    spec, _ = _missing(tmp_path, kind)
    source = tmp_path / "in.jsonl"
    source.write_text('{"path": "a.md", "content": "x"}\n')
    runner = CliRunner()
    dry = runner.invoke(main, ["store", "import", "--store", spec, str(source), "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["new"] == 1 and list(tmp_path.glob("typo*")) == []
    done = runner.invoke(main, ["store", "import", "--store", spec, str(source), "--apply"])
    assert done.exit_code == 0 and "imported: 1 new" in done.stdout
    assert open_store(spec).read_entry("a.md").content == "x"


def test_import_dry_run_into_a_database_without_the_table(pg_url, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"path": "a.md", "content": "x", "embedding": [0.5, 0.5]}\n')
    dry = CliRunner().invoke(main, ["store", "import", "--store", pg_url, str(source)])
    assert dry.exit_code == 2 and "must have 384 dimensions" in dry.stderr  # the table it would create
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('agent_memories')").fetchone()[0] is None


@pytest.mark.parametrize("report", ["health_report", "duplicate_review"])
@pytest.mark.parametrize("kind", ["filesystem", "sqlite"])
def test_reports_refuse_a_missing_store(tmp_path, report, kind):
    spec, problem = _missing(tmp_path, kind)
    with pytest.raises(ReportInputRefused) as info:
        run_report(report, {"store": spec}, tmp_path / "out")
    assert info.value.exit_code == 2
    assert f"MissingStore: store={spec!r}: {problem}" in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.glob("typo*")) == []
    assert not (tmp_path / "out").exists()  # bad input: no run folder either
