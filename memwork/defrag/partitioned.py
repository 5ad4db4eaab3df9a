"""The pair-finding defrag actions split into checkpointed scope partitions, run by an executor.

Memory stores are scoped per user or agent and a pair never spans two scopes, so ``find_duplicates``
and ``find_related`` are many independent exact joins, one per scope. :func:`run_partitioned` groups
the scopes into partitions of roughly equal pair cost (``n * (n - 1) / 2`` per scope of ``n``
entries), and maps :func:`run_partition` over them with an :mod:`memwork.executor` executor: in
this process, in local worker processes, or on a Dask cluster.

A scope whose pair cost exceeds a partition's share (the total over the partition count) is split
into tiles of its pair matrix instead: its entries in the finders' order (by path) are cut into
``B`` blocks at paths the coordinator lists (:func:`block_bounds`), and each block pair ``(i, j)``,
``i <= j``, is one unit of work -- a diagonal tile pairs within block ``i``, an off-diagonal one
block ``i`` against block ``j`` -- run by the action's tile finder (the same exact joins, through
their cross entry point ``cross=``), so every pair of the scope is found in exactly one tile, with
the scores of one process. A tile's worker streams its scope and keeps only its two blocks (and
the scope's vector dimension counts, which pick the comparable vectors); the diagonal tiles carry
the scope's entry counts of the summary. An incremental run (``since``) splits no scope: it is
already O(changed x N). The two actions have no per-scope step after pairing (contradiction flags,
link status and the summary's pair counts are per pair), so the merge is the sort below.

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

import bisect
import graphlib
import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

from memwork.defrag.actions import ActionResult
from memwork.defrag.contradictions import Contradiction
from memwork.defrag.findings import Pair, Tile, compared
from memwork.defrag.table import Context, lookup
from memwork.entry import Entry, utcnow, validate_scope
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
#: most entries a partition of whole scopes reads at once (bounds a worker's memory)
MAX_PARTITION_ENTRIES = 100_000
#: partitions per worker: a lost worker costs a small share, and a slow partition is not alone
PARTITIONS_PER_WORKER = 4
#: most blocks a split scope is cut into (``B`` blocks make ``B * (B + 1) / 2`` tiles)
MAX_BLOCKS = 64
#: the checkpoint files' layout; a change makes older run folders unused
CHECKPOINT_FORMAT = 2


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
class TileSpec:
    """Which tile of a split scope: the first path of each block but the first (the blocks' bounds
    in the finders' path order) and the blocks paired, ``i <= j``."""

    bounds: tuple[str, ...]
    i: int
    j: int

    def block(self, path: str) -> int:
        """The block holding ``path``."""
        return bisect.bisect_right(self.bounds, path)


@dataclass(frozen=True)
class PartitionSpec:
    """What a worker needs for one partition: where the store is, which scopes, which action;
    with ``tile`` one tile of its one scope. ``weight``: the entries it counts for progress."""

    index: int
    key: str
    store: str
    action: str
    params: Mapping[str, Any]
    scopes: tuple[str, ...]
    tile: TileSpec | None = None
    weight: int = 0


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
    #: split scope -> its blocks (each gave ``B * (B + 1) / 2`` of the partitions as tiles)
    split: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        plural = "" if self.partitions == 1 else "s"
        tiles = sum(b * (b + 1) // 2 for b in self.split.values())
        split = f" ({tiles} tiles of {len(self.split)} split scope{'' if len(self.split) == 1 else 's'})"
        return (
            f"{self.partitions} partition{plural}{split if self.split else ''} on {self.executor}: "
            f"{self.computed} computed, {self.resumed} resumed from checkpoints"
        )


# ---- planning ---------------------------------------------------------------------------------------
def pair_cost(entries: int) -> int:
    """The pairs an exact join over ``entries`` entries may compare."""
    return entries * (entries - 1) // 2


def partition_count(sizes: Mapping[str, int], workers: int) -> int:
    """How many partitions: a few per worker, none under :data:`MIN_PARTITION_PAIRS` of cost
    (unless the store is smaller); more than the scopes only by splitting one into tiles."""
    total = sum(pair_cost(n) for n in sizes.values())
    by_cost = -(-total // MIN_PARTITION_PAIRS)
    return max(1, min(workers * PARTITIONS_PER_WORKER, by_cost))


def split_scopes(sizes: Mapping[str, int], count: int, blocks: int | None = None) -> dict[str, int]:
    """Scope -> blocks, for each scope whose pair cost exceeds a partition's share (the total cost
    over ``count``): enough blocks that a tile costs about a share (``blocks`` when given), at
    least 2, at most :data:`MAX_BLOCKS` and the scope's entries."""
    total = sum(pair_cost(n) for n in sizes.values())
    share = total / max(count, 1)
    out: dict[str, int] = {}
    for scope in sorted(sizes):
        n, cost = sizes[scope], pair_cost(sizes[scope])
        if count < 2 or n < 2 or cost <= share:
            continue
        b = blocks if blocks is not None else _blocks_for(-(-cost // max(int(share), 1)))
        out[scope] = max(2, min(b, n, MAX_BLOCKS))
    return out


def _blocks_for(tiles: int) -> int:
    """The fewest blocks whose tiles (``B * (B + 1) / 2``) are at least ``tiles``."""
    b = 1
    while b * (b + 1) // 2 < tiles:
        b += 1
    return b


def block_bounds(paths: Sequence[str], blocks: int) -> tuple[str, ...]:
    """The first path of each block but the first: ``paths`` sorted (the finders' order) cut into
    ``blocks`` runs of near-equal length (fewer when there are fewer paths)."""
    ordered = sorted(set(paths))
    blocks = max(1, min(blocks, len(ordered)))
    return tuple(ordered[len(ordered) * k // blocks] for k in range(1, blocks))


def tile_pairs(blocks: int) -> list[tuple[int, int]]:
    """Every block pair ``(i, j)`` with ``i <= j``: the tiles that cover a scope's pair matrix once."""
    return [(i, j) for i in range(blocks) for j in range(i, blocks)]


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
    """One partition, where the data lives: open the store, read its scopes (or the two blocks of
    its tile), run the action (or its tile finder)."""
    from memwork.stores import open_store

    crash_point(spec.index)
    action = lookup(spec.action)
    with open_store(spec.store) as store:
        if spec.tile is not None:
            tile = read_tile(store.iter_entries(scope=spec.scopes[0]), spec.scopes[0], spec.tile)
        else:
            entries = [entry for scope in spec.scopes for entry in store.all_entries(scope=scope)]
    if spec.tile is not None:
        found = action.tiled(tile, dict(spec.params), Context(utcnow()))  # type: ignore[misc]
    else:
        found = action.find(entries, dict(spec.params), Context(utcnow()))  # type: ignore[misc]
    return PartitionResult(spec.key, found.summary, found.pairs)


def read_tile(entries: Iterable[Entry], scope: str, spec: TileSpec) -> Tile:
    """The tile ``spec`` of ``scope`` from its entries (streamed: only the tile's two blocks are
    kept), with the vector dimensions of the whole scope counted on the way."""
    dims: Counter[int] = Counter()
    left: list[Entry] = []
    right: list[Entry] = []
    counted: list[Entry] = []
    for entry in entries:
        live = compared(entry)
        if live and entry.embedding is not None:
            dims[entry.embedding.shape[0]] += 1
        block = spec.block(entry.path)
        if block == spec.i:
            if spec.i == spec.j:
                counted.append(entry)
            if live:
                left.append(entry)
        elif block == spec.j and live:
            right.append(entry)
    by_path = attrgetter("path")
    left.sort(key=by_path)
    return Tile(scope, left, sorted(right, key=by_path) if spec.i != spec.j else None, dims, counted)


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
    blocks: int | None = None,
    progress: Progress | None = None,
    **params: Any,
) -> PartitionedRun:
    """Run ``find_duplicates`` or ``find_related`` on the store ``store_spec`` names as scope
    partitions on ``executor`` (an ``--executor`` string or an open :class:`Executor`, left open),
    resuming from the checkpoints in ``checkpoint`` (default: the workspace's
    ``defrag-partitions`` folder). ``partitions`` overrides :func:`partition_count`; ``blocks``
    the blocks of each scope split into tiles (:func:`split_scopes`).

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
    for name, value, least in (("partitions", partitions, 1), ("blocks", blocks, 2)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise UsageError(name, value, f"must be a whole number >= {least}")
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
        split = {} if checked.get("since") else split_scopes(sizes, count, blocks)
        specs, split = _plan_specs(store_spec, spec, act.name, checked, sizes, count, split)
        run_dir = run_dir_for(base, act.name, checked, spec, scope)
        run = _run_specs(pool, specs, run_dir, progress, sum(sizes.values()), f"{act.name} partitions")
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
    return PartitionedRun(result, len(specs), run_dir=run_dir, executor=str(pool.spec), split=split, **run)


def _plan_specs(
    store_spec: str,
    spec: str,
    action: str,
    params: Mapping[str, Any],
    sizes: Mapping[str, int],
    count: int,
    split: Mapping[str, int],
) -> tuple[list[PartitionSpec], dict[str, int]]:
    """The units of work: the unsplit scopes grouped into partitions (enough that none reads more
    than :data:`MAX_PARTITION_ENTRIES` entries when its scopes allow), then each split scope's tiles
    (its block bounds listed from the store: paths only). Returns them and the blocks per split scope."""
    from memwork.stores import open_store

    bounds: dict[str, tuple[str, ...]] = {}
    if split:
        with open_store(store_spec) as store:
            for name, b in split.items():
                bounds[name] = block_bounds([info.path for info in store.list(scope=name, history=True)], b)
    rest = {name: n for name, n in sizes.items() if name not in bounds}
    total = sum(pair_cost(n) for n in sizes.values())
    rest_cost = sum(pair_cost(n) for n in rest.values())
    share = total / max(count, 1)
    rest_count = count if not bounds or not share else max(1, min(count, -(-rest_cost // max(int(share), 1))))
    rest_count = max(rest_count, -(-sum(rest.values()) // MAX_PARTITION_ENTRIES))  # a worker's memory
    specs = [
        PartitionSpec(
            0, _digest([[s, sizes[s]] for s in group])[:20], spec, action, params, group,
            weight=sum(sizes[s] for s in group),
        )
        for group in plan_partitions(rest, rest_count)
    ]  # fmt: skip
    for name, edges in sorted(bounds.items()):
        tiles = tile_pairs(len(edges) + 1)
        for k, (i, j) in enumerate(tiles):
            key = _digest([[name, sizes[name]], list(edges), i, j])[:20]
            weight = sizes[name] * (k + 1) // len(tiles) - sizes[name] * k // len(tiles)
            specs.append(PartitionSpec(0, key, spec, action, params, (name,), TileSpec(edges, i, j), weight))
    specs = [replace(s, index=k) for k, s in enumerate(specs)]
    return specs, {name: len(edges) + 1 for name, edges in bounds.items()}


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
    progress: Progress | None,
    entries: int,
    description: str,
) -> dict[str, Any]:
    """Each partition's result, from its checkpoint or computed (and checkpointed as it arrives)."""
    if progress is not None:
        progress.start(description, entries)
    done: dict[int, PartitionResult] = {}
    for spec in specs:
        found = read_checkpoint(run_dir, spec.key)
        if found is not None:
            done[spec.index] = found
            _advance(progress, spec)
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
            _advance(progress, todo[k])
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


def _advance(progress: Progress | None, spec: PartitionSpec) -> None:
    if progress is not None:
        progress.advance(spec.weight)
