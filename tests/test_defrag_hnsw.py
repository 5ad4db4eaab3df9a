"""``--candidates hnsw``: pairs from the embedded PostgreSQL store's HNSW index, verified exactly.

Each test builds a small store with planted duplicates on the real server (``pg_url``), runs the
approximate stage and compares it with the exact path on the same store.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.defrag import approximate, run_action
from memwork.defrag.approximate import Settings, find_duplicates_hnsw, find_related_hnsw
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.stores import knn, open_store, sql
from memwork.stores.sql import SQLStore

DIM = 384


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _near(rng: np.random.Generator, v: np.ndarray, noise: float) -> np.ndarray:
    w = v + noise * _unit(rng)
    return (w / np.linalg.norm(w)).astype(np.float32)


def _words(rng: np.random.Generator, n: int = 8) -> list[str]:
    return [f"w{int(x)}" for x in rng.integers(0, 5000, n)]


def planted(seed: int = 0, scopes: dict[str, int] | None = None, cluster: int = 2) -> list[Entry]:
    """Entries of each scope: random texts and vectors, and every fifth one starting a cluster of
    ``cluster`` near copies (a word changed, a nearby vector), an exact copy, and a related one."""
    rng = np.random.default_rng(seed)
    out: list[Entry] = []
    for scope, n in (scopes or {"big": 240, "alice": 60, "bob": 40}).items():
        k = 0
        while k < n:
            words, vec = _words(rng), _unit(rng)
            out.append(Entry(path=f"f/{k}.md", content=" ".join(words), scope=scope, embedding=vec))
            k += 1
            if k % 5 == 1:
                for _ in range(cluster - 1):
                    edited = list(words)
                    edited[int(rng.integers(0, len(edited)))] = f"x{int(rng.integers(0, 10**6))}"
                    emb = _near(rng, vec, 0.2)
                    out.append(Entry(path=f"f/{k}.md", content=" ".join(edited), scope=scope, embedding=emb))
                    k += 1
            if k % 17 == 3:  # an exact copy
                out.append(
                    Entry(path=f"f/{k}.md", content=" ".join(words), scope=scope, embedding=vec.copy())
                )
                k += 1
            if k % 13 == 4:  # related: a vector at cosine ~0.7, other words
                emb = _near(rng, vec, 1.0)
                out.append(Entry(path=f"f/{k}.md", content=" ".join(_words(rng)), scope=scope, embedding=emb))
                k += 1
    return out


@pytest.fixture
def pg_store(pg_url: str) -> SQLStore:
    store = open_store(pg_url, create=True)
    assert isinstance(store, SQLStore)
    store.put_many(planted())
    return store


def _dicts(pairs: list) -> list[dict]:
    return [p.to_dict() for p in pairs]


def test_hnsw_finds_exactly_the_exact_pairs(pg_store: SQLStore) -> None:
    exact = run_action(pg_store, "find_duplicates")
    run = find_duplicates_hnsw(pg_store, options=Settings(k=60, ef_search=200, exact_upto=0))
    assert len(exact.pairs) > 50 and {p.kind for p in exact.pairs} >= {"exact", "similar"}
    assert _dicts(run.pairs) == _dicts(exact.pairs)
    assert run.summary["scopes_hnsw"] == 3 and run.summary["scopes_exact"] == 0
    assert run.recall.estimate == 1.0 and run.recall.sample_rows == 340 and run.recall.not_exact == 0


def test_related_hnsw_equals_exact_and_the_action_carries_the_estimate(pg_store: SQLStore) -> None:
    exact = run_action(pg_store, "find_related")
    result = run_action(pg_store, "find_related", candidates="hnsw", k=100, ef_search=300, exact_upto=0)
    assert len(exact.pairs) > 5
    assert _dicts(result.pairs) == _dicts(exact.pairs)
    assert result.summary["recall_estimate"] == 1.0
    assert result.summary["recall_check"]["sample_rows"] == 340
    assert result.summary["pairs"] == exact.summary["pairs"]


def test_small_scopes_take_the_exact_path(pg_store: SQLStore) -> None:
    exact = run_action(pg_store, "find_duplicates")
    result = run_action(pg_store, "find_duplicates", candidates="hnsw", exact_upto=100, recall_sample=50)
    assert result.summary["scopes_exact"] == 2 and result.summary["scopes_hnsw"] == 1
    assert _dicts(result.pairs) == _dicts(exact.pairs)
    assert result.summary["recall_check"]["sample_rows"] == 50


def test_too_small_k_is_measured_by_the_estimate(pg_url: str) -> None:
    """Clusters of 6 near copies: each entry has 5 partners, k=2 finds at most 2 of them per entry.
    With every row sampled the estimate is the true recall, and it is below 1."""
    store = open_store(pg_url, create=True)
    store.put_many(planted(seed=3, scopes={"big": 300}, cluster=6))
    exact = {(p.scope, p.path_a, p.path_b) for p in run_action(store, "find_duplicates").pairs}
    run = find_duplicates_hnsw(store, options=Settings(k=2, ef_search=40, exact_upto=0, sample=1000))
    found = {(p.scope, p.path_a, p.path_b) for p in run.pairs}
    assert found < exact  # verified exactly: never a pair the definition rejects
    recall = len(found) / len(exact)
    assert recall < 0.9
    assert run.recall.sample_rows == store.count() and run.recall.exact_pairs == len(exact)
    assert run.recall.estimate == pytest.approx(recall)
    low, high = run.recall.interval()
    assert low <= recall <= high < 1.0


def test_a_partial_sample_states_its_size(pg_url: str) -> None:
    store = open_store(pg_url, create=True)
    store.put_many(planted(seed=3, scopes={"big": 300}, cluster=6))
    run = find_duplicates_hnsw(store, options=Settings(k=2, ef_search=40, exact_upto=0, sample=60))
    data = run.recall.to_dict()
    assert data["sample_rows"] == 60 and data["sample_exact_pairs"] > 0
    assert data["recall_estimate"] is not None and data["recall_estimate"] < 1.0


def test_scope_is_never_crossed(pg_url: str) -> None:
    """The same text and vector in two scopes: no pair; every neighbour the index gives is of the
    asked scope."""
    rng = np.random.default_rng(7)
    entries = []
    for k in range(40):
        vec, text = _unit(rng), " ".join(_words(rng))
        entries += [Entry(path=f"f/{k}.md", content=text, scope=s, embedding=vec) for s in ("a", "b")]
    store = open_store(pg_url, create=True)
    assert isinstance(store, SQLStore)
    store.put_many(entries)
    run = find_duplicates_hnsw(store, options=Settings(k=10, exact_upto=0))
    assert run.pairs == [] and run.recall.exact_pairs == 0 and run.recall.estimate is None
    ids = next(knn.embedded_ids(store, "a", 100))
    near = knn.nearest(store, "a", ids, 10, 40)
    rows = knn.rows_by_id(store, sorted({b for _, b in near}))
    assert len(near) == 40 * 10 and {e.scope for e in rows.values()} == {"a"}


def test_stubs_and_superseded_are_never_paired(pg_store: SQLStore) -> None:
    entry = pg_store.get("f/1.md", scope="big")
    assert entry is not None
    entry.metadata["superseded_by"] = "f/2.md"
    pg_store.put(entry)
    run = find_duplicates_hnsw(pg_store, options=Settings(k=60, ef_search=200, exact_upto=0))
    assert all("f/1.md" not in (p.path_a, p.path_b) for p in run.pairs if p.scope == "big")
    assert _dicts(run.pairs) == _dicts(run_action(pg_store, "find_duplicates").pairs)


def _unrelated(rng: np.random.Generator, scope: str, n: int, copies: int) -> list[Entry]:
    """``n`` entries of random words and vectors (no pair among them) and ``copies`` exact copies of
    the first ones: the same ``copies`` pairs whatever ``n``."""
    out = [
        Entry(path=f"f/{k}.md", content=" ".join(_words(rng, 12)), scope=scope, embedding=_unit(rng))
        for k in range(n)
    ]
    return out + [
        Entry(path=f"g/{k}.md", content=e.content, scope=scope, embedding=e.embedding.copy())
        for k, e in enumerate(out[:copies])
        if e.embedding is not None
    ]


def _traced_peak(run: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = run()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_the_hnsw_path_never_holds_the_scope(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory bounded by the batch, not by N: with batches and runs of a few dozen rows, the traced
    peak of a whole run (search and recall check) over a scope of 4n rows stays within that over n
    rows plus a quarter of what the big scope's vectors alone take -- holding the scope would add
    all of them, and more (its texts, entries and the verification's copies)."""
    small = 60
    monkeypatch.setattr(approximate, "BATCH", 20)
    monkeypatch.setattr(approximate, "VERIFY_ROWS", small)
    monkeypatch.setattr(approximate, "TRUTH_CHUNK", small)
    monkeypatch.setattr(sql, "_STREAM", small)  # the recall check's server-side cursor
    rng = np.random.default_rng(11)
    n, copies = 300, 8
    store = open_store(pg_url, create=True)
    store.put_many(_unrelated(rng, "n", n, copies) + _unrelated(rng, "four_n", 4 * n, copies))
    options = Settings(k=8, ef_search=40, exact_upto=0, sample=20)
    find_duplicates_hnsw(store, scope="n", options=options)  # imports, caches, compiled statements
    peaks, pairs = {}, {}
    for scope in ("n", "four_n"):
        peaks[scope], run = _traced_peak(
            lambda s=scope: find_duplicates_hnsw(store, scope=s, options=options)
        )
        assert isinstance(run, approximate.ApproximateRun)
        pairs[scope] = len(run.pairs)
    assert pairs == {"n": copies, "four_n": copies}  # the output is the same size at both
    vectors = 4 * n * DIM * 4  # the 4n scope's float32 vectors
    assert peaks["four_n"] < peaks["n"] + vectors / 4, (peaks, vectors)


def test_runs_cap_the_rows_a_verification_holds() -> None:
    near = [(a, b) for a in range(10) for b in range(100 + 3 * a, 105 + 3 * a)]  # lists overlap by 2
    runs = list(approximate._runs(near, 12))
    assert [pair for run in runs for pair in run] == near  # every candidate, once, in order
    assert all(len({x for pair in run for x in pair}) <= 12 for run in runs) and len(runs) > 1
    assert list(approximate._runs([(1, 2), (1, 3), (1, 4)], 2)) == [[(1, 2), (1, 3), (1, 4)]]


def test_missing_index_is_required_not_built(pg_store: SQLStore) -> None:
    name = knn.hnsw_index(pg_store)
    assert name is not None
    with pg_store.engine.begin() as conn:
        conn.exec_driver_sql(f'DROP INDEX "{name}"')
    with pytest.raises(UsageError, match="no HNSW"):
        find_duplicates_hnsw(pg_store)
    assert knn.hnsw_index(pg_store) is None  # nothing was built


def test_the_index_serves_the_query(pg_store: SQLStore) -> None:
    plan = knn.plan(pg_store, "big", 10)
    assert f"Index Scan using {knn.hnsw_index(pg_store)}" in plan and "Sort" not in plan, plan


def _cli(*args: str) -> object:
    return CliRunner().invoke(main, ["defrag", *args])


def test_cli_json_carries_recall_estimate(pg_store: SQLStore, pg_url: str) -> None:
    import json

    result = _cli("find-duplicates", "--store", pg_url, "--candidates", "hnsw", "--k", "60", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"]["recall_estimate"] == 1.0 and data["params"]["candidates"] == "hnsw"
    assert data["summary"]["recall_check"]["sample_rows"] == 340


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--candidates", "hnsw", "--k", "0"], "k"),
        (["--candidates", "hnsw", "--ef-search", "5000"], "ef_search"),
        (["--candidates", "hnsw", "--recall-sample", "0"], "recall_sample"),
        (["--candidates", "annoy"], "candidates"),
        (["--k", "10"], "k"),
        (["--candidates", "hnsw", "--since", "2026-01-01T00:00:00+00:00"], "since"),
        (["--candidates", "hnsw", "--executor", "serial"], "candidates"),
    ],
)
def test_cli_bad_parameters_are_one_line_exit_2(
    pg_store: SQLStore, pg_url: str, args: list, field: str
) -> None:
    result = _cli("find-duplicates", "--store", pg_url, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0]


def test_cli_hnsw_needs_postgresql(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    open_store(url, create=True).put(Entry(path="a.md", content="x"))
    result = _cli("find-related", "--store", url, "--candidates", "hnsw")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "PostgreSQL" in result.stderr


def test_library_checks_the_knobs(pg_store: SQLStore) -> None:
    with pytest.raises(UsageError, match="exact_upto"):
        run_action(pg_store, "find_related", candidates="hnsw", exact_upto=-1)
    with pytest.raises(UsageError, match="min_similarity"):
        find_related_hnsw(pg_store, 0.9, 0.5)


def test_cli_text_names_the_recall_estimate_and_its_sample(pg_store: SQLStore, pg_url: str) -> None:
    result = _cli("find-related", "--store", pg_url, "--candidates", "hnsw", "--recall-sample", "40")
    assert result.exit_code == 0, result.stderr
    assert "recall estimate" in result.stdout and "of 40 random rows" in result.stdout
