"""Generated samples are embedded once per machine: their vectors are cached on disk.

A demo or a report run without a store builds a generated sample and embeds a few hundred texts with the
real model -- the slowest step of such a run on a small machine, and the same texts every time. An
embedding is a function of the model and the text, so a sample's vectors (with the model's coverage
scores) are kept under ``MEMWORK_CACHE_DIR`` (default ``~/.cache/memwork``; ``off`` turns the cache off),
in one ``.npz`` file per batch named by the SHA-256 of the model id and the texts. Only samples read it:
an import, a backfill or a defrag always runs its embedder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memwork.coverage import coverage_of
from memwork.embed import Embedder

CACHE_ENV = "MEMWORK_CACHE_DIR"


def cache_dir() -> Path | None:
    """Where sample vectors are cached, or None when ``MEMWORK_CACHE_DIR=off``."""
    raw = os.environ.get(CACHE_ENV, "").strip()
    if raw.lower() == "off":
        return None
    base = Path(raw) if raw else Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "memwork"
    return base.expanduser() / "sample-vectors"


def batch_key(model_id: str, texts: Sequence[str]) -> str:
    """The cache key of one batch: model id and every text, length-prefixed so no two batches collide."""
    digest = hashlib.sha256(model_id.encode())
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def embed_cached(embedder: Embedder, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors, coverage)`` of ``texts``: from the cache when this batch was embedded before, else
    computed and stored (written to a temporary file and renamed, so a reader never sees half a file)."""
    folder = cache_dir()
    path = folder / f"{batch_key(embedder.model_id, texts)}.npz" if folder else None
    if path is not None:
        cached = _read(path, len(texts), embedder.dimension)
        if cached is not None:
            return cached
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    scores = coverage_of(embedder, texts)
    if path is not None:
        _write(path, vectors, scores)
    return vectors, scores


def _read(path: Path, rows: int, dimension: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The cached batch, or None when absent or not the expected shape (then it is recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            vectors, scores = data["vectors"], data["coverage"]
    except (OSError, KeyError, ValueError):
        return None
    if vectors.shape != (rows, dimension) or scores.shape != (rows,):
        return None
    return vectors.astype(np.float32, copy=False), scores.astype(np.float64, copy=False)


def _write(path: Path, vectors: np.ndarray, scores: np.ndarray) -> None:
    """Store a batch; a cache that cannot be written (read-only home, full disk) only costs speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
            np.savez(handle, vectors=vectors, coverage=scores)
        os.replace(handle.name, path)
    except OSError:
        return
