"""The Qdrant migration source: scroll from a cursor to the end (int and UUID point ids), records keep
ids, owners, timestamps, metadata, vectors and their model; bad points and missing collections are errors,
never skipped or created; reading changes nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from memwork.backends.qdrant_points import QdrantSource, decode_cursor, encode_cursor, source_from_env
from memwork.errors import BackendError, UsageError
from memwork.migrate.source import iter_pages
from memwork.plugins import open_source

COLLECTION = "memind_memory"
USERS = [f"user-{n:02d}" for n in range(10)] + ["TenantX", "tenantx", "tenantx "]
N_INT, N_UUID = 800, 260
DIM = 4
EPOCH = 1767323045  # 2026-01-02T03:04:05Z


def _point_id(n: int) -> int | str:
    return n + 1 if n < N_INT else str(uuid.UUID(int=(n + 1) * 104729))


def _vector(n: int) -> list[float]:
    rng = np.random.default_rng(n)
    return [float(x) for x in rng.normal(size=DIM)]


def _payload(n: int) -> dict:
    payload: dict = {"user_id": USERS[n % len(USERS)], "content": f"memory {n}: lives in city {n % 17}"}
    if n % 4 == 0:
        payload["created_at"] = "2026-01-02T03:04:05+00:00"
    elif n % 4 == 1:
        payload["created_at"] = EPOCH
    elif n % 4 == 2:
        payload["createdAt"] = EPOCH * 1000  # epoch milliseconds
    else:
        payload["created_at"] = "yesterday"  # unparseable: kept in metadata
    if n % 3 == 0:
        payload["embedding_model"] = "hash-4"
    if n % 5 == 0:
        payload.update(session_id=f"s{n}", message_id=n, metadata={"topic": "travel"}, type="preference")
    payload["rank"] = n
    return payload


def _seed(client: QdrantClient) -> None:
    client.create_collection(
        COLLECTION, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT)
    )
    points = [
        models.PointStruct(id=_point_id(n), vector=_vector(n), payload=_payload(n))
        for n in range(N_INT + N_UUID)
    ]
    for start in range(0, len(points), 500):
        client.upsert(COLLECTION, points[start : start + 500])


def fast_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory on tmpfs when there is one: qdrant-client's local mode commits every point to
    SQLite on its own, 15x slower on a real disk (9 s instead of 0.6 s for the 1,060 points here)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="memwork-qdrant-", dir=shm))
    return tmp_path_factory.mktemp("qdrant")


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> Iterator[Path]:
    """An on-disk storage with 1,060 points over 13 users (closed again: the source opens it itself)."""
    scratch = fast_dir(tmp_path_factory)
    path = scratch / "store"
    client = QdrantClient(path=str(path))
    _seed(client)
    client.close()
    yield path
    shutil.rmtree(scratch, ignore_errors=True)


def _env(path: Path, **extra: str) -> dict[str, str]:
    return {"MEMORY_QDRANT_URL": f"local:{path}", "MEMORY_QDRANT_EMBEDDING_MODEL": "default-model", **extra}


def _read_all(source: QdrantSource, size: int, cursor: str | None = None):
    pages = list(iter_pages(source, cursor, size))
    return pages, [record for page, _ in pages for record in page.records]


def test_scrolls_every_point_to_the_end_over_many_pages(storage):
    source = source_from_env(_env(storage))  # no MEMORY_QDRANT_ENABLED: reading needs no flag
    try:
        pages, records = _read_all(source, 100)
    finally:
        source.close()
    assert len(pages) == 11 and pages[-1][0].next_cursor is None
    assert len(records) == N_INT + N_UUID
    assert sorted(r.id for r in records) == sorted(str(_point_id(n)) for n in range(N_INT + N_UUID))
    assert {r.user_id for r in records} == set(USERS)
    cursors = [cursor for _, cursor in pages]
    assert cursors[0] is None and len(set(cursors)) == len(cursors)
    assert any(c and c.startswith("int:") for c in cursors) and any(
        c and c.startswith("uuid:") for c in cursors
    )


def test_records_keep_ids_owners_timestamps_metadata_vectors_and_models(storage):
    source = source_from_env(_env(storage))
    try:
        _, records = _read_all(source, 250)
    finally:
        source.close()
    by_id = {r.id: r for r in records}
    expected_time = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for n in (0, 1, 2, 3, 5, 15, N_INT, N_INT + 1, N_INT + N_UUID - 1):
        record = by_id[str(_point_id(n))]
        payload = _payload(n)
        assert record.user_id == payload["user_id"] and record.content == payload["content"]
        assert record.vector == pytest.approx(_vector(n), abs=1e-6)  # Dot: stored as given
        assert len(record.vector) == DIM
        assert record.model == ("hash-4" if n % 3 == 0 else "default-model")
        if n % 4 == 3:
            assert record.created_at is None and record.metadata["created_at"] == "yesterday"
        else:
            assert record.created_at == expected_time and "created_at" not in record.metadata
        assert record.metadata["rank"] == n
        if n % 5 == 0:
            assert (
                record.type == "preference" and record.session_id == f"s{n}" and record.message_id == str(n)
            )
            assert record.metadata["topic"] == "travel" and "metadata" not in record.metadata
        else:
            assert record.type == "fact" and record.session_id is None
        assert "user_id" not in record.metadata and "content" not in record.metadata


def test_resuming_from_a_cursor_reads_exactly_the_rest(storage):
    source = source_from_env(_env(storage))
    try:
        pages, everything = _read_all(source, 90)
        resume_at = pages[5][1]
        _, rest = _read_all(source, 90, resume_at)
    finally:
        source.close()
    done = [r.id for page, _ in pages[:5] for r in page.records]
    assert done + [r.id for r in rest] == [r.id for r in everything]


def test_cursor_encoding_is_unambiguous():
    some_uuid = str(uuid.uuid4())
    assert decode_cursor(encode_cursor(42)) == 42
    assert decode_cursor(encode_cursor(some_uuid)) == some_uuid
    assert encode_cursor(some_uuid.upper()) == f"uuid:{some_uuid}"
    assert encode_cursor(7) != encode_cursor("00000000-0000-0000-0000-000000000007")
    for bad in ("42", "int:-1", "int:x", "uuid:not-a-uuid", "str:7", ""):
        with pytest.raises(UsageError, match="cursor"):
            decode_cursor(bad)
    with pytest.raises(BackendError):
        encode_cursor(1.5)


def test_configuration_key_and_registry(storage):
    with pytest.raises(UsageError, match="MEMORY_QDRANT_URL"):
        source_from_env({"MEMORY_QDRANT_ENABLED": "1"})
    with pytest.raises(UsageError, match="MEMORY_QDRANT_URL"):
        source_from_env({"MEMORY_QDRANT_URL": "ftp://q"})
    server = source_from_env(
        {
            "MEMORY_QDRANT_URL": "https://reader:pw-SEKRIT@q.example:6333",
            "MEMORY_QDRANT_API_KEY": "key-SEKRIT",
            "MEMORY_QDRANT_COLLECTION": "other",
        }
    )
    assert server.key == "qdrant:https://reader:***@q.example:6333/other" and "SEKRIT" not in server.key
    local = open_source("qdrant", _env(storage))
    assert isinstance(local, QdrantSource) and local.key == f"qdrant:local:{storage}/{COLLECTION}"
    local.close()


def test_missing_collection_and_missing_storage_are_errors_never_created(storage, tmp_path):
    files_before = sorted(p.relative_to(storage) for p in storage.rglob("*"))
    source = source_from_env(_env(storage, MEMORY_QDRANT_COLLECTION="not_there"))
    with pytest.raises(BackendError, match="does not exist"):
        source.read_page(None, 10)
    source.close()
    assert sorted(p.relative_to(storage) for p in storage.rglob("*")) == files_before
    nowhere = source_from_env(_env(tmp_path / "nowhere"))
    with pytest.raises(BackendError, match="never creates one"):
        nowhere.read_page(None, 10)
    assert not (tmp_path / "nowhere").exists()


def test_reading_changes_nothing(storage):
    files_before = {p.relative_to(storage): p.read_bytes() for p in storage.rglob("*") if p.is_file()}
    source = source_from_env(_env(storage))
    _read_all(source, 500)
    source.close()
    assert {p.relative_to(storage): p.read_bytes() for p in storage.rglob("*") if p.is_file()} == files_before
    client = QdrantClient(path=str(storage))
    try:
        assert [c.name for c in client.get_collections().collections] == [COLLECTION]
        assert client.count(COLLECTION, exact=True).count == N_INT + N_UUID
    finally:
        client.close()


def test_a_point_without_an_owner_is_an_error_naming_it():
    client = QdrantClient(":memory:")
    client.create_collection(
        COLLECTION, vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT)
    )
    client.upsert(
        COLLECTION,
        [
            models.PointStruct(id=1, vector=[1, 0], payload={"user_id": "a", "content": "ok"}),
            models.PointStruct(id=2, vector=[1, 0], payload={"content": "orphan"}),
        ],
    )
    source = QdrantSource(None, client=client)
    with pytest.raises(BackendError, match=r"point 2 .*payload.user_id is missing"):
        source.read_page(None, 10)
    client.upsert(
        COLLECTION, [models.PointStruct(id=2, vector=[1, 0], payload={"user_id": "b", "content": 7})]
    )
    with pytest.raises(BackendError, match=r"point 2 .*payload.content is missing or not text"):
        source.read_page(None, 10)
    client.close()


def test_named_vectors(tmp_path):
    client = QdrantClient(":memory:")
    client.create_collection(
        COLLECTION,
        vectors_config={
            "text": models.VectorParams(size=2, distance=models.Distance.DOT),
            "image": models.VectorParams(size=3, distance=models.Distance.DOT),
        },
    )
    client.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=1,
                vector={"text": [0.5, 0.25], "image": [1, 2, 3]},
                payload={"user_id": "a", "content": "x"},
            )
        ],
    )
    with pytest.raises(BackendError, match="MEMORY_QDRANT_VECTOR_NAME"):
        QdrantSource(None, client=client).read_page(None, 10)
    page = QdrantSource(None, client=client, vector_name="image").read_page(None, 10)
    assert page.records[0].vector == [1.0, 2.0, 3.0] and page.next_cursor is None
    client.close()
