"""The judge's metrics as the gates a report's strip shows (:class:`memwork.reports.gates.Gate`).

Every metric row becomes one gate: its state (``pass``/``fail``/``nodata``; a MARGINAL row is
``nodata`` saying so; a row that is shown and never decides -- agreement between backends that rank
differently, warm-up, a switched-off SLO, a waived certificate -- is ``off`` saying why), its
observed value and threshold with their unit, and whether the threshold is the documented default or
was set for this run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memwork.reports.gates import Gate, Origin, State
from memwork.rollout.judge import DECREASE_IS_BAD, FAIL, MARGINAL, NODATA, OFF, PASS, Judgement, MetricResult
from memwork.rollout.roles import SHOWN

#: the parameter each metric's threshold comes from (its origin: default or set)
THRESHOLD_OF = {
    "shadowErrors": "max_error_rate",
    "underfill": "max_underfill_rate",
    "sloP95": "max_p95_ms",
    "sloP99": "max_p99_ms",
    "latencyMs": "latency_band",
    "latencyP95": "latency_band",
    "latencyP99": "latency_band",
    "resultCount": "band",
    "overlapAtK": "band",
    "rbo": "band",
    "top1Agree": "band",
    "logQuality": "max_damaged_share",
    "warmUp": "warmup_s",
    "certificate": "certificate",
}
_STATES: dict[str, State] = {PASS: "pass", FAIL: "fail", NODATA: "nodata", MARGINAL: "nodata", OFF: "off"}


def gate_of(metric: MetricResult, given: Mapping[str, Any], several: bool = False) -> Gate:
    """One metric row as a gate."""
    name = f"{metric.metric} ({metric.pair})" if several and metric.pair else metric.metric
    state: State = _STATES.get(metric.classification, "nodata")
    why = metric.detail
    if metric.role == SHOWN:
        state, why = "off", f"shown, not deciding: {metric.detail}"
    elif metric.classification == MARGINAL:
        why = f"marginal: {metric.detail}"
    comparison = ">=" if metric.direction == DECREASE_IS_BAD else "<="
    # a two-sample or tail metric is judged on its relative change (its threshold is a band): it is
    # shown as such, never in the metric's own unit ("4.6 ms <= 0.25 ms" read as a latency)
    # (a tail metric's estimate is its relative increase already; a two-sample one's is a shift in the unit)
    observed = metric.relative if metric.kind == "two-sample" else metric.estimate
    relative = metric.kind == "tail" or (metric.kind == "two-sample" and observed is not None)
    unit = "relative change" if relative else metric.unit
    parameter = THRESHOLD_OF.get(metric.metric, "")
    origin: Origin = "set" if parameter and parameter in given else "default"
    return Gate(name, state, observed, metric.threshold, comparison, origin, unit, why)


def judge_gates(judgement: Judgement, given: Mapping[str, Any] | None = None) -> list[Gate]:
    """Every metric of the judgement as a gate, in the table's order."""
    several = len(judgement.pairs) > 1
    return [gate_of(m, given or {}, several) for m in judgement.metrics]
