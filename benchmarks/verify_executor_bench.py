"""The certificate's row pass in one process against key ranges on an executor (``memwork verify
--executor local:2``): MariaDB -> embedded PostgreSQL + pgvector (hash embedder), clean and damaged.

Loads N active legacy rows and backfills them (as ``certify_bench.py``), then for each executor
certifies the clean copy and, after ``--damaged`` rows were damaged (missing, changed, moved to
another user, extra), the damaged one -- retrieval off and no vector sample, so the time is the rows
gate's, with the CPU seconds of this process and its workers, ``mariadbd`` and the ``postgres``
processes (every one on the machine: other jobs' too). Each run's certificate must equal the
one-process run's (summary without timings, executor, round trips and run id); the load average is
recorded before and after each run.

    python benchmarks/verify_executor_bench.py [--rows 200000] [--users 2000] [--executors none,local:2]
    python benchmarks/verify_executor_bench.py --executors none,serial,local:2 --workers 2 --repeat 1
    python benchmarks/verify_executor_bench.py --executors none,local:2,dask --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_mysql, scratch_pg
from certify_bench import damage, load_source
from workers_bench import ServerSampler, python_cpu


def comparable(cert) -> str:
    """The certificate without how it was run (what every executor must give alike)."""
    summary = cert.summary()
    for name in ("timings", "digest", "execution"):
        summary.pop(name)
    summary["rows"].pop("round_trips")
    return json.dumps(summary, sort_keys=True, default=str).replace(cert.run_id, "RUN")


def run(mysql_url: str, pg_url: str, executor: str | None, workers: int | None) -> tuple[dict, str]:
    from memwork.certify import CertifyOptions, certify

    options = CertifyOptions(
        mysql_url,
        pg_url,
        retrieval=False,
        vector_sample=0,
        executor=executor,
        workers=workers if executor else None,
        record_failures=False,
    )
    load = os.getloadavg()
    started, python = time.perf_counter(), python_cpu()
    with ServerSampler() as servers:
        cert = certify(options)
    cpu = {"python": round(python_cpu() - python, 1), **{k: round(v, 1) for k, v in servers.used().items()}}
    figure = {
        "executor": executor or "one process",
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_s": cpu,
        "rows_s": cert.timings.get("rows"),
        "verdict": cert.verdict,
        "bad": len(cert.rows.bad),
        "ranges": [r["source_rows"] for r in cert.execution["ranges"]],
        "round_trips": cert.rows.round_trips,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    return figure, comparable(cert)


@contextmanager
def dask_cluster(wanted: bool, workers: int) -> Iterator[str | None]:
    """A ``distributed.LocalCluster`` of ``workers`` processes when ``dask`` is among the executors
    (its start printed apart: it is paid once per cluster, not per verification)."""
    if not wanted:
        yield None
        return
    import distributed

    started = time.perf_counter()
    with distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        print(json.dumps({"dask_cluster_start_s": round(time.perf_counter() - started, 2)}), flush=True)
        yield "dask://" + cluster.scheduler_address.split("://", 1)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--dims", type=int, default=16)
    parser.add_argument("--damaged", type=int, default=100)
    parser.add_argument(
        "--executors",
        default="none,local:2",
        help="Comma-separated; none: one process; dask: a LocalCluster of --workers.",
    )
    parser.add_argument("--workers", type=int, default=None, help="Key ranges (default: the executor's).")
    parser.add_argument("--repeat", type=int, default=2, help="Runs of each executor (alternating).")
    parser.add_argument(
        "--mysql-admin-url",
        default=os.environ.get("MEMWORK_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    )
    parser.add_argument("--pgdata", default=None)
    parser.add_argument("--json", default=None, help="Write the figures to this file too.")
    args = parser.parse_args()

    from memwork.embed import HashEmbedder
    from memwork.migrate.backfill import legacy_apply_options, run_backfill
    from memwork.pgvector.schema import ensure_schema

    executors = [None if e == "none" else e for e in args.executors.split(",")]
    out: dict = {"rows": args.rows, "users": args.users, "cores": os.cpu_count(), "runs": []}
    same = True
    with (
        scratch_mysql(args.mysql_admin_url) as mysql_url,
        scratch_pg(args.pgdata) as pg_url,
        dask_cluster("dask" in executors, args.workers or 2) as address,
    ):
        executors = [address if e == "dask" else e for e in executors]
        out["loaded"] = load_source(mysql_url, args.rows, args.users)
        ensure_schema(pg_url, "memory_embeddings", args.dims, create_vector_index=True)
        run_backfill(legacy_apply_options(mysql_url, pg_url, HashEmbedder(args.dims), batch_size=5000))
        for state in ("clean", "damaged"):
            if state == "damaged":
                damage(pg_url, args.damaged)
            reference: str | None = None
            for _ in range(args.repeat):
                for executor in executors:
                    figure, shown = run(mysql_url, pg_url, executor, args.workers)
                    reference = reference or shown
                    figure |= {"state": state, "identical": shown == reference}
                    same = same and shown == reference
                    out["runs"].append(figure)
                    print(json.dumps(figure), flush=True)
    out["all_identical"] = same
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
