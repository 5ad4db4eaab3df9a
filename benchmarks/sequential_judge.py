"""The sequential (anytime-valid) judge against the fixed-horizon judge, on simulated comparison logs.

Why: a staged rollout looks at the log at every stage; a judge that may be looked at often must
not turn looks into false GOs. This prints, per scenario, how often each judge says GO / NO-GO and
how many comparisons it needed:

* **A/A** (the target behaves like the baseline: 0.1 % errors, no underfill, same latency): a NO-GO
  is a false alarm; the sequential judge should GO, and we count the comparisons it needs.
* **known regressions** (3 % / 2 % errors against a 1 % budget, 20 % empty answers, a p95 past the
  250 ms SLO, a 2x slower target of an alike rollout, a 4 % error tail in the last 300): a GO is a
  false GO; both must stay at or below 5 %.
* **staged fixed horizon**: today's judge (:func:`memwork.rollout.judge.judge_comparisons` with the
  sequential row ignored) looked at after 100, 300 and 1000 comparisons, GO at the first look that
  says GO -- what a staged rollout does with it.

Run: ``.venv/bin/python benchmarks/sequential_judge.py [--runs 200] [--fixed-runs 60]``.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

import numpy as np

from memwork.rollout import sequential
from memwork.rollout.comparisons import Comparison, ComparisonLog, Side
from memwork.rollout.judge import GO, NO_GO, Thresholds, decide, judge_comparisons

TH = Thresholds(max_error_rate=0.01, max_underfill_rate=0.01, max_p95_ms=250.0, max_p99_ms=1000.0)
LENGTH = 2000
LOOKS = (100, 300, 1000)
#: both sides declared semantic but the relative band off (an SLO-only scenario)
SEMANTIC = Thresholds(**{**TH.__dict__, "primary_ranking": "semantic", "shadow_ranking": "semantic"})

#: name, (error rate, empty rate, shadow median ms, error tail), alike (relative band decides)
SCENARIOS: list[tuple[str, dict[str, float], bool]] = [
    ("A/A (0.1% errors)", {"errors": 0.001}, True),
    ("errors 3% (budget 1%)", {"errors": 0.03}, True),
    ("errors 2% (budget 1%)", {"errors": 0.02}, True),
    ("20% empty answers", {"errors": 0.001, "empty": 0.2}, False),
    ("p95 past 250 ms SLO", {"errors": 0.001, "median": 200.0}, False),
    ("2x slower, alike backends", {"errors": 0.001, "median": 40.0}, True),
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
                Side("pgvector", float(shadow[i]), ok, count if ok else 0, 0),
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


def fixed_run(records: list[Comparison], alike: bool) -> tuple[str, int | None]:
    """Today's judge looked at after each of :data:`LOOKS` comparisons; GO at the first GO look."""
    th = TH if alike else SEMANTIC
    for look in LOOKS:
        log = ComparisonLog(records[:look], [], "")
        judgement = judge_comparisons(log, th, certificate_waiver="benchmark: no migration")
        verdict, _ = decide([m for m in judgement.metrics if m.metric != "sequential"])
        if verdict in (GO, NO_GO):
            return verdict, look
    return "INCONCLUSIVE", None


def full_judge(records: list[Comparison], alike: bool) -> str:
    """The judge as it signs off the whole log: fixed-horizon rows and the sequential row."""
    th = TH if alike else SEMANTIC
    return judge_comparisons(ComparisonLog(records, [], ""), th, certificate_waiver="benchmark").verdict


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--fixed-runs", type=int, default=60)
    parser.add_argument("--only", default="", help="Only the scenarios whose name contains this text.")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; logs of {LENGTH} comparisons; alpha {TH.alpha:g}; "
          f"budgets errors {TH.max_error_rate:g}, underfill {TH.max_underfill_rate:g}, "
          f"p95 SLO {TH.max_p95_ms:g} ms, band {TH.band:.0%}")  # fmt: skip
    header = (
        f"{'scenario':30} {'seq GO':>7} {'seq NO-GO':>9} {'seq n (median, p90)':>20} "
        f"{'staged GO':>9} {'staged NO-GO':>12} {'full judge GO/NO-GO':>20}"
    )
    print(header)
    print("-" * len(header))
    clock = time.perf_counter()
    for name, spec, alike in SCENARIOS:
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(abs(hash(name)) % 2**32)
        seq: list[tuple[str, int | None]] = []
        fixed: list[tuple[str, int | None]] = []
        full: list[tuple[str, int | None]] = []
        for run in range(args.runs):
            records = simulate(spec, int(spec.get("length", LENGTH)), rng)
            found = sequential_run(records, alike)
            seq.append((found.decision, found.decided_at))
            if run < args.fixed_runs:
                fixed.append(fixed_run(records, alike))
                full.append((full_judge(records, alike), None))

        def share(rows: list[tuple[str, int | None]], verdict: str) -> str:
            return f"{sum(v == verdict for v, _ in rows) / max(len(rows), 1):.1%}"

        def sizes(rows: list[tuple[str, int | None]]) -> str:
            ns = [n for _, n in rows if n is not None]
            if not ns:
                return "-"
            return f"{int(np.median(ns))}, {int(np.percentile(ns, 90))}"

        print(
            f"{name:30} {share(seq, GO):>7} {share(seq, NO_GO):>9} {sizes(seq):>20} "
            f"{share(fixed, GO):>9} {share(fixed, NO_GO):>12} "
            f"{share(full, GO) + ' / ' + share(full, NO_GO):>20}"
        )
    print(f"({args.runs} sequential runs, {args.fixed_runs} fixed-horizon runs per scenario; "
          f"{time.perf_counter() - clock:.0f} s)")  # fmt: skip
    looks = ", ".join(map(str, LOOKS))
    print(f"staged = today's fixed-horizon judge looked at after {looks} comparisons, signed at the first")
    print("GO or NO-GO; full judge = every row (sequential included) at the end of the log")
    for rate in (0.0, 0.001, 0.003):
        print(f"valid fixed horizon for a GO on errors (true rate {rate:.1%}, budget 1%, 80% power): "
              f"{valid_fixed_n(rate, TH.max_error_rate, TH.alpha)} comparisons")  # fmt: skip


if __name__ == "__main__":
    main()
