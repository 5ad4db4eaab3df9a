"""memwork import / import-verify: bad input exits 2 with one line naming the field and nothing written;
the dry run and the verdict through the CLI; --set feeds the source's variables."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from import_harness import FILE_SOURCE, write_source_file
from test_migrate_run import records

from memwork.cli import main

pytestmark = [pytest.mark.services]


@pytest.fixture
def source_file(tmp_path):
    return write_source_file(tmp_path / "src.jsonl", records(30))


def _tables(pg_url: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]


def _run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


BAD_FLAGS = [
    (["--page-size", "0"], "page_size"),
    (["--limit", "0"], "limit"),
    (["--vectors", "keep", "--embedder", "hash:8"], "embedder"),
    (["--vectors", "reembed"], "embedder"),
    (["--table", "bad name;"], "table"),
    (["--set", "NOEQUALS"], "set"),
    (["--embedder", "nosuch:1"], "embedder"),
]


def test_bad_flags_exit_2_naming_the_field_and_write_nothing(pg_url, source_file):
    env = {"MEMWORK_TEST_SOURCE_FILE": str(source_file)}
    for extra, field in BAD_FLAGS:
        args = ["import", "--from", FILE_SOURCE, "--to", pg_url, "--apply", "--create-schema", *extra]
        result = _run(*args, env=env)
        assert result.exit_code == 2, (extra, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and field in lines[0], (extra, result.output)
    assert _tables(pg_url) == []


def test_unknown_source_and_missing_variable_and_non_postgres_destination_exit_2(pg_url, source_file):
    unknown = _run("import", "--from", "nosuch", "--to", pg_url, "--apply")
    assert unknown.exit_code == 2 and "from" in unknown.output and "nosuch" in unknown.output
    missing = _run(
        "import", "--from", FILE_SOURCE, "--to", pg_url, "--apply", env={"MEMWORK_TEST_SOURCE_FILE": ""}
    )
    assert missing.exit_code == 2 and "MEMWORK_TEST_SOURCE_FILE" in missing.output
    env = {"MEMWORK_TEST_SOURCE_FILE": str(source_file)}
    wrong = _run(
        "import", "--from", FILE_SOURCE, "--to", "mysql://root:s3cret@127.0.0.1/test", "--apply", env=env
    )
    assert wrong.exit_code == 2 and "to" in wrong.output and "s3cret" not in wrong.output
    assert _tables(pg_url) == []


def test_dry_run_json_then_apply_via_set_then_verify(pg_url, source_file):
    dry = _run("import", "--from", FILE_SOURCE, "--set", f"MEMWORK_TEST_SOURCE_FILE={source_file}", "--json")
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.output)
    assert (
        report["mode"] == "dry-run" and report["rowsRead"] == 30 and report["vectorDimensions"] == {"8": 30}
    )
    assert sum(report["users"].values()) == 30 and report["rowsWritten"] == 0

    env = {"MEMWORK_TEST_SOURCE_FILE": str(source_file)}
    applied = _run(
        "import",
        "--from",
        FILE_SOURCE,
        "--to",
        pg_url,
        "--apply",
        "--create-schema",
        "--page-size",
        "7",
        env=env,
    )
    assert applied.exit_code == 0, applied.output
    assert "written: 30" in applied.output and "pages: 5" in applied.output

    verified = _run("import-verify", "--from", FILE_SOURCE, "--to", pg_url, "--json", env=env)
    assert verified.exit_code == 0 and json.loads(verified.output)["verdict"] == "PASS", verified.output
    with psycopg.connect(pg_url) as conn:
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = 'm0007'")
    failed = _run("import-verify", "--from", FILE_SOURCE, "--to", pg_url, env=env)
    assert failed.exit_code == 1 and "m0007" in failed.output and "FAIL" in failed.output
