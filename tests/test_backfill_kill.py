"""Crash safety: SIGKILL a real backfill subprocess mid-way (twice), resume, compare both sides."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psycopg
import pytest
from sqlalchemy import select, update

from memwork.db import get_engine
from memwork.embed import HashEmbedder
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill import load_checkpoint
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

pytestmark = [pytest.mark.services, pytest.mark.slow]
DIMS = 16


def _start(env: dict[str, str], *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "memwork", "backfill", "--apply", "--batch-size", "20"]
    args += ["--embedder", f"hash:{DIMS}", "--json", *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _checkpoint(pg_url: str) -> int:
    with psycopg.connect(pg_url) as conn:
        if conn.execute("SELECT to_regclass('memwork_import_checkpoints')").fetchone()[0] is None:
            return 0
        row = conn.execute("SELECT rows_written FROM memwork_import_checkpoints").fetchone()
    return int(row[0]) if row else 0


def _kill_after(proc: subprocess.Popen, pg_url: str, rows: int, deadline_s: float = 120) -> int:
    """SIGKILL once the committed checkpoint passes ``rows``; returns the checkpoint seen at the kill."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"backfill ended before the kill: {proc.communicate()}"
        if _checkpoint(pg_url) >= rows:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            return _checkpoint(pg_url)
        time.sleep(0.01)
    proc.kill()
    pytest.fail("backfill did not reach the kill point in time")


def _digest(rows) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for row in sorted(rows):
        h.update(json.dumps(row, default=str, ensure_ascii=False, sort_keys=True).encode())
        n += 1
    return n, h.hexdigest()


def _source_digest(mysql_url: str):
    t = memory_items.c
    query = select(t.id, t.user_id, t.content, t.type, t.source_session_id, t.source_message_id, t.updated_at)
    with get_engine(mysql_url).connect() as conn:
        rows = conn.execute(query.where(t.status == "active")).all()
    return _digest((*r[:-1], r[-1].isoformat()) for r in rows)


def _dest_digest(pg_url: str):
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT source_memory_id, user_id, content, type, source_session_id, source_message_id, "
            "updated_at AT TIME ZONE 'UTC' FROM memory_embeddings"
        ).fetchall()
    return _digest((*r[:-1], r[-1].isoformat()) for r in rows)


def _count(pg_url: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0]


def test_sigkill_mid_backfill_then_resume_loses_and_duplicates_nothing(mysql_url, pg_url, tmp_path):
    rows = generate_legacy_items(40, 500, seed=7, active_only=True)  # 20,000 rows -> 1,000 batches of 20
    load_legacy_rows(mysql_url, ITEMS, rows)
    with get_engine(mysql_url).begin() as conn:  # inactive rows must never arrive
        for row in rows[:30]:
            conn.execute(update(memory_items).where(memory_items.c.id == row["id"]).values(status="archived"))
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    env = {
        **os.environ,
        "MEMORY_BACKFILL_MYSQL_URL": mysql_url,
        "MEMORY_PGVECTOR_DATABASE_URL": pg_url,
        "MEMWORK_HOME": str(tmp_path / "home"),
    }

    seen = _kill_after(_start(env), pg_url, 2000)
    assert 2000 <= seen < 19970
    assert _count(pg_url) == seen  # rows and checkpoint commit together: nothing half-written

    seen_again = _kill_after(_start(env, "--resume"), pg_url, seen + 3000)
    assert _count(pg_url) == seen_again > seen

    final = _start(env, "--resume", "--batch-size", "1000")
    out, err = final.communicate(timeout=300)
    assert final.returncode == 0, err
    report = json.loads(out)
    assert report["resumed"] and report["rowsWritten"] == 19970 - seen_again

    source_n, source_hash = _source_digest(mysql_url)
    dest_n, dest_hash = _dest_digest(pg_url)
    assert source_n == dest_n == _count(pg_url) == 19970
    assert source_hash == dest_hash
    with psycopg.connect(pg_url) as conn:
        assert (
            conn.execute("SELECT count(DISTINCT source_memory_id) FROM memory_embeddings").fetchone()[0]
            == 19970
        )
        sample = conn.execute("SELECT content, embedding::text FROM memory_embeddings LIMIT 50").fetchall()
    embedder = HashEmbedder(DIMS)
    for content, text in sample:
        stored = np.array(json.loads(text), dtype=np.float32)
        assert np.allclose(stored, embedder.embed_one(content), atol=1e-6)
    checkpoint = load_checkpoint(pg_url)  # the one checkpoint, in the destination
    assert (
        checkpoint is not None
        and checkpoint["rowsWritten"] == 19970
        and checkpoint["model"] == f"hash-{DIMS}"
    )
