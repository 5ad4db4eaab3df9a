"""The label-free (Fellegi-Sunter EM) estimate against stores whose truth is known."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.defrag.calibrate import calibrate
from memwork.defrag.findings import Pair, find_duplicates
from memwork.defrag.label_free import estimate_pairs, estimate_without_labels, levels, size_class
from memwork.defrag.review_queue import build_review_queue
from memwork.embed import HashEmbedder
from memwork.entry import Entry
from memwork.samples.entries import generate_entries
from memwork.stores import open_store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def two_populations(seed: int = 1) -> tuple[list[Pair], np.ndarray, dict[str, int]]:
    """Duplicates (both signals high) and distinct look-alikes (both moderate, a few reaching 0.88),
    in a small and a large scope; returns the candidate pairs at 0.5, their truth and scope sizes."""
    rng = np.random.default_rng(seed)
    pairs, truth = [], []
    for scope, dups, distinct in (("small", 40, 300), ("big", 160, 4000)):
        text = np.concatenate([rng.uniform(0.75, 1.0, dups), rng.uniform(0.0, 0.6, distinct)])
        sem = np.concatenate([rng.uniform(0.8, 1.0, dups), rng.uniform(0.45, 0.88, distinct)])
        for k, (t, s) in enumerate(zip(text, sem, strict=True)):
            if max(t, s) >= 0.5:
                pairs.append(Pair(scope, f"a{k}", f"b{k}", max(t, s), t, s))
                truth.append(k < dups)
    return pairs, np.array(truth), {"small": 60, "big": 2500}


def true_precision(pairs: list[Pair], truth: np.ndarray, threshold: float) -> float:
    above = np.array([p.similarity >= threshold for p in pairs])
    return float(truth[above].mean())


def test_two_populations_precision_within_a_tenth() -> None:
    pairs, truth, sizes = two_populations()
    est = estimate_pairs(pairs, sizes, floor=0.5, samples=50)
    at = est.at(0.85)
    assert at is not None
    assert abs(at["precision"] - true_precision(pairs, truth, 0.85)) <= 0.10
    low, high = at["precision_ci"]
    assert low <= at["precision"] <= high
    assert set(est.classes) == {"all", "small", "large"}
    assert est.classes["all"]["lambda"] == pytest.approx(truth.mean(), abs=0.03)


def test_em_is_deterministic_given_the_seed() -> None:
    pairs, _, sizes = two_populations()
    first = estimate_pairs(pairs, sizes, seed=7, samples=30).to_dict()
    assert estimate_pairs(pairs, sizes, seed=7, samples=30).to_dict() == first
    assert estimate_pairs(pairs, sizes, seed=8, samples=30).to_dict()["model"] == first["model"]


def test_generated_store_precision_within_a_tenth() -> None:
    """The sample generator's store (planted copies, near duplicates and paraphrases)."""
    entries = generate_entries(500, scopes=("a", "b"), seed=5, now=NOW, embedder=HashEmbedder(384))
    pairs = find_duplicates(entries, 0.5)
    truth = np.array([p.path_a.rsplit("-", 1)[0] == p.path_b.rsplit("-", 1)[0] for p in pairs])
    est = estimate_without_labels(entries, floor=0.5, samples=30)
    at = est.at(0.85)
    assert at is not None
    assert abs(at["precision"] - true_precision(pairs, truth, 0.85)) <= 0.10


def test_levels_and_classes() -> None:
    assert levels(np.array([0.0, 0.5, 0.849, 0.85, 1.0, np.nan])).tolist() == [0, 2, 3, 4, 5, -1]
    assert [size_class(n) for n in (3, 100, 5000)] == ["small", "medium", "large"]
    assert estimate_pairs([], {}).to_dict()["pairs"] == 0


def test_cli_without_labels_writes_the_estimate(sqlite_url: str, tmp_path: Path) -> None:
    entries: list[Entry] = generate_entries(120, scopes=("a",), seed=2, now=NOW, embedder=HashEmbedder(384))
    with open_store(sqlite_url, create=True) as store:
        store.put_many(entries)
    out = tmp_path / "free.json"
    result = CliRunner().invoke(main, ["defrag", "calibrate", "--store", sqlite_url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["method"] == "fellegi-sunter-em"
    assert any(row["threshold"] == 0.85 for row in data["classes"]["all"]["thresholds"])
    nothing = CliRunner().invoke(main, ["defrag", "calibrate"])
    assert nothing.exit_code == 2


def test_label_free_beside_labels(tmp_path: Path) -> None:
    """With the labelled store's entries the policy holds the label-free estimate at the queue's floor."""
    entries = generate_entries(200, scopes=("a",), seed=3, now=NOW, embedder=HashEmbedder(384))
    review = tmp_path / "review.csv"
    build_review_queue(entries, review, size=60, floor=0.5, seed=1)
    with review.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        same = row["path_a"].rsplit("-", 1)[0] == row["path_b"].rsplit("-", 1)[0]
        row["decision"] = "duplicate" if same else "distinct"
    labelled = tmp_path / "labelled.csv"
    with labelled.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    policy = calibrate(labelled, entries=entries, samples=50).to_dict()
    assert policy["label_free"]["floor"] == policy["floor"]
    assert policy["label_free"]["classes"]["all"]["pairs"] > 0
    assert "label_free" not in calibrate(labelled, samples=50).to_dict()


def _labelled(review: Path, out: Path) -> Path:
    with review.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        same = row["path_a"].rsplit("-", 1)[0] == row["path_b"].rsplit("-", 1)[0]
        row["decision"] = "duplicate" if same else "distinct"
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_past_the_pair_budget_review_and_calibrate_take_a_stated_sample(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose pairs at the floor pass MEMWORK_MAX_PAIRS (as 5,000 FEBRL3 records do): review
    and calibrate --store refuse it naming --sample-pairs, writing nothing; with it they run on the
    exact band plus a uniform pair sample and say so."""
    entries = generate_entries(300, scopes=("a",), seed=2, now=NOW, embedder=HashEmbedder(384))
    at_floor, in_band = len(find_duplicates(entries, 0.5)), len(find_duplicates(entries, 0.7))
    assert in_band < at_floor
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", str((in_band + at_floor) // 2))
    with open_store(sqlite_url, create=True) as store:
        store.put_many(entries)
    run = CliRunner().invoke
    free, review, policy = tmp_path / "free.json", tmp_path / "review.csv", tmp_path / "policy.json"
    for args in (["calibrate", "-o", str(free)], ["review", "--size", "60", "-o", str(review)]):
        refused = run(main, ["defrag", *args, "--store", sqlite_url])
        assert refused.exit_code == 2 and "--sample-pairs" in refused.output, refused.output
    assert not free.exists() and not review.exists()

    done = run(main, ["defrag", "calibrate", "--store", sqlite_url, "--sample-pairs", "2000",
                      "-o", str(free)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "uniform random sample of 2,000" in done.output
    data = json.loads(free.read_text())
    assert "uniform random sample of 2,000" in data["population"] and data["classes"]["all"]["pairs"] > 0

    done = run(main, ["defrag", "review", "--store", sqlite_url, "--size", "60", "--sample-pairs", "2000",
                      "-o", str(review)])  # fmt: skip
    assert done.exit_code == 0, done.output
    labels = str(_labelled(review, tmp_path / "labels.csv"))
    refused = run(main, ["defrag", "calibrate", "--labels", labels, "--store", sqlite_url, "-o", str(policy)])
    assert refused.exit_code == 2 and "--sample-pairs" in refused.output and not policy.exists()
    done = run(main, ["defrag", "calibrate", "--labels", labels, "--store", sqlite_url, "--sample-pairs",
                      "2000", "-o", str(policy)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "uniform random sample of 2,000" in json.loads(policy.read_text())["label_free"]["population"]
    bad = run(main, ["defrag", "calibrate", "--labels", labels, "--sample-pairs", "2000"])
    assert bad.exit_code == 2 and "sample_pairs" in bad.output
