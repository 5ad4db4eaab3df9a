"""The certificate of a semantic source: Qdrant in local mode -> pgvector.

Import with the source's vectors kept, certify PASS with the retrieval-preservation claim (the same
queries on Qdrant's own search and on the destination's production path, per sampled user);
damage the copy, certify FAIL naming the keys, ``import --repair RUN_ID`` as a dry run (nothing
written) then ``--apply``, certify PASS again. A source without ``records_by_id`` is repaired
through a filtered listing; a re-embedded copy is repaired with the table's model. Bad lines of
``queries.jsonl`` exit 2 naming the field and value.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from qdrant_client import QdrantClient, models

from memwork.certify import CertifyOptions, certify
from memwork.certify.preserved import bootstrap_ci, lower_bound, read_queries, sample_users
from memwork.certify.repair import plan_repair, run_repair
from memwork.cli import main
from memwork.errors import UsageError
from memwork.migrate.run import ImportOptions, run_import

COLLECTION = "memind_memory"
DIM = 8
#: users of 1, 4, 9, 16, 25 and 40 memories (sizes across the buckets a sample must span)
SIZES = {"u-tiny": 1, "u-small": 4, "u-mid": 9, "u-16": 16, "u-25": 25, "u-big": 40}


@pytest.fixture
def storage(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The collection (cosine unless a test is parametrized with another ``distance``)."""
    distance = getattr(request, "param", models.Distance.COSINE)
    shm = Path("/dev/shm")
    scratch = (
        Path(tempfile.mkdtemp(prefix="memwork-qcert-", dir=shm)) if os.access(shm, os.W_OK) else tmp_path
    )
    path = scratch / "store"
    client = QdrantClient(path=str(path))
    client.create_collection(COLLECTION, vectors_config=models.VectorParams(size=DIM, distance=distance))
    rng = np.random.default_rng(17)
    points, n = [], 0
    for user, size in SIZES.items():
        for i in range(size):
            n += 1
            points.append(
                models.PointStruct(
                    id=n,
                    vector=[float(x) for x in rng.normal(size=DIM)],
                    payload={
                        "user_id": user,
                        "content": f"memory {i} of {user}",
                        "created_at": 1767323045 + n,
                        "metadata": {"n": n},
                    },
                )
            )
    client.upsert(COLLECTION, points)
    client.close()
    yield path
    if scratch != tmp_path:
        shutil.rmtree(scratch, ignore_errors=True)


def _env(storage: Path) -> dict[str, str]:
    return {
        "MEMORY_QDRANT_URL": f"local:{storage}",
        "MEMORY_QDRANT_COLLECTION": COLLECTION,
        "MEMORY_QDRANT_EMBEDDING_MODEL": "qdrant-test-8",
    }


def _import(storage: Path, pg_url: str, **kw) -> None:
    options = ImportOptions("qdrant", env=_env(storage), database_url=pg_url, apply=True, create_schema=True)
    for name, value in kw.items():
        setattr(options, name, value)
    report = run_import(options)
    assert report.rows_written == sum(SIZES.values()), report.to_dict()


def _certify(storage: Path, pg_url: str, **kw):
    options = dict(source="qdrant", env=_env(storage), k=5, leaf=4, vector_sample=0, preserved_users=4)
    return certify(CertifyOptions("", pg_url, **(options | kw)))


def _pg(pg_url: str):
    from memwork.db.embedded import ensure

    return psycopg.connect(ensure(pg_url, create=True).libpq, autocommit=True)


def _snapshot(pg_url: str):
    with _pg(pg_url) as conn:
        return conn.execute(
            "SELECT source_memory_id, user_id, content, embedding::text, embedding_model "
            "FROM memory_embeddings ORDER BY 1"
        ).fetchall()


def _damage(pg_url: str) -> dict[str, str]:
    """A missing row (u-big), changed content (u-25), a row moved to another user (u-16)."""
    with _pg(pg_url) as conn:
        first = {
            user: conn.execute(
                "SELECT min(source_memory_id::int)::text FROM memory_embeddings WHERE user_id = %s", (user,)
            ).fetchone()[0]
            for user in ("u-big", "u-25", "u-16")
        }
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = %s", (first["u-big"],))
        conn.execute(
            "UPDATE memory_embeddings SET content = content || '!' WHERE source_memory_id = %s",
            (first["u-25"],),
        )
        conn.execute(
            "UPDATE memory_embeddings SET user_id = 'u-tiny' WHERE source_memory_id = %s", (first["u-16"],)
        )
    return {first["u-big"]: "missing", first["u-25"]: "changed", first["u-16"]: "user-changed"}


def test_qdrant_copy_certified_damaged_repaired_and_certified_again(storage, pg_url, tmp_path):
    _import(storage, pg_url, vectors="keep")
    with _pg(pg_url) as conn:  # the table is shared: another source's user is not this one's to sample
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, embedding_model, source_memory_id, "
            "metadata) SELECT 'z-other', content, embedding, embedding_model, 'other-1', "
            """'{"_memworkSource": "qdrant:http://elsewhere/c"}' FROM memory_embeddings LIMIT 1"""
        )
    clean = _certify(storage, pg_url)
    assert clean.verdict == "PASS", clean.reasons()
    preserved = clean.preserved
    assert preserved is not None and preserved.query_source == "content"
    sampled = {u.user for u in preserved.users}
    assert {"u-tiny", "u-16", "u-big"} <= sampled and "z-other" not in sampled  # smallest, median, largest
    assert all(u.overlap == 1.0 and u.rbo == pytest.approx(1.0) for u in preserved.users)
    assert "overlap@5 >= 0.95 for >=" in clean.claim() and f"({len(sampled)} of {len(sampled)} sampled" in (
        clean.claim()
    )
    before = _snapshot(pg_url)

    planted = _damage(pg_url)
    damaged = _certify(storage, pg_url, run_id="cert-qdrant-damaged")
    assert damaged.verdict == "FAIL"
    named = {f["key"]: f["kind"] for f in damaged.failures()}
    assert {k: named.get(k) for k in planted} == planted
    assert damaged.gates["rows"]

    env_args = [f"--set={k}={v}" for k, v in _env(storage).items()]
    base = ["import", "--from", "qdrant", "--to", pg_url, *env_args, "--repair", "cert-qdrant-damaged"]
    dry = CliRunner().invoke(main, [*base, "--json"])
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert plan["mode"] == "dry-run" and plan["planned"]["write"] == 3
    assert plan["fetchedBy"] == "records_by_id" and plan["keptVectors"] == 3  # the source's own vectors
    assert _snapshot(pg_url) != before  # the dry run wrote nothing: still damaged
    applied = CliRunner().invoke(main, [*base, "--apply", "--json"])
    assert applied.exit_code == 0, applied.output
    assert sorted(json.loads(applied.output)["written"]) == sorted(planted)

    assert _snapshot(pg_url) == before  # the source's own vectors and model, back exactly
    again = _certify(storage, pg_url)
    assert again.verdict == "PASS", again.reasons()


class ListingOnly:
    """A source that can only list (no records_by_id, no search): repair falls back to the listing."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name

    @property
    def key(self) -> str:
        return self.inner.key

    def read_page(self, cursor, size):
        return self.inner.read_page(cursor, size)

    def close(self) -> None:
        self.inner.close()


def test_a_source_without_fetch_by_id_is_repaired_through_its_listing(storage, pg_url):
    from memwork.backends.qdrant_points import source_from_env

    _import(storage, pg_url, vectors="reembed", embedder="hash:8")
    planted = _damage(pg_url)
    source = ListingOnly(source_from_env(_env(storage)))
    try:
        cert = certify(
            CertifyOptions("", pg_url, source=source, k=5, leaf=4, vector_sample=0, run_id="cert-listing")
        )
        assert cert.verdict == "FAIL" and cert.preserved is None  # it cannot search
        assert {f["key"] for f in cert.failures()} >= set(planted)
        options = ImportOptions(source, database_url=pg_url)
        plan = plan_repair("cert-listing", options)
        assert plan.fetched_by == "listing" and sorted(plan.keys("write")) == sorted(planted)
        assert plan.model == "hash-8" and not plan.kept  # re-embedded copy: the table's model writes
        options.apply = True
        report = run_repair("cert-listing", options)
        assert sorted(report.written) == sorted(planted)
        again = certify(CertifyOptions("", pg_url, source=source, k=5, leaf=4, vector_sample=50))
        assert again.verdict == "PASS", again.reasons()
    finally:
        source.close()


def test_retrieval_drift_fails_the_preserved_gate_naming_the_user(storage, pg_url):
    """Vectors scrambled within one user: rows still equal, the user's answers no longer the source's."""
    _import(storage, pg_url, vectors="keep")
    with _pg(pg_url) as conn:
        conn.execute(
            "UPDATE memory_embeddings AS d SET embedding = s.embedding FROM memory_embeddings AS s "
            "WHERE d.user_id = 'u-big' AND s.user_id = 'u-big' "
            "AND s.source_memory_id::int = d.source_memory_id::int "
            "+ CASE WHEN d.source_memory_id::int % 2 = 0 THEN -1 ELSE 1 END"
        )
    cert = _certify(storage, pg_url, retrieval=False)
    assert not cert.gates["rows"]
    preserved = cert.preserved
    assert preserved is not None
    big = next(u for u in preserved.users if u.user == "u-big")
    assert not big.passed and big.overlap < 0.95 and big.overlap_ci[0] <= big.overlap <= big.overlap_ci[1]
    assert cert.gates["preserved"] and "u-big" in cert.gates["preserved"][0]
    assert preserved.worst()[0].user == "u-big"
    assert preserved.to_dict()["worst_users"][0]["user"] == "u-big"


def test_queries_file_drives_both_sides_and_checks_expected_ids(storage, pg_url, tmp_path):
    _import(storage, pg_url, vectors="keep")
    with _pg(pg_url) as conn:
        vector, key = conn.execute(
            "SELECT embedding::text, source_memory_id FROM memory_embeddings WHERE user_id = 'u-mid' LIMIT 1"
        ).fetchone()
    lines = [
        {"user": "u-mid", "vector": json.loads(vector), "expected": [key]},
        {"user": "u-big", "vector": [1.0] * DIM},
    ]
    path = tmp_path / "queries.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    cert = _certify(storage, pg_url, queries=path)
    preserved = cert.preserved
    assert preserved is not None and preserved.query_source == "file"
    assert {u.user for u in preserved.users} == {"u-mid", "u-big"}
    assert next(u for u in preserved.users if u.user == "u-mid").expected_found == 1.0
    assert cert.verdict == "PASS", cert.reasons()
    assert cert.retrieval is not None and sum(b.queries for b in cert.retrieval.buckets.values()) == 2
    assert cert.retrieval.expected == {"queries": 1, "expected": 1, "found": 1, "share": 1.0, "missed": []}


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ('{"query": "x"}', "queries.jsonl:2 user", "None"),
        ('{"user": "u", "vector": [1, "a"]}', "queries.jsonl:2 vector", '[1, "a"]'),
        ('{"user": "u"}', "queries.jsonl:2 query", "None"),
        ('{"user": "u", "query": "x", "expected": "k1"}', "queries.jsonl:2 expected", '"k1"'),
        ("not json", "queries.jsonl:2", "not json"),
    ],
)
def test_a_bad_queries_line_exits_2_naming_field_and_value(tmp_path, line, field, value):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"user": "u", "query": "fine"}\n' + line + "\n")
    with pytest.raises(UsageError) as caught:
        read_queries(path)
    assert caught.value.field == field
    result = CliRunner().invoke(
        main,
        ["certify", "--from", "qdrant", "--to", "pg://embedded", "--queries", str(path)],
        env={"MEMORY_QDRANT_URL": "http://127.0.0.1:1"},
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert field in result.output and value in result.output


def test_the_statistics():
    """Clopper-Pearson: 20 of 20 passing bounds the share at 0.05 ** (1/20) at 95 %; 299 of 299 at 0.99."""
    assert lower_bound(20, 20) == pytest.approx(0.05 ** (1 / 20))
    assert lower_bound(299, 299) > 0.99 > lower_bound(298, 298)
    assert lower_bound(0, 10) == 0.0
    from memwork.certify.preserved import users_needed

    assert users_needed(0.99) == 299 and users_needed(0.9) == 29
    low, high = bootstrap_ci([0.8, 1.0, 1.0, 0.9])
    assert 0.8 <= low <= 0.925 <= high <= 1.0
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    sizes = {f"u{i}": i for i in range(1, 101)}
    chosen = sample_users(sizes, 10, seed=1)
    assert len(chosen) == 10 and {"u1", "u51", "u100"} <= set(chosen)


def test_a_reembedding_between_two_pgvector_tables_is_measured_per_side_model(sqlite_url, pg_url):
    """pgvector as the searching source: the old table (hash-16) against its re-embedded copy; the
    sampled content is embedded by each side's own model. The same model on both sides agrees fully."""
    from memwork.backends.pgvector import PgvectorBackend
    from memwork.certify.preserved import Side, measure_preservation, pgvector_search
    from memwork.embed import HashEmbedder
    from memwork.samples.migration import build_migration

    old = build_migration(sqlite_url, pg_url, n_users=6, items_per_user=12, dimensions=16, table="mem_old")
    build_migration(old.source_url, pg_url, n_users=6, items_per_user=12, dimensions=32, table="mem_new")
    sides = {name: PgvectorBackend(pg_url, table=name) for name in ("mem_old", "mem_new")}
    try:
        with _pg(pg_url) as conn:
            from pgvector.psycopg import register_vector

            register_vector(conn)
            same = measure_preservation(
                conn,
                "mem_old",
                Side(pgvector_search(sides["mem_old"]), HashEmbedder(16)),
                Side(pgvector_search(sides["mem_old"]), HashEmbedder(16)),
                k=5,
                users=4,
            )
            moved = measure_preservation(
                conn,
                "mem_new",
                Side(pgvector_search(sides["mem_old"]), HashEmbedder(16)),
                Side(pgvector_search(sides["mem_new"]), HashEmbedder(32)),
                k=5,
                users=4,
                min_overlap=1.0,
            )
    finally:
        for backend in sides.values():
            backend.close()
    assert len(same.users) >= 3 and all(u.passed and u.overlap == 1.0 for u in same.users)
    assert not same.problems and "of users (" in same.claim()
    assert {u.user for u in moved.users} == {u.user for u in same.users}  # the same sampled users
    for user in moved.users:
        assert 0.0 <= user.overlap_ci[0] <= user.overlap <= user.overlap_ci[1] <= 1.0
        assert user.passed == (user.overlap >= 1.0)
    assert bool(moved.problems) == any(not u.passed for u in moved.users)


def test_a_reembedded_copy_is_queried_through_each_sides_model(tmp_path, pg_url):
    """Qdrant vectors of hash-8 re-embedded as hash-16: a stored vector is never sent to the other
    side; without --source-embedder the gate says why it could not measure, with it each side embeds
    the sampled content with its own model."""
    from memwork.embed import HashEmbedder

    path = tmp_path / "store"
    client = QdrantClient(path=str(path))
    client.create_collection(
        COLLECTION, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    )
    words = ["coffee", "tea", "dark", "mode", "paris", "berlin", "cat", "dog", "blue", "red"]
    rng = np.random.default_rng(3)
    contents = [" ".join(rng.choice(words, size=3)) + f" {n}" for n in range(60)]
    vectors = HashEmbedder(DIM).embed(contents)
    client.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=n + 1,
                vector=[float(x) for x in vectors[n]],
                payload={"user_id": f"u{n % 4}", "content": contents[n], "created_at": 1767323045 + n},
            )
            for n in range(60)
        ],
    )
    client.close()
    env = {**_env(path), "MEMORY_QDRANT_EMBEDDING_MODEL": f"hash-{DIM}"}
    report = run_import(
        ImportOptions(
            "qdrant", env=env, database_url=pg_url, apply=True, create_schema=True,
            vectors="reembed", embedder="hash:16",
        )
    )  # fmt: skip
    assert report.rows_written == 60 and report.model == "hash-16"
    options = dict(source="qdrant", env=env, k=5, leaf=4, vector_sample=20, retrieval=False)
    blind = certify(CertifyOptions("", pg_url, **options))
    assert blind.preserved is not None and not blind.preserved.users
    assert "re-embedded (hash-8 -> hash-16)" in blind.preserved.notes[0]
    assert blind.gates["preserved"] and not blind.gates["rows"] and not blind.gates["vectors"]
    both = certify(CertifyOptions("", pg_url, source_embedder=f"hash:{DIM}", min_overlap=0.0, **options))
    assert both.preserved is not None and len(both.preserved.users) == 4
    assert all(0.0 <= u.overlap <= 1.0 for u in both.preserved.users)
    assert both.verdict == "PASS", both.reasons()


def test_records_by_id_fetches_exactly_the_named_points(storage):
    from memwork.backends.qdrant_points import source_from_env

    source = source_from_env(_env(storage))
    try:
        found = source.records_by_id(
            ["1", "2", "999999", "not-an-id", "00000000-0000-0000-0000-000000000001"]
        )
        assert sorted(found) == ["1", "2"]
        assert found["1"].user_id == "u-tiny" and found["1"].vector is not None
        assert found["2"].model == "qdrant-test-8"
        assert source.search("u-small", found["2"].vector, 2)[0] == "2"
        assert set(source.search("u-small", found["2"].vector, 10)) == {"2", "3", "4", "5"}
    finally:
        source.close()


def test_min_user_share_gates_on_the_lower_bound_not_the_point_estimate():
    from memwork.certify.preserved import PreservationReport, UserAgreement, _judge

    def report(min_share, passed=10, failed=0):
        users = [UserAgreement(f"p{i}", 5, 3, 1.0, (1.0, 1.0), 1.0, (1.0, 1.0), True) for i in range(passed)]
        users += [
            UserAgreement(f"f{i}", 5, 3, 0.5, (0.4, 0.6), 0.6, (0.5, 0.7), False) for i in range(failed)
        ]
        found = PreservationReport(10, 0.95, min_share, "content", users=users)
        _judge(found)
        return found

    assert "it takes 299 sampled users, all passing" in report(0.99).problems[0]  # 10 of 10: >= 74 %
    assert not report(0.7).problems
    assert "f0 (0.50)" in report(None, failed=1).problems[0]  # default: any failing user fails, named
    assert not report(0.5, passed=30, failed=1).problems  # a tolerated share
    assert report(None).claim().startswith("overlap@10 >= 0.95 for >= 74.1% of users (10 of 10 sampled")


def test_a_legacy_copy_takes_the_queries_file_for_recall_and_expected_ids(sqlite_url, pg_url, tmp_path):
    """A source that cannot search: no preservation measured; the file's queries still drive recall@k
    and the expected ids the production path misses are named."""
    from memwork.samples.migration import build_migration

    m = build_migration(sqlite_url, pg_url, n_users=4, items_per_user=8, dimensions=16)
    with _pg(pg_url) as conn:
        user, key = conn.execute(
            f"SELECT user_id, source_memory_id FROM {m.table} ORDER BY source_memory_id LIMIT 1"
        ).fetchone()
        content = conn.execute(
            f"SELECT content FROM {m.table} WHERE source_memory_id = %s", (key,)
        ).fetchone()[0]
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({"user": user, "query": content, "expected": [key, "never-there"]}) + "\n")
    result = CliRunner().invoke(
        main,
        [
            "certify",
            "--source-url",
            m.source_url,
            "--to",
            pg_url,
            "--queries",
            str(path),
            "--json",
            "-k",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["preserved"] is None
    assert summary["retrieval"]["expected"] == {
        "queries": 1,
        "expected": 2,
        "found": 1,
        "share": 0.5,
        "missed": [[user, "never-there"]],
    }


@pytest.mark.parametrize("storage", [models.Distance.DOT], indirect=True)
def test_a_copy_that_ranks_by_another_metric_fails_the_preserved_gate(storage, pg_url):
    """Every row and vector copied exactly, but the source ranks by dot product over unnormalised
    vectors and pgvector by cosine: what each user gets changed, and only the preserved gate sees it."""
    _import(storage, pg_url)
    cert = _certify(storage, pg_url, preserved_users=6)
    assert cert.gates["rows"] == [] and cert.gates["vectors"] == []
    assert cert.verdict == "FAIL" and cert.gates["preserved"], cert.gates
    assert "below overlap@5" in cert.gates["preserved"][0]
