"""Full ``find-duplicates`` and ``find-related`` of 1,000,000 entries read from the embedded
PostgreSQL store, as checkpointed partitions with the big scope split into tiles (issue 20).

Targets: <= 20 min each at 1M, peak RSS <= 6 GB. The store is ``incremental_defrag.make_entries``
(384-d float32 unit vectors, ~6 % planted near duplicates, one scope of 30 % of the entries --
300,000 at 1M -- and the rest in scopes of 1,000), loaded into ``pg://embedded/defrag_tiles_N``
(``$MEMWORK_HOME`` picks the workspace; a store already holding N entries is reused). The load is a
binary COPY into the store's table with its HNSW index dropped (defrag never reads it, and its build
alone would take longer than the runs; the store's own upsert managed ~900 rows/s here).

Each run is a fresh subprocess: ``run_partitioned(spec, action, executor=--executor)`` with
``MEMWORK_THREADS=1`` (one BLAS thread per worker; two workers on two cores), its wall and CPU
time, its own peak RSS and its workers' largest, the partitions and split scopes, and a digest of
the whole result. Up to ``--reference-upto`` entries the single-process run (``run_action`` from the
same store) runs too and the digests must match (exit 1 if not). ``uptime`` is printed beside each
figure: the machine is shared.

    MEMWORK_HOME=/tmp/bench .venv/bin/python benchmarks/defrag_1m.py [--sizes 200000,1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ACTIONS = {"find_duplicates": {}, "find_related": {"min_similarity": 0.60, "max_similarity": 0.85}}
TARGET_SECONDS = 20 * 60
TARGET_RSS_MB = 6 * 1024
LOAD_CHUNK = 50_000  # rows per COPY


def _spec(n: int) -> str:
    return f"pg://embedded/defrag_tiles_{n}"


def _load_avg() -> str:
    return os.popen("uptime").read().strip().split("load average:")[-1].strip()


def _peak_mb(who: int) -> int:
    return round(resource.getrusage(who).ru_maxrss / 1024)


def load(n: int) -> dict[str, Any]:
    """Build the entries and write them to the store (skipped when it already holds ``n``)."""
    from incremental_defrag import make_entries

    from memwork.errors import MissingStore
    from memwork.stores import open_store

    try:  # a reading open: opening with create=True would rebuild the HNSW index the load dropped
        with open_store(_spec(n), create=False) as store:
            if store.count() == n:
                return {"entries": n, "reused": True}
    except MissingStore:
        pass
    with open_store(_spec(n), create=True) as store:
        have = store.count()
        if have:
            raise SystemExit(f"{_spec(n)} holds {have} entries, not {n}: drop the database first")
        began = time.perf_counter()
        entries = make_entries(n)
        build = time.perf_counter() - began
        began = time.perf_counter()
        copy_entries(store, entries)
        wrote = time.perf_counter() - began
    return {
        "entries": n,
        "reused": False,
        "build_s": round(build, 1),
        "load_s": round(wrote, 1),
        "rows_per_s": round(n / wrote),
        "load_avg": _load_avg(),
    }


def copy_entries(store: Any, entries: list[Any]) -> None:
    """The entries into the store's table by one binary COPY per chunk (the store's upsert does
    ~900 rows/s here), with the HNSW index dropped first (defrag never reads it)."""
    from memwork.migrate.writer import _pack_vectors, register_packed_vectors

    table = store.table
    index = next(i for i in table.indexes if str(i.name).endswith("_embedding"))
    with store.engine.begin() as conn:
        index.drop(conn, checkfirst=True)
    raw = store.engine.raw_connection()
    try:
        pg = raw.driver_connection
        register_packed_vectors(pg)
        columns = "scope, file_path, content, title, embedding, metadata, size, hits, updated_at, created_at"
        types = [
            "varchar",
            "varchar",
            "text",
            "varchar",
            pg.execute("SELECT 'vector'::regtype::oid").fetchone()[0],
            "jsonb",
            "int4",
            "int4",
            "timestamp",
            "timestamp",
        ]
        for a in range(0, len(entries), LOAD_CHUNK):
            chunk = entries[a : a + LOAD_CHUNK]
            vectors = _pack_vectors(np.stack([e.embedding for e in chunk]))
            with (
                pg.cursor() as cur,
                cur.copy(f"COPY {table.name} ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(types)
                for e, vector in zip(chunk, vectors, strict=True):
                    stamps = (e.updated_at.replace(tzinfo=None), e.created_at.replace(tzinfo=None))
                    copy.write_row((e.scope, e.path, e.content, e.title or "", vector, json.dumps(e.metadata),
                                    len(e.content.encode()), e.hits, *stamps))  # fmt: skip
            pg.commit()
    finally:
        raw.close()


def digest(result: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(result).encode()).hexdigest()[:16]


def run(n: int, action: str, executor: str) -> dict[str, Any]:
    """One run in this (fresh) process; ``executor`` "none" is the single-process reference."""
    from memwork.defrag import run_action
    from memwork.defrag.partitioned import run_partitioned
    from memwork.stores import open_store

    before = _load_avg()
    began, cpu = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"entries": n, "action": action, "executor": executor}
    if executor == "none":
        with open_store(_spec(n)) as store:
            result = run_action(store, action, **ACTIONS[action]).to_dict()
    else:
        done = run_partitioned(
            _spec(n), action, executor=executor, checkpoint=f"/tmp/defrag_1m_ck_{n}", **ACTIONS[action]
        )
        result = done.result.to_dict()
        out |= {"partitions": done.partitions, "split": done.split, "computed": done.computed}
    out["wall_s"] = round(time.perf_counter() - began, 1)
    out["cpu_s"] = round(time.process_time() - cpu, 1)
    out["pairs"] = len(result["pairs"])
    out["digest"] = digest(result)
    out["peak_rss_mb"] = _peak_mb(resource.RUSAGE_SELF)
    out["worker_peak_rss_mb"] = _peak_mb(resource.RUSAGE_CHILDREN)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["workers_cpu_s"] = round(workers.ru_utime + workers.ru_stime, 1)
    out["load_avg"] = f"{before} -> {_load_avg()}"
    return out


def _child(*args: str) -> dict[str, Any]:
    env = os.environ | {"MEMWORK_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200000,1000000")
    parser.add_argument("--executor", default="local:2")
    parser.add_argument("--reference-upto", type=int, default=200_000)
    parser.add_argument("--actions", default=",".join(ACTIONS))
    parser.add_argument("--load", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load:
        print(json.dumps(load(args.load)))
        return 0
    if args.run:
        print(json.dumps(run(int(args.run[0]), args.run[1], args.run[2])))
        return 0
    from memwork.stores import open_store

    failed = False
    for n in (int(s) for s in args.sizes.split(",")):
        loaded = _child("--load", str(n))
        print(f"N={n:,} load: {json.dumps(loaded)}", flush=True)
        with open_store(_spec(n)) as store:  # keeps the embedded server up between the runs
            store.count()
            for action in args.actions.split(","):
                got = _child("--run", str(n), action, args.executor)
                line = (
                    f"N={n:,} {action} on {args.executor}: {got['wall_s']:.1f} s (CPU: coordinator "
                    f"{got['cpu_s']:.1f} s, workers {got['workers_cpu_s']:.1f} s), {got['pairs']:,} pairs, "
                    f"{got['partitions']} partitions, "
                    f"split {got['split']}; peak RSS coordinator {got['peak_rss_mb']:,} MB, largest "
                    f"worker {got['worker_peak_rss_mb']:,} MB; load {got['load_avg']}"
                )
                ok = (
                    got["wall_s"] <= TARGET_SECONDS
                    and max(got["peak_rss_mb"], got["worker_peak_rss_mb"]) <= TARGET_RSS_MB
                )
                line += f"\n    targets (<= 20 min, <= 6 GB a process): {'met' if ok else 'MISSED'}"
                if n <= args.reference_upto:
                    ref = _child("--run", str(n), action, "none")
                    same = ref["digest"] == got["digest"]
                    failed |= not same
                    line += (
                        f"\n    one process: {ref['wall_s']:.1f} s (CPU {ref['cpu_s']:.1f} s), "
                        f"{ref['pairs']:,} pairs, peak RSS {ref['peak_rss_mb']:,} MB; "
                        f"identical result: {same}; load {ref['load_avg']}"
                    )
                print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
