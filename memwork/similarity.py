"""Text and embedding similarity, and exact all-pairs search for the defrag engine.

A pair scores ``max(Jaccard(words), cosine(embeddings))``: the words catch a copy or a light edit, the
vectors a paraphrase. This module keeps that
definition exactly and only changes how the pairs are found (see :func:`find_duplicate_pairs`).

Every search spends a :class:`PairBudget`: pairs are verified block by block as they are found, and
a search whose result would pass the budget (``--similarity-threshold 0`` on a few thousand
entries is millions of pairs, gigabytes once they are objects) stops with a one-line usage error
naming the threshold and the count so far, instead of a ``MemoryError`` minutes later.

An incremental search (``changed=``, for ``--since``) returns exactly the pairs of the full search
that hold at least one changed position, at O(changed x N) cost: the changed rows probe an inverted
index of every row's prefix tokens, and the cosine tiles have the changed rows as rows and every row
as columns. A :class:`PairSpace` indexes one scope once for several such searches.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memwork.checks import unit
from memwork.errors import ConfigError, PairBudgetExceeded, UsageError
from memwork.progress import Progress

if TYPE_CHECKING:  # scipy and threadpoolctl load on the first join, not with the module (a report's
    # kernel imports this module for its tokenizer and scores, never joining: issue 20)
    import scipy.sparse as sp
    from threadpoolctl import ThreadpoolController

_WORD_RE = re.compile(r"\w+", re.UNICODE)
#: Scripts written without spaces: kana, CJK ideographs (+ ext. A, compatibility, ext. B+), hangul.
NO_SPACE_CHARS = (
    "\u3005\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\U00020000-\U0003134f"
)
_RUN_RE = re.compile(f"[{NO_SPACE_CHARS}]+|[^{NO_SPACE_CHARS}]+")
_NO_SPACE_RE = re.compile(f"[{NO_SPACE_CHARS}]")


def _symbols(text: str) -> set[str]:
    """Each non-ASCII symbol (emoji, currency, arrows: Unicode category S*) as a token of its own.

    ``\\w+`` drops them, so "I love 🍕" and "I love 🍣" would be one word set (Jaccard 1.0) and a
    duplicate; a symbol is a word of its own for the person who wrote it. Skin-tone modifiers count as
    symbols too; joiners and variation selectors (not S*) are ignored."""
    return {char for char in text if not char.isascii() and unicodedata.category(char)[0] == "S"}


def tokenize(text: str) -> frozenset[str]:
    """Lower-cased ``\\w+`` word set; runs of CJK/kana/hangul become character bigrams; each non-ASCII
    symbol (an emoji) is a token of its own.

    Without the bigrams a whole Chinese sentence would be one "word" and Jaccard would be 0 or 1.
    ASCII text takes the plain word path (punctuation and ASCII symbols are not words).
    """
    words = _WORD_RE.findall(text.lower())
    if text.isascii():  # fast path: plain words only
        return frozenset(words)
    if not _NO_SPACE_RE.search(text):
        return frozenset(words).union(_symbols(text))
    tokens: set[str] = _symbols(text)
    for word in words:
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
    """Jaccard coefficient of two texts (or token sets); 0.0 when both are empty."""
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
        """The hybrid score: the higher of the scores that exist."""
        if self.semantic_similarity is None:
            return self.text_similarity
        return max(self.text_similarity, self.semantic_similarity)


# --- pair budget -----------------------------------------------------------------------------------
#: pairs one search may return: ~1 GB end to end for a CLI run (the findings measured 1.1 GB for
#: 500,000 pairs), and far more than any reviewer reads; ``MEMWORK_MAX_PAIRS`` changes it
DEFAULT_MAX_PAIRS = 1_000_000
MAX_PAIRS_ENV = "MEMWORK_MAX_PAIRS"


def default_max_pairs() -> int:
    """``$MEMWORK_MAX_PAIRS`` when set (a positive whole number), else :data:`DEFAULT_MAX_PAIRS`."""
    raw = os.environ.get(MAX_PAIRS_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_PAIRS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(MAX_PAIRS_ENV, raw, "must be a positive whole number")
    return int(raw)


class PairBudget:
    """How many pairs a search may still return; one budget can span several searches (scopes)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = default_max_pairs() if limit is None else int(limit)
        self.found = 0

    def spend(self, pairs: int, field: str, value: object) -> None:
        """Count ``pairs`` more; past the limit, a usage error naming the parameter and the count."""
        self.found += int(pairs)
        if self.found > self.limit:
            raise PairBudgetExceeded(
                field,
                value,
                f"matches more than {self.limit:,} pairs ({self.found:,} found so far); "
                f"use a stricter value, or set {MAX_PAIRS_ENV} to allow more",
            )


# --- exact all-pairs search: cheap candidates, then the exact scores above -----------------------

Tick = Callable[[float], None]


class _Ticker:
    """Turns "this fraction of the search is done" into ``progress.advance(n)`` calls summing to
    ``units``, within the stage the caller started (a search is part of a stage, never its own)."""

    def __init__(self, progress: Progress | None, units: int) -> None:
        self.progress, self.units, self.done = progress, units, 0

    def to(self, fraction: float) -> None:
        if self.progress is None:
            return
        target = min(self.units, max(0, int(self.units * fraction)))
        if target > self.done:
            self.progress.advance(target - self.done)
            self.done = target

    def phase(self, low: float, high: float) -> Tick:
        """A ``tick(f)`` mapping a phase's own 0..1 onto ``low..high`` of the whole search."""
        return lambda f: self.to(low + (high - low) * f)

    def finish(self) -> None:
        self.to(1.0)


def _no_tick(fraction: float) -> None:
    """Progress sink when nobody listens."""


# Float slack for the filters only; every kept pair is re-checked with the exact float64 score.
_SIZE_SLACK = 1e-9  # relative, for prefix/size filters (ratios of small integers)
_COSINE_SLACK = 1e-4  # absolute, float32 tile dot products vs the float64 cosine (at least; see below)
_PANEL_ROWS = 1024  # rows per cosine tile: wide enough for BLAS to run near its peak
_TILE_COLS = 8192  # columns per cosine tile: 1024 x 8192 float32 = 32 MB, whatever N is
_SPARSE_BUDGET = 8_000_000  # candidate entries per sparse block of the Jaccard join
_VERIFY_CHUNK = 32_768  # pairs re-scored per chunk of the Jaccard join
_COSINE_VERIFY_CHUNK = 1024  # pairs re-scored per chunk of the cosine join (2 x 1024 float64 rows)
_BUILD_CHUNK = 8192  # rows converted at a time when building the float32 unit rows
_NORMS_CHUNK = 512  # rows per float64 chunk when only the norms are built (verifying given pairs)
_MIN_BLOCK_ROWS = 128  # rows per cosine tile, at least (smaller tiles waste BLAS efficiency)
_THREADED_ROWS = 8192  # below this many embedded rows the cosine join runs on one BLAS thread
_UNIT_ROUNDOFF32 = 2.0**-24


def _cosine_slack(dim: int) -> float:
    """How far a float32 tile score of unit rows may lie from the exact float64 cosine.

    Rounding the unit rows to float32 moves each component by at most one unit roundoff u, so the
    dot product by at most ~2u (Cauchy-Schwarz on unit rows); a float32 dot product of length d, in
    any summation order, errs by at most d*u/(1 - d*u) <= 1.01*d*u. Twice (d + 2)*u covers both with
    room for the float64 side; never below :data:`_COSINE_SLACK` (the band only adds candidates that
    the exact re-score then drops, it never changes the result)."""
    return max(_COSINE_SLACK, 2.0 * (dim + 2) * _UNIT_ROUNDOFF32)


def _blas_threads(rows: int) -> int:
    """BLAS threads for the cosine join: ``MEMWORK_THREADS``, else 1 for small joins (thread hand-offs
    cost more than they save, badly so on a busy machine), else the usable CPU count."""
    raw = os.environ.get("MEMWORK_THREADS", "")
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    if rows < _THREADED_ROWS:
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@functools.cache
def _threadpools() -> ThreadpoolController:
    """Inspecting loaded BLAS libraries is slow; do it once per process."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@dataclass
class _Tokens:
    """Binary document x token matrix; columns are token ranks, rarest first (the prefix order)."""

    matrix: sp.csr_matrix
    sizes: np.ndarray

    @classmethod
    def build(cls, texts: Sequence[str]) -> _Tokens:
        import scipy.sparse as sp

        sets = [tokenize(text) for text in texts]
        sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        vocab: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        token_ids = np.fromiter(map(vocab.__getitem__, itertools.chain.from_iterable(sets)), dtype=np.int64)
        freq = np.bincount(token_ids, minlength=len(vocab))
        rank = np.empty(len(vocab), dtype=np.int64)
        rank[np.lexsort((np.arange(len(vocab)), freq))] = np.arange(len(vocab))
        indptr = np.concatenate(([0], np.cumsum(sizes)))
        data = np.ones(len(token_ids), dtype=np.int32)
        matrix = sp.csr_matrix((data, rank[token_ids], indptr), shape=(len(texts), max(1, len(vocab))))
        matrix.sort_indices()
        return cls(matrix, sizes)

    def prefixes(self, fraction: float) -> sp.csr_matrix:
        """Each row's first ``|x| - ceil(f|x|) + 1`` rarest tokens (AllPairs prefix, slack-widened)."""
        import scipy.sparse as sp

        sizes = self.sizes
        need = np.ceil(fraction * sizes - _SIZE_SLACK * sizes).astype(np.int64)
        plen = np.clip(sizes - need + 1, 0, sizes)
        start = self.matrix.indptr[:-1]
        position = np.arange(self.matrix.nnz) - np.repeat(start, sizes)
        keep = position < np.repeat(plen, sizes)
        indptr = np.concatenate(([0], np.cumsum(plen)))
        cols = self.matrix.indices[keep]
        data = np.ones(len(cols), dtype=np.int32)
        return sp.csr_matrix((data, cols, indptr), shape=self.matrix.shape)

    def jaccard(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Exact Jaccard of pairs ``(i[k], j[k])``: same integer ratio as :func:`jaccard`."""
        out = np.empty(len(i), dtype=np.float64)
        for lo in range(0, len(i), _VERIFY_CHUNK):
            hi = min(lo + _VERIFY_CHUNK, len(i))
            a, b = i[lo:hi], j[lo:hi]
            inter = np.asarray(self.matrix[a].multiply(self.matrix[b]).sum(axis=1)).ravel()
            union = (self.sizes[a] + self.sizes[b] - inter).astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[lo:hi] = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
        return out


def _jaccard_candidates(tokens: _Tokens, threshold: float, tick: Tick = _no_tick) -> Iterator[np.ndarray]:
    """Blocks of pair codes ``i*n+j`` (i<j) that may reach Jaccard ``threshold`` (AllPairs prefix filter).

    Sets are visited in (size, index) order; a set ``x`` probes with its prefix for overlap
    ``t|x|`` the shorter index prefixes (overlap ``2t/(1+t)|y|``) of the sets ``y`` before it: if
    J >= t the rarest shared token lies in both. A size filter drops the rest it can.
    """
    n = len(tokens.sizes)
    order = np.empty(n, dtype=np.int64)
    order[np.lexsort((np.arange(n), tokens.sizes))] = np.arange(n)
    probe = tokens.prefixes(threshold)
    inverted = tokens.prefixes(2 * threshold / (1 + threshold)).T.tocsr()
    posting = np.diff(inverted.indptr).astype(np.int64)
    row_cost = np.asarray(probe @ posting).ravel()
    for a, b in _budget_blocks(row_cost, _SPARSE_BUDGET):
        tick(a / max(n, 1))
        block = (probe[a:b] @ inverted).tocoo()
        x = block.row.astype(np.int64) + a
        y = block.col.astype(np.int64)
        before = order[y] < order[x]
        x, y = x[before], y[before]
        size_x, size_y = tokens.sizes[x], tokens.sizes[y]
        fits = size_y >= threshold * size_x - _SIZE_SLACK * size_x
        x, y = x[fits], y[fits]
        yield np.minimum(x, y) * n + np.maximum(x, y)
    tick(1.0)


def _budget_blocks(cost: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split rows into consecutive blocks whose summed cost stays near ``budget``."""
    blocks: list[tuple[int, int]] = []
    total = np.cumsum(cost)
    a = 0
    while a < len(cost):
        base = total[a - 1] if a else 0
        b = int(np.searchsorted(total, base + budget, side="right"))
        b = max(b, a + 1)
        blocks.append((a, min(b, len(cost))))
        a = b
    return blocks


def _jaccard_candidates_from(
    tokens: _Tokens, rows: np.ndarray, threshold: float, tick: Tick = _no_tick
) -> Iterator[np.ndarray]:
    """Pair codes ``i*n+j`` (i<j) holding a position of ``rows`` that may reach Jaccard ``threshold``.

    Symmetric prefix filter: if J(x, y) >= t, then |x & y| >= t*max(|x|, |y|), so the prefixes of
    ``|x| - ceil(t|x|) + 1`` rarest tokens of x and of y share a token. Only the ``rows`` probe (their
    prefixes against an inverted index of every row's prefix); a pair of two rows is found from both
    sides and kept once (from its lower position)."""
    n = len(tokens.sizes)
    prefixes = tokens.prefixes(threshold)
    inverted = prefixes.T.tocsr()
    probe = prefixes[rows]
    is_row = np.zeros(n, dtype=bool)
    is_row[rows] = True
    posting = np.diff(inverted.indptr).astype(np.int64)
    row_cost = np.asarray(probe @ posting).ravel()
    for a, b in _budget_blocks(row_cost, _SPARSE_BUDGET):
        tick(a / max(len(rows), 1))
        block = (probe[a:b] @ inverted).tocoo()
        x = rows[block.row.astype(np.int64) + a]
        y = block.col.astype(np.int64)
        once = (x != y) & (~is_row[y] | (x < y))
        x, y = x[once], y[once]
        size_x, size_y = tokens.sizes[x], tokens.sizes[y]
        fits = (size_y >= threshold * size_x - _SIZE_SLACK * size_x) & (
            size_x >= threshold * size_y - _SIZE_SLACK * size_y
        )
        x, y = x[fits], y[fits]
        yield np.minimum(x, y) * n + np.maximum(x, y)
    tick(1.0)


def _jaccard_candidates_cross(
    tokens: _Tokens, left: int, threshold: float, tick: Tick = _no_tick
) -> Iterator[np.ndarray]:
    """Pair codes ``i*n+j`` with ``i < left <= j`` that may reach Jaccard ``threshold``: the rows
    before ``left`` probe with their prefixes an inverted index of the prefixes of the rows from
    ``left`` on (the symmetric filter of :func:`_jaccard_candidates_from`), so each pair once."""
    n = len(tokens.sizes)
    prefixes = tokens.prefixes(threshold)
    probe = prefixes[:left]
    inverted = prefixes[left:].T.tocsr()
    posting = np.diff(inverted.indptr).astype(np.int64)
    row_cost = np.asarray(probe @ posting).ravel()
    for a, b in _budget_blocks(row_cost, _SPARSE_BUDGET):
        tick(a / max(left, 1))
        block = (probe[a:b] @ inverted).tocoo()
        x = block.row.astype(np.int64) + a
        y = block.col.astype(np.int64) + left
        size_x, size_y = tokens.sizes[x], tokens.sizes[y]
        fits = (size_y >= threshold * size_x - _SIZE_SLACK * size_x) & (
            size_x >= threshold * size_y - _SIZE_SLACK * size_y
        )
        yield x[fits] * n + y[fits]
    tick(1.0)


@dataclass
class _Vectors:
    """The embedded subset as float32 unit rows for the tiles; exact scores re-read the caller's
    vectors for the candidate pairs only (no float64 copy of every vector is kept)."""

    unit32: np.ndarray  # (m, d) float32 unit rows, zero rows stay zero
    norms: np.ndarray  # float64 norm of each row, as :func:`cosine` computes it
    source: Sequence[np.ndarray | Sequence[float] | None]  # the caller's vectors, by input position
    index: np.ndarray  # input position of each row
    slot: np.ndarray  # row of each input position, -1 when not embedded

    @classmethod
    def build(
        cls, embeddings: Sequence[np.ndarray | Sequence[float] | None], *, units: bool = True
    ) -> _Vectors:
        """``units=False``: only what :meth:`cosine` reads (norms and slots) -- verifying given pairs
        needs no ``(m, d)`` float32 copy, and its float64 temporaries come in small chunks."""
        index = np.array([k for k, e in enumerate(embeddings) if e is not None], dtype=np.int64)
        m = len(index)
        step = _BUILD_CHUNK if units else _NORMS_CHUNK
        unit32 = np.zeros((0, 1), dtype=np.float32)
        norms = np.zeros(m)
        dim = 0
        for a in range(0, m, step):  # bounds the float64 temporaries
            rows = _stack64(embeddings, index[a : a + step])
            if a == 0:
                dim = rows.shape[1]
                unit32 = np.empty((m, dim), dtype=np.float32) if units else unit32
            elif rows.shape[1] != dim:
                raise UsageError("embeddings", len(embeddings), "vectors must share one dimension")
            chunk_norms = norms[a : a + len(rows)] = _row_norms(rows)  # row by row: chunking changes no bit
            if units:
                safe = np.where(chunk_norms > 0, chunk_norms, 1.0)[:, None]
                unit32[a : a + len(rows)] = np.where(chunk_norms[:, None] > 0, rows / safe, 0.0)
        slot = np.full(len(embeddings), -1, dtype=np.int64)
        slot[index] = np.arange(m)
        return cls(unit32, norms, embeddings, index, slot)

    def cosine(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Exact cosine of input pairs (NaN where one is not embedded), bitwise as :func:`cosine`:
        float64 rows gathered from the caller's vectors, one chunk of pairs at a time."""
        out = np.full(len(i), np.nan)
        a_all, b_all = self.slot[i], self.slot[j]
        both = np.flatnonzero((a_all >= 0) & (b_all >= 0))
        for lo in range(0, len(both), _COSINE_VERIFY_CHUNK):
            sel = both[lo : lo + _COSINE_VERIFY_CHUNK]
            left = _stack64(self.source, i[sel])
            right = _stack64(self.source, j[sel])
            out[sel] = _cosine_rows(left, right, self.norms[a_all[sel]], self.norms[b_all[sel]])
        return out

    def candidate_blocks(self, low: float, high: float | None, tick: Tick = _no_tick) -> Iterator[np.ndarray]:
        """Pair codes (input positions) whose float32 cosine lies in ``[low-ε, high+ε)``, one panel
        of rows at a time (each pair in exactly one panel).

        The upper triangle is computed in tiles of at most ``_PANEL_ROWS x _TILE_COLS`` into one
        preallocated buffer, so memory stays bounded whatever N is. ``tick(f)`` reports the share of
        the upper-triangle work done after each panel."""
        m, n = len(self.index), len(self.slot)
        if m < 2:
            tick(1.0)
            return
        unit32 = self.unit32
        slack = _cosine_slack(unit32.shape[1])
        floor = np.float32(low - slack)
        ceiling = None if high is None else np.float32(high + slack)
        # thinner panels for small joins keep the triangle's work near m^2/2 (the diagonal tiles)
        rows = max(1, min(m, _PANEL_ROWS, max(_MIN_BLOCK_ROWS, -(-m // 16))))
        cols = max(rows, min(m, _TILE_COLS))
        buffer = np.empty(rows * cols, dtype=np.float32)
        mask = np.empty(rows * cols, dtype=np.bool_)
        with _threadpools().limit(limits=_blas_threads(m), user_api="blas"):
            for a in range(0, m, rows):
                b = min(a + rows, m)
                found = [
                    _tile_hits(unit32, a, b, c, min(c + cols, m), floor, ceiling, buffer, mask)
                    for c in range(a, m, cols)
                ]
                r = np.concatenate([f[0] for f in found])
                c = np.concatenate([f[1] for f in found])
                tick(1.0 - ((m - b) / m) ** 2)  # rows a..b done: their share of the triangle
                yield self.index[r] * n + self.index[c]

    def candidate_blocks_from(
        self, rows: np.ndarray, low: float, high: float | None, tick: Tick = _no_tick
    ) -> Iterator[np.ndarray]:
        """Pair codes holding an input position of ``rows`` whose float32 cosine lies in
        ``[low-ε, high+ε)``: tiles of ``rows`` (the panel) x every embedded row, so the work is
        O(len(rows) x m); a pair of two ``rows`` is kept once (from its lower position)."""
        m, n = len(self.index), len(self.slot)
        slots = self.slot[rows]
        slots = slots[slots >= 0]
        if m < 2 or len(slots) == 0:
            tick(1.0)
            return
        is_row = np.zeros(m, dtype=bool)
        is_row[slots] = True
        slack = _cosine_slack(self.unit32.shape[1])
        floor = np.float32(low - slack)
        ceiling = None if high is None else np.float32(high + slack)
        height = min(len(slots), _PANEL_ROWS)
        width = min(m, _TILE_COLS)
        buffer = np.empty(height * width, dtype=np.float32)
        mask = np.empty(height * width, dtype=np.bool_)
        with _threadpools().limit(limits=_blas_threads(len(slots) * m // max(height, 1)), user_api="blas"):
            for a in range(0, len(slots), height):
                panel = self.unit32[slots[a : a + height]]
                found = [
                    _panel_hits(panel, self.unit32, c, min(c + width, m), floor, ceiling, buffer, mask)
                    for c in range(0, m, width)
                ]
                r = slots[a + np.concatenate([f[0] for f in found])]
                c = np.concatenate([f[1] for f in found])
                once = (r != c) & (~is_row[c] | (r < c))
                r, c = r[once], c[once]
                tick(min(1.0, (a + height) / len(slots)))
                yield self.index[np.minimum(r, c)] * n + self.index[np.maximum(r, c)]

    def candidate_blocks_cross(
        self, left: int, low: float, high: float | None, tick: Tick = _no_tick
    ) -> Iterator[np.ndarray]:
        """Pair codes ``i*n+j`` with input positions ``i < left <= j`` whose float32 cosine lies in
        ``[low-ε, high+ε)``: panels of the rows before ``left`` x the embedded rows from ``left`` on
        (rows are kept in input order, so the two sides are two runs of ``unit32``)."""
        m, n = len(self.index), len(self.slot)
        split = int(np.searchsorted(self.index, left))
        if split == 0 or split == m:
            tick(1.0)
            return
        slack = _cosine_slack(self.unit32.shape[1])
        floor = np.float32(low - slack)
        ceiling = None if high is None else np.float32(high + slack)
        height = min(split, _PANEL_ROWS)
        width = min(m - split, _TILE_COLS)
        buffer = np.empty(height * width, dtype=np.float32)
        mask = np.empty(height * width, dtype=np.bool_)
        with _threadpools().limit(limits=_blas_threads(max(split, m - split)), user_api="blas"):
            for a in range(0, split, height):
                panel = self.unit32[a : min(a + height, split)]
                found = [
                    _panel_hits(panel, self.unit32, c, min(c + width, m), floor, ceiling, buffer, mask)
                    for c in range(split, m, width)
                ]
                r = a + np.concatenate([f[0] for f in found])
                c = np.concatenate([f[1] for f in found])
                tick(min(1.0, (a + height) / split))
                yield self.index[r] * n + self.index[c]


def _panel_hits(
    panel: np.ndarray,
    unit32: np.ndarray,
    c0: int,
    c1: int,
    floor: np.floating,
    ceiling: np.floating | None,
    buffer: np.ndarray,
    mask: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Panel rows and columns of ``panel x unit32[c0:c1]`` scoring in ``[floor, ceiling)``."""
    h, w = len(panel), c1 - c0
    tile = np.matmul(panel, unit32[c0:c1].T, out=buffer[: h * w].reshape(h, w))
    flat = np.flatnonzero(np.greater_equal(tile.reshape(-1), floor, out=mask[: h * w]))
    if ceiling is not None:
        flat = flat[tile.reshape(-1)[flat] < ceiling]
    r, c = np.divmod(flat, w)
    return r, c + c0


def _tile_hits(
    unit32: np.ndarray,
    a: int,
    b: int,
    c0: int,
    c1: int,
    floor: np.floating,
    ceiling: np.floating | None,
    buffer: np.ndarray,
    mask: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns (``r < c``) of one tile ``[a, b) x [c0, c1)`` scoring in ``[floor, ceiling)``."""
    h, w = b - a, c1 - c0
    tile = np.matmul(unit32[a:b], unit32[c0:c1].T, out=buffer[: h * w].reshape(h, w))
    flat = np.flatnonzero(np.greater_equal(tile.reshape(-1), floor, out=mask[: h * w]))
    if ceiling is not None:  # few survivors: cheaper than a second pass over the tile
        flat = flat[tile.reshape(-1)[flat] < ceiling]
    r, c = np.divmod(flat, w)
    r += a
    c += c0
    if c0 < b:  # the tile crosses the diagonal: keep the upper triangle only
        upper = c > r
        r, c = r[upper], c[upper]
    return r, c


def _stack64(source: Sequence[np.ndarray | Sequence[float] | None], positions: np.ndarray) -> np.ndarray:
    """The float64 rows of ``source`` at ``positions``; one dimension and finite, else a usage error."""
    if len(positions) == 0:
        return np.zeros((0, 1))
    try:
        picked = [source[k] for k in positions.tolist()]
        rows = np.stack(picked, dtype=np.float64).reshape(len(picked), -1)
    except (ValueError, TypeError):
        raise UsageError("embeddings", len(source), "vectors must share one dimension") from None
    if not np.isfinite(rows).all():
        raise UsageError("embeddings", "non-finite", "vectors must hold finite numbers")
    return rows


def _unique(codes: np.ndarray) -> np.ndarray:
    """Sorted distinct pair codes (sort + neighbour compare; cheaper than set ops here)."""
    codes = np.sort(codes)
    if len(codes) < 2:
        return codes
    return codes[np.concatenate(([True], codes[1:] != codes[:-1]))]


def _member(codes: np.ndarray, sorted_pool: np.ndarray) -> np.ndarray:
    """Which ``codes`` occur in ``sorted_pool`` (binary search)."""
    if len(sorted_pool) == 0:
        return np.zeros(len(codes), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_pool, codes), len(sorted_pool) - 1)
    return sorted_pool[at] == codes


def _all_pairs(n: int) -> np.ndarray:
    i, j = np.triu_indices(n, 1)
    return i.astype(np.int64) * n + j


def _to_pairs(i: np.ndarray, j: np.ndarray, text: np.ndarray, sem: np.ndarray) -> list[PairScore]:
    """PairScore list sorted by (-similarity, i, j); NaN semantic means not embedded."""
    sim = np.where(np.isnan(sem), text, np.fmax(text, sem))
    order = np.lexsort((j, i, -sim))
    has_sem = ~np.isnan(sem)
    return [
        PairScore(int(i[k]), int(j[k]), float(text[k]), float(sem[k]) if has_sem[k] else None)
        for k in order.tolist()
    ]


def _check_lengths(field: str, got: int, want: int) -> None:
    if got != want:
        raise UsageError(field, got, f"need one per entry ({want})")


class PairSpace:
    """One scope's texts and vectors, tokenised and converted once (on first use), for several
    searches over them: the rounds of an incremental search (``--since``) that follow clusters."""

    def __init__(self, texts: Sequence[str], embeddings: Sequence[np.ndarray | Sequence[float] | None]):
        self.texts, self.embeddings = texts, embeddings

    @functools.cached_property
    def tokens(self) -> _Tokens:
        return _Tokens.build(self.texts)

    @functools.cached_property
    def vectors(self) -> _Vectors:
        return _Vectors.build(self.embeddings)


def _positions(changed: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct input positions; one outside ``0..n-1`` is a usage error."""
    rows = np.unique(np.asarray(changed, dtype=np.int64).reshape(-1))
    if len(rows) and (rows[0] < 0 or rows[-1] >= n):
        raise UsageError("changed", int(rows[0] if rows[0] < 0 else rows[-1]), f"must be 0..{n - 1}")
    return rows


def _pairs_touching(n: int, rows: np.ndarray | None) -> int:
    """How many pairs of ``n`` positions hold at least one of ``rows`` (all pairs without rows)."""
    if rows is None:
        return n * (n - 1) // 2
    k = len(rows)
    return k * (n - k) + k * (k - 1) // 2


def _cross_pairs(left: int, n: int) -> np.ndarray:
    """Every pair code ``i*n+j`` with ``i < left <= j`` (threshold 0 with ``cross``), sorted."""
    i, j = np.meshgrid(np.arange(left, dtype=np.int64), np.arange(left, n, dtype=np.int64), indexing="ij")
    return (i * n + j).reshape(-1)


def _cross_at(cross: int | None, n: int) -> int | None:
    """``cross`` checked against ``n`` positions (None: no cross join)."""
    if cross is not None and not 0 <= cross <= n:
        raise UsageError("cross", cross, f"must be 0..{n}")
    return cross


def _pairs_from(rows: np.ndarray, n: int) -> np.ndarray:
    """Every pair code holding a position of ``rows`` (threshold 0 with ``changed``), sorted."""
    others = np.arange(n, dtype=np.int64)
    codes = [np.minimum(x, others) * n + np.maximum(x, others) for x in rows.tolist()]
    flat = np.concatenate(codes) if codes else np.empty(0, dtype=np.int64)
    i, j = np.divmod(flat, max(n, 1))
    return _unique(flat[i != j])


def find_duplicate_pairs(
    texts: Sequence[str],
    embeddings: Sequence[np.ndarray | None],
    threshold: float,
    *,
    progress: Progress | None = None,
    budget: PairBudget | None = None,
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    changed: Sequence[int] | np.ndarray | None = None,
    space: PairSpace | None = None,
    cross: int | None = None,
) -> list[PairScore]:
    """Exactly every pair with ``max(jaccard, cosine) >= threshold``, sorted by (-similarity, i, j).

    With ``cross`` (a position), only the pairs ``i < cross <= j`` -- the rows before it against the
    rows from it on, one off-diagonal tile of a scope's pair matrix -- exactly those pairs of the
    full search, with the same scores, at O(cross x (N - cross)) cost. Not with ``changed``.

    With ``changed`` (input positions), only the pairs holding at least one of them -- exactly those
    pairs of the full search, with the same scores -- found at O(len(changed) x N) cost (module
    docstring). ``space`` is the :class:`PairSpace` of these texts and vectors, when the caller
    searches them more than once.

    ``keep(text, semantic)`` (semantic NaN where a vector is missing) narrows the result further,
    block by block before the budget is spent: a calibrated policy's score, whose pairs lie far
    inside the candidates of the threshold its score implies (millions of candidates on 5,000 FEBRL
    records, a few thousand kept).

    Equal to comparing every pair in a double loop, found as candidates then re-scored exactly: a
    prefix-filter set-similarity join (AllPairs) for Jaccard and blocked float32 matrix products for
    cosine. Each block of candidates is verified as it is found and the pairs kept spend ``budget``
    (default: a fresh :class:`PairBudget`), so a threshold that matches too many pairs (0 matches
    every pair) is refused early, naming the count so far.

    ``progress.advance(n)`` is called after blocks of rows of each join, within the stage the caller
    started; the calls sum to ``len(texts)``.
    """
    threshold = unit("similarity_threshold", threshold)
    n = len(texts)
    _check_lengths("embeddings", len(embeddings), n)
    budget = budget if budget is not None else PairBudget()
    ticker = _Ticker(progress, n)
    space = space if space is not None else PairSpace(texts, embeddings)
    tokens, vectors = space.tokens, space.vectors
    rows = None if changed is None else _positions(changed, n)
    cross = _cross_at(cross, n)
    if cross is not None and rows is not None:
        raise UsageError("cross", cross, "cannot be combined with changed rows")
    if threshold == 0.0:
        # before building any of them
        if cross is not None:
            budget.spend(cross * (n - cross), "similarity_threshold", threshold)
            codes = _cross_pairs(cross, n)
        else:
            budget.spend(_pairs_touching(n, rows), "similarity_threshold", threshold)
            codes = _all_pairs(n) if rows is None else _pairs_from(rows, n)
    else:
        split = 0.45 if len(vectors.index) >= 2 else 0.9  # the joins' rough shares of the time

        def text_passes(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            text = tokens.jaccard(i, j)
            passed = text >= threshold
            if keep is None:
                return passed
            return passed & keep(text, vectors.cosine(i, j))

        def cosine_passes(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            sem = vectors.cosine(i, j)
            passed = sem >= threshold
            if keep is None:
                return passed
            return passed & keep(tokens.jaccard(i, j), sem)

        text_tick, cosine_tick = ticker.phase(0.0, split), ticker.phase(split, 0.9)
        if cross is not None:
            text_blocks = _jaccard_candidates_cross(tokens, cross, threshold, text_tick)
        elif rows is None:
            text_blocks = _jaccard_candidates(tokens, threshold, text_tick)
        else:
            text_blocks = _jaccard_candidates_from(tokens, rows, threshold, text_tick)
        text_codes = _kept(
            text_blocks,
            text_passes,
            n,
            lambda kept: budget.spend(len(kept), "similarity_threshold", threshold),
        )
        text_codes = _unique(text_codes)
        if cross is not None:
            cosine_blocks = vectors.candidate_blocks_cross(cross, threshold, None, cosine_tick)
        elif rows is None:
            cosine_blocks = vectors.candidate_blocks(threshold, None, cosine_tick)
        else:
            cosine_blocks = vectors.candidate_blocks_from(rows, threshold, None, cosine_tick)
        cosine_codes = _kept(
            cosine_blocks,
            cosine_passes,
            n,
            lambda kept: budget.spend(
                int((~_member(kept, text_codes)).sum()), "similarity_threshold", threshold
            ),
        )
        codes = _unique(np.concatenate((text_codes, cosine_codes)))
    i, j = np.divmod(codes, max(n, 1))
    pairs = _verified(tokens, vectors, i, j, threshold, keep)
    ticker.finish()
    return pairs


def _verified(
    tokens: _Tokens,
    vectors: _Vectors,
    i: np.ndarray,
    j: np.ndarray,
    threshold: float,
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None,
) -> list[PairScore]:
    """The pairs ``(i[k], j[k])`` with ``max(jaccard, cosine) >= threshold`` (and ``keep``), scored
    exactly: the last step of every duplicate search, whatever found its candidates."""
    text = tokens.jaccard(i, j)
    sem = vectors.cosine(i, j)
    kept = (text >= threshold) | (sem >= threshold)
    if keep is not None:
        kept &= keep(text, sem)
    return _to_pairs(i[kept], j[kept], text[kept], sem[kept])


def verify_duplicate_pairs(
    texts: Sequence[str],
    embeddings: Sequence[np.ndarray | None],
    i: Sequence[int] | np.ndarray,
    j: Sequence[int] | np.ndarray,
    threshold: float,
) -> list[PairScore]:
    """Of the candidate pairs ``(i[k], j[k])`` (input positions, ``i < j``), exactly those
    :func:`find_duplicate_pairs` returns, with its scores: for candidates found elsewhere (an
    approximate nearest-neighbour index), verified by the very same step."""
    threshold = unit("similarity_threshold", threshold)
    _check_lengths("embeddings", len(embeddings), len(texts))
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    vectors = _Vectors.build(embeddings, units=False)  # the pairs' cosines only: no tiles
    return _verified(_Tokens.build(texts), vectors, i, j, threshold, None)


def _kept(
    blocks: Iterator[np.ndarray],
    passes: Callable[[np.ndarray, np.ndarray], np.ndarray],
    n: int,
    spend: Callable[[np.ndarray], None],
) -> np.ndarray:
    """The candidate codes of each block that pass the exact check, spent from the budget per block."""
    found: list[np.ndarray] = []
    for block in blocks:
        i, j = np.divmod(block, max(n, 1))
        kept = block[passes(i, j)]
        spend(kept)
        found.append(kept)
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def find_related_pairs(
    embeddings: Sequence[np.ndarray | None],
    min_similarity: float,
    max_similarity: float,
    texts: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    budget: PairBudget | None = None,
    changed: Sequence[int] | np.ndarray | None = None,
    space: PairSpace | None = None,
    cross: int | None = None,
) -> list[PairScore]:
    """Exactly every embedded pair with ``min <= cosine < max`` (cosine only, no keyword boost).

    ``changed``, ``space`` and ``cross`` as for :func:`find_duplicate_pairs`: only the pairs holding
    a changed position, at O(changed x N) cost, or only the pairs ``i < cross <= j`` (``space`` must
    hold these ``texts``, or none when not given).

    ``text_similarity`` is the pair's Jaccard when ``texts`` are given, else 0.0; sorting uses the
    hybrid ``similarity`` like :func:`find_duplicate_pairs`, which it shares the pair ``budget``
    with. ``progress.advance(n)`` is called after blocks of rows (within the caller's stage); the calls
    sum to ``len(embeddings)``.
    """
    low = unit("min_similarity", min_similarity)
    high = unit("max_similarity", max_similarity)
    if low > high:
        raise UsageError("min_similarity", min_similarity, f"must not exceed max_similarity ({high})")
    n = len(embeddings)
    if texts is not None:
        _check_lengths("texts", len(texts), n)
    budget = budget if budget is not None else PairBudget()
    ticker = _Ticker(progress, n)
    vectors = space.vectors if space is not None else _Vectors.build(embeddings)
    rows = None if changed is None else _positions(changed, n)
    cross = _cross_at(cross, n)
    if cross is not None and rows is not None:
        raise UsageError("cross", cross, "cannot be combined with changed rows")
    if low < high:

        def in_band(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            return _in_band(vectors.cosine(i, j), low, high)

        tick = ticker.phase(0.0, 0.9)
        if cross is not None:
            blocks = vectors.candidate_blocks_cross(cross, low, high, tick)
        elif rows is None:
            blocks = vectors.candidate_blocks(low, high, tick)
        else:
            blocks = vectors.candidate_blocks_from(rows, low, high, tick)
        codes = _kept(
            blocks,
            in_band,
            n,
            lambda kept: budget.spend(len(kept), "min_similarity", min_similarity),
        )
        codes = _unique(codes)
    else:
        codes = np.empty(0, dtype=np.int64)
    i, j = np.divmod(codes, max(n, 1))
    sem = vectors.cosine(i, j)
    text = np.zeros(len(i)) if texts is None else _pair_jaccard(texts, i, j, space)
    pairs = _to_pairs(i, j, text, sem)
    ticker.finish()
    return pairs


def _in_band(sem: np.ndarray, low: float, high: float) -> np.ndarray:
    """The related band: ``low <= cosine < high`` (False where a vector is missing)."""
    return (sem >= low) & (sem < high)


def verify_related_pairs(
    embeddings: Sequence[np.ndarray | None],
    min_similarity: float,
    max_similarity: float,
    texts: Sequence[str],
    i: Sequence[int] | np.ndarray,
    j: Sequence[int] | np.ndarray,
) -> list[PairScore]:
    """Of the candidate pairs ``(i[k], j[k])`` (``i < j``), exactly those :func:`find_related_pairs`
    returns, with its scores (the candidates found elsewhere, verified by the same band and formulas)."""
    low = unit("min_similarity", min_similarity)
    high = unit("max_similarity", max_similarity)
    _check_lengths("texts", len(texts), len(embeddings))
    left, right = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    sem = _Vectors.build(embeddings, units=False).cosine(left, right)
    kept = _in_band(sem, low, high) if low < high else np.zeros(len(left), dtype=bool)
    left, right, sem = left[kept], right[kept], sem[kept]
    return _to_pairs(left, right, _pair_jaccard(texts, left, right, None), sem)


def _pair_jaccard(texts: Sequence[str], i: np.ndarray, j: np.ndarray, space: PairSpace | None) -> np.ndarray:
    """Exact Jaccard of the pairs, tokenising only the texts they hold (unless ``space`` already
    has them all): a related search needs a few pairs' word scores, not the whole scope's index."""
    if space is not None and "tokens" in space.__dict__:
        return space.tokens.jaccard(i, j)
    held, at = np.unique(np.concatenate((i, j)), return_inverse=True)
    tokens = _Tokens.build([texts[k] for k in held.tolist()])
    return tokens.jaccard(at[: len(i)], at[len(i) :])


def score_pairs(
    texts: Sequence[str], embeddings: Sequence[np.ndarray | None], i: np.ndarray, j: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Jaccard, cosine) of the given pairs of input positions -- the very formulas of
    :func:`find_duplicate_pairs` -- with NaN cosine where a vector is missing. For pairs chosen
    another way than by a threshold (a random sample of pairs for a report's histograms)."""
    _check_lengths("embeddings", len(embeddings), len(texts))
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    return _Tokens.build(texts).jaccard(i, j), _Vectors.build(embeddings, units=False).cosine(i, j)
