"""Embedders: a model id, a dimension and a batched ``embed(texts) -> float32 array``.

Every stored vector records the ``model_id`` of the embedder that made it, so a table with vectors of
mixed models can be detected. Built in here: ``hash`` (deterministic feature hashing, any dimension;
for plumbing and tests only). The real sentence embedder and module embedders live beside it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from memwork.errors import UsageError

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@runtime_checkable
class Embedder(Protocol):
    """What memwork needs of an embedding model."""

    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in one batch: a ``(len(texts), dimension)`` float32 array."""
        ...


class HashEmbedder:
    """Deterministic local hash embedding (signed feature hashing of words and CJK bigrams).

    Texts that share words get close vectors, so it is good enough to exercise duplicate detection
    and retrieval plumbing -- never for production retrieval quality.
    """

    def __init__(self, dimension: int = 384) -> None:
        if not isinstance(dimension, int) or not 1 <= dimension <= 16000:
            raise UsageError("dimensions", dimension, "must be an integer from 1 to 16000")
        self.dimension = dimension
        self.model_id = f"hash-{dimension}"

    def _features(self, text: str) -> list[str]:
        lowered = text.lower()
        words = _TOKEN_RE.findall(lowered)
        features: list[str] = []
        for word in words:
            if _CJK_RE.search(word) and len(word) > 1:
                features.extend(word[i : i + 2] for i in range(len(word) - 1))
            else:
                features.append(word)
        return features

    def embed_one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for feature in self._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            index = value % self.dimension
            sign = 1.0 if (value >> 63) & 1 else -1.0
            vec[index] += sign
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # empty text: a fixed unit vector so the result is never a zero vector
            vec[0] = 1.0
            return vec
        return vec / norm

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([self.embed_one(t) for t in texts]).astype(np.float32, copy=False)


def load_embedder(spec: str | None) -> Embedder | None:
    """Build an embedder from a short spec string (CLI ``--embedder``).

    ``None``/``""``/``none`` -> None; ``hash`` or ``hash:DIM`` -> :class:`HashEmbedder`.
    (The real sentence embedder and module embedders are added to this function by the pgvector work.)
    """
    if spec is None or spec.strip().lower() in ("", "none"):
        return None
    name, _, arg = spec.strip().partition(":")
    if name == "hash":
        try:
            dimension = int(arg) if arg else 384
        except ValueError:
            raise UsageError("embedder", spec, "hash takes an integer dimension, e.g. hash:384") from None
        return HashEmbedder(dimension)
    raise UsageError("embedder", spec, "unknown embedder; known: none, hash[:DIM]")
