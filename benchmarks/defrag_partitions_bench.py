"""Defrag as scope partitions: the single-process run against ``--executor local:N`` and a Dask cluster.

Seeds a SQLite store of SCOPES scopes of about PER_SCOPE entries each (384-dim hash embeddings,
planted near copies), then times ``find_duplicates`` once in one process (``run_action``, the
reference), then as scope partitions on ``local:N`` and, with ``--dask``, on a ``LocalCluster`` of N
worker processes. Every partitioned result must equal the reference pair for pair (exit 1 if not);
each time is printed with its ratio to the reference measured in the same run, and the machine's load.

    .venv/bin/python benchmarks/defrag_partitions_bench.py [--scopes 40 --per-scope 800 --workers 2 --dask]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path


def seed(spec: str, scopes: int, per_scope: int, rng: random.Random) -> int:
    from memwork.embed import HashEmbedder
    from memwork.entry import Entry
    from memwork.stores import open_store

    embedder = HashEmbedder(384)
    words = [f"w{k}" for k in range(3000)]
    entries = []
    for s in range(scopes):
        size = max(2, int(per_scope * rng.uniform(0.3, 1.7)))  # uneven scopes, as real users are
        texts: list[str] = []
        for _ in range(size):
            if texts and rng.random() < 0.1:  # a near copy of an earlier entry
                base = rng.choice(texts).split()
                base[rng.randrange(len(base))] = rng.choice(words)
                texts.append(" ".join(base))
            else:
                texts.append(" ".join(rng.choice(words) for _ in range(12)))
        vectors = embedder.embed(texts)
        entries += [
            Entry(path=f"n/{k}.md", scope=f"user-{s:03d}", content=t, embedding=v)
            for k, (t, v) in enumerate(zip(texts, vectors, strict=True))
        ]
    with open_store(spec, create=True) as store:
        store.put_many(entries)
    return len(entries)


def warm(_: int) -> int:
    """A worker's start: the interpreter and memwork's imports (timed apart from the work)."""
    import memwork.defrag.partitioned  # noqa: F401

    return os.getpid()


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scopes", type=int, default=40)
    parser.add_argument("--per-scope", type=int, default=800)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dask", action="store_true", help="also a distributed.LocalCluster of --workers")
    args = parser.parse_args()

    from memwork.defrag import run_action
    from memwork.defrag.partitioned import run_partitioned
    from memwork.executor import open_executor
    from memwork.stores import open_store

    folder = Path(tempfile.mkdtemp(prefix="mw-partitions-"))
    os.environ.setdefault("MEMWORK_HOME", str(folder / "home"))
    spec = f"sqlite:///{folder / 'store.db'}"
    entries = seed(spec, args.scopes, args.per_scope, random.Random(20))
    print(
        f"{entries} entries in {args.scopes} scopes; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )

    with open_store(spec) as store:
        reference, base = timed(lambda: run_action(store, "find_duplicates"))
    print(f"{'one process (reference)':32} {base:8.2f} s   1.00x   {len(reference.pairs)} pairs")
    runs = [(f"local:{args.workers}", lambda: open_executor(f"local:{args.workers}"), None)]
    if args.dask:
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        address = "dask://" + cluster.scheduler_address.split("://", 1)[1]
        runs.append((f"dask LocalCluster x{args.workers}", lambda: open_executor(address), cluster))
    ok = True
    for name, opener, cluster in runs:
        executor, started = timed(opener)
        try:  # a pool or cluster starts once, not per run: its start is timed apart
            _, warmed = timed(lambda: list(executor.map_unordered(warm, range(2 * args.workers))))  # noqa: B023
            print(f"{name:32} start {started + warmed:6.2f} s (workers up, memwork imported)")
            run, seconds = timed(lambda: run_partitioned(spec, "find_duplicates", executor=executor))  # noqa: B023
        finally:
            executor.close()
            if cluster is not None:
                cluster.close()
        same = run.result.to_dict() == reference.to_dict()
        ok &= same
        print(
            f"{name:32} {seconds:8.2f} s   {base / seconds:.2f}x   {run.partitions} partitions, "
            f"{'identical' if same else 'DIFFERENT'}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
