"""The migration certificate on real servers: MariaDB or SQLite -> embedded PostgreSQL + pgvector."""

from __future__ import annotations

import json
from datetime import datetime

import psycopg
import pytest
from sqlalchemy import text

from memwork.certify import CertifyOptions, certify
from memwork.certify.failures import read_failures
from memwork.certify.rows import compare_rows
from memwork.certify.selftest import PLANTED_KINDS, self_test
from memwork.certify.sides import Bucket, DestSide, SourceSide
from memwork.db import get_engine
from memwork.errors import UsageError
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration

DIMS = 32
TRICKY_METADATA = {"b": 1.50, "a": [1, "é 用户", None, True, 1e20], "c": {"z": 0, "y": "x\ny\t\u007f"}}


def _rows():
    rows = generate_legacy_items(6, 15, seed=3, now=datetime(2026, 6, 1))
    rows[0]["metadata"] = TRICKY_METADATA
    rows[0]["status"] = "active"
    rows[1]["content"] = "length-prefixed 3:abc \x1f and emoji 🙂"
    rows[1]["status"] = "active"
    return rows


@pytest.fixture(params=["mysql", "sqlite"])
def migration(request, pg_url):
    source = (
        request.getfixturevalue("mysql_url")
        if request.param == "mysql"
        else request.getfixturevalue("sqlite_url")
    )
    return build_migration(source, pg_url, rows=_rows(), dimensions=DIMS)


def _options(m, **kw):
    base = {"users_per_bucket": 3, "queries_per_user": 2}
    base.update(kw)
    return CertifyOptions(m.source_url, m.dest_url, table=m.table, **base)


def _pg(m, sql, params=()):
    with psycopg.connect(_libpq(m.dest_url), autocommit=True) as conn:
        conn.execute(sql, params)


def _libpq(url):
    from memwork.db.embedded import ensure

    return ensure(url, create=True).libpq


def test_clean_copy_passes_with_one_checksum_pass(migration, tmp_path):
    cert = certify(_options(migration, output_dir=tmp_path))
    assert cert.verdict == "PASS", cert.gates
    assert cert.rows.source_rows == migration.active
    assert cert.rows.bad == [] and cert.rows.buckets_compared == 0
    assert cert.rows.round_trips <= 5  # per-user checksums on each side, unkeyed rows, the boundary (2)
    assert cert.vectors.checked > 0 and not cert.vectors.findings
    assert cert.retrieval is not None and cert.retrieval.buckets
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["claim"].startswith("All ")


@pytest.mark.parametrize("where", ["sql", "python"])
def test_checksums_agree_across_engines_row_by_row(migration, where):
    """Each row's MD5 of its canonical text, from the source's SQL (or its rows hashed in Python, as on a
    MySQL 8 without JSON_NORMALIZE) and from PostgreSQL's, is the same."""
    source = SourceSide(migration.source_url, checksums=where)
    assert source.checksums_in == where
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        dest = DestSide(conn, migration.table)
        users = source.checksums(Bucket())
        for user in users:
            assert source.row_hashes(Bucket(user)) == dest.row_hashes(Bucket(user))
        assert source.total() == dest.total()


@pytest.mark.parametrize("where", ["sql", "python"])
def test_every_bad_row_is_named_with_its_kind_fields_and_user(migration, tmp_path, where):
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        keys = [
            r[0] for r in conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 6")
        ]
        users = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memory_embeddings ORDER BY 1")]
        row_user = dict(conn.execute("SELECT source_memory_id, user_id FROM memory_embeddings").fetchall())
    missing, content, user, meta, stamp, status = keys
    _pg(migration, "DELETE FROM memory_embeddings WHERE source_memory_id = %s", (missing,))
    _pg(
        migration,
        "UPDATE memory_embeddings SET content = content || '!' WHERE source_memory_id = %s",
        (content,),
    )
    other = next(u for u in users if u != row_user[user])
    _pg(migration, "UPDATE memory_embeddings SET user_id = %s WHERE source_memory_id = %s", (other, user))
    _pg(
        migration, "UPDATE memory_embeddings SET metadata = '{\"x\": 2}' WHERE source_memory_id = %s", (meta,)
    )
    _pg(
        migration,
        "UPDATE memory_embeddings SET created_at = created_at + interval '1 microsecond' "
        "WHERE source_memory_id = %s",
        (stamp,),
    )
    _pg(
        migration,
        "INSERT INTO memory_embeddings (user_id, content, embedding, embedding_model, source_memory_id) "
        "SELECT user_id, content, embedding, embedding_model, 'brand-new' FROM memory_embeddings LIMIT 1",
    )
    with get_engine(migration.source_url).begin() as sconn:
        sconn.execute(
            text("UPDATE h5_user_memory_items SET status = 'archived' WHERE id = :k"), {"k": status}
        )
    cert = certify(_options(migration, leaf=4, retrieval=False, output_dir=tmp_path, source_checksums=where))
    assert cert.verdict == "FAIL" and cert.rows.source_checksums == where
    named = {(b.key, b.kind): b for b in cert.rows.bad}
    assert set(named) == {
        (missing, "missing"),
        (content, "changed"),
        (user, "user-changed"),
        (meta, "changed"),
        (stamp, "changed"),
        ("brand-new", "extra"),
        (status, "status"),
    }
    assert set(named[(content, "changed")].fields) == {"content"}
    assert set(named[(meta, "changed")].fields) == {"metadata"}
    assert set(named[(stamp, "changed")].fields) == {"created_at"}
    assert named[(user, "user-changed")].dest_user == other
    assert cert.gates["rows"][0].startswith("CRITICAL user-changed")
    assert cert.rows.buckets_compared > 0
    assert missing in cert.rows.users[row_user[missing]].missing
    assert user in cert.rows.users[other].changed and user in cert.rows.users[row_user[user]].changed
    with psycopg.connect(_libpq(migration.dest_url)) as conn:
        kept = {(f["key"], f["kind"]) for f in read_failures(conn, cert.run_id)}
    assert set(named) <= kept
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows"]["by_kind"]["user-changed"] == 1 and summary["verdict"] == "FAIL"
    assert summary["rows"]["source_checksums"] == where


def test_source_checksums_auto_takes_sql_where_the_engine_can_and_refuses_nonsense(migration):
    assert SourceSide(migration.source_url).checksums_in == "sql"  # SQLite; MariaDB has JSON_NORMALIZE
    with pytest.raises(UsageError, match="source_checksums"):
        certify(_options(migration, source_checksums="fast"))


def _edit_one_row_live(source_url: str):
    """A live source edits an active row after the run's high-water mark (stamped 2030); its id."""
    with get_engine(source_url).begin() as sconn:
        key = sconn.execute(
            text("SELECT id FROM h5_user_memory_items WHERE status = 'active' LIMIT 1")
        ).scalar()
        sconn.execute(
            text("UPDATE h5_user_memory_items SET content = 'edited live', updated_at = :t WHERE id = :k"),
            {"t": datetime(2030, 1, 1), "k": key},
        )
    return key


def test_rows_changed_after_the_high_water_mark_are_reported_apart(migration):
    source = SourceSide(migration.source_url)
    mark = source.high_water_mark()
    key = _edit_one_row_live(migration.source_url)
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        report = compare_rows(
            source, DestSide(conn, migration.table), high_water_mark=mark, checkpoint_cursor=mark
        )
    assert report.bad == []
    assert [(b.key, b.kind) for b in report.after_boundary] == [(key, "changed")]
    assert report.changed_after_mark == 1 and report.resume_picks_up is True


def test_self_test_names_every_planted_damage_and_fails(migration):
    result = self_test(migration.source_url, migration.dest_url, table=migration.table)
    assert {kind for _, kind in result.planted} == set(PLANTED_KINDS)
    assert result.missed == [], result.lines()
    assert result.unexpected == [], result.lines()
    assert result.verdict == "FAIL" and result.passed
    with psycopg.connect(_libpq(migration.dest_url)) as conn:  # the scratch copy is gone
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'mw_certify_scratch%'"
            ).fetchone()[0]
            == 0
        )


def test_cli_self_test_and_bad_input(migration):
    from click.testing import CliRunner

    from memwork.cli import main

    args = ["certify", "--source-url", migration.source_url, "--database-url", migration.dest_url]
    result = CliRunner().invoke(main, [*args, "--self-test"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "caught: user-changed" in result.output and "self-test PASS" in result.output
    bad = CliRunner().invoke(main, [*args, "--max", "missing"])
    assert bad.exit_code == 2 and "max" in bad.output
    clean = CliRunner().invoke(main, [*args, "--no-retrieval", "--json"], catch_exceptions=False)
    assert clean.exit_code == 0 and '"verdict": "PASS"' in clean.output


def test_one_bad_row_costs_a_logarithmic_number_of_round_trips(migration):
    """With ``leaf=1`` a bad user's bucket is split 16 ways per level until the bad row is alone."""
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        key = conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 1").fetchone()[0]
        conn.execute("UPDATE memory_embeddings SET type = 'note' WHERE source_memory_id = %s", (key,))
        report = compare_rows(SourceSide(migration.source_url), DestSide(conn, migration.table), leaf=1)
    assert [(b.key, b.kind, set(b.fields)) for b in report.bad] == [(key, "changed", {"type"})]
    assert report.bad_users == [next(iter(b.user for b in report.bad))]
    assert report.buckets_compared <= 4  # user -> one hex digit -> (rarely) two -> the row
    assert report.round_trips <= 3 + 2 * report.buckets_compared + 2


def test_index_opclass_hnsw_settings_and_mixed_models_are_checked(migration):
    _pg(migration, "DROP INDEX IF EXISTS memory_embeddings_embedding_hnsw_idx")
    _pg(
        migration,
        "CREATE INDEX mw_ip_idx ON memory_embeddings USING hnsw (embedding vector_ip_ops) "
        "WITH (m = 8, ef_construction = 40)",
    )
    _pg(
        migration,
        "UPDATE memory_embeddings SET embedding_model = 'other-model-v2' "
        "WHERE source_memory_id = (SELECT min(source_memory_id) FROM memory_embeddings)",
    )
    cert = certify(_options(migration, retrieval=False, k=10, ef_search=5))
    index = cert.gates["index"]
    assert any(r.startswith("opclass: index mw_ip_idx (hnsw, vector_ip_ops)") for r in index)
    assert any("ef_search 5 below k 10" in r for r in index)
    assert cert.vectors.index["indexes"][0]["settings"] == {"m": 8, "ef_construction": 40}
    assert cert.vectors.index["pgvector"]
    assert any(r.startswith("mixed-models: 1 user") for r in cert.gates["vectors"])
    assert any(f.kind == "other-model" for f in cert.vectors.findings)


def test_retrieval_is_measured_per_size_bucket_with_underfill(migration):
    cert = certify(_options(migration, k=5, users_per_bucket=10, vector_sample=0))
    assert cert.retrieval is not None
    bucket = cert.retrieval.buckets["11-100"]
    assert bucket.users == 6 and bucket.queries > 0
    assert bucket.recall == 1.0 and bucket.underfill_rate == 0.0
    # a bucket below its threshold is a problem of the gate (a threshold above 1 is refused by
    # CertifyOptions, so the measurement is asked directly)
    from memwork.certify.retrieval import measure_retrieval
    from memwork.embed import HashEmbedder

    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        strict = measure_retrieval(
            conn, migration.dest_url, migration.table, embedder=HashEmbedder(DIMS), k=50, min_recall=1.01
        )
    assert strict.problems and strict.problems[0].startswith("recall: bucket 11-100")


def test_a_source_without_sql_is_checksummed_through_its_listing(migration):
    """A streamed listing (here: the legacy rows read page by page) gives the same per-user sums."""
    from memwork.certify.listing import ListingSide

    def listing():
        with get_engine(migration.source_url).connect() as conn:
            for row in conn.execute(text("SELECT * FROM h5_user_memory_items")).mappings():
                yield {
                    **row,
                    "metadata": row["metadata"]
                    if isinstance(row["metadata"], str | None)
                    else json.dumps(row["metadata"]),
                }

    side = ListingSide(listing)
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        dest = DestSide(conn, migration.table)
        assert compare_rows(side, dest).bad == []
        key = conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 1").fetchone()[0]
        conn.execute(
            "UPDATE memory_embeddings SET source_message_id = 'x' WHERE source_memory_id = %s", (key,)
        )
        report = compare_rows(side, dest, leaf=2)
    assert [(b.key, b.kind, set(b.fields)) for b in report.bad] == [(key, "changed", {"source_message_id"})]


def test_tolerances_turn_a_kind_into_a_pass_but_never_a_user_change(migration):
    _pg(
        migration,
        "DELETE FROM memory_embeddings "
        "WHERE source_memory_id = (SELECT min(source_memory_id) FROM memory_embeddings)",
    )
    assert certify(_options(migration, retrieval=False)).gates["rows"]
    assert certify(_options(migration, retrieval=False, tolerances={"missing": 1})).verdict == "PASS"
    from memwork.errors import UsageError

    with pytest.raises(UsageError, match="max_user-changed"):
        certify(_options(migration, tolerances={"user-changed": 1}))


def test_the_input_fingerprint_tells_a_run_on_other_rows_apart(migration):
    """What a later verification is compared by (reports/history.py): each side's row count and
    table checksum; the same rows give the same fingerprint, one changed row another."""
    from memwork.reports.history import differences, fingerprint

    def run():
        summary = certify(_options(migration, retrieval=False)).summary()
        return summary, fingerprint("backfill_verification", {"k": 10}, summary, "0.1.0")

    first, first_fp = run()
    inputs = first["input_fingerprint"]
    assert inputs["source_rows"] == inputs["dest_rows"] == migration.active
    assert inputs["source_checksum"].startswith("sha256:")
    assert inputs["source_checksum"] == inputs["dest_checksum"]  # the same rows on both sides
    again, again_fp = run()
    assert again["input_fingerprint"] == inputs and differences(again_fp, first_fp) == []
    _pg(migration, "UPDATE memory_embeddings SET content = content || '!' WHERE source_memory_id IN "
        "(SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 1)")  # fmt: skip
    damaged, damaged_fp = run()
    assert damaged["input_fingerprint"]["dest_checksum"] != inputs["dest_checksum"]
    assert damaged["input_fingerprint"]["source_checksum"] == inputs["source_checksum"]
    why = differences(damaged_fp, first_fp)
    assert len(why) == 1 and why[0].startswith("input dest_checksum: "), why


def test_rows_changed_after_the_mark_that_a_resume_would_not_pick_up_are_flagged(migration):
    """An edit stamped after the high-water mark but not after the migration's cursor (a source
    writing an older updated_at than the copy already passed): reported apart, and a ``--resume``
    would NOT re-read it (``resume_picks_up`` False), so it needs a repair."""
    source = SourceSide(migration.source_url)
    mark = source.high_water_mark()
    key = _edit_one_row_live(migration.source_url)
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        report = compare_rows(
            source,
            DestSide(conn, migration.table),
            high_water_mark=mark,
            checkpoint_cursor="2031-01-01 00:00:00.000000",
        )
    assert report.bad == [] and [(b.key, b.kind) for b in report.after_boundary] == [(key, "changed")]
    assert report.resume_picks_up is False


def test_an_nfc_only_difference_is_a_note_end_to_end(migration, tmp_path):
    """The source holds ``café`` composed (NFC), the copy decomposed (NFD): the checksums differ, the
    drill-down finds only an encoding difference -- a note in the certificate, summary.json and the
    CLI, never a bad row."""
    import unicodedata

    composed = "caf\u00e9 au lait, NFC"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        key = conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 1").fetchone()[0]
        conn.execute(
            "UPDATE memory_embeddings SET content = %s WHERE source_memory_id = %s", (decomposed, key)
        )
    with get_engine(migration.source_url).begin() as sconn:
        sconn.execute(
            text("UPDATE h5_user_memory_items SET content = :c WHERE id = :k"), {"c": composed, "k": key}
        )
    cert = certify(_options(migration, retrieval=False, vector_sample=0, output_dir=tmp_path))
    assert cert.rows.bad == [] and cert.gates["rows"] == []
    note = f"encoding: {key} differs only in encoding (Unicode NFC or JSON escapes)"
    assert note in cert.rows.notes
    assert cert.rows.buckets_compared > 0  # the checksums differed: found by the drill-down
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert note in summary["rows"]["notes"]
    from click.testing import CliRunner

    from memwork.cli import main

    args = ["verify", "--source-url", migration.source_url, "--database-url", migration.dest_url]
    shown = CliRunner().invoke(main, [*args, "--no-retrieval", "--vector-sample", "0"])
    assert shown.exit_code == 0, shown.output
    assert f"note: {note}" in shown.output


def test_the_per_user_table_has_both_checksums_and_users_with_only_a_bad_vector(migration, tmp_path):
    with psycopg.connect(_libpq(migration.dest_url), autocommit=True) as conn:
        users = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memory_embeddings ORDER BY 1")]
        row_user, vector_user = users[0], users[1]
        row_key = conn.execute(
            "SELECT min(source_memory_id) FROM memory_embeddings WHERE user_id = %s", (row_user,)
        ).fetchone()[0]
        vector_key = conn.execute(
            "SELECT min(source_memory_id) FROM memory_embeddings WHERE user_id = %s", (vector_user,)
        ).fetchone()[0]
        conn.execute(
            "UPDATE memory_embeddings SET content = content || '!' WHERE source_memory_id = %s", (row_key,)
        )
        # the vector of another content (same dimension and model id): only the vectors gate sees it
        conn.execute(
            "UPDATE memory_embeddings SET embedding = (SELECT embedding FROM memory_embeddings "
            "WHERE user_id <> %s ORDER BY source_memory_id LIMIT 1) WHERE source_memory_id = %s",
            (vector_user, vector_key),
        )
    cert = certify(_options(migration, retrieval=False, vector_sample=None, output_dir=tmp_path))
    assert cert.verdict == "FAIL"
    users = json.loads((tmp_path / "summary.json").read_text())["users"]
    row = users[row_user]
    assert row["changed"] == [row_key] and row["checksums_match"] is False
    assert row["source_checksum"][0] == row["dest_checksum"][0] == row["source"]  # same rows, other sums
    assert row["source_checksum"] != row["dest_checksum"] and len(row["source_checksum"]) == 3
    only_vector = users[vector_user]
    assert only_vector["checksums_match"] is True and only_vector["changed"] == []
    assert only_vector["source_checksum"] == only_vector["dest_checksum"]
    assert [v["key"] for v in only_vector["vectors"]] == [vector_key]
    assert only_vector["vectors"][0]["kind"] in ("swapped", "stale", "other-model")
