"""End to end: a Qdrant storage of 1,060 points over 13 users -> ``memwork import --from qdrant --apply``
in a subprocess SIGKILLed mid-run -> ``--resume`` -> ``import-verify`` PASS; a damaged copy -> FAIL
naming the ids. The subprocesses open the storage through ``MEMORY_QDRANT_URL=local:/path`` (qdrant-
client's in-process mode takes a file lock: the seeding client is closed first, and the killed import's
lock dies with it)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from import_harness import damage_and_verify, kill_resume_verify
from qdrant_client import QdrantClient, models

COLLECTION = "memind_memory"
USERS = [f"user-{n:02d}" for n in range(10)] + ["TenantX", "tenantx", "tenantx "]
N_INT, N_UUID = 800, 260
DIM = 8


def _point_id(n: int) -> int | str:
    return n + 1 if n < N_INT else str(uuid.UUID(int=(n + 1) * 7919))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Path]:
    """The storage on tmpfs when there is one (local mode commits each point to SQLite on its own)."""
    shm = Path("/dev/shm")
    scratch = (
        Path(tempfile.mkdtemp(prefix="memwork-qdrant-", dir=shm)) if os.access(shm, os.W_OK) else tmp_path
    )
    path = scratch / "store"
    client = QdrantClient(path=str(path))
    client.create_collection(
        # cosine, as pgvector's resolve ranks: with dot product on unnormalised vectors the two sides
        # rank differently and the certificate's preserved gate rightly fails the copy
        COLLECTION,
        vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
    )
    rng = np.random.default_rng(10)
    points = [
        models.PointStruct(
            id=_point_id(n),
            vector=[float(x) for x in rng.normal(size=DIM)],
            payload={
                "user_id": USERS[n % len(USERS)],
                "content": f"memory {n} of {USERS[n % len(USERS)]!r}",
                "created_at": 1767323045 + n,
                "session_id": f"s{n % 7}",
                "metadata": {"n": n},
            },
        )
        for n in range(N_INT + N_UUID)
    ]
    client.upsert(COLLECTION, points)
    client.close()
    yield path
    if scratch != tmp_path:
        shutil.rmtree(scratch, ignore_errors=True)


def test_qdrant_import_killed_resumed_verified_then_damage_detected(storage, pg_url):
    env = {
        "MEMORY_QDRANT_URL": f"local:{storage}",
        "MEMORY_QDRANT_COLLECTION": COLLECTION,
        "MEMORY_QDRANT_EMBEDDING_MODEL": "qdrant-test-8",
    }
    ids = [str(_point_id(n)) for n in range(N_INT + N_UUID)]
    run = kill_resume_verify(env, "qdrant", pg_url, expected_ids=ids, kill_after_rows=300, page_size=50)
    assert run.verification["verdict"] == "PASS"
    assert run.source_key == f"qdrant:local:{storage}/{COLLECTION}"
    with psycopg.connect(pg_url) as conn:
        users = dict(
            conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
        )
        models_ = conn.execute(
            "SELECT DISTINCT embedding_model, vector_dims(embedding) FROM memory_embeddings"
        ).fetchall()
        sample = conn.execute(
            "SELECT source_session_id, metadata->>'n', created_at FROM memory_embeddings "
            "WHERE source_memory_id = %s",
            (str(_point_id(5)),),
        ).fetchone()
    assert users == {u: sum(1 for n in range(N_INT + N_UUID) if USERS[n % len(USERS)] == u) for u in USERS}
    assert models_ == [("qdrant-test-8", DIM)]
    assert sample[0] == "s5" and sample[1] == "5" and int(sample[2].timestamp()) == 1767323045 + 5
    damage_and_verify(env, "qdrant", pg_url)
