"""Embedding module for local pgvector canaries: the seed's deterministic hash embedding.

Point ``MEMORY_PGVECTOR_EMBEDDING_MODULE=memwork.pgvector.local_hash`` (runtime queries) or
``memwork backfill --embedding-module memwork.pgvector.local_hash`` at it; the dimension comes from
``MEMORY_V2_LOCAL_EMBEDDING_DIMENSIONS`` (default 3, as in the seed's canary env). Plumbing only:
never for production retrieval quality.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from memwork.embed import HashEmbedder

DIMENSIONS = int(os.environ.get("MEMORY_V2_LOCAL_EMBEDDING_DIMENSIONS", "3"))
MODEL_ID = f"hash-{DIMENSIONS}"
_embedder = HashEmbedder(DIMENSIONS)


def embed_query(query: str, input: Mapping[str, Any] | None = None) -> list[float]:
    """The vector of the request's query text."""
    return _embedder.embed_one(query or "").tolist()


def embed_memory(memory: Mapping[str, Any]) -> list[float]:
    """The vector of a memory item's content."""
    return _embedder.embed_one(str(memory.get("content") or "")).tolist()
