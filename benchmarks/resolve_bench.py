"""resolve() latency and recall: 100,000 rows of 1,000 users at 384 dims, HNSW index, embedded PostgreSQL.

Targets (strategy ``auto``, the default): p50 <= 5 ms, p95 <= 15 ms, recall@10 >= 0.95 against exact
search. Also prints the other strategies so the choice is visible: ``exact`` (user_id index + exact
sort), ``hnsw`` (the adapter's HNSW query form; at ~100 rows per user PostgreSQL's planner itself
prefers the user_id btree for it), and the HNSW index *forced* with pgvector 0.8's iterative scan. Latency is
measured through the real adapter (pool, SQL, result mapping). Exits 1 on a miss.

    python benchmarks/resolve_bench.py [--rows 100000] [--users 1000] [--queries 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_pg


def make_vectors(rows: int, users: int, dims: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-user clusters (topics) plus noise, unit length: realistic neighbours, no exact ties."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((64, dims)).astype(np.float32)
    user_of = np.arange(rows) % users
    vectors = topics[rng.integers(0, 64, rows)] + 0.6 * rng.standard_normal((rows, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return user_of, vectors.astype(np.float32)


def load(pg_url: str, user_of: np.ndarray, vectors: np.ndarray) -> float:
    """Binary COPY the rows, then build the HNSW index; returns the index build seconds."""
    import psycopg
    from pgvector.psycopg import register_vector

    from memwork.pgvector.schema import ensure_schema

    ensure_schema(pg_url, "memory_embeddings", vectors.shape[1])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        register_vector(conn)
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY memory_embeddings (user_id, content, embedding, source_memory_id) "
                "FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["text", "text", "vector", "text"])
            for i, (user, vector) in enumerate(zip(user_of, vectors, strict=True)):
                copy.write_row((f"user-{user:05d}", f"memory {i}", vector, f"m-{i}"))
        conn.execute("SET maintenance_work_mem = '512MB'")
        started = time.perf_counter()
        ensure_schema(pg_url, "memory_embeddings", vectors.shape[1], create_vector_index=True)
        built = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE memory_embeddings")
    return built


def exact_top(user_of: np.ndarray, vectors: np.ndarray, user: int, query: np.ndarray, k: int) -> set[str]:
    idx = np.flatnonzero(user_of == user)
    distances = 1.0 - vectors[idx] @ query
    return {f"m-{i}" for i in idx[np.argsort(distances)[:k]]}


def measure(backend, queries, user_of, vectors, k: int) -> dict[str, float]:
    latencies, recalls = [], []
    for user, query in queries:  # warm the pool and the buffer cache: one unmeasured pass
        backend.resolve({"userId": f"user-{user:05d}", "embedding": query, "limit": k})
    for user, query in queries:
        started = time.perf_counter()
        result = backend.resolve({"userId": f"user-{user:05d}", "embedding": query, "limit": k})
        latencies.append((time.perf_counter() - started) * 1000)
        got = {m["id"] for m in result["semanticMemories"]}
        truth = exact_top(user_of, vectors, user, np.asarray(query, dtype=np.float32), k)
        recalls.append(len(got & truth) / len(truth))
    return latency_summary(latencies, recalls)


def measure_forced_hnsw(pg_url: str, queries, user_of, vectors, k: int, ef: int) -> dict[str, float]:
    """The HNSW index forced (``user_id || ''`` hides the btree from the planner) with pgvector 0.8's
    iterative scan: what a global graph + per-user filter really costs, for comparison only."""
    import psycopg
    from pgvector.psycopg import register_vector

    sql = (
        "WITH near AS MATERIALIZED (SELECT source_memory_id, embedding <=> %(q)s AS d "
        "FROM memory_embeddings WHERE (user_id || '') = %(u)s ORDER BY embedding <=> %(q)s LIMIT %(k)s) "
        "SELECT * FROM near ORDER BY d"
    )
    latencies, recalls = [], []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = {int(ef)}")
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, _params(queries[0], k)).fetchall())
        assert "hnsw" in plan, plan
        for measured in (False, True):
            for user, query in queries:
                started = time.perf_counter()
                got = {r[0] for r in conn.execute(sql, _params((user, query), k)).fetchall()}
                if measured:
                    latencies.append((time.perf_counter() - started) * 1000)
                    truth = exact_top(user_of, vectors, user, np.asarray(query, dtype=np.float32), k)
                    recalls.append(len(got & truth) / len(truth))
    return latency_summary(latencies, recalls)


def _print(label: str, r: dict[str, float], k: int) -> None:
    print(f"  {label:<22} p50 {r['p50']:6.2f} ms  p95 {r['p95']:6.2f} ms  recall@{k} {r['recall']:.3f}")


def _params(item, k: int) -> dict:
    user, query = item
    return {"q": np.asarray(query, dtype=np.float32), "u": f"user-{user:05d}", "k": k}


def latency_summary(latencies: list[float], recalls: list[float]) -> dict[str, float]:
    """p50/p95 latency in ms and mean recall@k of one strategy's measured queries."""
    return {
        "p50": float(np.percentile(latencies, 50)),
        "p95": float(np.percentile(latencies, 95)),
        "recall": float(np.mean(recalls)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--pgdata", default=None)
    parser.add_argument("--max-p50", type=float, default=5.0)
    parser.add_argument("--max-p95", type=float, default=15.0)
    parser.add_argument("--min-recall", type=float, default=0.95)
    args = parser.parse_args()

    from memwork.backends.pgvector import PgvectorBackend

    user_of, vectors = make_vectors(args.rows, args.users, args.dims)
    rng = np.random.default_rng(1)
    queries = []
    for _ in range(args.queries):
        i = int(rng.integers(0, args.rows))
        noisy = vectors[i] + 0.3 * rng.standard_normal(args.dims).astype(np.float32)
        queries.append((int(user_of[i]), (noisy / np.linalg.norm(noisy)).tolist()))
    with scratch_pg(args.pgdata) as pg_url:
        built = load(pg_url, user_of, vectors)
        print(f"{args.rows:,} rows, {args.users:,} users, {args.dims} dims; HNSW build {built:.1f} s")
        results = {}
        for label, kwargs in [
            ("auto (default)", {"search": "auto"}),
            ("exact", {"search": "exact"}),
            ("hnsw (planner) ef=100", {"search": "hnsw", "ef_search": 100}),
        ]:
            backend = PgvectorBackend(pg_url, **kwargs)
            try:
                results[label] = measure(backend, queries, user_of, vectors, args.k)
            finally:
                backend.close()
            _print(label, results[label], args.k)
        for ef in (40, 200):
            label = f"forced hnsw ef={ef}"
            results[label] = measure_forced_hnsw(pg_url, queries, user_of, vectors, args.k, ef)
            _print(label, results[label], args.k)
    main_result = results["auto (default)"]
    ok = (
        main_result["p50"] <= args.max_p50
        and main_result["p95"] <= args.max_p95
        and main_result["recall"] >= args.min_recall
    )
    print(
        f"targets: p50 <= {args.max_p50} ms, p95 <= {args.max_p95} ms, recall@{args.k} >= {args.min_recall}: "
        + ("PASS" if ok else "MISS")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
