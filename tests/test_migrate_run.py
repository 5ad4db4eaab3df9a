"""run_import on a list-backed source against the embedded PostgreSQL: dry run, apply, re-apply,
resume, vectors kept or re-embedded, refusals before writing, poison rows, two sources in one table."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest
from import_harness import ListSource

from memwork.certify import CertifyOptions, certify
from memwork.contracts import Page, SourceRecord
from memwork.embed import HashEmbedder
from memwork.errors import UsageError
from memwork.migrate.run import ImportOptions, run_import
from memwork.pgvector.schema import ensure_schema

pytestmark = [pytest.mark.services]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LOOKALIKES = ["TenantX", "tenantx", "tenantx "]


def vec(i: int, dims: int = 8) -> list[float]:
    return [((i * 13 + k * 7) % 17) / 17 + 0.05 for k in range(dims)]


def records(
    n: int, users: list[str] | None = None, dims: int | None = 8, prefix: str = "m"
) -> list[SourceRecord]:
    users = users or [f"u{k}" for k in range(5)]
    return [
        SourceRecord(
            id=f"{prefix}{i:04d}",
            user_id=users[i % len(users)],
            content=f"memory number {i} about topic {i % 9}",
            type="fact" if i % 2 else "preference",
            metadata={"i": i, "tags": ["a", "b"]},
            created_at=T0 + timedelta(seconds=i),
            updated_at=T0 + timedelta(seconds=i, minutes=5),
            session_id=f"s{i % 3}",
            message_id=f"msg{i}",
            agent_id="agent-7" if i % 4 == 0 else None,
            vector=vec(i, dims) if dims else None,
            model="src-model" if dims else None,
        )
        for i in range(n)
    ]


def rows(pg_url: str, table: str = "memory_embeddings") -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(
            "SELECT source_memory_id, user_id, content, type, source_session_id, source_message_id, "
            f"metadata, created_at, updated_at, embedding::text, embedding_model FROM {table} "
            "ORDER BY source_memory_id"
        ).fetchall()


def verify(source, pg_url: str, **kw):
    """The one verification of ``source``'s copy (retrieval sampled small: these tables are tiny)."""
    return certify(CertifyOptions(dest_url=pg_url, source=source, users_per_bucket=3, **kw))


def tables(pg_url: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        found = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return sorted(r[0] for r in found)


def test_dry_run_reads_every_page_counts_and_writes_nothing(pg_url):
    source = ListSource(records(95, LOOKALIKES))
    report = run_import(ImportOptions(source=source, database_url=pg_url, page_size=10))
    assert report.mode == "dry-run" and report.rows_read == 95 and report.pages == 10
    assert [c for c, _ in source.reads] == [None, *[str(k) for k in range(10, 100, 10)]]
    assert report.users == {"TenantX": 32, "tenantx": 32, "tenantx ": 31}  # look-alikes stay apart
    assert report.models == {"src-model": 95} and report.vector_dimensions == {"8": 95}
    assert report.vectors == "keep" and len(report.sample) == 5 and report.rows_written == 0
    assert source.closed
    assert tables(pg_url) == []  # not even the bookkeeping tables


def test_dry_run_never_opens_postgresql(tmp_path):
    """A refused destination does not matter to a dry run: it reads the source only."""
    report = run_import(
        ImportOptions(source=ListSource(records(7)), database_url="postgresql://127.0.0.1:1/x")
    )
    assert report.rows_read == 7 and report.destination is None


def test_apply_keeps_ids_users_timestamps_metadata_vectors_and_reapply_is_idempotent(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(53, LOOKALIKES), key="list:keep")
    options = ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10)
    first = run_import(options)
    assert (first.rows_written, first.rows_read, first.pages, first.rows_quarantined) == (53, 53, 6, 0)
    assert first.vectors == "keep" and first.model == "src-model" and first.dimensions == 8
    assert first.checkpoint and first.checkpoint["finished"] and first.checkpoint["rowsWritten"] == 53
    stored = rows(pg_url)
    assert [r[0] for r in stored] == [f"m{i:04d}" for i in range(53)]
    for i, row in enumerate(stored):
        _sid, user, content, kind, session, message, meta, created, updated, emb, model = row
        assert user == LOOKALIKES[i % 3] and content == f"memory number {i} about topic {i % 9}"
        assert kind == ("fact" if i % 2 else "preference") and (session, message) == (f"s{i % 3}", f"msg{i}")
        assert created == T0 + timedelta(seconds=i) and updated == T0 + timedelta(seconds=i, minutes=5)
        assert meta["i"] == i and meta["tags"] == ["a", "b"] and meta["_memworkSource"] == "list:keep"
        assert meta.get("_memworkAgentId") == ("agent-7" if i % 4 == 0 else None)
        assert np.allclose(json.loads(emb), vec(i), atol=1e-6) and model == "src-model"

    again = run_import(options)  # a second full apply: same rows, nothing doubled
    assert again.rows_written == 53 and rows(pg_url) == stored
    result = verify(source, pg_url)
    assert result.verdict == "PASS", result.reasons()
    assert len(result.rows.users) == 3 and all(t.ok for t in result.rows.users.values())


def test_missing_timestamps_become_the_run_start(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    bare = [
        SourceRecord(id="a", user_id="u", content="x", vector=vec(1)),
        SourceRecord(id="b", user_id="u", content="y", vector=vec(2), created_at=T0),
    ]
    before = datetime.now(UTC)
    run_import(ImportOptions(source=ListSource(bare), database_url=pg_url, apply=True))
    (a, b) = rows(pg_url)
    assert before - timedelta(seconds=1) <= a[7] == a[8] <= datetime.now(UTC)
    assert b[7] == b[8] == T0  # updated_at defaults to created_at
    assert a[10] == "list:unknown"  # a vector without a model id is labelled by its source


def test_limit_cuts_a_page_and_resume_rereads_it(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(47))
    options = ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10, limit=25)
    first = run_import(options)
    assert first.rows_written == 25 and first.checkpoint and first.checkpoint["nextCursor"] == "20"
    assert not first.checkpoint["finished"]
    dry = run_import(ImportOptions(source=source, database_url=pg_url, page_size=10, resume=True))
    assert dry.mode == "dry-run" and dry.resumed and dry.start_cursor == "20" and dry.rows_read == 27
    assert len(rows(pg_url)) == 25  # the dry run only read where a resume would start
    options.limit, options.resume = None, True
    rest = run_import(options)
    assert rest.resumed and rest.start_cursor == "20" and rest.rows_read == 27
    # the cut page (records 20-29) was read again; the totals count it once, as the table holds it
    assert rest.checkpoint and rest.checkpoint["finished"] and rest.checkpoint["rowsWritten"] == 47
    assert [r[0] for r in rows(pg_url)] == [f"m{i:04d}" for i in range(47)]
    again = run_import(options)  # resume of a finished import: re-reads the last page only
    assert again.start_cursor == "40" and again.rows_read == 7 and len(rows(pg_url)) == 47


def test_first_page_of_another_dimension_is_refused_before_anything_is_written(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(30, dims=16))
    with pytest.raises(UsageError) as err:
        run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10))
    assert err.value.field == "vectors" and "vector(8)" in str(err.value) and "16" in str(err.value)
    assert rows(pg_url) == [] and "memwork_import_checkpoints" not in tables(pg_url)  # no bookkeeping
    assert len(source.reads) == 1  # refused on the first page


def test_missing_table_is_refused_unless_create_schema(pg_url):
    source = ListSource(records(12, dims=6))
    with pytest.raises(UsageError) as err:
        run_import(ImportOptions(source=source, database_url=pg_url, apply=True))
    assert err.value.field == "table" and "--dimensions 6" in str(err.value)
    assert tables(pg_url) == []
    report = run_import(ImportOptions(source=source, database_url=pg_url, apply=True, create_schema=True))
    assert report.rows_written == 12 and report.dimensions == 6


def test_odd_rows_are_quarantined_and_the_rest_written(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    recs = records(20)
    recs[3] = SourceRecord(id="m0003", user_id="u3", content="short", vector=vec(3, 7), model="src-model")
    recs[5] = SourceRecord(id="m0005", user_id="u0", content="nan", vector=[float("nan")] * 8)
    recs[7] = SourceRecord(id="m0007", user_id="u2", content="none", vector=None)
    recs[9] = SourceRecord(id="m0009", user_id="u4", content="nul \x00 byte", vector=vec(9))
    recs[11] = SourceRecord(id="m0011", user_id=None, content="nobody's", vector=vec(11))  # type: ignore[arg-type]
    recs[13] = SourceRecord(id="m0013", user_id="  ", content="blank owner", vector=vec(13))
    source = ListSource(recs)
    report = run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=8))
    assert report.rows_written == 14 and report.rows_quarantined == 6
    reasons = {q["id"]: q["reason"] for q in report.quarantined}
    assert set(reasons) == {"m0003", "m0005", "m0007", "m0009", "m0011", "m0013"}
    assert reasons["m0011"].startswith("user_id: empty") and reasons["m0013"].startswith("user_id")
    assert "7 dimensions" in reasons["m0003"] and "non-finite" in reasons["m0005"]
    assert "none" in reasons["m0007"] and "NUL" in reasons["m0009"]
    assert "m0003" not in [r[0] for r in rows(pg_url)]
    result = verify(source, pg_url)
    assert result.verdict == "FAIL" and len(result.quarantined) == 6
    assert any(r.startswith("rows: quarantined: 6") and "m0003" in r for r in result.reasons())
    lenient = verify(source, pg_url, allow_quarantined=True)
    assert lenient.verdict == "PASS", lenient.reasons()


def test_reembed_needs_an_embedder_and_embeds_content(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 16)
    source = ListSource(records(25, dims=None))
    with pytest.raises(UsageError) as err:
        run_import(ImportOptions(source=source, database_url=pg_url, apply=True))
    assert err.value.field == "embedder" and rows(pg_url) == []
    report = run_import(ImportOptions(source=source, database_url=pg_url, apply=True, embedder="hash:16"))
    assert report.vectors == "reembed" and report.model == "hash-16" and report.rows_written == 25
    embedder = HashEmbedder(16)
    for row in rows(pg_url):
        assert np.allclose(json.loads(row[9]), embedder.embed_one(row[2]), atol=1e-6) and row[10] == "hash-16"
    result = verify(source, pg_url)
    assert result.verdict == "PASS" and result.vectors_mode == "reembed", result.reasons()
    assert result.vectors.checked == 25 and result.vectors.findings == []  # each its model's embedding


def test_reembed_replaces_a_sources_vectors_when_asked(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 16)
    source = ListSource(records(5, dims=8))  # 8-dim source vectors, a 16-dim table
    report = run_import(
        ImportOptions(source=source, database_url=pg_url, apply=True, vectors="reembed", embedder="hash:16")
    )
    assert report.rows_written == 5 and {r[10] for r in rows(pg_url)} == {"hash-16"}


def test_two_sources_share_a_table_and_never_overwrite_each_other(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    a = ListSource(records(30, prefix="a"), name="alpha", key="alpha:one")
    intruder = SourceRecord(id="a0001", user_id="intruder", content="x", vector=vec(1))
    b_records = [*records(20, prefix="b"), intruder]
    b = ListSource(b_records, name="beta", key="beta:two")
    run_import(ImportOptions(source=a, database_url=pg_url, apply=True, page_size=7))
    report_b = run_import(ImportOptions(source=b, database_url=pg_url, apply=True, page_size=7))
    assert report_b.rows_written == 20 and [q["id"] for q in report_b.quarantined] == ["a0001"]
    assert "alpha:one" in report_b.quarantined[0]["reason"]
    stored = {r[0]: r for r in rows(pg_url)}
    assert len(stored) == 50 and stored["a0001"][1] == "u1"  # alpha's row untouched
    assert verify(a, pg_url).verdict == "PASS"
    result_b = verify(b, pg_url)
    assert result_b.verdict == "FAIL" and len(result_b.quarantined) == 1  # the collision is named
    assert result_b.rows.by_kind() == {"quarantined": 1}  # alpha's rows are not beta's "extra"
    # both checkpoints live side by side in one table
    with psycopg.connect(pg_url) as conn:
        keys = conn.execute(
            "SELECT source_key, rows_written FROM memwork_import_checkpoints ORDER BY 1"
        ).fetchall()
    assert keys == [("alpha:one", 30), ("beta:two", 20)]


def test_repeated_id_in_one_page_keeps_the_last(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    recs = [
        SourceRecord(id="x", user_id="u", content="old", vector=vec(1)),
        SourceRecord(id="x", user_id="u", content="new", vector=vec(2)),
    ]
    report = run_import(ImportOptions(source=ListSource(recs), database_url=pg_url, apply=True))
    assert report.duplicates == 1 and [r[2] for r in rows(pg_url)] == ["new"]


class StuckSource(ListSource):
    def read_page(self, cursor: str | None, size: int) -> Page:
        return Page(self.records[:size], "same")


def test_a_cursor_that_does_not_move_stops_the_run(pg_url):
    from memwork.errors import BackendError

    with pytest.raises(BackendError, match="did not advance"):
        run_import(ImportOptions(source=StuckSource(records(3)), database_url=pg_url, page_size=2))


def test_a_source_key_with_a_url_password_is_never_stored_or_reported(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 8)
    source = ListSource(records(9), key="qdrant:http://admin:hunter2@db.example:6333/memind_memory")
    report = run_import(ImportOptions(source=source, database_url=pg_url, apply=True, page_size=4))
    assert "hunter2" not in json.dumps(report.to_dict()) and report.rows_written == 9
    with psycopg.connect(pg_url) as conn:
        dumped = conn.execute(
            "SELECT string_agg(metadata::text, '') || (SELECT string_agg(source_key, '') "
            "FROM memwork_import_checkpoints) FROM memory_embeddings"
        ).fetchone()[0]
    assert "hunter2" not in dumped and "db.example:6333/memind_memory" in dumped
    result = verify(source, pg_url)
    assert result.verdict == "PASS" and "hunter2" not in json.dumps(result.summary(), default=str)


class FlakySource(ListSource):
    """Fails once when asked for the page at ``fail_at`` (a 5xx mid-listing, a dropped connection)."""

    def __init__(self, recs: list[SourceRecord], fail_at: str) -> None:
        super().__init__(recs, key="list:flaky")
        self.fail_at: str | None = fail_at

    def read_page(self, cursor: str | None, size: int) -> Page:
        if self.fail_at is not None and cursor == self.fail_at:
            self.fail_at = None
            from memwork.errors import BackendError

            raise BackendError("list: 503 Service Unavailable")
        return super().read_page(cursor, size)


def test_a_source_failing_mid_listing_stops_the_run_and_resume_finishes_it(pg_url):
    from memwork.errors import BackendError

    ensure_schema(pg_url, "memory_embeddings", 8)
    source = FlakySource(records(50), fail_at="30")
    options = ImportOptions(source=source, database_url=pg_url, apply=True, page_size=10)
    with pytest.raises(BackendError, match="503"):
        run_import(options)
    assert len(rows(pg_url)) == 30  # the committed pages stay, nothing half-written
    options.resume = True
    report = run_import(options)
    assert report.start_cursor == "30" and report.rows_written == 20 and len(rows(pg_url)) == 50
    assert verify(source, pg_url).verdict == "PASS"
