"""The one verification (the migration certificate) of the legacy table's migration against real
embedded PostgreSQL + pgvector, from SQLite and MariaDB (the source ``legacy-mysql``)."""

from __future__ import annotations

import pytest

from memwork.certify import CertifyOptions, certify
from memwork.certify.parameters import VerifyParameters, verify_from_parameters
from memwork.db import pg_connect
from memwork.errors import UsageError
from memwork.samples.migration import build_migration


def _options(m, **kw) -> CertifyOptions:
    base = {"users_per_bucket": 4, "queries_per_user": 2}
    return CertifyOptions(
        source="legacy-mysql",
        env={"MEMORY_BACKFILL_MYSQL_URL": m.source_url},
        dest_url=m.dest_url,
        table=m.table,
        expected_dimensions=m.dimensions,
        **(base | kw),
    )


@pytest.fixture
def migration(pg_url, sqlite_url):
    return build_migration(sqlite_url, pg_url, n_users=4, items_per_user=30, dimensions=16, seed=3)


def test_intact_destination_passes_every_gate(migration):
    cert = certify(_options(migration, leaf=20, k=5))
    assert cert.verdict == "PASS", cert.reasons()
    assert cert.rows.source_rows == migration.active == cert.rows.dest_rows
    assert cert.rows.bad == [] and cert.rows.buckets_compared == 0
    assert cert.vectors.dimensions == {"16": migration.active}
    assert cert.vectors.models == {"hash-16": migration.active}
    assert cert.vectors.checked > 0 and cert.vectors.findings == []
    assert cert.retrieval is not None
    assert all(b.recall is not None and b.recall >= 0.9 for b in cert.retrieval.buckets.values() if b.queries)
    gates = cert.summary()["gates"]
    assert [g["state"] for g in gates] == ["pass"] * 4 + ["off"]
    assert gates[-1]["name"] == "preserved" and "cannot search" in gates[-1]["why"]  # legacy ranks by recency


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
    cert = certify(_options(migration, leaf=20, k=5))
    assert cert.verdict == "FAIL"
    named = {(b.key, b.kind) for b in cert.rows.bad}
    assert named == {(removed, "missing"), (changed, "changed")}
    assert next(b.fields for b in cert.rows.bad if b.kind == "changed").keys() == {"content"}
    text = " | ".join(cert.reasons())
    for expected in ("rows: missing: 1", removed, "rows: changed: 1", changed, "vectors: wrong-dimension: 1"):
        assert expected in text, text
    assert reshaped in text and cert.vectors.dimensions["3"] == 1
    assert "retrieval: not measured: 1 vector(s) of another dimension" in text  # a search would fail
    assert "{" not in text  # read by people
    assert cert.rows.bad_users == sorted({b.user for b in cert.rows.bad})


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
    cert = certify(_options(migration, vector_sample=5, retrieval=False))
    text = " | ".join(cert.reasons())
    assert "vectors: zero-vector: 1 vector(s)" in text and "vectors: mixed-models: 1 user(s)" in text
    assert "vectors: other-model: 1 vector(s)" in text and "{" not in text
    assert [(b.key, b.kind) for b in cert.rows.bad] == [("zzz-extra", "extra")] and "rows: extra: 1" in text
    # every vector checked: the zero vector is named once, as zero, never also as another model's
    every = certify(_options(migration, vector_sample=None, retrieval=False))
    kinds = sorted(f.kind for f in every.vectors.findings)
    assert kinds == ["other-model", "zero-vector"], every.vectors.findings


def test_from_mariadb(pg_url, mysql_url):
    m = build_migration(mysql_url, pg_url, n_users=3, items_per_user=20, dimensions=8, seed=5)
    assert certify(_options(m, k=5)).verdict == "PASS"


def test_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="k=0"):
        CertifyOptions(dest_url="pg://embedded", k=0).check()
    with pytest.raises(UsageError, match="min_recall"):
        CertifyOptions(dest_url="pg://embedded", min_recall=1.5).check()
    with pytest.raises(UsageError, match="table"):
        CertifyOptions(dest_url="pg://embedded", table="x; drop").check()
    with pytest.raises(UsageError, match="page_size"):
        CertifyOptions(source="qdrant", page_size=0).check()


def test_verify_from_parameters_builds_a_sample_when_no_url_is_given():
    """The notebook's standalone default: no URL -> the sample migration the notebook hands in."""

    def run(**kw):
        return verify_from_parameters(VerifyParameters(**kw), sample_migration=build_migration)

    cert = run(sample_size=5, k=3, range_size=50, users_per_bucket=2)
    assert cert.verdict == "PASS", cert.reasons()
    assert cert.notes[0].startswith("built a sample migration:") and cert.rows.source_rows > 0
    with pytest.raises(UsageError, match="source_url=''"):
        run(pgvector_url="pg://embedded")
    with pytest.raises(UsageError, match="expected_dimensions=20000"):
        run(expected_dimensions=20000)
    with pytest.raises(UsageError, match="range_size=0"):
        run(range_size=0)
    with pytest.raises(UsageError, match="tolerances='missing'"):
        run(tolerances="missing")


def test_verify_certify_and_import_verify_are_one_command():
    """One command under three names: the same options and the same call."""
    import click
    from click.testing import CliRunner

    from memwork.cli import main

    ctx = click.Context(main)
    verify, *aliases = (main.get_command(ctx, n) for n in ("verify", "certify", "import-verify"))
    assert all(a.callback is verify.callback and a.params is verify.params for a in aliases)
    opts = {o for p in verify.params for o in p.opts}
    for old in ("--source-url", "--database-url", "--sample-size", "--range-size", "--batch-size"):
        assert old in opts, old  # the flags of both earlier verifications still parse
    refused = CliRunner().invoke(main, ["verify", "--from", "qdrant", "--to", "pg://embedded", "--self-test"])
    assert refused.exit_code == 2 and "legacy-mysql copy only" in refused.output
