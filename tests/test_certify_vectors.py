"""The vectors and index checks against a real model and a recorded catalog: a MiniLM vector moved
below the model's cosine bar is named by id while one moved less passes; a pgvector before 0.8 (no
iterative scan) is an index problem."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from memwork.certify import CertifyOptions, certify
from memwork.certify.canonical import MODEL_COSINE
from memwork.certify.vectors import VectorReport, judge_index, read_index_catalog
from memwork.db import pg_connect
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration


@pytest.fixture(scope="module")
def minilm():
    from memwork.embed import load_embedder

    return load_embedder("minilm")


@pytest.fixture
def real_model_copy(pg_url, sqlite_url, minilm):
    rows = generate_legacy_items(2, 4, seed=11, now=datetime(2026, 6, 1), active_only=True)
    return build_migration(sqlite_url, pg_url, rows=rows, embedder=minilm)


def _turned(vector: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    """A unit vector at exactly ``cosine`` to ``vector`` (rotated towards a random orthogonal one)."""
    v = vector / np.linalg.norm(vector)
    other = np.random.default_rng(seed).standard_normal(v.shape)
    other -= other.dot(v) * v
    other /= np.linalg.norm(other)
    return (cosine * v + np.sqrt(1 - cosine**2) * other).astype(np.float32)


def test_a_real_model_vector_below_its_cosine_bar_is_named_and_one_above_passes(real_model_copy, minilm):
    assert not minilm.model_id.startswith("hash-")  # the cosine branch, not the exact one
    with pg_connect(real_model_copy.dest_url, autocommit=True) as conn:
        register_vector(conn)
        (bad, bad_user, bad_vec), (near, _, near_vec) = conn.execute(
            "SELECT source_memory_id, user_id, embedding FROM memory_embeddings ORDER BY 1 LIMIT 2"
        ).fetchall()
        moved = {bad: _turned(bad_vec.to_numpy(), 0.99, 1), near: _turned(near_vec.to_numpy(), 0.9998, 2)}
        for key, vector in moved.items():
            conn.execute(
                "UPDATE memory_embeddings SET embedding = %s WHERE source_memory_id = %s", (vector, key)
            )
    cert = certify(
        CertifyOptions(
            real_model_copy.source_url,
            real_model_copy.dest_url,
            table=real_model_copy.table,
            embedder=minilm,
            vector_sample=None,
            retrieval=False,
        )
    )
    assert cert.vectors.checked == real_model_copy.active
    [finding] = cert.vectors.findings
    assert (finding.key, finding.kind, finding.user) == (bad, "stale", bad_user)
    cosine = finding.fields["vector"]["cosine_to_content_embedding"]
    assert 0.98 < cosine < MODEL_COSINE  # what was stored (0.99 to the embedding, give or take runtimes)
    assert cert.verdict == "FAIL" and any(
        r.startswith(f"stale: 1 vector(s) (allowed 0), e.g. {bad}") for r in cert.gates["vectors"]
    )


def test_pgvector_before_0_8_is_an_index_problem(pg_url, sqlite_url):
    """The catalog is read from a real server; the version is a recorded one of an older pgvector."""
    m = build_migration(sqlite_url, pg_url, n_users=2, items_per_user=3, dimensions=8)
    with pg_connect(m.dest_url, autocommit=True) as conn:
        version, indexes = read_index_catalog(conn, m.table)
    assert version is not None and [i[1] for i in indexes] == ["hnsw"]
    current = VectorReport()
    judge_index(version, indexes, 10, 100, current)
    assert current.index_problems == []
    old = VectorReport()
    info = judge_index("0.7.4", indexes, 10, 100, old)
    assert old.index_problems == [
        "pgvector: version 0.7.4 has no iterative scan (the hnsw search path needs 0.8)"
    ]
    assert info["pgvector"] == "0.7.4"
    gone = VectorReport()
    judge_index(None, indexes, 10, 100, gone)
    assert gone.index_problems == ["pgvector: the vector extension is not installed"]
