"""pgvector HNSW index build: time and size against the number of rows, for docs/scaling.md (issue 20).

    .venv/bin/python benchmarks/hnsw_build.py                          # 25,000 / 50,000 / 100,000 rows
    .venv/bin/python benchmarks/hnsw_build.py --sizes 200000 --dims 384 --json

For each size, in a fresh table of the embedded PostgreSQL (pgvector from pip): the rows written by a
binary COPY (the reference: the cost of merely loading them), then ``CREATE INDEX ... USING hnsw
(embedding vector_cosine_ops)`` with pgvector's defaults (m = 16, ef_construction = 64) and the
migration's own setting of ``maintenance_work_mem`` (``--maintenance-work-mem``, 1 GB here), timed;
the table's and the index's size on disk. The build's cost per row and its ratio to the COPY are what
scale: docs/scaling.md extrapolates a 50M-row index from them. Vectors are unit length, clustered
(topics plus noise), as in ``resolve_bench.py``. The machine's load is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_pg


def clustered_vectors(rows: int, dims: int, seed: int = 0) -> np.ndarray:
    """Topics plus noise, unit length: neighbours as real embeddings have them, no exact ties."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((max(1, rows // 100), dims)).astype(np.float32)
    vectors = topics[rng.integers(0, len(topics), rows)] + 0.5 * rng.standard_normal((rows, dims)).astype(
        np.float32
    )
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def measure(url: str, rows: int, dims: int, maintenance_work_mem: str) -> dict[str, float | int | str]:
    import psycopg
    from pgvector.psycopg import register_vector

    vectors = clustered_vectors(rows, dims)
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        table = f"hnsw_{rows}"
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding vector({dims}))")
        started = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy,
        ):
            copy.set_types(["int8", "vector"])
            for i in range(rows):
                copy.write_row((i, vectors[i]))
        copy_s = time.perf_counter() - started
        conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        started = time.perf_counter()
        conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)")
        build_s = time.perf_counter() - started
        table_bytes, index_bytes = conn.execute(
            f"SELECT pg_table_size('{table}'), pg_relation_size('{table}_hnsw')"
        ).fetchone()  # type: ignore[misc]
        conn.execute(f"DROP TABLE {table}")
    return {
        "rows": rows,
        "dims": dims,
        "copy_s": round(copy_s, 2),
        "build_s": round(build_s, 2),
        "build_us_per_row": round(build_s / rows * 1e6, 1),
        "build_vs_copy": round(build_s / copy_s, 1),
        "table_mb": round(table_bytes / 2**20, 1),
        "index_mb": round(index_bytes / 2**20, 1),
        "index_bytes_per_row": round(index_bytes / rows),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25000,50000,100000")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--maintenance-work-mem", default="1GB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    with scratch_pg(None) as url:
        for size in (int(s) for s in args.sizes.split(",") if s):
            results.append(measure(url, size, args.dims, args.maintenance_work_mem))
            if not args.json:
                r = results[-1]
                print(
                    f"{r['rows']:>9,} rows x {r['dims']}: COPY {r['copy_s']} s, HNSW build {r['build_s']} s "
                    f"({r['build_us_per_row']} us/row, {r['build_vs_copy']}x the COPY), "
                    f"table {r['table_mb']} MB, "
                    f"index {r['index_mb']} MB ({r['index_bytes_per_row']} B/row), load {r['load']}",
                    flush=True,
                )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
