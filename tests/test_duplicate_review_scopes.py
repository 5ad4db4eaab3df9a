"""The duplicate review of a store larger than ``max_entries``: a stated, seeded, stratified sample of
whole scopes (issue 20, "Reports at 1M"), on real SQLite stores. Under the cap nothing changes; over it
the counts are right, the seed decides the sample, only the sampled scopes are listed, and the
weighted store-wide figures estimate the whole store's."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.defrag.review import read_review_csv
from memwork.defrag.review_report import duplicate_review
from memwork.defrag.scope_sample import ScopeSample, sample_scopes, size_class
from memwork.errors import UsageError
from memwork.reports import run_report
from memwork.samples.entries import generate_entries
from memwork.stores import open_store

#: 8 scopes of 40..60 entries and 8 of 70..120: two size classes (32-63 and 64-127), 1,160 entries
SIZES = [40, 45, 50, 55, 60, 50, 45, 55, 70, 80, 90, 100, 110, 120, 95, 95]
CAP = 580  # half the store: four scopes of each class, each standing for two


# ---- the design, on counts alone -----------------------------------------------------------------------
def test_under_the_cap_every_scope_is_read_with_weight_one() -> None:
    counts = {"a": 10, "b": 20}
    for cap in (0, 30, 10**6):
        sample = sample_scopes(counts, cap, seed=3)
        assert sample.complete and sample.weights == {"a": 1.0, "b": 1.0} and sample.sampled_entries == 30
        assert "nothing was sampled" in sample.describe()


def test_over_the_cap_the_sample_is_stratified_seeded_and_stated() -> None:
    counts = {f"s{k:02d}": n for k, n in enumerate(SIZES)}
    sample = sample_scopes(counts, CAP, seed=7)
    assert not sample.complete and len(sample.weights) == 8 and sample.total_scopes == 16
    assert sample.sampled_entries == sum(counts[s] for s in sample.scopes)
    assert sample.total_entries == sum(SIZES)
    assert [(h["scopes"], h["sampled"], h["weight"]) for h in sample.strata] == [(8, 4, 2.0), (8, 4, 2.0)]
    for h in (5, 6):  # four of each size class
        assert sum(size_class(counts[s]) == h for s in sample.scopes) == 4
    assert sample_scopes(counts, CAP, seed=7) == sample  # the seed decides
    assert any(sample_scopes(counts, CAP, seed=s).scopes != sample.scopes for s in range(8, 12))
    text = sample.describe()
    assert f"a seeded sample of 8 of 16 scopes ({sample.sampled_entries:,} of 1,160 entries" in text
    assert "seed 7" in text and "weighted to the whole store" in text and "sampled scopes' pairs only" in text


def test_a_scope_larger_than_the_cap_is_always_read_whole() -> None:
    counts = {"huge": 5_000, **{f"s{k}": 100 for k in range(50)}}
    sample = sample_scopes(counts, 1_000, seed=1)
    assert sample.weight("huge") == 1.0 and sample.strata[0]["sampled"] == 1
    # nothing is left of the cap, yet every other stratum keeps one scope (else its total would be lost)
    assert len(sample.weights) == 2 and sample.strata[1]["weight"] == 50.0


def test_bad_max_entries_names_the_field() -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(UsageError, match="max_entries"):
            sample_scopes({"a": 1}, bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3_000), min_size=1, max_size=60),
    cap=st.integers(1, 20_000),
    seed=st.integers(0, 2**16),
)
def test_every_scope_is_stood_for_exactly_once(sizes: list[int], cap: int, seed: int) -> None:
    """Per stratum, the weights of its sampled scopes add up to its number of scopes: the estimate of
    any per-scope constant is exact, and no stratum is left out."""
    counts = {f"s{k}": n for k, n in enumerate(sizes)}
    sample = sample_scopes(counts, cap, seed=seed)
    assert math.isclose(sum(sample.weights.values()), len(counts))
    assert all(s in counts for s in sample.weights)
    big = [s for s, n in counts.items() if n >= cap]
    if sum(sizes) > cap:
        assert all(sample.weight(s) == 1.0 for s in big)
        classes = {size_class(n) for s, n in counts.items() if n < cap}
        assert {size_class(counts[s]) for s in sample.weights if counts[s] < cap} == classes


def horvitz_thompson(sample: ScopeSample, totals: dict[str, float]) -> float:
    return sum(w * totals[s] for s, w in sample.weights.items())


def test_the_weighted_total_is_unbiased_over_seeds() -> None:
    """The mean of the weighted estimate over many seeds is the true total (within 3 standard errors)."""
    rng = np.random.default_rng(0)
    counts = {f"s{k}": int(n) for k, n in enumerate(rng.integers(20, 2_000, size=120))}
    # a per-scope total that grows faster than the scope (pairs above a threshold, ~n^2)
    totals = {s: float(math.comb(n, 2)) * rng.uniform(0.001, 0.01) for s, n in counts.items()}
    truth = sum(totals.values())
    estimates = np.array(
        [horvitz_thompson(sample_scopes(counts, 20_000, seed=s), totals) for s in range(600)]
    )
    assert abs(estimates.mean() - truth) < 3 * estimates.std(ddof=1) / math.sqrt(len(estimates))


# ---- the review on a real SQLite store ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    spec = f"sqlite:///{tmp_path_factory.mktemp('scopes') / 'entries.db'}"
    with open_store(spec, create=True) as opened:
        for k, n in enumerate(SIZES):
            opened.put_many(generate_entries(n, scopes=[f"agent-{k:02d}"], seed=k))
    return spec


@pytest.fixture(scope="module")
def full(store: str, tmp_path_factory: pytest.TempPathFactory):
    return duplicate_review(store, max_entries=0, out_dir=tmp_path_factory.mktemp("full"))


def sub(folder: Path, name: str) -> Path:
    (folder / name).mkdir()
    return folder / name


def summary_without_paths(review) -> dict:
    out = review.summary()
    for key in ("review_file", "review_queue"):
        out.pop(key)
    out["scope_sample"].pop("max_entries")  # the cap asked for; what was read is compared
    return out


def test_under_the_cap_the_review_is_the_whole_store_as_before(store: str, full, tmp_path: Path) -> None:
    default = duplicate_review(store, out_dir=tmp_path)  # 1,160 entries: under the default cap
    assert default.scope_sample is not None and default.scope_sample.complete
    assert summary_without_paths(default) == summary_without_paths(full)
    assert default.operations == full.operations and default.pairs == full.pairs
    assert full.summary()["pairs_estimated"] == full.summary()["pairs"] and full.summary()["reasons"] == []


def test_over_the_cap_the_review_reads_and_lists_the_sampled_scopes_only(store: str, tmp_path: Path) -> None:
    review = duplicate_review(store, max_entries=CAP, seed=3, out_dir=sub(tmp_path, "a"))
    sampled = review.scope_sample
    assert sampled is not None and not sampled.complete and len(sampled.weights) == 8
    summary = review.summary()
    assert summary["scope_sample"]["scopes"] == 8 and summary["scope_sample"]["total_scopes"] == 16
    assert summary["scope_sample"]["entries"] == sum(SIZES[int(s.split("-")[1])] for s in sampled.scopes)
    assert (
        summary["scope_sample"]["sampled_scopes"] == sampled.scopes and summary["scope_sample"]["seed"] == 3
    )
    # only the sampled scopes' entries were read, and every listed pair and operation is theirs
    assert {scope for scope, _ in review.contents} == set(sampled.scopes)
    rows = read_review_csv(review.review_file)
    assert len(rows) == summary["pairs"] and {r["scope"] for r in rows} <= set(sampled.scopes)
    assert {op["scope"] for op in review.operations} <= set(sampled.scopes)
    # stated: in the report's first line, in the summary's reasons, and the weighted band count
    assert (
        review.scope_text().startswith("A seeded sample of 8 of 16 scopes")
        and "seed 3" in review.scope_text()
    )
    assert summary["reasons"] and "approving them merges only there" in summary["reasons"][0]
    assert summary["verdict"] == "INFO"
    assert summary["pairs_estimated"] == round(2.0 * summary["pairs"])  # every weight is 2 here
    assert summary["bands"]["combined (max)"]["at or above threshold"] == summary["pairs_estimated"]
    again = duplicate_review(store, max_entries=CAP, seed=3, out_dir=sub(tmp_path, "b"))
    assert summary_without_paths(again) == summary_without_paths(review)


def test_the_weighted_estimates_stand_for_the_whole_store(store: str, full, tmp_path: Path) -> None:
    """Seeded: each sampled scope's pairs are the full run's for that scope, so the weighted count is the
    Horvitz-Thompson estimate of the full run's (unbiased over seeds: tested on counts above); over a few
    seeds it lands near the full run's, and each run's label-free precision inside the full run's 95 %
    interval."""
    truth = full.summary()
    per_scope: dict[str, int] = {}
    for p in full.pairs:
        per_scope[p["scope"]] = per_scope.get(p["scope"], 0) + 1
    low, high = (float(x) for x in truth["estimates"][0]["precision 95% CI"].split("-"))
    pairs, population = [], []
    for seed in range(4):
        review = duplicate_review(store, max_entries=CAP, seed=seed, out_dir=sub(tmp_path, str(seed)))
        summary, sample = review.summary(), review.scope_sample
        assert sample is not None
        mine = {(p["scope"], p["path_a"], p["path_b"]) for p in review.pairs}
        assert mine == {
            (p["scope"], p["path_a"], p["path_b"]) for p in full.pairs if p["scope"] in sample.weights
        }
        assert summary["pairs_estimated"] == round(
            horvitz_thompson(sample, per_scope | {s: 0 for s in sample.weights if s not in per_scope})
        )
        pairs.append(summary["pairs_estimated"])
        population.append(sum(summary["bands"]["combined (max)"].values()))
        assert low <= summary["estimates"][0]["precision"] <= high
    total_pairs = sum(truth["bands"]["combined (max)"].values())  # every same-scope pair
    assert total_pairs == truth["sample"]["population"]
    assert abs(np.mean(population) / total_pairs - 1) < 0.1
    assert abs(np.mean(pairs) / truth["pairs"] - 1) < 0.2


def test_the_notebook_takes_max_entries_and_states_the_sample(store: str, tmp_path: Path) -> None:
    run = run_report("duplicate_review", {"store": store, "max_entries": CAP, "seed": 3}, tmp_path)
    assert run.exit_code == 0 and run.verdict == "INFO"
    sample = run.summary["scope_sample"]
    assert sample["scopes"] == 8 and sample["total_scopes"] == 16 and not sample["complete"]
    page = run.html_path.read_text(encoding="utf-8")
    assert "A seeded sample of 8 of 16 scopes" in page and "weighted to the whole store" in page
    assert run.summary["reasons"] and "sampled scopes' pairs only" in run.summary["reasons"][0]
