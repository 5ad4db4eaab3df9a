"""One migration: the legacy table is the source ``legacy-mysql`` and goes through the same run, checkpoint,
rejects and verification as every other source.

``memwork import --from legacy-mysql`` and ``memwork backfill`` write identical tables, checkpoints and
verifications; a migration interrupted while the legacy table's checkpoint lived in
``memwork_backfill_checkpoints`` resumes from it; a finished migration resumed with a small limit stays
finished; a record without content is quarantined; two sources' rejects of one id are two rejects, and
each verification counts its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner
from import_harness import ListSource

from memwork.certify import CertifyOptions, certify
from memwork.cli import main
from memwork.contracts import SourceRecord
from memwork.embed import HashEmbedder
from memwork.migrate.backfill import legacy_options, load_checkpoint, run_backfill
from memwork.migrate.checkpoint import LEGACY_CHECKPOINT_TABLE
from memwork.migrate.legacy_mysql import Cursor, LegacyMySQLSource
from memwork.migrate.quarantine import load_rejects
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema
from memwork.plugins import source_names
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

pytestmark = [pytest.mark.services]
DIMS = 8
ROW_COLUMNS = (
    "source_memory_id, user_id, content, type, source_session_id, source_message_id, metadata, "
    "created_at, updated_at, embedding_model, embedding::text"
)


@pytest.fixture
def legacy(mysql_url):
    rows = generate_legacy_items(4, 15, seed=9, active_only=False)
    load_legacy_rows(mysql_url, ITEMS, rows)
    return mysql_url, rows


def _table(pg_url: str, table: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(f"SELECT {ROW_COLUMNS} FROM {table} ORDER BY source_memory_id").fetchall()


def _checkpoint(pg_url: str, table: str) -> dict:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT to_jsonb(c) - 'run_id' - 'updated_at' - 'target_table' FROM memwork_import_checkpoints c "
            "WHERE target_table = %s",
            (table,),
        ).fetchone()
    return row[0]


def _verification(mysql_url: str, pg_url: str, table: str) -> dict:
    result = CliRunner().invoke(
        main,
        ["verify", "--from", "legacy-mysql", "--to", pg_url, "--table", table, "--json"],
        env={"MEMORY_BACKFILL_MYSQL_URL": mysql_url},
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # what names the run or the table differs; everything measured is the same
    data["input_fingerprint"].pop("table")
    return {
        k: v for k, v in data.items() if k not in ("timings", "table", "run_id", "digest", "claim", "repair")
    }


def test_the_legacy_table_is_a_registered_source():
    assert "legacy-mysql" in source_names()


def test_import_from_legacy_mysql_and_backfill_write_identical_tables_checkpoints_and_verifications(
    legacy, pg_url
):
    mysql_url, rows = legacy
    for table in ("via_import", "via_backfill"):
        ensure_schema(pg_url, table, DIMS)
    runner = CliRunner()
    imported = runner.invoke(
        main,
        [
            *("import", "--from", "legacy-mysql", "--to", pg_url, "--table", "via_import", "--apply"),
            *("--page-size", "7", "--embedder", f"hash:{DIMS}", "--json"),
        ],
        env={"MEMORY_BACKFILL_MYSQL_URL": mysql_url},
    )
    backfilled = runner.invoke(
        main,
        [
            *("backfill", "--mysql-url", mysql_url, "--database-url", pg_url, "--table", "via_backfill"),
            *("--apply", "--batch-size", "7", "--embedder", f"hash:{DIMS}", "--json"),
        ],
    )
    assert imported.exit_code == 0 and backfilled.exit_code == 0, (imported.output, backfilled.output)
    active = sum(r["status"] == "active" for r in rows)
    assert (
        json.loads(imported.output)["rowsWritten"] == json.loads(backfilled.output)["rowsWritten"] == active
    )
    assert _table(pg_url, "via_import") == _table(pg_url, "via_backfill")
    assert len(_table(pg_url, "via_import")) == active
    assert _checkpoint(pg_url, "via_import") == _checkpoint(pg_url, "via_backfill")
    first = _verification(mysql_url, pg_url, "via_import")
    assert first["verdict"] == "PASS", first["reasons"]
    assert first == _verification(mysql_url, pg_url, "via_backfill")
    # the old name of the command verifies the same way
    again = runner.invoke(
        main,
        [
            "import-verify",
            "--from",
            "legacy-mysql",
            "--database-url",
            pg_url,
            "--table",
            "via_import",
            "--json",
        ],
        env={"MEMORY_BACKFILL_MYSQL_URL": mysql_url},
    )
    assert again.exit_code == 0 and json.loads(again.output)["verdict"] == "PASS"


def test_a_migration_interrupted_on_the_old_checkpoint_table_resumes_from_it(legacy, pg_url):
    """The legacy table's checkpoint once lived in ``memwork_backfill_checkpoints`` (one row per table,
    ``{updatedAt, id}``); a migration stopped there resumes after it, read once."""
    mysql_url, rows = legacy
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    options = {"mysql_url": mysql_url, "database_url": pg_url, "apply": True, "embedder": HashEmbedder(DIMS)}
    first = run_backfill(legacy_options(**options, limit=20, batch_size=6))
    assert first.rows_written == 20
    position = Cursor.from_json(first.last_checkpoint)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as the earlier version left it
        conn.execute("DELETE FROM memwork_import_checkpoints")
        conn.execute(
            f"CREATE TABLE {LEGACY_CHECKPOINT_TABLE} (target_table TEXT PRIMARY KEY, cursor_updated_at TEXT "
            "NOT NULL, cursor_id TEXT NOT NULL, rows_written BIGINT NOT NULL DEFAULT 0, "
            "embedding_model TEXT, dimensions INTEGER, updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW())"
        )
        conn.execute(
            f"INSERT INTO {LEGACY_CHECKPOINT_TABLE} VALUES ('memory_embeddings', %s, %s, 20, %s, %s, NOW())",
            (position.to_json()["updatedAt"], position.id, f"hash-{DIMS}", DIMS),
        )
    resumed = run_backfill(legacy_options(**options, resume=True, batch_size=6))
    active = sum(r["status"] == "active" for r in rows)
    assert resumed.resumed and json.loads(resumed.start_cursor) == position.to_json()
    assert resumed.rows_written == active - 20  # nothing read twice
    assert resumed.checkpoint and resumed.checkpoint["rowsWritten"] == active
    assert len(_table(pg_url, "memory_embeddings")) == active
    with psycopg.connect(pg_url, autocommit=True) as conn:  # moved on: the new row is the one read now
        conn.execute(f"UPDATE {LEGACY_CHECKPOINT_TABLE} SET rows_written = 999")
    later = run_backfill(legacy_options(**options, resume=True, batch_size=6))
    assert later.rows_written == 0 and later.checkpoint and later.checkpoint["rowsWritten"] == active
    assert load_checkpoint(pg_url)["rowsWritten"] == active


def test_resuming_a_finished_migration_with_a_small_limit_keeps_it_finished(pg_url):
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    records = [
        SourceRecord(id=f"m{i:02d}", user_id="u", content=f"memory {i}", created_at=t0 + timedelta(seconds=i))
        for i in range(25)
    ]
    source = ListSource(records, key="list:finished")
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    base = {
        "source": source,
        "database_url": pg_url,
        "apply": True,
        "page_size": 10,
        "embedder": f"hash:{DIMS}",
    }
    done = run_import(ImportOptions(**base)).checkpoint
    assert done and done["finished"] and done["rowsWritten"] == 25
    again = run_import(ImportOptions(**base, resume=True, limit=7)).checkpoint
    assert again and again["finished"] is True and again["rowsWritten"] == 25, again
    last = run_import(ImportOptions(**base, resume=True)).checkpoint
    assert last and last["finished"] is True and last["rowsWritten"] == 25


def test_a_record_without_content_is_quarantined_not_an_empty_memory(pg_url):
    records = [
        SourceRecord(id="kept", user_id="u", content="a memory"),
        SourceRecord(id="empty", user_id="u", content=None),  # type: ignore[arg-type]
    ]
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    report = run_import(
        ImportOptions(
            source=ListSource(records, key="list:none"),
            database_url=pg_url,
            apply=True,
            embedder=f"hash:{DIMS}",
        )
    )
    assert report.rows_written == 1 and report.rows_quarantined == 1
    assert report.quarantined[0]["id"] == "empty" and report.quarantined[0]["reason"].startswith("content:")
    assert [row[0] for row in _table(pg_url, "memory_embeddings")] == ["kept"]


def test_two_sources_rejects_of_one_id_are_two_rejects_and_each_verification_counts_its_own(pg_url):
    bad = SourceRecord(id="shared", user_id="u", content="nul \x00 here")
    good = SourceRecord(id="other", user_id="u", content="fine")
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    a = ListSource([bad, good], key="list:a")
    b = ListSource([bad], key="list:b")
    for source in (a, b):
        run_import(ImportOptions(source=source, database_url=pg_url, apply=True, embedder=f"hash:{DIMS}"))
    rejects = load_rejects(pg_url)
    assert sorted((r["id"], r["sourceKey"]) for r in rejects) == [("shared", "list:a"), ("shared", "list:b")]
    assert [r["sourceKey"] for r in load_rejects(pg_url, source_key="list:b")] == ["list:b"]
    result = certify(CertifyOptions(dest_url=pg_url, source=a, allow_quarantined=True, vector_sample=0))
    assert len(result.quarantined) == 1 and result.verdict == "PASS", result.reasons()
    assert result.quarantined[0]["sourceKey"] == "list:a"  # only its own reject
    assert result.rows.source_rows == 2 and result.rows.dest_rows == 1  # "other", stamped by the run


def test_the_legacy_source_pages_by_its_keyset(legacy):
    mysql_url, rows = legacy
    source = LegacyMySQLSource(mysql_url)
    try:
        ids, cursor = [], None
        while True:
            page = source.read_page(cursor, 11)
            ids += [record.id for record in page.records]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        active = sorted((r["updated_at"], r["id"]) for r in rows if r["status"] == "active")
        assert ids == [key for _, key in active]
        assert source.count() == len(active) and json.loads(cursor)["id"] == active[-1][1]
    finally:
        source.close()
