"""Where partitioned work runs: in this process, in local worker processes, or on a Dask cluster.

Work that splits into independent partitions -- one exact pair join per scope for the defrag, one key
range for a migration or a verification -- is a list of picklable partition specs and one top-level
function. An :class:`Executor` maps the function over the specs and yields ``(index, result)`` as each
partition finishes. Every partition is resumable on its own (its caller keeps a checkpoint per
partition), so a lost worker costs only a re-run of the partitions it held, and a re-run finishes
with no duplicate and no loss.

Chosen by one string (``--executor``)::

    serial               in this process, one partition after another (tests, one worker)
    local                local worker processes, one per core
    local:N              N local worker processes
    dask://HOST:PORT     an existing Dask distributed scheduler (extra ``memwork[dask]``)

Why Dask distributed and not Ray: it is pure Python and pip-light (no object store or raylet to run
beside PostgreSQL), a cluster is one ``dask scheduler`` plus ``dask worker`` processes that platform
teams already run for pandas work, its scheduler re-runs a dead worker's tasks on the others (the
retry our resumable partitions make safe), and ``distributed.LocalCluster`` gives the test suite a
real two-worker cluster in a second.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from memwork.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

ExecutorKind = Literal["serial", "local", "dask"]

#: TEST ONLY: ``N:MARKER[:raise]`` makes partition ``N`` die (``os._exit(9)``, or raise) the first
#: time, when it creates the file ``MARKER``; the suite uses it to kill a worker mid-run
CRASH_ENV = "MEMWORK_TEST_CRASH_PARTITION"

#: the spellings ``--executor`` accepts, for the one-line usage error
EXECUTOR_FORMS = "serial, local, local:N or dask://HOST:PORT"


@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--executor`` value."""

    kind: ExecutorKind
    workers: int | None = None
    address: str | None = None

    def __str__(self) -> str:
        if self.kind == "dask":
            return f"dask://{self.address}"
        if self.kind == "local" and self.workers is not None:
            return f"local:{self.workers}"
        return self.kind


def parse_executor(value: str | None) -> ExecutorSpec:
    """``serial`` / ``local`` / ``local:N`` / ``dask://HOST:PORT`` -> :class:`ExecutorSpec`; anything
    else is a usage error naming the value (exit 2, nothing run)."""
    text = (value or "serial").strip()
    if text == "serial":
        return ExecutorSpec("serial", workers=1)
    if text == "local":
        return ExecutorSpec("local", workers=None)
    if text.startswith("local:"):
        count = text.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise UsageError(
                "executor", value, f"local:N needs a worker count >= 1 (one of {EXECUTOR_FORMS})"
            )
        return ExecutorSpec("local", workers=int(count))
    if text.startswith("dask://") or text.startswith("tcp://"):
        address = text.split("://", 1)[1]
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(
                "executor", value, f"a Dask scheduler address is dask://HOST:PORT ({EXECUTOR_FORMS})"
            )
        return ExecutorSpec("dask", address=address)
    raise UsageError("executor", value, f"not an executor (one of {EXECUTOR_FORMS})")


class Executor(Protocol):
    """Maps a top-level function over partition specs; results arrive as partitions finish."""

    spec: ExecutorSpec

    @property
    def workers(self) -> int:
        """How many partitions can run at once."""
        ...

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Yield ``(index into items, fn(items[index]))`` in completion order. A partition that
        raises stops the iteration with its exception (the finished ones were yielded already)."""
        ...

    def close(self) -> None:
        """Release workers or the cluster connection (never the cluster itself)."""
        ...


class SerialExecutor:
    """Every partition in this process, in order: the reference every other executor must equal."""

    def __init__(self) -> None:
        self.spec = ExecutorSpec("serial", workers=1)

    @property
    def workers(self) -> int:
        return 1

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        for index, item in enumerate(items):
            yield index, fn(item)

    def close(self) -> None:
        return None


class LocalExecutor:
    """Local worker processes (``spawn``: a worker never inherits this process's threads, BLAS pools
    or open database connections, which ``fork`` would copy mid-use)."""

    def __init__(self, workers: int | None = None) -> None:
        count = workers or os.cpu_count() or 1
        self.spec = ExecutorSpec("local", workers=count)
        self._pool = ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("spawn"))

    @property
    def workers(self) -> int:
        return self.spec.workers or 1

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        futures: dict[Future[R], int] = {self._pool.submit(fn, item): i for i, item in enumerate(items)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield futures[future], future.result()
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Partitions as tasks on an existing Dask distributed scheduler. The scheduler re-runs the
    tasks of a worker that died on the others; partitions are resumable, so that re-run is exact."""

    def __init__(self, address: str, *, timeout: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise UsageError(
                "executor", f"dask://{address}", "needs Dask distributed: pip install 'memwork[dask]'"
            ) from exc
        self.spec = ExecutorSpec("dask", address=address)
        try:
            self._client: Any = Client(f"tcp://{address}", timeout=timeout, set_as_default=False)
        except OSError as exc:
            raise UsageError(
                "executor", f"dask://{address}", f"no Dask scheduler answers there ({exc})"
            ) from exc

    @property
    def workers(self) -> int:
        return max(1, len(self._client.scheduler_info().get("workers", {})))

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        from distributed import as_completed

        # pure=False: a re-submitted partition runs again rather than reusing a cached result
        futures = self._client.map(fn, list(items), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        try:
            for future in as_completed(futures, loop=self._client.loop):
                yield index[future.key], future.result()
        finally:
            self._client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        self._client.close()


def crash_point(index: int) -> None:
    """TEST ONLY (:data:`CRASH_ENV`): die once in partition ``index``, as a killed worker does."""
    raw = os.environ.get(CRASH_ENV)
    if not raw:
        return
    target, _, rest = raw.partition(":")
    marker, _, mode = rest.rpartition(":") if rest.endswith(":raise") else (rest, "", "exit")
    if not target.isdigit() or int(target) != index:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # died once already: this is the re-run
    if mode == "raise":
        raise RuntimeError(f"test crash of partition {index}")
    os._exit(9)


def open_executor(value: str | ExecutorSpec | None) -> Executor:
    """The executor a ``--executor`` value names (default ``serial``)."""
    spec = value if isinstance(value, ExecutorSpec) else parse_executor(value)
    if spec.kind == "dask":
        assert spec.address is not None
        return DaskExecutor(spec.address)
    if spec.kind == "local":
        return LocalExecutor(spec.workers)
    return SerialExecutor()
