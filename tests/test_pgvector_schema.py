"""``memwork pgvector schema``: dry-run SQL, identifier rejection, explicit apply, idempotence."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import InvalidIdentifier, UsageError
from memwork.pgvector.schema import ensure_schema, index_names, schema_sql


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def _indexes(url: str, table: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)).fetchall()
    return {r[0] for r in rows}


def test_schema_sql_has_the_seed_shape_plus_indexes_and_model():
    statements = schema_sql("memory_embeddings", 1536, create_extension=True, create_vector_index=True)
    assert statements[0] == "CREATE EXTENSION IF NOT EXISTS vector"
    table_sql = statements[1]
    for column in (
        "user_id TEXT NOT NULL",
        "embedding VECTOR(1536) NOT NULL",
        "embedding_model TEXT",
        "source_memory_id TEXT",
        "metadata JSONB NOT NULL DEFAULT '{}'::jsonb",
    ):
        assert column in table_sql
    joined = "\n".join(statements)
    assert 'CREATE UNIQUE INDEX IF NOT EXISTS "memory_embeddings_source_memory_id_key"' in joined
    assert '"memory_embeddings_user_id_idx" ON "memory_embeddings" (user_id)' in joined
    assert "USING hnsw (embedding vector_cosine_ops)" in joined
    assert all("IF NOT EXISTS" in s for s in statements)


def test_schema_sql_optional_parts_are_optional():
    joined = "\n".join(schema_sql("t", 3))
    assert "EXTENSION" not in joined and "hnsw" not in joined


@pytest.mark.parametrize("table", ["x; drop table users", 'a"b', "1abc", "", "a" * 64])
def test_bad_table_names_are_rejected(table):
    with pytest.raises(InvalidIdentifier):
        schema_sql(table, 3)


@pytest.mark.parametrize("dims", [0, 16001, "3", True])
def test_bad_dimensions_are_rejected(dims):
    with pytest.raises(UsageError, match="dimensions"):
        schema_sql("t", dims)


def test_long_table_names_get_index_names_within_63_chars():
    names = index_names("t" * 63)
    assert all(len(n) <= 63 for n in (names.source, names.user, names.vector))


def test_cli_dry_run_prints_sql_and_runs_nothing(pg_url):
    result = CliRunner().invoke(main, ["pgvector", "schema", "--dimensions", "3", "--database-url", pg_url])
    assert result.exit_code == 0, result.output
    assert "dry run" in result.output and 'CREATE TABLE IF NOT EXISTS "memory_embeddings"' in result.output
    assert "memory_embeddings" not in _tables(pg_url)


def test_cli_rejects_sql_in_table_and_runs_nothing(pg_url):
    result = CliRunner().invoke(
        main, ["pgvector", "schema", "--apply", "--table", "x; drop", "--database-url", pg_url]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: table='x; drop': must be a plain identifier: a letter or _, then letters, digits, _"
    ]
    assert _tables(pg_url) == set()


def test_cli_apply_needs_an_explicit_url_and_ignores_database_url(pg_url, monkeypatch):
    monkeypatch.delenv("MEMORY_PGVECTOR_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", pg_url)
    result = CliRunner().invoke(main, ["pgvector", "schema", "--apply", "--dimensions", "3"])
    assert result.exit_code == 2
    assert "MEMORY_PGVECTOR_DATABASE_URL" in result.output
    assert _tables(pg_url) == set()


def test_cli_apply_is_idempotent(pg_url, monkeypatch):
    monkeypatch.setenv("MEMORY_PGVECTOR_DATABASE_URL", pg_url)
    args = [
        "pgvector",
        "schema",
        "--apply",
        "--dimensions",
        "3",
        "--create-extension",
        "--create-vector-index",
    ]
    for _ in range(2):
        result = CliRunner().invoke(main, [*args, "--json"])
        assert result.exit_code == 0, result.output
    # the destination table only: the migration's bookkeeping (checkpoints, rejects) is the migration's
    assert {"memory_embeddings"} <= _tables(pg_url) and "memwork_backfill_checkpoints" not in _tables(pg_url)
    assert _indexes(pg_url, "memory_embeddings") == {
        "memory_embeddings_pkey",
        "memory_embeddings_source_memory_id_key",
        "memory_embeddings_user_id_idx",
        "memory_embeddings_embedding_hnsw_idx",
    }


def test_apply_refuses_an_existing_table_of_another_dimension(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 3)
    with pytest.raises(UsageError, match=r"already has vector\(3\)"):
        ensure_schema(pg_url, "memory_embeddings", 384)


def test_url_server_outlives_the_command_and_later_embedded_users_until_stop(pg_server):
    """`memwork pgvector url` prints a URL that still works after it exits -- also after another
    process used pg://embedded and exited -- and `--stop` stops the server."""
    root = Path(tempfile.mkdtemp(prefix="mwurl-", dir="/tmp"))
    env = {**os.environ, "MEMWORK_PGDATA": str(root / "pgdata"), "MEMWORK_HOME": str(root / "home")}
    env.pop("MEMORY_PGVECTOR_DATABASE_URL", None)

    def memwork(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "memwork", *args], env=env, capture_output=True, text=True, timeout=180
        )

    try:
        url = memwork("pgvector", "url", "--name", "canary")
        assert url.returncode == 0, url.stderr
        url = url.stdout.strip()
        with psycopg.connect(url) as conn:  # the command has exited; the server is still there
            assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()
        smoke = memwork("smoke", "pgvector", "--create-schema", "--table", "t")  # joins pg://embedded
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        stopped = memwork("pgvector", "url", "--stop")
        assert stopped.returncode == 0, stopped.stderr
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=3)
    finally:
        memwork("pgvector", "url", "--stop")
        shutil.rmtree(root, ignore_errors=True)
