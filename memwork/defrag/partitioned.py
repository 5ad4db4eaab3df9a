"""The pair-finding defrag actions split into checkpointed scope partitions, run by an executor.

Memory stores are scoped per user or agent and a pair never spans two scopes, so ``find_duplicates``
and ``find_related`` are many independent exact joins, one per scope. :func:`run_partitioned` groups
the scopes into partitions of roughly equal pair cost (``n * (n - 1) / 2`` per scope of ``n``
entries; a scope is never split), and maps :func:`run_partition` over them with an
:mod:`memwork.executor` executor: in this process, in local worker processes, or on a Dask cluster.

A partition spec carries the store spec, its scope names and the action's parameters, never the
entries: the worker opens the store and reads its scopes itself, and only the pairs come back. Each
finished partition's result is written atomically to a run folder (keyed by a digest of the action,
its parameters, the store and the scope filter; one file per partition, keyed by its scopes and their
sizes), so a run that lost a worker resumes: the re-run computes only the partitions without a file,
and the merged result -- the same pairs, scores, summary and order as :func:`run_action` -- holds no
pair twice. The run folder is removed once the merged result is complete.

A calibrated ``policy`` is refused here (one line, exit 2): find_duplicates recognises its embedding
model over the whole store, which no partition sees. What else differs from one process: the pair
budget (``MEMWORK_MAX_PAIRS``) is checked per partition inside the join and on the merged pairs, not
on every candidate of the whole store; a store changed between a lost run and its re-run keeps the
finished partitions whose scope sizes did not change (delete the run folder to start afresh).
"""

from __future__ import annotations

import graphlib
import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from memwork.defrag.actions import ActionResult
from memwork.defrag.contradictions import Contradiction
from memwork.defrag.findings import Pair
from memwork.defrag.table import Context, lookup
from memwork.entry import utcnow, validate_scope
from memwork.errors import MemworkError, UsageError
from memwork.executor import CRASH_ENV as CRASH_ENV  # the test hook, named where tests look
from memwork.executor import Executor, crash_point, open_executor
from memwork.progress import Progress
from memwork.similarity import PairBudget
from memwork.workspace import workspace_dir

#: the actions that split by scope (each pair lies inside one scope)
PARTITIONED_ACTIONS = ("find_duplicates", "find_related")
#: fewest pairs worth a partition of its own (smaller stores run as fewer partitions)
MIN_PARTITION_PAIRS = 200_000
#: partitions per worker: a lost worker costs a small share, and a slow partition is not alone
PARTITIONS_PER_WORKER = 4
#: the checkpoint files' layout; a change makes older run folders unused
CHECKPOINT_FORMAT = 1


class PartitionsLost(MemworkError):
    """A worker died or a partition failed; the finished partitions are checkpointed."""

    exit_code = 1

    def __init__(self, done: int, total: int, run_dir: Path, cause: BaseException) -> None:
        self.done, self.total, self.run_dir = done, total, run_dir
        super().__init__(
            f"defrag partitions: {done} of {total} finished and checkpointed in {run_dir}; a partition "
            f"failed ({type(cause).__name__}: {cause}); run the same command again to resume"
        )


@dataclass(frozen=True)
class PartitionSpec:
    """What a worker needs for one partition: where the store is, which scopes, which action."""

    index: int
    key: str
    store: str
    action: str
    params: Mapping[str, Any]
    scopes: tuple[str, ...]


@dataclass(frozen=True)
class PartitionResult:
    """One partition's answer: the action's summary and pairs over its scopes."""

    key: str
    summary: dict[str, Any]
    pairs: list[Pair]


@dataclass
class PartitionedRun:
    """A partitioned run: the result (as :func:`run_action` returns it) and how it was computed."""

    result: ActionResult
    partitions: int
    resumed: int
    computed: int
    run_dir: Path
    executor: str
    computed_indexes: list[int] = field(default_factory=list)

    def describe(self) -> str:
        plural = "" if self.partitions == 1 else "s"
        return (
            f"{self.partitions} partition{plural} on {self.executor}: {self.computed} computed, "
            f"{self.resumed} resumed from checkpoints"
        )


# ---- planning ---------------------------------------------------------------------------------------
def pair_cost(entries: int) -> int:
    """The pairs an exact join over ``entries`` entries may compare."""
    return entries * (entries - 1) // 2


def partition_count(sizes: Mapping[str, int], workers: int) -> int:
    """How many partitions: a few per worker, none under :data:`MIN_PARTITION_PAIRS` of cost
    (unless the store is smaller), never more than the scopes."""
    total = sum(pair_cost(n) for n in sizes.values())
    by_cost = -(-total // MIN_PARTITION_PAIRS)
    return max(1, min(len(sizes), workers * PARTITIONS_PER_WORKER, by_cost))


def plan_partitions(sizes: Mapping[str, int], count: int) -> list[tuple[str, ...]]:
    """``sizes`` (scope -> entries) split into at most ``count`` groups of roughly equal pair cost:
    the costliest scope first into the cheapest group (LPT). Deterministic; every scope once."""
    count = max(1, min(count, len(sizes)))
    groups: list[list[str]] = [[] for _ in range(count)]
    costs = [0] * count
    for scope in sorted(sizes, key=lambda s: (-pair_cost(sizes[s]), -sizes[s], s)):
        k = min(range(count), key=lambda g: (costs[g], len(groups[g]), g))
        groups[k].append(scope)
        costs[k] += max(pair_cost(sizes[scope]), 1)
    return sorted((tuple(sorted(g)) for g in groups if g), key=lambda g: g[0])


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _worker_spec(store_spec: str) -> str:
    """The store spec as a worker elsewhere can open it: a directory path made absolute."""
    spec = store_spec.strip()
    return spec if "://" in spec else str(Path(spec).expanduser().resolve())


# ---- the worker -------------------------------------------------------------------------------------
def run_partition(spec: PartitionSpec) -> PartitionResult:
    """One partition, where the data lives: open the store, read its scopes, run the action."""
    from memwork.stores import open_store

    crash_point(spec.index)
    with open_store(spec.store) as store:
        entries = [entry for scope in spec.scopes for entry in store.all_entries(scope=scope)]
    found = lookup(spec.action).find(entries, dict(spec.params), Context(utcnow()))  # type: ignore[misc]
    return PartitionResult(spec.key, found.summary, found.pairs)


# ---- checkpoints ------------------------------------------------------------------------------------
def _pair_record(pair: Pair) -> dict[str, Any]:
    data = {f.name: getattr(pair, f.name) for f in fields(Pair)}
    data["matched_by"] = list(pair.matched_by)
    if pair.contradiction is not None:
        c = pair.contradiction
        data["contradiction"] = {"kind": c.kind, "a": list(c.tokens_a), "b": list(c.tokens_b)}
    return data


def _pair_from(data: dict[str, Any]) -> Pair:
    found = data.get("contradiction")
    contradiction = (
        Contradiction(found["kind"], tuple(found["a"]), tuple(found["b"])) if found is not None else None
    )
    return Pair(**(data | {"matched_by": tuple(data["matched_by"]), "contradiction": contradiction}))


def write_checkpoint(run_dir: Path, result: PartitionResult, scopes: Sequence[str]) -> Path:
    """The partition's result as ``run_dir/KEY.json``, atomically (a temporary file renamed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "format": CHECKPOINT_FORMAT,
        "key": result.key,
        "scopes": list(scopes),
        "summary": result.summary,
        "pairs": [_pair_record(p) for p in result.pairs],
    }
    path = run_dir / f"{result.key}.json"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w", encoding="utf-8") as out:
        json.dump(record, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return path


def read_checkpoint(run_dir: Path, key: str) -> PartitionResult | None:
    """A finished partition's result, or None (none yet, or a damaged file: computed again)."""
    path = run_dir / f"{key}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != CHECKPOINT_FORMAT or record.get("key") != key:
            return None
        return PartitionResult(key, dict(record["summary"]), [_pair_from(p) for p in record["pairs"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ---- merging ----------------------------------------------------------------------------------------
def merge_summaries(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The partitions' counts added up, keys in the order they come in every partition; a value that
    is not a count (``since``: the instant every partition started from) is the same in each."""
    order: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    totals: dict[str, Any] = {}
    for summary in summaries:
        keys = list(summary)
        for k, key in enumerate(keys):
            order.add(key, *keys[:k][-1:])
            value = summary[key]
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
            elif totals.setdefault(key, value) != value:
                raise ValueError(f"partitions disagree on {key}: {totals[key]!r} != {value!r}")
    return {key: totals[key] for key in order.static_order()}


def merge_pairs(results: Sequence[PartitionResult]) -> list[Pair]:
    """Every partition's pairs in the order the single-process run returns them (most similar first)."""
    pairs = [pair for result in results for pair in result.pairs]
    return sorted(pairs, key=lambda p: (-p.similarity, p.scope, p.path_a, p.path_b))


# ---- the coordinator --------------------------------------------------------------------------------
def run_dir_for(base: Path, action: str, params: Mapping[str, Any], store: str, scope: str | None) -> Path:
    """The run folder: one per action, parameters, store and scope
    (``store`` the spec the workers open: hashed into the name, never written out)."""
    key = _digest(
        {
            "format": CHECKPOINT_FORMAT,
            "action": action,
            "params": dict(params),
            "store": store,
            "scope": scope,
        }
    )
    return base / f"{action}-{key[:20]}"


def run_partitioned(
    store_spec: str,
    action: str,
    *,
    scope: str | None = None,
    executor: str | Executor | None = "local",
    checkpoint: str | Path | None = None,
    partitions: int | None = None,
    progress: Progress | None = None,
    **params: Any,
) -> PartitionedRun:
    """Run ``find_duplicates`` or ``find_related`` on the store ``store_spec`` names as scope
    partitions on ``executor`` (an ``--executor`` string or an open :class:`Executor`, left open),
    resuming from the checkpoints in ``checkpoint`` (default: the workspace's
    ``defrag-partitions`` folder). ``partitions`` overrides :func:`partition_count`.

    The result equals ``run_action(store, action, scope=scope, **params)``: same summary, pairs,
    scores and order. A lost worker or failed partition raises :class:`PartitionsLost` (the finished
    ones stay checkpointed); a usage error of a partition is raised as itself. A ``policy`` is
    refused (its model is recognised over the whole store)."""
    act = lookup(action)
    if act.name not in PARTITIONED_ACTIONS:
        raise UsageError(
            "action", action, f"runs on one machine only (partitioned: {', '.join(PARTITIONED_ACTIONS)})"
        )
    scope = validate_scope(scope) if scope is not None else None
    checked = act.validate(params)
    if checked.get("policy"):  # its model is recognised over the whole store, not per partition
        raise UsageError(
            "policy", checked["policy"], "runs in one process only (no --executor, --checkpoint)"
        )
    if checked.get("candidates", "exact") != "exact":  # the HNSW stage streams the store itself
        raise UsageError(
            "candidates", checked["candidates"], "runs in one process only (no --executor, --checkpoint)"
        )
    if partitions is not None and (
        isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1
    ):
        raise UsageError("partitions", partitions, "must be a whole number >= 1")
    spec = _worker_spec(store_spec)
    from memwork.stores import open_store

    with open_store(store_spec) as store:
        described = store.describe()
        names = [scope] if scope is not None else store.scopes()
        sizes = {name: n for name in names if (n := store.count(scope=name))}
    base = _checkpoint_base(checkpoint)
    owned = not _is_executor(executor)
    pool: Executor = open_executor(cast(str | None, executor)) if owned else cast(Executor, executor)
    try:
        count = partitions or partition_count(sizes, pool.workers)
        groups = plan_partitions(sizes, count)
        run_dir = run_dir_for(base, act.name, checked, spec, scope)
        specs = [
            PartitionSpec(i, _digest([[s, sizes[s]] for s in group])[:20], spec, act.name, checked, group)
            for i, group in enumerate(groups)
        ]
        run = _run_specs(pool, specs, run_dir, sizes, progress, description=f"{act.name} partitions")
    finally:
        if owned:
            pool.close()
    results = run.pop("results")
    pairs = merge_pairs(results)
    PairBudget().spend(len(pairs), next(iter(checked)), checked[next(iter(checked))])
    result = ActionResult(act.name, checked, scope, described)
    result.summary = (
        merge_summaries([r.summary for r in results]) if results else _empty_summary(act.name, checked)
    )
    result.pairs = pairs
    shutil.rmtree(run_dir, ignore_errors=True)
    return PartitionedRun(result, len(specs), run_dir=run_dir, executor=str(pool.spec), **run)


def _checkpoint_base(checkpoint: str | Path | None) -> Path:
    """The folder the run folders go in: ``checkpoint``, or the workspace's ``defrag-partitions``."""
    if checkpoint is None:
        return workspace_dir() / "defrag-partitions"
    base = Path(checkpoint).expanduser().resolve()
    if base.exists() and not base.is_dir():
        raise UsageError("checkpoint", str(checkpoint), "is a file, not a folder")
    return base


def _is_executor(value: object) -> bool:
    return hasattr(value, "map_unordered") and hasattr(value, "spec")


def _empty_summary(action: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of a store with no entries (no partition): the action on nothing."""
    return lookup(action).find([], dict(params), Context(utcnow())).summary  # type: ignore[misc]


def _run_specs(
    pool: Executor,
    specs: list[PartitionSpec],
    run_dir: Path,
    sizes: Mapping[str, int],
    progress: Progress | None,
    *,
    description: str,
) -> dict[str, Any]:
    """Each partition's result, from its checkpoint or computed (and checkpointed as it arrives)."""
    if progress is not None:
        progress.start(description, sum(sizes.values()))
    done: dict[int, PartitionResult] = {}
    for spec in specs:
        found = read_checkpoint(run_dir, spec.key)
        if found is not None:
            done[spec.index] = found
            _advance(progress, spec, sizes)
    resumed = len(done)
    todo = [spec for spec in specs if spec.index not in done]
    computed: list[int] = []
    try:
        for k, result in pool.map_unordered(run_partition, todo):
            try:
                write_checkpoint(run_dir, result, todo[k].scopes)
            except OSError as exc:
                raise UsageError("checkpoint", str(run_dir), f"cannot write: {exc}") from exc
            done[todo[k].index] = result
            computed.append(todo[k].index)
            _advance(progress, todo[k], sizes)
    except MemworkError:
        raise
    except Exception as exc:
        raise PartitionsLost(len(done), len(specs), run_dir, exc) from exc
    return {
        "results": [done[spec.index] for spec in specs],
        "resumed": resumed,
        "computed": len(computed),
        "computed_indexes": sorted(computed),
    }


def _advance(progress: Progress | None, spec: PartitionSpec, sizes: Mapping[str, int]) -> None:
    if progress is not None:
        progress.advance(sum(sizes[s] for s in spec.scopes))
