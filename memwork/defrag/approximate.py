"""The approximate candidate stage of ``find-duplicates`` and ``find-related`` (``--candidates hnsw``).

For a PostgreSQL + pgvector store whose scopes are too big for an exact join in memory. Pairs are
still the guide's pairs, verified exactly; only the *candidates* are approximate:

* a scope of at most ``exact_upto`` live entries (default 10,000) is read alone and joined exactly --
  the very code of the exact path (an HNSW search filtered to a small scope of a big index is both
  slower and poorer than reading the scope);
* a bigger scope streams its ids in batches of :data:`BATCH`; for each batch one SQL statement asks
  the store's HNSW index for every id's ``k`` nearest live neighbours in the same scope
  (:func:`memwork.stores.knn.nearest`: ``hnsw.ef_search``, iterative scan); the batch's neighbour
  lists are cut into runs of at most :data:`VERIFY_ROWS` distinct rows, each run's rows are read by
  id, and every candidate pair is verified by the exact path's own verification
  (:func:`memwork.defrag.findings.verify_duplicates` / ``verify_related``): the same scores, kinds,
  readability rule and contradiction flags. Only the batch's id pairs and one run of rows are in
  memory, never the store: a constant, whatever N and however much the lists overlap.

What the index misses is measured, never dropped silently: every run carries a
:class:`RecallEstimate` -- ``sample`` live rows drawn at random, their exact pairs computed by brute
force within their scope (the exact search restricted to them, streaming the scope in chunks), and the
share of those the approximate stage found. A pair the HNSW stage cannot find at all: one whose
entries have no vector, or a pair only the word score joins whose vectors are not among the ``k``
nearest -- the estimate counts those misses too.
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from memwork import similarity
from memwork.checks import unit
from memwork.coverage import MARK_KEY
from memwork.defrag import findings
from memwork.defrag.findings import Pair
from memwork.entry import Entry, validate_scope
from memwork.errors import UsageError
from memwork.progress import Progress
from memwork.stores import knn
from memwork.stores.base import Store
from memwork.stores.sql import SQLStore

#: how pairs are found: ``exact`` (the default: every pair, in memory) or ``hnsw`` (this module)
CANDIDATES = ("exact", "hnsw")
DEFAULT_K = 50
DEFAULT_SAMPLE = 1000
DEFAULT_EXACT_UPTO = 10_000
#: ids per k-NN statement
BATCH = 500
#: most rows a verification holds at once (a batch's candidates are verified in runs of this many)
VERIFY_ROWS = 5000
#: entries of a scope per chunk of the recall check's brute force
TRUTH_CHUNK = 5000

Key = tuple[str, str, str]


@dataclass(frozen=True)
class RecallEstimate:
    """How many of the exact pairs of ``sample_rows`` random rows the run found (with a 95 % Wilson
    interval over those pairs); None when no pair holds a sampled row."""

    sample_rows: int
    exact_pairs: int
    found_pairs: int
    #: pairs found for the sampled rows that the exact search does not return (a self-check: 0)
    not_exact: int = 0

    @property
    def estimate(self) -> float | None:
        return None if self.exact_pairs == 0 else self.found_pairs / self.exact_pairs

    def interval(self) -> tuple[float, float]:
        """Wilson score interval at 95 % (0..1 without pairs)."""
        n = self.exact_pairs
        if n == 0:
            return 0.0, 1.0
        z, p = 1.96, self.found_pairs / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def to_dict(self) -> dict[str, Any]:
        low, high = self.interval()
        estimate = self.estimate
        return {
            "recall_estimate": None if estimate is None else round(estimate, 4),
            "interval_95": [round(low, 4), round(high, 4)],
            "sample_rows": self.sample_rows,
            "sample_exact_pairs": self.exact_pairs,
            "sample_found_pairs": self.found_pairs,
            "sample_not_exact_pairs": self.not_exact,
        }


@dataclass
class ApproximateRun:
    """The pairs of an approximate run, its recall estimate and what it did (for the summary)."""

    pairs: list[Pair]
    recall: RecallEstimate
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Rule:
    """Which pairs: ``exact(scope, group, rows)`` the exact search (holding ``rows`` when given),
    ``verify(scope, group, i, j)`` the candidates that are such pairs."""

    name: str
    exact: Callable[[str, list[Entry], list[int] | None], list[Pair]]
    verify: Callable[[str, list[Entry], Sequence[int], Sequence[int]], list[Pair]]


def _duplicates(threshold: float) -> _Rule:
    return _Rule(
        "duplicates",
        lambda s, g, rows: findings.duplicates_touching(s, g, threshold, rows),
        lambda s, g, i, j: findings.verify_duplicates(s, g, i, j, threshold),
    )


def _related(low: float, high: float) -> _Rule:
    return _Rule(
        "related pairs",
        lambda s, g, rows: findings.related_touching(s, g, low, high, rows),
        lambda s, g, i, j: findings.verify_related(s, g, i, j, low, high),
    )


@dataclass(frozen=True)
class Settings:
    """The approximate stage's knobs, checked (:func:`settings`)."""

    k: int = DEFAULT_K
    ef_search: int = 2 * DEFAULT_K
    sample: int = DEFAULT_SAMPLE
    exact_upto: int = DEFAULT_EXACT_UPTO
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "ef_search": self.ef_search,
            "recall_sample": self.sample,
            "exact_upto": self.exact_upto,
        }


def _whole(name: str, value: Any, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise UsageError(name, value, f"must be a whole number {bound}")
    return value


def settings(
    k: int | None = None,
    ef_search: int | None = None,
    sample: int | None = None,
    exact_upto: int | None = None,
    seed: int = 0,
) -> Settings:
    """The knobs with their defaults; a bad one is a usage error naming it (``ef_search`` defaults
    to twice ``k``, at least 40 -- pgvector's own default -- and at most 1000, its limit)."""
    k = _whole("k", DEFAULT_K if k is None else k, 1, knn.MAX_EF_SEARCH)
    ef = min(knn.MAX_EF_SEARCH, max(40, 2 * k)) if ef_search is None else ef_search
    return Settings(
        k,
        _whole("ef_search", ef, 1, knn.MAX_EF_SEARCH),
        _whole("recall_sample", DEFAULT_SAMPLE if sample is None else sample, 1),
        _whole("exact_upto", DEFAULT_EXACT_UPTO if exact_upto is None else exact_upto, 0),
        _whole("seed", seed, 0),
    )


def find_duplicates_hnsw(
    store: Store,
    threshold: float = 0.85,
    *,
    scope: str | None = None,
    options: Settings | None = None,
    progress: Progress | None = None,
) -> ApproximateRun:
    """The duplicate pairs (``max(Jaccard, cosine) >= threshold``) whose candidates the store's HNSW
    index found, each verified exactly, with the run's :class:`RecallEstimate` (module docstring)."""
    rule = _duplicates(unit("similarity_threshold", threshold))
    return _run(store, rule, scope, options or Settings(), progress)


def find_related_hnsw(
    store: Store,
    min_similarity: float = 0.60,
    max_similarity: float = 0.85,
    *,
    scope: str | None = None,
    options: Settings | None = None,
    progress: Progress | None = None,
) -> ApproximateRun:
    """The related pairs (``min <= cosine < max``) whose candidates the HNSW index found, verified
    exactly, with their link status and the run's :class:`RecallEstimate`."""
    low, high = unit("min_similarity", min_similarity), unit("max_similarity", max_similarity)
    if low > high:
        raise UsageError("min_similarity", min_similarity, f"must not exceed max_similarity ({high})")
    return _run(store, _related(low, high), scope, options or Settings(), progress)


def _run(
    store: Store, rule: _Rule, scope: str | None, opts: Settings, progress: Progress | None
) -> ApproximateRun:
    began = time.perf_counter()
    pg = knn.pg_store(store, "candidates", "hnsw")
    scope = validate_scope(scope) if scope is not None else None
    index = knn.require_hnsw_index(pg)
    sizes = knn.scope_sizes(pg, scope)
    small = [s for s, (n, _) in sizes.items() if n <= opts.exact_upto]
    big = [s for s, (n, _) in sizes.items() if n > opts.exact_upto]
    if progress is not None:
        progress.start(f"finding {rule.name} (hnsw)", sum(n for n, _ in sizes.values()))
    budget = similarity.PairBudget()  # the exact path's guard, over the whole store
    found: dict[Key, Pair] = {}
    for name in sizes:
        exact = name in small
        got = _exact_scope(pg, rule, name) if exact else _hnsw_scope(pg, rule, name, opts, progress)
        new = [p for p in got if _key(p) not in found]
        budget.spend(len(new), "candidates", "hnsw")
        found.update((_key(p), p) for p in new)
        if progress is not None:  # a big scope advanced per batch of its embedded rows
            progress.advance(sizes[name][0] - (0 if exact else sizes[name][1]))
    pairs = sorted(found.values(), key=lambda p: (-p.similarity, p.scope, p.path_a, p.path_b))
    searched = time.perf_counter()
    recall = _estimate(pg, rule, sizes, set(big), found, opts)
    seconds = {"search": round(searched - began, 2), "recall_check": round(time.perf_counter() - searched, 2)}
    summary = {
        "candidates": "hnsw",
        "index": index,
        "scopes_exact": len(small),
        "scopes_hnsw": len(big),
        "entries_hnsw": sum(sizes[s][0] for s in big),
        "embedded_out_of_range": knn.count_out_of_range(pg, MARK_KEY, scope),
        "seconds": seconds,
    } | opts.to_dict()
    return ApproximateRun(pairs, recall, summary)


def _key(pair: Pair) -> Key:
    return pair.scope, pair.path_a, pair.path_b


def _live(entries: Any) -> list[Entry]:
    """The entries defrag compares (not stubs, not superseded), in path order: what a scope's
    group is on the exact path (:func:`memwork.defrag.findings.by_scope`)."""
    return sorted((e for e in entries if not e.is_stub and e.superseded_by is None), key=lambda e: e.path)


def _exact_scope(store: SQLStore, rule: _Rule, scope: str) -> list[Pair]:
    """A small scope read alone and searched by the exact path."""
    group = _live(store.iter_entries(scope=scope))
    return findings.flag_contradictions(rule.exact(scope, group, None), group)


def _hnsw_scope(
    store: SQLStore, rule: _Rule, scope: str, opts: Settings, progress: Progress | None
) -> list[Pair]:
    """A big scope's pairs from HNSW candidates, batch by batch, each batch's candidates verified in
    runs of at most :data:`VERIFY_ROWS` rows (:func:`_runs`); a pair found from both of its entries'
    lists is kept once."""
    found: dict[Key, Pair] = {}
    cap = max(VERIFY_ROWS, opts.k + 1)
    for ids in knn.embedded_ids(store, scope, BATCH):
        for run in _runs(knn.nearest(store, scope, ids, opts.k, opts.ef_search), cap):
            for pair in _verified(store, rule, scope, run):
                found.setdefault(_key(pair), pair)
        _give_back()
        if progress is not None:
            progress.advance(len(ids))
    return list(found.values())


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _give_back() -> None:
    """Return a batch's freed heap to the system (glibc keeps freed blocks mapped): measured at 100k,
    RSS between batches 89-95 MB with it, 106-109 MB without; the peak is the same."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _runs(near: list[tuple[int, int]], cap: int) -> Iterator[list[tuple[int, int]]]:
    """``near`` (query id, neighbour id) cut into runs of whole neighbour lists whose distinct ids
    number at most ``cap`` (one list at least): what one verification holds no longer depends on how
    much a batch's lists overlap -- little in a big scope, much in a small one -- so not on N."""
    lists: dict[int, list[int]] = {}
    for a, b in near:
        if a != b:
            lists.setdefault(a, []).append(b)
    run: list[tuple[int, int]] = []
    held: set[int] = set()
    for a, bs in lists.items():
        new = {a, *bs} - held
        if run and len(held) + len(new) > cap:
            yield run
            run, held, new = [], set(), {a, *bs}
        run.extend((a, b) for b in bs)
        held |= new
    if run:
        yield run


def _verified(store: SQLStore, rule: _Rule, scope: str, near: list[tuple[int, int]]) -> list[Pair]:
    """The candidate pairs ``near`` (ids) that are pairs of ``rule``, verified exactly over their rows
    read by id (every check is of the pair alone: the same pairs whichever run holds them)."""
    rows = knn.rows_by_id(store, sorted({x for pair in near for x in pair}))
    group = _live(e for e in rows.values() if e.scope == scope)
    at = {e.path: x for x, e in enumerate(group)}
    position = {row_id: at[e.path] for row_id, e in rows.items() if e.path in at and e.scope == scope}
    del rows
    pairs = sorted(
        {
            (min(position[a], position[b]), max(position[a], position[b]))
            for a, b in near
            if a in position and b in position and a != b
        }
    )
    verified = rule.verify(scope, group, [i for i, _ in pairs], [j for _, j in pairs])
    return findings.flag_contradictions(verified, group)


def _estimate(
    store: SQLStore,
    rule: _Rule,
    sizes: dict[str, tuple[int, int]],
    searched: set[str],
    found: dict[Key, Pair],
    opts: Settings,
) -> RecallEstimate:
    """The exact pairs of ``opts.sample`` random live rows against the pairs the run found for them.
    In a scope searched exactly the run's pairs are the exact pairs; in an HNSW scope they are
    computed by brute force over the scope (:func:`_truth`)."""
    drawn = knn.sample_ids(store, list(sizes), opts.sample, opts.seed)
    rows = knn.rows_by_id(store, [row_id for row_id, _ in drawn])
    sampled: dict[str, list[Entry]] = {}
    for entry in rows.values():
        sampled.setdefault(entry.scope, []).append(entry)
    keys = {(e.scope, e.path) for e in rows.values()}
    mine = {k for k in found if (k[0], k[1]) in keys or (k[0], k[2]) in keys}
    truth = {k for k in mine if k[0] not in searched}  # the exact path's own pairs
    for scope in sorted(set(sampled) & searched):
        truth |= _truth(store, rule, scope, sampled[scope])
    return RecallEstimate(len(rows), len(truth), len(mine & truth), len(mine - truth))


def _truth(store: SQLStore, rule: _Rule, scope: str, sampled: list[Entry]) -> set[Key]:
    """Every exact pair of ``scope`` holding one of ``sampled``: the scope streamed in chunks, each
    joined with the sampled rows by the exact search restricted to them."""
    sampled = _live(sampled)
    paths = {e.path for e in sampled}
    out: set[Key] = set()

    def flush(chunk: list[Entry]) -> None:
        group = sorted(chunk + sampled, key=lambda e: e.path)
        rows = [x for x, e in enumerate(group) if e.path in paths]
        out.update(_key(p) for p in rule.exact(scope, group, rows))

    chunk: list[Entry] = []
    for entry in store.iter_entries(scope=scope):
        if entry.path in paths or entry.is_stub or entry.superseded_by is not None:
            continue
        chunk.append(entry)
        if len(chunk) >= TRUTH_CHUNK:
            flush(chunk)
            chunk = []
    if chunk or not out:
        flush(chunk)
    return out
