"""Certificate cost: MariaDB -> embedded PostgreSQL + pgvector (hash embedder), clean and damaged.

Loads N active legacy rows (in chunks: the benchmark never holds them all), backfills them, then times

* the reference: one bare ``COUNT(*)`` plus one whole-table canonical checksum on each side (the least a
  checksum-based verification must read);
* a clean certificate (rows per user, vectors on a 200-row sample, index, retrieval on sampled users);
* a certificate after ``--damaged`` rows were damaged in the destination (missing, changed content,
  changed user, extra -- a quarter each), which must name every one of them.

Python memory is measured with tracemalloc around each certificate (flat: no side is read into Python).
Target (issue 17): 1,000,000 rows clean in <= 300 s, damaged in <= 360 s on this 2-core machine.

    python benchmarks/certify_bench.py [--rows 100000] [--users 1000] [--damaged 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_mysql, scratch_pg

CHUNK = 50_000


def load_source(mysql_url: str, rows: int, users: int) -> int:
    from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

    loaded = 0
    chunk = 0
    while loaded < rows:
        size = min(CHUNK, rows - loaded)
        per_user = max(1, size // users)
        items = generate_legacy_items(min(users, size), per_user, seed=1000 + chunk, active_only=True)[:size]
        loaded += load_legacy_rows(mysql_url, ITEMS, items)
        chunk += 1
    return loaded


def timed(fn, *args, **kw):
    tracemalloc.start()
    started = time.perf_counter()
    value = fn(*args, **kw)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return value, round(elapsed, 2), round(peak / 2**20, 1)


def reference(mysql_url: str, pg_url: str) -> tuple[float, bool]:
    """Bare counts and one whole-table canonical checksum per side; True when the sides agree."""
    import psycopg
    from sqlalchemy import text

    from memwork.certify.sides import DestSide, SourceSide
    from memwork.db.embedded import ensure

    started = time.perf_counter()
    source = SourceSide(mysql_url)
    with source.connect() as conn:
        conn.execute(text("SELECT COUNT(*) FROM h5_user_memory_items WHERE status = 'active'")).scalar()
    a = source.total()
    with psycopg.connect(ensure(pg_url, create=True).libpq, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM memory_embeddings").fetchone()
        b = DestSide(conn, "memory_embeddings").total()
    return time.perf_counter() - started, a == b


def damage(pg_url: str, n: int) -> set[tuple[str, str]]:
    """Damage ``n`` destination rows, a quarter per kind; returns the (key, kind) to be named."""
    import psycopg

    from memwork.db.embedded import ensure

    q = max(1, n // 4)
    with psycopg.connect(ensure(pg_url, create=True).libpq, autocommit=True) as conn:
        keys = [
            r[0]
            for r in conn.execute(
                "SELECT source_memory_id FROM memory_embeddings ORDER BY md5(source_memory_id) LIMIT %s",
                (3 * q,),
            )
        ]
        users = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memory_embeddings LIMIT 2")]
        missing, changed, moved = keys[:q], keys[q : 2 * q], keys[2 * q : 3 * q]
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = ANY(%s)", (missing,))
        conn.execute(
            "UPDATE memory_embeddings SET content = content || ' (damaged)' WHERE source_memory_id = ANY(%s)",
            (changed,),
        )
        conn.execute(
            "UPDATE memory_embeddings SET user_id = CASE WHEN user_id = %s THEN %s ELSE %s END "
            "WHERE source_memory_id = ANY(%s)",
            (users[0], users[1], users[0], moved),
        )
        extra = [f"bench-extra-{i}" for i in range(n - 3 * q)]
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, embedding_model, source_memory_id) "
            "SELECT m.user_id, m.content, m.embedding, m.embedding_model, e.key FROM "
            "(SELECT * FROM memory_embeddings LIMIT 1) m CROSS JOIN unnest(%s::text[]) AS e(key)",
            (extra,),
        )
    return (
        {(k, "missing") for k in missing}
        | {(k, "changed") for k in changed}
        | {(k, "user-changed") for k in moved}
        | {(k, "extra") for k in extra}
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=16)
    parser.add_argument("--damaged", type=int, default=100)
    parser.add_argument(
        "--mysql-admin-url",
        default=os.environ.get("MEMWORK_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    )
    parser.add_argument(
        "--source-checksums",
        choices=["auto", "sql", "python"],
        default="auto",
        help="python: hash the source's rows here (what a MySQL 8 without JSON_NORMALIZE gets).",
    )
    parser.add_argument("--pgdata", default=None)
    parser.add_argument("--json", default=None, help="Write the figures to this file too.")
    args = parser.parse_args()

    from memwork.certify import CertifyOptions, certify
    from memwork.embed import HashEmbedder
    from memwork.migrate.backfill import legacy_apply_options, run_backfill
    from memwork.pgvector.schema import ensure_schema

    embedder = HashEmbedder(args.dims)
    out: dict = {"rows": args.rows, "users": args.users, "dims": args.dims, "load": os.getloadavg()}
    with scratch_mysql(args.mysql_admin_url) as mysql_url, scratch_pg(args.pgdata) as pg_url:
        started = time.perf_counter()
        out["loaded"] = load_source(mysql_url, args.rows, args.users)
        out["load_s"] = round(time.perf_counter() - started, 1)
        ensure_schema(pg_url, "memory_embeddings", args.dims, create_vector_index=True)
        started = time.perf_counter()
        run_backfill(legacy_apply_options(mysql_url, pg_url, embedder, batch_size=5000))
        out["backfill_s"] = round(time.perf_counter() - started, 1)
        print(json.dumps(out), flush=True)

        ref_s, agree = reference(mysql_url, pg_url)
        out["reference_s"] = round(ref_s, 2)
        out["reference_agrees"] = agree
        options = {
            "users_per_bucket": 20,
            "queries_per_user": 3,
            "record_failures": True,
            "source_checksums": args.source_checksums,
        }
        cert, clean_s, clean_mb = timed(certify, CertifyOptions(mysql_url, pg_url, **options))
        out["clean"] = {
            "seconds": clean_s,
            "python_peak_mb": clean_mb,
            "verdict": cert.verdict,
            "gates": cert.gates,
            "timings": cert.timings,
            "round_trips": cert.rows.round_trips,
            "x_reference": round(clean_s / ref_s, 2) if ref_s else None,
        }
        print(json.dumps(out), flush=True)

        planted = damage(pg_url, args.damaged)
        cert, bad_s, bad_mb = timed(
            certify,
            CertifyOptions(
                mysql_url,
                pg_url,
                retrieval=False,
                vector_sample=0,
                source_checksums=args.source_checksums,
            ),
        )
        named = {(b.key, b.kind) for b in cert.rows.bad}
        out["damaged"] = {
            "seconds": bad_s,
            "python_peak_mb": bad_mb,
            "planted": len(planted),
            "named": len(planted & named),
            "unexpected": len(named - planted),
            "round_trips": cert.rows.round_trips,
            "buckets_compared": cert.rows.buckets_compared,
            "timings": cert.timings,
        }
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    ok = out["clean"]["verdict"] == "PASS" and out["damaged"]["named"] == out["damaged"]["planted"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
