"""Embedding module for the real sentence embedder (all-MiniLM-L6-v2, 384 dims, offline).

``MEMORY_PGVECTOR_EMBEDDING_MODULE=memwork.pgvector.minilm`` makes runtime queries use the same model
a migration used with ``--embedder minilm`` (onnxruntime, part of the default install). The model
loads on first use so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from memwork.embed import MINILM_DIMENSION, MINILM_MODEL_ID, MiniLMEmbedder, minilm_coverage

MODEL_ID = MINILM_MODEL_ID
DIMENSIONS = MINILM_DIMENSION


@cache
def _embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def embed_query(query: str, input: Mapping[str, Any] | None = None) -> list[float]:
    """The vector of the request's query text."""
    return _embedder().embed([query or ""])[0].tolist()


def embed_memory(memory: Mapping[str, Any]) -> list[float]:
    """The vector of a memory item's content."""
    return _embedder().embed([str(memory.get("content") or "")])[0].tolist()


def coverage(texts: list[str]) -> list[float]:
    """The share of each text the model can read (see :mod:`memwork.coverage`): a module embedder
    answers it too, so ``--embedding-module memwork.pgvector.minilm`` marks Chinese as out of range."""
    return minilm_coverage(texts).tolist()
