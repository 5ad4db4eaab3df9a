"""Text and embedding similarity, and exact all-pairs search for the defrag engine.

The guide scores a pair by ``max(Jaccard(words), cosine(embeddings))``. This module keeps that
definition exactly and only changes how the pairs are found (see :func:`find_duplicate_pairs`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memwork.errors import UsageError

_WORD_RE = re.compile(r"\w+", re.UNICODE)
# Scripts written without spaces: kana, CJK ideographs (+ ext. A, compatibility, ext. B+), hangul.
_NO_SPACE_CHARS = (
    "\u3005\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\U00020000-\U0003134f"
)
_RUN_RE = re.compile(f"[{_NO_SPACE_CHARS}]+|[^{_NO_SPACE_CHARS}]+")
_NO_SPACE_RE = re.compile(f"[{_NO_SPACE_CHARS}]")


def tokenize(text: str) -> frozenset[str]:
    """Lower-cased ``\\w+`` word set; runs of CJK/kana/hangul become character bigrams.

    Without the bigrams a whole Chinese sentence would be one "word" and Jaccard would be 0 or 1.
    """
    tokens: set[str] = set()
    for word in _WORD_RE.findall(text.lower()):
        if not _NO_SPACE_RE.search(word):
            tokens.add(word)
            continue
        for run in _RUN_RE.findall(word):
            if not _NO_SPACE_RE.match(run) or len(run) == 1:
                tokens.add(run)
            else:
                tokens.update(run[k : k + 2] for k in range(len(run) - 1))
    return frozenset(tokens)


def _as_tokens(value: str | frozenset[str]) -> frozenset[str]:
    return value if isinstance(value, frozenset) else tokenize(value)


def jaccard(a: str | frozenset[str], b: str | frozenset[str]) -> float:
    """Jaccard coefficient of two texts (or token sets); 0.0 when both are empty, as in the guide."""
    set_a, set_b = _as_tokens(a), _as_tokens(b)
    union = len(set_a | set_b)
    if union == 0:
        return 0.0
    return len(set_a & set_b) / union


def _row_norms(rows: np.ndarray) -> np.ndarray:
    """Float64 Euclidean norm of each row; one code path for scalar and batch so they agree bitwise."""
    return np.sqrt((rows * rows).sum(axis=1))


def _cosine_rows(left: np.ndarray, right: np.ndarray, nl: np.ndarray, nr: np.ndarray) -> np.ndarray:
    """Row-wise cosine of float64 rows with precomputed norms; 0.0 where a norm is 0, clipped."""
    dots = (left * right).sum(axis=1)
    denom = nl * nr
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0.0, dots / np.where(denom > 0.0, denom, 1.0), 0.0)
    return np.clip(out, -1.0, 1.0)


def cosine(u: np.ndarray | Sequence[float] | None, v: np.ndarray | Sequence[float] | None) -> float | None:
    """Cosine similarity in float64; None when either vector is missing, 0.0 for a zero vector."""
    if u is None or v is None:
        return None
    left = np.asarray(u, dtype=np.float64).reshape(1, -1)
    right = np.asarray(v, dtype=np.float64).reshape(1, -1)
    if left.shape != right.shape:
        raise UsageError("embedding", f"{left.shape[1]} vs {right.shape[1]}", "dimensions differ")
    return float(_cosine_rows(left, right, _row_norms(left), _row_norms(right))[0])


@dataclass(frozen=True)
class PairScore:
    """One scored pair of input positions ``i < j``."""

    i: int
    j: int
    text_similarity: float
    semantic_similarity: float | None

    @property
    def similarity(self) -> float:
        """The guide's hybrid: the higher of the scores that exist."""
        if self.semantic_similarity is None:
            return self.text_similarity
        return max(self.text_similarity, self.semantic_similarity)


def _check_unit(field: str, value: object) -> float:
    """Reject thresholds outside 0..1 (and non-numbers) instead of silently clamping them."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(field, value, "must be a number from 0 to 1")
    if not 0.0 <= value <= 1.0:
        raise UsageError(field, value, "must be from 0 to 1")
    return float(value)


def _sort_key(pair: PairScore) -> tuple[float, int, int]:
    return (-pair.similarity, pair.i, pair.j)


def find_duplicate_pairs(
    texts: Sequence[str], embeddings: Sequence[np.ndarray | None], threshold: float
) -> list[PairScore]:
    """Every pair with ``max(jaccard, cosine) >= threshold``, sorted by (-similarity, i, j)."""
    threshold = _check_unit("similarity_threshold", threshold)
    if len(texts) != len(embeddings):
        raise UsageError("embeddings", len(embeddings), f"need one per text ({len(texts)})")
    tokens = [tokenize(t) for t in texts]
    pairs = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            pair = PairScore(i, j, jaccard(tokens[i], tokens[j]), cosine(embeddings[i], embeddings[j]))
            if pair.similarity >= threshold:
                pairs.append(pair)
    return sorted(pairs, key=_sort_key)


def find_related_pairs(
    embeddings: Sequence[np.ndarray | None],
    min_similarity: float,
    max_similarity: float,
    texts: Sequence[str] | None = None,
) -> list[PairScore]:
    """Every embedded pair with ``min <= cosine < max`` (cosine only, no keyword boost)."""
    low = _check_unit("min_similarity", min_similarity)
    high = _check_unit("max_similarity", max_similarity)
    if low > high:
        raise UsageError("min_similarity", min_similarity, f"must not exceed max_similarity ({high})")
    if texts is not None and len(texts) != len(embeddings):
        raise UsageError("texts", len(texts), f"need one per embedding ({len(embeddings)})")
    tokens = [tokenize(t) for t in texts] if texts is not None else None
    pairs = []
    for i in range(len(embeddings)):
        for j in range(i + 1, len(embeddings)):
            score = cosine(embeddings[i], embeddings[j])
            if score is None or not low <= score < high:
                continue
            text = jaccard(tokens[i], tokens[j]) if tokens is not None else 0.0
            pairs.append(PairScore(i, j, text, score))
    return sorted(pairs, key=_sort_key)
