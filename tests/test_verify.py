"""The one verification of the legacy table's migration against real embedded PostgreSQL + pgvector,
from SQLite and MariaDB (the source ``legacy-mysql``, read through the source)."""

from __future__ import annotations

import pytest

from memwork.db import pg_connect
from memwork.errors import UsageError
from memwork.migrate.verify import VerifyOptions, VerifyParameters, verify, verify_from_parameters
from memwork.migrate.verify_checks import range_checksums, row_digest
from memwork.samples.migration import build_migration


def _options(m, **kw) -> VerifyOptions:
    return VerifyOptions(
        "legacy-mysql",
        {"MEMORY_BACKFILL_MYSQL_URL": m.source_url},
        m.dest_url,
        table=m.table,
        expected_dimensions=m.dimensions,
        **kw,
    )


@pytest.fixture
def migration(pg_url, sqlite_url):
    return build_migration(sqlite_url, pg_url, n_users=4, items_per_user=30, dimensions=16, seed=3)


def test_intact_destination_passes_every_check(migration):
    result = verify(_options(migration, range_size=20, sample_size=20, k=5))
    assert result.verdict == "PASS", result.reasons
    assert result.source_rows == migration.active == result.dest_distinct
    assert result.missing_count == result.extra_count == result.changed_count == 0
    assert len(result.ranges) > 3 and not result.mismatched_ranges
    assert result.dimensions == {"16": migration.active} and result.models == {"hash-16": migration.active}
    assert result.recall_at_k is not None and result.recall_at_k >= 0.9
    assert result.self_retrieval is not None and result.self_retrieval >= 0.9


def test_damaged_destination_fails_and_names_each_damage(migration):
    with pg_connect(migration.dest_url, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1")]
        removed, changed, reshaped = ids[3], ids[40], ids[70]
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = %s", (removed,))
        conn.execute(
            "UPDATE memory_embeddings SET content = content || ' (edited)' WHERE source_memory_id = %s",
            (changed,),
        )
        # a wrong-dimension vector can only exist in an untyped column without a vector index
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_embeddings' AND indexdef ~* 'hnsw'"
        ).fetchall():
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("ALTER TABLE memory_embeddings ALTER COLUMN embedding TYPE vector")
        conn.execute(
            "UPDATE memory_embeddings SET embedding = '[1,2,3]' WHERE source_memory_id = %s", (reshaped,)
        )
    result = verify(_options(migration, range_size=20, sample_size=10, k=5))
    assert result.verdict == "FAIL"
    assert result.missing_ids == [removed] and result.changed_ids == [changed] and result.extra_ids == []
    text = " | ".join(result.reasons)
    for expected in ("count:", "missing: 1", removed, "changed: 1", changed, "checksum:", "dimensions:"):
        assert expected in text
    assert result.dimensions["3"] == 1
    assert "not of dimension 16 (dimension 3: 1 row)" in text and "{" not in text  # read by people
    assert len(result.mismatched_ranges) == 2  # the two ranges holding the removed and changed rows


def test_zero_vectors_mixed_models_and_extra_rows_are_reasons(migration):
    with pg_connect(migration.dest_url, autocommit=True) as conn:
        first = conn.execute("SELECT id FROM memory_embeddings ORDER BY id LIMIT 1").fetchone()[0]
        zero = "[" + ",".join(["0"] * 16) + "]"
        conn.execute("UPDATE memory_embeddings SET embedding = %s WHERE id = %s", (zero, first))
        conn.execute(
            "UPDATE memory_embeddings SET embedding_model = 'other-model' WHERE id = %s", (first + 1,)
        )
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, embedding_model, source_memory_id) "
            "SELECT user_id, content, embedding, embedding_model, 'zzz-extra' FROM memory_embeddings "
            "WHERE id = %s",
            (first + 2,),
        )
    result = verify(_options(migration, sample_size=5))
    text = " | ".join(result.reasons)
    assert "1 zero vectors" in text and "mixed embedding models (hash-16: " in text
    assert "other-model: 1 row" in text and "{" not in text
    assert result.extra_ids == ["zzz-extra"] and "extra: 1" in text


def test_from_mariadb(pg_url, mysql_url):
    m = build_migration(mysql_url, pg_url, n_users=3, items_per_user=20, dimensions=8, seed=5)
    assert verify(_options(m, sample_size=10, k=5)).verdict == "PASS"


def test_range_checksums_locate_a_change_without_scanning_other_ranges():
    source = {f"id{i:03d}": row_digest([f"id{i:03d}", "u", f"text {i}", "fact"]) for i in range(100)}
    dest = dict(source)
    dest["id042"] = row_digest(["id042", "u", "tampered", "fact"])
    ranges = range_checksums(source, dest, 10)
    assert [r.index for r in ranges if not r.ok] == [4]


def test_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="k=0"):
        VerifyOptions("legacy-mysql", {}, "pg://embedded", k=0).check()
    with pytest.raises(UsageError, match="min_recall"):
        VerifyOptions("legacy-mysql", {}, "pg://embedded", min_recall=1.5).check()
    with pytest.raises(UsageError, match="table"):
        VerifyOptions("legacy-mysql", {}, "pg://embedded", table="x; drop").check()


def test_verify_from_parameters_builds_a_sample_when_no_url_is_given():
    """The notebook's standalone default: no URL -> the sample migration the notebook hands in."""

    def run(**kw):
        return verify_from_parameters(VerifyParameters(**kw), sample_migration=build_migration)

    result = run(sample_size=5, k=3, range_size=50)
    assert result.verdict == "PASS", result.reasons
    assert result.notes[0].startswith("built a sample migration:") and result.source_rows > 0
    with pytest.raises(UsageError, match="source_url=''"):
        run(pgvector_url="pg://embedded")
    with pytest.raises(UsageError, match="expected_dimensions=20000"):
        run(expected_dimensions=20000)
