"""Poison rows never block the backfill: quarantined with id and reason, the run goes on, verification
lists them (issue 8 point 9, D-13). Real MariaDB source, real embedded PostgreSQL destination."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import update

from memwork.certify import CertifyOptions, certify
from memwork.cli import main
from memwork.db import get_engine
from memwork.embed import HashEmbedder
from memwork.errors import UsageError
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill import legacy_options, load_checkpoint, load_rejects, run_backfill
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

DIMS = 8
NUL_ID = "poison-id\x00tail"


@pytest.fixture
def dest(pg_url):
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    return pg_url


def _poison_source(mysql_url):
    """30 good rows and four poison ones among them; the NUL id is the newest row of all."""
    rows = generate_legacy_items(3, 10, seed=4, active_only=True)
    ordered = sorted(rows, key=lambda r: (r["updated_at"], r["id"]))
    template = dict(ordered[0], metadata=None)
    poison = [
        dict(template, id="poison-content", content="bad\x00row", updated_at=ordered[8]["updated_at"]),
        dict(template, id="poison-user", user_id="user\x00x", updated_at=ordered[15]["updated_at"]),
        # valid JSON for MariaDB, but jsonb refuses the \u0000 escape: only PostgreSQL can tell
        dict(template, id="poison-json", metadata={"note": "\x00"}, updated_at=ordered[22]["updated_at"]),
        dict(template, id=NUL_ID, updated_at=ordered[-1]["updated_at"] + timedelta(seconds=1)),
    ]
    load_legacy_rows(mysql_url, ITEMS, rows + poison)
    return rows, [p["id"] for p in poison]


def _cli_backfill(mysql_url, pg_url, *args):
    env = {"MEMORY_BACKFILL_MYSQL_URL": mysql_url, "MEMORY_PGVECTOR_DATABASE_URL": pg_url}
    result = CliRunner().invoke(
        main,
        ["backfill", "--apply", "--embedder", f"hash:{DIMS}", "--batch-size", "7", "--json", *args],
        env=env,
    )
    return result.exit_code, (json.loads(result.stdout) if result.exit_code == 0 else result.output)


def _dest_ids(pg_url):
    import psycopg

    with psycopg.connect(pg_url) as conn:
        return {r[0] for r in conn.execute("SELECT source_memory_id FROM memory_embeddings")}


def _verify(mysql_url, pg_url, **kw):
    return certify(
        CertifyOptions(
            source="legacy-mysql",
            env={"MEMORY_BACKFILL_MYSQL_URL": mysql_url},
            dest_url=pg_url,
            expected_dimensions=DIMS,
            vector_sample=0,
            retrieval=False,
            **kw,
        )
    )


def test_poison_rows_are_quarantined_listed_and_picked_up_again_once_fixed(mysql_url, dest):
    rows, poison = _poison_source(mysql_url)
    code, report = _cli_backfill(mysql_url, dest)
    # the run completes (exit 0); the quarantine is counted, and verification is the gate
    assert code == 0, report
    assert (report["rowsRead"], report["rowsWritten"], report["rowsQuarantined"]) == (34, 30, 4)
    assert report["rejectsTotal"] == 4 and report["rejectsTable"] == "memwork_backfill_rejects"
    reasons = {r["id"]: r["reason"] for r in report["quarantined"]}
    assert reasons["poison-content"].startswith("content: NUL byte at offset 3")
    assert reasons["poison-user"].startswith("user_id: NUL byte")
    assert reasons["poison-json"].startswith("postgresql: UntranslatableCharacter")
    assert reasons["poison-id\\x00tail"].startswith("id: NUL byte")
    assert _dest_ids(dest) == {r["id"] for r in rows}  # every other row copied
    # the checkpoint moved past the newest row, which is the one with a NUL in its id
    assert load_checkpoint(dest)["cursor"]["id"] == NUL_ID
    assert {r["id"] for r in load_rejects(dest)} == set(reasons)

    code, again = _cli_backfill(mysql_url, dest, "--resume")
    assert code == 0 and again["planned"] == 0 and again["rowsQuarantined"] == 0
    assert again["rejectsTotal"] == 4  # still recorded, not retried

    result = _verify(mysql_url, dest)
    assert result.verdict == "FAIL"
    assert result.rows.by_kind() == {"quarantined": 4}  # not missing, not changed
    assert {q["id"]: q["reason"] for q in result.quarantined} == reasons
    assert [r for r in result.reasons() if not r.startswith("rows: quarantined: 4 row(s)")] == []
    assert len(result.quarantined) + result.rows.dest_rows == result.rows.source_rows
    accepted = _verify(mysql_url, dest, allow_quarantined=True)
    assert accepted.verdict == "PASS" and len(accepted.quarantined) == 4
    assert any(n.startswith("quarantined: 4") for n in accepted.notes)

    # fixed at the source (which moves updated_at): the next --resume copies them, clears the rejects
    later = datetime(2030, 1, 1)
    with get_engine(mysql_url).begin() as conn:
        for k, pid in enumerate(poison[:3]):
            conn.execute(
                update(memory_items)
                .where(memory_items.c.id == pid)
                .values(content=f"fixed {k}", user_id="user-00000", metadata={}, updated_at=later)
            )
    code, fixed = _cli_backfill(mysql_url, dest, "--resume")
    assert code == 0 and (fixed["planned"], fixed["rowsWritten"], fixed["rowsQuarantined"]) == (3, 3, 0)
    assert [r["id"] for r in load_rejects(dest)] == ["poison-id\\x00tail"]
    assert _dest_ids(dest) == {r["id"] for r in rows} | set(poison[:3])
    result = _verify(mysql_url, dest)
    assert [q["id"] for q in result.quarantined] == ["poison-id\\x00tail"]
    text = CliRunner().invoke(
        main,
        ["backfill", "--apply", "--embedder", f"hash:{DIMS}", "--resume"],
        env={"MEMORY_BACKFILL_MYSQL_URL": mysql_url, "MEMORY_PGVECTOR_DATABASE_URL": dest},
    )
    assert text.exit_code == 0, text.output
    assert "quarantined: 0 row(s) in this run, 1 of this source in memwork_backfill_rejects" in text.output


class _PickyEmbedder(HashEmbedder):
    """Fails on one text only, like a tokenizer choking on one odd value."""

    def embed(self, texts):
        if any("explode" in t for t in texts):
            raise ValueError("cannot embed this text")
        return super().embed(texts)


class _BrokenEmbedder(HashEmbedder):
    model_id = "broken"

    def embed(self, texts):
        raise ConnectionError("embedding service down")


def _embedder_source(mysql_url):
    rows = generate_legacy_items(2, 10, seed=5, active_only=True)
    rows[7]["content"] = "please explode here"
    load_legacy_rows(mysql_url, ITEMS, rows)
    return rows


def test_an_embedder_failure_on_one_row_quarantines_only_that_row(mysql_url, dest):
    rows = _embedder_source(mysql_url)
    options = legacy_options(
        mysql_url=mysql_url, database_url=dest, apply=True, embedder=_PickyEmbedder(DIMS), batch_size=6
    )
    report = run_backfill(options)
    assert (report.rows_written, report.rows_quarantined) == (19, 1)
    assert report.quarantined == [
        {"id": rows[7]["id"], "reason": "embedder: ValueError: cannot embed this text"}
    ]
    assert _dest_ids(dest) == {r["id"] for r in rows} - {rows[7]["id"]}


def test_a_broken_embedder_is_refused_before_anything_is_written(mysql_url, dest):
    """Broken for every row (here: its service is down) is a configuration error, found by the probe
    before MySQL is read or PostgreSQL written -- never a run that quarantines every row."""
    _embedder_source(mysql_url)
    options = legacy_options(
        mysql_url=mysql_url, database_url=dest, apply=True, embedder=_BrokenEmbedder(DIMS), batch_size=6
    )
    with pytest.raises(UsageError, match="probe text: ConnectionError: embedding service down") as err:
        run_backfill(options)
    assert err.value.field == "embedder"
    assert _dest_ids(dest) == set() and load_rejects(dest) == [] and load_checkpoint(dest) is None


class _DiesAfter(HashEmbedder):
    """Embeds ``calls`` batches, then its service goes away."""

    def __init__(self, dims, calls):
        super().__init__(dims)
        self.calls = calls

    def embed(self, texts):
        self.calls -= 1
        if self.calls < 0:
            raise ConnectionError("embedding service down")
        return super().embed(texts)


def test_an_embedder_that_breaks_mid_run_stops_it_and_keeps_the_committed_batches(mysql_url, dest):
    _embedder_source(mysql_url)
    options = legacy_options(
        mysql_url=mysql_url, database_url=dest, apply=True, embedder=_DiesAfter(DIMS, 3), batch_size=6
    )
    with pytest.raises(ConnectionError, match="embedding service down"):
        run_backfill(options)  # the probe and two batches, then nothing embeds: stopped, not quarantined
    assert len(_dest_ids(dest)) == 12 and load_rejects(dest) == []


def test_non_finite_vectors_quarantine_their_row(mysql_url, dest):
    rows = _embedder_source(mysql_url)

    class NanOnOne(HashEmbedder):
        def embed(self, texts):
            out = np.asarray(super().embed(texts), dtype=np.float32)
            out[[("explode" in t) for t in texts]] = np.nan
            return out

    options = legacy_options(
        mysql_url=mysql_url, database_url=dest, apply=True, embedder=NanOnOne(DIMS), batch_size=6
    )
    report = run_backfill(options)
    assert report.rows_quarantined == 1 and report.quarantined[0]["id"] == rows[7]["id"]
    assert "non-finite" in report.quarantined[0]["reason"] and report.rows_written == 19


def test_the_row_by_row_retry_catches_what_the_precheck_does_not(dest):
    """The safety net under the pre-check: a value PostgreSQL refuses inside the binary COPY itself
    fails the batch; the batch is retried row by row and only that row is quarantined."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect
    from memwork.migrate.backfill import Cursor
    from memwork.migrate.checkpoint import ImportCheckpoint
    from memwork.migrate.ownership import LEGACY_OWNER
    from memwork.migrate.writer import Batch, PageMark, prepare_session, register_packed_vectors, write_batch

    rows = generate_legacy_items(1, 3, seed=6, active_only=True)
    for row in rows:
        row["metadata"] = None
        row["created_at"], row["updated_at"] = str(row["created_at"]), str(row["updated_at"])
    rows[1]["content"] = "nul \x00 inside"  # as if the pre-check had missed it
    vectors = np.asarray(HashEmbedder(DIMS).embed([r["content"] for r in rows]), dtype=np.float32)
    with pg_connect(dest, autocommit=True) as pg:
        register_vector(pg)
        register_packed_vectors(pg)
        prepare_session(pg)
        cursor = Cursor.parse(rows[-1]["updated_at"], rows[-1]["id"]).encode()
        batch = Batch(rows, vectors, [], PageMark(None, cursor, False, len(rows)))
        start = ImportCheckpoint("memory_embeddings", "legacy-mysql:test", "legacy-mysql", run_id="run-1")
        page = start.after_page(
            read_cursor=None, next_cursor=cursor, finished=False, rows_read=len(rows), run_id="run-1"
        )
        written, rejects, _ = write_batch(pg, "memory_embeddings", batch, "hash-8", page, owner=LEGACY_OWNER)
    assert written == 2 and [r.id for r in rejects] == [rows[1]["id"]]
    assert rejects[0].reason.startswith("postgresql: ")
    assert _dest_ids(dest) == {rows[0]["id"], rows[2]["id"]}
    assert load_rejects(dest)[0]["runId"] == "run-1" and load_checkpoint(dest)["rowsWritten"] == 2
