"""Row ownership in a shared pgvector table: the MySQL backfill, imports and the smoke check never
overwrite or delete each other's rows -- in sequence, racing an uncommitted write, and as two real
processes at once. Each conflict is quarantined (named with its owner) and the CLI exits 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from import_harness import (
    FILE_SOURCE,
    ROOT,
    ListSource,
    import_args,
    memwork_cli,
    verify_args,
    write_source_file,
)
from sqlalchemy import update

from memwork.contracts import SourceRecord
from memwork.db import get_engine
from memwork.embed import HashEmbedder
from memwork.errors import UsageError
from memwork.legacy.schema import memory_items
from memwork.migrate.backfill import legacy_options, run_backfill
from memwork.migrate.ownership import LEGACY_OWNER, OWNED_ELSEWHERE_EXIT
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

pytestmark = [pytest.mark.services]
DIMS = 8
TABLE = "memory_embeddings"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def vec(i: int) -> list[float]:
    return [((i * 13 + k * 7) % 17) / 17 + 0.05 for k in range(DIMS)]


def imported(ids: Sequence[str], tag: str = "imported") -> list[SourceRecord]:
    """Import records for ``ids`` whose content says which source wrote them."""
    return [
        SourceRecord(
            id=key,
            user_id=f"u{i % 4}",
            content=f"{tag} copy of {key}",
            metadata={"i": i},
            created_at=T0 + timedelta(seconds=i),
            vector=vec(i),
            model="test-model-8",
        )
        for i, key in enumerate(ids)
    ]


def legacy(mysql_url: str, users: int = 3, per_user: int = 10, seed: int = 11) -> list[dict[str, Any]]:
    rows = generate_legacy_items(users, per_user, seed=seed, active_only=True)
    load_legacy_rows(mysql_url, ITEMS, rows)
    return rows


def in_backfill_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["updated_at"], r["id"]))


def backfill_options(mysql_url: str, pg_url: str, **kw: Any) -> ImportOptions:
    return legacy_options(
        mysql_url=mysql_url, database_url=pg_url, apply=True, embedder=HashEmbedder(DIMS), **kw
    )


def table_rows(pg_url: str) -> dict[str, tuple[str, str | None, str]]:
    """``{id: (content, owner marker, embedding_model)}``."""
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            f"SELECT source_memory_id, content, metadata->>'_memworkSource', embedding_model FROM {TABLE}"
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in found}


def rejects(pg_url: str) -> dict[str, tuple[str, str | None]]:
    """``{id: (reason, source_key)}`` of the quarantine of ``TABLE``."""
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            "SELECT source_memory_id, reason, to_jsonb(r)->>'source_key' FROM memwork_backfill_rejects AS r "
            "WHERE target_table = %s",
            (TABLE,),
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in found}


def list_source(records: list[SourceRecord], key: str) -> ListSource:
    return ListSource(records, name="list", key=key)


def file_env(tmp_path: Path, records: list[SourceRecord], key: str) -> dict[str, str]:
    path = write_source_file(tmp_path / f"{uuid.uuid4().hex[:8]}.jsonl", records)
    return {"MEMWORK_TEST_SOURCE_FILE": str(path), "MEMWORK_TEST_SOURCE_KEY": key}


def backfill_cli_args(mysql_url: str, pg_url: str, *extra: str) -> list[str]:
    return [
        "backfill", "--apply", "--mysql-url", mysql_url, "--database-url", pg_url, "--table", TABLE,
        "--embedder", f"hash:{DIMS}", "--batch-size", "20", "--json", *extra,
    ]  # fmt: skip


def start(env: dict[str, str], args: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "memwork", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode in (0, OWNED_ELSEWHERE_EXIT), (proc.returncode, err[-3000:])
    return proc.returncode, json.loads(out)


def wait_until(
    conn: psycopg.Connection[Any], sql: str, at_least: int, procs: Sequence[subprocess.Popen[str]]
):
    """Poll ``sql`` (a count) until it reaches ``at_least``, while every process is still running."""
    deadline = time.monotonic() + 120
    while (n := conn.execute(sql).fetchone()[0]) < at_least:
        for proc in procs:
            assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{sql}: {n} < {at_least}"
        time.sleep(0.02)
    return n


# ---- in sequence --------------------------------------------------------------------------------


def test_a_backfill_after_an_import_quarantines_the_imported_ids_and_exits_3(mysql_url, pg_url, tmp_path):
    rows = legacy(mysql_url)
    ensure_schema(pg_url, TABLE, DIMS)
    taken = [r["id"] for r in rows[:12]]  # a source synced from the same MySQL carries its ids
    env = file_env(tmp_path, imported([*taken, "only-imported"]), "file:synced")
    first = memwork_cli(env, *import_args(FILE_SOURCE, pg_url, vectors="keep"))
    assert first.returncode == 0, first.stderr

    run = memwork_cli({"MEMWORK_HOME": str(tmp_path / "h")}, *backfill_cli_args(mysql_url, pg_url))
    stored = table_rows(pg_url)
    for key in taken:  # the import's rows as it wrote them
        assert stored[key] == (f"imported copy of {key}", "file:synced", "test-model-8")
    assert {k: v[1] for k, v in rejects(pg_url).items()} == dict.fromkeys(taken, LEGACY_OWNER)
    mine = {r["id"] for r in rows} - set(taken)
    assert all(stored[key][1] is None and stored[key][2] == f"hash-{DIMS}" for key in mine)

    assert run.returncode == OWNED_ELSEWHERE_EXIT, run.stderr
    report = run.json
    assert report["ownedElsewhere"] == 12 and report["rowsQuarantined"] == 12
    assert report["rowsWritten"] == len(rows) - 12
    listed = {q["id"]: q for q in report["quarantined"]}
    assert set(listed) == set(taken) and all(q["owner"] == "file:synced" for q in listed.values())
    assert all("owned by file:synced; not overwritten" in q["reason"] for q in listed.values())

    verified = memwork_cli(env, *verify_args(FILE_SOURCE, pg_url))
    assert verified.returncode == 0 and verified.json["verdict"] == "PASS", verified.json["reasons"]

    plain = memwork_cli({"MEMWORK_HOME": str(tmp_path / "h")}, *backfill_cli_args(mysql_url, pg_url)[:-1])
    assert plain.returncode == OWNED_ELSEWHERE_EXIT
    assert "owned elsewhere: 12 id(s) another source holds in memory_embeddings" in plain.stdout


def test_an_import_after_the_backfill_names_the_backfill_and_exits_3(mysql_url, pg_url, tmp_path):
    rows = legacy(mysql_url)
    ensure_schema(pg_url, TABLE, DIMS)
    run_backfill(backfill_options(mysql_url, pg_url))
    taken = [r["id"] for r in rows[:5]]
    env = file_env(tmp_path, imported([*taken, "new-1", "new-2"]), "file:late")
    run = memwork_cli(env, *import_args(FILE_SOURCE, pg_url, vectors="keep"))
    assert run.returncode == OWNED_ELSEWHERE_EXIT, run.stderr
    report = run.json
    assert (report["rowsWritten"], report["ownedElsewhere"]) == (2, 5)
    assert {q["id"]: q["owner"] for q in report["quarantined"]} == dict.fromkeys(taken, LEGACY_OWNER)
    stored = table_rows(pg_url)
    assert all(stored[key][1] is None and stored[key][2] == f"hash-{DIMS}" for key in taken)


def test_prune_never_deletes_an_imported_row_and_orphans_are_only_the_backfills(mysql_url, pg_url, tmp_path):
    rows = legacy(mysql_url)
    ensure_schema(pg_url, TABLE, DIMS)
    ours, theirs = rows[0]["id"], rows[1]["id"]
    run_import(
        ImportOptions(
            source=list_source(imported([theirs, "x-only"]), "list:owner"), database_url=pg_url, apply=True
        )
    )
    first = run_backfill(backfill_options(mysql_url, pg_url))
    assert first.owned_elsewhere == 1
    with get_engine(mysql_url).begin() as conn:
        conn.execute(
            update(memory_items).where(memory_items.c.id.in_([ours, theirs])).values(status="archived")
        )
    looked = run_backfill(backfill_options(mysql_url, pg_url, resume=True))
    assert (
        looked.inactive is not None and looked.inactive["count"] == 1 and looked.inactive["sample"] == [ours]
    )
    assert looked.inactive["ownedElsewhere"] == 1 and looked.owned_elsewhere == 0  # reported, nothing tried

    pruned = run_backfill(backfill_options(mysql_url, pg_url, resume=True, prune_inactive=True))
    assert pruned.inactive is not None
    assert pruned.inactive["pruned"] == 1 and pruned.inactive["ownedElsewhere"] == 1
    assert pruned.inactive["orphans"] == 0  # the import's own "x-only" is not the backfill's orphan
    assert pruned.owned_elsewhere == 1 and [q["id"] for q in pruned.quarantined] == [theirs]
    assert "owned by list:owner; not deleted" in pruned.quarantined[0]["reason"]
    stored = table_rows(pg_url)
    assert ours not in stored and stored[theirs] == (
        f"imported copy of {theirs}",
        "list:owner",
        "test-model-8",
    )
    assert rejects(pg_url)[theirs][1] == LEGACY_OWNER


def test_a_source_cannot_claim_rows_through_its_own_metadata(mysql_url, pg_url, tmp_path):
    rows = legacy(mysql_url, 1, 4)
    victim = rows[0]["id"]
    with get_engine(mysql_url).begin() as conn:  # a MySQL row claiming to be an import's
        conn.execute(
            update(memory_items)
            .where(memory_items.c.id == victim)
            .values(metadata={"_memworkSource": "list:victim", "kept": 1})
        )
    ensure_schema(pg_url, TABLE, DIMS)
    run_backfill(backfill_options(mysql_url, pg_url))
    with psycopg.connect(pg_url) as conn:
        metadata = conn.execute(
            f"SELECT metadata FROM {TABLE} WHERE source_memory_id = %s", (victim,)
        ).fetchone()[0]
    assert metadata == {"kept": 1}  # the marker is the writer's, never the source's
    report = run_import(
        ImportOptions(source=list_source(imported([victim]), "list:victim"), database_url=pg_url, apply=True)
    )
    assert report.owned_elsewhere == 1 and report.rows_written == 0
    assert table_rows(pg_url)[victim][1] is None


def test_rows_without_a_marker_are_the_backfills(mysql_url, pg_url):
    """A row written before the marker existed (or by hand) counts as the backfill's: an import never
    overwrites it, the backfill updates it (and it stays unmarked)."""
    rows = legacy(mysql_url, 1, 3)
    key = rows[0]["id"]
    ensure_schema(pg_url, TABLE, DIMS)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (user_id, content, embedding, source_memory_id) "
            "VALUES ('u', 'old', %s, %s)",
            (str(vec(1)), key),
        )
    report = run_import(
        ImportOptions(source=list_source(imported([key]), "list:new"), database_url=pg_url, apply=True)
    )
    assert report.owned_elsewhere == 1 and table_rows(pg_url)[key][0] == "old"
    assert run_backfill(backfill_options(mysql_url, pg_url)).owned_elsewhere == 0
    assert table_rows(pg_url)[key] == (rows[0]["content"], None, f"hash-{DIMS}")


def test_another_sources_reject_survives_the_owners_rewrite(mysql_url, pg_url):
    rows = legacy(mysql_url, 1, 3)
    key = rows[0]["id"]
    ensure_schema(pg_url, TABLE, DIMS)
    run_backfill(backfill_options(mysql_url, pg_url))
    run_import(
        ImportOptions(source=list_source(imported([key]), "list:loser"), database_url=pg_url, apply=True)
    )
    assert key in rejects(pg_url)
    run_backfill(backfill_options(mysql_url, pg_url))  # rewrites its own row (a new run from the start)
    assert key in rejects(pg_url)  # the import still could not write it: its reject stays
    assert rejects(pg_url)[key][1] == "list:loser"


def test_an_import_may_not_use_the_backfills_owner_name(pg_url):
    ensure_schema(pg_url, TABLE, DIMS)
    with pytest.raises(UsageError, match="reserved for the MySQL backfill"):
        run_import(
            ImportOptions(source=list_source(imported(["a"]), LEGACY_OWNER), database_url=pg_url, apply=True)
        )
    assert table_rows(pg_url) == {}


def test_the_smoke_check_neither_overwrites_nor_deletes_another_sources_row(pg_url, monkeypatch):
    from memwork.rollout import smoke

    run_id = "feedc0ffee"
    monkeypatch.setattr(smoke, "uuid", SimpleNamespace(uuid4=lambda: uuid.UUID(run_id + "0" * 22)))
    ensure_schema(pg_url, TABLE, 3)
    held = f"memory-v2-smoke-{run_id}-0"
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (user_id, content, embedding, source_memory_id, metadata) "
            "VALUES ('u', 'not the smoke''s', '[0,0,1]', %s, '{\"_memworkSource\": \"list:other\"}')",
            (held,),
        )
    report = smoke.run_smoke(pg_url, table=TABLE, dimensions=3)
    assert not report.ok and {"check": "insert", "ok": False, "rows": 2} in report.checks
    assert report.cleaned == 2
    assert table_rows(pg_url) == {held: ("not the smoke's", "list:other", None)}


# ---- racing an uncommitted write: the check is in the writing statement ---------------------------


def _hold_uncommitted_row(conn: psycopg.Connection[Any], key: str, owner: str) -> None:
    conn.execute(
        f"INSERT INTO {TABLE} (user_id, content, embedding, source_memory_id, metadata) "
        "VALUES ('first', 'the first writer''s', %s, %s, jsonb_build_object('_memworkSource', %s::text))",
        (str(vec(0)), key, owner),
    )


WAITING = "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"


@pytest.mark.slow
def test_an_import_racing_another_sources_uncommitted_row_does_not_overwrite_it(pg_url, tmp_path):
    ensure_schema(pg_url, TABLE, DIMS)
    env = file_env(tmp_path, imported(["raced", "free"]), "file:second")
    with psycopg.connect(pg_url) as holder:
        _hold_uncommitted_row(holder, "raced", "file:first")  # not visible to a read made before the write
        proc = start(env, import_args(FILE_SOURCE, pg_url, vectors="keep"))
        with psycopg.connect(pg_url, autocommit=True) as watch:
            wait_until(watch, WAITING, 1, [proc])  # the import's upsert waits on this transaction
        holder.commit()
    code, report = finish(proc)
    assert table_rows(pg_url)["raced"] == ("the first writer's", "file:first", None)
    reason, source_key = rejects(pg_url)["raced"]
    assert source_key == "file:second" and "owned by file:first" in reason
    assert code == OWNED_ELSEWHERE_EXIT and report["ownedElsewhere"] == 1 and report["rowsWritten"] == 1


@pytest.mark.slow
def test_a_backfill_racing_an_imports_uncommitted_row_does_not_overwrite_it(mysql_url, pg_url, tmp_path):
    rows = legacy(mysql_url, 1, 5)
    ensure_schema(pg_url, TABLE, DIMS)
    key = rows[2]["id"]
    with psycopg.connect(pg_url) as holder:
        _hold_uncommitted_row(holder, key, "file:first")
        proc = start({"MEMWORK_HOME": str(tmp_path / "h")}, backfill_cli_args(mysql_url, pg_url))
        with psycopg.connect(pg_url, autocommit=True) as watch:
            wait_until(watch, WAITING, 1, [proc])
        holder.commit()
    code, report = finish(proc)
    assert table_rows(pg_url)[key] == ("the first writer's", "file:first", None)
    assert rejects(pg_url)[key][1] == LEGACY_OWNER
    assert code == OWNED_ELSEWHERE_EXIT and report["ownedElsewhere"] == 1 and report["rowsWritten"] == 4


# ---- two real processes at once ------------------------------------------------------------------


@pytest.mark.slow
def test_a_backfill_and_an_import_at_once_each_row_has_one_owner_and_every_conflict_is_quarantined(
    mysql_url, pg_url, tmp_path
):
    rows = in_backfill_order(legacy(mysql_url, 10, 40, seed=3))  # 400 MySQL rows
    mysql_content = {r["id"]: r["content"] for r in rows}
    shared = [r["id"] for r in rows[:300]]  # the import carries 300 of them, in the backfill's order
    only_imported = [f"imp-{i:04d}" for i in range(60)]
    order = [
        key for pair in zip(shared, [*only_imported, *[None] * 300], strict=False) for key in pair if key
    ]
    env = file_env(tmp_path, imported(order), "file:concurrent")
    ensure_schema(pg_url, TABLE, DIMS)

    with psycopg.connect(pg_url) as gate:  # both start writing at the same moment
        gate.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")
        importer = start(env, import_args(FILE_SOURCE, pg_url, vectors="keep"))
        backfill = start({"MEMWORK_HOME": str(tmp_path / "h")}, backfill_cli_args(mysql_url, pg_url))
        with psycopg.connect(pg_url, autocommit=True) as watch:
            waiting = (
                "SELECT count(*) FROM pg_locks WHERE relation = "
                f"'{TABLE}'::regclass AND mode = 'RowExclusiveLock' AND NOT granted"
            )
            assert wait_until(watch, waiting, 2, [importer, backfill]) == 2
        gate.commit()
    import_code, import_report = finish(importer)
    backfill_code, backfill_report = finish(backfill)

    stored = table_rows(pg_url)
    assert len(stored) == len(rows) + len(only_imported)  # every id once (the unique index)
    quarantine = rejects(pg_url)
    import_owned = {key for key, (_, owner, _) in stored.items() if owner == "file:concurrent"}
    backfill_owned = {key for key, (_, owner, _) in stored.items() if owner is None}
    assert import_owned | backfill_owned == set(stored) and not import_owned & backfill_owned
    for key in shared:  # each shared id: the owner's own copy, and the other side's quarantine
        content, _owner, model = stored[key]
        if key in import_owned:
            assert (content, model) == (f"imported copy of {key}", "test-model-8"), key
            assert quarantine[key][1] == LEGACY_OWNER and "owned by file:concurrent" in quarantine[key][0]
        else:
            assert (content, model) == (mysql_content[key], f"hash-{DIMS}"), key
            assert quarantine[key][1] == "file:concurrent" and "owned by mysql-backfill" in quarantine[key][0]
    assert set(quarantine) == set(shared)
    assert set(only_imported) <= import_owned and {r["id"] for r in rows[300:]} <= backfill_owned

    conflicts = import_report["ownedElsewhere"] + backfill_report["ownedElsewhere"]
    assert conflicts == len(shared)
    assert import_report["rowsWritten"] == len(import_owned) == import_report["checkpoint"]["rowsWritten"]
    assert backfill_report["rowsWritten"] == len(backfill_owned)
    assert import_code == (OWNED_ELSEWHERE_EXIT if import_report["ownedElsewhere"] else 0)
    assert backfill_code == (OWNED_ELSEWHERE_EXIT if backfill_report["ownedElsewhere"] else 0)
    verified = memwork_cli(env, *verify_args(FILE_SOURCE, pg_url), "--allow-quarantined")
    assert verified.json["verdict"] == "PASS", verified.json["reasons"]
