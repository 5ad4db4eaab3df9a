"""verify: PASS on a faithful copy; FAIL naming missing, extra and changed ids, users whose
counts differ (look-alike user ids included), changed vectors and foreign models."""

from __future__ import annotations

import psycopg
import pytest
from import_harness import ListSource
from test_migrate_run import LOOKALIKES, records, vec

from memwork.migrate.run import ImportOptions, run_import
from memwork.migrate.verify import VerifyOptions, verify
from memwork.pgvector.schema import ensure_schema

pytestmark = [pytest.mark.services]


def _imported(pg_url: str, n: int = 60) -> ListSource:
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(n, LOOKALIKES), key="list:verify")
    run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=25))
    return source


def _verify(source: ListSource, pg_url: str):
    return verify(VerifyOptions(source=source, database_url=pg_url, range_size=16))


def test_faithful_copy_passes(pg_url):
    result = _verify(_imported(pg_url), pg_url)
    assert result.verdict == "PASS", result.reasons
    assert (result.source_rows, result.dest_rows, result.source_users) == (60, 60, 3)
    assert result.models == {"src-model": 60} and result.dimensions == {"8": 60}
    assert result.ranges_total == 4 and result.ranges_mismatched == 0


def test_damage_is_named_by_id_and_by_user(pg_url):
    source = _imported(pg_url)
    with psycopg.connect(pg_url) as conn:
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id IN ('m0001', 'm0004')")  # tenantx
        conn.execute("UPDATE memory_embeddings SET content = 'tampered' WHERE source_memory_id = 'm0009'")
        conn.execute("UPDATE memory_embeddings SET user_id = 'tenantx' WHERE source_memory_id = 'm0002'")
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, source_memory_id, metadata) "
            "VALUES ('TenantX', 'foreign', %s, 'm9999', '{\"_memworkSource\": \"list:verify\"}')",
            (str(vec(5)),),
        )
    result = _verify(source, pg_url)
    assert result.verdict == "FAIL"
    assert result.missing_ids == ["m0001", "m0004"] and result.extra_ids == ["m9999"]
    assert result.changed_ids == ["m0002", "m0009"]
    text = "\n".join(result.reasons)
    for needle in ("missing: 2", "m0001", "extra: 1", "m9999", "changed: 2", "m0009", "count: 60"):
        assert needle in text, text
    # m0002 moved from 'tenantx ' to 'tenantx', two 'tenantx' rows deleted, a 'TenantX' row added
    differing = {d["user"]: (d["source"], d["destination"]) for d in result.users_differing}
    assert differing == {"TenantX": (20, 21), "tenantx": (20, 19), "tenantx ": (20, 19)}
    assert any(r.startswith("users: 3 user(s)") and "'tenantx '" in r for r in result.reasons)


def test_changed_vector_and_foreign_model_are_named(pg_url):
    source = _imported(pg_url)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE memory_embeddings SET embedding = %s WHERE source_memory_id = 'm0010'", (str(vec(99)),)
        )
        conn.execute(
            "UPDATE memory_embeddings SET embedding_model = 'other' WHERE source_memory_id = 'm0020'"
        )
    result = _verify(source, pg_url)
    assert result.verdict == "FAIL" and result.changed_ids == []  # content is intact
    assert result.changed_vector_ids == ["m0010"] and result.wrong_model_ids == ["m0020"]
    assert any(r.startswith("vectors: 1") and "m0010" in r for r in result.reasons)
    assert any(r.startswith("models: 1") and "m0020" in r for r in result.reasons)


def test_rows_of_other_writers_in_the_table_are_not_extra(pg_url):
    source = _imported(pg_url)
    with psycopg.connect(pg_url) as conn:  # e.g. the MySQL backfill's rows (no _memworkSource)
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, source_memory_id) "
            "VALUES ('u', 'backfilled', %s, 'legacy-1')",
            (str(vec(1)),),
        )
    assert _verify(source, pg_url).verdict == "PASS"


def test_a_source_that_grew_after_the_import_fails_naming_the_new_ids(pg_url):
    source = _imported(pg_url)
    source.records.extend(records(62, LOOKALIKES)[60:])
    result = _verify(source, pg_url)
    assert result.verdict == "FAIL" and result.missing_ids == ["m0060", "m0061"]
