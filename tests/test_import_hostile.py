"""Hostile sources against real servers (issue 15 points 6 and 7: F-7, F-8, F-9, F-19).

One hostile record -- from a module source, a real Redis stream or a MariaDB row, or a module embedder
that answers NaN, infinity or 1e39 for it -- is quarantined with its reason while the import or the
backfill goes on, and a resume passes it; the dry run names the same rejects the apply records. A
source whose cursor comes back to one already read stops with the pages before it committed.
"""

from __future__ import annotations

import json
import textwrap

import psycopg
import pytest
import redis
from click.testing import CliRunner
from import_harness import ListSource
from sqlalchemy import text
from test_hostile_records import LoopingSource, _hostile_page, rec

from memwork.cli import main
from memwork.db import get_engine
from memwork.embed import HashEmbedder, MemoryModuleEmbedder
from memwork.errors import BackendError
from memwork.migrate.backfill import legacy_options, load_checkpoint, load_rejects, run_backfill
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

pytestmark = [pytest.mark.services]
DIMS = 4


def _ids(pg_url: str, table: str = "memory_embeddings") -> list[str]:
    with psycopg.connect(pg_url) as conn:
        return [r[0] for r in conn.execute(f"SELECT source_memory_id FROM {table} ORDER BY 1")]


def _checkpoint(pg_url: str) -> tuple:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(
            "SELECT next_cursor, finished, rows_written FROM memwork_import_checkpoints"
        ).fetchone()


# ---- F-8: one hostile record among good ones, through the apply and a resume ----------------------


def test_each_hostile_record_is_quarantined_the_run_goes_on_and_the_dry_run_said_so(pg_url):
    page = _hostile_page()
    preview = run_import(ImportOptions(source=ListSource(page), page_size=5))
    options = ImportOptions(
        source=ListSource(page), database_url=pg_url, apply=True, page_size=5, create_schema=True
    )
    report = run_import(options)
    assert report.rows_written == 12 and report.rows_quarantined == len(page) - 12
    assert report.quarantined == preview.quarantined  # the preview is the run's own screening
    assert _ids(pg_url) == [f"h-{i:04d}" for i in range(12)]
    assert sorted(r["id"] for r in load_rejects(pg_url)) == sorted(q["id"] for q in report.quarantined)
    assert _checkpoint(pg_url)[1] is True  # finished: the hostile records did not stop it

    again = run_import(options)  # a full re-run meets the same records: quarantined again, no error
    assert again.rows_written == 12 and again.rows_quarantined == report.rows_quarantined


def test_import_json_after_apply_with_a_lone_surrogate_exits_0(pg_url, tmp_path):
    """F-9: `import --json --apply` exited 1 (UnicodeEncodeError) after committing every row."""
    from test_hostile_records import SURROGATE_SOURCE

    module = tmp_path / "surrogates.py"
    module.write_text(SURROGATE_SOURCE, encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["import", "--from", f"module:{module}", "--to", pg_url, "--apply", "--create-schema", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rowsWritten"] == 3 and data["rowsQuarantined"] == 1 and data["checkpoint"]["finished"]
    assert "erin\udfff" in data["users"]


# ---- F-7: a looping cursor with --apply ------------------------------------------------------------


def test_a_looping_cursor_stops_the_apply_and_keeps_the_committed_pages(pg_url):
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    source = LoopingSource(40, at="20", back_to="10")  # the page read from "20" points back at "10"
    with pytest.raises(BackendError, match=r"list \(list:looping\): the listing looped back to cursor '10'"):
        run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10))
    assert len(source.reads) == 3  # not hundreds of pages
    assert _ids(pg_url) == [f"h-{i:04d}" for i in range(20)]  # the two pages before it, committed
    next_cursor, finished, written = _checkpoint(pg_url)
    assert (json.loads(next_cursor), finished, written) == ("20", False, 20)  # never the looping one


# ---- F-8 on the real Redis Streams source ----------------------------------------------------------


def test_hostile_redis_entries_are_quarantined_and_resume_passes_them(redis_url, redis_prefix, pg_url):
    stream = f"{redis_prefix}hostile"
    hostile = {
        10: {"position": "²"},  # '²'.isdigit() is True, int('²') raises
        20: {"ts": "0001-01-01T00:00:00+05:00"},  # before year 1 once in UTC
        25: {"ts": "9999-12-31T23:30:00-05:00"},  # after year 9999 once in UTC
    }
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for i in range(40):
            client.xadd(
                stream, {"userId": "u1", "content": f"entry {i}", "type": "fact", **hostile.get(i, {})}
            )
        entry_ids = [entry_id for entry_id, _ in client.xrange(stream)]
    finally:
        client.close()
    env = {"MEMORY_REDIS_STREAMS_URL": redis_url, "MEMORY_REDIS_STREAMS_STREAM": stream}
    options = ImportOptions(source="redis-streams", env=env, page_size=7, embedder=f"hash:{DIMS}")
    preview = run_import(options)
    assert preview.rows_read == 40 and sorted(q["id"] for q in preview.quarantined) == sorted(
        entry_ids[i] for i in hostile
    )
    reasons = {q["id"]: q["reason"] for q in preview.quarantined}
    assert reasons[entry_ids[10]] == "source: position: '²' is not a whole number"
    assert reasons[entry_ids[20]].startswith("created_at: 0001-01-01T00:00:00+05:00 is outside")
    applied = run_import(
        ImportOptions(**{**options.__dict__, "database_url": pg_url, "apply": True, "create_schema": True})
    )
    assert applied.rows_written == 37 and applied.quarantined == preview.quarantined
    resumed = run_import(
        ImportOptions(**{**options.__dict__, "database_url": pg_url, "apply": True, "resume": True})
    )
    assert resumed.rows_written + resumed.rows_quarantined == resumed.rows_read  # the last page again
    assert _ids(pg_url) == sorted(set(entry_ids) - {entry_ids[i] for i in hostile})


# ---- F-19: a module embedder's bad vector for one row, in the import and the backfill ---------------

POISON = textwrap.dedent(
    """
    import math
    DIMENSIONS = 4
    MODEL_ID = "poison-4"

    def embed_memory(memory):
        text = str(memory.get("content") or "")
        if "POISON-NAN" in text:
            return [math.nan] * 4
        if "POISON-INF" in text:
            return [math.inf] * 4
        if "POISON-BIG" in text:
            return [1e39] * 4
        if "POISON-DIM" in text:
            return [0.1] * 3
        if "POISON-RAISE" in text:
            raise ValueError("poison row")
        return [float((len(text) + i) % 7) + 0.5 for i in range(4)]
    """
)
POISONS = {
    "NAN": "non-finite",
    "INF": "non-finite",
    "BIG": "non-finite",
    "DIM": "3 numbers, not 4",
    "RAISE": "ValueError: poison row",
}


@pytest.fixture
def poison_module(tmp_path):
    path = tmp_path / "poison_embedder.py"
    path.write_text(POISON, encoding="utf-8")
    return path


@pytest.mark.parametrize("poison", list(POISONS))
def test_reembed_quarantines_the_one_row_a_module_embedder_fails_on(pg_url, poison_module, poison):
    """F-19: NaN, inf or 1e39 for one row ended `import --vectors reembed` (exit 2, nothing written)."""
    records = [rec(i, vector=None) for i in range(30)]
    records[13] = rec(13, vector=None, content=f"POISON-{poison}")
    report = run_import(
        ImportOptions(
            source=ListSource(records),
            database_url=pg_url,
            apply=True,
            create_schema=True,
            page_size=10,
            embedder=f"module:{poison_module}",
        )
    )
    assert report.rows_written == 29 and [q["id"] for q in report.quarantined] == ["h-0013"]
    assert (
        report.quarantined[0]["reason"].startswith("embedder: ")
        and POISONS[poison] in report.quarantined[0]["reason"]
    )


@pytest.mark.parametrize("poison", ["NAN", "INF", "BIG"])
def test_backfill_quarantines_the_one_row_a_module_embedder_fails_on(
    mysql_url, pg_url, poison_module, poison
):
    """F-19: the same poison ended `memwork backfill --apply` with exit 2 and 0/400 rows, every --resume."""
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    rows = generate_legacy_items(3, 10, seed=9, active_only=True)
    rows[17]["content"] = f"POISON-{poison}"
    load_legacy_rows(mysql_url, ITEMS, rows)
    options = legacy_options(
        mysql_url=mysql_url,
        database_url=pg_url,
        apply=True,
        embedder=MemoryModuleEmbedder(str(poison_module)),
        batch_size=7,
    )
    report = run_backfill(options)
    assert report.rows_written == len(rows) - 1 and [q["id"] for q in report.quarantined] == [rows[17]["id"]]
    assert "non-finite" in report.quarantined[0]["reason"]


# ---- a MariaDB zero or partial date: the backfill's hostile timestamp ------------------------------


def test_backfill_quarantines_zero_dates_and_its_keyset_and_checkpoint_pass_them(mysql_url, pg_url):
    """MariaDB's default sql_mode stores '0000-00-00' and '2024-00-15': reading them ended the backfill
    (ValueError: year 0 is out of range) in the dry run, the apply and every --resume."""
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    rows = generate_legacy_items(2, 5, seed=3, active_only=True)
    load_legacy_rows(mysql_url, ITEMS, rows)
    with get_engine(mysql_url).begin() as conn:
        conn.execute(text("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'"))
        for rid, moment in ((rows[0]["id"], "0000-00-00 00:00:00"), (rows[1]["id"], "2024-00-15 00:00:00")):
            conn.execute(
                text(f"UPDATE {ITEMS} SET created_at = :m, updated_at = :m WHERE id = :id"),
                {"m": moment, "id": rid},
            )
    dry = run_backfill(legacy_options(mysql_url=mysql_url))
    assert dry.first_checkpoint == {"updatedAt": "0000-00-00 00:00:00.000000", "id": rows[0]["id"]}
    one_by_one = {"mysql_url": mysql_url, "database_url": pg_url, "apply": True, "batch_size": 1}
    first = run_backfill(legacy_options(**one_by_one, embedder=HashEmbedder(DIMS), limit=1))
    assert first.rows_quarantined == 1 and first.rows_written == 0
    assert load_checkpoint(pg_url)["cursor"]["updatedAt"] == "0000-00-00 00:00:00.000000"
    rest = run_backfill(legacy_options(**one_by_one, embedder=HashEmbedder(DIMS), resume=True))
    assert json.loads(rest.start_cursor) == {"updatedAt": "0000-00-00 00:00:00.000000", "id": rows[0]["id"]}
    assert rest.rows_written == len(rows) - 2 and rest.rows_quarantined == 1
    reasons = {r["id"]: r["reason"] for r in load_rejects(pg_url)}
    assert reasons == {
        rows[0]["id"]: "created_at: '0000-00-00 00:00:00.000000' is not a valid date",
        rows[1]["id"]: "created_at: '2024-00-15 00:00:00.000000' is not a valid date",
    }
