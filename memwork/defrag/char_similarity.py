"""Character-level similarity of two entries' texts: the third comparison signal of a calibrated
duplicate policy (issue 19), computed only on candidate pairs and in the review queue.

Why: token Jaccard sees a one-letter typo as a different word, and MiniLM's cosine of two records that
differ only in typos is often no higher than that of two unrelated records written from the same
template. On FEBRL2 (typo-style duplicates) the two signals leave a third of the duplicates among
millions of unrelated pairs; the share of characters the two texts have in common (the normalised
Indel similarity of ``rapidfuzz``: ``1 - (insertions + deletions) / (len(a) + len(b))``, on
case-folded, whitespace-collapsed text) separates them.

Symmetric, in [0, 1], 1 for texts equal after folding. :func:`char_join` finds every pair of a
scope at or above a cutoff exactly (all pairs compared in C, row blocks; no prefix filter), spending
a :class:`memwork.similarity.PairBudget` like the other joins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memwork.similarity import PairBudget

#: the name of the signal in review files and policies
CHAR_FEATURE = "char_similarity"
#: what exactly is computed: a policy records it, and refuses to score with another definition
CHAR_VERSION = "indel-casefold-1"
#: rows of the all-pairs comparison per block (rows x n float32 scores in memory at once)
_BLOCK_ROWS = 512


def fold(text: str) -> str:
    """Case-folded, whitespace-collapsed: what the character similarity compares."""
    return " ".join(text.casefold().split())


def char_similarity(a: str, b: str) -> float:
    """The normalised Indel similarity of the folded texts (module docstring); two empty texts: 1."""
    from rapidfuzz.distance import Indel

    return float(Indel.normalized_similarity(fold(a), fold(b)))


def char_similarities(texts: Sequence[str], i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The character similarity of each pair ``(texts[i[k]], texts[j[k]])``."""
    from rapidfuzz.distance import Indel

    folded = [fold(t) for t in texts]
    score = Indel.normalized_similarity
    return np.array(
        [
            score(folded[a], folded[b])
            for a, b in zip(np.asarray(i).tolist(), np.asarray(j).tolist(), strict=True)
        ],
        dtype=np.float64,
    )


def char_join(
    texts: Sequence[str], cutoff: float, *, budget: PairBudget | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``i < j`` of ``texts`` with character similarity ``>= cutoff``: ``(i, j, score)``.

    ``budget`` (a :class:`memwork.similarity.PairBudget`) is spent block by block, so a cutoff that
    matches too many pairs is refused early."""
    from rapidfuzz import process
    from rapidfuzz.distance import Indel

    folded = [fold(t) for t in texts]
    n = len(folded)
    spend = budget if budget is not None else PairBudget()
    found_i: list[np.ndarray] = []
    found_j: list[np.ndarray] = []
    found_s: list[np.ndarray] = []
    # float32 scores are compared with a hair of slack, then re-scored exactly in float64
    slack = max(0.0, cutoff - 1e-6)
    for start in range(0, max(n - 1, 0), _BLOCK_ROWS):
        stop = min(n, start + _BLOCK_ROWS)
        block = process.cdist(
            folded[start:stop],
            folded[start:],
            scorer=Indel.normalized_similarity,
            score_cutoff=slack,
            dtype=np.float32,
        )
        rows, cols = np.nonzero(block >= slack)
        cols = cols + start
        rows = rows + start
        upper = cols > rows
        rows, cols = rows[upper], cols[upper]
        exact = char_similarities(folded, rows, cols) if len(rows) else np.zeros(0)
        keep = exact >= cutoff
        spend.spend(int(keep.sum()), "char_similarity", cutoff)
        found_i.append(rows[keep])
        found_j.append(cols[keep])
        found_s.append(exact[keep])
    if not found_i:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    return (
        np.concatenate(found_i).astype(np.int64),
        np.concatenate(found_j).astype(np.int64),
        np.concatenate(found_s),
    )
