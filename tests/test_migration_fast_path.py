"""The migration writer's fast path (binary COPY straight into the table when a page's ids are new)
stores exactly what the ownership-checked upsert stores, and gives way to it whenever an id is taken."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memwork.db import pg_connect
from memwork.embed import HashEmbedder
from memwork.migrate.checkpoint import ImportCheckpoint
from memwork.migrate.ownership import LEGACY_OWNER, SOURCE_MARKER, OwnedElsewhere
from memwork.migrate.writer import (
    Batch,
    FastPath,
    PageMark,
    prepare_session,
    register_packed_vectors,
    write_batch,
)
from memwork.pgvector.schema import ensure_schema

DIMS = 8
TABLE = "fast_path_embeddings"
COLUMNS = (
    "source_memory_id, user_id, content, embedding::text, embedding_model, type, source_session_id, "
    "source_message_id, metadata, created_at, updated_at"
)


@pytest.fixture
def dest(pg_url):
    ensure_schema(pg_url, TABLE, DIMS)
    return pg_url


def _rows(metadata: list[str | None], prefix: str = "fp") -> list[dict]:
    return [
        {
            "id": f"{prefix}-{k}",
            "user_id": f"user-{k % 2}",
            "content": f"memory number {k} caf\u00e9",
            "type": None if k == 0 else "preference",
            "source_session_id": None if k % 2 else f"s-{k}",
            "source_message_id": f"m-{k}",
            "metadata": meta,
            "created_at": f"2024-03-0{1 + k % 9} 10:2{k % 10}:00" + (".123456" if k % 2 else ""),
            "updated_at": f"2025-01-0{1 + k % 9}T08:00:0{k % 10}",
        }
        for k, meta in enumerate(metadata)
    ]


def _write(pg, rows, owner=LEGACY_OWNER, fast=None):
    vectors = np.asarray(HashEmbedder(DIMS).embed([r["content"] for r in rows]), dtype=np.float32)
    batch = Batch(rows, vectors, [], PageMark(None, "next", False, len(rows)))
    start = ImportCheckpoint(TABLE, f"{owner}:test", "test", run_id="run-1")
    page = start.after_page(
        read_cursor=None, next_cursor="next", finished=False, rows_read=len(rows), run_id="r"
    )
    return write_batch(pg, TABLE, batch, "hash-8", page, owner=owner, fast=fast)


def _snapshot(pg) -> list[tuple]:
    return pg.execute(f"SELECT {COLUMNS} FROM {TABLE} ORDER BY source_memory_id").fetchall()


def _session(pg):
    from pgvector.psycopg import register_vector

    register_vector(pg)
    register_packed_vectors(pg)
    prepare_session(pg)


def test_the_fast_path_stores_what_the_upsert_stores(dest):
    metadata = [
        None,
        '{"a": 1, "nested": {"x": "\u00e9"}}',
        "[1, 2]",
        '"text"',
        "null",
        '{"b": [true, null]}',
    ]
    rows = _rows(metadata)
    with pg_connect(dest, autocommit=True) as pg:
        _session(pg)
        fast = FastPath(adaptive=True)
        written, rejects, _ = _write(pg, rows, fast=fast)
        assert (written, rejects, fast.check_first) == (len(rows), [], False)  # the COPY went straight in
        first = _snapshot(pg)
        written, rejects, _ = _write(pg, rows, fast=fast)  # the ids are there now: the upsert rewrites them
        assert (written, rejects, fast.check_first) == (len(rows), [], True)
        assert _snapshot(pg) == first
    stored = {row[0]: row for row in first}
    assert stored["fp-0"][8] == {} and stored["fp-0"][5] == "fact"
    assert stored["fp-2"][8] == [1, 2] and stored["fp-4"][8] is None
    assert stored["fp-1"][9].isoformat() == "2024-03-02T10:21:00.123456+00:00"


def test_an_import_s_rows_keep_their_marker_on_the_fast_path(dest):
    owner = "import-src"
    rows = _rows([json.dumps({"k": "v", SOURCE_MARKER: owner}), json.dumps({SOURCE_MARKER: owner})], "imp")
    with pg_connect(dest, autocommit=True) as pg:
        _session(pg)
        fast = FastPath(adaptive=True)
        assert _write(pg, rows, owner=owner, fast=fast)[0] == 2 and fast.check_first is False
        first = _snapshot(pg)
        assert _write(pg, rows, owner=owner, fast=fast)[0] == 2
        assert _snapshot(pg) == first
    assert [row[8] for row in first] == [{"k": "v", SOURCE_MARKER: owner}, {SOURCE_MARKER: owner}]


def test_a_row_claiming_an_owner_goes_through_the_merge_which_strips_the_claim(dest):
    rows = _rows([json.dumps({"a": 1, SOURCE_MARKER: "someone"}), '{"\\u005fmemworkSource": "x"}'], "claim")
    with pg_connect(dest, autocommit=True) as pg:
        _session(pg)
        fast = FastPath(adaptive=True)
        assert _write(pg, rows, fast=fast)[0] == 2
        assert fast.check_first is True  # the fast path stepped aside
        assert [row[8] for row in _snapshot(pg)] == [{"a": 1}, {}]


def test_an_id_another_source_owns_sends_the_page_to_the_ownership_checked_upsert(dest):
    rows = _rows(['{"n": 0}', '{"n": 1}', '{"n": 2}'], "own")
    with pg_connect(dest, autocommit=True) as pg:
        _session(pg)
        pg.execute(
            f"INSERT INTO {TABLE} (source_memory_id, user_id, content, embedding, metadata) "
            "VALUES ('own-1', 'u', 'theirs', %s, %s::jsonb)",
            (np.ones(DIMS, dtype=np.float32), json.dumps({SOURCE_MARKER: "import-src"})),
        )
        before = [r for r in _snapshot(pg) if r[0] == "own-1"]
        fast = FastPath(adaptive=True, check_first=False)  # as after a page of new ids: no look first
        written, rejects, checkpoint = _write(pg, rows, fast=fast)
        assert written == 2 and checkpoint is not None and checkpoint.rows_written == 2
        assert [(type(r), r.id) for r in rejects] == [(OwnedElsewhere, "own-1")]
        assert fast.check_first is True  # the next pages look before they COPY
        after = _snapshot(pg)
    assert [r[0] for r in after] == ["own-0", "own-1", "own-2"]
    assert [r for r in after if r[0] == "own-1"] == before  # never overwritten
