"""Parallel migration: MariaDB -> embedded PostgreSQL (hash embedder), 1 vs N workers, end to end.

Loads N active legacy rows into a scratch MariaDB database (chunked), sets MariaDB's
``innodb_buffer_pool_size`` for the run (``--buffer-pool-mb``; by default sized to hold the table
and its indexes, as a production server's pool is sized to its data; restored afterwards, the config
files untouched; the value used is printed), then in this one run:

* the stages alone, one process, no overlap (the reference): a bare keyset read of every page from
  MariaDB, the hash embedding of every page, and a raw binary COPY of the same rows (one COPY stream)
  into a fresh table with the migration table's indexes -- and into one without indexes, so index
  maintenance shows as the difference;
* ``memwork backfill`` end to end with 1 worker (one process: reader + embedder thread + writer
  thread), then with ``--workers`` N over disjoint key ranges (``local:N`` processes), each into a
  fresh table; both print rows/s, the ratio to the raw COPY, and the CPU seconds each side used
  (this process and its workers, ``mariadbd``, ``postgres``) against the cores x elapsed on offer --
  the side that saturates is the limit.

Target (issue 20): 1,000,000 rows >= 15,000 rows/s end to end. The machine is shared: the load
average is printed before and after; run twice before believing a figure.

    python benchmarks/workers_bench.py [--rows 1000000] [--workers 2] [--dims 384]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import admin_connection, scratch_mysql, scratch_pg
from certify_bench import load_source

COLUMNS = (
    "source_memory_id, user_id, content, embedding, embedding_model, type, source_session_id, "
    "source_message_id, metadata, created_at, updated_at"
)
TYPES = [
    "text",
    "text",
    "text",
    "vector",
    "text",
    "text",
    "text",
    "text",
    "jsonb",
    "timestamptz",
    "timestamptz",
]


def our_postmaster() -> int | None:
    """The pid of the embedded PostgreSQL server of this run (``$MEMWORK_PGDATA/postmaster.pid``)."""
    data = os.environ.get("MEMWORK_PGDATA")
    try:
        return int(Path(data, "postmaster.pid").read_text().split()[0]) if data else None
    except (OSError, ValueError, IndexError):
        return None


def server_processes() -> dict[int, tuple[str, float]]:
    """``{pid: (side, CPU seconds so far)}`` of every MariaDB server process and of this run's
    PostgreSQL server (its postmaster and backends; other helpers' embedded servers are not ours)."""
    import psutil

    postmaster = our_postmaster()
    out: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["name", "cpu_times", "ppid"]):
        name = (proc.info["name"] or "").lower()
        times = proc.info["cpu_times"]
        ours = postmaster is None or postmaster in (proc.pid, proc.info["ppid"])
        side = (
            "mariadb"
            if name.startswith(("mariadbd", "mysqld"))
            else "postgres"
            if name == "postgres" and ours
            else ""
        )
        if side and times is not None:
            out[proc.pid] = (side, times.user + times.system)
    return out


class ServerSampler:
    """CPU seconds per server side over a block, sampled every ``every`` s: a PostgreSQL backend
    lives only as long as its connection, so a worker's backend is gone before the block ends and
    must be caught while it runs (what it used in its last ``every`` s is missed).

    ``mysql``: ``(admin URL, database)``: also the CPU of the ``mariadbd`` threads serving
    connections to that database (``information_schema.PROCESSLIST.TID``), as ``mariadb_ours`` --
    the server is shared, and the whole process also counts other clients' queries."""

    def __init__(self, every: float = 0.5, mysql: tuple[str, str] | None = None) -> None:
        import threading

        self.every, self.stop = every, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.mysql, self.admin = mysql, None
        self.segments: list[list[float]] = []  # [base, last] CPU of one thread while it served us
        self.open: dict[int, list[float]] = {}  # tid -> its segment, while it serves our database
        self.base = server_processes()
        self.last = dict(self.base)
        self._sample_threads()

    def _sample_threads(self) -> None:
        if self.mysql is None:
            return
        maria = [pid for pid, (side, _) in self.last.items() if side == "mariadb"]
        if not maria:
            return
        if self.admin is None:
            import pymysql

            parts = urlsplit(self.mysql[0])
            self.admin = pymysql.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=parts.username or "root",
                password=parts.password or "",
                autocommit=True,
            )
        with self.admin.cursor() as cur:
            cur.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE DB = %s", (self.mysql[1],))
            tids = {int(row[0]) for row in cur.fetchall() if row[0]}
        tick = os.sysconf("SC_CLK_TCK")
        for tid in tids:
            try:
                fields = Path(f"/proc/{maria[0]}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            sec = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            if tid in self.open:
                self.open[tid][1] = sec
            else:
                self.open[tid] = [sec, sec]
                self.segments.append(self.open[tid])
        for tid in set(self.open) - tids:  # its connection closed: the thread may serve others next
            del self.open[tid]

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.last.update(server_processes())
            self._sample_threads()

    def __enter__(self) -> ServerSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.last.update(server_processes())
        self._sample_threads()
        if self.admin is not None:
            self.admin.close()

    def used(self) -> dict[str, float]:
        out = {"mariadb": 0.0, "postgres": 0.0}
        for pid, (side, sec) in self.last.items():
            out[side] += sec - self.base.get(pid, (side, 0.0))[1]
        if self.mysql is not None:
            out["mariadb_ours"] = sum(last - base for base, last in self.segments)
        return out


def machine_cpu() -> float:
    """CPU seconds every process on the machine has used (all cores, not idle or iowait)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def python_cpu() -> float:
    """CPU seconds of this process and its reaped children (the worker processes)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class CpuMeter:
    """CPU seconds per side over a block, and the elapsed wall time; ``mysql``: see
    :class:`ServerSampler`."""

    def __init__(self, mysql: tuple[str, str] | None = None) -> None:
        self.mysql = mysql

    def __enter__(self) -> CpuMeter:
        self.machine = machine_cpu()
        self.servers = ServerSampler(mysql=self.mysql).__enter__()
        self.python, self.started = python_cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.servers.__exit__()
        self.used = {"python": python_cpu() - self.python, **self.servers.used()}
        # the run's own CPU: MariaDB's share is its threads serving our database when that is known
        # (the server is shared: its whole CPU also counts other clients' queries)
        maria = self.used.get("mariadb_ours", self.used["mariadb"])
        self.ours = self.used["python"] + self.used["postgres"] + maria
        # every other process on the machine (other helpers' jobs): the cores this run did not get
        self.others = max(machine_cpu() - self.machine - self.ours, 0.0)

    def line(self, cores: int, rows: int) -> str:
        offer = cores * self.elapsed
        names = {"mariadb": "mariadbd whole server", "mariadb_ours": "mariadbd for our database"}
        parts = ", ".join(
            f"{names.get(side, side)} {sec:.1f} s ({sec / rows * 1e6:.0f} us/row, "
            f"{sec / self.elapsed:.2f} cores)"
            for side, sec in self.used.items()
        )
        return (
            f"CPU: {parts}; ours {self.ours:.1f} ({self.ours / rows * 1e6:.0f} us/row) + other processes "
            f"{self.others:.1f} of {offer:.1f} core-s on offer ({(self.ours + self.others) / offer:.0%} busy)"
        )


def stages(mysql_url: str, pg_url: str, embedder, page_size: int) -> dict[str, float]:
    """The stages alone in one process: read, embed, row tuples, binary COPY (indexed and bare)."""
    from datetime import UTC, datetime

    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Jsonb

    from memwork.migrate.legacy_mysql import LegacyMySQLSource
    from memwork.migrate.quarantine import RowEmbedder
    from memwork.pgvector.schema import ensure_schema, schema_sql

    def stamp(text: str) -> datetime:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)

    ensure_schema(pg_url, "ref_indexed", embedder.dimension)
    bare = [s for s in schema_sql("ref_bare", embedder.dimension) if "INDEX" not in s]
    timing = {"read": 0.0, "embed": 0.0, "tuples": 0.0, "copy_indexed": 0.0, "copy_bare": 0.0, "rows": 0}
    source = LegacyMySQLSource(mysql_url)
    row_embedder = RowEmbedder(embedder, embedder.dimension)
    with psycopg.connect(pg_url) as indexed, psycopg.connect(pg_url) as plain:
        for conn in (indexed, plain):
            register_vector(conn)
        for statement in bare:
            plain.execute(statement)
        plain.commit()
        copy_sql = "COPY {} (" + COLUMNS + ") FROM STDIN (FORMAT BINARY)"
        targets = (("copy_indexed", indexed, "ref_indexed"), ("copy_bare", plain, "ref_bare"))
        cursor = None
        while True:
            t = time.perf_counter()
            page = source.read_rows(cursor, page_size)
            timing["read"] += time.perf_counter() - t
            if not page.rows:
                break
            cursor = page.next_cursor
            t = time.perf_counter()
            good, vectors, _ = row_embedder.embed(page.rows)
            timing["embed"] += time.perf_counter() - t
            t = time.perf_counter()
            rows = [
                (
                    r["id"], r["user_id"], r["content"], v, embedder.model_id, r["type"] or "fact",
                    r["source_session_id"], r["source_message_id"],
                    Jsonb(json.loads(r["metadata"]) if r["metadata"] else {}),
                    stamp(r["created_at"]), stamp(r["updated_at"]),
                )
                for r, v in zip(good, vectors, strict=True)
            ]  # fmt: skip
            timing["tuples"] += time.perf_counter() - t
            for key, conn, table in targets:  # one COPY per page, as the writer does
                t = time.perf_counter()
                with conn.cursor() as cur, cur.copy(copy_sql.format(table)) as copy:
                    copy.set_types(TYPES)
                    for row in rows:
                        copy.write_row(row)
                timing[key] += time.perf_counter() - t
            timing["rows"] += len(rows)
        for key, conn in (("copy_indexed", indexed), ("copy_bare", plain)):
            t = time.perf_counter()
            conn.commit()
            timing[key] += time.perf_counter() - t
    source.close()
    return timing


MIB = 1 << 20


def table_bytes(mysql_url: str) -> tuple[int, int]:
    """(data, index) bytes of the scratch database's tables, as InnoDB reports them."""
    from sqlalchemy import text

    from memwork.db import get_engine

    with get_engine(mysql_url).connect() as conn:
        conn.execute(text("ANALYZE TABLE h5_user_memory_items"))
        row = conn.execute(
            text(
                "SELECT COALESCE(SUM(data_length), 0), COALESCE(SUM(index_length), 0) "
                "FROM information_schema.tables WHERE table_schema = DATABASE()"
            )
        ).one()
    return int(row[0]), int(row[1])


@contextmanager
def buffer_pool(admin_url: str, wanted_mb: int | None, data: int, index: int) -> Iterator[str]:
    """Set MariaDB's ``innodb_buffer_pool_size`` (dynamic) for the run and restore the previous value
    afterwards, whatever happens; yields the condition line to print. ``wanted_mb`` None: sized to
    hold the table and its indexes (x1.25, rounded up to 128 MB; never below the current size);
    0: left as it is. The server's config files are not touched."""
    conn = admin_connection(admin_url, autocommit=True)

    def current() -> int:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.innodb_buffer_pool_size")
            return int(cur.fetchone()[0])

    def resize(size: int) -> None:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL innodb_buffer_pool_size = {int(size)}")
        deadline = time.monotonic() + 120
        while current() != size and time.monotonic() < deadline:  # a resize may finish in the background
            time.sleep(0.2)

    before = current()
    need = data + index
    if wanted_mb == 0:
        size, how = before, "left as the server has it (--buffer-pool-mb 0)"
    elif wanted_mb is None:
        step = 128 * MIB
        size = max(before, -(-int(need * 1.25) // step) * step)
        how = "sized to hold the table and its indexes (x1.25, default; --buffer-pool-mb to choose)"
    else:
        size, how = wanted_mb * MIB, "--buffer-pool-mb"
    try:
        if size != before:
            resize(size)
        now = current()
        yield (
            f"MariaDB innodb_buffer_pool_size {now / MIB:,.0f} MB for this run ({how}; server's value "
            f"{before / MIB:,.0f} MB, restored at the end); table {data / MIB:,.0f} MB + indexes "
            f"{index / MIB:,.0f} MB"
        )
    finally:
        if current() != before:
            resize(before)
            print(f"MariaDB innodb_buffer_pool_size restored to {current() / MIB:,.0f} MB")
        conn.close()


def migrate(
    mysql_url: str,
    pg_url: str,
    embedder_spec: str,
    dims: int,
    page_size: int,
    workers: int,
    table: str,
    admin_url: str,
):
    """One end-to-end run into a fresh table: 1 worker = the one-process run, else key ranges."""
    from memwork.migrate.backfill import legacy_options
    from memwork.migrate.partitioned import run_partitioned
    from memwork.migrate.run import run_import
    from memwork.pgvector.schema import ensure_schema

    ensure_schema(pg_url, table, dims)
    options = legacy_options(mysql_url, pg_url, embedder_spec, apply=True, table=table, batch_size=page_size)
    meter = CpuMeter(mysql=(admin_url, mysql_url.rsplit("/", 1)[1]))
    with meter:
        if workers == 1:
            report = run_import(options)
        else:
            report = run_partitioned(options, workers=workers, executor=f"local:{workers}")
    return report, meter


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--page-size", type=int, default=2000, help="the backfill's default page size")
    parser.add_argument("--min-rate", type=float, default=15_000.0)
    parser.add_argument("--skip-stages", action="store_true", help="no per-stage reference (saves time)")
    parser.add_argument(
        "--mysql-admin-url", default=os.environ.get("MEMWORK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")
    )
    parser.add_argument("--pgdata", default=None)
    parser.add_argument(
        "--buffer-pool-mb",
        type=int,
        default=None,
        help="MariaDB innodb_buffer_pool_size for the run, in MB, restored afterwards (default: sized "
        "to hold the loaded table and its indexes, as a production server's pool is sized to its data; "
        "0: leave the server's value)",
    )
    args = parser.parse_args()

    from memwork.embed import HashEmbedder

    cores = os.cpu_count() or 1
    print(f"load average before: {os.getloadavg()}  cores: {cores}")
    embedder = HashEmbedder(args.dims)
    spec = f"hash:{args.dims}"
    with (
        scratch_mysql(args.mysql_admin_url) as mysql_url,
        scratch_pg(args.pgdata) as pg_url,
        ExitStack() as stack,
    ):
        t = time.perf_counter()
        loaded = load_source(mysql_url, args.rows, min(args.users, args.rows))
        print(f"source: {loaded:,} rows loaded into MariaDB in {time.perf_counter() - t:.1f} s")
        data, index = table_bytes(mysql_url)
        pool = stack.enter_context(buffer_pool(args.mysql_admin_url, args.buffer_pool_mb, data, index))
        print(pool)
        database = mysql_url.rsplit("/", 1)[1]
        copy_rate = None
        if not args.skip_stages:
            before = os.getloadavg()[0]
            with CpuMeter(mysql=(args.mysql_admin_url, database)) as meter:
                s = stages(mysql_url, pg_url, embedder, args.page_size)
            n = s["rows"]
            copy_rate = n / s["copy_indexed"]
            print(f"stages alone, one process, {n:,} rows (load {before:.1f} -> {os.getloadavg()[0]:.1f}):")
            for key in ("read", "embed", "tuples", "copy_indexed", "copy_bare"):
                print(f"  {key:13s} {s[key]:7.2f} s  {n / s[key]:>10,.0f} rows/s")
            print(
                f"  index maintenance (COPY indexed - bare): {s['copy_indexed'] - s['copy_bare']:.2f} s; "
                f"sum of stages {s['read'] + s['embed'] + s['tuples'] + s['copy_indexed']:.2f} s"
            )
            print(f"  {meter.line(cores, n)} (every stage, both COPYs)")
        rates = {}
        for workers in (1, args.workers):
            before = os.getloadavg()[0]
            report, meter = migrate(
                mysql_url,
                pg_url,
                spec,
                args.dims,
                args.page_size,
                workers,
                f"w{workers}",
                args.mysql_admin_url,
            )
            assert report.rows_written == loaded, (report.rows_written, loaded)
            rate = report.rows_written / meter.elapsed
            rates[workers] = rate
            ratio = f", {rate / copy_rate:.2f}x the raw binary COPY" if copy_rate else ""
            print(
                f"{workers} worker(s): {report.rows_written:,} rows in {meter.elapsed:.1f} s "
                f"= {rate:,.0f} rows/s{ratio}, {rate / args.min_rate:.2f}x the target "
                f"(load {before:.1f} -> {os.getloadavg()[0]:.1f})"
            )
            print(f"  {meter.line(cores, report.rows_written)}")
            for part in report.partitions or []:
                print(
                    f"  range {part['index']}: {part['rowsWritten']:,} rows in {part['elapsedSeconds']:.1f} s"
                )
    print(f"speed-up {args.workers} vs 1 worker: {rates[args.workers] / rates[1]:.2f}x")
    print(f"load average after: {os.getloadavg()}")
    print(f"conditions: {pool}")
    if copy_rate:
        print(f"raw binary COPY with the indexes (the reference): {copy_rate:,.0f} rows/s")
    best = max(rates.values())
    ok = best >= args.min_rate
    print(f"best {best:,.0f} rows/s (target >= {args.min_rate:,.0f}): {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
