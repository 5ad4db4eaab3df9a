"""A vector with no cosine direction is one hostile record, never a broken service (second adversarial
pass, class 7).

pgvector sums squares in float32: a vector whose squared length is 0 (all zeros, ``-0.0``, a denormal
such as ``1e-45``) or past float32 (components of ``1e20``) has a NaN cosine distance to everything.
Before, the import and the backfill stored such a vector, and every resolve that reached the row -- or
sent such a query embedding -- was answered HTTP 500 (``Out of range float values are not JSON
compliant``): fail-open broken for that user by one record. Now the import (source vectors and
re-embedded ones) and the backfill quarantine it with its reason, and the service answers any
non-finite number in a payload as ``null``.
"""

from __future__ import annotations

import textwrap

import httpx
import numpy as np
import psycopg
import pytest
from import_harness import ListSource
from pgvector.psycopg import register_vector
from test_hostile_records import rec

from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema

pytestmark = [pytest.mark.services]

NO_DIRECTION = {
    "zeros": [0.0, 0.0, 0.0, 0.0],
    "negative zeros": [-0.0, -0.0, -0.0, -0.0],
    "denormal": [1e-45, 0.0, 0.0, 0.0],
    "overflowing length": [1e20, 1e20, 1e20, 1e20],
}


def _ids(pg_url: str, table: str = "memory_embeddings") -> list[str]:
    with psycopg.connect(pg_url) as conn:
        return [r[0] for r in conn.execute(f"SELECT source_memory_id FROM {table} ORDER BY 1")]


def test_import_quarantines_a_source_vector_without_direction(pg_url):
    records = [rec(i) for i in range(12)]
    bad = {}
    for k, vector in enumerate(NO_DIRECTION.values()):
        records[3 + k] = rec(3 + k, vector=vector)
        bad[f"h-{3 + k:04d}"] = vector
    report = run_import(
        ImportOptions(
            source=ListSource(records), database_url=pg_url, apply=True, create_schema=True, page_size=5
        )
    )
    assert sorted(q["id"] for q in report.quarantined) == sorted(bad)
    assert all("direction" in q["reason"] for q in report.quarantined), report.quarantined
    assert _ids(pg_url) == sorted(r.id for r in records if r.id not in bad)


ZERO_EMBEDDER = textwrap.dedent(
    """
    DIMENSIONS = 4
    MODEL_ID = "zero-4"

    def embed_memory(memory):
        text = str(memory.get("content") or "")
        if "ZERO" in text:
            return [0.0] * 4
        if "TINY" in text:
            return [1e-45, 0.0, 0.0, 0.0]
        return [float((len(text) + i) % 7) + 0.5 for i in range(4)]
    """
)


def test_reembed_quarantines_the_row_a_module_embedder_gives_a_zero_vector(pg_url, tmp_path):
    module = tmp_path / "zero_embedder.py"
    module.write_text(ZERO_EMBEDDER, encoding="utf-8")
    records = [rec(i, vector=None) for i in range(20)]
    records[4] = rec(4, vector=None, content="ZERO vector please")
    records[11] = rec(11, vector=None, content="TINY vector please")
    report = run_import(
        ImportOptions(
            source=ListSource(records),
            database_url=pg_url,
            apply=True,
            create_schema=True,
            page_size=10,
            embedder=f"module:{module}",
        )
    )
    assert sorted(q["id"] for q in report.quarantined) == ["h-0004", "h-0011"]
    assert all("direction" in q["reason"] for q in report.quarantined), report.quarantined
    assert report.rows_written == 18


def test_a_stored_or_queried_vector_without_direction_never_breaks_resolve(pg_url):
    """The rows a resolve reaches, and the query's own vector: HTTP 200 with a null score, not 500."""
    from memwork.service.app import create_app, running

    ensure_schema(pg_url, "memory_embeddings", 4)
    with psycopg.connect(pg_url) as conn:  # a row stored before the import checked directions
        register_vector(conn)
        for n, vector in enumerate([[0.5, 0.1, 0.2, 0.3], [0.0, 0.0, 0.0, 0.0], [0.2, 0.9, 0.1, 0.4]]):
            conn.execute(
                "INSERT INTO memory_embeddings (source_memory_id, user_id, content, embedding) "
                "VALUES (%s, 'dora', %s, %s)",
                (f"d-{n}", f"dora memory {n}", np.asarray(vector, dtype=np.float32)),
            )
    env = {
        "MEMORY_ENABLED": "1",
        "MEMORY_BACKEND": "pgvector",
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_PGVECTOR_DATABASE_URL": pg_url,
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": "memwork.pgvector.local_hash",
    }
    with running(create_app(env)) as base_url:
        for embedding in ([0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [3e38, 3e38, 3e38, 3e38]):
            body = {"userId": "dora", "query": "memory", "limit": 10, "embedding": embedding}
            answer = httpx.post(f"{base_url}/user-memory/v1/resolve", json=body, timeout=30)
            assert answer.status_code == 200, (embedding, answer.text)
            payload = answer.json()
            assert payload["ok"] is True, payload
            memories = {m["id"]: m for m in payload["semanticMemories"]}
            assert set(memories) == {"d-0", "d-1", "d-2"}
            assert memories["d-1"]["score"] is None and memories["d-1"]["distance"] is None


def test_a_page_s_vector_problems_are_each_row_s_own():
    """The whole-page screen answers exactly what :func:`vector_problem` answers row by row."""
    import numpy as np

    from memwork.embed import vector_problem, vector_problems

    page = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
    page[3], page[7], page[11], page[15] = 0.0, 1e-45, -0.0, 3e18
    page[5, 2], page[9, 0], page[13, 1] = np.nan, 1e20, np.inf
    assert vector_problems(page) == [vector_problem(row) for row in page]
    assert sum(problem is not None for problem in vector_problems(page)) == 6
