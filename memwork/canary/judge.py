"""The canary judge: GO, NO-GO or INCONCLUSIVE from the shadow-read comparison log, the way automated
canary analysis (Kayenta) judges a deploy.

Every line of the log (written by ``memwork serve`` with ``MEMORY_SHADOW_BACKEND``) compares one
resolve answered by the *primary* (baseline) backend with the same resolve sent to the *shadow*
(target) backend. The log is read strictly by :mod:`memwork.canary.comparisons` (damaged lines,
duplicates and conflicts are counted, never guessed at); the statistics are in
:mod:`memwork.canary.stats`; this module classifies each metric and decides. Each metric has a
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
dimensionMismatch   any          run; so does one dimension mismatch, and a shadow error rate
shadowErrors        > budget     above ``max_error_rate`` (Wilson CI shown).
==================  ===========  ==============================================================

Comparisons of different primary/shadow backend pairs are never pooled: each pair is judged on its
own. A log holding several pairs is at best INCONCLUSIVE unless one pair is selected
(``primary_backend`` / ``shadow_backend``); a NO-GO of any judged pair is a NO-GO.

A metric with fewer than ``min_samples`` usable values is NODATA. Verdict: any FAIL -> NO-GO (exit
1); else any required NODATA or MARGINAL -> INCONCLUSIVE (exit 3: neither GO nor NO-GO, a person
decides); else GO (exit 0). Below :func:`minimum_paired_answers` paired answers a pair is never GO.
Inputs the verdict relies on (the health and backfill-verification reports) are named in the
sign-off by their run id and digest; a failing one is a NO-GO reason.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memwork.canary import stats
from memwork.canary.comparisons import Comparison, ComparisonLog, Side, read_comparison_log
from memwork.errors import UsageError
from memwork.redaction import redact_url

PASS, MARGINAL, FAIL, NODATA = "PASS", "MARGINAL", "FAIL", "NODATA"
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


def _names(expected: str, actual: str | None) -> bool:
    if not expected:
        return True
    from memwork.canary.app import same_backend

    return same_backend(expected, actual)


def select_pairs(pairs: list[PairRecords], primary_backend: str, shadow_backend: str) -> list[PairRecords]:
    """The pairs matching the selection (every pair when nothing is selected); a selection matching no
    pair of a non-empty log is a usage error naming the pairs there are."""
    chosen = [p for p in pairs if _names(primary_backend, p.primary) and _names(shadow_backend, p.shadow)]
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


def judge_agreement(name: str, values: list[float], th: Thresholds) -> MetricResult:
    """Mean agreement against the ideal (1.0) less the band, by its bootstrap CI."""
    result = MetricResult(name, "agreement", DECREASE_IS_BAD, NODATA, len(values), len(values))
    result.baseline, result.threshold = 1.0, 1.0 - th.band
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
    result.detail = f"mean {mean:.3f}, CI {how} the threshold {threshold:.2f} (ideal 1.0 - {th.band:.0%})"
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


def judge_error_rate(records: Sequence[Comparison], th: Thresholds) -> MetricResult:
    """The shadow's error rate against the budget (critical), with its Wilson CI."""
    from scipy.stats import binomtest

    errors = sum(not r.shadow.ok for r in records)
    result = MetricResult("shadowErrors", "critical", INCREASE_IS_BAD, NODATA, len(records), len(records))
    result.baseline = result.threshold = th.max_error_rate
    if not records:
        result.detail = "no comparisons"
        return result
    rate = errors / len(records)
    ci = binomtest(errors, len(records)).proportion_ci(th.confidence, method="wilson")
    result.target = result.estimate = rate
    result.ci_low, result.ci_high = float(ci.low), float(ci.high)
    detail = f"{errors} of {len(records)} shadow calls failed ({rate:.2%}; budget {th.max_error_rate:.2%})"
    if rate > th.max_error_rate:
        result.classification, result.detail = FAIL, detail
    elif len(records) < th.min_samples:
        result.detail = f"{detail}; fewer than {th.min_samples} comparisons"
    else:
        result.classification, result.detail = PASS, detail
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


def judge_pair(pair: PairRecords, th: Thresholds) -> list[MetricResult]:
    """Every metric of one backend pair, critical ones first."""
    records = pair.records
    by_request: dict[str, bool] = {}
    for record in [*records, *pair.conflicts]:  # a flag in any copy of a request counts
        by_request[record.request_id] = by_request.get(record.request_id, False) or record.cross_user
    mismatched = {r.request_id for r in [*records, *pair.conflicts] if r.dimension_mismatch}
    base_ms, shadow_ms = pair.paired(_latency)
    metrics = [
        judge_flag("crossUser", len(records), sum(by_request.values()), "a memory of another user"),
        judge_flag("dimensionMismatch", len(records), len(mismatched), "an embedding dimension mismatch"),
        judge_error_rate(records, th),
        judge_two_sample("latencyMs", base_ms, shadow_ms, INCREASE_IS_BAD, th),
        *(judge_tail(base_ms, shadow_ms, q, th) for q in TAIL_QUANTILES),
        judge_two_sample("resultCount", *pair.paired(_count), DECREASE_IS_BAD, th),
    ]
    both = [r for r in records if r.both_ok]
    for name, value in (("overlapAtK", "overlap_at_k"), ("rbo", "rbo"), ("top1Agree", "top1_agree")):
        values = [getattr(r, value) for r in both]
        metrics.append(judge_agreement(name, [v for v in values if v is not None], th))
    for metric in metrics:
        metric.pair = pair.label
    return metrics


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

    @property
    def label(self) -> str:
        return PairRecords(self.primary, self.shadow).label

    def to_dict(self) -> dict[str, Any]:
        return {
            "primary": self.primary,
            "shadow": self.shadow,
            "records": self.records,
            "verdict": self.verdict,
        }


def judge_pairs(pairs: list[PairRecords], th: Thresholds) -> list[PairJudgement]:
    judged = []
    for pair in pairs or [PairRecords(None, None)]:
        metrics = judge_pair(pair, th)
        verdict, reasons = decide(metrics)
        base, shadow = pair.paired(_latency)
        latency = {"primary": base, "shadow": shadow}
        judged.append(
            PairJudgement(pair.primary, pair.shadow, len(pair.records), metrics, verdict, reasons, latency)
        )
    return judged


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

    def metric_rows(self) -> list[dict[str, Any]]:
        from memwork.canary.present import metric_rows

        return metric_rows(self)

    # the canary_signoff notebook's display calls, named as on the in-process CanaryResult
    def gate_frame(self) -> Any:
        from memwork.canary.present import judgement_gate_frame

        return judgement_gate_frame(self)

    def latency_rows(self) -> list[dict[str, Any]]:
        from memwork.canary.present import judgement_latency_rows

        return judgement_latency_rows(self)

    def latency_figure(self, limit_ms: float | None = None) -> Any:
        from memwork.canary.present import latency_distributions_figure

        return latency_distributions_figure(self)

    def status_fields(self) -> dict[str, Any]:
        from memwork.canary.present import judgement_status_fields

        return judgement_status_fields(self)

    def backends_frame(self) -> Any:
        from memwork.canary.present import judgement_backends_frame

        return judgement_backends_frame(self)

    def signoff_fields(self) -> dict[str, Any]:
        from memwork.canary.present import judgement_signoff_fields

        return judgement_signoff_fields(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "judge",
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
            "signoff": self.signoff,
        }


def judge_comparisons(
    log: ComparisonLog,
    th: Thresholds,
    *,
    primary_backend: str = "",
    shadow_backend: str = "",
    failures: Iterable[str] = (),
) -> Judgement:
    """The verdict on a log already read: the log's quality, then each selected pair on its own."""
    every = split_pairs(log)
    chosen = select_pairs(every, primary_backend, shadow_backend)
    judged = judge_pairs(chosen, th)
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
    )


# ---- inputs and the sign-off -----------------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def log_sha256(path: str | Path) -> str:
    """SHA-256 of a comparison log as the judge reads it: the rotated part (if any), then the file."""
    return read_comparison_log(path).sha256


def _summary_file(value: str) -> Path:
    path = Path(value)
    return path / "summary.json" if path.is_dir() else path


def report_input(name: str, value: str, passing: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """A report the verdict relies on: its run id, verdict and digest, and a failure reason if its
    verdict is not one of ``passing``."""
    from memwork.reports.summary import load_summary

    path = _summary_file(value)
    if not path.is_file():
        raise UsageError(name, value, "no such summary.json")
    summary = load_summary(path, name=name)
    found = summary.get("run")
    run: dict[str, Any] = found if isinstance(found, dict) else {}
    verdict = str(summary.get("verdict") or "UNKNOWN")
    shown = {
        "run_id": run.get("run_id") or "(no run id: not written by memwork report)",
        "report": summary.get("report"),
        "verdict": verdict,
        "summary_sha256": file_sha256(path),
    }
    problem = None if verdict in passing else f"{name}: report {shown['run_id']} has verdict {verdict}"
    return shown, problem


def signoff_block(
    judgement: Judgement, log_path: str, approver: str, inputs: dict[str, Any]
) -> dict[str, Any]:
    """Who signs, when, on which code, which log (its SHA-256), every backend pair, the thresholds,
    the method and the metric table."""
    from datetime import UTC, datetime

    from memwork import __version__
    from memwork.reports.runner import git_commit

    th = judgement.thresholds
    log = judgement.log
    several = len(judgement.pairs) > 1
    return {
        "verdict": judgement.verdict,
        "approver": approver or "(unsigned)",
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "memwork_version": __version__,
        "git_commit": git_commit(),
        "comparison_log": log_path,
        "comparison_log_files": log.get("files", []),
        "comparison_log_sha256": log.get("sha256", ""),
        "records": judgement.records,
        "log_quality": {k: v for k, v in log.items() if k not in ("files", "sha256")},
        "pairs": [p.to_dict() for p in judgement.pairs],
        "pairs_not_judged": judgement.not_judged,
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
        "inputs": inputs,
    }


def _key(metric: MetricResult, several: bool) -> str:
    """A metric's key in the sign-off: its name, with its pair when the log holds several pairs."""
    return f"{metric.metric} ({metric.pair})" if several and metric.pair else metric.metric


def judge_log(
    log: str | Path,
    thresholds: Thresholds | None = None,
    *,
    approver: str = "",
    health_summary: str = "",
    verification_summary: str = "",
    primary_backend: str = "",
    shadow_backend: str = "",
    service: dict[str, Any] | None = None,
    failures: Iterable[str] = (),
) -> Judgement:
    """The whole judge over one comparison log: metrics, verdict, reasons and the sign-off.
    ``failures``: NO-GO reasons found elsewhere (the service's status could not be read)."""
    th = thresholds or Thresholds()
    th.check()
    inputs: dict[str, Any] = {}
    failures = list(failures)
    for name, value, passing in (
        ("verification_summary", verification_summary, ("PASS",)),
        ("health_summary", health_summary, ("PASS", "INFO")),
    ):
        if value:
            inputs[name], problem = report_input(name, value, passing)
            failures += [problem] if problem else []
        else:
            inputs[name] = None
    contents = read_comparison_log(log)
    judgement = judge_comparisons(
        contents, th, primary_backend=primary_backend, shadow_backend=shadow_backend, failures=failures
    )
    judgement.signoff = signoff_block(judgement, str(log), approver, inputs)
    if service is not None:
        judgement.signoff["service"] = service
    return judgement


def default_log_path() -> Path:
    """Where ``memwork serve`` writes its comparisons: ``<workspace>/shadow/comparisons.jsonl``."""
    from memwork.workspace import workspace_dir

    return workspace_dir(create=False) / "shadow" / "comparisons.jsonl"


def run_from_parameters(
    *,
    comparison_log: str = "",
    base_url: str = "",
    token: str = "",
    band: float = 0.25,
    confidence: float = 0.95,
    min_samples: int = 20,
    max_error_rate: float = 0.01,
    max_damaged_share: float = 0.01,
    primary_backend: str = "",
    shadow_backend: str = "",
    approver: str = "",
    health_summary: str = "",
    verification_summary: str = "",
) -> Judgement:
    """The judge as ``memwork canary judge`` and the canary_signoff notebook call it.

    With ``base_url`` the service's ``/api/runtime/status`` is read first and recorded in the
    sign-off (which backend it serves, which it shadows, at what sample, the shadow counters), so the
    verdict names the deployment it judged; an unreachable service is a NO-GO reason, a malformed URL
    a usage error. The log is ``comparison_log``, else the one that service reports writing (same
    machine), else the workspace's ``shadow/comparisons.jsonl``. ``primary_backend`` /
    ``shadow_backend`` select the pair to sign off when the log compares several.
    """
    from memwork.canary.app import bearer_token, check_base_url

    th = Thresholds(
        float(band), float(confidence), int(min_samples), float(max_error_rate), float(max_damaged_share)
    )
    th.check()
    if base_url:
        check_base_url(base_url)
        token = bearer_token(token)
    service, problem = service_status(base_url, token) if base_url else (None, None)
    served_log = ((service or {}).get("shadow") or {}).get("log")
    log = comparison_log or (served_log if isinstance(served_log, str) and served_log else "")
    return judge_log(
        log or str(default_log_path()),
        th,
        approver=approver,
        health_summary=health_summary,
        verification_summary=verification_summary,
        primary_backend=primary_backend,
        shadow_backend=shadow_backend,
        service=service,
        failures=[problem] if problem else [],
    )


def service_status(base_url: str, token: str = "") -> tuple[dict[str, Any], str | None]:
    """What the sign-off records of the service (backends, shadow settings and counters), or why it
    could not be read."""
    from memwork.canary.app import fetch_status
    from memwork.redaction import describe_error

    shown = redact_url(base_url) or base_url
    try:
        status = fetch_status(base_url, token)
    except Exception as exc:  # any failure is a reason, never a traceback
        return {"base_url": shown, "error": describe_error(exc)}, f"service: {describe_error(exc)}"
    found = status.get("memory")
    memory: dict[str, Any] = found if isinstance(found, dict) else {}
    shadow = status.get("shadow") if isinstance(status.get("shadow"), dict) else None
    keys = ("enabled", "backend", "selectedBackend")
    return {"base_url": shown, **{k: memory.get(k) for k in keys if k in memory}, "shadow": shadow}, None
