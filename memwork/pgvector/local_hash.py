"""Embedding module for local pgvector canaries: a deterministic hash embedding.

Point ``MEMORY_PGVECTOR_EMBEDDING_MODULE=memwork.pgvector.local_hash`` (runtime queries) or
``memwork backfill --embedding-module memwork.pgvector.local_hash`` at it; the dimension comes from
``MEMORY_V2_LOCAL_EMBEDDING_DIMENSIONS`` (default 3, the size a local canary uses). Plumbing only:
never for production retrieval quality.

A canary whose table has another dimension gets a module file of its own from :func:`write_module`; that
file only calls :func:`functions` here, so there is one hash query module, not two.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from memwork.embed import HashEmbedder
from memwork.workspace import replace_text, workspace_dir

DIMENSIONS = int(os.environ.get("MEMORY_V2_LOCAL_EMBEDDING_DIMENSIONS", "3"))
MODEL_ID = f"hash-{DIMENSIONS}"

QueryFunction = Callable[..., list[float]]
MemoryFunction = Callable[[Mapping[str, Any]], list[float]]


def functions(dimensions: int) -> tuple[QueryFunction, MemoryFunction]:
    """``embed_query`` and ``embed_memory`` for the hash embedder of ``dimensions``."""
    embedder = HashEmbedder(int(dimensions))

    def embed_query(query: str, input: Mapping[str, Any] | None = None) -> list[float]:
        """The vector of the request's query text."""
        return embedder.embed_one(query or "").tolist()

    def embed_memory(memory: Mapping[str, Any]) -> list[float]:
        """The vector of a memory item's content."""
        return embedder.embed_one(str(memory.get("content") or "")).tolist()

    return embed_query, embed_memory


embed_query, embed_memory = functions(DIMENSIONS)


def write_module(dimensions: int, folder: Path | None = None) -> str:
    """The path of a module file (for ``MEMORY_PGVECTOR_EMBEDDING_MODULE``) embedding with ``dimensions``.

    A file, not this module plus an environment variable: this module reads its dimension once per process,
    and a canary may check tables of several dimensions in one kernel. Without ``folder`` the file lives
    in the workspace (``query-modules/``), one per dimension, reused by every later call -- a temporary
    folder per call was never removed. Written to a temporary name and renamed, so a second process
    writing the same file at the same moment never reads half of it."""
    folder = folder or workspace_dir(create=True) / "query-modules"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"hash_query_{int(dimensions)}.py"
    text = module_text(dimensions)
    if path.is_file() and path.read_text() == text:
        return str(path)
    return str(replace_text(path, text))


def module_text(dimensions: int) -> str:
    """The source of the query module for ``dimensions``: it only calls :func:`functions`."""
    return (
        "from memwork.pgvector.local_hash import functions\n\n"
        f"embed_query, embed_memory = functions({int(dimensions)})\n"
    )
