"""The retrieval gate per size bucket on real servers: users of 1-10, 11-100, 101-1,000 and 1,001+
memories; a real underfill (rows of another model the one-model guard leaves out) and a real recall
failure (a degenerate HNSW index the search path is made to use), each named by its bucket; and each
bucket's own FAIL threshold."""

from __future__ import annotations

from datetime import datetime

import pytest
from click.testing import CliRunner
from pgvector.psycopg import register_vector

from memwork.certify import CertifyOptions, certify
from memwork.certify.retrieval import measure_retrieval
from memwork.db import pg_connect
from memwork.embed import HashEmbedder
from memwork.errors import UsageError
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration

DIMS = 16
SIZES = {"u-small": 5, "u-mid": 12, "u-big": 150, "u-huge": 1100}  #: one user in each size bucket


def _user_rows(user: str, n: int, seed: int) -> list[dict]:
    items = generate_legacy_items(1, n, seed=seed, now=datetime(2026, 6, 1), active_only=True)
    return [{**r, "id": f"{user}-{i:05d}", "user_id": user} for i, r in enumerate(items)]


@pytest.fixture
def sized(pg_url, sqlite_url):
    rows = [r for seed, (user, n) in enumerate(SIZES.items()) for r in _user_rows(user, n, seed)]
    return build_migration(sqlite_url, pg_url, rows=rows, dimensions=DIMS)


def _measure(m, **kw):
    with pg_connect(m.dest_url, autocommit=True) as conn:
        register_vector(conn)
        return measure_retrieval(
            conn, m.dest_url, m.table, embedder=HashEmbedder(DIMS), k=10, queries_per_user=4, **kw
        )


def _options(m, **kw) -> CertifyOptions:
    base = {"queries_per_user": 4, "vector_sample": 0, "k": 10}
    return CertifyOptions(m.source_url, m.dest_url, table=m.table, **(base | kw))


def _degenerate_index(m) -> None:
    """An HNSW graph of m=2, ef_construction=4 that the search path must use: the per-user btree
    dropped and sequential scans priced out for new connections (the production path's pool)."""
    with pg_connect(m.dest_url, autocommit=True) as conn:
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_embeddings' "
            "AND (indexdef ~* 'hnsw' OR indexname = 'memory_embeddings_user_id_idx')"
        ).fetchall():
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute(
            "CREATE INDEX mw_bad_hnsw ON memory_embeddings USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 2, ef_construction = 4)"
        )
        db = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(f'ALTER DATABASE "{db}" SET enable_seqscan = off')


def test_every_size_bucket_is_measured_on_an_intact_copy(sized):
    report = _measure(sized)
    assert set(report.buckets) == {"1-10", "11-100", "101-1,000", "1,001+"}
    for name, bucket in report.buckets.items():
        assert bucket.users == 1 and bucket.queries == 4, name
        assert bucket.recall == 1.0, name
    assert report.buckets["1-10"].fillable == 0  # 5 rows < k: never an underfill
    assert report.buckets["1,001+"].fillable == 4 and report.buckets["1,001+"].underfilled == 0
    assert report.problems == []


def test_rows_of_another_model_underfill_the_answers_and_fail_the_bucket(sized):
    """u-mid has 12 rows; 4 relabelled with another model are left out by the one-model guard, so
    every answer holds 8 < k = 10 rows although the user has 12."""
    with pg_connect(sized.dest_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE memory_embeddings SET embedding_model = 'other-model-v2' WHERE source_memory_id IN "
            "(SELECT source_memory_id FROM memory_embeddings WHERE user_id = 'u-mid' ORDER BY 1 LIMIT 4)"
        )
    report = _measure(sized)
    mid = report.buckets["11-100"]
    assert (mid.fillable, mid.underfilled) == (4, 4)
    assert "underfill: bucket 11-100 4 of 4 answers had fewer than 10 rows" in report.problems
    assert not any("bucket 101-1,000" in p or "bucket 1,001+" in p for p in report.problems)
    cert = certify(_options(sized, tolerances={"other-model": 4}))
    assert cert.verdict == "FAIL"
    assert "underfill: bucket 11-100 4 of 4 answers had fewer than 10 rows" in cert.gates["retrieval"]


def test_a_degenerate_index_fails_recall_and_each_bucket_has_its_own_bar(sized):
    _degenerate_index(sized)
    cert = certify(_options(sized, search="hnsw", max_underfill=1.0))
    failed = [p for p in cert.gates["retrieval"] if p.startswith("recall: bucket ")]
    assert cert.verdict == "FAIL" and failed, cert.gates
    worst = min(cert.retrieval.buckets.items(), key=lambda kv: kv[1].recall)
    assert worst[1].recall < 0.95
    assert any(p.startswith(f"recall: bucket {worst[0]} recall@10") for p in failed)
    # one bar for all at 0, the worst bucket's own bar at 0.95: only that bucket fails
    per_bucket = certify(
        _options(
            sized,
            search="hnsw",
            max_underfill=1.0,
            min_recall=0.0,
            min_recall_by_bucket={worst[0].replace(",", ""): 0.95},
        )
    )
    assert [p.split(" recall@")[0] for p in per_bucket.gates["retrieval"]] == [f"recall: bucket {worst[0]}"]
    assert per_bucket.thresholds["min_recall_by_bucket"] == {worst[0]: 0.95}


def test_per_bucket_bars_are_checked_and_parsed_from_the_cli(sized):
    with pytest.raises(UsageError, match=r"^min_recall='2-9': is not a size bucket"):
        CertifyOptions(min_recall_by_bucket={"2-9": 0.9}).check()
    with pytest.raises(UsageError, match=r"min_recall\[1-10\]"):
        CertifyOptions(min_recall_by_bucket={"1-10": 1.5}).check()
    from memwork.cli import main

    args = [
        "verify",
        "--source-url",
        sized.source_url,
        "--database-url",
        sized.dest_url,
        "--vector-sample",
        "0",
    ]
    bad = CliRunner().invoke(main, [*args, "--min-recall", "1-10=lots"])
    assert bad.exit_code == 2 and "min_recall='1-10=lots'" in bad.output
    bad = CliRunner().invoke(main, [*args, "--min-recall", "7-8=0.9"])
    assert bad.exit_code == 2 and "min_recall='7-8'" in bad.output
    ok = CliRunner().invoke(main, [*args, "--min-recall", "0.9", "--min-recall", "1001+=0.99", "--json"])
    assert ok.exit_code == 0, ok.output
    assert "bucket 1,001+ recall >= 0.99" in ok.output
