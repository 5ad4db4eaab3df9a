"""The canary judge: GO, NO-GO or INCONCLUSIVE from the shadow-read comparison log, the way automated
canary analysis (Kayenta) judges a deploy.

Every line of the log (written by ``memwork serve`` with ``MEMORY_SHADOW_BACKEND``) compares one
resolve answered by the *primary* (baseline) backend with the same resolve sent to the *shadow*
(target) backend. Each metric has a direction -- only a change in the bad direction can fail it:

==================  ===========  ==============================================================
metric              bad when     how it is classified
==================  ===========  ==============================================================
latencyMs           increases    two samples (primary vs shadow latency, both answered):
resultCount         decreases    a one-sided Mann-Whitney U test (scipy) at ``confidence`` in the
                                 bad direction, and the Hodges-Lehmann shift (median of all
                                 pairwise differences) with its distribution-free CI, relative to
                                 the baseline median. Not significant, or significant but the
                                 shift inside the ``band`` (default 25 %): PASS. Significant, shift
                                 inside the band but the CI reaching past it: MARGINAL.
                                 Significant and the shift past the band: FAIL.
overlapAtK, rbo,    decreases    one sample (each record *is* a comparison, there is no second
top1Agree                        sample): the mean against the ideal 1.0 less the band (0.75 by
                                 default), with a seeded bootstrap percentile CI at
                                 ``confidence``. CI wholly at or above the threshold: PASS; wholly
                                 below: FAIL; straddling it: MARGINAL.
crossUser           any          critical: one memory of another user in either answer fails the
dimensionMismatch   any          run; so does one dimension mismatch, and a shadow error rate
shadowErrors        > budget     above ``max_error_rate`` (Wilson CI shown).
==================  ===========  ==============================================================

A metric with fewer than ``min_samples`` usable values is NODATA. Verdict: any FAIL -> NO-GO (exit
1); else any NODATA or MARGINAL -> INCONCLUSIVE (exit 3: neither GO nor NO-GO, a person decides);
else GO (exit 0). Inputs the verdict relies on (the health and backfill-verification reports) are
named in the sign-off by their run id and digest; a failing one is a NO-GO reason.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from memwork.errors import UsageError
from memwork.redaction import redact_url

PASS, MARGINAL, FAIL, NODATA = "PASS", "MARGINAL", "FAIL", "NODATA"
GO, NO_GO, INCONCLUSIVE = "GO", "NO-GO", "INCONCLUSIVE"
#: the exit code of each verdict (``memwork canary judge``, ``memwork report run canary_signoff``)
EXIT_CODES = {GO: 0, NO_GO: 1, INCONCLUSIVE: 3}
INCREASE_IS_BAD, DECREASE_IS_BAD = "increase is bad", "decrease is bad"
#: pairwise differences above this many are computed on a seeded subsample of each side
MAX_PAIRS = 4_000_000
BOOTSTRAP_RESAMPLES = 2000
SEED = 20261201


@dataclass(frozen=True)
class Thresholds:
    """What the judge decides with; every value is recorded in the sign-off."""

    band: float = 0.25
    confidence: float = 0.95
    min_samples: int = 20
    max_error_rate: float = 0.01

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

    @property
    def alpha(self) -> float:
        return 1.0 - float(self.confidence)


@dataclass
class MetricResult:
    """One row of the metric table."""

    metric: str
    kind: str  # two-sample, agreement or critical
    direction: str
    classification: str
    n_baseline: int
    n_target: int
    baseline: float | None = None  # baseline median (two-sample), the ideal (agreement), the budget
    target: float | None = None  # target median, the mean agreement, the observed rate or count
    estimate: float | None = None  # Hodges-Lehmann shift, mean agreement, rate
    ci_low: float | None = None
    ci_high: float | None = None
    relative: float | None = None  # estimate relative to the baseline (two-sample)
    threshold: float | None = None
    p_value: float | None = None
    detail: str = ""
    required: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {k: _rounded(v) for k, v in asdict(self).items()}


@dataclass
class Judgement:
    """The verdict, its reasons, the metric table, the latencies and the sign-off block."""

    verdict: str
    reasons: list[str]
    metrics: list[MetricResult]
    thresholds: Thresholds
    records: int
    skipped_lines: int
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    backends: dict[str, str] = field(default_factory=dict)
    signoff: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def metric(self, name: str) -> MetricResult:
        return next(m for m in self.metrics if m.metric == name)

    def metric_rows(self) -> list[dict[str, Any]]:
        """The per-metric table: classification, samples, estimate with its CI, threshold, p."""
        return [
            {
                "metric": m.metric,
                "class": m.classification,
                "direction": m.direction,
                "n (baseline/target)": f"{m.n_baseline}/{m.n_target}",
                "baseline": _rounded(m.baseline),
                "target": _rounded(m.target),
                "estimate": _rounded(m.estimate),
                "CI": _ci_text(m),
                "relative": _rounded(m.relative),
                "threshold": _rounded(m.threshold),
                "p": _rounded(m.p_value),
                "detail": m.detail,
            }
            for m in self.metrics
        ]

    # the canary_signoff notebook's display calls, named as on the in-process CanaryResult
    def gate_frame(self) -> Any:
        return judgement_gate_frame(self)

    def latency_rows(self) -> list[dict[str, Any]]:
        return judgement_latency_rows(self)

    def latency_figure(self, limit_ms: float | None = None) -> Any:
        return latency_distributions_figure(self)

    def status_fields(self) -> dict[str, Any]:
        return judgement_status_fields(self)

    def backends_frame(self) -> Any:
        return judgement_backends_frame(self)

    def signoff_fields(self) -> dict[str, Any]:
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
            "backends": self.backends,
            "metrics": [m.to_dict() for m in self.metrics],
            "signoff": self.signoff,
        }


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 4)
    return value


def _ci_text(m: MetricResult) -> str:
    if m.ci_low is None or m.ci_high is None:
        return ""
    return f"[{_rounded(m.ci_low)}, {_rounded(m.ci_high)}]"


# ---- reading the log ---------------------------------------------------------------------------


def log_files(path: str | Path) -> list[Path]:
    """The files of a comparison log, oldest first: the rotated ``<path>.1`` (when present), then ``path``."""
    log = Path(path)
    rotated = log.with_name(log.name + ".1")
    return [rotated, log] if rotated.is_file() else [log]


@dataclass(frozen=True)
class LogContents:
    """What the judge read, and the SHA-256 of exactly those bytes (a live log keeps growing: the
    digest is taken of the bytes parsed, not of the file afterwards)."""

    records: list[dict[str, Any]]
    skipped: int
    sha256: str
    files: list[str]


def read_log(path: str | Path) -> LogContents:
    """The comparison records of a JSON-lines log (its rotated part first); lines that are not a JSON
    object (a line torn by a crash, a damaged line, a line still being written) are skipped and counted."""
    if not Path(path).is_file():
        raise UsageError("log", str(path), "no such comparison log")
    digest = hashlib.sha256()
    records: list[dict[str, Any]] = []
    skipped = 0
    files = log_files(path)
    for file in files:
        data = file.read_bytes()
        digest.update(data)
        for line in data.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(item, dict):
                records.append(item)
            else:
                skipped += 1
    return LogContents(records, skipped, digest.hexdigest(), [str(f) for f in files])


def log_sha256(path: str | Path) -> str:
    """SHA-256 of a comparison log as the judge reads it: the rotated part (if any), then the file."""
    return read_log(path).sha256


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _side(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _truthy(value: Any) -> bool:
    """A flag that may be written as a bool, a count or a list of offending ids."""
    if isinstance(value, (list, tuple, dict)):
        return len(value) > 0
    if isinstance(value, (int, float)):
        return value > 0
    return bool(value)


def _both_ok(record: Mapping[str, Any]) -> bool:
    return bool(_side(record, "primary").get("ok")) and bool(_side(record, "shadow").get("ok"))


def paired_values(records: Iterable[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``key`` of the primary and of the shadow answer, over the records both answered."""
    base: list[float] = []
    target: list[float] = []
    for record in records:
        if not _both_ok(record):
            continue
        b, t = _number(_side(record, "primary").get(key)), _number(_side(record, "shadow").get(key))
        if b is not None and t is not None:
            base.append(b)
            target.append(t)
    return base, target


def agreement_values(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    """A per-record agreement figure (overlapAtK, rbo, top1Agree), over the records both answered."""
    values = (_number(r.get(key)) for r in records if _both_ok(r))
    return [v for v in values if v is not None]


# ---- statistics ----------------------------------------------------------------------------------


def hodges_lehmann(
    baseline: list[float], target: list[float], confidence: float
) -> tuple[float, float, float]:
    """The Hodges-Lehmann shift (target - baseline) and its distribution-free confidence interval:
    the order statistics of the pairwise differences at the Mann-Whitney critical value (normal
    approximation, as in Bauer 1972)."""
    from scipy.stats import norm

    rng = np.random.default_rng(SEED)
    b = np.asarray(baseline, dtype=float)
    t = np.asarray(target, dtype=float)
    side = int(math.sqrt(MAX_PAIRS))
    if b.size * t.size > MAX_PAIRS:
        b = rng.choice(b, min(b.size, side), replace=False)
        t = rng.choice(t, min(t.size, side), replace=False)
    diffs = np.sort((t[:, None] - b[None, :]).ravel())
    n, m, total = t.size, b.size, diffs.size
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    k = math.floor(total / 2 - z * math.sqrt(n * m * (n + m + 1) / 12.0))
    k = min(max(k, 0), (total - 1) // 2)
    return float(np.median(diffs)), float(diffs[k]), float(diffs[total - 1 - k])


def mann_whitney_p(baseline: list[float], target: list[float], bad_is_increase: bool) -> float:
    """One-sided p-value of "the target moved in the bad direction" (scipy's Mann-Whitney U)."""
    from scipy.stats import mannwhitneyu

    if len(set(baseline) | set(target)) == 1:  # every value the same: no evidence of any change
        return 1.0
    if bad_is_increase:
        return float(mannwhitneyu(target, baseline, alternative="greater").pvalue)
    return float(mannwhitneyu(target, baseline, alternative="less").pvalue)


def bootstrap_mean_ci(values: list[float], confidence: float) -> tuple[float, float, float]:
    """Mean and seeded bootstrap percentile CI of the mean."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if np.all(arr == arr[0]):
        return mean, mean, mean
    rng = np.random.default_rng(SEED)
    means = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = max(1, 2_000_000 // arr.size)
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        stop = min(start + chunk, BOOTSTRAP_RESAMPLES)
        means[start:stop] = rng.choice(arr, (stop - start, arr.size), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    return mean, float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


# ---- the metrics -----------------------------------------------------------------------------


def judge_two_sample(
    name: str, baseline: list[float], target: list[float], direction: str, th: Thresholds
) -> MetricResult:
    """Mann-Whitney U in the bad direction plus the practical-significance band on the HL shift."""
    result = MetricResult(name, "two-sample", direction, NODATA, len(baseline), len(target))
    result.threshold = th.band
    if min(len(baseline), len(target)) < th.min_samples:
        result.detail = f"{min(len(baseline), len(target))} paired answers, fewer than {th.min_samples}"
        return result
    sign = 1.0 if direction == INCREASE_IS_BAD else -1.0
    median = float(np.median(baseline))
    result.baseline, result.target = median, float(np.median(target))
    shift, low, high = hodges_lehmann(baseline, target, th.confidence)
    result.estimate, result.ci_low, result.ci_high = shift, low, high
    scale = abs(median)
    relative = (
        (lambda x: x / scale) if scale > 0 else (lambda x: 0.0 if x == 0 else math.copysign(math.inf, x))
    )
    result.relative = relative(shift)
    bad_shift = relative(sign * shift)
    bad_reach = max(relative(sign * low), relative(sign * high))
    result.p_value = mann_whitney_p(baseline, target, sign > 0)
    significant = result.p_value < th.alpha
    band = f"{th.band:.0%}"
    if significant and bad_shift > th.band:
        result.classification = FAIL
        result.detail = f"significant {direction.split()[0]} of {bad_shift:.1%}, beyond the {band} band"
    elif significant and bad_reach > th.band:
        result.classification = MARGINAL
        result.detail = (
            f"significant {bad_shift:.1%} inside the {band} band, but the CI reaches {bad_reach:.1%}"
        )
    elif significant:
        result.classification = PASS
        result.detail = f"significant but {bad_shift:.1%}, inside the {band} band"
    else:
        result.classification = PASS
        result.detail = f"no significant {direction.split()[0]} (p={result.p_value:.3g})"
    return result


def judge_agreement(name: str, values: list[float], th: Thresholds) -> MetricResult:
    """Mean agreement against the ideal (1.0) less the band, by its bootstrap CI."""
    result = MetricResult(name, "agreement", DECREASE_IS_BAD, NODATA, len(values), len(values))
    result.baseline, result.threshold = 1.0, 1.0 - th.band
    if len(values) < th.min_samples:
        result.detail = f"{len(values)} comparisons, fewer than {th.min_samples}"
        return result
    mean, low, high = bootstrap_mean_ci(values, th.confidence)
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


def judge_flag(name: str, records: list[dict[str, Any]], flagged: int, what: str) -> MetricResult:
    """A critical metric: any flagged record fails the run on its own."""
    result = MetricResult(name, "critical", "any is bad", NODATA, len(records), len(records))
    result.baseline, result.threshold = 0.0, 0.0
    result.target = result.estimate = float(flagged)
    if not records:
        result.detail = "no comparisons"
    elif flagged:
        result.classification = FAIL
        result.detail = f"{flagged} of {len(records)} comparisons with {what}"
    else:
        result.classification = PASS
        result.detail = f"none in {len(records)} comparisons"
    return result


def judge_error_rate(records: list[dict[str, Any]], th: Thresholds) -> MetricResult:
    """The shadow's error rate against the budget (critical), with its Wilson CI."""
    from scipy.stats import binomtest

    errors = sum(not _side(r, "shadow").get("ok") for r in records)
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


def judge_metrics(records: list[dict[str, Any]], th: Thresholds) -> list[MetricResult]:
    """Every metric of the comparison records, critical ones first."""
    cross = sum(
        _truthy(_side(r, "primary").get("crossUser")) or _truthy(_side(r, "shadow").get("crossUser"))
        for r in records
    )
    mismatch = sum(_truthy(r.get("dimensionMismatch")) for r in records)
    metrics = [
        judge_flag("crossUser", records, cross, "a memory of another user"),
        judge_flag("dimensionMismatch", records, mismatch, "an embedding dimension mismatch"),
        judge_error_rate(records, th),
        judge_two_sample("latencyMs", *paired_values(records, "latencyMs"), INCREASE_IS_BAD, th),
        judge_two_sample("resultCount", *paired_values(records, "count"), DECREASE_IS_BAD, th),
    ]
    metrics += [
        judge_agreement(key, agreement_values(records, key), th) for key in ("overlapAtK", "rbo", "top1Agree")
    ]
    return metrics


def decide(metrics: list[MetricResult], extra_failures: Iterable[str] = ()) -> tuple[str, list[str]]:
    """NO-GO on any FAIL; else INCONCLUSIVE on a required NODATA or a MARGINAL; else GO."""
    failures = [f"{m.metric}: {m.detail}" for m in metrics if m.classification == FAIL]
    failures += list(extra_failures)
    if failures:
        return NO_GO, failures
    undecided = [
        f"{m.metric}: {m.classification} ({m.detail})"
        for m in metrics
        if m.classification == MARGINAL or (m.classification == NODATA and m.required)
    ]
    if undecided:
        return INCONCLUSIVE, [*undecided, "neither GO nor NO-GO: a person must decide"]
    return GO, []


# ---- inputs and the sign-off -----------------------------------------------------------------


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
    summary = load_summary(path)
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
    verdict: str,
    th: Thresholds,
    metrics: list[MetricResult],
    contents: LogContents,
    log: str,
    approver: str,
    inputs: dict[str, Any],
) -> dict[str, Any]:
    """Who signs, when, on which code, which log (its SHA-256), thresholds and the metric table."""
    from memwork import __version__
    from memwork.reports.runner import git_commit

    return {
        "verdict": verdict,
        "approver": approver or "(unsigned)",
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "memwork_version": __version__,
        "git_commit": git_commit(),
        "comparison_log": log,
        "comparison_log_files": contents.files,
        "comparison_log_sha256": contents.sha256,
        "records": len(contents.records),
        "thresholds": asdict(th),
        "samples": {m.metric: {"baseline": m.n_baseline, "target": m.n_target} for m in metrics},
        "classification": {
            m.metric: {
                "class": m.classification,
                "estimate": _rounded(m.estimate),
                "ci": [_rounded(m.ci_low), _rounded(m.ci_high)],
            }
            for m in metrics
        },
        "inputs": inputs,
    }


def _backends(records: list[dict[str, Any]]) -> dict[str, str]:
    """Which backends the log compares (the most common name on each side)."""
    out: dict[str, str] = {}
    for side in ("primary", "shadow"):
        names = [str(_side(r, side).get("backend")) for r in records if _side(r, side).get("backend")]
        if names:
            out[side] = max(set(names), key=names.count)
    return out


def judge_log(
    log: str | Path,
    thresholds: Thresholds | None = None,
    *,
    approver: str = "",
    health_summary: str = "",
    verification_summary: str = "",
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
    contents = read_log(log)
    records = contents.records
    metrics = judge_metrics(records, th)
    verdict, reasons = decide(metrics, failures)
    judgement = Judgement(
        verdict, reasons, metrics, th, len(records), contents.skipped, backends=_backends(records)
    )
    judgement.latency_ms = dict(zip(("primary", "shadow"), paired_values(records, "latencyMs"), strict=True))
    judgement.signoff = signoff_block(verdict, th, metrics, contents, str(log), approver, inputs)
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
    approver: str = "",
    health_summary: str = "",
    verification_summary: str = "",
) -> Judgement:
    """The judge as ``memwork canary judge`` and the canary_signoff notebook call it.

    With ``base_url`` the service's ``/api/runtime/status`` is read first and recorded in the
    sign-off (which backend it serves, which it shadows, at what sample, the shadow counters), so the
    verdict names the deployment it judged; an unreachable service is a NO-GO reason. The log is
    ``comparison_log``, else the one that service reports writing (same machine), else the
    workspace's ``shadow/comparisons.jsonl``.
    """
    th = Thresholds(float(band), float(confidence), int(min_samples), float(max_error_rate))
    th.check()
    service, problem = service_status(base_url, token) if base_url else (None, None)
    served_log = ((service or {}).get("shadow") or {}).get("log")
    log = comparison_log or (served_log if isinstance(served_log, str) and served_log else "")
    return judge_log(
        log or str(default_log_path()),
        th,
        approver=approver,
        health_summary=health_summary,
        verification_summary=verification_summary,
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


# ---- presentation (the canary_signoff notebook shows these; same names as the in-process canary's) ----


def _side_label(judgement: Judgement, side: str) -> str:
    backend = judgement.backends.get(side)
    return f"{side} ({backend})" if backend else side


def judgement_gate_frame(judgement: Judgement) -> Any:
    import pandas as pd

    return pd.DataFrame(judgement.metric_rows())


def judgement_latency_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """Per side: backend, sample size, p50, p95, max (ms) of the answers both sides gave."""
    from memwork.pgvector.canary import percentiles

    return [
        {"side": side, "backend": judgement.backends.get(side, ""), **percentiles(values)}
        for side, values in judgement.latency_ms.items()
    ]


def judgement_status_fields(judgement: Judgement) -> dict[str, Any]:
    """The service as the judge saw it (when a base URL was given) and what the log held."""
    service = dict(judgement.signoff.get("service") or {})
    shadow = service.pop("shadow", None) or {}
    out: dict[str, Any] = {k: v for k, v in service.items() if v is not None}
    for key in ("enabled", "backend", "sample", "counters"):
        if key in shadow:
            out[f"shadow {key}"] = shadow[key]
    out["comparisons read"] = judgement.records
    out["damaged lines skipped"] = judgement.skipped_lines
    return out


def judgement_backends_frame(judgement: Judgement) -> Any:
    import pandas as pd

    return pd.DataFrame(
        [
            {"side": side, "backend": name, "role": "baseline" if side == "primary" else "target"}
            for side, name in judgement.backends.items()
        ]
    )


def judgement_signoff_fields(judgement: Judgement) -> dict[str, Any]:
    """The sign-off block flat: whole digests, thresholds and the run ids of the inputs."""
    block = {k: v for k, v in judgement.signoff.items() if k not in ("classification", "samples", "inputs")}
    block.pop("service", None)
    block["thresholds"] = "; ".join(f"{k}={v}" for k, v in judgement.thresholds.__dict__.items())
    block["comparison_log_files"] = ", ".join(block.get("comparison_log_files") or [])
    for name, shown in (judgement.signoff.get("inputs") or {}).items():
        block[f"{name} run id"] = (shown or {}).get("run_id") or "(not given)"
        if shown:
            block[f"{name} sha256"] = shown["summary_sha256"]
    return block


def latency_distributions_figure(judgement: Judgement) -> Any:
    """Both backends' resolve latency: overlaid histograms (shared bins) and ECDFs."""
    import matplotlib.pyplot as plt

    fig, (hist, ecdf) = plt.subplots(1, 2, figsize=(10, 3.4))
    series = {
        _side_label(judgement, s): np.asarray(v, dtype=float) for s, v in judgement.latency_ms.items() if v
    }
    if series:
        everything = np.concatenate(list(series.values()))
        bins = np.histogram_bin_edges(everything, bins=min(40, max(10, everything.size // 10)))
        for (label, values), colour in zip(series.items(), ("tab:blue", "tab:orange"), strict=False):
            hist.hist(values, bins=bins, alpha=0.55, color=colour, label=f"{label}, n={values.size}")
            ordered = np.sort(values)
            ecdf.step(ordered, np.arange(1, ordered.size + 1) / ordered.size, where="post", color=colour,
                      label=f"{label}, p95 {np.percentile(ordered, 95):.1f} ms")  # fmt: skip
        hist.legend(fontsize=8)
        ecdf.legend(fontsize=8, loc="lower right")
    else:
        hist.text(0.5, 0.5, "no paired answers", ha="center", va="center", transform=hist.transAxes)
    hist.set_title("resolve latency (histogram)")
    hist.set_xlabel("ms")
    ecdf.set_title("resolve latency (ECDF)")
    ecdf.set_xlabel("ms")
    ecdf.set_ylabel("share of answers")
    fig.tight_layout()
    return fig
