"""The import checkpoint's running totals equal what the import wrote, however often it is resumed (F-6):
a resume that reads the last page again (a finished import, or one cut by --limit inside a page)
counts that page once."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from import_harness import FILE_SOURCE, ListSource, import_args, memwork_cli, write_source_file

from memwork.contracts import SourceRecord
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema

pytestmark = [pytest.mark.services]
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def records(n: int) -> list[SourceRecord]:
    return [
        SourceRecord(
            id=f"m{i:04d}",
            user_id=f"u{i % 3}",
            content=f"memory {i}",
            created_at=T0 + timedelta(seconds=i),
            vector=[(i % 7 + k) / 10 + 0.1 for k in range(4)],
            model="m4",
        )
        for i in range(n)
    ]


def resumed(source: ListSource, pg_url: str, **kw) -> ImportOptions:
    options = {"apply": True, "page_size": 10, "resume": True, **kw}
    return ImportOptions(source=source, database_url=pg_url, **options)


def in_table(pg_url: str, table: str = "memory_embeddings") -> int:
    with psycopg.connect(pg_url) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_resuming_a_finished_import_again_and_again_keeps_its_totals(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 4)
    source = ListSource(records(53))
    first = run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10))
    assert first.checkpoint and (first.checkpoint["rowsWritten"], first.checkpoint["pages"]) == (53, 6)
    for _ in range(3):
        again = run_import(
            ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10, resume=True)
        )
        assert again.rows_written == 3  # the last page, read and upserted again
        assert again.checkpoint is not None
        totals = (again.checkpoint["rowsRead"], again.checkpoint["rowsWritten"], again.checkpoint["pages"])
        assert totals == (53, 53, 6) and in_table(pg_url) == 53


def test_a_resume_picks_up_records_appended_to_the_last_page_and_counts_them_once(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 4)
    source = ListSource(records(23))
    run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10))
    source.records = records(35)  # the source grew: the last page (20-29) fills up, one more follows
    grown = run_import(
        ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10, resume=True)
    )
    assert grown.checkpoint is not None and grown.rows_written == 15
    assert (grown.checkpoint["rowsWritten"], grown.checkpoint["pages"]) == (35, 4) and in_table(pg_url) == 35


@pytest.mark.slow
def test_cli_resume_of_a_finished_import_leaves_rows_written_equal_to_the_table(pg_url, tmp_path):
    """The finding's reproduction: ``import --apply --resume --json`` twice on a finished import."""
    env = {
        "MEMWORK_TEST_SOURCE_FILE": str(write_source_file(tmp_path / "s.jsonl", records(120))),
        "MEMWORK_TEST_SOURCE_KEY": "file:totals",
    }
    args = import_args(FILE_SOURCE, pg_url, page_size=25)
    assert memwork_cli(env, *args).returncode == 0
    for _ in range(2):
        run = memwork_cli(env, *args, "--resume")
        assert run.returncode == 0, run.stderr
        assert run.json["checkpoint"]["rowsWritten"] == in_table(pg_url) == 120
        assert run.json["checkpoint"]["pages"] == 5


def test_a_checkpoint_table_from_before_the_page_counts_is_upgraded_in_place(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 4)
    source = ListSource(records(25))
    run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10))
    with psycopg.connect(pg_url) as conn:  # as an older memwork left it
        conn.execute(
            "ALTER TABLE memwork_import_checkpoints DROP COLUMN last_page_rows_read, "
            "DROP COLUMN last_page_rows_written"
        )
    options = ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10, resume=True)
    upgraded = run_import(options)  # the old row does not know its last page: counted as before, once
    assert upgraded.checkpoint and upgraded.checkpoint["rowsWritten"] == 30
    for _ in range(2):
        later = run_import(options)
        assert later.checkpoint and later.checkpoint["rowsWritten"] == 30  # and never again


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 40),
    page_size=st.integers(1, 12),
    limits=st.lists(st.one_of(st.none(), st.integers(1, 15)), min_size=1, max_size=5),
)
def test_totals_always_equal_the_rows_in_the_table(pg_url, n, page_size, limits):
    """Any mix of limited runs and resumes, then two resumes of the finished import: after every run
    the checkpoint's rows read and written are the rows in the table, its pages the pages they fill."""
    table = f"t_{uuid.uuid4().hex[:10]}"
    ensure_schema(pg_url, table, 4)
    source = ListSource(records(n), key=f"list:{table}")
    runs = [*limits, None, None, None]
    for k, limit in enumerate(runs):
        options = ImportOptions(
            source=source,
            database_url=pg_url,
            table=table,
            apply=True,
            page_size=page_size,
            limit=limit,
            resume=k > 0,
        )
        checkpoint = run_import(options).checkpoint
        assert checkpoint is not None
        rows = in_table(pg_url, table)
        assert checkpoint["rowsRead"] == checkpoint["rowsWritten"] == rows, (k, limit, checkpoint)
        assert checkpoint["pages"] == max(1, math.ceil(rows / page_size)), (k, limit, checkpoint)
    assert in_table(pg_url, table) == n
