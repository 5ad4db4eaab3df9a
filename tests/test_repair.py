"""Repair -> re-verify on real servers: MariaDB or SQLite legacy table -> embedded PostgreSQL + pgvector.

A copy is damaged (missing row, changed content, changed user, a stale vector, an extra row, a row
archived at the source), the certificate names the keys, the repair's dry run writes nothing, the
applied repair re-copies exactly those keys, and a second certificate passes. A failed key whose
destination row another source owns is quarantined and named, never overwritten.
"""

from __future__ import annotations

import json
from datetime import datetime

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from memwork.certify import CertifyOptions, certify
from memwork.certify.repair import apply_repair, plan_repair, read_repairs, run_repair
from memwork.cli import main
from memwork.db import get_engine
from memwork.errors import UsageError
from memwork.migrate.backfill import legacy_options
from memwork.migrate.quarantine import read_rejects
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration

DIMS = 16
OTHER = "qdrant:http://elsewhere/collection"


@pytest.fixture(params=["mysql", "sqlite"])
def migration(request, pg_url):
    source = (
        request.getfixturevalue("mysql_url")
        if request.param == "mysql"
        else request.getfixturevalue("sqlite_url")
    )
    rows = generate_legacy_items(5, 12, seed=11, now=datetime(2026, 6, 1))
    return build_migration(source, pg_url, rows=rows, dimensions=DIMS)


def _libpq(url):
    from memwork.db.embedded import ensure

    return ensure(url, create=True).libpq


def _pg(m):
    return psycopg.connect(_libpq(m.dest_url), autocommit=True)


def _certify(m, **kw):
    return certify(CertifyOptions(m.source_url, m.dest_url, table=m.table, retrieval=False, leaf=4, **kw))


def _options(m, *, apply=False):
    return legacy_options(m.source_url, m.dest_url, apply=apply, table=m.table)


def _snapshot(m):
    with _pg(m) as conn:
        return conn.execute(
            "SELECT source_memory_id, user_id, content, embedding::text, metadata::text "
            f"FROM {m.table} ORDER BY 1"
        ).fetchall()


def _damage(m):
    """Plant one of each repairable damage; returns {key: kind planted}."""
    with _pg(m) as conn:
        keys = [r[0] for r in conn.execute(f"SELECT source_memory_id FROM {m.table} ORDER BY 1 LIMIT 6")]
        users = [r[0] for r in conn.execute(f"SELECT DISTINCT user_id FROM {m.table} ORDER BY 1")]
        missing, changed, moved, stale, archived, partner = keys
        conn.execute(f"DELETE FROM {m.table} WHERE source_memory_id = %s", (missing,))
        conn.execute(
            f"UPDATE {m.table} SET content = content || ' (edited)' WHERE source_memory_id = %s", (changed,)
        )
        owner = conn.execute(
            f"SELECT user_id FROM {m.table} WHERE source_memory_id = %s", (moved,)
        ).fetchone()
        other = next(u for u in users if u != owner[0])
        conn.execute(f"UPDATE {m.table} SET user_id = %s WHERE source_memory_id = %s", (other, moved))
        conn.execute(
            f"UPDATE {m.table} SET embedding = (SELECT embedding FROM {m.table} WHERE source_memory_id = %s) "
            "WHERE source_memory_id = %s",
            (partner, stale),
        )
        conn.execute(
            f"INSERT INTO {m.table} (user_id, content, embedding, embedding_model, source_memory_id) "
            f"SELECT user_id, content, embedding, embedding_model, 'not-in-source' FROM {m.table} LIMIT 1"
        )
    with get_engine(m.source_url).begin() as sconn:
        sconn.execute(
            text("UPDATE h5_user_memory_items SET status = 'archived' WHERE id = :k"), {"k": archived}
        )
    return {
        missing: "write",
        changed: "write",
        moved: "write",
        stale: "write",
        "not-in-source": "delete",
        archived: "delete",
    }


def test_repair_clears_every_failed_key_and_a_second_certificate_passes(migration, tmp_path):
    planted = _damage(migration)
    first = _certify(migration)
    assert first.verdict == "FAIL"
    assert set(planted) <= {b.key for b in first.rows.bad} | {f.key for f in first.vectors.findings}

    before = _snapshot(migration)
    dry = run_repair(first.run_id, _options(migration))
    assert dry.mode == "dry-run" and dry.repair_run_id is None
    assert {i.key: i.action for i in dry.plan.items} == planted
    assert _snapshot(migration) == before  # the dry run wrote nothing
    with _pg(migration) as conn:
        assert read_repairs(conn, first.run_id) == []

    done = apply_repair(plan_repair(first.run_id, _options(migration, apply=True)))
    assert sorted(done.written) == sorted(k for k, a in planted.items() if a == "write")
    assert sorted(done.deleted) == sorted(k for k, a in planted.items() if a == "delete")
    assert done.quarantined == [] and done.owned_elsewhere == 0

    second = _certify(migration)
    assert second.verdict == "PASS", second.gates
    with _pg(migration) as conn:
        audit = read_repairs(conn, first.run_id)
    assert [a["repairRunId"] for a in audit] == [done.repair_run_id]
    assert audit[0]["actions"] == planted and audit[0]["written"] == 4 and audit[0]["deleted"] == 2
    json.dumps(done.to_dict())  # the --json report


def test_a_row_owned_by_another_source_is_quarantined_not_overwritten(migration):
    with _pg(migration) as conn:
        taken = conn.execute(f"SELECT source_memory_id FROM {migration.table} ORDER BY 1 LIMIT 1").fetchone()[
            0
        ]
        conn.execute(
            f"UPDATE {migration.table} SET content = 'theirs', "
            "metadata = jsonb_build_object('_memworkSource', %s::text) WHERE source_memory_id = %s",
            (OTHER, taken),
        )
        changed = conn.execute(
            f"SELECT source_memory_id FROM {migration.table} ORDER BY 1 OFFSET 1 LIMIT 1"
        ).fetchone()[0]
        conn.execute(f"UPDATE {migration.table} SET content = 'x' WHERE source_memory_id = %s", (changed,))
    first = _certify(migration)
    assert {(b.key, b.kind) for b in first.rows.bad} == {(taken, "missing"), (changed, "changed")}

    plan = plan_repair(first.run_id, _options(migration, apply=True))
    actions = {i.key: (i.action, i.dest_owner) for i in plan.items}
    assert actions == {taken: ("quarantine", OTHER), changed: ("write", "mysql-backfill")}
    done = apply_repair(plan)
    assert done.written == [changed] and done.owned_elsewhere == 1
    assert done.quarantined[0]["id"] == taken and OTHER in done.quarantined[0]["reason"]
    with _pg(migration) as conn:
        content = conn.execute(
            f"SELECT content, metadata->>'_memworkSource' FROM {migration.table} WHERE source_memory_id = %s",
            (taken,),
        ).fetchone()
        rejects = {r["id"]: r for r in read_rejects(conn, migration.table)}
    assert content == ("theirs", OTHER)  # never overwritten
    assert rejects[taken]["runId"] == done.repair_run_id
    second = _certify(migration)
    assert {(b.key, b.kind) for b in second.rows.bad} == {(taken, "quarantined")}  # a person decides


def test_cli_dry_run_apply_json_and_unknown_run(migration):
    planted = _damage(migration)
    first = _certify(migration)
    base = ["backfill", "--mysql-url", migration.source_url, "--to", migration.dest_url]
    before = _snapshot(migration)

    unknown = CliRunner().invoke(main, [*base, "--repair", "cert-nope"])
    assert unknown.exit_code == 2 and "repair='cert-nope'" in unknown.output
    assert len(unknown.output.strip().splitlines()) == 1

    dry = CliRunner().invoke(main, [*base, "--repair", first.run_id], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert "dry run: nothing written" in dry.output and all(k in dry.output for k in planted)
    assert _snapshot(migration) == before

    applied = CliRunner().invoke(
        main,
        [
            "import",
            "--from",
            "legacy-mysql",
            "--set",
            f"MEMORY_BACKFILL_MYSQL_URL={migration.source_url}",
            "--to",
            migration.dest_url,
            "--repair",
            first.run_id,
            "--apply",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert applied.exit_code == 0, applied.output
    report = json.loads(applied.output)
    assert report["mode"] == "apply" and report["repairRunId"].startswith("repair-")
    assert report["certificateRunId"] == first.run_id
    assert report["planned"] == {"write": 4, "delete": 2, "quarantine": 0, "none": 0}
    assert _certify(migration).verdict == "PASS"


def test_bad_input_is_refused_before_anything_is_written(migration):
    first = _certify(migration)  # a clean copy: nothing recorded under its run id
    with pytest.raises(UsageError, match="no failures recorded"):
        plan_repair(first.run_id, _options(migration, apply=True))
    with pytest.raises(UsageError, match="must name"):
        plan_repair(" ", _options(migration))
    _damage(migration)
    failed = _certify(migration)
    wrong = _options(migration, apply=True)
    wrong.embedder = "hash:8"
    with pytest.raises(UsageError, match="embedder"):
        run_repair(failed.run_id, wrong)
    result = CliRunner().invoke(
        main,
        [
            "backfill",
            "--mysql-url",
            migration.source_url,
            "--to",
            migration.dest_url,
            "--repair",
            failed.run_id,
            "--resume",
        ],
    )
    assert result.exit_code == 2 and "resume" in result.output
