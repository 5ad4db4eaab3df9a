"""The character similarity (the calibrated policy's third signal): its properties, its exact join,
the review queue's ``char_high`` stratum and weights, policies with and without it (issue 19)."""

from __future__ import annotations

import csv
import itertools
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.defrag.calibrate import (
    BASE_FEATURES,
    Policy,
    calibrate,
    find_policy_pairs,
    load_policy,
    read_labels,
    stratum_weights,
    write_policy,
)
from memwork.defrag.char_similarity import CHAR_FEATURE, CHAR_VERSION, char_join, char_similarity, fold
from memwork.defrag.findings import Pair, find_duplicates
from memwork.defrag.review_queue import build_review_queue, pair_chars, stratum_of
from memwork.embed import HashEmbedder
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.samples.entries import generate_entries
from memwork.similarity import MAX_PAIRS_ENV, PairBudget

NOW = datetime(2026, 1, 1, tzinfo=UTC)
words = st.text(alphabet="abcde XY\t", max_size=30)


def truth(path_a: str, path_b: str) -> bool:
    return path_a.rsplit("-", 1)[0] == path_b.rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def entries() -> list[Entry]:
    return generate_entries(300, scopes=("a", "b"), seed=7, now=NOW, embedder=HashEmbedder(384))


@given(words, words)
@settings(max_examples=200, deadline=None)
def test_char_similarity_is_a_bounded_symmetric_similarity(a: str, b: str) -> None:
    s = char_similarity(a, b)
    assert 0.0 <= s <= 1.0
    assert s == char_similarity(b, a)
    assert char_similarity(a, a) == 1.0
    assert char_similarity(a.upper(), "  ".join(a.split())) == char_similarity(a, a)  # folded
    if fold(a) != fold(b):
        assert s < 1.0


def test_a_typo_keeps_characters_but_not_words() -> None:
    a = "lachlan berry lives at 69 giblin street, killarney; born 1999-02-19."
    b = "lachlan bery lives at 69 giblni street, kilarney; born 1999-02-91."
    assert char_similarity(a, b) > 0.9
    assert char_similarity(a, "someone else entirely, no street, no date") < 0.6


@given(st.lists(words, min_size=0, max_size=12), st.sampled_from([0.0, 0.3, 0.6, 0.85, 1.0]))
@settings(max_examples=60, deadline=None)
def test_char_join_is_the_double_loop(texts: list[str], cutoff: float) -> None:
    i, j, score = char_join(texts, cutoff)
    found = {(int(a), int(b)): float(s) for a, b, s in zip(i, j, score, strict=True)}
    expected = {
        (a, b): char_similarity(texts[a], texts[b])
        for a, b in itertools.combinations(range(len(texts)), 2)
        if char_similarity(texts[a], texts[b]) >= cutoff
    }
    assert found == expected


def test_char_join_spends_the_pair_budget() -> None:
    with pytest.raises(UsageError, match=MAX_PAIRS_ENV):
        char_join(["same text"] * 10, 0.5, budget=PairBudget(5))


def test_char_high_is_its_own_stratum() -> None:
    low = Pair("s", "a", "b", 0.55, 0.4, 0.55)
    assert stratum_of(low, 0.85, 0.5, char=0.9) == "char_high"
    assert stratum_of(low, 0.85, 0.5, char=0.5) == stratum_of(low, 0.85, 0.5) == "below:0.50-0.60"
    assert stratum_of(Pair("s", "a", "b", 0.9, 0.9, 0.9), 0.85, 0.5, char=1.0) == "both_high"


def test_review_file_has_the_char_column(entries: list[Entry], tmp_path: Path) -> None:
    queue = build_review_queue(entries, tmp_path / "r.csv", size=60, seed=1)
    rows = list(csv.DictReader((tmp_path / "r.csv").open(encoding="utf-8")))
    expected = pair_chars([r.pair for r in queue.rows], entries)
    got = np.array([float(r[CHAR_FEATURE]) for r in rows])
    assert got == pytest.approx(expected, abs=1e-6)


def test_sampled_queue_estimates_the_store_without_bias(entries: list[Entry], tmp_path: Path) -> None:
    """The queue drawn from the exact band, the exact char_high pairs below it and a pair sample of
    the rest: over many seeds its weighted counts of pairs and of true duplicates at or above the
    floor (by signal band) average to the store's, within three standard errors -- no pair counted
    twice, none missed."""
    population = find_duplicates(entries, 0.5)
    chars = pair_chars(population, entries)
    y_all = np.array([truth(p.path_a, p.path_b) for p in population], dtype=bool)
    sim_all = np.array([p.similarity for p in population])

    def counts(y: np.ndarray, sim: np.ndarray, char: np.ndarray, w: np.ndarray) -> list[float]:
        return [
            float(w.sum()),
            float((w * y).sum()),
            float((w * (y & (sim < 0.7))).sum()),
            float((w * (y & (char >= 0.85))).sum()),
            float((w * (~y & (sim >= 0.7))).sum()),
        ]

    expected = np.array(counts(y_all, sim_all, chars, np.ones(len(population))))
    estimates = []
    for seed in range(30):
        queue = build_review_queue(entries, tmp_path / "q.csv", size=80, seed=seed, pair_sample=4000)
        rows = queue.rows
        y = np.array([truth(r.pair.path_a, r.pair.path_b) for r in rows], dtype=bool)
        sim = np.array([r.pair.similarity for r in rows])
        char = np.array([r.char for r in rows], dtype=float)
        estimates.append(counts(y, sim, char, np.array([r.weight for r in rows])))
    est = np.array(estimates)
    standard_error = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - expected) <= 3 * standard_error + 1e-6 * expected + 1e-9)


# ---- policies with and without the third signal ------------------------------------------------------
def _label(review: Path, out: Path, drop_char: bool = False) -> Path:
    rows = list(csv.DictReader(review.open(encoding="utf-8")))
    for row in rows:
        row["decision"] = "duplicate" if truth(row["path_a"], row["path_b"]) else "distinct"
        if drop_char:
            del row[CHAR_FEATURE]
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_old_review_file_gives_the_two_signal_policy(entries: list[Entry], tmp_path: Path) -> None:
    queue = build_review_queue(entries, tmp_path / "r.csv", size=100, seed=2)
    old = _label(queue.output, tmp_path / "old.csv", drop_char=True)
    assert read_labels(old).char is None
    policy = calibrate(old, target_precision=0.95).policy
    assert policy.features == BASE_FEATURES and len(policy.coef) == 2
    new = calibrate(_label(queue.output, tmp_path / "new.csv"), target_precision=0.95).policy
    assert new.features == (*BASE_FEATURES, CHAR_FEATURE) and len(new.coef) == 3
    assert stratum_weights(read_labels(old)) == pytest.approx(
        stratum_weights(read_labels(tmp_path / "new.csv"))
    )


def test_version_1_policy_still_loads_and_scores(tmp_path: Path) -> None:
    data = {
        "version": 1,
        "embedding_model": "hash-384",
        "score": {
            "kind": "logistic",
            "features": ["text_similarity", "semantic_similarity"],
            "coef": [4.0, 6.0],
            "intercept": -8.0,
        },
        "auto_merge": 0.9,
        "review": 0.4,
        "floor": 0.5,
        "target_precision": 0.99,
        "labels_sha256": "0" * 64,
    }
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    policy = load_policy(path)
    assert policy.features == BASE_FEATURES and not policy.uses_char
    assert policy.score(0.5, 0.9) == pytest.approx(1 / (1 + math.exp(-(4.0 * 0.5 + 6.0 * 0.9 - 8.0))))
    assert policy.score(0.7, None) == pytest.approx(1 / (1 + math.exp(-(10.0 * 0.7 - 8.0))))
    assert policy.char_floor() is None


def test_version_2_policy_round_trips_and_checks_its_features(entries: list[Entry], tmp_path: Path) -> None:
    queue = build_review_queue(entries, tmp_path / "r.csv", size=100, seed=3)
    calibration = calibrate(_label(queue.output, tmp_path / "l.csv"), target_precision=0.95)
    path = write_policy(calibration, tmp_path / "p.json")
    data = json.loads(path.read_text())
    assert data["version"] == 2 and data["score"]["features"][-1] == CHAR_FEATURE
    assert data["score"]["char_version"] == CHAR_VERSION
    loaded = load_policy(path)
    assert loaded.coef == pytest.approx(calibration.policy.coef) and loaded.uses_char
    for change, needle in (
        ({"char_version": "other-0"}, "character similarity"),
        ({"coef": [1.0, 2.0]}, "coefficients"),
        ({"features": ["text_similarity", "length"]}, "unknown features"),
    ):
        bad = json.loads(path.read_text())
        bad["score"] |= change
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=needle):
            load_policy(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="char"):
        loaded.scores(np.array([0.5]), np.array([0.5]))


@pytest.mark.parametrize("coef", [(2.0, 2.0, 12.0), (3.0, 4.0, 1.0), (6.0, 5.0, -1.0)])
def test_policy_pairs_are_every_pair_scoring_review(entries: list[Entry], coef: tuple[float, ...]) -> None:
    """Whichever join finds the candidates (characters for a large char weight, the similarity join
    otherwise), the policy's pairs are exactly those at or above its floor scoring ``review``."""
    policy = Policy(
        embedding_model="hash-384",
        coef=coef,
        intercept=-9.0,
        auto_merge=0.9,
        review=0.5,
        floor=0.5,
        target_precision=0.99,
        labels_sha256="0" * 64,
        features=(*BASE_FEATURES, CHAR_FEATURE),
    )
    population = find_duplicates(entries, policy.floor)
    semantic = np.array(
        [math.nan if p.semantic_similarity is None else p.semantic_similarity for p in population]
    )
    scores = policy.scores(
        np.array([p.text_similarity for p in population]), semantic, pair_chars(population, entries)
    )
    expected = {(p.scope, p.path_a, p.path_b) for p, s in zip(population, scores, strict=True) if s >= 0.5}
    found = find_policy_pairs(entries, policy)
    assert {(p.scope, p.path_a, p.path_b) for p in found} == expected
    assert all(p.decision == ("merge" if (p.policy_score or 0) >= 0.9 else "review") for p in found)
