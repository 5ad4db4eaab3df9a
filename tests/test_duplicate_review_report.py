"""The duplicate review report on real stores: a stated pair sample below the duplicate band (never a
refusal), the labels chart, the CSVs beside the HTML, and review -> calibrate -> policy-driven merge
on FEBRL records with known truth, from the CLI and from the notebook."""

from __future__ import annotations

import csv
import html
import json
import math
import shlex
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.defrag.calibrate import BASE_FEATURES, Policy, find_policy_pairs, load_policy
from memwork.defrag.char_similarity import CHAR_FEATURE
from memwork.defrag.findings import find_duplicates
from memwork.defrag.pair_sample import sample_scope_pairs, triangle_pairs
from memwork.defrag.review_queue import (
    build_review_queue,
    exact_band,
    pair_chars,
    store_embedding_model,
    weighted_population,
    weighted_queue,
)
from memwork.defrag.review_report import DuplicateReview, duplicate_review
from memwork.embed import HashEmbedder
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.reports import duplicate_view as view
from memwork.reports import run_report
from memwork.reports.display import figure_alt
from memwork.samples.entries import generate_entries
from memwork.samples.febrl import FebrlSet, embed_entries, load_febrl
from memwork.samples.store import sample_store
from memwork.stores import open_store
from memwork.stores.memory import MemoryStore


def lineage(path_a: str, path_b: str) -> bool:
    """The generator's truth: a planted copy keeps its source's path stem, only the number changes."""
    return path_a.rsplit("-", 1)[0] == path_b.rsplit("-", 1)[0]


def label(review: Path, out: Path, is_duplicate) -> Path:
    """A reviewer who knows the truth labels every row."""
    rows = list(csv.DictReader(review.open(encoding="utf-8")))
    for row in rows:
        row["decision"] = "duplicate" if is_duplicate(row["path_a"], row["path_b"]) else "distinct"
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ---- the pair sample and its weights ------------------------------------------------------------------
@pytest.fixture(scope="module")
def hashed() -> list[Entry]:
    return generate_entries(400, scopes=("a", "b"), seed=5, embedder=HashEmbedder(384))


def test_triangle_pairs_enumerate_every_pair_in_order() -> None:
    for n in (2, 3, 9, 150):
        i, j = triangle_pairs(n, np.arange(n * (n - 1) // 2))
        want_i, want_j = np.triu_indices(n, 1)
        assert (i == want_i).all() and (j == want_j).all()


def test_a_complete_sample_scores_pairs_as_find_duplicates(hashed: list[Entry]) -> None:
    sample = sample_scope_pairs(hashed, 10**6)
    assert sample.complete and sample.weight == 1.0 and "every one of" in sample.describe()
    exact = {(p.scope, p.path_a, p.path_b): p for p in find_duplicates(hashed, 0.5)}
    mine = {(p.scope, p.path_a, p.path_b): p for p in sample.pairs if p.similarity >= 0.5}
    assert mine.keys() == exact.keys()
    for key, pair in exact.items():
        assert mine[key].text_similarity == pair.text_similarity
        assert mine[key].semantic_similarity == pair.semantic_similarity


def test_a_partial_sample_is_seeded_and_stated(hashed: list[Entry]) -> None:
    one, two = sample_scope_pairs(hashed, 500, seed=3), sample_scope_pairs(hashed, 500, seed=3)
    assert [p.path_a + p.path_b for p in one.pairs] == [p.path_a + p.path_b for p in two.pairs]
    assert one.size == 500 and not one.complete and all(p.path_a < p.path_b for p in one.pairs)
    assert f"500 of the store's {one.population:,}" in one.describe() and "seed 3" in one.describe()
    with pytest.raises(UsageError, match="sample_pairs=0"):
        sample_scope_pairs(hashed, 0)


def test_the_sampled_queue_weights_estimate_the_whole_store(hashed: list[Entry]) -> None:
    """Two-stage sampling (a pair sample, then the stratified queue from it): the weighted counts of
    duplicates and distinct pairs at or above 0.7 and 0.85 average to the true counts over seeds."""
    population = find_duplicates(hashed, 0.5)
    y_all = np.array([lineage(p.path_a, p.path_b) for p in population])
    sim_all = np.array([p.similarity for p in population])
    expected = [float(((y_all == dup) & (sim_all >= t)).sum()) for dup in (True, False) for t in (0.7, 0.85)]
    band = find_duplicates(hashed, 0.85)
    estimates = []
    for seed in range(30):
        sample = sample_scope_pairs(hashed, 4000, seed=seed)
        weighted = [p for p in weighted_population(band, sample, 0.85) if p[0].similarity >= 0.5]
        rows = weighted_queue(weighted, size=120, floor=0.5, threshold=0.85, seed=seed)
        y = np.array([lineage(r.pair.path_a, r.pair.path_b) for r in rows])
        sim, w = np.array([r.pair.similarity for r in rows]), np.array([r.weight for r in rows])
        estimates.append([float((w * (y == dup)) @ (sim >= t)) for dup in (True, False) for t in (0.7, 0.85)])
    got = np.array(estimates)
    error = got.std(axis=0, ddof=1) / math.sqrt(len(got))
    assert np.all(np.abs(got.mean(axis=0) - expected) <= 3 * error + 1e-6), (got.mean(axis=0), expected)


def test_the_exact_pairs_reach_below_the_threshold_when_the_budget_allows(hashed, monkeypatch) -> None:
    band, cutoff = exact_band(hashed, 0.85, 0.5)
    assert cutoff == 0.7 and {(p.path_a, p.path_b) for p in band} == {
        (p.path_a, p.path_b) for p in find_duplicates(hashed, 0.7)
    }
    above = len(find_duplicates(hashed, 0.85))
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", str(above))  # room for the threshold's pairs only
    band, cutoff = exact_band(hashed, 0.85, 0.5)
    assert cutoff == 0.85 and len(band) == above


def test_the_policy_search_starts_higher_and_loses_no_pair(hashed: list[Entry], tmp_path: Path) -> None:
    queue = build_review_queue(hashed, tmp_path / "q.csv", size=150, seed=1)
    labels = label(queue.output, tmp_path / "l.csv", lineage)
    assert cli("defrag", "calibrate", "--labels", str(labels), "-o", str(tmp_path / "p.json")).exit_code == 0
    policy = load_policy(tmp_path / "p.json")
    assert policy.search_floor() > policy.floor
    every = find_duplicates(hashed, policy.floor)
    scores = policy.scores(
        np.array([p.text_similarity for p in every]),
        np.array([math.nan if p.semantic_similarity is None else p.semantic_similarity for p in every]),
        pair_chars(every, hashed) if policy.uses_char else None,
    )
    want = {(p.scope, p.path_a, p.path_b) for p, s in zip(every, scores, strict=True) if s >= policy.review}
    assert {(p.scope, p.path_a, p.path_b) for p in find_policy_pairs(hashed, policy)} == want
    negative = Policy(policy.embedding_model, (-1.0, 2.0), 0.0, None, 0.5, 0.5, 0.99, "x")
    assert negative.search_floor() == negative.floor  # no bound without non-negative coefficients


def test_review_past_max_pairs_needs_and_takes_a_pair_sample(hashed, tmp_path, monkeypatch) -> None:
    store = f"sqlite:///{tmp_path / 'h.db'}"
    with open_store(store, create=True) as s:
        s.put_many(hashed)
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", "100")
    out = tmp_path / "review.csv"
    refused = CliRunner().invoke(main, ["defrag", "review", "--store", store, "-o", str(out)])
    assert refused.exit_code == 2 and "MEMWORK_MAX_PAIRS" in refused.output and not out.exists()
    done = cli("defrag", "review", "--store", store, "-o", str(out), "--sample-pairs", "3000", "--size", "90")
    assert done.exit_code == 0 and "pairs of an estimated" in done.output, done.output
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(rows) == 90 and all(float(r["weight"]) > 0 for r in rows)
    assert any(r["stratum"].startswith("below:") and float(r["weight"]) > 1 for r in rows)


# ---- the report through the runner ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_store() -> str:
    return sample_store(250, seed=5)


def test_the_report_past_max_pairs_completes_with_the_sample_stated(
    tmp_path, small_store, monkeypatch
) -> None:
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", "200")
    with open_store(small_store) as store:
        entries = store.all_entries()
    with pytest.raises(UsageError, match="MEMWORK_MAX_PAIRS"):  # what made the report exit 2 before
        find_duplicates(entries, 0.5)
    run = run_report("duplicate_review", {"store": small_store, "sample_pairs": 2000, "seed": 4}, tmp_path)
    assert run.exit_code == 0 and run.verdict == "INFO"
    sample = run.summary["sample"]
    assert sample == {"pairs": 2000, "population": sample["population"], "seed": 4, "complete": False}
    page = run.html_path.read_text(encoding="utf-8")
    assert (
        f"a uniform random sample of 2,000 of the store's {sample['population']:,} same-scope pairs" in page
    )
    assert "(seed 4;" in page and "pairs (log scale)" not in page  # axis titles live in the PNG ...
    assert "text (Jaccard): below 0.8" in page  # ... and the numbers in its alt text
    assert run.summary["bands"]["combined (max)"]["at or above threshold"] == run.summary["pairs"]


def test_the_labels_chart_appears_with_labels(tmp_path, small_store) -> None:
    with open_store(small_store) as store:
        entries = store.all_entries()
    queue = build_review_queue(entries, tmp_path / "queue.csv", size=120, seed=2)
    labels = label(queue.output, tmp_path / "labels.csv", lineage)
    params = {"store": small_store, "labels": str(labels), "sample_pairs": 3000}
    run = run_report("duplicate_review", params, tmp_path)
    assert run.exit_code == 0
    page = run.html_path.read_text(encoding="utf-8")
    assert 'alt="Threshold selection from ' in page and "current threshold 0.85: precision" in page
    assert [e["estimate"].split(" ")[0] for e in run.summary["estimates"]] == ["label-free", "labelled"]
    policy = load_policy(run.run_dir / "policy.json")  # calibrated from the labels, drives the plan
    assert run.summary["policy"]["review"] == policy.review and "policy score" in page
    # every cut table links its whole CSV beside the HTML, and the files are there
    for name in ("review_queue.csv", "duplicate_review.csv"):
        assert f'<a href="{name}">' in page and (run.run_dir / name).is_file()


# ---- FEBRL end to end ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def febrl() -> FebrlSet:
    data = load_febrl("febrl1", limit=120)
    embed_entries(data.entries, "minilm")
    return data


def febrl_store(data: FebrlSet, folder: Path) -> str:
    spec = f"sqlite:///{folder / 'febrl.db'}"
    with open_store(spec, create=True, dimension=384) as store:
        store.put_many([e.copy() for e in data.entries])
    return spec


@pytest.fixture
def calibrated(febrl: FebrlSet, tmp_path: Path) -> tuple[str, Path, Path]:
    """A FEBRL1 store, its review queue labelled from the truth, and the policy calibrated from it."""
    store = febrl_store(febrl, tmp_path)
    review = tmp_path / "review.csv"
    done = cli("defrag", "review", "--store", store, "--size", "80", "-o", str(review), "--json")
    assert done.exit_code == 0, done.output
    labels = label(review, tmp_path / "labels.csv", febrl.is_duplicate)
    policy = tmp_path / "policy.json"
    # 80 labels cannot show 99 % precision at 95 % confidence (auto_merge would stay off): ask 95 %
    done = cli(
        "defrag", "calibrate", "--labels", str(labels), "-o", str(policy), "--target-precision", "0.95"
    )
    assert done.exit_code == 0, done.output
    return store, labels, policy


def test_febrl_review_calibrate_merge_from_the_cli(febrl: FebrlSet, calibrated) -> None:
    store, _, policy = calibrated
    assert febrl.truth and len(febrl.entries) > 200
    with open_store(store) as s:
        before = {e.key: e.to_record() for e in s.all_entries()}
    dry = json.loads(
        cli("defrag", "merge-duplicates", "--store", store, "--policy", str(policy), "--json").output
    )
    assert dry["dry_run"] and dry["summary"]["auto_merge_pairs"] > 0
    merged = [(op["path"], op["target"]) for op in dry["operations"] if op["op"] == "merge"]
    right = sum(febrl.is_duplicate(a, b) or _same_person(a, b) for a, b in merged)
    assert merged and right / len(merged) >= 0.9, (right, len(merged))
    with open_store(store) as s:
        assert {e.key: e.to_record() for e in s.all_entries()} == before  # a dry run writes nothing
    done = cli("defrag", "merge-duplicates", "--store", store, "--policy", str(policy), "--apply", "--json")
    applied = json.loads(done.output)
    assert applied["applied"] and applied["operations"] == dry["operations"]
    with open_store(store) as s:
        stubs = [e for e in s.all_entries() if e.is_stub]
    assert len(stubs) == len(merged)


def _same_person(a: str, b: str) -> bool:
    return a.split("-")[:2] == b.split("-")[:2]


def test_febrl_review_calibrate_merge_from_the_notebook(febrl: FebrlSet, calibrated, tmp_path) -> None:
    store, labels, policy = calibrated
    dry = json.loads(
        cli("defrag", "merge-duplicates", "--store", store, "--policy", str(policy), "--json").output
    )
    run = run_report(
        "duplicate_review",
        {"store": store, "labels": str(labels), "policy": str(policy), "sample_pairs": 3000},
        tmp_path / "out",
    )
    assert run.exit_code == 0
    effect = run.summary["effect"]
    assert effect["entries merged"] == dry["summary"]["operations"].get("merge", 0) > 0
    assert effect["stubs created"] == dry["summary"]["operations"].get("stub", 0)
    assert effect["bytes saved"] == dry["summary"]["bytes_freed"]
    assert run.summary["policy"]["policy file"] == str(policy)
    # the cluster table's contradiction column is checked (memwork.defrag.contradictions), never a guess
    clusters = list(csv.DictReader((run.run_dir / "clusters.csv").open(encoding="utf-8")))
    assert clusters and all(c["contradiction"] != "not checked" for c in clusters)


# ---- what the report shows, on a store whose pairs are known ---------------------------------------
WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
    "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
)  # fmt: skip
T0 = datetime(2025, 3, 1, tzinfo=UTC)


def known_entries() -> list[Entry]:
    """A chain by text (a≈b, b≈c, a≉c: Jaccard 19/21, 19/21, 18/22 at threshold 0.85, no vectors) and
    a pair alike by meaning only (the same vector, no word in common)."""
    vector = np.array([0.6, 0.8, 0.0, 0.0], dtype=np.float32)
    texts = {"a.md": WORDS[0:20], "b.md": WORDS[1:21], "c.md": WORDS[2:22]}
    entries = [Entry(path=p, content=" ".join(w), created_at=T0, updated_at=T0) for p, w in texts.items()]
    entries += [
        Entry(
            path="d.md", content="the deploy runs on friday", embedding=vector, created_at=T0, updated_at=T0
        ),
        Entry(path="e.md", content="releases ship each week", embedding=vector, created_at=T0, updated_at=T0),
    ]
    return entries


@pytest.fixture
def known(tmp_path: Path, monkeypatch) -> DuplicateReview:
    monkeypatch.setenv("MEMWORK_REPORT_DIR", str(tmp_path))  # as under the report runner
    return duplicate_review(MemoryStore(known_entries()), threshold=0.85, out_dir=tmp_path)


def _pair(review: DuplicateReview, a: str, b: str) -> dict:
    return next(p for p in review.shown_pairs() if {p["path_a"], p["path_b"]} == {a, b})


def test_cards_mark_the_signal_that_fired_and_diff_the_words(known: DuplicateReview) -> None:
    cards = view.PairCards(known)
    by_text = cards._card(_pair(known, "a.md", "b.md"))
    assert "text (Jaccard) 0.905 ✔ fired" in by_text and "semantic (cosine) - ✔" not in by_text
    assert "duplicate at threshold 0.85" in by_text
    # a -> b: the first word gone, one added at the end, the rest unchanged
    assert "<del style='background:#ffebe9'>alpha</del>" in by_text
    assert "<ins style='background:#dafbe1'>uniform</ins>" in by_text
    assert " ".join(WORDS[1:20]) in by_text
    by_meaning = cards._card(_pair(known, "d.md", "e.md"))
    assert "semantic (cosine) 1 ✔ fired" in by_meaning and "text (Jaccard) 0 ✔" not in by_meaning
    assert "<del style='background:#ffebe9'>the deploy runs on friday</del>" in by_meaning
    assert "<ins style='background:#dafbe1'>releases ship each week</ins>" in by_meaning


def test_the_cluster_table_holds_a_chain_for_review(known: DuplicateReview) -> None:
    rows = {tuple(r["members"]): r for r in known.clusters()}
    chain = rows[("a.md", "b.md", "c.md")]
    assert chain["chained"] is True and chain["decision"] == "to review (chained)"
    assert chain["size"] == 3 and chain["density"] == pytest.approx(2 / 3, abs=1e-3)
    pair = next(r for m, r in rows.items() if set(m) == {"d.md", "e.md"})
    assert pair["chained"] is False and pair["decision"].startswith("merge into ")
    page = view.cluster_table(known)._repr_html_()
    assert "chained" in page and "to review (chained)" in page
    assert known.effect()["chained clusters held for review"] == 1 and known.effect()["entries merged"] == 1


def test_the_histograms_are_log_scaled_with_shaded_bands_and_titled(known: DuplicateReview) -> None:
    fig = view.histograms_figure(known)
    axes = fig.get_axes()
    assert [ax.get_xlabel() for ax in axes] == [
        "text (Jaccard) (0-1)",
        "semantic (cosine) (0-1)",
        "combined (max) (0-1)",
    ]
    for ax in axes:
        assert ax.get_yscale() == "log" and ax.get_ylabel() == "pairs (log scale)"
        shaded = {p.get_label(): p.get_x() for p in ax.patches if p.get_label() and p.get_label()[0] != "_"}
        spans = [p for p in ax.patches if p.get_label() in ("near threshold ±0.05", "duplicate ≥ 0.85")]
        assert set(shaded) == {"near threshold ±0.05", "duplicate ≥ 0.85"}, shaded
        (near,) = (p for p in spans if p.get_label().startswith("near"))
        (top,) = (p for p in spans if p.get_label().startswith("duplicate"))
        assert near.get_x() == pytest.approx(0.8) and near.get_width() == pytest.approx(0.05)
        assert top.get_x() == pytest.approx(0.85) and top.get_width() == pytest.approx(0.15)
    alt = figure_alt(fig)
    # 10 pairs: a-b and b-c at 0.905, a-c at 0.818, d-e by meaning only (text 0, cosine 1), 6 unrelated
    assert "text (Jaccard): below 0.8 7, 0.8-0.85 1, at or above 0.85 2 pairs" in alt
    assert "semantic (cosine): below 0.8 0, 0.8-0.85 0, at or above 0.85 1 pairs" in alt
    assert "combined (max): below 0.8 6, 0.8-0.85 1, at or above 0.85 3 pairs" in alt


def test_a_policy_with_character_similarity_draws_its_boundaries_at_a_stated_level(
    tmp_path: Path, monkeypatch
) -> None:
    """A version 2 policy (text, semantic, character): the 2-D plot draws its boundaries at the median
    character similarity of its pairs and says so, each drawn point scoring the boundary's level, and
    marks the pairs the policy keeps by its decision."""
    monkeypatch.setenv("MEMWORK_REPORT_DIR", str(tmp_path))
    entries = known_entries()
    for entry, vector in zip(entries, ([0, 0, 1, 0], [0, 0, 0.8, 0.6], [0, 0, 0.6, 0.8]), strict=False):
        entry.embedding = np.array(vector, dtype=np.float32)  # a, b, c: cosines 0.8, 0.96, 0.6
    policy = Policy(
        store_embedding_model(entries), (2.0, 1.0, 6.0), -7.0, 0.8, 0.5, 0.5, 0.95, "x",
        features=(*BASE_FEATURES, CHAR_FEATURE),
    )  # fmt: skip
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.to_dict()), encoding="utf-8")
    review = duplicate_review(MemoryStore(entries), policy=str(path), out_dir=tmp_path)
    assert review.thresholds()["rule"] == (
        "calibrated policy (logistic score of text similarity (Jaccard), semantic similarity (cosine) "
        "and character similarity (Indel))"
    )
    level = review.policy_char_level()
    assert level is not None and "median of the policy's 3 pairs" in level[1]
    fig = view.scatter_figure(review)
    lines = {ln.get_label(): ln for ln in fig.get_axes()[0].get_lines() if "policy" in ln.get_label()}
    at = f"at character similarity {level[0]:.2f}"
    assert set(lines) == {f"policy review 0.5 {at}", f"policy auto-merge 0.8 {at}"}
    for label, want in ((f"policy review 0.5 {at}", 0.5), (f"policy auto-merge 0.8 {at}", 0.8)):
        xs, ys = lines[label].get_data()
        scores = load_policy(path).scores(np.asarray(xs), np.asarray(ys), np.full(len(xs), level[0]))
        assert np.allclose(scores, want), label
    alt = figure_alt(fig)
    assert f"boundaries are drawn {at}" in alt and "policy review boundary " + at in alt
    assert at in fig.get_axes()[0].get_title().replace("\n", " ")
    # the policy's own decisions, marked: exactly its pairs, by decision
    marked = {
        c.get_label().split(" (")[0]: {tuple(xy) for xy in c.get_offsets().tolist()}
        for c in fig.get_axes()[0].collections
        if c.get_label().startswith("policy: ")
    }
    for decision, name in (("merge", "policy: auto-merge"), ("review", "policy: review")):
        want = {
            (p["text_similarity"], p["semantic_similarity"])
            for p in review.policy_pairs
            if p["decision"] == decision
        }
        assert marked.get(name, set()) == want and f"{len(want)} pairs the policy decides {decision}" in alt
    assert sum(len(v) for v in marked.values()) == len(review.policy_pairs) > 0


# ---- the loop through the report: its queue labelled, calibrated, applied by its command, undone -----------
def test_the_reports_queue_labelled_comes_back_and_its_command_applies_and_undo_restores(
    tmp_path: Path, small_store: str
) -> None:
    """Run the report; label the next review file it wrote from the truth; run it again with those
    labels: it calibrates a policy beside the HTML, the plan follows it, and the command it prints
    applies exactly that plan through the CLI (journaled); ``defrag undo`` restores the store."""
    copy = tmp_path / "store.db"
    with sqlite3.connect(small_store.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)  # the shared sample stays as it is
    store = f"sqlite:///{copy}"
    first = run_report("duplicate_review", {"store": store, "sample_pairs": 3000}, tmp_path / "one")
    assert first.exit_code == 0 and first.summary["policy"] is None
    assert first.summary["merge_command"] == shlex.join(
        ["memwork", "defrag", "merge-duplicates", "--store", store, "--similarity-threshold", "0.85",
         "--strategy", "keep_newer", "--apply"]
    )  # fmt: skip
    queue = Path(first.summary["review_queue"])
    assert queue == first.run_dir / "review_queue.csv"
    labels = label(queue, tmp_path / "labels.csv", lineage)
    # 200 labels cannot show 99 % precision at 95 % confidence here (auto_merge would stay off): ask 95 %
    params = {"store": store, "labels": str(labels), "sample_pairs": 3000, "target_precision": 0.95}
    second = run_report("duplicate_review", params, tmp_path / "two")
    assert second.exit_code == 0
    policy_file = second.run_dir / "policy.json"
    policy = load_policy(policy_file)  # calibrated beside the HTML, from the report's own queue
    assert policy.auto_merge is not None and policy.target_precision == 0.95 and policy.uses_char
    shown = second.summary["policy"]
    assert shown["policy file"] == str(policy_file) and shown["auto_merge"] == policy.auto_merge
    assert "character similarity" in shown["rule"]
    effect = second.summary["effect"]
    assert effect["entries merged"] > 0 and effect["pairs auto-merged (score >= auto_merge)"] > 0
    command = second.summary["merge_command"]
    assert command == shlex.join(
        ["memwork", "defrag", "merge-duplicates", "--store", store, "--policy", str(policy_file.resolve()),
         "--strategy", "keep_newer", "--apply"]
    )  # fmt: skip
    page = second.html_path.read_text(encoding="utf-8")
    assert html.escape(command) in page and "This report only reads the store" in page
    assert html.escape(command.removesuffix(" --apply")) in page  # the dry run of the same plan
    assert "at character similarity" in page and "pairs the policy decides merge (marked)" in page
    with open_store(store) as s:
        before = {e.key: e.to_record() for e in s.all_entries()}
    argv = shlex.split(command)
    assert argv[0] == "memwork"
    done = cli(*argv[1:], "--json")
    applied = json.loads(done.output)
    assert done.exit_code == 0 and applied["applied"] and applied["run_id"]
    merged = [op for op in applied["operations"] if op["op"] == "merge"]
    assert len(merged) == effect["entries merged"]
    assert len(applied["operations"]) == second.summary["operations"]
    with open_store(store) as s:
        after = {e.key: e.to_record() for e in s.all_entries()}
    stubs = [k for k, r in after.items() if (r.get("metadata") or {}).get("stub") is True]
    new_stubs = [k for k in stubs if (before[k].get("metadata") or {}).get("stub") is not True]
    assert len(new_stubs) == effect["stubs created"] > 0  # a stub where each merged entry was
    undone = cli("defrag", "undo", applied["run_id"], "--store", store, "--json")
    assert undone.exit_code == 0, undone.output
    with open_store(store) as s:
        assert {e.key: e.to_record() for e in s.all_entries()} == before


def test_the_merge_command_names_the_store_without_its_password(known: DuplicateReview) -> None:
    assert known.merge_command() == (
        "memwork defrag merge-duplicates --store STORE --similarity-threshold 0.85 --strategy keep_newer "
        "--apply"
    )  # an open store: the spec is the reader's to fill in, and the report says so
    assert "Replace <code>STORE</code>" in view.merge_commands(known).data
    known.store_spec, known.scope = "postgresql://mem:s3cretpass@db.example/mem", "alice"
    command = known.merge_command(apply=False)
    assert "s3cretpass" not in command and "s3cretpass" not in known.undo_command()
    assert command.startswith(
        "memwork defrag merge-duplicates --store 'postgresql://mem:***@db.example/mem' --scope alice"
    )
    assert not command.endswith("--apply") and "<code>***</code>" in view.merge_commands(known).data
