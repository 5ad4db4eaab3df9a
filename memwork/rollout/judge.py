"""The canary judge: GO, NO-GO or INCONCLUSIVE from the shadow-read comparison log, the way automated
canary analysis (Kayenta) judges a deploy.

Every line of the log (written by ``memwork serve`` with ``MEMORY_SHADOW_BACKEND``) compares one
resolve answered by the *primary* (baseline) backend with the same resolve sent to the *shadow*
(target) backend. The log is read strictly by :mod:`memwork.rollout.comparisons` (damaged lines,
duplicates and conflicts are counted, never guessed at); the statistics are in
:mod:`memwork.rollout.stats`; this module classifies each metric and decides. Each metric has a
direction -- only a change in the bad direction can fail it:

==================  ===========  ==============================================================
metric              bad when     how it is classified
==================  ===========  ==============================================================
logQuality          > share      damaged lines plus conflicting repeats of a requestId, over those
                                 plus the unique comparisons, above ``max_damaged_share`` (1 %):
                                 NODATA -- what cannot be read may be exactly the failures.
latencyMs           increases    two samples (primary vs shadow latency, both answered):
resultCount         decreases    a one-sided Mann-Whitney U test (scipy) at ``confidence`` in the
                                 bad direction, and the Hodges-Lehmann shift (median of all
                                 pairwise differences) with its distribution-free CI, relative to
                                 the baseline median. Significant and the shift past the ``band``
                                 (25 %): FAIL. Significant, inside the band, CI reaching past it:
                                 MARGINAL. Otherwise PASS -- but "not significant" counts only
                                 when the sample could have shown the band's shift: if the
                                 smallest attainable p is above alpha it is NODATA; else PASS when
                                 the CI rules out a bad shift of the band, or when the minimum
                                 detectable shift (power 80 %, Noether) is inside the band; NODATA
                                 otherwise.
latencyP95,         increases    the tail: exact order-statistic bounds (alpha/2 each side). The
latencyP99                       shadow's lower bound above (1 + band) x the primary's upper
                                 bound: FAIL; the point estimate past the band but not proven:
                                 MARGINAL; else PASS. Too few answers to bound the quantile
                                 (p95: 72, p99: 368 at 95 %): NODATA (p99 is then not required).
overlapAtK, rbo,    decreases    one sample: the mean against the ideal 1.0 less the band, with a
top1Agree                        seeded bootstrap CI. Wholly at or above: PASS; wholly below:
                                 FAIL; straddling: MARGINAL.
crossUser           any          critical: one memory of another user in either answer fails the
dimensionMismatch   any          run; so does one dimension mismatch.
shadowErrors,       > budget     critical rates (errors, underfill, answers past the p95 / p99
underfill,                       SLO): an anytime-valid confidence sequence (:mod:`.sequential`).
sloP95, sloP99                   PASS only when its upper bound is below the budget, FAIL when its
                                 lower bound is above; else "not enough data yet (n=..., needs
                                 about ...)": 0 errors in 80 is not "within 1 %" (about 380 are
                                 needed), however often the growing log is judged.
==================  ===========  ==============================================================

Comparisons of different primary/shadow backend pairs are never pooled: each pair is judged on its
own. A log holding several pairs is at best INCONCLUSIVE unless one pair is selected
(``primary_backend`` / ``shadow_backend``); a NO-GO of any judged pair is a NO-GO.

A metric with fewer than ``min_samples`` usable values is NODATA. Verdict: any FAIL -> NO-GO (exit
1); else any required NODATA or MARGINAL -> INCONCLUSIVE (exit 3: neither GO nor NO-GO, a person
decides); else GO (exit 0). Below :func:`minimum_paired_answers` paired answers a pair is never GO.

Statistics only: this module reads no file and shows nothing. :func:`memwork.rollout.run.judge_log`
reads the log and the input reports (a failing one is a NO-GO reason) and signs the verdict with
:func:`memwork.rollout.signoff.signoff_block`; :mod:`memwork.reports.signoff_view` shows it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from memwork.errors import UsageError
from memwork.rollout import sequential, stats
from memwork.rollout.comparisons import Comparison, ComparisonLog, Side, request_key
from memwork.rollout.roles import (
    AGREEMENT_METRICS,
    DECIDES,
    SHOWN,
    RankingOf,
    RolloutKind,
    check_ranking,
    rollout_kind,
    undeclared,
)

if TYPE_CHECKING:
    from memwork.rollout.certificate import Certificate

PASS, MARGINAL, FAIL, NODATA, OFF = "PASS", "MARGINAL", "FAIL", "NODATA", "OFF"
GO, NO_GO, INCONCLUSIVE = "GO", "NO-GO", "INCONCLUSIVE"
#: the exit code of each verdict (``memwork canary judge``, ``memwork report run canary_signoff``)
EXIT_CODES = {GO: 0, NO_GO: 1, INCONCLUSIVE: 3}
INCREASE_IS_BAD, DECREASE_IS_BAD = "increase is bad", "decrease is bad"
#: the probability that a shift as large as the band is detected, for "not significant" to count
POWER = 0.80
#: latency quantiles judged; the first is required, the later ones only when the sample bounds them
TAIL_QUANTILES = (0.95, 0.99)
#: the pair label of the log-wide metrics
LOG_WIDE = ""


@dataclass(frozen=True)
class Thresholds:
    """What the judge decides with; every value is recorded in the sign-off."""

    band: float = 0.25
    confidence: float = 0.95
    min_samples: int = 20
    max_error_rate: float = 0.01
    max_damaged_share: float = 0.01
    #: the share of answers where the shadow returned fewer items than the baseline could (k or all)
    max_underfill_rate: float = 0.01
    #: the latency SLO of the shadow, in ms (0: that quantile is not gated)
    max_p95_ms: float = 250.0
    max_p99_ms: float = 1000.0
    #: the relative latency band against the baseline; 0: ``band`` when the backends rank alike, not
    #: gated (shown) when they rank differently -- a semantic target embeds each query, it is slower
    #: than a recency list by design, and the SLO says what was agreed
    latency_band: float = 0.0
    #: answers in the first ``warmup_s`` seconds after the service (re)started are warm-up, apart
    warmup_s: float = 30.0
    #: how each side ranks, when not as its backend declares (recency, semantic, policy)
    primary_ranking: str = ""
    shadow_ranking: str = ""

    def check(self) -> None:
        """Impossible settings are usage errors, before the log is read."""
        if not 0 < float(self.band) < 1:
            raise UsageError("band", self.band, "must be between 0 and 1 (0.25 = +/-25 % of the baseline)")
        if not 0.5 <= float(self.confidence) < 1:
            raise UsageError("confidence", self.confidence, "must be from 0.5 to below 1 (e.g. 0.95)")
        if not 2 <= int(self.min_samples) <= 1_000_000:
            raise UsageError("min_samples", self.min_samples, "must be from 2 to 1000000")
        if not 0 <= float(self.max_error_rate) <= 1:
            raise UsageError("max_error_rate", self.max_error_rate, "must be from 0 to 1")
        if not 0 <= float(self.max_damaged_share) < 1:
            raise UsageError(
                "max_damaged_share", self.max_damaged_share, "must be from 0 to below 1 (0.01 = 1 %)"
            )
        if not 0 <= float(self.max_underfill_rate) <= 1:
            raise UsageError("max_underfill_rate", self.max_underfill_rate, "must be from 0 to 1")
        for name in ("max_p95_ms", "max_p99_ms", "warmup_s"):
            value = getattr(self, name)
            if not 0 <= float(value) < math.inf:
                raise UsageError(name, value, "must be 0 (off) or a positive number")
        if not 0 <= float(self.latency_band) < 100:
            raise UsageError("latency_band", self.latency_band, "must be 0 (by rollout kind) or positive")
        check_ranking("primary_ranking", self.primary_ranking)
        check_ranking("shadow_ranking", self.shadow_ranking)

    @property
    def alpha(self) -> float:
        """``1 - confidence``, exactly (0.95 gives 0.05, not 0.05000000000000004)."""
        return stats.alpha_of(self.confidence)


def minimum_paired_answers(th: Thresholds) -> int:
    """The fewest answers both sides gave below which a pair can never be GO: ``min_samples``, the
    size at which the one-sided test can reach ``alpha`` at all, and the size that bounds p95."""
    return max(
        int(th.min_samples),
        stats.smallest_testable_size(th.alpha),
        stats.smallest_bounded_size(TAIL_QUANTILES[0], th.alpha / 2),
    )


@dataclass
class MetricResult:
    """One row of the metric table."""

    metric: str
    kind: str  # two-sample, tail, agreement, critical or log
    direction: str
    classification: str
    n_baseline: int
    n_target: int
    baseline: float | None = None  # baseline median / quantile, the ideal (agreement), the budget
    target: float | None = None  # target median / quantile, the mean agreement, the observed rate
    estimate: float | None = None  # Hodges-Lehmann shift, relative tail increase, mean, rate, share
    ci_low: float | None = None
    ci_high: float | None = None
    relative: float | None = None  # estimate relative to the baseline (two-sample)
    threshold: float | None = None
    p_value: float | None = None
    min_p: float | None = None  # the smallest p the test could give with these sample sizes
    detectable: float | None = None  # the minimum detectable shift, relative to the baseline
    detail: str = ""
    required: bool = True
    pair: str = LOG_WIDE  # "<primary> -> <shadow>", or "" for the log-wide metrics
    role: str = DECIDES  # or "shown": in the table, never in the verdict (see memwork.rollout.roles)
    unit: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: _rounded(v) for k, v in asdict(self).items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 4)
    return value


def _percent(value: float) -> str:
    return f"{value:.1%}" if math.isfinite(value) else "unbounded"


# ---- the pairs -----------------------------------------------------------------------------------


@dataclass
class PairRecords:
    """The comparisons of one primary/shadow backend pair (never pooled with another pair's)."""

    primary: str | None
    shadow: str | None
    records: list[Comparison] = field(default_factory=list)
    conflicts: list[Comparison] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.shadow is None:
            return LOG_WIDE
        return f"{self.primary or '(no primary)'} -> {self.shadow}"

    def paired(self, value: Callable[[Side], float]) -> tuple[list[float], list[float]]:
        """``value`` of each side (primary then shadow) over the records both sides answered."""
        both = [r for r in self.records if r.both_ok]
        return [value(r.primary) for r in both], [value(r.shadow) for r in both]


def _pair_key(record: Comparison) -> tuple[str | None, str | None]:
    return record.primary.backend, record.shadow.backend


def split_pairs(log: ComparisonLog) -> list[PairRecords]:
    """The log's records by (primary, shadow) backend, most comparisons first. A record whose primary
    failed before naming a backend joins the one pair with its shadow, if there is exactly one."""
    pairs: dict[tuple[str | None, str | None], PairRecords] = {}
    named = {_pair_key(r) for r in [*log.records, *log.conflicts] if r.primary.backend is not None}

    def key_of(record: Comparison) -> tuple[str | None, str | None]:
        if record.primary.backend is None:
            same_shadow = [k for k in named if k[1] == record.shadow.backend]
            if len(same_shadow) == 1:
                return same_shadow[0]
        return _pair_key(record)

    for record in log.records:
        key = key_of(record)
        pairs.setdefault(key, PairRecords(*key)).records.append(record)
    for record in log.conflicts:
        key = key_of(record)
        pairs.setdefault(key, PairRecords(*key)).conflicts.append(record)
    return sorted(pairs.values(), key=lambda p: (-len(p.records), p.label))


#: whether a selected backend name (or alias) names a backend of the log: exact by default; the
#: rollout passes :func:`memwork.rollout.app_canary.same_backend`, which knows the aliases
SameBackend = Callable[[str, str | None], bool]


def select_pairs(
    pairs: list[PairRecords],
    primary_backend: str,
    shadow_backend: str,
    same_backend: SameBackend = operator.eq,
) -> list[PairRecords]:
    """The pairs matching the selection (every pair when nothing is selected); a selection matching no
    pair of a non-empty log is a usage error naming the pairs there are."""

    def names(expected: str, actual: str | None) -> bool:
        return not expected or same_backend(expected, actual)

    chosen = [p for p in pairs if names(primary_backend, p.primary) and names(shadow_backend, p.shadow)]
    if chosen or not pairs or not (primary_backend or shadow_backend):
        return chosen or pairs
    name, value = (
        ("shadow_backend", shadow_backend) if shadow_backend else ("primary_backend", primary_backend)
    )
    present = ", ".join(p.label for p in pairs)
    raise UsageError(name, value, f"no comparison of that backend in the log (pairs: {present})")


# ---- the metrics -----------------------------------------------------------------------------


def judge_two_sample(
    name: str, baseline: list[float], target: list[float], direction: str, th: Thresholds
) -> MetricResult:
    """Mann-Whitney U in the bad direction plus the practical-significance band on the HL shift; a
    "no significant change" counts only when the sample could have detected the band's shift."""
    result = MetricResult(name, "two-sample", direction, NODATA, len(baseline), len(target))
    result.threshold = th.band
    n = min(len(baseline), len(target))
    if n < th.min_samples:
        result.detail = f"{n} paired answers, fewer than {th.min_samples}"
        return result
    sign = 1.0 if direction == INCREASE_IS_BAD else -1.0
    median = float(np.median(baseline))
    result.baseline, result.target = median, float(np.median(target))
    shift, low, high = stats.hodges_lehmann(baseline, target, th.confidence)
    result.estimate, result.ci_low, result.ci_high = shift, low, high
    scale = abs(median)

    def relative(x: float) -> float:
        return x / scale if scale > 0 else (0.0 if x == 0 else math.copysign(math.inf, x))

    result.relative = relative(shift)
    bad_shift = relative(sign * shift)
    bad_reach = max(relative(sign * low), relative(sign * high))
    result.p_value = stats.mann_whitney_p(baseline, target, sign > 0)
    result.min_p = stats.smallest_attainable_p(len(baseline), len(target))
    mde = stats.minimum_detectable_shift(baseline, len(target), th.alpha, POWER)
    result.detectable = relative(mde)
    significant = stats.at_most(result.p_value, th.alpha)
    band, what = f"{th.band:.0%}", direction.split()[0]
    power = (
        f"detectable at n={len(baseline)}/{len(target)}: {_percent(result.detectable)} "
        f"(power {POWER:.0%}, alpha {th.alpha:g})"
    )
    if significant and bad_shift > th.band:
        result.classification = FAIL
        result.detail = f"significant {what} of {bad_shift:.1%}, beyond the {band} band"
    elif significant and bad_reach > th.band:
        result.classification = MARGINAL
        result.detail = (
            f"significant {bad_shift:.1%} inside the {band} band, but the CI reaches {bad_reach:.1%}"
        )
    elif significant:
        result.classification = PASS
        result.detail = f"significant but {bad_shift:.1%}, inside the {band} band"
    elif not stats.at_most(result.min_p, th.alpha):
        needed = stats.smallest_testable_size(th.alpha)
        result.detail = (
            f"no test possible: with {len(baseline)}/{len(target)} answers the smallest attainable p is "
            f"{result.min_p:.3g}, above alpha {th.alpha:g} (at least {needed} a side needed)"
        )
    elif bad_reach <= th.band:  # the interval itself rules out a bad shift of the band
        result.classification = PASS
        result.detail = (
            f"no significant {what} (p={result.p_value:.3g}); the CI rules out more than "
            f"{max(bad_reach, 0.0):.1%}, inside the {band} band"
        )
    elif result.detectable > th.band:
        result.detail = (
            f"no significant {what} (p={result.p_value:.3g}), but too few answers: {power}, "
            f"wider than the {band} band"
        )
    else:
        result.classification = PASS
        result.detail = f"no significant {what} (p={result.p_value:.3g}); {power}"
    return result


def judge_tail(baseline: list[float], target: list[float], q: float, th: Thresholds) -> MetricResult:
    """The shadow's ``q``-quantile against (1 + band) x the primary's, by exact order-statistic bounds
    (each at alpha/2, so the comparison holds at ``confidence``)."""
    name = f"latencyP{round(q * 100)}"
    result = MetricResult(name, "tail", INCREASE_IS_BAD, NODATA, len(baseline), len(target))
    result.threshold = th.band
    result.required = q == TAIL_QUANTILES[0]
    n = min(len(baseline), len(target))
    needed = max(int(th.min_samples), stats.smallest_bounded_size(q, th.alpha / 2))
    label = f"p{q * 100:g}"
    if n < needed:
        result.detail = (
            f"{n} paired answers: at least {needed} are needed to bound {label} at {th.confidence:.0%}"
        )
        return result
    half = th.alpha / 2
    low_b, high_b = stats.quantile_bounds(baseline, q, half)
    low_t, high_t = stats.quantile_bounds(target, q, half)
    base, shadow = stats.sample_quantile(baseline, q), stats.sample_quantile(target, q)
    result.baseline, result.target = base, shadow

    def ratio(top: float | None, bottom: float | None) -> float | None:
        if top is None or bottom is None:
            return None
        return top / bottom - 1 if bottom > 0 else (0.0 if top <= 0 else math.inf)

    result.estimate = result.relative = ratio(shadow, base)
    result.ci_low, result.ci_high = ratio(low_t, high_b), ratio(high_t, low_b)
    limit = 1 + th.band
    shown = f"{label} {base:.3g} -> {shadow:.3g} ms ({_percent(result.estimate or 0.0)})"
    if low_t is not None and high_b is not None and low_t > limit * high_b:
        result.classification = FAIL
        result.detail = (
            f"{shown}: the shadow's {label} is at least {low_t:.3g} ms, beyond {limit:g} x the primary's "
            f"at most {high_b:.3g} ms"
        )
    elif shadow > limit * base:
        result.classification = MARGINAL
        result.detail = f"{shown}: past the {th.band:.0%} band, not proven at {th.confidence:.0%}"
    else:
        result.classification = PASS
        result.detail = f"{shown}: inside the {th.band:.0%} band"
    return result


def judge_agreement(name: str, values: list[float], th: Thresholds, ideal: float = 1.0) -> MetricResult:
    """Mean agreement against the ideal less the band, by its bootstrap CI. The ideal is 1.0, or the
    baseline's agreement with itself (A/A) when the noise floor was measured."""
    result = MetricResult(name, "agreement", DECREASE_IS_BAD, NODATA, len(values), len(values))
    result.baseline, result.threshold = ideal, ideal - th.band
    if len(values) < th.min_samples:
        result.detail = f"{len(values)} comparisons, fewer than {th.min_samples}"
        return result
    mean, low, high = stats.bootstrap_mean_ci(values, th.confidence)
    result.target, result.estimate, result.ci_low, result.ci_high = mean, mean, low, high
    threshold = result.threshold
    if low >= threshold:
        result.classification, how = PASS, "at or above"
    elif high < threshold:
        result.classification, how = FAIL, "below"
    else:
        result.classification, how = MARGINAL, "straddling"
    result.detail = (
        f"mean {mean:.3f}, CI {how} the threshold {threshold:.2f} (ideal {ideal:.3g} - {th.band:.0%})"
    )
    return result


def judge_flag(name: str, total: int, flagged: int, what: str) -> MetricResult:
    """A critical metric: any flagged comparison fails the run on its own."""
    result = MetricResult(name, "critical", "any is bad", NODATA, total, total)
    result.baseline, result.threshold = 0.0, 0.0
    result.target = result.estimate = float(flagged)
    if flagged:
        result.classification = FAIL
        result.detail = f"{flagged} of {total} comparisons with {what}"
    elif not total:
        result.detail = "no comparisons"
    else:
        result.classification = PASS
        result.detail = f"none in {total} comparisons"
    return result


def judge_rate(result: MetricResult, hits: int, n: int, budget: float, th: Thresholds, seen: str) -> None:
    """Classify a safety rate anytime-validly (:func:`memwork.rollout.sequential.judge_rate`): PASS
    only when the upper bound of its confidence sequence is below ``budget``, FAIL only when the lower
    bound is above it, else MARGINAL (the rate seen is past the budget, not proven) or NODATA (not
    enough data yet, with about how many comparisons a GO needs). The point estimate stays shown; the
    interval is the confidence sequence, valid however often the growing log is judged."""
    call = sequential.judge_rate(hits, n, budget, th.alpha)
    result.target = result.estimate = call.rate
    result.ci_low, result.ci_high = call.low, call.high
    cs = f"{th.confidence:.0%} confidence sequence {call.low:.2%}-{call.high:.2%}"
    if call.decision == sequential.NO_GO:
        result.classification = FAIL
        result.detail = f"{seen}; proven above the budget at any look ({cs})"
    elif call.decision == sequential.GO and n >= th.min_samples:
        result.classification = PASS
        result.detail = f"{seen}; proven within the budget at any look ({cs})"
    elif call.decision == sequential.GO:  # proven, but the judge reads no fewer than min_samples
        result.classification = NODATA
        result.detail = f"{seen}; proven within the budget, but n={n} is below min_samples {th.min_samples}"
    elif call.rate > budget:
        result.classification = MARGINAL
        result.detail = f"{seen}; past the budget, not proven ({cs}): {call.waiting()}"
    else:
        result.classification = NODATA
        result.detail = f"{seen}; {call.waiting()} ({cs})"


def judge_error_rate(records: Sequence[Comparison], th: Thresholds) -> MetricResult:
    """The shadow's error rate against the budget (critical), by its confidence sequence
    (:func:`judge_rate`): 0 errors in 80 is not yet "within 1 %"."""
    errors = sum(not r.shadow.ok for r in records)
    result = MetricResult("shadowErrors", "critical", INCREASE_IS_BAD, NODATA, len(records), len(records))
    result.baseline = result.threshold = th.max_error_rate
    if not records:
        result.detail = "no comparisons"
        return result
    rate = errors / len(records)
    seen = f"{errors} of {len(records)} shadow calls failed ({rate:.2%}; budget {th.max_error_rate:.2%})"
    judge_rate(result, errors, len(records), th.max_error_rate, th, seen)
    return result


def judge_log_quality(log: ComparisonLog, th: Thresholds) -> MetricResult:
    """Damaged lines and conflicting repeats against ``max_damaged_share``: what cannot be read may be
    exactly the failing comparisons, so past the share the log cannot support a verdict."""
    share = log.unusable_share
    unique = len(log.records)
    result = MetricResult("logQuality", "log", INCREASE_IS_BAD, PASS, unique, unique)
    result.baseline = result.threshold = th.max_damaged_share
    result.target, result.estimate = float(log.unusable), share
    parts = [f"{log.lines} lines: {unique} comparisons", f"{log.damaged} damaged"]
    parts += [f"{len(log.conflicts)} reusing a requestId with other content"] if log.conflicts else []
    parts += [f"{log.duplicates} repeats counted once"] if log.duplicates else []
    parts += ["the last line still being written (ignored)"] if log.incomplete_last_line else []
    detail = ", ".join(parts) + f" ({share:.1%} unusable; {th.max_damaged_share:.1%} allowed)"
    if log.damage_examples:
        detail += f"; first damaged line {log.damage_examples[0]}"
    if not stats.at_most(share, th.max_damaged_share):
        result.classification = NODATA
    result.detail = detail
    return result


def _latency(side: Side) -> float:
    return side.latency_ms


def _count(side: Side) -> float:
    return float(side.count)


def judge_underfill(records: Sequence[Comparison], th: Thresholds) -> MetricResult:
    """The share of answers in which the shadow answered (ok) but returned fewer items than the
    baseline could -- ``min(k, primary count)`` -- against ``max_underfill_rate`` (critical, by its
    confidence sequence: :func:`judge_rate`): an empty answer is not a fast answer."""
    both = [r for r in records if r.both_ok]
    short = sum(r.shadow.count < min(r.k, r.primary.count) for r in both)
    empty = sum(r.shadow.count == 0 < r.primary.count for r in both)
    result = MetricResult("underfill", "critical", INCREASE_IS_BAD, NODATA, len(both), len(both))
    result.baseline = result.threshold = th.max_underfill_rate
    if not both:
        result.detail = "no answer of both sides"
        return result
    rate = short / len(both)
    seen = (
        f"{short} of {len(both)} shadow answers had fewer items than the baseline's ({empty} empty; "
        f"{rate:.2%}; budget {th.max_underfill_rate:.2%})"
    )
    judge_rate(result, short, len(both), th.max_underfill_rate, th, seen)
    return result


def judge_slo(target: list[float], q: float, limit_ms: float, th: Thresholds) -> MetricResult:
    """The shadow's ``q``-quantile latency against an absolute SLO in ms. "p95 within the SLO" is "at
    most 5 % of answers slower than the SLO": that rate is decided by its confidence sequence
    (:func:`judge_rate`, valid at any look); the quantile and its exact order-statistic bounds are
    shown."""
    label = f"p{q * 100:g}"
    result = MetricResult(f"sloP{round(q * 100)}", "slo", INCREASE_IS_BAD, NODATA, 0, len(target))
    result.unit = "ms"
    result.required = q == TAIL_QUANTILES[0]
    if limit_ms <= 0:
        result.classification, result.required, result.role = OFF, False, SHOWN
        result.detail = f"no {label} SLO set (max_{label}_ms 0)"
        return result
    result.threshold = result.baseline = float(limit_ms)
    if not target:
        result.detail = "no shadow answers"
        return result
    over = sum(ms > limit_ms for ms in target)
    budget = round(1 - q, 10)
    seen = f"{over} of {len(target)} shadow answers over {limit_ms:g} ms ({label} SLO: {budget:.0%} may be)"
    low = high = None
    if len(target) >= stats.smallest_bounded_size(q, th.alpha):
        low, high = stats.quantile_bounds(target, q, th.alpha)
        seen += (f"; shadow {label} {stats.sample_quantile(target, q):.1f} ms (fixed-horizon bounds "
                 f"{low or 0:.1f}-{high or 0:.1f} ms)")  # fmt: skip
    judge_rate(result, over, len(target), budget, th, seen)
    # the table shows the quantile in ms and its bounds; the rate's sequence is in the detail
    result.target = result.estimate = stats.sample_quantile(target, q)
    result.ci_low, result.ci_high = low, high
    return result


#: warm-up ends after this many shadow calls of a start, even inside ``warmup_s`` (a short burst of
#: traffic right after a start still has a steady state to judge)
WARMUP_MAX_CALLS = 10


def warm_and_steady(
    records: Sequence[Comparison], warmup_s: float
) -> tuple[list[Comparison], list[Comparison]]:
    """The records of the warm-up after each (re)start of their service -- within ``warmup_s``
    seconds and among its first :data:`WARMUP_MAX_CALLS` calls -- and the rest, in log order."""
    seen: dict[Any, int] = {}
    warm_ids: set[int] = set()
    for r in sorted(records, key=lambda r: (r.ts, request_key(r.request_id))):
        if r.started_at is None:
            continue
        age = (r.ts - r.started_at).total_seconds()
        calls = seen.get(r.started_at, 0)
        if age < warmup_s and calls < WARMUP_MAX_CALLS:
            warm_ids.add(id(r))
        seen[r.started_at] = calls + 1
    warm = [r for r in records if id(r) in warm_ids]
    steady = [r for r in records if id(r) not in warm_ids]
    return warm, steady


def judge_warmup(warm: Sequence[Comparison], records: Sequence[Comparison], th: Thresholds) -> MetricResult:
    """Warm-up, shown apart (never decides): its errors and latency, so one cold call after a restart
    does not decide a stage and a slow start is still visible."""
    result = MetricResult("warmUp", "warm-up", INCREASE_IS_BAD, PASS, len(warm), len(warm), role=SHOWN)
    result.required, result.unit, result.threshold = False, "s", th.warmup_s
    if not any(r.started_at is not None for r in records):
        result.classification = NODATA
        result.detail = "the log records no service start (startedAt): warm-up not separated"
        return result
    errors = sum(not r.shadow.ok for r in warm)
    ms = [r.shadow.latency_ms for r in warm if r.shadow.ok]
    result.target = result.estimate = float(errors)
    p95 = f", shadow p95 {stats.sample_quantile(ms, 0.95):.1f} ms" if ms else ""
    result.detail = (
        f"{len(warm)} answers in the first {th.warmup_s:g} s (at most {WARMUP_MAX_CALLS} calls) after a "
        "(re)start, judged apart: "
        f"{errors} shadow errors{p95}"
    )
    return result


def judge_sequential(records: Sequence[Comparison], th: Thresholds, band: float | None) -> MetricResult:
    """The anytime-valid sequential judge over the steady-state comparisons in log order
    (:mod:`memwork.rollout.sequential`): a breach proven at any look is a FAIL; not yet proven within
    every budget is shown (the stage needs more data), never a GO on its own."""
    traces = sequential.rate_traces(
        # in time order, ties by request id: the same comparisons give the same looks however the
        # log's lines were ordered (merged, re-shipped)
        sorted(records, key=lambda r: (r.ts, request_key(r.request_id))),
        max_error_rate=th.max_error_rate,
        max_underfill_rate=th.max_underfill_rate,
        max_p95_ms=th.max_p95_ms,
        max_p99_ms=th.max_p99_ms,
        band=band,
    )
    found = sequential.judge_sequence(traces, th.alpha, int(th.min_samples))
    result = MetricResult("sequential", "sequential", INCREASE_IS_BAD, NODATA, len(records), len(records))
    result.required = False
    result.estimate = float(found.decided_at) if found.decided_at is not None else None
    rates = "; ".join(f"{r['rate']} {r['hits']}/{r['n']} CS {r['cs'][0]:.3g}-{r['cs'][1]:.3g} "
                      f"(budget {r['budget']:g})"
                      for r in found.rates)  # fmt: skip
    if found.decision == sequential.NO_GO:
        result.classification = FAIL
        result.detail = f"anytime-valid at {th.confidence:.0%}: " + "; ".join(found.reasons)
    elif found.decision == sequential.GO:
        result.classification = PASS
        result.detail = f"every rate proven within budget at comparison {found.decided_at}: {rates}"
    else:
        result.role = SHOWN
        result.detail = f"{found.reasons[0]} (shown; {rates})"
    result.pair = LOG_WIDE
    return result


def latency_band(kind: RolloutKind, th: Thresholds) -> tuple[float, bool, str]:
    """The relative latency band, whether it decides, and why."""
    if th.latency_band > 0:
        return th.latency_band, True, f"latency_band {th.latency_band:.0%} set"
    if kind.agreement_decides:
        return th.band, True, f"backends rank alike: band {th.band:.0%}"
    return (
        th.band,
        False,
        "backends rank differently: relative latency shown, the SLO decides (latency_band 0)",
    )


def judge_pair(
    pair: PairRecords, th: Thresholds, noise: NoiseFloor | None = None, ranking_of: RankingOf = undeclared
) -> tuple[list[MetricResult], RolloutKind]:
    """Every metric of one backend pair, critical ones first, each with its role for the pair's kind
    (:mod:`memwork.rollout.roles`); answers of the warm-up are apart from the steady state."""
    kind = rollout_kind(pair.primary, pair.shadow, th.primary_ranking, th.shadow_ranking, ranking_of)
    all_records = pair.records
    warm, records = warm_and_steady(all_records, th.warmup_s)
    steady = PairRecords(pair.primary, pair.shadow, records)
    by_request: dict[str, bool] = {}
    for record in [*all_records, *pair.conflicts]:  # a flag in any copy of a request counts
        by_request[record.request_id] = by_request.get(record.request_id, False) or record.cross_user
    mismatched = {r.request_id for r in [*all_records, *pair.conflicts] if r.dimension_mismatch}
    base_ms, shadow_ms = steady.paired(_latency)
    answered_ms = [r.shadow.latency_ms for r in records if r.shadow.ok]
    band, band_decides, band_why = latency_band(kind, th)
    spread = noise.latency_spread if noise is not None and noise.measured else 0.0
    lat_th = replace(th, band=band + spread)
    latency = [
        judge_two_sample("latencyMs", base_ms, shadow_ms, INCREASE_IS_BAD, lat_th),
        *(judge_tail(base_ms, shadow_ms, q, lat_th) for q in TAIL_QUANTILES),
    ]
    for metric in latency:
        metric.unit = "ms"
        note = band_why + (f", widened by the A/A spread {spread:.0%}" if spread else "")
        metric.detail = f"{metric.detail} [{note}]"
        if not band_decides:
            metric.role, metric.required = SHOWN, False
    metrics = [
        judge_flag("crossUser", len(all_records), sum(by_request.values()), "a memory of another user"),
        judge_flag("dimensionMismatch", len(all_records), len(mismatched), "an embedding dimension mismatch"),
        judge_error_rate(records, th),
        judge_underfill(records, th),
        judge_slo(answered_ms, 0.95, th.max_p95_ms, th),
        judge_slo(answered_ms, 0.99, th.max_p99_ms, th),
        *latency,
        judge_two_sample("resultCount", *steady.paired(_count), DECREASE_IS_BAD, th),
    ]
    both = [r for r in records if r.both_ok]
    for name, value in zip(AGREEMENT_METRICS, ("overlap_at_k", "rbo", "top1_agree"), strict=True):
        values = [getattr(r, value) for r in both]
        ideal = noise.agreement.get(name, 1.0) if noise is not None and noise.measured else 1.0
        metric = judge_agreement(name, [v for v in values if v is not None], th, ideal)
        if not kind.agreement_decides:
            metric.role, metric.required = SHOWN, False
            metric.detail = f"{metric.detail}; shown, not decided: {kind.sentence()}"
        metrics.append(metric)
    metrics.append(judge_sequential(records, th, band if band_decides else None))
    metrics.append(judge_warmup(warm, all_records, th))
    for metric in metrics:
        metric.pair = pair.label
    return metrics, kind


# ---- the verdict ---------------------------------------------------------------------------------


def reason_of(metric: MetricResult, labelled: bool) -> str:
    """``metric: why`` (``metric (pair): why`` when the log holds several pairs)."""
    name = f"{metric.metric} ({metric.pair})" if labelled and metric.pair else metric.metric
    if metric.classification == FAIL:
        return f"{name}: {metric.detail}"
    return f"{name}: {metric.classification} ({metric.detail})"


def decide(
    metrics: list[MetricResult],
    extra_failures: Iterable[str] = (),
    extra_undecided: Iterable[str] = (),
    *,
    labelled: bool = False,
) -> tuple[str, list[str]]:
    """NO-GO on any FAIL; else INCONCLUSIVE on a required NODATA or a MARGINAL; else GO."""
    metrics = [m for m in metrics if m.role != SHOWN]
    failures = [reason_of(m, labelled) for m in metrics if m.classification == FAIL]
    failures += list(extra_failures)
    if failures:
        return NO_GO, failures
    undecided = [
        reason_of(m, labelled)
        for m in metrics
        if m.classification == MARGINAL or (m.classification == NODATA and m.required)
    ]
    undecided += list(extra_undecided)
    if undecided:
        return INCONCLUSIVE, [*undecided, "neither GO nor NO-GO: a person must decide"]
    return GO, []


@dataclass
class PairJudgement:
    """One backend pair's metrics and its own verdict."""

    primary: str | None
    shadow: str | None
    records: int
    metrics: list[MetricResult]
    verdict: str
    reasons: list[str]
    latency_ms: dict[str, list[float]]
    kind: RolloutKind | None = None

    @property
    def label(self) -> str:
        return PairRecords(self.primary, self.shadow).label

    def to_dict(self) -> dict[str, Any]:
        return {
            "primary": self.primary,
            "shadow": self.shadow,
            "records": self.records,
            "verdict": self.verdict,
            "rollout_kind": None if self.kind is None else self.kind.to_dict(),
        }


def judge_certificate(kind: RolloutKind, certificate: Certificate | None, waiver: str) -> MetricResult:
    """The quality gate of a rollout between backends that rank differently: the migration
    certificate (required), or a waiver with its reason; between alike backends agreement decides and
    the certificate, when given, is shown."""
    result = MetricResult("certificate", "certificate", "must pass", NODATA, 0, 0)
    if certificate is not None:
        certificate = certificate.for_pair(kind.primary, kind.shadow)  # refused when it covers another pair
        ref = f"run {certificate.run_id}, digest {certificate.digest or certificate.sha256[:16]}"
        if certificate.passed:
            result.classification = PASS
            result.detail = f"migration certificate {certificate.verdict} ({ref})"
        else:
            why = "; ".join(certificate.reasons[:3]) or "no reasons given"
            result.classification = FAIL
            result.detail = f"migration certificate {certificate.verdict} ({ref}): {why}"
    elif waiver.strip():
        result.classification, result.role, result.required = OFF, SHOWN, False
        result.detail = f"waived: {waiver.strip()}"
    else:
        result.classification = FAIL
        result.detail = (
            "no migration certificate (certificate or verification_summary): it is the quality gate when "
            "the backends rank differently; waive only with a reason (certificate_waiver)"
        )
    if not kind.needs_certificate:
        result.role, result.required = SHOWN, False
        if certificate is None:
            result.classification, result.detail = (
                OFF,
                "not needed: the backends rank alike, agreement decides",
            )
    return result


def judge_pairs(
    pairs: list[PairRecords],
    th: Thresholds,
    noise: NoiseFloor | None = None,
    certificate: Certificate | None = None,
    waiver: str = "",
    ranking_of: RankingOf = undeclared,
) -> list[PairJudgement]:
    judged = []
    for pair in pairs or [PairRecords(None, None)]:
        metrics, kind = judge_pair(pair, th, noise, ranking_of)
        if pair.shadow is not None:
            gate = judge_certificate(kind, certificate, waiver)
            gate.pair = pair.label
            metrics.insert(0, gate)
        verdict, reasons = decide(metrics)
        base, shadow = pair.paired(_latency)
        latency = {"primary": base, "shadow": shadow}
        judged.append(
            PairJudgement(
                pair.primary, pair.shadow, len(pair.records), metrics, verdict, reasons, latency, kind
            )
        )
    return judged


@dataclass
class NoiseFloor:
    """The baseline against itself (A/A: the same backend called twice): the disagreement and latency
    spread repeated calls show with nothing changed. The judge measures agreement against the A/A
    agreement instead of 1.0, and widens the relative latency band by the A/A spread."""

    measured: bool = False
    records: int = 0
    agreement: dict[str, float] = field(default_factory=dict)
    latency_spread: float = 0.0
    source: str = ""
    detail: str = "not measured: no A/A log given (aa_log)"

    def to_dict(self) -> dict[str, Any]:
        return {k: _rounded(v) if not isinstance(v, dict) else {a: _rounded(b) for a, b in v.items()}
                for k, v in asdict(self).items()}  # fmt: skip


def noise_floor(log: ComparisonLog, source: str = "") -> NoiseFloor:
    """The noise floor of an A/A comparison log: mean agreement per metric and the relative p95
    latency difference between the two calls of the same backend."""
    both = [r for r in log.records if r.both_ok]
    if len(both) < 2:
        return NoiseFloor(source=source, records=len(both), detail=f"A/A log {source}: {len(both)} answers")
    agreement = {}
    for name, attr in zip(AGREEMENT_METRICS, ("overlap_at_k", "rbo", "top1_agree"), strict=True):
        values = [v for v in (getattr(r, attr) for r in both) if v is not None]
        agreement[name] = float(np.mean(values)) if values else 1.0
    first = [r.primary.latency_ms for r in both]
    again = [r.shadow.latency_ms for r in both]
    p95_first, p95_again = stats.sample_quantile(first, 0.95), stats.sample_quantile(again, 0.95)
    spread = abs(p95_again / p95_first - 1) if p95_first > 0 else 0.0
    detail = (
        f"A/A over {len(both)} repeated calls: overlap {agreement['overlapAtK']:.3f}, "
        f"RBO {agreement['rbo']:.3f}, top-1 {agreement['top1Agree']:.3f}; "
        f"p95 {p95_first:.1f} ms vs {p95_again:.1f} ms (spread {spread:.0%})"
    )
    return NoiseFloor(True, len(both), agreement, min(spread, 1.0), source, detail)


def time_range(records: Sequence[Comparison]) -> dict[str, Any]:
    """The first and last comparison judged (what a sign-off covers)."""
    if not records:
        return {"first": None, "last": None, "comparisons": 0}
    times = [r.ts for r in records]
    return {"first": min(times).isoformat(), "last": max(times).isoformat(), "comparisons": len(records)}


@dataclass
class Judgement:
    """The verdict, its reasons, the metric table, the latencies and the sign-off block."""

    verdict: str
    reasons: list[str]
    metrics: list[MetricResult]
    thresholds: Thresholds
    records: int
    skipped_lines: int
    pairs: list[PairJudgement] = field(default_factory=list)
    log: dict[str, Any] = field(default_factory=dict)
    not_judged: list[dict[str, Any]] = field(default_factory=list)
    signoff: dict[str, Any] = field(default_factory=dict)
    noise_floor: NoiseFloor = field(default_factory=NoiseFloor)
    time_range: dict[str, Any] = field(default_factory=dict)
    certificate: dict[str, Any] | None = None
    sequential: dict[str, Any] = field(default_factory=dict)
    #: the metrics as a report's gate strip (:mod:`memwork.rollout.gate_records`), set by the runner
    gates: list[dict[str, Any]] = field(default_factory=list)
    #: which way the verdict was reached (the in-process gates' result says ``gates``)
    mode: ClassVar[str] = "judge"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def backends(self) -> dict[str, str]:
        """The backends judged, when one pair was (``{}`` for several: see :attr:`pairs`)."""
        if len(self.pairs) != 1:
            return {}
        pair = self.pairs[0]
        return {k: v for k, v in (("primary", pair.primary), ("shadow", pair.shadow)) if v}

    @property
    def latency_ms(self) -> dict[str, list[float]]:
        return self.pairs[0].latency_ms if len(self.pairs) == 1 else {}

    def metric(self, name: str, pair: str | None = None) -> MetricResult:
        return next(m for m in self.metrics if m.metric == name and (pair is None or m.pair == pair))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "exit_code": self.exit_code,
            "thresholds": asdict(self.thresholds),
            "records": self.records,
            "skipped_lines": self.skipped_lines,
            "log": self.log,
            "backends": self.backends,
            "pairs": [p.to_dict() for p in self.pairs],
            "not_judged": self.not_judged,
            "metrics": [m.to_dict() for m in self.metrics],
            "time_range": self.time_range,
            "noise_floor": self.noise_floor.to_dict(),
            "certificate": self.certificate,
            "sequential": self.sequential,
            "gates": self.gates,
            "signoff": self.signoff,
        }


def judge_comparisons(
    log: ComparisonLog,
    th: Thresholds,
    *,
    primary_backend: str = "",
    shadow_backend: str = "",
    failures: Iterable[str] = (),
    same_backend: SameBackend = operator.eq,
    noise: NoiseFloor | None = None,
    certificate: Certificate | None = None,
    certificate_waiver: str = "",
    ranking_of: RankingOf = undeclared,
) -> Judgement:
    """The verdict on a log already read: the log's quality, then each selected pair on its own.
    ``failures``: NO-GO reasons found elsewhere (a failing input report, an unreadable service);
    ``noise``: the A/A noise floor; ``certificate`` / ``certificate_waiver``: the quality gate of a
    rollout between backends that rank differently; ``ranking_of``: how a backend (by name) ranks
    (:func:`memwork.rollout.roles.declared_ranking` reads the registry; default: undeclared)."""
    every = split_pairs(log)
    chosen = select_pairs(every, primary_backend, shadow_backend, same_backend)
    judged = judge_pairs(chosen, th, noise, certificate, certificate_waiver, ranking_of)
    quality = judge_log_quality(log, th)
    metrics = [quality, *(m for p in judged for m in p.metrics)]
    several = len(judged) > 1
    mixed = []
    if several:
        verdicts = "; ".join(f"{p.label}: {p.verdict} ({p.records} comparisons)" for p in judged)
        mixed = [
            f"pairs: the log compares {len(judged)} backend pairs, judged separately ({verdicts}); "
            "select the one to sign off (--primary-backend / --shadow-backend)"
        ]
    verdict, reasons = decide(metrics, failures, mixed, labelled=several)
    return Judgement(
        verdict,
        reasons,
        metrics,
        th,
        len(log.records),
        log.damaged + len(log.conflicts) + int(log.incomplete_last_line),
        pairs=judged,
        log=log.summary(),
        not_judged=[
            {"primary": p.primary, "shadow": p.shadow, "records": len(p.records)}
            for p in every
            if p not in chosen
        ],
        noise_floor=noise or NoiseFloor(),
        time_range=time_range([r for p in chosen for r in p.records]),
        certificate=None if certificate is None else certificate.to_dict(),
    )


def signoff_evidence(judgement: Judgement, log_path: str) -> dict[str, Any]:
    """What the judge adds to the sign-off block: which log (its files and SHA-256), how it read, every
    backend pair, the thresholds, the method and each metric's samples and class."""
    log = judgement.log
    several = len(judgement.pairs) > 1
    th = judgement.thresholds
    return {
        "comparison_log": log_path,
        "comparison_log_files": log.get("files", []),
        "comparison_log_sha256": log.get("sha256", ""),
        "records": judgement.records,
        "log_quality": {k: v for k, v in log.items() if k not in ("files", "sha256")},
        "pairs": [p.to_dict() for p in judgement.pairs],
        "pairs_not_judged": judgement.not_judged,
        "time_range_judged": judgement.time_range,
        "noise_floor": judgement.noise_floor.to_dict(),
        "certificate": judgement.certificate,
        "certificate_waiver": next(
            (m.detail for m in judgement.metrics if m.metric == "certificate" and m.classification == OFF), ""
        ),
        "sequential": judgement.sequential,
        "thresholds": asdict(th),
        "method": {
            "power": POWER,
            "tail_quantiles": list(TAIL_QUANTILES),
            "minimum_paired_answers": minimum_paired_answers(th),
        },
        "samples": {
            _key(m, several): {"baseline": m.n_baseline, "target": m.n_target} for m in judgement.metrics
        },
        "classification": {
            _key(m, several): {
                "class": m.classification,
                "estimate": _rounded(m.estimate),
                "ci": [_rounded(m.ci_low), _rounded(m.ci_high)],
            }
            for m in judgement.metrics
        },
    }


def _key(metric: MetricResult, several: bool) -> str:
    """A metric's key in the sign-off: its name, with its pair when the log holds several pairs."""
    return f"{metric.metric} ({metric.pair})" if several and metric.pair else metric.metric
