"""Defrag as scope partitions on an executor: local processes and a real 2-worker Dask cluster give
the single-process result exactly; a worker killed mid-run costs a re-run of its partitions only,
with no pair lost or duplicated."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.defrag import Policy, run_action
from memwork.defrag.contradictions import Contradiction
from memwork.defrag.findings import Pair
from memwork.defrag.partitioned import (
    CRASH_ENV,
    PartitionResult,
    PartitionsLost,
    merge_summaries,
    plan_partitions,
    read_checkpoint,
    run_partitioned,
    write_checkpoint,
)
from memwork.embed import HashEmbedder
from memwork.entry import Entry, utcnow
from memwork.errors import UsageError
from memwork.executor import open_executor
from memwork.stores import open_store

EMB = HashEmbedder(384)
NOW = utcnow().replace(microsecond=0)
WORDS = [
    "postgres",
    "vacuum",
    "dead",
    "tuples",
    "storage",
    "index",
    "btree",
    "autovacuum",
    "schedule",
    "table",
    "lock",
    "replica",
]
#: (action, params) of each partitioned action, the related band wide enough to find pairs
ACTIONS = [("find_duplicates", {}), ("find_related", {"min_similarity": 0.3, "max_similarity": 0.85})]
SCOPES = 24


def seed(spec: str) -> str:
    """Many scopes of uneven sizes: exact and case-folded copies, near copies, port numbers that
    contradict, an unembedded entry and a stub per few scopes."""
    rng = random.Random(20)
    entries = []
    for s in range(SCOPES):
        base = " ".join(rng.choice(WORDS) for _ in range(8))
        for k in range(rng.randint(1, 14)):
            content = f"{base} port {5432 + k % 3}" if k % 4 == 1 else base
            if k % 3 == 2:
                content += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            content = content.upper() if k % 5 == 3 else content
            meta = {"stub": True, "redirect_to": "n/0.md"} if k == 9 else {}
            entries.append(
                Entry(
                    path=f"n/{k}.md",
                    scope=f"user-{s:02d}",
                    content=content,
                    metadata=meta,
                    embedding=None if k == 6 else EMB.embed([content])[0],
                    created_at=NOW - timedelta(days=k + 1),
                    updated_at=NOW - timedelta(days=k),
                )
            )
    with open_store(spec, create=True) as store:
        store.put_many(entries)
    return spec


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return seed(f"sqlite:///{tmp_path / 'many-scopes.db'}")


@pytest.fixture
def fs_store(tmp_path: Path) -> str:
    return seed(str(tmp_path / "many-scopes"))


def serial(spec: str, action: str, params: dict) -> dict:
    with open_store(spec) as store:
        return run_action(store, action, **params).to_dict()


def same(run, reference: dict) -> None:
    """The partitioned result is the single-process one: pairs, scores, order and summary."""
    got = run.result.to_dict()
    assert got == reference
    assert json.dumps(got) == json.dumps(reference)  # key order too
    keys = [(p["scope"], p["path_a"], p["path_b"]) for p in got["pairs"]]
    assert len(keys) == len(set(keys))  # no pair twice


# ---- planning and merging -------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(0, 500), max_size=40),
       st.integers(1, 12))  # fmt: skip
def test_every_scope_in_exactly_one_partition(sizes: dict[str, int], count: int) -> None:
    groups = plan_partitions(sizes, count)
    flat = [scope for group in groups for scope in group]
    assert sorted(flat) == sorted(sizes) and len(groups) <= max(1, count)
    assert groups == plan_partitions(dict(reversed(list(sizes.items()))), count)  # deterministic


def test_partitions_balance_pair_cost() -> None:
    sizes = {f"s{k}": 10 for k in range(40)} | {"big": 30}
    groups = plan_partitions(sizes, 4)
    costs = sorted(sum(sizes[s] * (sizes[s] - 1) // 2 for s in g) for g in groups)
    assert len(groups) == 4 and sum("big" in g for g in groups) == 1
    assert costs[-1] - costs[0] <= 45  # within one small scope's cost


def test_summaries_add_up_in_order() -> None:
    merged = merge_summaries(
        [{"pairs": 1, "exact_pairs": 1, "x": 0}, {"pairs": 2, "normalised_pairs": 3, "x": 1}]
    )
    assert merged == {"pairs": 3, "exact_pairs": 1, "normalised_pairs": 3, "x": 1}
    keys = list(merged)
    assert keys[0] == "pairs" and keys[-1] == "x"


def test_a_checkpoint_holds_the_pairs_exactly(tmp_path: Path) -> None:
    pairs = [
        Pair("u", "a.md", "b.md", 1 / 3, 0.1, None, "one-way", ("semantic",), True, 0.7, "review", "exact",
             Contradiction("number", ("5432",), ("6432",))),
        Pair("u", "a.md", "c.md", 0.9, 0.9, 0.123456789012345, matched_by=("text", "semantic")),
    ]  # fmt: skip
    write_checkpoint(tmp_path, PartitionResult("k1", {"pairs": 2}, pairs), ["u"])
    back = read_checkpoint(tmp_path, "k1")
    assert back is not None and back.pairs == pairs and back.summary == {"pairs": 2}
    (tmp_path / "k2.json").write_text("{half a file")
    assert read_checkpoint(tmp_path, "k2") is None  # damaged: computed again, never trusted
    assert not list(tmp_path.glob(".*tmp"))


# ---- executors equal the single-process run -------------------------------------------------------
def test_local_processes_equal_serial(sqlite_store: str, fs_store: str) -> None:
    executor = open_executor("local:2")
    try:
        for spec in (sqlite_store, fs_store):
            for action, params in ACTIONS:
                run = run_partitioned(spec, action, executor=executor, partitions=6, **params)
                assert run.partitions == 6 and run.computed == 6 and run.resumed == 0
                same(run, serial(spec, action, params))
                assert not run.run_dir.exists()  # complete: the checkpoints are gone
    finally:
        executor.close()


def test_postgresql_store_read_by_each_worker(pg_url: str) -> None:
    """Each worker opens the PostgreSQL store itself and reads its own scopes."""
    spec = seed(pg_url)
    executor = open_executor("local:2")
    try:
        for action, params in ACTIONS:
            run = run_partitioned(spec, action, executor=executor, partitions=4, **params)
            same(run, serial(spec, action, params))
    finally:
        executor.close()


def test_one_scope_and_default_partitions(sqlite_store: str) -> None:
    for action, params in ACTIONS:
        run = run_partitioned(sqlite_store, action, executor="serial", scope="user-03", **params)
        with open_store(sqlite_store) as store:
            reference = run_action(store, action, scope="user-03", **params).to_dict()
        same(run, reference)
        assert run.partitions == 1


def test_a_relative_store_path_reads_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers get the absolute path; the result names the store as the single-process run does."""
    monkeypatch.chdir(tmp_path)
    seed("relative-store")
    action, params = ACTIONS[0]
    same(
        run_partitioned("relative-store", action, executor="serial", partitions=3),
        serial("relative-store", action, params),
    )


def test_an_empty_store_is_an_empty_result(tmp_path: Path) -> None:
    spec = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(spec, create=True).close()
    for action, params in ACTIONS:
        run = run_partitioned(spec, action, executor="serial", **params)
        same(run, serial(spec, action, params))
        assert run.partitions == 0


def test_only_the_pair_actions_split(sqlite_store: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="action"):
        run_partitioned(sqlite_store, "merge_duplicates", executor="serial")
    with pytest.raises(UsageError, match="similarity_threshold"):
        run_partitioned(sqlite_store, "find_duplicates", executor="serial", similarity_threshold=2)
    policy = Policy("none", (10.0, 0.0), -5.0, auto_merge=0.5, review=0.4, floor=0.5,
                    target_precision=0.99, labels_sha256="0" * 64)  # fmt: skip
    (tmp_path / "policy.json").write_text(json.dumps(policy.to_dict()), encoding="utf-8")
    with pytest.raises(UsageError, match="policy"):  # its model is recognised over the whole store
        run_partitioned(
            sqlite_store, "find_duplicates", executor="serial", policy=str(tmp_path / "policy.json")
        )


# ---- a partition lost mid-run ---------------------------------------------------------------------
def test_a_failed_partition_resumes_from_the_checkpoints(
    sqlite_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process the order is known: partitions 0 and 1 finish, 2 fails; the re-run computes
    only 2, 3 and 4."""
    monkeypatch.setenv(CRASH_ENV, f"2:{tmp_path / 'crashed'}:raise")
    action, params = ACTIONS[0]
    with pytest.raises(PartitionsLost, match="2 of 5 finished") as lost:
        run_partitioned(
            sqlite_store, action, executor="serial", partitions=5, checkpoint=tmp_path / "ck", **params
        )
    assert len(list(lost.value.run_dir.glob("*.json"))) == 2
    run = run_partitioned(
        sqlite_store, action, executor="serial", partitions=5, checkpoint=tmp_path / "ck", **params
    )
    assert (run.resumed, run.computed, run.computed_indexes) == (2, 3, [2, 3, 4])
    same(run, serial(sqlite_store, action, params))


def test_a_killed_local_worker_loses_only_its_partitions(
    sqlite_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker process dies (``os._exit(9)``): the pool is broken and the run fails; what
    finished is checkpointed, and the re-run computes exactly the rest and ends identical."""
    monkeypatch.setenv(CRASH_ENV, f"5:{tmp_path / 'crashed'}")
    action, params = ACTIONS[0]
    kwargs = {"executor": "local:2", "partitions": 6, "checkpoint": tmp_path / "ck"} | params
    with pytest.raises(PartitionsLost) as lost:
        run_partitioned(sqlite_store, action, **kwargs)
    assert (tmp_path / "crashed").exists()
    finished = len(list(lost.value.run_dir.glob("*.json")))
    assert finished < 6 and lost.value.done == finished
    run = run_partitioned(sqlite_store, action, **kwargs)
    assert (run.resumed, run.computed) == (finished, 6 - finished) and 5 in run.computed_indexes
    same(run, serial(sqlite_store, action, params))


def test_dask_cluster_of_two_workers_equals_serial_with_a_worker_killed(
    sqlite_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real 2-worker ``LocalCluster``: a worker dies in partition 3 and the scheduler re-runs it on
    a live one; the one run ends identical to the single process. A second action, no crash, too."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv(CRASH_ENV, f"3:{tmp_path / 'crashed'}")  # the workers inherit it
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        executor = open_executor("dask://" + cluster.scheduler_address.split("://", 1)[1])
        try:
            assert executor.workers == 2
            for action, params in ACTIONS:
                run = run_partitioned(sqlite_store, action, executor=executor, partitions=6, **params)
                assert (run.computed, run.resumed) == (6, 0)
                same(run, serial(sqlite_store, action, params))
        finally:
            executor.close()
    assert (tmp_path / "crashed").exists()  # the worker really died


# ---- the command line -----------------------------------------------------------------------------
def test_cli_executor_equals_the_default_run(sqlite_store: str, tmp_path: Path) -> None:
    runner = CliRunner()
    for name in ("find-duplicates", "find-related"):
        base = ["defrag", name, "--store", sqlite_store, "--json"]
        plain = runner.invoke(main, base, catch_exceptions=False)
        split = runner.invoke(main, [*base, "--executor", "serial", "--checkpoint", str(tmp_path / "ck")])
        assert plain.exit_code == split.exit_code == 0, split.output
        assert json.loads(split.stdout) == json.loads(plain.stdout)
        assert "partition" in split.stderr


@pytest.mark.parametrize("value", ["ray", "local:0", "dask://nohost"])
def test_cli_bad_executor_is_one_line_exit_2(sqlite_store: str, tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "defrag",
            "find-duplicates",
            "--store",
            sqlite_store,
            "--executor",
            value,
            "--checkpoint",
            str(tmp_path / "ck"),
        ],
    )
    assert result.exit_code == 2
    assert (
        len(result.stderr.strip().splitlines()) == 1
        and "executor" in result.stderr
        and value in result.stderr
    )
    assert not (tmp_path / "ck").exists()


def test_cli_checkpoint_that_is_a_file_is_one_line_exit_2(sqlite_store: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = CliRunner().invoke(
        main, ["defrag", "find-related", "--store", sqlite_store, "--checkpoint", str(tmp_path / "file")]
    )
    assert result.exit_code == 2 and "checkpoint" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
