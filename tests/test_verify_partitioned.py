"""The certificate's row pass over key ranges of users (MariaDB -> embedded PostgreSQL): the ranges
tile the users (property); in this process, 2 local worker processes and a real 2-worker Dask cluster
give the certificate of the single-process run -- clean, and with rows missing, changed and moved to a
user of another range -- and so does a Dask worker killed mid-range."""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from memwork.certify import Certificate, CertifyOptions, certify
from memwork.certify.failures import read_failures
from memwork.certify.partitioned import plan_user_ranges
from memwork.certify.sides import HashRange, SourceSide
from memwork.db import get_engine
from memwork.errors import UsageError
from memwork.executor import CRASH_ENV
from memwork.samples.migration import Migration, build_migration

DIMS = 16


# ---- the plan (no services) -----------------------------------------------------------------------
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers(1, 500), max_size=60), st.integers(1, 9))
def test_user_ranges_tile_the_users(counts: dict[str, int], parts: int) -> None:
    """Every user (and any other id) in exactly one range; at most ``parts`` ranges, none empty."""
    ranges = plan_user_ranges(counts, parts)
    assert 1 <= len(ranges) <= max(1, min(parts, len(counts)))
    assert ranges[0].lower is None and ranges[-1].upper is None
    assert all(a.upper == b.lower for a, b in itertools.pairwise(ranges))
    for user in [*counts, "only-in-the-destination", "é 用户"]:
        assert sum(user in r for r in ranges) == 1
    assert not counts or all(any(u in r for u in counts) for r in ranges)
    assert plan_user_ranges(counts, parts) == ranges  # deterministic


def test_user_ranges_balance_rows() -> None:
    counts = {f"user-{i}": 100 for i in range(40)}
    ranges = plan_user_ranges(counts, 4)
    rows = [sum(n for u, n in counts.items() if u in r) for r in ranges]
    assert len(ranges) == 4 and max(rows) - min(rows) <= 200


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"executor": "spark://x:1"}, "executor"),
        ({"executor": "local:2", "source": "qdrant"}, "executor"),
    ],
)
def test_bad_partition_options_are_usage_errors(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(UsageError) as caught:
        CertifyOptions(source_url="mysql://root@127.0.0.1:1/none", **kw).check()
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--workers", "0"], "workers"),
        (["--executor", "spark://x:1"], "executor"),
        (["--from", "qdrant", "--workers", "2"], "executor"),
        (["--self-test", "--workers", "2"], "executor"),
    ],
)
def test_cli_bad_partition_options_are_one_line_exit_2(extra: list[str], field: str) -> None:
    from memwork.cli import main

    env = {
        "MEMORY_BACKFILL_MYSQL_URL": "mysql://root@127.0.0.1:1/none",
        "MEMORY_QDRANT_URL": "http://127.0.0.1:1",
    }
    result = CliRunner().invoke(main, ["verify", "--to", "pg://embedded", *extra], env=env)
    assert result.exit_code == 2, result.output
    assert field in result.output and len(result.output.strip().splitlines()) == 1


# ---- real servers -----------------------------------------------------------------------------------
@pytest.fixture
def migration(mysql_url: str, pg_url: str) -> Migration:
    return build_migration(mysql_url, pg_url, n_users=9, items_per_user=20, dimensions=DIMS, seed=5)


@pytest.fixture(scope="module")
def dask_address():
    """A real 2-worker Dask ``LocalCluster`` (processes), shared by this module's runs."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        yield "dask://" + cluster.scheduler_address.split("://", 1)[1]


def _certify(m: Migration, **kw: Any) -> Certificate:
    options = CertifyOptions(
        m.source_url, m.dest_url, table=m.table, users_per_bucket=3, queries_per_user=2, leaf=4, **kw
    )
    return certify(options)


def _comparable(m: Migration, cert: Certificate) -> tuple[str, list[dict[str, Any]]]:
    """The certificate as the single-process run must equal it: the summary without how it was run
    (timings, the executor and its ranges, round trips) and the run id, and the failures table rows."""
    summary = cert.summary()
    for name in ("timings", "digest", "execution"):
        summary.pop(name)
    summary["rows"].pop("round_trips")
    shown = json.dumps(summary, sort_keys=True, default=str).replace(cert.run_id, "RUN")
    with psycopg.connect(m.dest_url, autocommit=True) as conn:
        failures = read_failures(conn, cert.run_id)
    return shown, failures


def _damage(m: Migration) -> dict[str, str]:
    """Rows missing, changed, moved to a user of the other key range (of 2) and archived in the source."""
    with psycopg.connect(m.dest_url, autocommit=True) as conn:
        owner = dict(conn.execute(f"SELECT source_memory_id, user_id FROM {m.table}").fetchall())
    keys = sorted(owner)
    missing, changed, moved, archived = keys[2], keys[30], keys[60], keys[90]
    with get_engine(m.source_url).begin() as sconn:
        archive = text("UPDATE h5_user_memory_items SET status = 'archived' WHERE id = :k")
        sconn.execute(archive, {"k": archived})
    first = plan_user_ranges(SourceSide(m.source_url).user_counts(), 2)[0]  # as the coordinator cuts
    other = next(u for u in sorted(set(owner.values())) if (u in first) != (owner[moved] in first))
    with psycopg.connect(m.dest_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {m.table} WHERE source_memory_id = %s", (missing,))
        conn.execute(f"UPDATE {m.table} SET content = content || '!' WHERE source_memory_id = %s", (changed,))
        conn.execute(f"UPDATE {m.table} SET user_id = %s WHERE source_memory_id = %s", (other, moved))
    return {"missing": missing, "changed": changed, "user-changed": moved, "status": archived}


def _moved_across(cert: Certificate) -> bool:
    """The user-changed row's two users lie in two different key ranges of ``cert``."""
    ranges = [HashRange(r["lower"], r["upper"]) for r in cert.execution["ranges"]]
    (moved,) = [b for b in cert.rows.bad if b.kind == "user-changed"]
    return [moved.user in r for r in ranges] != [moved.dest_user in r for r in ranges]


def _assert_ranges(cert: Certificate, executor: str, count: int) -> None:
    ranges = cert.execution["ranges"]
    assert cert.execution["executor"] == executor and len(ranges) == count
    assert all(r["users"] > 0 for r in ranges)
    assert sum(r["source_rows"] for r in ranges) == cert.rows.source_rows


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.parametrize("damaged", [False, True], ids=["clean", "damaged"])
def test_key_ranges_give_the_single_process_certificate(
    migration: Migration, dask_address: str, damaged: bool
) -> None:
    planted = _damage(migration) if damaged else {}
    reference = _certify(migration)
    assert reference.execution == {"executor": None, "ranges": []}
    assert {(b.kind, b.key) for b in reference.rows.bad} == {(k, v) for k, v in planted.items()}
    assert reference.verdict == ("FAIL" if damaged else "PASS"), reference.reasons()
    expected = _comparable(migration, reference)
    runs = {
        "serial": _certify(migration, executor="serial", workers=3),
        "local:2": _certify(migration, executor="local:2"),
        dask_address: _certify(migration, executor=dask_address),
    }
    for executor, cert in runs.items():
        _assert_ranges(cert, executor, 3 if executor == "serial" else 2)
        assert _comparable(migration, cert) == expected, executor
        assert cert.rows.buckets_compared == reference.rows.buckets_compared
        assert not damaged or _moved_across(cert)


@pytest.mark.services
@pytest.mark.slow
def test_a_dask_worker_killed_mid_range_still_gives_the_certificate(
    migration: Migration, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Range 1's worker dies after its checksums (``os._exit``); the scheduler re-runs the range on
    the other worker, and the certificate is the single-process one."""
    distributed = pytest.importorskip("distributed")
    _damage(migration)
    expected = _comparable(migration, _certify(migration))
    marker = tmp_path / "crashed"
    monkeypatch.setenv(CRASH_ENV, f"1:{marker}")  # the workers inherit it
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        address = "dask://" + cluster.scheduler_address.split("://", 1)[1]
        cert = _certify(migration, executor=address, workers=2)
    assert marker.exists()  # the worker really died
    _assert_ranges(cert, address, 2)
    assert _moved_across(cert) and _comparable(migration, cert) == expected


@pytest.mark.services
@pytest.mark.slow
def test_a_local_worker_killed_is_one_line_exit_1(
    migration: Migration, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memwork.cli import main

    monkeypatch.setenv(CRASH_ENV, f"0:{tmp_path / 'crashed'}")
    args = ["verify", "--source-url", migration.source_url, "--to", migration.dest_url, "--no-retrieval"]
    result = CliRunner().invoke(main, [*args, "--executor", "local:2"])
    assert result.exit_code == 1, result.output
    assert "run it again" in result.output and "Traceback" not in result.output
    assert (tmp_path / "crashed").exists()


@pytest.mark.services
def test_cli_workers_alone_equals_the_default_run(migration: Migration) -> None:
    from memwork.cli import main

    _damage(migration)
    args = ["verify", "--source-url", migration.source_url, "--to", migration.dest_url, "--no-retrieval"]
    args += ["--leaf", "4", "--json"]
    default = CliRunner().invoke(main, args, catch_exceptions=False)
    split = CliRunner().invoke(
        main, [*args, "--workers", "3", "--executor", "serial"], catch_exceptions=False
    )
    assert default.exit_code == split.exit_code == 1
    one, three = json.loads(default.stdout), json.loads(split.stdout)
    assert len(three["execution"]["ranges"]) == 3 and one["execution"]["ranges"] == []
    for summary in (one, three):
        for name in ("timings", "digest", "execution", "run_id", "repair"):
            summary.pop(name)
        summary["rows"].pop("round_trips")
    assert one == three


@pytest.mark.services
@pytest.mark.parametrize(("engine", "where"), [("sqlite", "sql"), ("mysql", "python")])
def test_key_ranges_on_sqlite_and_python_checksums(
    request: pytest.FixtureRequest, pg_url: str, engine: str, where: str
) -> None:
    """The hash ranges select the same users in SQLite's SQL and in rows hashed here (a MySQL 8)."""
    source = request.getfixturevalue("sqlite_url" if engine == "sqlite" else "mysql_url")
    m = build_migration(source, pg_url, n_users=9, items_per_user=20, dimensions=DIMS, seed=5)
    _damage(m)
    reference = _certify(m, source_checksums=where, retrieval=False)
    split = _certify(m, source_checksums=where, retrieval=False, executor="serial", workers=3)
    assert split.rows.source_checksums == where and len(split.execution["ranges"]) == 3
    assert len(reference.rows.bad) == 4 and _comparable(m, split) == _comparable(m, reference)
