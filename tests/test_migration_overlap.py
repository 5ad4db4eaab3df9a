"""The migration's overlap (issue 20): each page's COPY inputs made on the caller's thread (vectors packed
as slices of one buffer) -- the same rows, vectors and checkpoints as ever, against real MariaDB and the
embedded PostgreSQL."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from memwork.embed import HashEmbedder
from memwork.migrate.backfill import legacy_options, load_checkpoint, run_backfill
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

DIMS = 8


@pytest.fixture
def source(mysql_url):
    rows = generate_legacy_items(6, 15, seed=7, active_only=True)
    load_legacy_rows(mysql_url, ITEMS, rows)
    return mysql_url, rows


def _stored(pg_url: str) -> dict[str, tuple]:
    with psycopg.connect(pg_url) as conn:
        register_vector(conn)
        return {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT source_memory_id, user_id, content, embedding, embedding_model, metadata, "
                "created_at, updated_at FROM memory_embeddings"
            )
        }


def test_prepared_pages_store_the_embedder_vectors_bit_for_bit_once(source, pg_url):
    mysql_url, rows = source
    ensure_schema(pg_url, "memory_embeddings", DIMS)
    embedder = HashEmbedder(DIMS)
    options = legacy_options(mysql_url, pg_url, embedder, apply=True, batch_size=7)
    report = run_backfill(options)
    assert report.rows_written == len(rows) == 90 and report.pages == 14  # 13 pages, then the empty one
    stored = _stored(pg_url)
    assert set(stored) == {r["id"] for r in rows}
    expected = embedder.embed([r["content"] for r in rows])
    for row, vector in zip(rows, expected, strict=True):
        got = stored[row["id"]]
        assert got[0] == row["user_id"] and got[1] == row["content"] and got[3] == f"hash-{DIMS}"
        assert np.array_equal(got[2].to_numpy(), vector)  # the packed slices: the same float32 bits
    checkpoint = load_checkpoint(pg_url)
    last = max(rows, key=lambda r: (r["updated_at"], r["id"]))
    assert checkpoint is not None and checkpoint["rowsWritten"] == 90
    assert checkpoint["cursor"]["id"] == last["id"]
    again = run_backfill(options)  # idempotent: the re-run upserts the same rows, nothing new
    assert again.rows_written == 90 and _stored(pg_url).keys() == stored.keys()
    assert {k: (v[0], v[1], v[3], v[4], v[5], v[6]) for k, v in _stored(pg_url).items()} == {
        k: (v[0], v[1], v[3], v[4], v[5], v[6]) for k, v in stored.items()
    }
