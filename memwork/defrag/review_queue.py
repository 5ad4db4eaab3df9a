"""The review queue: a stratified sample of candidate pairs a person labels, so the duplicate rule
can be *measured* (see :mod:`memwork.defrag.calibrate`).

The population is every same-scope pair with ``max(Jaccard, cosine) >= floor``, found by the same
exact joins as ``find-duplicates`` (:func:`memwork.defrag.findings.find_duplicates` at the floor), so
the sample is honest about what lies below the duplicate threshold. Each pair falls in one stratum:

- ``near_threshold``: the hybrid similarity within ``band`` of the threshold (the uncertain ones);
- ``both_high``: both signals at or above the threshold;
- ``text_high``: the words say duplicate, the vectors do not (or there is no vector);
- ``semantic_high``: the vectors say duplicate, the words do not;
- ``char_high``: neither says duplicate, but the characters do (character similarity at or above
  the threshold, :mod:`memwork.defrag.char_similarity`: typo-style duplicates);
- ``below:LO-HI``: both signals below the threshold, in equal-width bins from the floor up.

Each row also carries the pair's character similarity (column ``char_similarity``), the third
signal a calibrated policy may combine. Every non-empty stratum gets an equal share of the sample
(what a small stratum cannot use goes to the others), drawn without replacement with a seeded
generator; each row's ``weight`` is ``N_h / n_h``, the inverse of its inclusion probability, so a
weighted sum over the labelled rows estimates the same sum over the whole population
(Horvitz-Thompson). Rows are written most uncertain first (closest to the threshold).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memwork.checks import unit
from memwork.coverage import MARK_KEYS, out_of_range
from memwork.defrag.char_similarity import char_join, char_similarities
from memwork.defrag.findings import Pair, by_scope, find_duplicates, flag_contradictions
from memwork.defrag.pair_sample import (
    PairSample,
    _scored,
    over_budget,
    sample_scope_pairs,
    with_sample_hint,
)
from memwork.entry import Entry
from memwork.errors import PairBudgetExceeded, UsageError
from memwork.progress import Progress

#: the review file's columns; ``decision`` and ``note`` are the reviewer's
REVIEW_COLUMNS = (
    "scope",
    "path_a",
    "path_b",
    "text_similarity",
    "semantic_similarity",
    "similarity",
    #: character similarity (memwork.defrag.char_similarity); files written before it lack the column
    "char_similarity",
    "stratum",
    "weight",
    #: a possible contradiction's reason (memwork.defrag.contradictions): never merged, whatever the label
    "contradiction",
    "decision",
    "note",
    "embedding_model",
)
#: what a reviewer writes in ``decision`` (empty: not reviewed yet)
LABELS = ("duplicate", "distinct", "unsure")
DEFAULT_SIZE = 200
DEFAULT_FLOOR = 0.5
DEFAULT_THRESHOLD = 0.85
#: half-width of the ``near_threshold`` stratum
NEAR_BAND = 0.05
#: equal-width bins of the ``below`` range (floor .. threshold - band)
BELOW_BINS = 3


@dataclass(frozen=True)
class ReviewRow:
    """One candidate pair of the queue, with its stratum and sampling weight."""

    pair: Pair
    stratum: str
    weight: float
    #: the pair's character similarity (None: not computed)
    char: float | None = None


def stratum_of(
    pair: Pair, threshold: float, floor: float, band: float = NEAR_BAND, char: float | None = None
) -> str:
    """The stratum of ``pair`` (module docstring) given its character similarity ``char`` (None:
    unknown, never ``char_high``); one name per pair, deterministic."""
    text, semantic = pair.text_similarity, pair.semantic_similarity
    if abs(pair.similarity - threshold) < band:
        return "near_threshold"
    text_high = text >= threshold
    semantic_high = semantic is not None and semantic >= threshold
    if text_high and semantic_high:
        return "both_high"
    if text_high:
        return "text_high"
    if semantic_high:
        return "semantic_high"
    if char is not None and char >= threshold:
        return "char_high"
    top = max(floor, threshold - band)
    width = (top - floor) / BELOW_BINS if top > floor else 1.0
    k = min(BELOW_BINS - 1, max(0, int((pair.similarity - floor) / width)))
    low = floor + k * width
    return f"below:{low:.2f}-{min(top, low + width):.2f}"


def allocate(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Equal shares of ``total`` over the strata, each capped by its size; what a stratum cannot use
    goes to the others (every non-empty stratum gets at least one row while ``total`` allows)."""
    left = min(total, sum(sizes.values()))
    take = dict.fromkeys(sizes, 0)
    open_ = sorted(name for name, size in sizes.items() if size > 0)
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for name in list(open_):
            add = min(share, sizes[name] - take[name], left)
            take[name] += add
            left -= add
            if take[name] == sizes[name]:
                open_.remove(name)
            if left == 0:
                break
    return take


def sample_pairs(
    population: Sequence[Pair],
    *,
    size: int,
    floor: float,
    threshold: float,
    seed: int = 0,
    chars: Sequence[float] | np.ndarray | None = None,
) -> list[ReviewRow]:
    """The stratified sample of ``population`` (all candidate pairs, ``chars`` their character
    similarities): see the module docstring."""
    return weighted_queue(
        [(pair, 1.0, False) for pair in population],
        size=size,
        floor=floor,
        threshold=threshold,
        seed=seed,
        chars=chars,
    )


def pair_chars(pairs: Sequence[Pair], entries: Sequence[Entry]) -> np.ndarray:
    """The character similarity of each pair (:mod:`memwork.defrag.char_similarity`)."""
    if not pairs:
        return np.zeros(0)
    index: dict[tuple[str, str], int] = {}
    texts: list[str] = []
    for e in entries:
        if not e.is_stub:
            index[(e.scope, e.path)] = len(texts)
            texts.append(e.content)
    i = np.array([index[(p.scope, p.path_a)] for p in pairs], dtype=np.int64)
    j = np.array([index[(p.scope, p.path_b)] for p in pairs], dtype=np.int64)
    return char_similarities(texts, i, j)


def _flagged(rows: list[ReviewRow], entries: Sequence[Entry]) -> list[ReviewRow]:
    """The queue's rows with possible contradictions marked, so the reviewer sees them (only the
    sampled pairs are checked: a few hundred, not the population)."""
    flagged = flag_contradictions([row.pair for row in rows], entries)
    return [replace(row, pair=pair) for row, pair in zip(rows, flagged, strict=True)]


def _number(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.6f}"


def write_review_queue(rows: Iterable[ReviewRow], path: str | Path, *, embedding_model: str) -> Path:
    """Write the queue as the review CSV (``decision`` and ``note`` empty); returns the path.

    Written to a temporary file first and renamed, so a failure leaves no half file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(REVIEW_COLUMNS)
        for row in rows:
            p = row.pair
            writer.writerow(
                [p.scope, p.path_a, p.path_b, _number(p.text_similarity), _number(p.semantic_similarity),
                 _number(p.similarity), _number(row.char), row.stratum, f"{row.weight:.6f}",
                 p.contradiction.reason if p.contradiction is not None else "", "", "", embedding_model]
            )  # fmt: skip
    tmp.replace(path)
    return path


# ---- a queue from a population known through weighted pairs (a sample below the band) -------------
def weighted_stratum(
    pair: Pair, sampled: bool, threshold: float, floor: float, char: float | None = None
) -> str:
    """The pair's stratum; a sampled pair gets a stratum of its own (``below:0.50-0.60~sampled``), so
    no stratum mixes exact pairs (weight 1) with sampled ones: every stratum has one weight."""
    name = stratum_of(pair, threshold, floor, char=char)
    return name + "~sampled" if sampled else name


#: how far below the threshold the exact pairs reach when the budget allows (down to the floor): the
#: duplicates a rule misses live there, rare among millions of pairs -- a uniform sample holds a handful
EXACT_REACH = 0.15


def exact_band(
    entries: Sequence[Entry], threshold: float, floor: float, *, progress: Progress | None = None
) -> tuple[list[Pair], float]:
    """The exact pairs from ``max(floor, threshold - EXACT_REACH)`` up when they fit the pair budget,
    else from ``threshold`` up; and where they start. Below that, a population is known through a
    pair sample (:func:`weighted_population`)."""

    deeper = round(max(floor, threshold - EXACT_REACH), 6)
    if deeper < threshold:
        try:
            return find_duplicates(entries, deeper, progress=progress), deeper
        except PairBudgetExceeded:
            pass
    return find_duplicates(entries, threshold, progress=progress), threshold


def char_band(entries: Sequence[Entry], threshold: float, floor: float, below: float) -> list[Pair]:
    """The exact pairs whose character similarity reaches ``threshold`` with a hybrid similarity from
    ``floor`` up to (not including) ``below``: the ``char_high`` stratum where the exact band stops.

    Why: the duplicates a rule misses are rare among the millions of pairs below the exact band, so a
    uniform sample holds a handful and the recall estimate is blind to them (FEBRL2: 7 % of its
    duplicates lie below 0.7, about one in a 50,000-pair sample); found by characters they are
    counted, not sampled. Same-scope pairs only; scored as :func:`find_duplicates` scores them."""
    from memwork.similarity import PairBudget

    budget = PairBudget()
    out: list[Pair] = []
    for scope, group in by_scope(entries).items():
        i, j, _ = char_join([e.content for e in group], threshold, budget=budget)
        if len(i):
            out.extend(p for p in _scored(scope, group, i, j, floor) if floor <= p.similarity < below)
    return out


def weighted_queue(
    population: list[tuple[Pair, float, bool]],
    *,
    size: int,
    floor: float,
    threshold: float,
    seed: int,
    chars: Sequence[float] | np.ndarray | None = None,
) -> list[ReviewRow]:
    """The review queue (:mod:`memwork.defrag.review_queue`) drawn from a population known through
    weighted pairs ``(pair, weight, sampled)``. A stratum holding both exact and sampled pairs (near the
    threshold) is split in two, so within each stratum every pair has one weight ``w`` and a drawn row
    weighs ``w * N_h / n_h`` -- the two-stage inclusion probability's inverse, so the calibration's
    weighted estimates stay unbiased for the whole store. Equal to ``sample_pairs`` when nothing was
    sampled (every weight 1). ``chars``: the pairs' character similarities (None: not known)."""
    char = [None] * len(population) if chars is None else [float(c) for c in chars]
    strata: dict[str, list[int]] = {}
    for k, (pair, _, sampled) in enumerate(population):
        strata.setdefault(weighted_stratum(pair, sampled, threshold, floor, char[k]), []).append(k)
    take = allocate({name: len(members) for name, members in strata.items()}, size)
    rng = np.random.default_rng(seed)
    rows: list[ReviewRow] = []
    for name in sorted(strata):
        members, n = strata[name], take[name]
        if n == 0:
            continue
        chosen = rng.choice(len(members), size=n, replace=False)
        base = population[members[0]][1]
        weight = base * len(members) / n
        rows.extend(
            ReviewRow(population[members[int(c)]][0], name, weight, char[members[int(c)]])
            for c in sorted(chosen)
        )
    return sorted(
        rows,
        key=lambda r: (abs(r.pair.similarity - threshold), r.pair.scope, r.pair.path_a, r.pair.path_b),
    )


def weighted_population(
    band: list[Pair], sample: PairSample, threshold: float
) -> list[tuple[Pair, float, bool]]:
    """The store's pairs as weighted pairs: ``band`` (every pair from ``threshold`` up) exact, weight 1;
    the sample's pairs below ``threshold``, each standing for population / sample pairs."""
    exact = [(p, 1.0, False) for p in band]
    below = [(q, sample.weight, not sample.complete) for q in sample.pairs if q.similarity < threshold]
    return exact + below


# ---- which model made a store's vectors ----------------------------------------------------------------
#: entries re-embedded to recognise the model, and the cosine that counts as "the same vector"
_PROBE_ENTRIES = 5
_SAME_VECTOR = 0.98


def store_embedding_model(entries: Sequence[Entry]) -> str:
    """The model id of the embedder that made the store's vectors: the one named by the coverage marks,
    else the known embedder that reproduces a few stored vectors, else ``unknown-<dim>d`` (``none``
    without vectors). A store records no model per vector, so it is recognised, not read."""
    from memwork.embed import HashEmbedder, MiniLMEmbedder, minilm_available

    embedded = sorted(
        (e for e in entries if not e.is_stub and e.embedding is not None and not out_of_range(e)),
        key=lambda e: e.key,
    )
    if not embedded:
        return "none"
    dims = Counter(e.embedding.shape[0] for e in embedded if e.embedding is not None)
    dim = max(dims, key=lambda d: (dims[d], d))
    marked = {
        str(mark["model"])
        for e in embedded
        for key in MARK_KEYS
        if isinstance(mark := e.metadata.get(key), dict) and mark.get("model")
    }
    if len(marked) == 1:
        return marked.pop()
    probe = [e for e in embedded if e.embedding is not None and e.embedding.shape[0] == dim][:_PROBE_ENTRIES]
    stored = np.stack([np.asarray(e.embedding, dtype=np.float64) for e in probe])
    candidates: list[Any] = [HashEmbedder(dim)]
    if dim == 384 and minilm_available():
        candidates.append(MiniLMEmbedder)
    for candidate in candidates:
        embedder = candidate() if isinstance(candidate, type) else candidate
        fresh = np.asarray(embedder.embed([e.content for e in probe]), dtype=np.float64)
        if _all_same(stored, fresh):
            return str(embedder.model_id)
    return f"unknown-{dim}d"


def _all_same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = (a * b).sum(axis=1) / np.where(norms > 0, norms, 1.0)
    return bool((cos >= _SAME_VECTOR).all())


@dataclass
class ReviewQueue:
    """A written review file and what it was drawn from (the ``--json`` answer of ``defrag review``)."""

    output: Path
    embedding_model: str
    population: int
    rows: list[ReviewRow]
    strata: dict[str, dict[str, float]]
    #: with ``--since``: what was given and the instant it resolved to
    since: dict[str, Any] | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "output": str(self.output),
            "embedding_model": self.embedding_model,
            "population": self.population,
            "rows": len(self.rows),
            "strata": self.strata,
        }
        return data | ({"since": self.since} if self.since is not None else {})


def build_review_queue(
    entries: Sequence[Entry],
    output: str | Path,
    *,
    size: int = DEFAULT_SIZE,
    floor: float = DEFAULT_FLOOR,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    progress: Progress | None = None,
    pair_sample: int | None = None,
    since: datetime | None = None,
) -> ReviewQueue:
    """Sample the review queue of ``entries`` and write it to ``output`` (the store is only read).

    With ``pair_sample`` the pairs below the threshold are not all found but known through a uniform
    random sample of that many same-scope pairs (:mod:`memwork.defrag.pair_sample`); the pairs at or
    above the threshold stay exact. For a store whose pairs at the floor pass ``MEMWORK_MAX_PAIRS``
    (5,000 FEBRL records: over 3 million at 0.5). Each row's weight then includes the sample's, so
    the calibration still estimates the whole store; ``population`` is then an estimate.

    With ``since`` the population is only the pairs holding an entry created or changed since then
    (exactly those of a full run, :func:`~memwork.defrag.findings.find_duplicates`): the review of
    what changed; not with ``pair_sample`` (the uniform sample is of the whole store)."""
    output = Path(output)
    if not output.parent.is_dir():
        raise UsageError("output", str(output), "no such folder")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError("seed", seed, "must be a whole number >= 0")
    floor = unit("floor", floor)
    threshold = unit("similarity_threshold", threshold)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError("size", size, "must be a whole number >= 1")
    if floor > threshold:
        raise UsageError("floor", floor, f"must not exceed the threshold ({threshold})")
    if pair_sample is not None:
        if isinstance(pair_sample, bool) or not isinstance(pair_sample, int) or pair_sample < 1:
            raise UsageError("sample_pairs", pair_sample, "must be a whole number >= 1")
        if since is not None:
            raise UsageError("since", since.isoformat(), "cannot be combined with --sample-pairs")
        return _sampled_queue(entries, output, size, floor, threshold, seed, progress, pair_sample)
    try:
        population = find_duplicates(entries, floor, progress=progress, since=since)
    except UsageError as exc:
        if over_budget(exc):
            raise with_sample_hint(exc) from None
        raise
    chars = pair_chars(population, entries)
    rows = _flagged(
        sample_pairs(population, size=size, floor=floor, threshold=threshold, seed=seed, chars=chars), entries
    )
    model = store_embedding_model(entries)
    write_review_queue(rows, output, embedding_model=model)
    strata: dict[str, dict[str, float]] = {}
    for pair, char in zip(population, chars.tolist(), strict=True):
        name = stratum_of(pair, threshold, floor, char=char)
        strata.setdefault(name, {"population": 0, "sampled": 0})["population"] += 1
    for row in rows:
        strata[row.stratum]["sampled"] += 1
    return ReviewQueue(output, model, len(population), rows, dict(sorted(strata.items())))


def with_char_band(
    population: list[tuple[Pair, float, bool]],
    entries: Sequence[Entry],
    threshold: float,
    floor: float,
    cutoff: float,
) -> tuple[list[tuple[Pair, float, bool]], np.ndarray]:
    """``population`` (:func:`weighted_population` of the exact band from ``cutoff`` and a pair sample)
    with the exact ``char_high`` pairs below the band (:func:`char_band`) in place of the sampled
    ones, and every pair's character similarity: a sampled pair the character band holds exactly is
    counted there, not estimated from the sample (so no pair is counted twice)."""
    chars = pair_chars([p for p, _, _ in population], entries)
    kept = [
        k
        for k, (p, _, _) in enumerate(population)
        if not (floor <= p.similarity < cutoff and chars[k] >= threshold)
    ]
    by_chars = char_band(entries, threshold, floor, cutoff) if cutoff > floor else []
    out = [population[k] for k in kept] + [(p, 1.0, False) for p in by_chars]
    return out, np.concatenate((chars[kept], pair_chars(by_chars, entries)))


def _sampled_queue(
    entries: Sequence[Entry],
    output: Path,
    size: int,
    floor: float,
    threshold: float,
    seed: int,
    progress: Progress | None,
    sample_size: int,
) -> ReviewQueue:
    """The queue drawn from the exact band, the exact ``char_high`` pairs below it (:func:`char_band`)
    and a uniform sample of the other pairs below it (weighted)."""
    band, cutoff = exact_band(entries, threshold, floor, progress=progress)
    sample = sample_scope_pairs(entries, sample_size, seed=seed, check_from=floor)
    population, chars = with_char_band(
        [p for p in weighted_population(band, sample, cutoff) if p[0].similarity >= floor],
        entries,
        threshold,
        floor,
        cutoff,
    )
    rows = _flagged(
        weighted_queue(population, size=size, floor=floor, threshold=threshold, seed=seed, chars=chars),
        entries,
    )
    model = store_embedding_model(entries)
    write_review_queue(rows, output, embedding_model=model)
    strata: dict[str, dict[str, float]] = {}
    for (pair, weight, sampled), char in zip(population, chars.tolist(), strict=True):
        name = weighted_stratum(pair, sampled, threshold, floor, char)
        strata.setdefault(name, {"population": 0, "sampled": 0})["population"] += weight
    for row in rows:
        strata[row.stratum]["sampled"] += 1
    strata = {k: {"population": round(v["population"]), "sampled": v["sampled"]} for k, v in strata.items()}
    total = round(sum(w for _, w, _ in population))
    return ReviewQueue(output, model, total, rows, dict(sorted(strata.items())))
