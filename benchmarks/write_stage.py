"""The migration's write stage against a raw binary COPY of the same rows (issue 20: "migration writes
>= 0.5x a raw binary COPY of the same rows into the same table with its indexes, with idempotency,
ownership and checkpoints kept").

    python benchmarks/write_stage.py [--rows 100000] [--reps 5] [--page-size 2000]

Both sides write the same pages, read from a scratch MariaDB database and hash-embedded beforehand,
outside every timer, into a fresh table made by memwork's ``ensure_schema`` (the same indexes):

* ``memwork``: the writer every migration uses (:class:`memwork.migrate.writer.BatchWriter`) -- each
  page's COPY inputs made on the caller's thread, written on the writer thread with the ownership and
  conflict checks of its fast path, committed with its checkpoint, the WAL flushed at the end;
* ``reference``: one psycopg binary COPY of the same rows (tuples made beforehand) and one commit, as
  the findings' ``perf-scripts/backfill_peers.py`` times it;
* ``re-run``: memwork's writer again over the same pages into the now-full table (every id taken: the
  idempotent merge; shown, no target).

The two alternate rep by rep, the order swapped every rep (the first writer of a rep pays for WAL
segments the second reuses). The whole ``memwork backfill`` process -- reading MariaDB and embedding
too, on the same two cores -- is timed by ``workers_bench.py`` and the findings' script; this one
isolates what the target names: the writes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_mysql, scratch_pg
from certify_bench import load_source
from workers_bench import COLUMNS, TYPES

TARGET = 0.5


def read_pages(mysql_url: str, dims: int, page_size: int) -> tuple[list[Any], str]:
    """Every page of the source as the migration's writer receives it (rows screened and embedded)."""
    from memwork.embed import HashEmbedder
    from memwork.migrate.legacy_mysql import LegacyMySQLSource
    from memwork.migrate.quarantine import RowEmbedder
    from memwork.migrate.writer import Batch, PageMark

    embedder = HashEmbedder(dims)
    row_embedder = RowEmbedder(embedder, dims)
    source = LegacyMySQLSource(mysql_url)
    batches, cursor = [], None
    try:
        while True:
            page = source.read_rows(cursor, page_size)
            if not page.rows:
                break
            good, vectors, rejects = row_embedder.embed(page.rows)
            mark = PageMark(cursor, page.next_cursor, page.next_cursor is None, len(page.rows))
            batches.append(Batch(good, vectors, rejects, mark))
            cursor = page.next_cursor
    finally:
        source.close()
    return batches, embedder.model_id


def reference_rows(batches: list[Any], model_id: str) -> list[tuple]:
    """The same rows as tuples for a plain binary COPY (made once, untimed)."""
    from datetime import UTC, datetime

    from psycopg.types.json import Jsonb

    def stamp(text: str) -> datetime:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)

    return [
        (
            r["id"], r["user_id"], r["content"], v, model_id, r["type"] or "fact", r["source_session_id"],
            r["source_message_id"], Jsonb(json.loads(r["metadata"]) if r["metadata"] else {}),
            stamp(r["created_at"]), stamp(r["updated_at"]),
        )
        for batch in batches
        for r, v in zip(batch.rows, batch.vectors, strict=True)
    ]  # fmt: skip


def time_reference(pg_url: str, table: str, rows: list[tuple]) -> float:
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(pg_url) as conn:
        register_vector(conn)
        started = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY {table} ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(TYPES)
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return time.perf_counter() - started


def time_memwork(pg_url: str, table: str, batches: list[Any], model_id: str, dims: int) -> tuple[float, int]:
    """The writer over every page; (seconds, rows its checkpoint says it wrote)."""
    from dataclasses import replace

    import psycopg
    from pgvector.psycopg import register_vector

    from memwork.migrate.checkpoint import ImportCheckpoint
    from memwork.migrate.legacy_mysql import SOURCE_NAME
    from memwork.migrate.ownership import owner_of
    from memwork.migrate.writer import BatchWriter, prepare_session, register_packed_vectors

    with psycopg.connect(pg_url, autocommit=True) as pg:
        register_vector(pg)
        register_packed_vectors(pg)
        prepare_session(pg)
        checkpoint = ImportCheckpoint.starting(table, "bench", SOURCE_NAME)
        checkpoint = replace(checkpoint, run_id="bench", vectors="reembed", model=model_id, dimensions=dims)
        started = time.perf_counter()
        writer = BatchWriter(
            pg,
            table,
            owner=owner_of(SOURCE_NAME, "bench"),
            model_id=model_id,
            checkpoint=checkpoint,
            has_rejects=False,
            committed=lambda *_: None,
        )
        with writer:
            for batch in batches:
                writer.submit(batch)
        return time.perf_counter() - started, writer.checkpoint.rows_written


def count(pg_url: str, table: str) -> int:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def drop(pg_url: str, *tables: str) -> None:
    import psycopg

    from memwork.migrate.checkpoint import CHECKPOINT_TABLE

    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in (*tables, CHECKPOINT_TABLE):
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--page-size", type=int, default=2000, help="the backfill's default page size")
    parser.add_argument("--mysql-admin-url", default="mysql://root@127.0.0.1:3306/test")
    parser.add_argument("--pgdata", default=None)
    args = parser.parse_args()

    from memwork.pgvector.schema import ensure_schema

    print(f"load average before: {os.getloadavg()}  cores: {os.cpu_count()}")
    with scratch_mysql(args.mysql_admin_url) as mysql_url, scratch_pg(args.pgdata) as pg_url:
        loaded = load_source(mysql_url, args.rows, min(args.users, args.rows))
        batches, model_id = read_pages(mysql_url, args.dims, args.page_size)
        rows = reference_rows(batches, model_id)
        pages = f"{len(batches)} pages of {args.page_size}"
        print(f"{len(rows):,} rows ({loaded:,} loaded) in {pages}, read and embedded")
        ratios, reruns = [], []
        for rep in range(args.reps):
            ours, ref = f"mw{rep}", f"ref{rep}"
            for table in (ours, ref):
                ensure_schema(pg_url, table, args.dims)
            load = os.getloadavg()[0]
            timed: dict[str, float] = {}
            for side in ("memwork", "reference") if rep % 2 == 0 else ("reference", "memwork"):
                if side == "memwork":
                    timed[side], written = time_memwork(pg_url, ours, batches, model_id, args.dims)
                    assert written == len(rows) == count(pg_url, ours), (written, len(rows))
                else:
                    timed[side] = time_reference(pg_url, ref, rows)
                    assert count(pg_url, ref) == len(rows)
            rerun, _ = time_memwork(pg_url, ours, batches, model_id, args.dims)
            assert count(pg_url, ours) == len(rows)  # the re-run added nothing
            ratio = timed["reference"] / timed["memwork"]
            ratios.append(ratio)
            reruns.append(len(rows) / rerun)
            print(
                f"rep {rep}: memwork {timed['memwork']:.2f} s ({len(rows) / timed['memwork']:,.0f} rows/s), "
                f"raw COPY {timed['reference']:.2f} s ({len(rows) / timed['reference']:,.0f} rows/s): "
                f"{ratio:.2f}x; re-run {rerun:.2f} s ({len(rows) / rerun:,.0f} rows/s) "
                f"(load {load:.1f} -> {os.getloadavg()[0]:.1f})"
            )
            drop(pg_url, ours, ref)
    median = statistics.median(ratios)
    ok = median >= TARGET
    print(
        f"memwork's writes / raw binary COPY: median {median:.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}) "
        f"over {args.reps} reps; idempotent re-run median {statistics.median(reruns):,.0f} rows/s; "
        f"target >= {TARGET}x: {'PASS' if ok else 'MISS'}"
    )
    print(f"load average after: {os.getloadavg()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
