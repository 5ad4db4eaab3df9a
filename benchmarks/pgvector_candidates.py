"""The approximate candidate stage (``--candidates hnsw``) on the embedded PostgreSQL store (issue 20).

    .venv/bin/python benchmarks/pgvector_candidates.py [--sizes 100000,1000000] [--exact-upto-n 100000]

For each size N: the store of ``incremental_defrag.py`` (384-d unit vectors, ~6 % planted near
duplicates, one scope of 30 % of the entries and the rest in scopes of 1,000) is generated and loaded
into a fresh database of the embedded PostgreSQL (HNSW index dropped during the load and built once
after it, ``maintenance_work_mem`` 3 GB, then ANALYZE); then, in a fresh process of its own, the
HNSW path (``find_duplicates_hnsw``) runs: wall and CPU time, the process's peak RSS
(``ru_maxrss``), pairs found and its ``recall_estimate`` (with its sample). At N <= ``--exact-upto-n``
the exact path (``run_action(store, "find_duplicates")``, which loads the store whole) runs too, in
its own process: its time and RSS, and the HNSW path's true recall against its pairs. The machine's
load (``uptime``) is printed beside the figures.

``--max-ids M`` (bounded memory run): instead of the full HNSW path, the HNSW path over the big scope
(``s0``, 30 % of N) alone is stopped after the batch that reaches M query ids -- the same budget at
every size -- and no pairs, recall or exact comparison are produced (the row says ``"partial": true``).
It runs the library's own ``find_duplicates_hnsw(store, scope="s0")``; the stop comes from the
``progress`` object it is given (which the library advances once per batch of ids), so no library code
is changed for it. Printed per size: ids and batches processed, wall and CPU seconds, peak RSS
(``ru_maxrss``), VmRSS (``/proc/self/status``) at the first and last batch and sampled every second by a
thread (min / max / count), and the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_pg


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _load_avg() -> str:
    return os.popen("uptime").read().strip().split("load average:")[-1].strip()


def load(url: str, n: int) -> dict[str, Any]:
    """Generate N entries and load them by binary COPY (the store's own upsert runs ~1,000 rows/s on
    this box); build the HNSW index once, after the rows, then ANALYZE."""
    import psycopg
    from incremental_defrag import make_entries
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Jsonb
    from sqlalchemy import text

    from memwork.stores import open_store

    began = time.perf_counter()
    entries = make_entries(n)
    generated = time.perf_counter() - began
    store = open_store(url, create=True)
    table = store.table  # type: ignore[attr-defined]
    index = next(i for i in table.indexes if str(i.name).endswith("_embedding"))
    with store.engine.begin() as conn:  # type: ignore[attr-defined]
        index.drop(conn, checkfirst=True)
    began = time.perf_counter()
    columns = "scope, file_path, content, title, embedding, metadata, size, hits, updated_at, created_at"
    types = [
        "varchar",
        "varchar",
        "text",
        "varchar",
        "vector",
        "jsonb",
        "int4",
        "int4",
        "timestamp",
        "timestamp",
    ]
    with psycopg.connect(
        store.engine.url.render_as_string(hide_password=False).replace("+psycopg", "")
    ) as raw:  # type: ignore[attr-defined]
        register_vector(raw)
        with (
            raw.cursor() as cur,
            cur.copy(f"COPY {table.name} ({columns}) FROM STDIN WITH (FORMAT BINARY)") as copy,
        ):
            copy.set_types(types)
            for e in entries:
                stamps = (e.updated_at.replace(tzinfo=None), e.created_at.replace(tzinfo=None))
                copy.write_row(
                    (
                        e.scope,
                        e.path,
                        e.content,
                        e.title,
                        e.embedding,
                        Jsonb(e.metadata),
                        e.size,
                        e.hits,
                        *stamps,
                    )
                )
    loaded = time.perf_counter() - began
    del entries
    began = time.perf_counter()
    with store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("SET LOCAL maintenance_work_mem = '3GB'"))
        index.create(conn)
    built = time.perf_counter() - began
    with store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("ANALYZE " + table.name))
    return {"generate_s": round(generated, 1), "copy_s": round(loaded, 1), "hnsw_build_s": round(built, 1)}


def run_hnsw(url: str, k: int, ef_search: int | None, sample: int, pairs_file: str) -> dict[str, Any]:
    """The HNSW path in this (fresh) process: time, peak RSS, pairs, recall estimate."""
    from memwork.defrag.approximate import find_duplicates_hnsw, settings
    from memwork.stores import open_store

    store = open_store(url)
    base = _peak_mb()
    began, cpu = time.perf_counter(), time.process_time()
    run = find_duplicates_hnsw(store, 0.85, options=settings(k, ef_search, sample))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    Path(pairs_file).write_text(json.dumps([[p.scope, p.path_a, p.path_b] for p in run.pairs]))
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": _peak_mb(),
        "rss_after_open_mb": base,
        "pairs": len(run.pairs),
        "recall": run.recall.to_dict(),
        "settings": run.summary,
    }


class _Stop(Exception):
    """Raised by :class:`_Bounded` to end a bounded run after its budget of ids."""


def _vmrss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class _Bounded:
    """A ``Progress`` for ``find_duplicates_hnsw``: counts ids per batch (the HNSW scope advances once
    per batch of ids), records VmRSS at every batch, and stops the run once ``max_ids`` ids are done."""

    def __init__(self, max_ids: int) -> None:
        self.max_ids, self.ids, self.batches, self.rss_at_batch = max_ids, 0, 0, []  # type: list[float]
        self.first_batch_s: float | None = None
        self.began = time.perf_counter()

    def start(self, description: str, total: int | None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        if n == 0:  # the scope's end (its rows without a vector: none here), not a batch
            return
        self.ids += n
        self.batches += 1
        self.rss_at_batch.append(_vmrss_mb())
        if self.first_batch_s is None:
            self.first_batch_s = round(time.perf_counter() - self.began, 1)
        if self.ids >= self.max_ids:
            raise _Stop


def run_bounded(url: str, k: int, ef_search: int | None, max_ids: int) -> dict[str, Any]:
    """The HNSW path over the big scope ``s0`` only, stopped after ``max_ids`` ids: memory and time
    per id on this path, never pairs (a partial run)."""
    import threading

    from memwork.defrag.approximate import find_duplicates_hnsw, settings
    from memwork.stores import open_store

    store = open_store(url)
    base, base_vm = _peak_mb(), _vmrss_mb()
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            samples.append(_vmrss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    bounded = _Bounded(max_ids)
    sampler.start()
    began, cpu = time.perf_counter(), time.process_time()
    try:
        find_duplicates_hnsw(store, 0.85, scope="s0", options=settings(k, ef_search, 1), progress=bounded)
        stopped = False  # the whole scope fitted in the budget
    except _Stop:
        stopped = True
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    done.set()
    sampler.join()
    return {
        "partial": True,
        "stopped_at_budget": stopped,
        "max_ids": max_ids,
        "ids": bounded.ids,
        "batches": bounded.batches,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "s_to_first_batch": bounded.first_batch_s,
        "ms_wall_per_id": round(1000 * wall / max(1, bounded.ids), 1),
        "peak_rss_mb": _peak_mb(),
        "rss_after_open_mb": base,
        "vmrss_after_open_mb": base_vm,
        "vmrss_first_batch_mb": bounded.rss_at_batch[0] if bounded.rss_at_batch else None,
        "vmrss_last_batch_mb": bounded.rss_at_batch[-1] if bounded.rss_at_batch else None,
        "vmrss_batches_min_max_mb": [min(bounded.rss_at_batch), max(bounded.rss_at_batch)]
        if bounded.rss_at_batch
        else None,
        "vmrss_1s_samples": {
            "n": len(samples),
            "min": min(samples, default=None),
            "max": max(samples, default=None),
        },
    }


def run_exact(url: str, pairs_file: str) -> dict[str, Any]:
    """The exact path (the store loaded whole) in this fresh process."""
    from memwork.defrag import run_action
    from memwork.stores import open_store

    store = open_store(url)
    began, cpu = time.perf_counter(), time.process_time()
    result = run_action(store, "find_duplicates")
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    Path(pairs_file).write_text(json.dumps([[p.scope, p.path_a, p.path_b] for p in result.pairs]))
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": _peak_mb(),
        "pairs": len(result.pairs),
    }


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(
    n: int, exact_upto: int, k: int, ef_search: int | None, sample: int, max_ids: int = 0
) -> dict[str, Any]:
    with scratch_pg(None) as url:
        row: dict[str, Any] = {"n": n, "load_before": _load_avg()}
        row |= _child("load", url, str(n))
        if max_ids:
            row["load_at_search"] = _load_avg()
            row["bounded"] = _child("bounded", url, str(k), str(ef_search or 0), str(max_ids))
            row["load_after_search"] = _load_avg()
            return row
        hnsw_pairs, exact_pairs = f"/tmp/pgvc-hnsw-{n}.json", f"/tmp/pgvc-exact-{n}.json"
        row["load_at_search"] = _load_avg()
        row["hnsw"] = _child("hnsw", url, str(k), str(ef_search or 0), str(sample), hnsw_pairs)
        row["load_after_search"] = _load_avg()
        if n <= exact_upto:
            row["exact"] = _child("exact", url, exact_pairs)
            found = {tuple(p) for p in json.loads(Path(hnsw_pairs).read_text())}
            truth = {tuple(p) for p in json.loads(Path(exact_pairs).read_text())}
            row["true_recall"] = round(len(found & truth) / max(1, len(truth)), 4)
            row["not_exact_pairs"] = len(found - truth)
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--exact-upto-n", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--ef-search", type=int, default=None)
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument(
        "--max-ids",
        type=int,
        default=0,
        help="bounded memory run: stop the HNSW path over the big scope after this many ids (partial)",
    )
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        kind, url, *rest = args.child
        if kind == "load":
            out = load(url, int(rest[0]))
        elif kind == "bounded":
            out = run_bounded(url, int(rest[0]), int(rest[1]) or None, int(rest[2]))
        elif kind == "hnsw":
            out = run_hnsw(url, int(rest[0]), int(rest[1]) or None, int(rest[2]), rest[3])
        else:
            out = run_exact(url, rest[0])
        print(json.dumps(out))
        return
    given = os.environ.get("MEMWORK_PGDATA")
    for size in (int(s) for s in args.sizes.split(",")):
        print(
            json.dumps(measure(size, args.exact_upto_n, args.k, args.ef_search, args.sample, args.max_ids)),
            flush=True,
        )
        if given is None:  # scratch_pg set it: the next size gets a server of its own, stopped after it
            os.environ.pop("MEMWORK_PGDATA", None)


if __name__ == "__main__":
    main()
