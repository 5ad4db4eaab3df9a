"""Review queue -> labels -> calibrated policy, on generated stores whose truth is known."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.defrag.calibrate import calibrate, load_policy, read_labels, stratum_weights
from memwork.defrag.findings import Pair, find_duplicates
from memwork.defrag.review_queue import allocate, build_review_queue, sample_pairs, stratum_of
from memwork.embed import HashEmbedder
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.samples.entries import generate_entries
from memwork.stores import open_store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def truth(path_a: str, path_b: str) -> bool:
    """The generator's lineage: a planted copy, near duplicate or paraphrase keeps its source's path
    stem (``<type>/<domain>/<subject>``) and only gets a new number."""
    return path_a.rsplit("-", 1)[0] == path_b.rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def entries() -> list[Entry]:
    return generate_entries(500, scopes=("a", "b"), seed=5, now=NOW, embedder=HashEmbedder(384))


@pytest.fixture(scope="module")
def population(entries: list[Entry]) -> list[Pair]:
    return find_duplicates(entries, 0.5)


def label(review: Path, out: Path, decide=lambda row: truth(row["path_a"], row["path_b"])) -> Path:
    """A reviewer who knows the truth: every row labelled duplicate or distinct."""
    with review.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["decision"] = "duplicate" if decide(row) else "distinct"
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_weights_sum_to_the_population(population: list[Pair]) -> None:
    rows = sample_pairs(population, size=150, floor=0.5, threshold=0.85, seed=3)
    assert len(rows) == 150
    assert sum(r.weight for r in rows) == pytest.approx(len(population))
    assert {r.stratum for r in rows} >= {"near_threshold", "both_high"}


@given(st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 40)), st.integers(1, 120))
@settings(max_examples=60, deadline=None)
def test_allocation_is_capped_and_complete(sizes: dict[str, int], total: int) -> None:
    take = allocate(sizes, total)
    assert all(0 <= take[k] <= sizes[k] for k in sizes)
    assert sum(take.values()) == min(total, sum(sizes.values()))
    if total >= sum(1 for v in sizes.values() if v):
        assert all(take[k] >= 1 for k, v in sizes.items() if v)


def test_weighted_estimates_are_unbiased(population: list[Pair]) -> None:
    """Over many review queues the weighted counts behind precision and recall (true positives, false
    positives, false negatives of the hybrid rule at 0.7 and 0.85) average to the population's true
    counts, within three standard errors; the unweighted sample's share of duplicates does not."""
    y_all = np.array([truth(p.path_a, p.path_b) for p in population], dtype=bool)
    sim_all = np.array([p.similarity for p in population])

    def counts(y: np.ndarray, sim: np.ndarray, w: np.ndarray) -> list[float]:
        return (
            [float((w * (y & (sim >= t))).sum()) for t in (0.7, 0.85)]
            + [float((w * (~y & (sim >= t))).sum()) for t in (0.7, 0.85)]
            + [float((w * (y & (sim < t))).sum()) for t in (0.7, 0.85)]
        )

    expected = np.array(counts(y_all, sim_all, np.ones(len(population))))
    estimates, shares = [], []
    for seed in range(40):
        rows = sample_pairs(population, size=120, floor=0.5, threshold=0.85, seed=seed)
        y = np.array([truth(r.pair.path_a, r.pair.path_b) for r in rows], dtype=bool)
        sim = np.array([r.pair.similarity for r in rows])
        estimates.append(counts(y, sim, np.array([r.weight for r in rows])))
        shares.append(y.mean())
    estimates_ = np.array(estimates)
    standard_error = estimates_.std(axis=0, ddof=1) / np.sqrt(len(estimates_))
    assert np.all(np.abs(estimates_.mean(axis=0) - expected) <= 3 * standard_error + 1e-9)
    assert np.mean(shares) > 5 * y_all.mean()  # unweighted, the sample overstates duplicates


def test_review_never_pairs_across_scopes(tmp_path: Path) -> None:
    text = "the backfill job retries every request and logs large payloads to the audit journal"
    entries = [
        Entry(path="x.md", scope="a", content=text),
        Entry(path="y.md", scope="b", content=text),
        Entry(path="z.md", scope="b", content=text + " again"),
    ]
    queue = build_review_queue(entries, tmp_path / "r.csv", size=10)
    assert [(r.pair.scope, r.pair.path_a, r.pair.path_b) for r in queue.rows] == [("b", "y.md", "z.md")]
    rows = list(csv.DictReader((tmp_path / "r.csv").open(encoding="utf-8")))
    assert [(r["scope"], r["path_a"], r["path_b"], r["stratum"]) for r in rows] == [
        ("b", "y.md", "z.md", "text_high")  # no vectors: words only
    ]


def test_strata_follow_both_signals() -> None:
    def pair(text: float, sem: float | None) -> Pair:
        return Pair("s", "a", "b", max(text, sem or 0.0), text, sem)

    assert stratum_of(pair(0.95, 0.2), 0.85, 0.5) == "text_high"
    assert stratum_of(pair(0.2, 0.95), 0.85, 0.5) == "semantic_high"
    assert stratum_of(pair(0.95, 0.97), 0.85, 0.5) == "both_high"
    assert stratum_of(pair(0.83, 0.1), 0.85, 0.5) == "near_threshold"
    assert stratum_of(pair(0.55, None), 0.85, 0.5) == "below:0.50-0.60"


def test_calibrate_weights_and_policy(entries: list[Entry], tmp_path: Path) -> None:
    queue = build_review_queue(entries, tmp_path / "review.csv", size=150, seed=2)
    labels_path = label(queue.output, tmp_path / "labels.csv")
    labels = read_labels(labels_path)
    assert labels.embedding_model == "hash-384"
    assert stratum_weights(labels).sum() == pytest.approx(queue.population)
    result = calibrate(labels_path, target_precision=0.95)
    policy = result.policy
    assert policy.embedding_model == "hash-384" and len(policy.labels_sha256) == 64
    assert policy.floor == 0.5
    assert policy.auto_merge is None or policy.review <= policy.auto_merge
    at = policy.report["estimates"]["combined"]["auto_merge"]
    assert at is None or at["precision"] >= 0.95
    assert at is None or at["precision_ci"][0] <= at["precision"] <= at["precision_ci"][1]
    assert set(result.curves) == {"threshold", "text", "semantic", "similarity", "char", "combined"}


# ---- the CLI, end to end ----------------------------------------------------------------------------
def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def store(sqlite_url: str, entries: list[Entry]) -> str:
    with open_store(sqlite_url, create=True) as s:
        s.put_many(entries)
    return sqlite_url


@pytest.fixture
def policy_file(store: str, tmp_path: Path) -> Path:
    review = tmp_path / "review.csv"
    done = run("defrag", "review", "--store", store, "--size", "150", "-o", str(review), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["rows"] == 150
    labels = label(review, tmp_path / "labels.csv")
    policy = tmp_path / "policy.json"
    done = run(
        "defrag", "calibrate", "--labels", str(labels), "-o", str(policy), "--target-precision", "0.95"
    )
    assert done.exit_code == 0, done.output
    return policy


def test_policy_merges_only_from_auto_merge(store: str, policy_file: Path) -> None:
    policy = load_policy(policy_file)
    assert policy.auto_merge is not None
    found = json.loads(
        run("defrag", "find-duplicates", "--store", store, "--policy", str(policy_file), "--json").output
    )
    decisions = {p["decision"] for p in found["pairs"]}
    assert decisions <= {"merge", "review"} and found["summary"]["auto_merge_pairs"] > 0
    for pair in found["pairs"]:
        assert (pair["policy_score"] >= policy.auto_merge) == (pair["decision"] == "merge")
    merge = json.loads(
        run("defrag", "merge-duplicates", "--store", store, "--policy", str(policy_file), "--json").output
    )
    mergeable = {(p["scope"], p["path_a"]) for p in merge["pairs"] if p["decision"] == "merge"}
    mergeable |= {(p["scope"], p["path_b"]) for p in merge["pairs"] if p["decision"] == "merge"}
    merged = {(op["scope"], op["path"]) for op in merge["operations"] if op["op"] == "merge"}
    merged |= {(op["scope"], op["target"]) for op in merge["operations"] if op["op"] == "merge"}
    assert merged and merged <= mergeable
    review_only = {(p["scope"], p["path_a"]) for p in merge["pairs"]} - mergeable
    assert not merged & review_only
    full = run("defrag", "full", "--store", store, "--policy", str(policy_file), "--json")
    assert full.exit_code == 0, full.output


def test_policy_for_another_model_is_refused(store: str, policy_file: Path) -> None:
    data = json.loads(policy_file.read_text())
    data["embedding_model"] = "all-MiniLM-L6-v2"
    policy_file.write_text(json.dumps(data))
    for action in ("find-duplicates", "merge-duplicates", "full"):
        result = run("defrag", action, "--store", store, "--policy", str(policy_file))
        assert result.exit_code == 2, result.output
        assert "calibrated for embedding model 'all-MiniLM-L6-v2'" in result.output
        assert "'hash-384'" in result.output


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("decision", "maybe", "labels row 3 decision='maybe'"),
        ("weight", "heavy", "labels row 3 weight='heavy'"),
        ("text_similarity", "1.5", "labels row 3 text_similarity='1.5'"),
    ],
)
def test_bad_label_row_is_refused(
    tmp_path: Path, entries: list[Entry], column: str, value: str, needle: str
) -> None:
    queue = build_review_queue(entries, tmp_path / "review.csv", size=20)
    labels = label(queue.output, tmp_path / "labels.csv")
    rows = list(csv.DictReader(labels.open(encoding="utf-8")))
    rows[1][column] = value
    with labels.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "policy.json"
    result = run("defrag", "calibrate", "--labels", str(labels), "-o", str(out))
    assert result.exit_code == 2
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_one_class_of_labels_is_refused(tmp_path: Path, entries: list[Entry]) -> None:
    queue = build_review_queue(entries, tmp_path / "review.csv", size=20)
    labels = label(queue.output, tmp_path / "labels.csv", decide=lambda row: False)
    with pytest.raises(UsageError, match="at least one duplicate and one distinct"):
        calibrate(labels)


def test_labelled_queue_is_an_approved_file(store: str, tmp_path: Path) -> None:
    review = tmp_path / "review.csv"
    assert run("defrag", "review", "--store", store, "--size", "30", "-o", str(review)).exit_code == 0
    labels = label(review, tmp_path / "labels.csv")
    result = run("defrag", "merge-duplicates", "--store", store, "--approved", str(labels), "--json")
    assert result.exit_code == 0, result.output
    dup = {
        (r["scope"], r["path_a"], r["path_b"])
        for r in csv.DictReader(labels.open())
        if r["decision"] == "duplicate"
    }
    merged = {
        (op["scope"], op["path"]) for op in json.loads(result.output)["operations"] if op["op"] == "merge"
    }
    assert merged <= {(s, a) for s, a, _ in dup} | {(s, b) for s, _, b in dup}


def test_policy_merge_applies_and_undoes(store: str, policy_file: Path) -> None:
    with open_store(store) as s:
        before = {e.key: e.to_record() for e in s.all_entries()}
    shown = run("defrag", "find-duplicates", "--store", store, "--policy", str(policy_file))
    assert shown.exit_code == 0 and "policy" in shown.output
    done = run(
        "defrag", "merge-duplicates", "--store", store, "--policy", str(policy_file), "--apply", "--json"
    )
    assert done.exit_code == 0, done.output
    applied = json.loads(done.output)
    assert applied["applied"] and applied["summary"]["auto_merge_pairs"] > 0
    assert run("defrag", "find-duplicates", "--store", store, "--policy", str(policy_file)).exit_code == 0
    assert run("defrag", "undo", applied["run_id"], "--store", store).exit_code == 0
    with open_store(store) as s:
        assert {e.key: e.to_record() for e in s.all_entries()} == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--floor", "2"], "floor=2.0"),
        (["--floor", "0.9"], "must not exceed the threshold"),
        (["--size", "0"], "size=0"),
        (["--seed", "-1"], "seed=-1"),
    ],
)
def test_bad_review_options_write_nothing(store: str, tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "review.csv"
    result = run("defrag", "review", "--store", store, "-o", str(out), *args)
    assert result.exit_code == 2 and needle in result.output
    assert not out.exists()


def test_auto_merge_is_not_trusted_where_few_labels_reach() -> None:
    """Every estimate is 1.0 down to 0.0, but below 0.30 the labels there are few in effect (a sparse
    stratum's handful standing for thousands): auto_merge stops where the lower bound still holds."""
    from memwork.defrag.calibrate import AUTO_MERGE_SLACK, GRID, _auto_merge, wilson_lower

    precision = np.ones(len(GRID))
    n_eff = np.where(GRID >= 0.30, 60.0, 3.0)
    assert wilson_lower(1.0, 60.0) >= 0.99 - AUTO_MERGE_SLACK > wilson_lower(1.0, 3.0)
    assert _auto_merge(precision, 0.99, n_eff) == pytest.approx(0.30)
    assert _auto_merge(precision, 0.99) == 0.0  # the point estimate alone would merge everything
    precision[GRID >= 0.80] = 0.9  # a point estimate below the target above stops the walk there
    assert _auto_merge(precision, 0.99, n_eff) is None


@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_a_pair_scores_the_same_alone_and_among_many(rows):
    """A full run and an incremental one (a subset of its pairs) must give a pair the very same score:
    no rounding that depends on how many pairs are scored together (a BLAS product did, in the last bit)."""
    from memwork.defrag.calibrate import Policy

    policy = Policy("hash-384", (6.123456789, 5.987654321), -7.0123456789, 0.8, 0.4, 0.3, 0.99, "0" * 64)
    rng = np.random.default_rng(rows)
    text, semantic = rng.random(rows), rng.random(rows)
    semantic[::5] = np.nan  # no cosine: judged by words
    together = policy.scores(text, semantic)
    alone = [policy.scores(text[i : i + 1], semantic[i : i + 1])[0] for i in range(rows)]
    assert together.tolist() == alone


def separable_labels(path: Path, rows: int = 80) -> Path:
    """A label file whose duplicates all score above every distinct pair (no labelled pair disagrees
    with the rule), in two strata of unequal weight, as a queue writes them."""
    rng = np.random.default_rng(4)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scope", "path_a", "path_b", "text_similarity", "semantic_similarity",
                         "similarity", "stratum", "weight", "decision", "embedding_model"])  # fmt: skip
        for k in range(rows):
            duplicate = k % 2 == 0
            score = float(rng.uniform(0.9, 1.0) if duplicate else rng.uniform(0.5, 0.7))
            stratum, weight = ("both_high", 1.0) if duplicate else ("below:0.50-0.60", 40.0)
            writer.writerow(["s", f"a{k}", f"b{k}", score, score, score, stratum, weight,
                             "duplicate" if duplicate else "distinct", "hash-384"])  # fmt: skip
    return path


def test_separable_labels_never_give_a_collapsed_interval(tmp_path: Path) -> None:
    """Every labelled pair agrees with the rule: the point estimates are 1.0, but 40 labels are not
    certainty -- the interval's lower bound stays below 1 (a bootstrap alone gives [1, 1])."""
    result = calibrate(separable_labels(tmp_path / "labels.csv"), target_precision=0.9, samples=100)
    for name in ("similarity", "combined"):
        at = result.policy.report["estimates"][name]["review"]
        assert at["precision"] == 1.0 and at["recall"] == 1.0
        for metric in ("precision", "recall", "f1"):
            low, high = at[f"{metric}_ci"]
            assert low < 1.0 and high == 1.0, (name, metric, at)
    from memwork.defrag.calibrate import wilson_interval

    low, high = wilson_interval(1.0, 40)
    assert 0.9 < low < 1.0 and high == 1.0
    assert wilson_interval(0.0, 40)[0] == 0.0 < wilson_interval(0.0, 40)[1]
    assert wilson_interval(0.5, 0) == (0.0, 1.0)


# ---- the policy beside a reviewer's file, chained clusters, the queue's order, the label digest -------
_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
          "lima", "mike", "november", "oscar", "papa"]  # fmt: skip


def _note(*words: str) -> str:
    return "Notes on " + " ".join(words) + "."


def _word_policy(tmp_path: Path, auto_merge: float, review: float) -> str:
    """A policy on the text signal alone, sigmoid(10 * text - 5), for a store without vectors."""
    from memwork.defrag.calibrate import Policy

    policy = Policy("none", (10.0, 0.0), -5.0, auto_merge=auto_merge, review=review, floor=0.3,
                    target_precision=0.99, labels_sha256="0" * 64)  # fmt: skip
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.to_dict()), encoding="utf-8")
    return str(path)


def _merged_groups(result: dict) -> list[set[str]]:
    return [{c["survivor"], *c["merged"]} for c in result["summary"]["clusters"] if c.get("survivor")]


def test_policy_with_approved_merges_the_approved_pair_only(sqlite_url: str, tmp_path: Path) -> None:
    """--policy and --approved together: the policy's auto-merge pair merges, a reviewer's approved pair
    below auto_merge merges too, and an unapproved pair in the review band does not."""
    w = list(_WORDS)
    entries = [
        Entry(path="x1.md", content=_note(*w[0:6], "uniform", "victor")),  # text 0.82: merge
        Entry(path="x2.md", content=_note(*w[0:6], "uniform", "whiskey")),
        Entry(path="y1.md", content=_note(*w[6:11], "xray", "yankee")),  # 0.64: review band
        Entry(path="y2.md", content=_note(*w[6:11], "zulu", "amber")),
        Entry(path="z1.md", content=_note(*w[11:16], "basil", "cedar")),  # 0.64: review band
        Entry(path="z2.md", content=_note(*w[11:16], "dune", "ember")),
    ]
    with open_store(sqlite_url, create=True) as s:
        s.put_many(entries)
    policy = _word_policy(tmp_path, auto_merge=0.9, review=0.5)
    approved = tmp_path / "approved.csv"
    approved.write_text("scope,path_a,path_b,similarity,decision\ndefault,y1.md,y2.md,0.64,approve\n")
    args = ["defrag", "merge-duplicates", "--store", sqlite_url, "--policy", policy, "--json"]
    alone = json.loads(run(*args).output)
    decisions = {(p["path_a"], p["path_b"]): p["decision"] for p in alone["pairs"]}
    assert decisions == {
        ("x1.md", "x2.md"): "merge",
        ("y1.md", "y2.md"): "review",
        ("z1.md", "z2.md"): "review",
    }
    assert _merged_groups(alone) == [{"x1.md", "x2.md"}]
    both = json.loads(run(*args, "--approved", str(approved)).output)
    groups = sorted(_merged_groups(both), key=sorted)
    assert groups == [{"x1.md", "x2.md"}, {"y1.md", "y2.md"}]
    merged = {op["path"] for op in both["operations"] if op["op"] == "merge"}
    assert not merged & {"z1.md", "z2.md"}


def test_chained_cluster_is_never_auto_merged_under_a_policy(sqlite_url: str, tmp_path: Path) -> None:
    """a ~ b and b ~ c both above auto_merge, a and c below review: one chained cluster (density 2/3),
    listed for review, nothing merged -- a policy's auto_merge does not override it."""
    s6 = list(_WORDS[:6])
    entries = [
        Entry(path="a.md", content=_note(*s6, "amber", "basil", "cedar", "dune")),
        Entry(path="b.md", content=_note(*s6, "amber", "basil", "ember", "fern")),
        Entry(path="c.md", content=_note(*s6, "ember", "fern", "grove", "heath")),
    ]
    with open_store(sqlite_url, create=True) as s:
        s.put_many(entries)
    policy = _word_policy(tmp_path, auto_merge=0.85, review=0.6)
    done = run("defrag", "merge-duplicates", "--store", sqlite_url, "--policy", policy, "--json")
    result = json.loads(done.output)
    links = {(p["path_a"], p["path_b"]) for p in result["pairs"]}
    assert links == {("a.md", "b.md"), ("b.md", "c.md")}
    assert not [op for op in result["operations"] if op["op"] == "merge"]
    held = [c for c in result["summary"]["clusters"] if c.get("review")]
    assert (
        len(held) == 1 and held[0]["survivor"] is None and set(held[0]["chained"]) == {"a.md", "b.md", "c.md"}
    )
    assert {p["decision"] for p in result["pairs"]} == {"review"}
    applied = run(
        "defrag", "merge-duplicates", "--store", sqlite_url, "--policy", policy, "--apply", "--json"
    )
    assert applied.exit_code == 0, applied.output
    with open_store(sqlite_url) as s:
        assert not [e for e in s.all_entries() if e.is_stub]


def test_review_queue_is_most_uncertain_first(entries: list[Entry], tmp_path: Path) -> None:
    """Rows are written closest to the threshold first, in the file as in the returned queue."""
    queue = build_review_queue(entries, tmp_path / "review.csv", size=120, threshold=0.85, seed=4)
    distances = [abs(row.pair.similarity - 0.85) for row in queue.rows]
    assert distances == sorted(distances) and len(set(distances)) > 10
    with queue.output.open(newline="", encoding="utf-8") as fh:
        written = [abs(float(row["similarity"]) - 0.85) for row in csv.DictReader(fh)]
    assert written == pytest.approx(distances, abs=1e-4)


def test_exact_duplicates_are_found_first_when_vectors_exist_too() -> None:
    """The exact pass runs before the similarity join even with embeddings: identical and
    case/whitespace-different copies come first, kind exact / normalised, whatever their vectors say."""
    embedder = HashEmbedder(384)
    texts = {
        "a.md": "The deploy key rotates every Monday at noon.",
        "b.md": "The deploy key rotates every Monday at noon.",
        "c.md": "the DEPLOY key   rotates every monday at noon.",
        "d.md": "The deploy key rotates every Monday at noon, said ops.",
    }
    entries = [Entry(path=p, content=t, embedding=embedder.embed(t)) for p, t in texts.items()]
    # the exact copy's vector is another text's: the exact pass must not depend on it
    entries[1] = Entry(path="b.md", content=texts["b.md"], embedding=embedder.embed("unrelated words here"))
    pairs = find_duplicates(entries, 0.5)
    kinds = [p.kind for p in pairs]
    exact = {(p.path_a, p.path_b): p.kind for p in pairs if p.kind != "similar"}
    assert exact == {
        ("a.md", "b.md"): "exact",
        ("a.md", "c.md"): "normalised",
        ("b.md", "c.md"): "normalised",
    }
    assert kinds[: len(exact)] == [exact[(p.path_a, p.path_b)] for p in pairs[: len(exact)]]
    assert "similar" in kinds and kinds.index("similar") == len(exact)


def test_policy_records_the_label_files_sha256(tmp_path: Path) -> None:
    import hashlib

    path = separable_labels(tmp_path / "labels.csv")
    policy = calibrate(path, target_precision=0.9, samples=20).policy
    assert policy.labels_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    written = tmp_path / "policy.json"
    from memwork.defrag.calibrate import write_policy

    write_policy(calibrate(path, target_precision=0.9, samples=20), written)
    assert load_policy(written).labels_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
