"""End to end with the real embedder: backfill with minilm, resolve with the minilm query module."""

from __future__ import annotations

import pytest

from memwork.backends.pgvector import from_env
from memwork.embed import load_embedder
from memwork.migrate.backfill import legacy_options, run_backfill
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, load_legacy_rows

pytestmark = pytest.mark.usefixtures("require_minilm")

FACTS = [
    "The user prefers dark mode in every editor.",
    "The user's daughter plays the violin on Saturdays.",
    "Deployments must go through the staging cluster first.",
    "The user is allergic to peanuts.",
]


def test_backfill_with_minilm_then_semantic_resolve(mysql_url, pg_url):
    from datetime import datetime, timedelta

    base = datetime(2024, 1, 1)
    rows = [
        {
            "id": f"fact-{i}",
            "user_id": "alice",
            "content": text,
            "type": "fact",
            "status": "active",
            "confidence": 0.9,
            "metadata": None,
            "source_session_id": None,
            "source_message_id": None,
            "created_at": base,
            "updated_at": base + timedelta(seconds=i),
        }
        for i, text in enumerate(FACTS)
    ]
    load_legacy_rows(mysql_url, ITEMS, rows)
    ensure_schema(pg_url, "memory_embeddings", 384)
    report = run_backfill(
        legacy_options(mysql_url=mysql_url, database_url=pg_url, apply=True, embedder=load_embedder("minilm"))
    )
    assert report.rows_written == 4 and report.models_in_table == {"all-MiniLM-L6-v2": 4}
    backend = from_env(
        {
            "MEMORY_VECTOR_ENABLED": "1",
            "MEMORY_PGVECTOR_DATABASE_URL": pg_url,
            "MEMORY_PGVECTOR_EMBEDDING_MODULE": "memwork.pgvector.minilm",
        }
    )
    try:
        result = backend.resolve({"userId": "alice", "query": "what food can't she eat?", "limit": 2})
        assert result["semanticMemories"][0]["id"] == "fact-3"
        result = backend.resolve({"userId": "alice", "query": "which colour theme for the IDE", "limit": 1})
        assert result["semanticMemories"][0]["id"] == "fact-0"
    finally:
        backend.close()
