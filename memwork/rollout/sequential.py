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

At each look: a rate proven above its budget is a **NO-GO**; when every rate is proven below its
budget it is a **GO**; else **continue** (the stage has too little data: INCONCLUSIVE, saying so and
about how many comparisons a GO needs at the rate seen). Each proof is a one-sided mixture
martingale against the budget (:func:`log_evidence`): Beta(1, 3 / budget) on the rates below it for
a GO, Beta(1, 1 / budget) on the rates above it for a NO-GO; they test disjoint hypotheses, so each
keeps its own error at ``alpha`` at every look. One function per decision: :func:`proven_within`
(GO), :func:`proven_beyond` (NO-GO), :func:`judge_rate` (both, the bounds, what a GO still needs).

The judge's rate rows (``shadowErrors``, ``underfill``, ``sloP95``, ``sloP99`` in
:mod:`memwork.rollout.judge`) decide with :func:`judge_rate`; the ``sequential`` row reads every
rate comparison by comparison (a breach proven at any earlier look stands) and adds the paired
band. ``benchmarks/sequential_judge.py`` measures error rates and sample sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.special import betainc, betaincc, betaln

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


#: the mixtures of the one-sided tests, as multiples of 1 / budget: Beta(1, 3 / budget) on rates below
#: the budget (where a passing rollout lives: a GO needs ~380 clean comparisons for 1 %, the fixed
#: horizon's floor is 299), Beta(1, 1 / budget) on rates above it (a 3x breach of 1 % is proven after
#: ~250 comparisons on the expected path, 2x after ~930; the two-sided mixture needed ~2,000 for 2x)
GO_PRIOR, NO_GO_PRIOR = 3.0, 1.0


def log_evidence(hits: Any, n: Any, p: float, below: bool, scale: float | None = None) -> Any:
    """log of the mixture martingale against the rate ``p``, the mixture Beta(1, s / ``scale``)
    truncated to the rates below ``p`` (``below``: evidence that the rate is under ``p``) or above it.
    Each rate of the mixture's side gives a test martingale under every rate on the other side, so
    by Ville's inequality it reaches log(1 / alpha) with probability at most alpha, at any look.
    ``scale``: the budget the mixture is shaped for (default ``p``)."""
    s = np.asarray(hits, dtype=float)
    m = np.asarray(n, dtype=float)
    if p <= 0:
        return np.where(s > 0, np.inf, 0.0) if not below else np.zeros_like(s)
    if p >= 1:
        return np.where(s < m, np.inf, 0.0) if below else np.zeros_like(s)
    a = 1.0
    b = (GO_PRIOR if below else NO_GO_PRIOR) / max(scale if scale is not None else p, 1e-6)
    mass = betainc if below else betaincc
    with np.errstate(divide="ignore"):
        return (
            betaln(a + s, b + m - s)
            + np.log(mass(a + s, b + m - s, p))
            - betaln(a, b)
            - math.log(float(mass(a, b, p)))
            - s * math.log(p)
            - (m - s) * math.log1p(-p)
        )


def proven_within(hits: int, n: int, budget: float, alpha: float) -> bool:
    """GO for one rate: the budget is above the rate's upper confidence bound -- the one-sided
    mixture against ``budget`` from below reached log(1 / alpha). Valid at any look, however often."""
    if n <= 0:
        return False
    return bool(float(log_evidence(hits, n, budget, below=True)) >= math.log(1 / alpha))


def proven_beyond(hits: int, n: int, budget: float, alpha: float) -> bool:
    """NO-GO for one rate: the budget is below the rate's lower confidence bound (the one-sided
    mixture from above; a budget of 0 is broken by one occurrence)."""
    if n <= 0:
        return False
    return bool(float(log_evidence(hits, n, budget, below=False)) >= math.log(1 / alpha))


def one_sided_bounds(hits: int, n: int, budget: float, alpha: float) -> tuple[float, float]:
    """(lower, upper) anytime-valid bounds of the rate with the mixtures shaped for ``budget``: the
    largest rate proven exceeded and the smallest proven not reached (0 and 1 when none)."""
    if n <= 0:
        return 0.0, 1.0
    limit = math.log(1 / alpha)
    centre = hits / n
    scale = budget if budget > 0 else 1e-6

    def rejected(p: float, below: bool) -> bool:
        return bool(float(log_evidence(hits, n, p, below, scale)) >= limit)

    high, inside = 1.0, centre  # the upper bound: bisect between the estimate and 1
    for _ in range(30):  # 1e-9 of the rate: far below what is shown
        mid = (inside + high) / 2
        high, inside = (mid, inside) if rejected(mid, True) else (high, mid)
    low, inside = 0.0, centre
    if centre > 0:
        for _ in range(30):  # 1e-9 of the rate: far below what is shown
            mid = (low + inside) / 2
            low, inside = (mid, inside) if rejected(mid, False) else (low, mid)
    return low, high


def needed_for_go(hits: int, n: int, budget: float, alpha: float, limit: int = 10**7) -> int | None:
    """About how many comparisons in all a GO needs if the rate stays as seen so far (the point
    estimate; none seen: none to come). None when the rate seen is at or past the budget: more of
    the same never proves it within."""
    rate = hits / n if n else 0.0
    if budget <= 0 or rate >= budget:
        return None

    def enough(m: int) -> bool:
        return proven_within(round(rate * m), m, budget, alpha)

    high = max(n, 1)
    while not enough(high):
        high *= 2
        if high > limit:
            return None
    low = max(n, 1) if high == max(n, 1) else high // 2
    while low < high:  # the smallest m proving it (monotone along the path of the same rate)
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid + 1, high)
    return high


@dataclass(frozen=True)
class RateCall:
    """One safety rate judged at one look: the point estimate (shown), its confidence sequence and
    the decision -- GO only when proven within ``budget``, NO-GO only when proven beyond it."""

    hits: int
    n: int
    budget: float
    low: float
    high: float
    decision: str  # GO, NO_GO or CONTINUE
    needed: int | None  # about how many comparisons a GO needs at the rate seen (CONTINUE only)

    @property
    def rate(self) -> float:
        return self.hits / self.n if self.n else 0.0

    def waiting(self) -> str:
        """Why there is no decision yet, in one phrase."""
        if self.needed is None:
            return f"not enough data yet (n={self.n}; at the rate seen no number of comparisons proves it)"
        return (
            f"not enough data yet (n={self.n}, needs about {self.needed} in all: the comparisons needed "
            "to prove the budget at the rate seen, at any look)"
        )


def judge_rate(hits: int, n: int, budget: float, alpha: float) -> RateCall:
    """The anytime-valid call on one rate: :func:`proven_within` (GO), :func:`proven_beyond` (NO-GO),
    else CONTINUE with :func:`needed_for_go`."""
    low, high = one_sided_bounds(hits, n, budget, alpha)
    if proven_beyond(hits, n, budget, alpha):
        return RateCall(hits, n, budget, low, high, NO_GO, None)
    if proven_within(hits, n, budget, alpha):
        return RateCall(hits, n, budget, low, high, GO, None)
    return RateCall(hits, n, budget, low, high, CONTINUE, needed_for_go(hits, n, budget, alpha))


@dataclass
class RateTrace:
    """One rate over the log: its indicator per comparison and budget."""

    name: str
    budget: float
    hits: list[bool]

    def at(self, n: int, alpha: float) -> dict[str, Any]:
        s = sum(self.hits[:n])
        call = judge_rate(s, n, self.budget, alpha)
        return {
            "rate": self.name,
            "hits": s,
            "n": n,
            "budget": self.budget,
            "cs": [round(call.low, 5), round(call.high, 5)],
            "decision": call.decision,
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
        beyond = (m > 0) & (log_evidence(s, m, t.budget, below=False) >= limit)
        within = (m > 0) & (log_evidence(s, m, t.budget, below=True) >= limit)
        states.append((beyond, within))
    breach = np.any([b for b, _ in states], axis=0) if states else np.zeros(length, bool)
    within = np.all([w for _, w in states], axis=0) if states else np.zeros(length, bool)
    enough = np.arange(1, length + 1) >= min_samples  # no decision on fewer, like every row
    within &= enough
    breach &= enough
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
