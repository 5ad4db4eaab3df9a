"""``memwork smoke pgvector``: nearest-first through the adapter, cleanup, exit codes."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.pgvector.schema import ensure_schema
from memwork.rollout.smoke import run_smoke, smoke_vectors


def _count(url: str, table: str = "memory_embeddings") -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_smoke_creates_schema_passes_and_cleans_up(pg_url):
    result = CliRunner().invoke(
        main,
        ["smoke", "pgvector", "--database-url", pg_url, "--create-schema", "--create-extension", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] and data["returnedOrder"] == data["expectedOrder"]
    assert all(i.startswith("memory-v2-smoke-") for i in data["returnedOrder"])
    assert data["cleaned"] == 3 and _count(pg_url) == 0


def test_smoke_keep_leaves_rows_and_existing_rows_are_untouched(pg_url):
    ensure_schema(pg_url, "mem", 3)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO mem (user_id, content, embedding, source_memory_id) "
            "VALUES ('u', 'real', '[1,0,0]', 'real-1')"
        )
    report = run_smoke(pg_url, table="mem", keep=True)
    assert report.ok and report.kept and report.cleaned == 0
    assert _count(pg_url, "mem") == 4
    report = run_smoke(pg_url, table="mem")
    assert report.ok and _count(pg_url, "mem") == 4  # removed only its own three rows


def test_smoke_fails_with_exit_1_when_the_table_is_missing(pg_url):
    result = CliRunner().invoke(main, ["smoke", "pgvector", "--database-url", pg_url])
    assert result.exit_code == 1
    assert "FAIL table memory_embeddings does not exist" in result.output
    assert result.output.strip().splitlines()[-1] == "Error: smoke pgvector failed on table memory_embeddings"


def test_smoke_fails_on_a_dimension_mismatch(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    result = CliRunner().invoke(main, ["smoke", "pgvector", "--database-url", pg_url, "--json"])
    assert result.exit_code == 1
    assert "vector(8), not 3" in result.output


def test_smoke_bad_input_exits_2(pg_url):
    result = CliRunner().invoke(main, ["smoke", "pgvector", "--database-url", pg_url, "--table", "a;b"])
    assert result.exit_code == 2 and "table='a;b'" in result.output
    with pytest.raises(UsageError, match="at least 2"):
        smoke_vectors(1)


def test_smoke_uses_the_embedded_server_without_a_url(pg_server, monkeypatch):
    monkeypatch.delenv("MEMORY_PGVECTOR_DATABASE_URL", raising=False)
    result = CliRunner().invoke(
        main, ["smoke", "pgvector", "--create-schema", "--table", "smoke_embedded", "--dimensions", "4"]
    )
    assert result.exit_code == 0, result.output
    assert "ok   nearest-first" in result.output
