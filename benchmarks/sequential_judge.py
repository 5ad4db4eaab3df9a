"""The anytime-valid rollout judge against today's fixed-horizon one, on simulated comparison logs.

Why: a staged rollout (1 % -> 10 % -> 100 %) judges the log as it grows; a judge that is looked at
often must not turn looks into false GOs. Per scenario this prints how often each judge says GO /
NO-GO and after how many comparisons:

* **A/A** (the target behaves like the baseline: 0.1 % errors, no underfill, same latency): a NO-GO
  is a false alarm; the judge should GO, and we count the comparisons it needs.
* **known regressions** (5 % / 3 % / 2 % errors against a 1 % budget, 20 % empty answers, a p95
  past the 250 ms SLO, a 2x slower target between alike backends, a cross-user leak in 1 % of
  answers, a 4 % error tail at n = 300): a GO is a false GO; it must stay at or below 5 %.
* **full judge, staged** (:func:`memwork.rollout.judge.judge_comparisons`, every row) looked at
  after every :data:`LOOKS` comparisons of the growing log, signed at the first GO or NO-GO -- what
  a staged rollout does with it.
* **today, staged**: the same looks, but the rate rows (shadowErrors, underfill, sloP95, sloP99)
  classified as before issue 18 -- point estimates against the budget ("0 errors in 80 is within
  1 %"), order-statistic bounds for the SLO at one horizon -- and the sequential row ignored.
* **sequential row**: :mod:`memwork.rollout.sequential` alone, read after every comparison.

Run: ``.venv/bin/python benchmarks/sequential_judge.py [--runs 200] [--only TEXT]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np

from memwork.rollout import sequential, stats
from memwork.rollout.comparisons import Comparison, ComparisonLog, Side
from memwork.rollout.judge import (
    FAIL,
    GO,
    MARGINAL,
    NO_GO,
    NODATA,
    PASS,
    MetricResult,
    Thresholds,
    decide,
    judge_comparisons,
)

TH = Thresholds(max_error_rate=0.01, max_underfill_rate=0.01, max_p95_ms=250.0, max_p99_ms=1000.0)
LENGTH = 2000
#: the looks of a staged rollout at the growing log: every 100 comparisons to 1,000, then every 250
LOOKS = (*range(100, 1001, 100), *range(1250, LENGTH + 1, 250))
#: both sides declared semantic but the relative band off (an SLO-only scenario)
SEMANTIC = Thresholds(**{**TH.__dict__, "primary_ranking": "semantic", "shadow_ranking": "semantic"})

#: name, (error rate, empty rate, shadow median ms, leak rate, error tail, length), alike backends
SCENARIOS: list[tuple[str, dict[str, float], bool]] = [
    ("A/A (0.1% errors)", {"errors": 0.001}, True),
    ("errors 5% (budget 1%)", {"errors": 0.05}, True),
    ("errors 3% (budget 1%)", {"errors": 0.03}, True),
    ("errors 2% (budget 1%)", {"errors": 0.02}, True),
    ("20% empty answers", {"errors": 0.001, "empty": 0.2}, False),
    ("p95 past 250 ms SLO", {"errors": 0.001, "median": 200.0}, False),
    ("2x slower, alike backends", {"errors": 0.001, "median": 40.0}, True),
    ("cross-user leak in 1%", {"errors": 0.001, "leak": 0.01}, True),
    ("4% error tail at n=300", {"errors": 0.0, "tail": 12, "length": 300}, True),
]
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def simulate(spec: dict[str, float], n: int, rng: np.random.Generator) -> list[Comparison]:
    """One simulated log: k = 10, the baseline always answers 10 items at ~20 ms."""
    base = rng.lognormal(np.log(20.0), 0.3, n)
    shadow = rng.lognormal(np.log(spec.get("median", 20.0)), 0.3, n)
    failed = rng.random(n) < spec.get("errors", 0.0)
    if spec.get("tail"):  # the last ``tail`` comparisons fail: errors that start late in the stage
        failed[n - int(spec["tail"]) :] = True
    empty = rng.random(n) < spec.get("empty", 0.0)
    leak = rng.random(n) < spec.get("leak", 0.0)
    out = []
    for i in range(n):
        ok = not failed[i]
        count = 0 if empty[i] else 10
        out.append(
            Comparison(
                f"r{i}",
                T0 + timedelta(seconds=i),
                10,
                Side("qdrant", float(base[i]), True, 10, 0),
                Side("pgvector", float(shadow[i]), ok, count if ok else 0, int(ok and leak[i])),
                1.0 if ok else None,
                1.0 if ok else None,
                1.0 if ok else None,
                False,
            )
        )
    return out


def sequential_run(records: list[Comparison], alike: bool) -> sequential.SequentialResult:
    traces = sequential.rate_traces(
        records,
        max_error_rate=TH.max_error_rate,
        max_underfill_rate=TH.max_underfill_rate,
        max_p95_ms=TH.max_p95_ms,
        max_p99_ms=TH.max_p99_ms,
        band=TH.band if alike else None,
    )
    return sequential.judge_sequence(traces, TH.alpha, TH.min_samples)


def todays_rate_row(metric: MetricResult, records: list[Comparison], th: Thresholds) -> MetricResult:
    """A rate row classified as before issue 18: the point estimate against the budget (PASS at
    ``min_samples``), the SLO by exact order-statistic bounds at one horizon."""
    if metric.metric in ("shadowErrors", "underfill"):
        rows = records if metric.metric == "shadowErrors" else [r for r in records if r.both_ok]
        if metric.metric == "shadowErrors":
            hits = sum(not r.shadow.ok for r in rows)
            budget = th.max_error_rate
        else:
            hits = sum(r.shadow.count < min(r.k, r.primary.count) for r in rows)
            budget = th.max_underfill_rate
        if rows and hits / len(rows) > budget:
            return replace(metric, classification=FAIL)
        return replace(metric, classification=PASS if len(rows) >= th.min_samples else NODATA)
    q = 0.95 if metric.metric == "sloP95" else 0.99
    limit = th.max_p95_ms if q == 0.95 else th.max_p99_ms
    values = [r.shadow.latency_ms for r in records if r.shadow.ok]
    if len(values) < max(th.min_samples, stats.smallest_bounded_size(q, th.alpha)):
        return replace(metric, classification=NODATA)
    low, high = stats.quantile_bounds(values, q, th.alpha)
    if high is not None and high <= limit:
        return replace(metric, classification=PASS)
    if low is not None and low > limit:
        return replace(metric, classification=FAIL)
    return replace(metric, classification=MARGINAL)


RATE_ROWS = ("shadowErrors", "underfill", "sloP95", "sloP99")


def staged_runs(
    records: list[Comparison], alike: bool
) -> tuple[tuple[str, int | None], tuple[str, int | None]]:
    """The full judge and today's judge, each looked at after every :data:`LOOKS` comparisons and
    signed at its first GO or NO-GO (one judgement per look serves both)."""
    th = TH if alike else SEMANTIC
    new: tuple[str, int | None] | None = None
    old: tuple[str, int | None] | None = None
    for look in LOOKS:
        if look > len(records) and look != LOOKS[0]:
            break
        part = records[:look]
        judgement = judge_comparisons(ComparisonLog(part, [], ""), th, certificate_waiver="benchmark")
        if new is None and judgement.verdict in (GO, NO_GO):
            new = (judgement.verdict, len(part))
        if old is None:
            metrics = [
                todays_rate_row(m, part, th) if m.metric in RATE_ROWS and m.role != "shown" else m
                for m in judgement.metrics
                if m.metric != "sequential"
            ]
            verdict, _ = decide(metrics)
            if verdict in (GO, NO_GO):
                old = (verdict, len(part))
        if new is not None and old is not None:
            break
    return new or ("INCONCLUSIVE", None), old or ("INCONCLUSIVE", None)


def valid_fixed_n(rate: float, budget: float, alpha: float, power: float = 0.8) -> int:
    """The smallest fixed horizon at which an exact one-sided test proves the rate below ``budget``
    with probability ``power`` when the true rate is ``rate`` (the fixed-horizon cost of a valid GO)."""
    from scipy.stats import beta, binom

    for n in range(10, 20000, 5):
        c = -1
        while beta.ppf(1 - alpha, c + 2, n - c - 1) < budget:  # Clopper-Pearson upper bound with c+1 errors
            c += 1
        if c >= 0 and binom.cdf(c, n, rate) >= power:
            return n
    return -1


def share(rows: list[tuple[str, int | None]], verdict: str) -> str:
    return f"{sum(v == verdict for v, _ in rows) / max(len(rows), 1):.1%}"


def sizes(rows: list[tuple[str, int | None]]) -> str:
    ns = [n for _, n in rows if n is not None]
    if not ns:
        return "-"
    return f"{int(np.median(ns))} / {int(np.percentile(ns, 90))}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--only", default="", help="Only the scenarios whose name contains this text.")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; logs of {LENGTH} comparisons; alpha {TH.alpha:g}; "
          f"budgets errors {TH.max_error_rate:g}, underfill {TH.max_underfill_rate:g}, "
          f"p95 SLO {TH.max_p95_ms:g} ms, band {TH.band:.0%}; {args.runs} logs a scenario")  # fmt: skip
    print("| scenario | full judge, staged: GO / NO-GO | n to decide (median / p90) | today, staged: GO / "
          "NO-GO | n to decide | sequential row: GO / NO-GO | n to decide |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    clock = time.perf_counter()
    for name, spec, alike in SCENARIOS:
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(sum(map(ord, name)))  # seeded per scenario, stable across runs
        seq: list[tuple[str, int | None]] = []
        new: list[tuple[str, int | None]] = []
        old: list[tuple[str, int | None]] = []
        for _ in range(args.runs):
            records = simulate(spec, int(spec.get("length", LENGTH)), rng)
            found = sequential_run(records, alike)
            seq.append((found.decision, found.decided_at))
            staged, today = staged_runs(records, alike)
            new.append(staged)
            old.append(today)
        print(
            f"| {name} | {share(new, GO)} / {share(new, NO_GO)} | {sizes(new)} | "
            f"{share(old, GO)} / {share(old, NO_GO)} | {sizes(old)} | "
            f"{share(seq, GO)} / {share(seq, NO_GO)} | {sizes(seq)} |"
        )
        sys.stdout.flush()
    print(f"({time.perf_counter() - clock:.0f} s; load average now {os.getloadavg()[0]:.1f})")
    print(f"looks: after {', '.join(map(str, LOOKS))} comparisons (fewer when the log is shorter)")
    for rate in (0.0, 0.001, 0.003):
        print(f"valid fixed horizon for a GO on errors (true rate {rate:.1%}, budget 1%, 80% power): "
              f"{valid_fixed_n(rate, TH.max_error_rate, TH.alpha)} comparisons")  # fmt: skip


if __name__ == "__main__":
    main()
