"""A scope too big for one worker split into tiles of its pair matrix: the cross joins find exactly
the pairs of one search between two blocks, and tiles of several block counts -- in this process, in
local workers, on a real 2-worker Dask cluster, or re-run after a killed worker -- merge to the
single-process result exactly (pairs, scores, order and summary)."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork import similarity
from memwork.coverage import MARK_KEY
from memwork.defrag import run_action
from memwork.defrag.partitioned import (
    CRASH_ENV,
    PartitionsLost,
    block_bounds,
    run_partitioned,
    split_scopes,
    tile_pairs,
)
from memwork.embed import HashEmbedder
from memwork.entry import Entry, utcnow
from memwork.errors import UsageError
from memwork.executor import open_executor
from memwork.stores import open_store

EMB = HashEmbedder(384)
NOW = utcnow().replace(microsecond=0)
WORDS = ["postgres", "vacuum", "dead", "tuples", "index", "btree", "lock", "replica", "wal", "slot",
         "backup", "restore", "schema", "query", "plan", "cache"]  # fmt: skip
ACTIONS = [("find_duplicates", {}), ("find_related", {"min_similarity": 0.3, "max_similarity": 0.85})]
BIG = "big-scope"


def planted(rng: random.Random, scope: str, count: int) -> list[Entry]:
    """``count`` entries of one scope with planted duplicates: exact and case-folded copies, near
    copies, contradicting port numbers, plus an unembedded entry, a vector of another dimension, one
    out of its model's range, a stub and a superseded entry (each set aside as one process does)."""
    entries: list[Entry] = []
    bases = [" ".join(rng.choice(WORDS) for _ in range(9)) for _ in range(max(2, count // 6))]
    for k in range(count):
        base = bases[rng.randrange(len(bases))]
        content = {
            0: base,
            1: base.upper(),
            2: f"{base} port {5432 + k % 3}",
            3: f"{base} {rng.choice(WORDS)}",
        }.get(k % 7, " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))))
        meta: dict = {}
        embedding = EMB.embed([content])[0]
        if k % 17 == 5:
            meta = {"stub": True, "redirect_to": "n/0000.md"}
        elif k % 19 == 6:
            meta = {"superseded_by": "n/0001.md"}
        elif k % 23 == 7:
            meta = {MARK_KEY: {"model": "hash", "coverage": 0.2}}
        if k % 13 == 4:
            embedding = None
        elif k % 29 == 8:
            embedding = np.ones(8, dtype=np.float32)  # another model's dimension: not compared
        entries.append(
            Entry(
                path=f"n/{rng.randrange(10**6):06d}-{k}.md",  # paths not in creation order
                scope=scope,
                content=content,
                metadata=meta,
                embedding=embedding,
                created_at=NOW - timedelta(days=k + 1),
                updated_at=NOW - timedelta(days=k),
            )
        )
    return entries


def seed(spec: str, big: int = 90) -> str:
    rng = random.Random(7)
    entries = planted(rng, BIG, big)
    for s in range(6):
        entries += planted(rng, f"small-{s}", rng.randint(2, 12))
    with open_store(spec, create=True) as store:
        store.put_many(entries)
    return spec


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return seed(str(tmp_path_factory.mktemp("tiles") / "store"))  # a filesystem store: mixed dimensions


@pytest.fixture(scope="module")
def reference(store: str) -> dict[str, dict]:
    with open_store(store) as opened:
        return {action: run_action(opened, action, **params).to_dict() for action, params in ACTIONS}


def same(run, reference: dict) -> None:
    got = run.result.to_dict()
    assert got == reference
    assert json.dumps(got) == json.dumps(reference)  # key order too
    keys = [(p["scope"], p["path_a"], p["path_b"]) for p in got["pairs"]]
    assert len(keys) == len(set(keys))


# ---- the cross joins ------------------------------------------------------------------------------
def _vectors(rng: np.random.Generator, n: int) -> list[np.ndarray | None]:
    base = rng.normal(size=(4, 16))
    rows = base[rng.integers(0, 4, n)] + rng.normal(scale=0.6, size=(n, 16))
    return [None if k % 9 == 4 else rows[k] for k in range(n)]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.data(), st.sampled_from([0.0, 0.3, 0.6, 0.9]), st.integers(0, 10**6))
def test_cross_join_is_the_full_search_across_the_cut(n: int, data, threshold: float, seed: int) -> None:
    cut = data.draw(st.integers(0, n))
    rng = np.random.default_rng(seed)
    texts = [" ".join(WORDS[k] for k in rng.integers(0, 8, rng.integers(0, 6))) for _ in range(n)]
    vectors = _vectors(rng, n)
    full = similarity.find_duplicate_pairs(texts, vectors, threshold)
    cross = similarity.find_duplicate_pairs(texts, vectors, threshold, cross=cut)
    assert cross == [p for p in full if p.i < cut <= p.j]
    low, high = sorted((threshold, data.draw(st.sampled_from([0.5, 0.85, 1.0]))))
    related = similarity.find_related_pairs(vectors, low, high, texts)
    assert similarity.find_related_pairs(vectors, low, high, texts, cross=cut) == [
        p for p in related if p.i < cut <= p.j
    ]


def test_cross_with_changed_rows_or_out_of_range_is_refused() -> None:
    with pytest.raises(UsageError, match="cross"):
        similarity.find_duplicate_pairs(["a b", "a b"], [None, None], 0.5, cross=1, changed=[0])
    with pytest.raises(UsageError, match="cross"):
        similarity.find_related_pairs([None, None], 0.5, 0.9, cross=3)


# ---- planning -------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), min_size=1, max_size=60, unique=True),
       st.integers(2, 9))  # fmt: skip
def test_the_tiles_cover_every_pair_once(paths: list[str], blocks: int) -> None:
    bounds = block_bounds(paths, blocks)
    assert list(bounds) == sorted(bounds) and len(bounds) == min(blocks, len(paths)) - 1
    block = {p: sum(b <= p for b in bounds) for p in paths}
    seen = [
        (a, b)
        for i, j in tile_pairs(len(bounds) + 1)
        for a in paths
        for b in paths
        if a < b and sorted((block[a], block[b])) == [i, j]
    ]
    assert sorted(seen) == sorted((a, b) for a in paths for b in paths if a < b)  # each pair once


def test_only_a_scope_costlier_than_a_share_is_split() -> None:
    sizes = {"big": 1000, **{f"s{k}": 50 for k in range(20)}}
    assert split_scopes(sizes, 1) == {}  # one partition: nothing to spread
    split = split_scopes(sizes, 8)
    assert list(split) == ["big"] and split["big"] >= 2
    assert split_scopes(sizes, 8, blocks=5) == {"big": 5}
    assert split_scopes({"a": 3}, 8, blocks=50) == {"a": 3}  # never more blocks than entries


# ---- tiles equal one process ----------------------------------------------------------------------
@pytest.mark.parametrize("blocks", [2, 3, 5, 8])
def test_tiles_of_several_block_counts_equal_one_process(store: str, reference: dict, blocks: int) -> None:
    for action, params in ACTIONS:
        run = run_partitioned(store, action, executor="serial", partitions=4, blocks=blocks, **params)
        assert run.split == {BIG: blocks}
        assert run.partitions >= blocks * (blocks + 1) // 2
        assert reference[action]["pairs"], "the store must hold planted pairs"
        same(run, reference[action])


def test_one_split_scope_alone_equals_one_process(store: str) -> None:
    for action, params in ACTIONS:
        with open_store(store) as opened:
            want = run_action(opened, action, scope=BIG, **params).to_dict()
        run = run_partitioned(store, action, executor="serial", scope=BIG, partitions=6, **params)
        assert run.split and BIG in run.split
        same(run, want)


def test_since_splits_no_scope(store: str) -> None:
    since = (NOW - timedelta(days=20)).isoformat()
    for action, params in ACTIONS:
        with_since = {**params, "since": since}
        run = run_partitioned(store, action, executor="serial", partitions=4, blocks=3, **with_since)
        assert run.split == {}
        with open_store(store) as opened:
            same(run, run_action(opened, action, **with_since).to_dict())


def test_bad_blocks_is_a_usage_error(store: str) -> None:
    with pytest.raises(UsageError, match="blocks"):
        run_partitioned(store, "find_duplicates", executor="serial", blocks=1)


def test_dask_cluster_of_two_workers_runs_the_tiles(store: str, reference: dict) -> None:
    """A real 2-worker ``LocalCluster`` computes a split scope's tiles; identical to one process."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        executor = open_executor("dask://" + cluster.scheduler_address.split("://", 1)[1])
        try:
            for action, params in ACTIONS:
                run = run_partitioned(store, action, executor=executor, partitions=4, blocks=4, **params)
                assert run.split == {BIG: 4} and run.computed == run.partitions
                same(run, reference[action])
        finally:
            executor.close()


def test_a_killed_worker_in_a_tile_resumes_without_loss_or_double(
    store: str, reference: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker dies in a tile (``os._exit(9)``): what finished is checkpointed; the re-run
    computes exactly the rest (the dead tile among them) and ends identical to one process."""
    action, params = ACTIONS[0]
    kwargs = {"executor": "local:2", "partitions": 4, "blocks": 3, "checkpoint": tmp_path / "ck"} | params
    probe = run_partitioned(store, action, executor="serial", partitions=4, blocks=3, **params)
    tile = probe.partitions - 2  # one of the big scope's tiles (they come after the partitions)
    monkeypatch.setenv(CRASH_ENV, f"{tile}:{tmp_path / 'crashed'}")
    with pytest.raises(PartitionsLost) as lost:
        run_partitioned(store, action, **kwargs)
    assert (tmp_path / "crashed").exists()
    finished = len(list(lost.value.run_dir.glob("*.json")))
    assert finished < probe.partitions and lost.value.done == finished
    run = run_partitioned(store, action, **kwargs)
    assert (run.resumed, run.computed) == (finished, probe.partitions - finished)
    assert tile in run.computed_indexes
    same(run, reference[action])
