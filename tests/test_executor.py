"""The executor contract: every executor yields each partition's result exactly once, equal to the
serial run; a bad ``--executor`` value is a one-line usage error."""

from __future__ import annotations

import pytest

from memwork.errors import UsageError
from memwork.executor import ExecutorSpec, open_executor, parse_executor


def square(value: int) -> int:
    return value * value


def fail_on_three(value: int) -> int:
    if value == 3:
        raise ValueError("partition 3 failed")
    return value


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("serial", ExecutorSpec("serial", workers=1)),
        ("local", ExecutorSpec("local")),
        ("local:2", ExecutorSpec("local", workers=2)),
        ("dask://127.0.0.1:8786", ExecutorSpec("dask", address="127.0.0.1:8786")),
        (None, ExecutorSpec("serial", workers=1)),
    ],
)
def test_parse_executor(text: str | None, spec: ExecutorSpec) -> None:
    assert parse_executor(text) == spec


@pytest.mark.parametrize("text", ["local:0", "local:x", "dask://nohost", "spark://h:1", "ray"])
def test_bad_executor_names_the_field_and_value(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_executor(text)
    assert "executor" in str(caught.value) and text in str(caught.value)


@pytest.mark.parametrize("spec", ["serial", "local:2"])
def test_every_partition_once_equal_to_serial(spec: str) -> None:
    executor = open_executor(spec)
    try:
        results = list(executor.map_unordered(square, list(range(7))))
    finally:
        executor.close()
    assert sorted(results) == [(i, i * i) for i in range(7)]


def test_a_failing_partition_raises_its_error() -> None:
    executor = open_executor("local:2")
    try:
        with pytest.raises(ValueError, match="partition 3 failed"):
            list(executor.map_unordered(fail_on_three, list(range(6))))
    finally:
        executor.close()


def test_dask_local_cluster_of_two_workers_equals_serial() -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        executor = open_executor("dask://" + cluster.scheduler_address.split("://", 1)[1])
        try:
            assert executor.workers == 2
            results = sorted(executor.map_unordered(square, list(range(9))))
        finally:
            executor.close()
    assert results == [(i, i * i) for i in range(9)]


def test_no_scheduler_is_a_usage_error() -> None:
    pytest.importorskip("distributed")
    with pytest.raises(UsageError, match="executor"):
        from memwork.executor import DaskExecutor

        DaskExecutor("127.0.0.1:1", timeout=2.0)
