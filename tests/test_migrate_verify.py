"""verify of a listed source (its records mapped as the importer writes them): PASS on a faithful copy;
FAIL naming missing, extra, changed and user-changed ids per user (look-alike user ids included),
vectors that are not the source's and foreign models."""

from __future__ import annotations

import psycopg
import pytest
from import_harness import ListSource
from test_migrate_run import LOOKALIKES, records, vec

from memwork.certify import CertifyOptions, certify
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema

pytestmark = [pytest.mark.services]


def _imported(pg_url: str, n: int = 60) -> ListSource:
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(n, LOOKALIKES), key="list:verify")
    run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=25))
    return source


def _verify(source: ListSource, pg_url: str):
    return certify(CertifyOptions(dest_url=pg_url, source=source, leaf=16, users_per_bucket=3))


def test_faithful_copy_passes(pg_url):
    cert = _verify(_imported(pg_url), pg_url)
    assert cert.verdict == "PASS", cert.reasons()
    assert (cert.rows.source_rows, cert.rows.dest_rows, len(cert.rows.users)) == (60, 60, 3)
    assert cert.vectors.models == {"src-model": 60} and cert.vectors.dimensions == {"8": 60}
    assert cert.vectors_mode == "keep" and cert.vectors.checked == 60  # each the source's own
    assert cert.rows.buckets_compared == 0 and cert.source_key == "list:verify"
    assert cert.claim().startswith("All 60 active list rows of 3 users")


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
    cert = _verify(source, pg_url)
    assert cert.verdict == "FAIL"
    named = sorted((b.kind, b.key) for b in cert.rows.bad)
    assert named == [
        ("changed", "m0009"),
        ("extra", "m9999"),
        ("missing", "m0001"),
        ("missing", "m0004"),
        ("user-changed", "m0002"),
    ]
    fields = {b.key: b.fields for b in cert.rows.bad}
    assert fields["m0009"] == {"content": {"source": "memory number 9 about topic 0", "dest": "tampered"}}
    assert fields["m0002"] == {"user": {"source": "tenantx ", "dest": "tenantx"}}
    text = "\n".join(cert.reasons())
    for needle in (
        "missing: 2",
        "m0001",
        "extra: 1",
        "m9999",
        "changed: 1",
        "m0009",
        "CRITICAL user-changed",
    ):
        assert needle in text, text
    # m0002 moved from 'tenantx ' to 'tenantx', two 'tenantx' rows deleted, a 'TenantX' row added
    differing = {u: (t.source, t.dest) for u, t in cert.rows.users.items() if not t.ok}
    assert differing == {"TenantX": (20, 21), "tenantx": (20, 19), "tenantx ": (20, 19)}
    assert cert.rows.bad_users == ["TenantX", "tenantx", "tenantx "]
    assert cert.repair_command() == f"memwork import --from list --repair {cert.run_id}"


def test_changed_vector_and_foreign_model_are_named(pg_url):
    source = _imported(pg_url)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE memory_embeddings SET embedding = %s WHERE source_memory_id = 'm0010'", (str(vec(99)),)
        )
        conn.execute(
            "UPDATE memory_embeddings SET embedding_model = 'other' WHERE source_memory_id = 'm0020'"
        )
    cert = _verify(source, pg_url)
    assert cert.verdict == "FAIL" and cert.rows.bad == []  # content is intact
    found = sorted((f.kind, f.key) for f in cert.vectors.findings)
    assert found == [("other-model", "m0020"), ("source-vector", "m0010")]
    assert any(r.startswith("vectors: source-vector: 1") and "m0010" in r for r in cert.reasons())
    assert any(r.startswith("vectors: other-model: 1") and "m0020" in r for r in cert.reasons())


def test_rows_of_other_writers_in_the_table_are_not_extra(pg_url):
    source = _imported(pg_url)
    with psycopg.connect(pg_url) as conn:  # e.g. the MySQL backfill's rows (no _memworkSource)
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, source_memory_id) "
            "VALUES ('u', 'backfilled', %s, 'legacy-1')",
            (str(vec(1)),),
        )
    cert = _verify(source, pg_url)
    assert cert.verdict == "PASS", cert.reasons()


def test_a_source_that_grew_after_the_import_fails_naming_the_new_ids(pg_url):
    source = _imported(pg_url)
    source.records.extend(records(62, LOOKALIKES)[60:])
    cert = _verify(source, pg_url)
    assert cert.verdict == "FAIL" and [(b.kind, b.key) for b in cert.rows.bad] == [
        ("missing", "m0060"),
        ("missing", "m0061"),
    ]
