"""The MySQL -> pgvector backfill against real MariaDB and the embedded PostgreSQL."""

from __future__ import annotations

import io
import json
import sys
from contextlib import contextmanager
from datetime import datetime

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from pgvector.psycopg import register_vector
from sqlalchemy import update

from memwork.cli import main
from memwork.cli.options import stage_progress
from memwork.db import get_engine
from memwork.embed import HashEmbedder, MemoryModuleEmbedder
from memwork.errors import UsageError
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill import Cursor, legacy_options, load_checkpoint, run_backfill
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

DIMS = 8


class ExplodingEmbedder:
    """Proves an embedder is never called (dry run)."""

    model_id = "explode"
    dimension = DIMS

    def embed(self, texts):
        raise AssertionError("the embedder must not be called")


@pytest.fixture
def source(mysql_url):
    rows = generate_legacy_items(5, 12, seed=1, active_only=True)
    load_legacy_rows(mysql_url, ITEMS, rows)
    return mysql_url, rows


@pytest.fixture
def dest(pg_url):
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    return pg_url


def _options(mysql_url, pg_url, **kw):
    base = {"mysql_url": mysql_url, "database_url": pg_url, "apply": True, "embedder": HashEmbedder(DIMS)}
    base.update(kw)
    return legacy_options(**base)


def _dest_rows(pg_url):
    with psycopg.connect(pg_url) as conn:
        return {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT source_memory_id, content, type, user_id, metadata, source_session_id, "
                "source_message_id, updated_at, embedding_model FROM memory_embeddings"
            )
        }


def test_dry_run_reads_mysql_only(source):
    mysql_url, rows = source
    options = legacy_options(
        mysql_url=mysql_url,
        database_url="postgresql://nobody@127.0.0.1:1/unreachable",  # would fail if touched
        embedder=ExplodingEmbedder(),
        limit=10,
    )
    report = run_backfill(options).to_dict()
    ordered = sorted(rows, key=lambda r: (r["updated_at"], r["id"]))
    assert report["mode"] == "dry-run" and report["planned"] == 10
    assert report["sourceCounts"] == {"active": 60, "total": 60}
    assert report["firstCheckpoint"]["id"] == ordered[0]["id"]
    assert report["lastCheckpoint"]["id"] == ordered[9]["id"]
    assert [s["id"] for s in report["sample"]] == [r["id"] for r in ordered[:5]]
    assert report["rowsWritten"] == 0


def test_apply_copies_everything_with_model_and_content(source, dest):
    mysql_url, rows = source
    report = run_backfill(_options(mysql_url, dest, batch_size=7))
    assert (report.rows_written, report.pages) == (
        60,
        10,
    )  # 9 pages of rows, then the empty one that ends the keyset
    assert report.models_in_table == {f"hash-{DIMS}": 60}
    got = _dest_rows(dest)
    assert set(got) == {r["id"] for r in rows}
    one = rows[1]
    content, type_, user, metadata, session, message, updated, model = got[one["id"]]
    assert (content, type_, user, session, message) == (
        one["content"],
        one["type"],
        one["user_id"],
        one["source_session_id"],
        one["source_message_id"],
    )
    assert metadata == (one["metadata"] or {})
    assert updated.replace(tzinfo=None) == one["updated_at"] and model == f"hash-{DIMS}"
    assert load_checkpoint(dest)["cursor"] == report.last_checkpoint


def test_keyset_walks_ties_on_updated_at_one_row_at_a_time(mysql_url, dest):
    same = datetime(2024, 5, 1, 12, 0, 0)
    rows = generate_legacy_items(1, 9, seed=2, active_only=True)
    for row in rows:
        row["updated_at"] = same
    load_legacy_rows(mysql_url, ITEMS, rows)
    report = run_backfill(_options(mysql_url, dest, batch_size=1))
    assert report.rows_written == 9 and report.pages == 10  # and the empty page ending the keyset
    assert set(_dest_rows(dest)) == {r["id"] for r in rows}


def test_limit_then_resume_and_rerun_never_duplicates(source, dest):
    mysql_url, _ = source
    first = run_backfill(_options(mysql_url, dest, limit=25, batch_size=10))
    assert first.rows_written == 25 and len(_dest_rows(dest)) == 25
    second = run_backfill(_options(mysql_url, dest, resume=True, batch_size=10))
    assert second.resumed and json.loads(second.start_cursor) == first.last_checkpoint
    assert second.rows_written == 35 and len(_dest_rows(dest)) == 60
    again = run_backfill(_options(mysql_url, dest, batch_size=50))
    assert again.rows_written == 60 and len(_dest_rows(dest)) == 60
    with psycopg.connect(dest) as conn:
        assert (
            conn.execute("SELECT count(DISTINCT source_memory_id) FROM memory_embeddings").fetchone()[0] == 60
        )


def test_explicit_cursor_starts_after_it(source, dest):
    mysql_url, rows = source
    ordered = sorted(rows, key=lambda r: (r["updated_at"], r["id"]))
    cursor = Cursor(ordered[49]["updated_at"], ordered[49]["id"])
    report = run_backfill(_options(mysql_url, dest, cursor=cursor))
    assert report.rows_written == 10
    assert set(_dest_rows(dest)) == {r["id"] for r in ordered[50:]}


def test_rerun_updates_changed_rows(source, dest):
    mysql_url, rows = source
    run_backfill(_options(mysql_url, dest))
    target = rows[3]["id"]
    later = datetime(2030, 1, 1, 0, 0, 0, 123456)
    with get_engine(mysql_url).begin() as conn:
        conn.execute(
            update(memory_items)
            .where(memory_items.c.id == target)
            .values(
                content="changed content",
                type="goal",
                metadata={"v": 2},
                source_session_id="s2",
                source_message_id="m2",
                updated_at=later,
            )
        )
    report = run_backfill(_options(mysql_url, dest, resume=True))
    assert report.rows_written == 1  # only the changed row is after the checkpoint
    content, type_, _user, metadata, session, message, updated, _ = _dest_rows(dest)[target]
    assert (content, type_, metadata, session, message) == ("changed content", "goal", {"v": 2}, "s2", "m2")
    assert updated.replace(tzinfo=None) == later
    assert len(_dest_rows(dest)) == 60


def test_inactive_sources_are_reported_and_pruned_only_with_the_flag(source, dest):
    mysql_url, rows = source
    run_backfill(_options(mysql_url, dest))
    gone = sorted([rows[0]["id"], rows[1]["id"]])
    with get_engine(mysql_url).begin() as conn:
        conn.execute(update(memory_items).where(memory_items.c.id == gone[0]).values(status="archived"))
        conn.execute(update(memory_items).where(memory_items.c.id == gone[1]).values(status="deleted"))
    report = run_backfill(_options(mysql_url, dest, resume=True))
    assert report.inactive["count"] == 2 and report.inactive["pruned"] == 0
    assert sorted(report.inactive["sample"]) == gone and len(_dest_rows(dest)) == 60
    pruned = run_backfill(_options(mysql_url, dest, resume=True, prune_inactive=True))
    assert pruned.inactive["pruned"] == 2 and pruned.inactive["orphans"] == 0
    assert set(gone).isdisjoint(_dest_rows(dest)) and len(_dest_rows(dest)) == 58


def test_dimension_mismatch_is_refused_before_writing(source, dest):
    mysql_url, _ = source
    with pytest.raises(
        UsageError, match=r"makes 16-dim vectors but memory_embeddings.embedding is vector\(8\)"
    ):
        run_backfill(_options(mysql_url, dest, embedder=HashEmbedder(16)))
    assert _dest_rows(dest) == {}


def test_missing_table_is_refused(source, pg_url):
    mysql_url, _ = source
    with pytest.raises(UsageError, match="does not exist"):
        run_backfill(_options(mysql_url, pg_url))


def test_module_embedder_gets_decoded_rows(source, dest, tmp_path):
    mysql_url, _ = source
    module = tmp_path / "embed_rows.py"
    module.write_text(
        "MODEL_ID = 'row-module'\nDIMENSIONS = 8\n"
        "def embed_memory(memory):\n"
        "    assert isinstance(memory['metadata'], dict) and memory['updated_at'][:2] == '20'\n"
        "    return [1.0] + [0.0] * 7\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(
        main,
        [
            "backfill",
            "--apply",
            "--mysql-url",
            mysql_url,
            "--database-url",
            dest,
            "--embedding-module",
            str(module),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["modelsInTable"] == {"row-module": 60}


# ---- CLI edges ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "Error: page_size=0: must be from 1 to 50000"),
        (["--page-size", "0"], "Error: page_size=0: must be from 1 to 50000"),
        (["--limit", "-5"], "Error: limit=-5: must be a positive integer"),
        (["--table", "x; drop"], "Error: table='x; drop': must be a plain identifier"),
        (["--cursor-updated-at", "yesterday"], "Error: cursor_updated_at='yesterday': must be ISO 8601"),
        (["--cursor-id", "abc"], "Error: cursor_id='abc': needs --cursor-updated-at too"),
        (["--resume", "--cursor-updated-at", "0"], "Error: resume=True: cannot be combined"),
        (
            ["--apply", "--embedder", "hash:8"],
            "Error: database_url=None: --apply needs MEMORY_PGVECTOR_DATABASE_URL",
        ),
        (["--apply", "--database-url", "pg://embedded/x"], "Error: embedder=None: --apply needs --embedder"),
        (["--apply", "--database-url", "pg://embedded/x", "--embedder", "bert"], "Error: embedder='bert'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message, monkeypatch):
    monkeypatch.setenv("MEMORY_BACKFILL_MYSQL_URL", "mysql://root@127.0.0.1:1/never")
    monkeypatch.delenv("MEMORY_PGVECTOR_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["backfill", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_cli_needs_a_mysql_url_and_never_reads_database_url(monkeypatch):
    monkeypatch.delenv("MEMORY_BACKFILL_MYSQL_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "mysql://root@127.0.0.1:3306/app")
    result = CliRunner().invoke(main, ["backfill"])
    assert result.exit_code == 2
    assert "MEMORY_BACKFILL_MYSQL_URL" in result.output


def test_cli_dry_run_json(source, monkeypatch):
    mysql_url, _ = source
    monkeypatch.setenv("MEMORY_BACKFILL_MYSQL_URL", mysql_url)
    result = CliRunner().invoke(main, ["backfill", "--limit", "3", "--cursor-updated-at", "0", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["mode"] == "dry-run" and data["planned"] == 3 and len(data["sample"]) == 3


def test_dry_run_resume_reads_the_committed_checkpoint(source, dest):
    mysql_url, _ = source
    applied = run_backfill(_options(mysql_url, dest, limit=20))
    dry = run_backfill(legacy_options(mysql_url=mysql_url, database_url=dest, resume=True))
    assert dry.resumed and json.loads(dry.start_cursor) == applied.last_checkpoint
    assert dry.planned == 40


def test_unreachable_servers_are_one_line_exit_1(source, monkeypatch):
    mysql_url, _ = source
    result = CliRunner().invoke(
        main,
        [
            "backfill",
            "--apply",
            "--mysql-url",
            mysql_url,
            "--embedder",
            "hash:8",
            "--database-url",
            "postgresql://me:secret@127.0.0.1:1/none",
        ],
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "Error: PostgreSQL at postgresql://me:***@127.0.0.1:1/none"
    )
    result = CliRunner().invoke(main, ["backfill", "--mysql-url", "mysql://root@127.0.0.1:1/none"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: MySQL at mysql://root@127.0.0.1:1/none unreachable")


# ---- progress: the one Progress protocol, drawn by the CLI's one adapter ---------------------------
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stage_progress_draws_the_stage_and_shows_rows_per_second(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("TERM", "xterm-256color")
    with stage_progress(quiet=False, unit="rows") as bar:
        assert bar is not None
        bar.start("backfill", 10)
        bar.advance(4)
        bar.advance(6)
    drawn = terminal.getvalue()
    assert "backfill" in drawn and "10/10" in drawn and "rows/s" in drawn
    with stage_progress(quiet=True) as bar:
        assert bar is None  # quiet: the library gets no progress object at all


def test_cli_backfill_feeds_the_shared_progress_bar(source, dest, monkeypatch):
    mysql_url, _ = source
    calls: list[tuple] = []

    class Bar:
        def start(self, description, total):
            calls.append(("start", description, total))

        def advance(self, n=1):
            calls.append(n)

    @contextmanager
    def recorder(*, quiet, unit=""):
        calls.append(("open", quiet, unit))
        yield None if quiet else Bar()

    monkeypatch.setattr("memwork.cli.migrate.stage_progress", recorder)
    args = ["backfill", "--mysql-url", mysql_url, "--database-url", dest, "--batch-size", "25"]
    result = CliRunner().invoke(main, [*args, "--apply", "--embedder", f"hash:{DIMS}"])
    assert result.exit_code == 0, result.output
    assert calls[0] == ("open", False, "rows")
    assert calls[1] == (
        "start",
        "import legacy-mysql",
        60,
    )  # one stage: the planned total, before the first batch
    assert calls[2:] == [25, 25, 10]
    calls.clear()
    assert CliRunner().invoke(main, [*args, "--json"]).exit_code == 0  # dry run: no bar
    assert calls == [("open", True, "rows")]


# ---- review additions: keyset under concurrent change, full-range rerun, orphans, dry-run CLI ---
class ArchivingEmbedder:
    """Hash vectors; on its first batch (the call after the run's embedder probe) archives the first
    source row, as a concurrent app would."""

    model_id = f"hash-{DIMS}"
    dimension = DIMS

    def __init__(self, mysql_url, victim):
        self.inner, self.mysql_url, self.victim, self.calls = HashEmbedder(DIMS), mysql_url, victim, 0

    def embed(self, texts):
        self.calls += 1
        if self.calls == 2:
            with get_engine(self.mysql_url).begin() as conn:
                conn.execute(
                    update(memory_items).where(memory_items.c.id == self.victim).values(status="archived")
                )
        return self.inner.embed(texts)


def test_keyset_pages_survive_rows_leaving_the_active_set_mid_run(source, dest):
    """With OFFSET paging, a row archived before the cursor shifts every later page by one and a row
    is silently skipped; keyset pages on (updated_at, id) lose nothing."""
    mysql_url, rows = source
    ordered = sorted(rows, key=lambda r: (r["updated_at"], r["id"]))
    embedder = ArchivingEmbedder(mysql_url, ordered[0]["id"])
    report = run_backfill(_options(mysql_url, dest, batch_size=10, embedder=embedder))
    assert embedder.calls == 1 + 6 and report.rows_written == 60  # the probe, then six batches
    assert set(_dest_rows(dest)) == {r["id"] for r in rows}


def test_rerunning_a_range_updates_every_column_in_place(source, dest, tmp_path):
    mysql_url, rows = source
    run_backfill(_options(mysql_url, dest))
    target = rows[5]
    with psycopg.connect(dest) as conn:
        (row_id,) = conn.execute(
            "SELECT id FROM memory_embeddings WHERE source_memory_id = %s", (target["id"],)
        ).fetchone()
    with get_engine(mysql_url).begin() as conn:  # changed without touching updated_at
        conn.execute(
            update(memory_items)
            .where(memory_items.c.id == target["id"])
            .values(
                content="rewritten",
                type="preference",
                metadata={"k": [1, 2]},
                source_session_id="s9",
                source_message_id="m9",
                updated_at=target["updated_at"],
            )
        )
    module = tmp_path / "other_model.py"
    module.write_text(
        "from memwork.embed import HashEmbedder\nMODEL_ID = 'other-model'\nDIMENSIONS = 8\n"
        "_e = HashEmbedder(8)\n"
        "def embed_memory(memory):\n    return (-_e.embed_one(memory['content'])).tolist()\n",
        encoding="utf-8",
    )
    report = run_backfill(_options(mysql_url, dest, embedder=MemoryModuleEmbedder(str(module))))
    assert report.rows_written == 60 and report.models_in_table == {"other-model": 60}
    with psycopg.connect(dest) as conn:
        register_vector(conn)
        got = conn.execute(
            "SELECT id, content, type, metadata, source_session_id, source_message_id, embedding, "
            "embedding_model, updated_at FROM memory_embeddings WHERE source_memory_id = %s",
            (target["id"],),
        ).fetchone()
        assert conn.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0] == 60
    assert got[0] == row_id  # updated in place, not deleted and re-inserted
    assert got[1:6] == ("rewritten", "preference", {"k": [1, 2]}, "s9", "m9")
    assert np.allclose(got[6].to_numpy(), -HashEmbedder(DIMS).embed_one("rewritten"), atol=1e-6)
    assert got[7] == "other-model" and got[8].replace(tzinfo=None) == target["updated_at"]


def test_orphans_are_counted_when_pruning_but_never_deleted(source, dest):
    mysql_url, rows = source
    run_backfill(_options(mysql_url, dest))
    with get_engine(mysql_url).begin() as conn:
        conn.execute(memory_items.delete().where(memory_items.c.id == rows[0]["id"]))
    plain = run_backfill(_options(mysql_url, dest, resume=True))
    assert plain.inactive["count"] == 0 and plain.inactive["orphans"] is None
    pruned = run_backfill(_options(mysql_url, dest, resume=True, prune_inactive=True))
    assert pruned.inactive["orphans"] == 1 and pruned.inactive["orphanSample"] == [rows[0]["id"]]
    assert pruned.inactive["pruned"] == 0 and rows[0]["id"] in _dest_rows(dest)


def test_cli_dry_run_never_loads_the_embedder_or_touches_postgresql(source, tmp_path, monkeypatch):
    mysql_url, _ = source
    module = tmp_path / "explode.py"
    module.write_text("raise SystemExit('the embedding module was imported')\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_PGVECTOR_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/unreachable")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/bogus")
    for flags in (["--embedding-module", str(module)], ["--embedder", "minilm"]):
        result = CliRunner().invoke(main, ["backfill", "--mysql-url", mysql_url, "--json", *flags])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["mode"] == "dry-run" and data["planned"] == 60 and data["model"] is None


def test_cli_apply_never_falls_back_to_database_url(source, dest, monkeypatch):
    mysql_url, _ = source
    monkeypatch.delenv("MEMORY_PGVECTOR_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", dest)  # a working URL: using it would succeed
    result = CliRunner().invoke(
        main, ["backfill", "--apply", "--mysql-url", mysql_url, "--embedder", f"hash:{DIMS}"]
    )
    assert result.exit_code == 2 and "MEMORY_PGVECTOR_DATABASE_URL" in result.output
    assert _dest_rows(dest) == {}
