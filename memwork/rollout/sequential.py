"""The sequential judge: GO or NO-GO at any look at a growing log, without inflating false GOs.

A staged rollout (1 % -> 10 % -> 100 %) judges the comparison log at every stage. A fixed-horizon
test read again and again is wrong more often than its level says; worse, today's safety rules
compare point estimates with budgets (2 errors in 300 is "within 1 %"), so a 2 % error rate passes
a 100-answer stage 40 % of the time. This judge uses **confidence sequences** instead: for every
safety rate it keeps the set of rates still compatible with everything seen so far, valid at every
look at once (Ville's inequality on a beta-binomial mixture martingale, Robbins 1970; Howard et al.
2021), so the log may be judged after every answer and a decision stands at level ``alpha``.

The rates (each a Bernoulli per steady-state comparison, in time order):

================  ==========================================================  ====================
rate              a comparison counts when                                    budget
================  ==========================================================  ====================
errors            the shadow call failed                                      ``max_error_rate``
underfill         the shadow answered fewer items than ``min(k, baseline)``   ``max_underfill_rate``
overP95Slo        the shadow answered slower than ``max_p95_ms``              5 % (p95 within SLO)
overP99Slo        the shadow answered slower than ``max_p99_ms``              1 % (p99 within SLO)
slowerThanBand    (alike backends) shadow > (1 + band) x primary, same call   50 % (a paired sign
                                                                              test of the band)
================  ==========================================================  ====================

At each look: a rate whose whole confidence sequence lies above its budget is a **NO-GO** (proven
breach); when every rate's sequence lies below its budget it is a **GO**; else **continue** (the
stage has too little data: INCONCLUSIVE, saying so). The mixture is Beta(1, 3 / budget): centred
well below the budget, where a passing rollout lives, which makes a GO need fewer answers.

Pure functions; :func:`memwork.rollout.run.judge_log` attaches the result to the judgement (its
NO-GO is a NO-GO), and ``benchmarks/sequential_judge.py`` measures its error rates and sample sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.special import betaln

from memwork.rollout.comparisons import Comparison

GO, NO_GO, CONTINUE = "GO", "NO-GO", "CONTINUE"


def prior_for(budget: float) -> tuple[float, float]:
    """The mixture Beta(a, b) for a rate with this budget: mean about budget / 3."""
    return 1.0, 3.0 / max(budget, 1e-6)


def log_mixture(
    successes: np.ndarray | int, n: np.ndarray | int, p: float, prior: tuple[float, float]
) -> Any:
    """log of the beta-binomial mixture martingale against the rate ``p`` after ``n`` trials with
    ``successes``: at least log(1 / alpha) means ``p`` is outside the confidence sequence."""
    a, b = prior
    s = np.asarray(successes, dtype=float)
    m = np.asarray(n, dtype=float)
    if p <= 0:
        return np.where(s > 0, np.inf, 0.0)
    if p >= 1:
        return np.where(s < m, np.inf, 0.0)
    return betaln(a + s, b + m - s) - betaln(a, b) - s * math.log(p) - (m - s) * math.log1p(-p)


def confidence_sequence(
    successes: int, n: int, alpha: float, prior: tuple[float, float]
) -> tuple[float, float]:
    """The rates still compatible with ``successes`` in ``n`` at level ``alpha``, at any look."""
    if n == 0:
        return 0.0, 1.0
    limit = math.log(1 / alpha)
    centre = successes / n

    def inside(p: float) -> bool:
        return float(log_mixture(successes, n, p, prior)) < limit

    def edge(out: float, inn: float) -> float:
        for _ in range(60):
            mid = (out + inn) / 2
            out, inn = (out, mid) if inside(mid) else (mid, inn)
        return inn

    low = 0.0 if inside(0.0) else edge(0.0, centre)
    high = 1.0 if inside(1.0) else edge(1.0, centre)
    return low, high


def decide_rate(successes: int, n: int, budget: float, alpha: float) -> str:
    """GO when the rate's confidence sequence lies below ``budget``, NO-GO when above, else CONTINUE."""
    if n == 0:
        return CONTINUE
    if float(log_mixture(successes, n, budget, prior_for(budget))) < math.log(1 / alpha):
        return CONTINUE
    return NO_GO if successes / n > budget else GO


@dataclass
class RateTrace:
    """One rate over the log: its indicator per comparison and budget."""

    name: str
    budget: float
    hits: list[bool]

    def at(self, n: int, alpha: float) -> dict[str, Any]:
        s = sum(self.hits[:n])
        low, high = confidence_sequence(s, n, alpha, prior_for(self.budget))
        return {
            "rate": self.name,
            "hits": s,
            "n": n,
            "budget": self.budget,
            "cs": [round(low, 5), round(high, 5)],
            "decision": decide_rate(s, n, self.budget, alpha),
        }


def rate_traces(
    records: Sequence[Comparison],
    *,
    max_error_rate: float,
    max_underfill_rate: float,
    max_p95_ms: float,
    max_p99_ms: float,
    band: float | None,
) -> list[RateTrace]:
    """The safety rates of the steady-state comparisons, in log order (``band`` None: not gated)."""
    traces = [
        RateTrace("errors", max_error_rate, [not r.shadow.ok for r in records]),
        RateTrace(
            "underfill",
            max_underfill_rate,
            [r.both_ok and r.shadow.count < min(r.k, r.primary.count) for r in records],
        ),
    ]
    for name, limit, budget in (("overP95Slo", max_p95_ms, 0.05), ("overP99Slo", max_p99_ms, 0.01)):
        if limit > 0:
            traces.append(
                RateTrace(name, budget, [r.shadow.ok and r.shadow.latency_ms > limit for r in records])
            )
    if band is not None:
        both = [r for r in records if r.both_ok]
        traces.append(
            RateTrace(
                "slowerThanBand", 0.5, [r.shadow.latency_ms > (1 + band) * r.primary.latency_ms for r in both]
            )
        )
    return traces


@dataclass
class SequentialResult:
    """The first look at which the judge decided, and every rate at the last look."""

    decision: str
    decided_at: int | None
    looks: int
    alpha: float
    rates: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_sequence(traces: list[RateTrace], alpha: float, min_samples: int = 20) -> SequentialResult:
    """Read the rates comparison by comparison: NO-GO at the first proven breach (even after an earlier
    GO: the whole time range is signed), else GO at the first look where every rate is proven within
    its budget (not before ``min_samples``), else CONTINUE."""
    length = max((len(t.hits) for t in traces), default=0)
    limit = math.log(1 / alpha)
    # per rate and look: the trials and hits so far, and whether the budget is outside the sequence
    states = []
    for t in traces:
        hits = np.cumsum(np.asarray(t.hits, dtype=float))
        m = np.minimum(np.arange(1, length + 1), len(t.hits))
        s = hits[m - 1] if len(t.hits) else np.zeros(length)
        proven = (m > 0) & (log_mixture(s, m, t.budget, prior_for(t.budget)) >= limit)
        states.append((proven & (s > t.budget * m), proven & (s <= t.budget * m)))
    breach = np.any([b for b, _ in states], axis=0) if states else np.zeros(length, bool)
    within = np.all([w for _, w in states], axis=0) if states else np.zeros(length, bool)
    within &= np.arange(1, length + 1) >= min_samples
    first_breach = int(np.argmax(breach)) + 1 if breach.any() else None
    first_within = int(np.argmax(within)) + 1 if within.any() else None
    if first_breach is not None:  # a breach proven at any look stands, even after an earlier GO
        n = first_breach
        rates = [x.at(min(n, len(x.hits)), alpha) for x in traces]
        bad = [r for r, (b, _) in zip(rates, states, strict=True) if b[n - 1]]
        why = [f"{r['rate']}: {r['hits']} of {r['n']} (CS {r['cs'][0]:g}-{r['cs'][1]:g}) proven above the "
               f"budget {r['budget']:g}" for r in bad]  # fmt: skip
        if first_within is not None and first_within < n:
            why.append(f"a GO at comparison {first_within} was overturned by later comparisons")
        return SequentialResult(NO_GO, n, length, alpha, rates, why)
    if first_within is not None:
        rates = [x.at(min(first_within, len(x.hits)), alpha) for x in traces]
        return SequentialResult(GO, first_within, length, alpha, rates, [])
    rates = [t.at(len(t.hits), alpha) for t in traces]
    open_ = [r["rate"] for r in rates if r["decision"] == CONTINUE]
    pending = ", ".join(open_) or "too few"
    return SequentialResult(
        CONTINUE, None, length, alpha, rates,
        [f"not decided after {length} comparisons: {pending} not yet proven within budget"],
    )  # fmt: skip
