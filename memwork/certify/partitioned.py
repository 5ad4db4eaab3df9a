"""The certificate's row pass over key ranges of users, run by an executor (``memwork verify
--executor local:N|dask://HOST:PORT [--workers N]``).

The row pass is per user: both sides' checksums grouped by user, then every user whose checksums
disagree bisected by ``md5(key)`` prefixes down to single rows (:mod:`memwork.certify.rows`). Users
are independent, so the pass splits by user into contiguous ranges of ``md5(user_id)``
(:class:`~memwork.certify.sides.HashRange`: hex text, ordered alike by MariaDB, SQLite, PostgreSQL
and Python, where a range of the ids themselves would depend on each engine's collation). The
coordinator cuts the hash space where the active rows per user (:meth:`SourceSide.user_counts`, read
from the ``(user_id, status)`` index) add up to near-equal shares; a user is never split, and a user
only the destination has falls in whichever range its hash does -- the ranges tile the whole space.

A :class:`RangeSpec` carries the URLs, the table names, the range's bounds, the bisection leaf and the
run's high-water mark -- never rows. :func:`run_range` (top level: executors pickle it) opens its own
connections and returns its users' checksums and each bad key with its user (:class:`ScannedRows`).

What runs once, at the coordinator: the high-water mark (read before any range starts and passed to
each, so every range is taken under the one boundary), the plan, the classification of the merged
bad keys (a row moved to another user is missing in one range and extra in another: only the merge
sees both halves), the after-boundary split, the unkeyed count, and every gate after the rows -- the
vector checks, the index, retrieval and preservation sampling (samples drawn over the whole table,
which no range sees). The merged certificate is the single-process one: the same counts, per-user
results, named bad rows with their fields and failures table rows (the users' checksums and
bisections are the same queries; only the first, per-user query is split). ``round_trips`` counts
each range's queries, so it is larger; the ranges and executor are in ``Certificate.execution``.

A verification writes nothing until its end, so it keeps no checkpoint: on Dask the scheduler re-runs
a dead worker's range on another (a read, so the re-run is exact); a local worker that dies fails the
run with one line (exit 1) -- run it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memwork.certify.canonical import key_md5
from memwork.certify.rows import ScannedRows, bisect_users, user_checksums
from memwork.certify.sides import Bucket, DestSide, HashRange, SourceSide
from memwork.errors import MemworkError, RangesLost
from memwork.executor import Executor, ExecutorSpec, crash_point, open_executor


def plan_user_ranges(counts: Mapping[str, int], parts: int) -> list[HashRange]:
    """At most ``parts`` contiguous ranges of ``md5(user)`` tiling the hash space, cut after the
    user (in hash order) whose rows reach each ``k/parts`` share of the total; every range holds at
    least one of ``counts``' users (none: one range of everything). Deterministic."""
    hashed = sorted((key_md5(user), n) for user, n in counts.items())
    total = sum(n for _, n in hashed)
    bounds: list[str] = []
    running = 0
    for digest, n in hashed[:-1]:  # never after the last user: the last range holds one
        running += n
        if len(bounds) < parts - 1 and running * parts >= (len(bounds) + 1) * total:
            bounds.append(digest)
    lowers: list[str | None] = [None, *bounds]
    uppers: list[str | None] = [*bounds, None]
    return [HashRange(lo, hi) for lo, hi in zip(lowers, uppers, strict=True)]


@dataclass(frozen=True)
class RangeSpec:
    """One key range of a verification: everything a worker needs (picklable, no rows)."""

    index: int
    users: HashRange
    # URLs may hold passwords: never in repr() (a worker's traceback, a scheduler's log)
    source_url: str = field(repr=False)
    source_table: str
    checksums: str  #: ``sql`` or ``python``, as the coordinator resolved it for this server
    dest_url: str = field(repr=False)  #: a server URL (``pg://embedded`` resolved by the coordinator)
    table: str
    owner: str
    leaf: int
    high_water_mark: str | None  #: the run's boundary, read once by the coordinator


@dataclass
class RangeResult:
    """One range's users' checksums and bad keys, under the boundary it was given."""

    index: int
    users: HashRange
    high_water_mark: str | None
    scanned: ScannedRows


def run_range(spec: RangeSpec) -> RangeResult:
    """One key range on this worker's own connections: its users' checksums on both sides, then
    each disagreeing user bisected to its bad keys (top level: executors pickle it)."""
    from memwork.db import pg_connect

    source = SourceSide(spec.source_url, spec.source_table, spec.checksums)
    with pg_connect(spec.dest_url, autocommit=True) as conn:
        dest = DestSide(conn, spec.table, spec.owner)
        found = user_checksums(source, dest, Bucket(users=spec.users))
        crash_point(spec.index)  # TEST ONLY: a worker dies mid-range (after its checksums)
        bisect_users(source, dest, found, leaf=spec.leaf)
    return RangeResult(spec.index, spec.users, spec.high_water_mark, found)


def scan_partitioned(
    side: SourceSide,
    dest_url: str,
    *,
    table: str,
    owner: str,
    leaf: int,
    high_water_mark: str | None,
    executor: str | ExecutorSpec | Executor | None = None,
    workers: int | None = None,
) -> tuple[ScannedRows, dict[str, Any]]:
    """The per-user pass of :func:`~memwork.certify.rows.compare_rows` over key ranges of users run
    by ``executor`` (default ``local:N``; an open :class:`Executor` is left open): the merged
    findings, and how they were computed (executor, each range's bounds and counts)."""
    from memwork.db import embedded

    url = embedded.ensure(dest_url, create=False)  # workers get the server's URL
    assert url.libpq is not None
    if executor is None:
        executor = f"local:{workers}" if workers else "local"
    runner = open_executor(executor) if isinstance(executor, str | ExecutorSpec) else executor
    try:
        ranges = plan_user_ranges(side.user_counts(), workers or runner.workers)
        specs = [
            RangeSpec(
                index=i,
                users=users,
                source_url=side.url,
                source_table=side.table,
                checksums=side.checksums_in,
                dest_url=url.libpq,
                table=table,
                owner=owner,
                leaf=leaf,
                high_water_mark=high_water_mark,
            )
            for i, users in enumerate(ranges)
        ]
        results = _run_ranges(runner, specs)
    finally:
        if runner is not executor:
            runner.close()
    ordered = [results[i] for i in range(len(specs))]
    if any(r.high_water_mark != high_water_mark for r in ordered):  # pragma: no cover - a stale spec
        raise RuntimeError("a key range ran under another high-water mark")
    execution = {"executor": str(runner.spec), "ranges": [_described(r) for r in ordered]}
    return ScannedRows.merged([r.scanned for r in ordered]), execution


def _run_ranges(executor: Executor, specs: list[RangeSpec]) -> dict[int, RangeResult]:
    """Every range's result; a worker that died (killed, out of memory) is one clear error."""
    results: dict[int, RangeResult] = {}
    try:
        for index, result in executor.map_unordered(run_range, specs):
            results[index] = result
    except MemworkError:
        raise
    except Exception as exc:
        if type(exc).__name__ not in ("BrokenProcessPool", "KilledWorker"):
            raise
        raise RangesLost(len(results), len(specs), exc) from exc
    return results


def _described(result: RangeResult) -> dict[str, Any]:
    found = result.scanned
    return {
        "index": result.index,
        **result.users.to_json(),
        "users": len(found.source.keys() | found.dest.keys()),
        "source_rows": sum(c[0] for c in found.source.values()),
        "dest_rows": sum(c[0] for c in found.dest.values()),
        "bad_keys": len(found.missing) + len(found.extra) + len(found.changed),
        "buckets_compared": found.buckets_compared,
        "round_trips": found.round_trips,
    }
