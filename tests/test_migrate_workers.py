"""A migration over N disjoint key ranges: ranges tile the key space (property), 2 local worker
processes and a real 2-worker Dask cluster equal the one-process run, and a worker killed mid-run
leaves a re-run with no duplicate and no loss."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from memwork.db import get_engine
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill import legacy_options
from memwork.migrate.legacy_mysql import LegacyMySQLSource
from memwork.migrate.partitioned import (
    KeyRange,
    load_plan,
    plan_ranges,
    ranges_between,
    run_partitioned,
    split_positions,
)
from memwork.migrate.run import run_import
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

DIMS = 16
SERIAL, PARALLEL = "emb_serial", "emb_parallel"


# ---- the splitter (no services) -----------------------------------------------------------------


@given(st.integers(0, 5000), st.integers(1, 64))
def test_split_positions_are_near_equal_and_inside(total: int, parts: int) -> None:
    positions = split_positions(total, parts)
    assert len(positions) == max(1, min(parts, total)) - 1
    edges = [0, *positions, total]
    sizes = [b - a for a, b in itertools.pairwise(edges)]
    assert all(s >= 1 for s in sizes) or total == 0
    assert max(sizes) - min(sizes) <= 1


def _inside(key: tuple[int, str], r: KeyRange) -> bool:
    lower = None if r.lower is None else tuple(json.loads(r.lower))
    upper = None if r.upper is None else tuple(json.loads(r.upper))
    return (lower is None or key > lower) and (upper is None or key <= upper)


@given(
    st.lists(st.tuples(st.integers(0, 20), st.text("abc", min_size=1, max_size=3)), unique=True),
    st.integers(1, 12),
    st.integers(-1, 20),
)
def test_ranges_tile_the_keys_no_overlap_no_gap(keys, parts: int, start_at: int) -> None:
    """Every key after the start lies in exactly one range, whatever the ties in the first column."""
    keys = sorted(keys)
    start = keys[start_at] if 0 <= start_at < len(keys) else None
    after = [k for k in keys if start is None or k > start]
    bounds = [json.dumps(after[p - 1]) for p in split_positions(len(after), parts)]
    ranges = ranges_between(None if start is None else json.dumps(start), bounds)
    assert len(ranges) == max(1, min(parts, len(after)))
    for key in after:
        assert sum(_inside(key, r) for r in ranges) == 1
    for r in ranges:  # no range empty
        assert not after or any(_inside(k, r) for k in after)


# ---- against MariaDB and the embedded PostgreSQL ------------------------------------------------


def _load(mysql_url: str, users: int = 30, per_user: int = 100) -> int:
    """Rows with many ties in updated_at (a range bound falls inside a tie) and some inactive."""
    rows = generate_legacy_items(users, per_user, seed=11, now=datetime(2026, 1, 2), active_only=True)
    base = datetime(2025, 6, 1)
    for i, row in enumerate(rows):
        row["updated_at"] = base + timedelta(seconds=(i * 7919) % 97)  # 97 distinct values, shuffled
    load_legacy_rows(mysql_url, ITEMS, rows)
    with get_engine(mysql_url).begin() as conn:
        for row in rows[:25]:
            conn.execute(update(memory_items).where(memory_items.c.id == row["id"]).values(status="archived"))
    return len(rows) - 25


def _digest(pg_url: str, table: str) -> tuple[int, int, str]:
    """(rows, distinct ids, sha256 of every row incl. its vector) of a destination table."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT source_memory_id, user_id, content, type, source_session_id, source_message_id, "
            "metadata::text, created_at, updated_at, embedding_model, embedding::text "
            f"FROM {table} ORDER BY source_memory_id"
        ).fetchall()
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, default=str, ensure_ascii=False).encode())
    return len(rows), len({r[0] for r in rows}), h.hexdigest()


def _serial(mysql_url: str, pg_url: str) -> tuple[int, int, str]:
    ensure_schema(pg_url, SERIAL, DIMS)
    report = run_import(
        legacy_options(mysql_url, pg_url, f"hash:{DIMS}", apply=True, table=SERIAL, batch_size=50)
    )
    assert report.rows_written > 0
    return _digest(pg_url, SERIAL)


@pytest.mark.services
def test_plan_ranges_read_every_row_once_across_ties(mysql_url: str) -> None:
    active = _load(mysql_url, users=10, per_user=40)
    whole = LegacyMySQLSource(mysql_url)
    try:
        for parts in (1, 2, 3, 5):
            ranges = plan_ranges(whole, None, parts)
            assert len(ranges) == parts
            seen: list[str] = []
            for r in ranges:
                part = LegacyMySQLSource(mysql_url, lower=r.lower, upper=r.upper)
                cursor = None
                while True:
                    page = part.read_rows(cursor, 37)
                    if not page.rows:
                        break
                    seen += [row["id"] for row in page.rows]
                    cursor = page.next_cursor
                assert part.count() > 0
                part.close()
            assert len(seen) == len(set(seen)) == active
    finally:
        whole.close()


@pytest.mark.services
@pytest.mark.slow
def test_two_local_workers_equal_the_serial_run(mysql_url: str, pg_url: str) -> None:
    active = _load(mysql_url)
    serial = _serial(mysql_url, pg_url)
    ensure_schema(pg_url, PARALLEL, DIMS)
    options = legacy_options(mysql_url, pg_url, f"hash:{DIMS}", apply=True, table=PARALLEL, batch_size=50)
    report = run_partitioned(options, workers=2, executor="local:2")
    assert report.rows_written == active and len(report.partitions or []) == 2
    assert all(p["rowsWritten"] > 0 for p in report.partitions or [])
    assert _digest(pg_url, PARALLEL) == serial == (active, active, serial[2])
    with psycopg.connect(pg_url) as conn:
        assert len(load_plan(conn, PARALLEL, report.source_key) or []) == 2


@pytest.mark.services
@pytest.mark.slow
def test_a_dask_local_cluster_of_two_workers_equals_the_serial_run(mysql_url: str, pg_url: str) -> None:
    distributed = pytest.importorskip("distributed")
    active = _load(mysql_url)
    serial = _serial(mysql_url, pg_url)
    ensure_schema(pg_url, PARALLEL, DIMS)
    options = legacy_options(mysql_url, pg_url, f"hash:{DIMS}", apply=True, table=PARALLEL, batch_size=50)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = "dask://" + cluster.scheduler_address.split("://", 1)[1]
        report = run_partitioned(options, executor=address)  # N: the cluster's workers
    assert report.rows_written == active and len(report.partitions or []) == 2
    assert _digest(pg_url, PARALLEL) == serial


def _worker_pids(parent: int) -> list[int]:
    """The coordinator's spawned pool workers (not its resource tracker)."""
    import psutil

    return [
        p.pid
        for p in psutil.Process(parent).children(recursive=True)
        if "spawn_main" in " ".join(p.cmdline())
    ]


def _written(pg_url: str) -> list[int]:
    with psycopg.connect(pg_url) as conn:
        if conn.execute("SELECT to_regclass('memwork_import_checkpoints')").fetchone()[0] is None:
            return []
        rows = conn.execute(
            "SELECT rows_written FROM memwork_import_checkpoints "
            "WHERE target_table = %s AND source_key LIKE %s",
            (PARALLEL, "%#range(%"),
        ).fetchall()
    return [int(r[0]) for r in rows]


@pytest.mark.services
@pytest.mark.slow
def test_a_worker_killed_mid_run_then_resume_loses_and_duplicates_nothing(
    mysql_url: str, pg_url: str, tmp_path
) -> None:
    active = _load(mysql_url, users=40, per_user=150)
    serial = _serial(mysql_url, pg_url)
    ensure_schema(pg_url, PARALLEL, DIMS)
    env = {
        **os.environ,
        "MEMORY_BACKFILL_MYSQL_URL": mysql_url,
        "MEMORY_PGVECTOR_DATABASE_URL": pg_url,
        "MEMWORK_HOME": str(tmp_path / "home"),
    }
    args = [sys.executable, "-m", "memwork", "backfill", "--apply", "--embedder", f"hash:{DIMS}"]
    args += ["--table", PARALLEL, "--json"]
    proc = subprocess.Popen(
        [*args, "--workers", "2", "--batch-size", "10"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    killed = None
    while time.monotonic() < deadline and killed is None:
        assert proc.poll() is None, f"the run ended before the kill: {proc.communicate()}"
        done = _written(pg_url)
        if len(done) == 2 and min(done) >= 300:
            workers = _worker_pids(proc.pid)
            assert len(workers) == 2
            os.kill(workers[0], signal.SIGKILL)
            killed = sum(done)
        time.sleep(0.01)
    assert killed is not None, "the ranges did not reach the kill point in time"
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "--resume" in err and "Traceback" not in err
    assert killed < active and sum(_written(pg_url)) < active  # the run stopped short

    # a re-run asking for another N keeps the recorded 2 ranges and finishes them
    rerun = subprocess.run([*args, "--workers", "3", "--resume"], env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert len(report["partitions"]) == 2 and report["checkpoint"]["finished"]
    assert report["checkpoint"]["rowsWritten"] == active
    assert _digest(pg_url, PARALLEL) == serial == (active, active, serial[2])


@pytest.mark.services
def test_dry_run_plans_ranges_and_writes_nothing(mysql_url: str, pg_url: str) -> None:
    active = _load(mysql_url, users=5, per_user=40)
    options = legacy_options(mysql_url, pg_url)
    report = run_partitioned(options, workers=3, executor="serial")
    assert report.mode == "dry-run" and report.planned == active
    assert [p["planned"] for p in report.partitions or []] and sum(
        p["planned"] for p in report.partitions or []
    ) == active
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('memwork_import_plans')").fetchone()[0] is None


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["backfill", "--workers", "0"], "workers"),
        (["backfill", "--workers", "2", "--limit", "5"], "limit"),
        (["backfill", "--workers", "2", "--executor", "spark://x:1"], "executor"),
        (["import", "--from", "qdrant", "--workers", "2"], "workers"),
    ],
)
def test_bad_worker_options_are_usage_errors(extra: list[str], field: str) -> None:
    from click.testing import CliRunner

    from memwork.cli import main

    env = {
        "MEMORY_BACKFILL_MYSQL_URL": "mysql://root@127.0.0.1:1/none",
        "MEMORY_QDRANT_URL": "http://127.0.0.1:1",
    }
    result = CliRunner().invoke(main, extra, env=env)
    assert result.exit_code == 2, result.output
    assert field in result.output


@pytest.mark.services
@pytest.mark.slow
def test_a_dask_worker_killed_mid_run_is_retried_with_no_duplicate_and_no_loss(
    mysql_url: str, pg_url: str
) -> None:
    """The scheduler re-runs the dead worker's range elsewhere; the range resumes from its own
    checkpoint, so the one run ends equal to the serial run."""
    import threading

    distributed = pytest.importorskip("distributed")
    active = _load(mysql_url, users=40, per_user=150)
    serial = _serial(mysql_url, pg_url)
    ensure_schema(pg_url, PARALLEL, DIMS)
    options = legacy_options(mysql_url, pg_url, f"hash:{DIMS}", apply=True, table=PARALLEL, batch_size=10)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        killed: list[int] = []

        def kill_when_both_ranges_committed() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                done = _written(pg_url)
                if len(done) == 2 and min(done) >= 300:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(sum(done))
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=kill_when_both_ranges_committed, daemon=True)
        watcher.start()
        address = "dask://" + cluster.scheduler_address.split("://", 1)[1]
        report = run_partitioned(options, workers=2, executor=address)
        watcher.join(timeout=5)
    assert killed and killed[0] < active, "the kill came too late to be mid-run"
    assert report.rows_written <= active and report.checkpoint and report.checkpoint["finished"]
    assert report.checkpoint["rowsWritten"] == active
    assert _digest(pg_url, PARALLEL) == serial == (active, active, serial[2])


@pytest.mark.services
def test_a_parallel_run_waits_for_no_one_process_run_of_the_same_table(mysql_url: str, pg_url: str) -> None:
    """The coordinator takes the migration's own lock: while a one-process run holds it, a parallel
    run of the same source into the same table is refused before anything is planned or written."""
    from memwork.errors import ImportRunning
    from memwork.migrate.lock import import_lock
    from memwork.migrate.run import stored_key

    _load(mysql_url, users=3, per_user=20)
    ensure_schema(pg_url, PARALLEL, DIMS)
    key = stored_key(LegacyMySQLSource(mysql_url))
    options = legacy_options(mysql_url, pg_url, f"hash:{DIMS}", apply=True, table=PARALLEL)
    with (
        psycopg.connect(pg_url, autocommit=True) as holder,
        import_lock(holder, PARALLEL, key),
        pytest.raises(ImportRunning),
    ):
        run_partitioned(options, workers=2, executor="serial")
    with psycopg.connect(pg_url) as conn:
        assert load_plan(conn, PARALLEL, key) is None
        assert conn.execute(f"SELECT count(*) FROM {PARALLEL}").fetchone()[0] == 0


@pytest.mark.services
def test_the_cli_dry_run_shows_the_ranges(mysql_url: str) -> None:
    from click.testing import CliRunner

    from memwork.cli import main

    active = _load(mysql_url, users=4, per_user=30)
    env = {"MEMORY_BACKFILL_MYSQL_URL": mysql_url}
    args = ["import", "--from", "legacy-mysql", "--workers", "2", "--executor", "serial", "--json"]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    planned = [p["planned"] for p in report["partitions"]]
    assert report["mode"] == "dry-run" and len(planned) == 2 and sum(planned) == active
    assert min(planned) > active // 3  # near-equal (the split counts inactive rows too)
