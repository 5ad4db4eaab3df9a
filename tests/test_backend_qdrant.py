"""The Qdrant adapter: dormant unless configured, resolve scoped to the user and nearest first, score
mapping, read-only (no collection created, nothing upserted), failure modes through the facade, secrets.

Data lives in qdrant-client's in-process engine (``QdrantClient(":memory:")`` or an on-disk ``path=``
storage), which the adapter drives with the same client API it uses against a server. The server
path (REST over HTTP) is exercised against :class:`QdrantRest`, a small HTTP front over that same
engine, so the real client's requests, headers and error handling run over a real socket.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from deadlines import slow_delay, within_deadline
from fakes.qdrant import QdrantRest
from fakes.server import Fault, refused_url, serve
from qdrant_client import QdrantClient, models

from memwork.backends.base import supports_of
from memwork.backends.qdrant import (
    DECLARATION,
    QdrantBackend,
    from_env,
    parse_location,
)
from memwork.cli import main
from memwork.embed import HashEmbedder
from memwork.errors import BackendError, UsageError
from memwork.facade.facade import facade_from_env

COLLECTION = "memind_memory"
LEGACY = "legacy-conversation-memory"
API_KEY = "qdrant-key-SEKRIT-7f3a"
LOOKALIKES = ("TenantX", "tenantx", "tenantx ", "Tenantx")
MODULE = "memwork.pgvector.local_hash"  # 3-dimensional hash embedding (MEMORY_V2_LOCAL_EMBEDDING_DIMENSIONS)


def _env(url: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_QDRANT_ENABLED": "1",
        "MEMORY_QDRANT_URL": url,
        "MEMORY_QDRANT_EMBEDDING_MODULE": MODULE,
        **extra,
    }


def _facade_env(url: str, **extra: str) -> dict[str, str]:
    return {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "qdrant", **_env(url, **extra)}


def _create(client: QdrantClient, name: str = COLLECTION, distance: Any = models.Distance.COSINE) -> None:
    client.create_collection(name, vectors_config=models.VectorParams(size=3, distance=distance))


def _seed_lookalikes(client: QdrantClient) -> dict[str, list[int]]:
    """Four look-alike users, three points each, with vectors close to each other across users."""
    _create(client)
    owned: dict[str, list[int]] = {}
    points = []
    next_id = 1
    for u, user in enumerate(LOOKALIKES):
        for k in range(3):
            vector = [1.0, 0.1 * k + 0.01 * u, 0.05 * u]
            payload = {"user_id": user, "content": f"{user!r} memory {k}", "type": "fact"}
            points.append(models.PointStruct(id=next_id, vector=vector, payload=payload))
            owned.setdefault(user, []).append(next_id)
            next_id += 1
    client.upsert(COLLECTION, points)
    return owned


def _snapshot(client: QdrantClient) -> dict[str, int]:
    """Every collection and its point count: what a read-only adapter must leave unchanged."""
    names = sorted(c.name for c in client.get_collections().collections)
    return {name: client.count(name, exact=True).count for name in names}


def _cos(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


class Recording:
    """A QdrantClient wrapper that records which client methods the adapter calls (then delegates)."""

    def __init__(self, client: QdrantClient) -> None:
        self.client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if callable(attr):
            self.calls.append(name)
        return attr


@pytest.fixture
def memory_client():
    client = QdrantClient(":memory:")
    yield client
    client.close()


# ---- dormant unless configured --------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    avail = from_env({}).availability()
    assert not avail.available
    assert avail.reason == (
        "disabled (MEMORY_QDRANT_ENABLED is not 1); url_missing (MEMORY_QDRANT_URL is not set); "
        "embedding_module_not_configured (MEMORY_QDRANT_EMBEDDING_MODULE is not set)"
    )
    assert supports_of(from_env({})) == {"resolve": True, "write": False, "compact": False}


def test_seed_expectation_without_embedding_module():
    env = {"MEMORY_QDRANT_ENABLED": "1", "MEMORY_QDRANT_URL": "http://127.0.0.1:6333"}
    reason = from_env(env).availability().reason
    assert reason == "embedding_module_not_configured (MEMORY_QDRANT_EMBEDDING_MODULE is not set)"
    status = facade_from_env({"MEMORY_BACKEND": "qdrant", **env}).status()
    assert status["selectedBackend"] == "legacy-conversation-memory"
    row = next(b for b in status["backends"] if b["name"] == "qdrant")
    assert row["available"] is False and row["reason"].startswith("embedding_module_not_configured")


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("MEMORY_QDRANT_ENABLED", "disabled"),
        ("MEMORY_QDRANT_URL", "url_missing"),
        ("MEMORY_QDRANT_EMBEDDING_MODULE", "embedding_module_not_configured"),
    ],
)
def test_each_missing_piece_is_its_own_reason(missing, code):
    env = {k: v for k, v in _env("http://127.0.0.1:6333").items() if k != missing}
    assert from_env(env).availability().reason.split(" (")[0] == code


def test_fully_configured_is_available_without_connecting_or_importing_the_client():
    """from_env + availability with a full configuration: qdrant_client is not even imported."""
    code = (
        "import sys, json; from memwork.backends.qdrant import from_env;"
        f"b = from_env({_env('http://127.0.0.1:1')!r}); a = b.availability();"
        "print(json.dumps([a.available, 'qdrant_client' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, False]


def test_embedding_module_is_loaded_only_when_everything_else_is_configured(tmp_path):
    broken = tmp_path / "broken_embed.py"
    broken.write_text("raise RuntimeError('imported too early')\n")
    dormant = {**_env("http://127.0.0.1:6333", MEMORY_QDRANT_EMBEDDING_MODULE=str(broken))}
    del dormant["MEMORY_QDRANT_ENABLED"]
    assert from_env(dormant).availability().reason == "disabled (MEMORY_QDRANT_ENABLED is not 1)"
    reason = from_env({**dormant, "MEMORY_QDRANT_ENABLED": "1"}).availability().reason
    assert reason.startswith("embedding_module_invalid") and "imported too early" in reason


@pytest.mark.parametrize("url", ["ftp://user:pw-SEKRIT@host", "127.0.0.1:6333", "local:", "http://"])
def test_a_bad_url_is_its_own_reason_without_the_password(url):
    reason = from_env(_env(url)).availability().reason
    assert reason.startswith("url_invalid (MEMORY_QDRANT_URL=") and "SEKRIT" not in reason


def test_location_forms():
    assert parse_location("http://q:6333/").url == "http://q:6333"
    assert parse_location("https://user:pw@q.cloud:6333").describe() == "https://user:***@q.cloud:6333"
    local = parse_location("local:./store")
    assert local.url is None and Path(local.path).is_absolute()
    with pytest.raises(UsageError, match="MEMORY_QDRANT_URL"):
        parse_location("redis://q")


# ---- resolve ----------------------------------------------------------------------------------
def test_resolve_only_returns_the_exact_users_points(memory_client):
    owned = _seed_lookalikes(memory_client)
    backend = QdrantBackend(None, client=memory_client)
    for user in LOOKALIKES:
        items = backend.resolve({"userId": user, "embedding": [1.0, 0.0, 0.0], "limit": 40})[
            "semanticMemories"
        ]
        assert {item["userId"] for item in items} == {user}
        assert sorted(int(item["id"]) for item in items) == owned[user]
    assert backend.resolve({"userId": "tenant", "embedding": [1, 0, 0]}) == {"semanticMemories": []}


def test_nearest_first_limit_and_cosine_score_mapping(memory_client):
    _create(memory_client)
    vectors = {1: [1.0, 0.0, 0.0], 2: [0.6, 0.8, 0.0], 3: [0.0, 1.0, 0.0], 4: [0.9, 0.1, 0.0]}
    memory_client.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=i,
                vector=v,
                payload={
                    "user_id": "u1",
                    "content": f"c{i}",
                    "created_at": "2026-01-02T03:04:05+00:00",
                    "updated_at": 1767323045,
                    "embedding_model": "hash-3",
                    "metadata": {"topic": "t"},
                    "lang": "en",
                },
            )
            for i, v in vectors.items()
        ],
    )
    backend = QdrantBackend(None, client=memory_client)
    query = [0.8, 0.6, 0.0]
    items = backend.resolve({"userId": "u1", "embedding": query, "limit": 3})["semanticMemories"]
    expected = sorted(vectors, key=lambda i: -_cos(vectors[i], query))[:3]
    assert [int(item["id"]) for item in items] == expected
    for item in items:
        cos = _cos(vectors[int(item["id"])], query)
        assert item["score"] == pytest.approx(cos, abs=1e-5)
        assert item["distance"] == pytest.approx(1 - cos, abs=1e-5)
    first = items[0]
    assert first["content"] == f"c{expected[0]}" and first["source"] == "qdrant"
    assert first["metadata"] == {"topic": "t", "lang": "en"}
    assert first["createdAt"] == "2026-01-02T03:04:05+00:00"
    assert first["updatedAt"] == "2026-01-02T03:04:05+00:00"
    assert first["embeddingModel"] == "hash-3"
    assert len(backend.resolve({"userId": "u1", "embedding": query, "limit": 1})["semanticMemories"]) == 1
    assert backend.resolve({"userId": "u1", "embedding": query, "limit": 0}) == {"semanticMemories": []}


def test_euclid_scores_are_distances_nearest_first(memory_client):
    _create(memory_client, distance=models.Distance.EUCLID)
    vectors = {1: [0.0, 0.0, 0.0], 2: [3.0, 0.0, 0.0], 3: [1.0, 0.0, 0.0]}
    memory_client.upsert(
        COLLECTION,
        [
            models.PointStruct(id=i, vector=v, payload={"user_id": "u", "content": "x"})
            for i, v in vectors.items()
        ],
    )
    items = QdrantBackend(None, client=memory_client).resolve({"userId": "u", "embedding": [0.0, 0.0, 0.0]})[
        "semanticMemories"
    ]
    assert [int(i["id"]) for i in items] == [1, 3, 2]
    assert [i["distance"] for i in items] == pytest.approx([0.0, 1.0, 3.0])
    assert [i["score"] for i in items] == pytest.approx([0.0, 1.0, 3.0])


def test_named_vectors_need_the_vector_name(memory_client):
    memory_client.create_collection(
        COLLECTION,
        vectors_config={
            "text": models.VectorParams(size=3, distance=models.Distance.COSINE),
            "image": models.VectorParams(size=2, distance=models.Distance.DOT),
        },
    )
    memory_client.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=7, vector={"text": [1, 0, 0], "image": [0, 1]}, payload={"user_id": "u", "content": "x"}
            )
        ],
    )
    with pytest.raises(BackendError, match="MEMORY_QDRANT_VECTOR_NAME"):
        QdrantBackend(None, client=memory_client).resolve({"userId": "u", "embedding": [1, 0, 0]})
    named = QdrantBackend(None, client=memory_client, vector_name="text")
    assert [i["id"] for i in named.resolve({"userId": "u", "embedding": [1, 0, 0]})["semanticMemories"]] == [
        "7"
    ]
    with pytest.raises(BackendError, match="no vector 'audio'"):
        QdrantBackend(None, client=memory_client, vector_name="audio").resolve(
            {"userId": "u", "embedding": [1, 0]}
        )


def test_custom_payload_fields(memory_client):
    _create(memory_client)
    memory_client.upsert(
        COLLECTION,
        [
            models.PointStruct(id=1, vector=[1, 0, 0], payload={"owner": "a", "text": "mine"}),
            models.PointStruct(
                id=2, vector=[1, 0, 0], payload={"owner": "b", "text": "theirs", "user_id": "a"}
            ),
        ],
    )
    from memwork.backends.qdrant import PayloadFields

    backend = QdrantBackend(None, client=memory_client, fields=PayloadFields("owner", "text", "model-x"))
    items = backend.resolve({"userId": "a", "embedding": [1, 0, 0]})["semanticMemories"]
    assert [(i["id"], i["content"], i["embeddingModel"]) for i in items] == [("1", "mine", "model-x")]


def test_bad_requests_and_wrong_dimension(memory_client):
    _seed_lookalikes(memory_client)
    backend = QdrantBackend(None, client=memory_client)
    for request, field in [
        ({"embedding": [1, 0, 0]}, "userId"),
        ({"userId": "TenantX", "embedding": [1, 0, 0], "limit": -1}, "limit"),
        ({"userId": "TenantX", "embedding": ["x"]}, "embedding"),
        ({"userId": "TenantX"}, "query"),
    ]:
        with pytest.raises(UsageError) as info:
            backend.resolve(request)
        assert info.value.field == field
    with pytest.raises(BackendError, match="2 dimensions"):
        backend.resolve({"userId": "TenantX", "embedding": [1, 0]})
    with pytest.raises(BackendError, match="MEMORY_QDRANT_EMBEDDING_MODULE"):
        backend.resolve({"userId": "TenantX", "query": "no embedder configured"})


def test_local_storage_with_the_embedding_module_end_to_end(tmp_path):
    """``local:/path`` from the environment: the adapter opens the storage itself (after the test's
    client released the file lock) and embeds the query through the module."""
    store = tmp_path / "qdrant"
    embedder = HashEmbedder(3)
    texts = ["coffee every morning", "hiking on weekends", "allergic to peanuts"]
    seeding = QdrantClient(path=str(store))
    _create(seeding)
    seeding.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=i, vector=embedder.embed_one(t).tolist(), payload={"user_id": "u", "content": t}
            )
            for i, t in enumerate(texts)
        ]
        + [
            models.PointStruct(
                id=99,
                vector=embedder.embed_one(texts[0]).tolist(),
                payload={"user_id": "v", "content": texts[0]},
            )
        ],
    )
    seeding.close()
    backend = from_env(_env(f"local:{store}"))
    try:
        assert backend.availability().available
        items = backend.resolve({"userId": "u", "query": texts[1], "limit": 3})["semanticMemories"]
        assert items[0]["content"] == texts[1] and items[0]["score"] == pytest.approx(1.0, abs=1e-5)
        assert {i["userId"] for i in items} == {"u"} and len(items) == 3
    finally:
        backend.close()


def test_local_path_without_a_storage_is_refused_and_not_created(tmp_path):
    missing = tmp_path / "nothing-here"
    backend = from_env(_env(f"local:{missing}"))
    with pytest.raises(BackendError, match="never creates one"):
        backend.resolve({"userId": "u", "embedding": [1, 0, 0]})
    assert not missing.exists()


# ---- read-only ----------------------------------------------------------------------------------
def test_read_only_nothing_created_nothing_upserted(memory_client, tmp_path):
    _seed_lookalikes(memory_client)
    before = _snapshot(memory_client)
    recording = Recording(memory_client)
    backend = QdrantBackend(None, client=recording)  # type: ignore[arg-type]
    backend.resolve({"userId": "TenantX", "embedding": [1, 0, 0], "limit": 5})
    backend.resolve({"userId": "nobody", "embedding": [0, 1, 0]})
    missing = QdrantBackend(None, collection="not_there", client=recording)  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="does not exist"):
        missing.resolve({"userId": "TenantX", "embedding": [1, 0, 0]})
    degraded = _facade_with(missing).resolve({"userId": "TenantX", "embedding": [1, 0, 0]})
    assert degraded["ok"] is False and "does not exist" in degraded["reason"]
    assert _snapshot(memory_client) == before
    assert "not_there" not in before
    assert set(recording.calls) <= {"get_collection", "query_points"}, recording.calls


def test_read_only_on_disk_storage_files_unchanged_after_resolve_and_smoke(tmp_path):
    store = tmp_path / "qdrant"
    seeding = QdrantClient(path=str(store))
    _seed_lookalikes(seeding)
    before_counts = _snapshot(seeding)
    seeding.close()
    files_before = {p.relative_to(store): p.read_bytes() for p in store.rglob("*") if p.is_file()}
    env = _env(f"local:{store}")
    backend = from_env(env)
    backend.resolve({"userId": "TenantX", "embedding": [1, 0, 0]})
    backend.close()
    missing = from_env({**env, "MEMORY_QDRANT_COLLECTION": "not_there"})
    with pytest.raises(BackendError, match="does not exist"):
        missing.resolve({"userId": "TenantX", "embedding": [1, 0, 0]})
    missing.close()
    smoke = CliRunner().invoke(
        main, ["smoke", "external", "--backend", "qdrant", "--operation", "resolve", "--json"], env=env
    )
    assert smoke.exit_code == 0, smoke.output
    assert json.loads(smoke.stdout)["status"] == "ok"
    files_after = {p.relative_to(store): p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert files_after == files_before
    reopened = QdrantClient(path=str(store))
    assert _snapshot(reopened) == before_counts
    reopened.close()


def _facade_with(backend: QdrantBackend, **extra: str):
    from memwork.plugins import Registry

    env = {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "qdrant", **extra}
    registry = Registry(env, plugins=[], overrides={"qdrant": backend})
    return facade_from_env(env, registry=registry)


# ---- the tenant guard on results ----------------------------------------------------------------
@pytest.fixture
def rest(memory_client):
    _seed_lookalikes(memory_client)
    fake = QdrantRest(memory_client, api_key=API_KEY)
    with serve(fake) as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake


def test_server_mode_sends_the_user_filter_and_the_api_key(rest):
    backend = from_env(_env(rest.url, MEMORY_QDRANT_API_KEY=API_KEY))
    items = backend.resolve({"userId": "tenantx ", "embedding": [1, 0, 0], "limit": 2})["semanticMemories"]
    backend.close()
    assert [i["userId"] for i in items] == ["tenantx "] * 2
    query = next(r for r in rest.requests if r.path.endswith("/points/query"))
    assert query.headers["api-key"] == API_KEY
    assert query.body["filter"] == {"must": [{"key": "user_id", "match": {"value": "tenantx "}}]}
    assert query.body["limit"] == 2 and query.body["with_payload"] is True
    assert all(r.method in ("GET", "POST") for r in rest.requests)
    assert {r.path for r in rest.requests} == {
        f"/collections/{COLLECTION}",
        f"/collections/{COLLECTION}/points/query",
    }


def test_a_misbehaving_server_never_hands_over_another_users_memory(rest, caplog):
    rest.misbehave = True
    backend = from_env(_env(rest.url, MEMORY_QDRANT_API_KEY=API_KEY))
    with caplog.at_level(logging.WARNING, logger="memwork.backends"):
        items = backend.resolve({"userId": "TenantX", "embedding": [1, 0, 0], "limit": 12})[
            "semanticMemories"
        ]
    backend.close()
    assert len(items) == 3 and {i["userId"] for i in items} == {"TenantX"}
    assert "of another user; dropped" in caplog.text


# ---- failure modes through the facade -----------------------------------------------------------
REQUEST = {
    "userId": "TenantX",
    "sessionId": "s1",
    "query": "coffee",
    "embedding": [1.0, 0.0, 0.0],
    "limit": 3,
}


def _resolve(env: dict[str, str]) -> tuple[dict[str, Any], Any]:
    """One resolve through the facade, and the status page after it."""
    facade = facade_from_env(env)
    try:
        return facade.resolve(REQUEST), facade.status()
    finally:
        facade.close()


def test_a_503_is_retried_but_a_500_is_not(rest):
    backend = from_env(_env(rest.url, MEMORY_QDRANT_API_KEY=API_KEY))
    rest.fault = Fault(status=503)
    with pytest.raises(BackendError, match="HTTP 503"):
        backend.resolve(REQUEST)
    retried = len(rest.requests)
    rest.requests.clear()
    rest.fault = Fault(status=500)
    with pytest.raises(BackendError, match="HTTP 500"):
        backend.resolve(REQUEST)
    backend.close()
    assert retried == 3 and len(rest.requests) == 1


def test_the_adapters_own_timeout_ends_a_slow_call(rest):
    """Not the facade's deadline: the adapter's own client timeout (90 % of it) ends the call, so a
    direct caller (smoke, a source) is bounded too. The facade's side is in the conformance suite."""
    deadline_s = 0.3
    rest.fault = Fault(delay_s=slow_delay(deadline_s))  # 20 deadlines: only a timeout ends the wait
    backend = from_env(_facade_env(rest.url, MEMORY_BACKEND_TIMEOUT_MS=str(int(deadline_s * 1000))))
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"(?i)timed? ?out"):
        backend.resolve(REQUEST)
    assert within_deadline(time.monotonic() - started, deadline_s)
    backend.close()


def test_a_wrong_api_key_is_a_401_without_either_key(rest):
    wrong = "wrong-key-SEKRIT-0000"
    result, status = _resolve(_facade_env(rest.url, MEMORY_QDRANT_API_KEY=wrong))
    assert result["ok"] is False and "HTTP 401" in result["reason"]
    assert wrong not in json.dumps(result) + json.dumps(status) and API_KEY not in json.dumps(result)


def test_facade_selects_qdrant_and_resolves_over_http(rest):
    result, status = _resolve(_facade_env(rest.url, MEMORY_QDRANT_API_KEY=API_KEY))
    assert result["ok"] is True and result["source"] == "qdrant"
    assert [m["userId"] for m in result["semanticMemories"]] == ["TenantX"] * 3
    assert status["selectedBackends"] == {"resolve": "qdrant", "write": LEGACY, "compact": LEGACY}
    assert API_KEY not in json.dumps(status)


# ---- gates and CLI ------------------------------------------------------------------------------
def test_declaration_marks_the_api_key_secret_and_keeps_the_slot_names():
    from seed_variables import SEED_VARIABLES

    slot_vars = set(SEED_VARIABLES["qdrant"])
    assert slot_vars <= {v.name for v in DECLARATION.variables}
    assert DECLARATION.variable("MEMORY_QDRANT_API_KEY").secret
    assert DECLARATION.variable("MEMORY_QDRANT_COLLECTION").default == "memind_memory"
    assert dict(DECLARATION.mapping)["semanticMemories"].startswith("the user's Qdrant points nearest first")


def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:6333"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert not [v for v in report.violations if v.backend == "qdrant"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_api_key():
    runner = CliRunner()
    missing = runner.invoke(
        main, ["check", "config", "--backend", "qdrant", "--json"], env={"MEMORY_QDRANT_ENABLED": "1"}
    )
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_QDRANT_URL", "MEMORY_QDRANT_EMBEDDING_MODULE"]
    env = _env("http://127.0.0.1:6333", MEMORY_QDRANT_API_KEY=API_KEY)
    ready = runner.invoke(main, ["check", "config", "--backend", "qdrant", "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(main, ["check", "config", "--backend", "qdrant", "--format", "shell"], env=env)
    assert "export MEMORY_QDRANT_URL=" in shell.output
    assert "MEMORY_QDRANT_COLLECTION=memind_memory" in shell.output
    assert API_KEY not in ready.output + shell.output


def test_smoke_external_not_configured_failed_and_ok(rest):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "qdrant", "--operation", "resolve", "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    env = _env(rest.url, MEMORY_QDRANT_API_KEY=API_KEY)
    before = _snapshot(rest.engine)
    ok = runner.invoke(main, args, env=env)
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["status"] == "ok" and report["returned"] == {"semanticMemories": 0}
    query = [r for r in rest.requests if r.path.endswith("/points/query")][-1]
    assert query.body["filter"]["must"][0]["match"]["value"] == report["userId"]
    assert _snapshot(rest.engine) == before
    rest.fault = Fault(status=500)
    failed = runner.invoke(main, args, env=env)
    assert failed.exit_code == 1 and "HTTP 500" in failed.output and API_KEY not in failed.output
    refused = runner.invoke(main, args, env=_env(refused_url(), MEMORY_BACKEND_TIMEOUT_MS="300"))
    assert refused.exit_code == 1 and "qdrant" in refused.output
    rest.fault = None
    not_there = runner.invoke(main, args, env={**env, "MEMORY_QDRANT_COLLECTION": "nope"})
    assert not_there.exit_code == 1 and "does not exist" in not_there.output
    assert rest.engine.collection_exists("nope") is False


def test_local_storage_through_the_facade_and_a_second_opener_fails_open(tmp_path):
    """Local mode is one process (one client) at a time: the facade resolves over it from its worker
    threads; a second opener degrades with the lock named, and succeeds once the first has closed."""
    store = tmp_path / "qdrant"
    seeding = QdrantClient(path=str(store))
    _seed_lookalikes(seeding)
    seeding.close()
    env = _facade_env(f"local:{store}")
    first = facade_from_env(env)
    for _ in range(3):
        result = first.resolve({**REQUEST, "userId": "tenantx"})
        assert result["ok"] is True and [m["userId"] for m in result["semanticMemories"]] == ["tenantx"] * 3
    second = facade_from_env(env)
    blocked = second.resolve(REQUEST)
    assert blocked["ok"] is False and "already accessed by another instance" in blocked["reason"]
    first.close()
    second.close()
    third = facade_from_env(env)
    assert third.resolve(REQUEST)["ok"] is True
    third.close()
