"""A seeded uniform random sample of a store's same-scope pairs, each scored exactly.

Why: a report's histograms and its label-free estimate need the pairs *below* the duplicate band too,
and on a real store those are most of all pairs (5,000 FEBRL records embedded with all-MiniLM-L6-v2:
nearly every pair has a cosine above 0.5), far past ``MEMWORK_MAX_PAIRS``. Every pair is equally
likely to be drawn, so a sampled pair stands for ``population / size`` pairs of the store (its
``weight``); when the store has no more pairs than the sample size, every pair is scored and each
weighs 1. Pairs never cross scopes; stubs are not entries. Scores are those of
:func:`memwork.defrag.findings.find_duplicates` (same tokens, same vectors; a vector out of its
model's range gives no cosine, nor does a cosine that cannot see what tells two texts apart).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memwork import similarity
from memwork.coverage import out_of_range, pairs_readable
from memwork.defrag.findings import Pair, _comparable_embeddings, by_scope
from memwork.embed import coverage_for_model
from memwork.entry import Entry
from memwork.errors import PairBudgetExceeded, UsageError

#: pairs a report samples by default: enough for smooth histograms and a stable EM fit, a second or two
DEFAULT_SAMPLE_PAIRS = 50_000


@dataclass(frozen=True)
class PairSample:
    """The sampled pairs (scored), how many same-scope pairs the store has, and how they were drawn."""

    pairs: list[Pair]
    population: int
    seed: int

    @property
    def size(self) -> int:
        return len(self.pairs)

    @property
    def complete(self) -> bool:
        """Every pair of the store was scored (nothing was sampled)."""
        return self.size == self.population

    @property
    def weight(self) -> float:
        """How many store pairs each sampled pair stands for."""
        return self.population / self.size if self.size else 0.0

    def describe(self) -> str:
        """One sentence for a report: what the figures below the duplicate band stand on."""
        if self.complete:
            return f"every one of the store's {self.population:,} same-scope pairs was scored"
        return (
            f"a uniform random sample of {self.size:,} of the store's {self.population:,} same-scope pairs "
            f"(seed {self.seed}; each stands for {self.weight:,.1f} pairs)"
        )


def over_budget(exc: UsageError) -> bool:
    """``exc`` is the pair budget's refusal (``MEMWORK_MAX_PAIRS`` passed)."""
    return isinstance(exc, PairBudgetExceeded)


def with_sample_hint(exc: UsageError) -> UsageError:
    """The pair budget's refusal naming the way out a review or an estimate has: a pair sample."""
    return UsageError(
        exc.field,
        exc.value,
        f"{exc.problem}; or pass --sample-pairs {DEFAULT_SAMPLE_PAIRS} (pair_sample) to know the pairs "
        "below the threshold through a uniform random sample of that many pairs (stated in the output)",
    )


def triangle_pairs(n: int, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``k``-th pairs ``(i, j)``, ``i < j``, of ``n`` items in row order (0,1), (0,2), ..., (1,2), ..."""
    k = np.asarray(k, dtype=np.int64)
    total = n * (n - 1) // 2
    # row i starts at i*n - i*(i+1)/2; invert with a float root, then correct by one either way
    i = np.floor((2 * n - 1 - np.sqrt((2.0 * n - 1) ** 2 - 8.0 * k)) / 2).astype(np.int64)
    i = np.clip(i, 0, max(n - 2, 0))

    def start(r: np.ndarray) -> np.ndarray:
        return r * n - r * (r + 1) // 2

    i = np.where(start(i) > k, i - 1, i)
    i = np.where((i + 1 <= n - 2) & (start(i + 1) <= k), i + 1, i)
    j = k - start(i) + i + 1
    assert total == 0 or ((j > i).all() and (j < n).all())
    return i, j


def sample_scope_pairs(
    entries: Sequence[Entry], size: int = DEFAULT_SAMPLE_PAIRS, *, seed: int = 0, check_from: float = 0.0
) -> PairSample:
    """``size`` same-scope pairs drawn uniformly without replacement (all of them when there are no
    more), each scored exactly; see the module docstring. Deterministic for a given ``seed``.

    A cosine below ``check_from`` is kept without asking whether the model read what tells the two
    texts apart (a word diff and a tokenizer call per pair): below the floor a pair is never a
    candidate, so the answer would change nothing the report estimates."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError("sample_pairs", size, "must be a whole number >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError("seed", seed, "must be a whole number >= 0")
    groups = by_scope(entries)
    scopes = sorted(groups)
    counts = np.array([math.comb(len(groups[s]), 2) for s in scopes], dtype=np.int64)
    population = int(counts.sum())
    if population <= size:
        codes = np.arange(population, dtype=np.int64)
    else:
        codes = np.sort(np.random.default_rng(seed).choice(population, size=size, replace=False))
    offsets = np.concatenate(([0], np.cumsum(counts)))
    pairs: list[Pair] = []
    for k, scope in enumerate(scopes):
        mine = codes[(codes >= offsets[k]) & (codes < offsets[k + 1])] - offsets[k]
        if len(mine):
            i, j = triangle_pairs(len(groups[scope]), mine)
            pairs.extend(_scored(scope, groups[scope], i, j, check_from))
    return PairSample(pairs, population, seed)


def _scored(scope: str, group: list[Entry], i: np.ndarray, j: np.ndarray, check_from: float) -> list[Pair]:
    """The pairs ``(group[i], group[j])`` scored on the entries they touch only (a sample of a 100,000
    entry scope touches a fraction of its vectors)."""
    used, inverse = np.unique(np.concatenate((i, j)), return_inverse=True)
    members = [group[int(u)] for u in used]
    vectors = _comparable_embeddings(group)
    text, sem = similarity.score_pairs(
        [e.content for e in members], [vectors[int(u)] for u in used], inverse[: len(i)], inverse[len(i) :]
    )
    # as find_duplicates: a cosine above the text score must have read what tells the two apart
    ask = [
        k
        for k, (t, s) in enumerate(zip(text.tolist(), sem.tolist(), strict=True))
        if s > t and s >= check_from
    ]
    readable = pairs_readable([(group[int(i[k])], group[int(j[k])]) for k in ask], coverage_for_model)
    unreadable = {k for k, ok in zip(ask, readable, strict=True) if not ok}
    out: list[Pair] = []
    for k, (a_idx, b_idx, t, s) in enumerate(
        zip(i.tolist(), j.tolist(), text.tolist(), sem.tolist(), strict=True)
    ):
        a, b = group[a_idx], group[b_idx]
        semantic: float | None = None if math.isnan(s) else s
        unread = out_of_range(a) or out_of_range(b)
        if semantic is not None and k in unreadable:
            semantic, unread = None, True
        out.append(Pair(scope, a.path, b.path, max(t, semantic or 0.0), t, semantic, out_of_range=unread))
    return out
