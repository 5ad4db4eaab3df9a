"""How good is the duplicate rule when nobody labelled anything? A Fellegi-Sunter mixture, fitted by EM.

The candidate pairs are every same-scope pair with ``max(Jaccard, cosine) >= floor`` (the review
queue's population). Each pair's comparison vector is its two signals, each discretised into a few
levels (:data:`CUTS`; a missing cosine is its own level that counts for neither side). As Splink does,
the pairs are modelled as a two-component mixture -- duplicates with probability ``lambda`` -- whose
signals are conditionally independent given the component: ``m[level]`` is a level's probability
among duplicates, ``u[level]`` among distinct pairs. EM (from a fixed start: nothing random) fits
``lambda``, ``m`` and ``u``; each pair's posterior match probability then gives, for every threshold
``t`` on the hybrid similarity, an estimated precision (expected duplicates among the pairs at or
above ``t``, over their number) and recall (over the expected duplicates at or above the floor).

Scopes differ: a large scope holds many more chance look-alikes per duplicate than a small one, so
``m`` and ``u`` are shared but ``lambda`` is re-estimated per scope size class (:data:`SIZE_CLASSES`,
scopes by their number of live entries). Intervals: 95 % percentile bootstrap, pairs resampled with
replacement and EM refitted, seeded. The estimate rests on the model's assumptions (two populations,
conditional independence); with labels, compare it with :func:`memwork.defrag.calibrate.calibrate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memwork.checks import unit
from memwork.defrag.findings import Pair, by_scope, find_duplicates
from memwork.defrag.pair_sample import over_budget, sample_scope_pairs, with_sample_hint
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.progress import Progress
from memwork.workspace import write_json_file

#: level boundaries of each signal (level k: CUTS[k-1] <= value < CUTS[k])
CUTS = (0.3, 0.5, 0.7, 0.85, 0.95)
LEVELS = len(CUTS) + 1
#: scope size classes by live entries: (name, fewest entries)
SIZE_CLASSES = (("small", 0), ("medium", 100), ("large", 1000))
DEFAULT_FLOOR = 0.5
DEFAULT_SAMPLES = 200
MAX_ITERATIONS = 500
#: EM's starting duplicate share
START_LAMBDA = 0.01
TOLERANCE = 1e-9
#: probabilities are kept inside (EPS, 1 - EPS) so no level is ever impossible
EPS = 1e-6
#: the thresholds reported (the hybrid similarity's grid)
GRID = np.round(np.linspace(0.0, 1.0, 101), 2)


def levels(values: np.ndarray) -> np.ndarray:
    """Each value's level 0..LEVELS-1; NaN (no cosine) is -1."""
    out = np.searchsorted(np.array(CUTS), np.nan_to_num(values, nan=0.0), side="right")
    return np.where(np.isnan(values), -1, out)


@dataclass(frozen=True)
class Mixture:
    """The fitted model: ``lam`` the duplicate share, ``m``/``u`` a (2, LEVELS) array each (row 0 the
    text signal, row 1 the semantic one)."""

    lam: float
    m: np.ndarray
    u: np.ndarray
    iterations: int

    def posterior(self, lt: np.ndarray, ls: np.ndarray, lam: float | None = None) -> np.ndarray:
        """Each pair's probability of being a duplicate (Bayes with the mixture)."""
        lam = self.lam if lam is None else lam
        pm = self.m[0, lt] * np.where(ls >= 0, self.m[1, np.maximum(ls, 0)], 1.0)
        pu = self.u[0, lt] * np.where(ls >= 0, self.u[1, np.maximum(ls, 0)], 1.0)
        num = lam * pm
        return np.asarray(num / (num + (1 - lam) * pu))

    def to_dict(self) -> dict[str, Any]:
        names = ["<0.3", "0.3-0.5", "0.5-0.7", "0.7-0.85", "0.85-0.95", ">=0.95"]
        return {
            "lambda": round(self.lam, 6),
            "iterations": self.iterations,
            "levels": names,
            "m": {"text": _r(self.m[0]), "semantic": _r(self.m[1])},
            "u": {"text": _r(self.u[0]), "semantic": _r(self.u[1])},
        }


def _r(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]


def _start() -> tuple[float, np.ndarray, np.ndarray]:
    """A fixed start, as Splink's prior: duplicates are rare (1 %) and lean to the high levels,
    distinct pairs to the low ones. The likelihood has other optima (a store's chance look-alikes can
    form a second mode of their own, e.g. hashed vectors' cosines); this start finds the duplicates'."""
    ramp = np.arange(1, LEVELS + 1, dtype=float)
    m = np.tile(ramp**2 / (ramp**2).sum(), (2, 1))
    u = np.tile(ramp[::-1] ** 2 / (ramp[::-1] ** 2).sum(), (2, 1))
    return START_LAMBDA, m, u


#: the comparison vectors: every (text level, semantic level or none) cell
CELLS = LEVELS * (LEVELS + 1)
_CELL_T = np.repeat(np.arange(LEVELS), LEVELS + 1)
_CELL_S = np.tile(np.arange(-1, LEVELS), LEVELS)


def cells(lt: np.ndarray, ls: np.ndarray) -> np.ndarray:
    """Each pair's comparison-vector cell (0..CELLS-1)."""
    return np.asarray(lt * (LEVELS + 1) + ls + 1)


def fit(lt: np.ndarray, ls: np.ndarray, weight: np.ndarray | None = None) -> Mixture:
    """EM for (lambda, m, u) on the pairs' levels (``ls`` -1: no cosine), each pair counted ``weight``
    times. Runs on the counts of the comparison-vector cells (a few dozen), so it is fast whatever
    the number of pairs. Deterministic: a fixed start, at most :data:`MAX_ITERATIONS` iterations."""
    w = np.ones(len(lt)) if weight is None else np.asarray(weight, dtype=float)
    return fit_counts(np.bincount(cells(lt, ls), w, CELLS))


def fit_counts(counts: np.ndarray) -> Mixture:
    """EM on the number of pairs in each comparison-vector cell (see :func:`fit`)."""
    lam, m, u = _start()
    model = Mixture(lam, m, u, 0)
    has_s = _CELL_S >= 0
    ls0 = np.maximum(_CELL_S, 0)
    total = max(float(counts.sum()), EPS)
    previous = -math.inf
    for k in range(1, MAX_ITERATIONS + 1):
        g = model.posterior(_CELL_T, _CELL_S)
        gw, hw = g * counts, (1 - g) * counts
        lam = float(np.clip(gw.sum() / total, EPS, 1 - EPS))
        m, u = np.empty((2, LEVELS)), np.empty((2, LEVELS))
        for row, (lv, mask) in enumerate(((_CELL_T, np.ones(CELLS, bool)), (ls0, has_s))):
            cm = np.bincount(lv[mask], gw[mask], LEVELS) + EPS
            cu = np.bincount(lv[mask], hw[mask], LEVELS) + EPS
            m[row], u[row] = cm / cm.sum(), cu / cu.sum()
        model = Mixture(lam, m, u, k)
        pm = m[0, _CELL_T] * np.where(has_s, m[1, ls0], 1.0)
        pu = u[0, _CELL_T] * np.where(has_s, u[1, ls0], 1.0)
        loglik = float((counts * np.log(lam * pm + (1 - lam) * pu)).sum())
        if loglik - previous < TOLERANCE * total:
            break
        previous = loglik
    return _oriented(model)


def _oriented(model: Mixture) -> Mixture:
    """The component whose signals are higher on average is the duplicates' (EM may swap them)."""
    idx = np.arange(LEVELS)
    if (model.m @ idx).sum() >= (model.u @ idx).sum():
        return model
    return Mixture(1 - model.lam, model.u, model.m, model.iterations)


def class_lambda(model: Mixture, lt: np.ndarray, ls: np.ndarray, weight: np.ndarray) -> float:
    """``lambda`` of a subset of the pairs with ``m`` and ``u`` held fixed (EM on lambda alone)."""
    lam = model.lam
    counts = np.bincount(cells(lt, ls), weight, CELLS)
    if counts.sum() <= 0:
        return lam
    for _ in range(MAX_ITERATIONS):
        g = model.posterior(_CELL_T, _CELL_S, lam)
        new = float(np.clip((g * counts).sum() / counts.sum(), EPS, 1 - EPS))
        if abs(new - lam) < TOLERANCE:
            return new
        lam = new
    return lam


def curves(similarity: np.ndarray, g: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Estimated precision and recall of ``similarity >= t`` for each t of :data:`GRID` (NaN where no
    pair is at or above t). ``weight`` may be a matrix (one row per bootstrap sample)."""
    w = np.atleast_2d(weight)
    bins = np.clip(np.floor(similarity * 100 + 1e-9).astype(int), 0, 100)
    count = np.stack([np.bincount(bins, row, 101) for row in w])
    dup = np.stack([np.bincount(bins, row * gr, 101) for row, gr in zip(w, np.atleast_2d(g), strict=True)])
    above, dup_above = count[:, ::-1].cumsum(axis=1)[:, ::-1], dup[:, ::-1].cumsum(axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(above > 0, dup_above / above, np.nan)
        recall = np.where(dup_above[:, :1] > 0, dup_above / dup_above[:, :1], np.nan)
    if np.ndim(weight) == 1:
        return precision[0], recall[0]
    return precision, recall


def size_class(entries: int) -> str:
    """The size class of a scope with ``entries`` live entries."""
    name = SIZE_CLASSES[0][0]
    for label, fewest in SIZE_CLASSES:
        if entries >= fewest:
            name = label
    return name


@dataclass
class LabelFreeEstimate:
    """The fitted mixture and, per scope size class (and ``all``), the estimated curves."""

    floor: float
    pairs: int
    model: Mixture | None
    classes: dict[str, dict[str, Any]]
    bootstrap: dict[str, Any]
    #: what the pairs are: every candidate pair, or an exact band plus a stated pair sample
    population: str = "every candidate pair (exact)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "fellegi-sunter-em",
            "floor": self.floor,
            "pairs": self.pairs,
            "population": self.population,
            "model": None if self.model is None else self.model.to_dict(),
            "classes": self.classes,
            "size_classes": {name: fewest for name, fewest in SIZE_CLASSES},
            "bootstrap": self.bootstrap,
        }

    def at(self, threshold: float, cls: str = "all") -> dict[str, Any] | None:
        """The estimate of class ``cls`` at ``threshold`` (None when not reported)."""
        for row in self.classes.get(cls, {}).get("thresholds", []):
            if abs(row["threshold"] - threshold) < 1e-9:
                return dict(row)
        return None


def _round(value: float) -> float | None:
    return None if not math.isfinite(value) else round(float(value), 4)


def _rows(
    point: tuple[np.ndarray, np.ndarray], boot: tuple[np.ndarray, np.ndarray], floor: float
) -> list[dict[str, Any]]:
    rows = []
    for k, t in enumerate(GRID):
        if t < floor - 1e-9:
            continue
        row: dict[str, Any] = {"threshold": float(t)}
        for name, p, b in (("precision", point[0], boot[0]), ("recall", point[1], boot[1])):
            col = b[:, k]
            low, high = np.nanpercentile(col, [2.5, 97.5]) if np.isfinite(col).any() else (math.nan, math.nan)
            row[name] = _round(p[k])
            row[f"{name}_ci"] = [_round(low), _round(high)]
        rows.append(row)
    return rows


def estimate_pairs(
    pairs: Sequence[Pair],
    scope_sizes: dict[str, int],
    *,
    floor: float = DEFAULT_FLOOR,
    seed: int = 0,
    samples: int = DEFAULT_SAMPLES,
) -> LabelFreeEstimate:
    """The label-free estimate of ``pairs`` (all candidates at ``floor``); ``scope_sizes`` gives each
    scope's live entries, for the size classes."""
    boot_info = {"samples": samples, "seed": seed, "interval": 0.95}
    if not pairs:
        return LabelFreeEstimate(floor, 0, None, {}, boot_info)
    text = np.array([p.text_similarity for p in pairs], dtype=float)
    semantic = np.array([math.nan if p.semantic_similarity is None else p.semantic_similarity for p in pairs])
    similarity = np.array([p.similarity for p in pairs], dtype=float)
    lt, ls = levels(text), levels(semantic)
    classes = np.array([size_class(scope_sizes.get(p.scope, 0)) for p in pairs])
    n = len(pairs)
    rng = np.random.default_rng(seed)
    boot_w = rng.multinomial(n, np.full(n, 1 / n), size=samples).astype(float)
    model = fit(lt, ls)
    boot_models = [fit(lt, ls, w) for w in boot_w]
    out: dict[str, dict[str, Any]] = {}
    names = ["all"] + [c for c, _ in SIZE_CLASSES if (classes == c).any()]
    for name in names:
        mask = np.ones(n, bool) if name == "all" else classes == name
        ones = mask.astype(float)
        lam = model.lam if name == "all" else class_lambda(model, lt, ls, ones)
        g = model.posterior(lt, ls, lam)
        gb = np.stack(
            [
                bm.posterior(lt, ls, bm.lam if name == "all" else class_lambda(bm, lt, ls, w * ones))
                for bm, w in zip(boot_models, boot_w, strict=True)
            ]
        )
        point = curves(similarity, g, ones)
        boot = curves(similarity, gb, boot_w * ones)
        out[name] = {
            "pairs": int(mask.sum()),
            "scopes": len({p.scope for p, k in zip(pairs, mask, strict=True) if k}),
            "lambda": round(lam, 6),
            "expected_duplicates": round(float(g[mask].sum()), 2),
            "thresholds": _rows(point, boot, floor),
        }
    return LabelFreeEstimate(floor, n, model, out, boot_info)


def estimate_without_labels(
    entries: Sequence[Entry],
    *,
    floor: float = DEFAULT_FLOOR,
    seed: int = 0,
    samples: int = DEFAULT_SAMPLES,
    progress: Progress | None = None,
    pair_sample: int | None = None,
) -> LabelFreeEstimate:
    """Estimated precision and recall of the duplicate rule at every threshold from ``floor`` up,
    per scope size class, without labels (module docstring). Only reads ``entries``.

    The candidate pairs at the floor may pass ``MEMWORK_MAX_PAIRS`` (5,000 FEBRL records embedded
    with MiniLM: millions of pairs at 0.5): then the refusal names ``pair_sample`` (``--sample-pairs``),
    and with it the pairs are those of ``defrag review --sample-pairs``: exact from the rule's
    threshold (or :data:`~memwork.defrag.review_queue.EXACT_REACH` below it, within the budget) and a
    seeded uniform sample of ``pair_sample`` pairs below, weighted (:func:`estimate_weighted`: class
    ``all`` only); ``population`` states it. Not chosen silently: a sample's figure is not an exact
    one, and whoever runs it should know which they got."""
    floor = unit("floor", floor)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError("seed", seed, "must be a whole number >= 0")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise UsageError("samples", samples, "must be a whole number >= 1")
    if pair_sample is not None:
        return _sampled_estimate(entries, floor, seed, samples, progress, pair_sample)
    try:
        pairs = find_duplicates(entries, floor, progress=progress)
    except UsageError as exc:
        if over_budget(exc):
            raise with_sample_hint(exc) from None
        raise
    sizes = {scope: len(members) for scope, members in by_scope(entries).items()}
    return estimate_pairs(pairs, sizes, floor=floor, seed=seed, samples=samples)


def _sampled_estimate(
    entries: Sequence[Entry],
    floor: float,
    seed: int,
    samples: int,
    progress: Progress | None,
    pair_sample: int,
) -> LabelFreeEstimate:
    """The estimate over the exact band and a uniform pair sample below it (see
    :func:`estimate_without_labels`)."""
    from memwork.defrag.review_queue import DEFAULT_THRESHOLD, exact_band, weighted_population

    if isinstance(pair_sample, bool) or not isinstance(pair_sample, int) or pair_sample < 1:
        raise UsageError("sample_pairs", pair_sample, "must be a whole number >= 1")
    threshold = max(floor, DEFAULT_THRESHOLD)
    band, cutoff = exact_band(entries, threshold, floor, progress=progress)
    sample = sample_scope_pairs(entries, pair_sample, seed=seed, check_from=floor)
    population = weighted_population(band, sample, cutoff)
    estimate = estimate_weighted(
        [p for p, _, _ in population],
        np.array([w for _, w, _ in population]),
        floor=floor,
        seed=seed,
        samples=samples,
    )
    if sample.complete:
        estimate.population = f"every candidate pair ({sample.describe()})"
    else:
        estimate.population = (
            f"every pair from {cutoff} up (exact), below it {sample.describe()}; class 'all' only"
        )
    return estimate


def write_estimate(estimate: LabelFreeEstimate, path: str | Path) -> Path:
    """Write the estimate as JSON, through a temporary file (never half written)."""
    return write_json_file(estimate.to_dict(), path)


def estimate_weighted(
    pairs: Sequence[Pair],
    weights: np.ndarray,
    *,
    floor: float = DEFAULT_FLOOR,
    seed: int = 0,
    samples: int = DEFAULT_SAMPLES,
) -> LabelFreeEstimate:
    """The label-free estimate (class ``all`` only) of a population known through weighted pairs: each
    pair stands for ``weights[k]`` pairs of the store (a uniform sample of pairs below the duplicate
    band, every pair above it with weight 1; see :mod:`memwork.defrag.pair_sample`). Only pairs at or
    above ``floor`` count, as in :func:`estimate_pairs`; the bootstrap resamples the pairs (weights
    kept), seeded."""
    boot_info = {"samples": samples, "seed": seed, "interval": 0.95}
    keep = [k for k, p in enumerate(pairs) if p.similarity >= floor]
    if not keep:
        return LabelFreeEstimate(floor, 0, None, {}, boot_info)
    chosen = [pairs[k] for k in keep]
    w = np.asarray(weights, dtype=float)[keep]
    text = np.array([p.text_similarity for p in chosen], dtype=float)
    semantic = np.array(
        [math.nan if p.semantic_similarity is None else p.semantic_similarity for p in chosen]
    )
    similarity = np.array([p.similarity for p in chosen], dtype=float)
    lt, ls = levels(text), levels(semantic)
    n = len(chosen)
    rng = np.random.default_rng(seed)
    boot_w = rng.multinomial(n, np.full(n, 1 / n), size=samples).astype(float) * w
    model = fit(lt, ls, w)
    g = model.posterior(lt, ls)
    gb = np.stack([(bm := fit(lt, ls, row)).posterior(lt, ls, bm.lam) for row in boot_w])
    point, boot = curves(similarity, g, w), curves(similarity, gb, boot_w)
    total = float(w.sum())
    classes = {
        "all": {
            "pairs": round(total),
            "scopes": len({p.scope for p in chosen}),
            "lambda": round(model.lam, 6),
            "expected_duplicates": round(float((g * w).sum()), 2),
            "thresholds": _rows(point, boot, floor),
        }
    }
    return LabelFreeEstimate(floor, round(total), model, classes, boot_info)
