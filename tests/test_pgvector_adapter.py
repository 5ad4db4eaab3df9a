"""The pgvector backend: dormant unless configured (one reason per missing piece), resolve nearest-first,
only the user's rows, parameterised SQL, the pool, and both search strategies against a real server."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from memwork.backends.base import supports_of
from memwork.backends.pgvector import PgvectorBackend, from_env
from memwork.errors import BackendError, UsageError
from memwork.pgvector.schema import ensure_schema

FULL_ENV = {
    "MEMORY_VECTOR_ENABLED": "1",
    "MEMORY_PGVECTOR_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "MEMORY_PGVECTOR_EMBEDDING_MODULE": "memwork.pgvector.local_hash",
}


def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    avail = backend.availability()
    assert not avail.available
    assert avail.reason == (
        "MEMORY_VECTOR_ENABLED is not 1; MEMORY_PGVECTOR_DATABASE_URL is not set; "
        "MEMORY_PGVECTOR_EMBEDDING_MODULE is not set"
    )
    assert supports_of(backend) == {"resolve": True, "write": False, "compact": False}


@pytest.mark.parametrize(
    ("missing", "reason"),
    [
        ("MEMORY_VECTOR_ENABLED", "MEMORY_VECTOR_ENABLED is not 1"),
        ("MEMORY_PGVECTOR_DATABASE_URL", "MEMORY_PGVECTOR_DATABASE_URL is not set"),
        ("MEMORY_PGVECTOR_EMBEDDING_MODULE", "MEMORY_PGVECTOR_EMBEDDING_MODULE is not set"),
    ],
)
def test_each_missing_piece_is_its_own_reason(missing, reason):
    env = {k: v for k, v in FULL_ENV.items() if k != missing}
    assert from_env(env).availability().reason == reason


def test_fully_configured_is_available_without_connecting():
    backend = from_env(FULL_ENV)  # port 1: nothing listens; from_env must not connect
    assert backend.availability().available
    assert backend.table == "memory_embeddings" and backend.pool_max == 5


def test_never_reads_database_url():
    env = {**FULL_ENV, "DATABASE_URL": "mysql://app@db/app"}
    del env["MEMORY_PGVECTOR_DATABASE_URL"]
    backend = from_env(env)
    assert backend.availability().reason == "MEMORY_PGVECTOR_DATABASE_URL is not set"
    assert backend.database_url is None


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("MEMORY_PGVECTOR_TABLE", "x; drop", "MEMORY_PGVECTOR_TABLE='x; drop'"),
        ("MEMORY_PGVECTOR_POOL_MAX", "zero", "MEMORY_PGVECTOR_POOL_MAX='zero' must be a positive integer"),
        ("MEMORY_PGVECTOR_SEARCH", "fuzzy", "MEMORY_PGVECTOR_SEARCH='fuzzy'"),
        ("MEMORY_PGVECTOR_EMBEDDING_MODULE", "./nope.py", "no such file"),
    ],
)
def test_bad_settings_make_it_unavailable_with_the_value_named(key, value, reason):
    avail = from_env({**FULL_ENV, key: value}).availability()
    assert not avail.available and reason in avail.reason


def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == [] and validate_backend(from_env(FULL_ENV)) == []
    report = check_all({}, adapters=True, plugins=[])  # built from an empty env: dormant
    assert report.ok and "pgvector adapter" in report.checked, report.violations


# ---- against the embedded PostgreSQL ------------------------------------------------------------
def _seed(url: str, rows: list[tuple[str, str, list[float]]], table: str = "memory_embeddings") -> None:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        for user_id, source_id, vector in rows:
            conn.execute(
                f"INSERT INTO {table} (user_id, content, embedding, embedding_model, source_memory_id) "
                "VALUES (%s, %s, %s, 'test', %s)",
                (user_id, f"content of {source_id}", np.asarray(vector, dtype=np.float32), source_id),
            )


@pytest.fixture
def seeded(pg_url):
    ensure_schema(pg_url, "memory_embeddings", 3, create_vector_index=True)
    _seed(
        pg_url,
        [
            ("alice", "a-far", [0.0, 0.0, 1.0]),
            ("alice", "a-near", [1.0, 0.0, 0.0]),
            ("alice", "a-mid", [1.0, 1.0, 0.0]),
            ("bob", "b-nearest", [1.0, 0.01, 0.0]),
        ],
    )
    return pg_url


@pytest.mark.parametrize("search", ["auto", "exact", "hnsw"])
def test_resolve_returns_the_users_rows_nearest_first(seeded, search):
    backend = PgvectorBackend(seeded, search=search)
    try:
        result = backend.resolve({"userId": "alice", "embedding": [1.0, 0.1, 0.0], "limit": 10})
    finally:
        backend.close()
    memories = result["semanticMemories"]
    assert [m["id"] for m in memories] == ["a-near", "a-mid", "a-far"]
    assert all(m["userId"] == "alice" for m in memories)
    query = np.array([1.0, 0.1, 0.0])
    stored = {"a-near": [1.0, 0.0, 0.0], "a-mid": [1.0, 1.0, 0.0], "a-far": [0.0, 0.0, 1.0]}
    for memory in memories:  # score = 1 - cosine distance, as computed here
        vector = np.array(stored[memory["id"]])
        cosine = float(query @ vector / np.linalg.norm(query) / np.linalg.norm(vector))
        assert memory["score"] == pytest.approx(cosine, abs=1e-6)
        assert memory["distance"] == pytest.approx(1 - cosine, abs=1e-6)
    assert memories[0]["embeddingModel"] == "test" and memories[0]["content"] == "content of a-near"


def test_resolve_limit_and_unknown_user(seeded):
    backend = PgvectorBackend(seeded)
    try:
        assert (
            len(backend.resolve({"userId": "alice", "embedding": [1, 0, 0], "limit": 1})["semanticMemories"])
            == 1
        )
        assert backend.resolve({"userId": "carol", "embedding": [1, 0, 0]})["semanticMemories"] == []
        assert backend.resolve({"userId": "alice", "embedding": [1, 0, 0], "limit": 0}) == {
            "semanticMemories": []
        }
    finally:
        backend.close()


def test_resolve_embeds_the_query_through_the_module(seeded, monkeypatch):
    env = {**FULL_ENV, "MEMORY_PGVECTOR_DATABASE_URL": seeded}
    backend = from_env(env)
    try:
        result = backend.resolve({"userId": "alice", "query": "dark mode", "limit": 5})
    finally:
        backend.close()
    assert {m["id"] for m in result["semanticMemories"]} == {"a-near", "a-mid", "a-far"}


def test_user_text_travels_as_parameters(seeded):
    backend = PgvectorBackend(seeded)
    try:
        result = backend.resolve({"userId": "alice' OR '1'='1", "embedding": [1, 0, 0]})
    finally:
        backend.close()
    assert result["semanticMemories"] == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"embedding": [1, 0, 0]}, "userId"),
        ({"userId": "alice"}, "query"),
        ({"userId": "alice", "embedding": ["x"]}, "embedding"),
        ({"userId": "alice", "embedding": [1.0, float("nan"), 0.0]}, "embedding"),
        ({"userId": "alice", "embedding": [1.0, float("inf"), float("-inf")]}, "embedding"),
        ({"userId": "alice", "embedding": [1e39, 0.0, 0.0]}, "embedding"),  # no float32 holds it
        ({"userId": "alice", "embedding": []}, "embedding"),
        ({"userId": "alice", "embedding": [1, 0, 0], "limit": -1}, "limit"),
    ],
)
def test_bad_requests_are_usage_errors(seeded, request_, field):
    backend = PgvectorBackend(seeded)
    with pytest.raises(UsageError, match=field):
        backend.resolve(request_)


def test_a_list_embedding_is_packed_as_pgvector_would_dump_it(seeded):
    """A flat list goes to the server without numpy (:func:`packed_vector`): the same bytes
    pgvector's own dumper sends, and the same answer as the numpy path (an array, nested lists)."""
    from pgvector import Vector

    from memwork.backends.pgvector import packed_vector

    values = [1.0, 0.1, 0.0, -2.5e-8, 3.4e38, 7]
    assert bytes(packed_vector(values) or b"") == Vector(np.asarray(values, dtype=np.float32)).to_binary()
    for other in ([1.0, float("nan")], [1.0, "2"], [[1.0, 0.0]], (1.0, 0.0), [], [True, 1e39]):
        assert packed_vector(other) is None  # the numpy path decides: converts or names the problem
    backend = PgvectorBackend(seeded)
    try:
        answers = [
            [
                m["id"]
                for m in backend.resolve({"userId": "alice", "embedding": e, "limit": 3})["semanticMemories"]
            ]
            for e in ([1.0, 0.1, 0.0], np.asarray([1.0, 0.1, 0.0]), [[1.0, 0.1, 0.0]], ["1.0", "0.1", "0"])
        ]
    finally:
        backend.close()
    assert answers == [["a-near", "a-mid", "a-far"]] * 4


def test_wrong_dimension_and_unreachable_server_are_backend_errors(seeded):
    backend = PgvectorBackend(seeded)
    with pytest.raises(BackendError, match="different vector dimensions"):
        backend.resolve({"userId": "alice", "embedding": [1.0, 0.0]})
    backend.close()
    dead = PgvectorBackend("postgresql://nobody@127.0.0.1:1/none", timeout=1.0)
    with pytest.raises(BackendError, match="pgvector resolve failed"):
        dead.resolve({"userId": "alice", "embedding": [1, 0, 0]})
    dead.close()


def test_pool_is_bounded_and_shared_by_concurrent_resolves(seeded):
    backend = from_env({**FULL_ENV, "MEMORY_PGVECTOR_DATABASE_URL": seeded, "MEMORY_PGVECTOR_POOL_MAX": "2"})
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                r = backend.resolve({"userId": "alice", "embedding": [1, 0.1, 0], "limit": 3})
                results.append([m["id"] for m in r["semanticMemories"]])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert len(results) == 30 and all(r == ["a-near", "a-mid", "a-far"] for r in results)
        stats = backend._pool.get_stats()
        assert backend._pool.max_size == 2 and stats["pool_size"] <= 2
    finally:
        backend.close()


def test_auto_falls_back_to_hnsw_above_the_exact_cap(seeded):
    backend = PgvectorBackend(seeded, search="auto", exact_max=2)  # alice has 3 rows
    try:
        result = backend.resolve({"userId": "alice", "embedding": [1.0, 0.1, 0.0], "limit": 3})
    finally:
        backend.close()
    assert [m["id"] for m in result["semanticMemories"]] == ["a-near", "a-mid", "a-far"]


# ---- the mixed-model guard ------------------------------------------------------------------------
def _seed_models(url: str, rows: list[tuple[str, str, list[float], str]]) -> None:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        for user_id, source_id, vector, model in rows:
            conn.execute(
                "INSERT INTO memory_embeddings "
                "(user_id, content, embedding, embedding_model, source_memory_id) "
                "VALUES (%s, %s, %s, %s, %s)",
                (user_id, f"content of {source_id}", np.asarray(vector, dtype=np.float32), model, source_id),
            )


@pytest.fixture
def half_reembedded(pg_url):
    """alice: three rows of the new model, two (nearer to the query) still of the old one."""
    ensure_schema(pg_url, "memory_embeddings", 3, create_vector_index=True)
    _seed_models(
        pg_url,
        [
            ("alice", "new-1", [1.0, 0.2, 0.0], "model-b"),
            ("alice", "new-2", [0.0, 1.0, 0.0], "model-b"),
            ("alice", "new-3", [0.0, 0.0, 1.0], "model-b"),
            ("alice", "old-1", [1.0, 0.0, 0.0], "model-a"),
            ("alice", "old-2", [1.0, 0.01, 0.0], "model-a"),
            ("bob", "bob-1", [1.0, 0.0, 0.0], "model-a"),
        ],
    )
    return pg_url


@pytest.mark.parametrize(
    ("search", "exact_max"), [("auto", 5000), ("auto", 2), ("exact", 5000), ("hnsw", 5000)]
)
def test_a_resolve_never_mixes_two_models(half_reembedded, search, exact_max):
    """Unconfigured: the user's main model answers (the nearer old-model rows are left out, counted);
    ``auto`` above its exact cap takes the HNSW path, guarded the same way."""
    backend = PgvectorBackend(half_reembedded, search=search, exact_max=exact_max)
    try:
        found = backend.resolve({"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 10})
        counters = backend.counters()
    finally:
        backend.close()
    memories = found["semanticMemories"]
    assert [m["id"] for m in memories] == ["new-1", "new-2", "new-3"]
    assert {m["embeddingModel"] for m in memories} == {"model-b"}
    assert counters["resolves"] == 1
    if search == "exact" or (search == "auto" and exact_max > 5):  # the exact statement counts them
        assert counters["guardedResolves"] == 1 and counters["otherModelRowsLeftOut"] == 2


@pytest.mark.parametrize("search", ["exact", "hnsw"])
def test_the_configured_model_answers_and_the_others_are_counted_in_status(half_reembedded, search):
    env = {
        **FULL_ENV,
        "MEMORY_PGVECTOR_DATABASE_URL": half_reembedded,
        "MEMORY_PGVECTOR_MODEL": "model-a",
        "MEMORY_PGVECTOR_SEARCH": search,
    }
    backend = from_env(env)
    try:
        alice = backend.resolve({"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 10})
        bob = backend.resolve({"userId": "bob", "embedding": [1.0, 0.0, 0.0], "limit": 10})
        status = backend.model_status()
    finally:
        backend.close()
    assert [m["id"] for m in alice["semanticMemories"]] == ["old-1", "old-2"]
    assert [m["id"] for m in bob["semanticMemories"]] == ["bob-1"]
    assert status == {
        "model": "model-a",
        "configured": True,
        "models": {"model-a": 3, "model-b": 3},
        "other_model_rows": 3,
        "mixed_model_users": 1,
    }


def test_a_configured_model_the_user_lacks_answers_nothing(half_reembedded):
    backend = PgvectorBackend(half_reembedded, model="model-c")
    try:
        assert backend.resolve({"userId": "alice", "embedding": [1, 0, 0]})["semanticMemories"] == []
        assert backend.model_status()["other_model_rows"] == 6
    finally:
        backend.close()


def test_the_guard_counters_show_in_the_facade_status(half_reembedded):
    from memwork.facade.facade import _counters  # each backend row of status() carries them

    backend = PgvectorBackend(half_reembedded)
    try:
        backend.resolve({"userId": "alice", "embedding": [1, 0, 0]})
        assert _counters(backend)["counters"]["otherModelRowsLeftOut"] == 2
    finally:
        backend.close()


# one statement answers the search and the guard: its one-model fast path and its grouping path
GUARD_CASES = {
    # user rows (source id, model); configured model; expected answer (nearest first); rows left out
    "one model": ([("a", "m1"), ("b", "m1")], None, ["a", "b"], 0),
    "one model, another configured": ([("a", "m1"), ("b", "m1")], "m2", [], 2),
    "one model, it configured": ([("a", "m1"), ("b", "m1")], "m1", ["a", "b"], 0),
    "no model": ([("a", None), ("b", None)], None, ["a", "b"], 0),
    "no model, one configured": ([("a", None), ("b", None)], "m1", [], 2),
    "model and none: most rows win": ([("a", None), ("b", "m1"), ("c", "m1")], None, ["b", "c"], 1),
    "none has most rows": ([("a", "m1"), ("b", None), ("c", None)], None, ["b", "c"], 1),
    "a tie: the smaller id": ([("a", "m2"), ("b", "m1"), ("c", "m2"), ("d", "m1")], None, ["b", "d"], 2),
    "mixed, configured": ([("a", "m2"), ("b", "m1"), ("c", "m2")], "m1", ["b"], 2),
}


@pytest.mark.parametrize("search", ["auto", "exact"])
@pytest.mark.parametrize("case", list(GUARD_CASES))
def test_the_guard_in_the_search_statement(pg_url, case, search):
    """Issue 20 folded the model guard into the search statement with a fast path for a user of one
    model; every branch answers from one model and counts the rows it left out. Rows nearer the query
    come first in ``rows`` (a, b, c, d: decreasing cosine)."""
    rows, model, expected, left_out = GUARD_CASES[case]
    ensure_schema(pg_url, "memory_embeddings", 3)
    angles = {"a": 0.0, "b": 0.3, "c": 0.6, "d": 0.9}
    _seed_models(
        pg_url,
        [("alice", s, [float(np.cos(angles[s])), float(np.sin(angles[s])), 0.0], m) for s, m in rows]
        + [("bob", "bob-1", [1.0, 0.0, 0.0], "m3")],  # another user's model never counts
    )
    backend = PgvectorBackend(pg_url, search=search, model=model)
    try:
        found = backend.resolve({"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 10})
        counters = backend.counters()
    finally:
        backend.close()
    memories = found["semanticMemories"]
    assert [m["id"] for m in memories] == expected
    assert len({m["embeddingModel"] for m in memories}) <= 1  # never two models in one answer
    assert counters["resolves"] == 1
    assert (counters["guardedResolves"], counters["otherModelRowsLeftOut"]) == (int(left_out > 0), left_out)


def _round_trips(pool, action) -> int:
    """How many times ``action()`` made the client wait for the server on the pool's one connection:
    the libpq protocol trace's ``Sync`` (extended protocol) and ``Query`` (simple protocol) messages."""
    import tempfile

    with tempfile.TemporaryFile("w+") as trace:
        with pool.connection() as conn:
            pgconn = conn.pgconn  # the pool of one hands this same connection to ``action``
        pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().splitlines()]
    return sum(1 for f in sent if len(f) > 3 and f[1] == "F" and f[3] in ("Sync", "Query"))


@pytest.mark.parametrize("model", [None, "model-a"])
def test_a_guarded_resolve_is_one_round_trip(half_reembedded, model):
    """The search, the model pick and the other-model count travel in one prepared statement: one
    round trip per resolve under a steady deadline, with the mixed-model rows still left out and
    counted (fold the guard back into a statement of its own and this fails)."""
    from memwork.deadline import CallScope, Deadline, using_scope

    backend = PgvectorBackend(half_reembedded, pool_max=1, model=model)
    request = {"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 10}

    def resolve() -> list[str]:
        with using_scope(CallScope(Deadline.after(60.0), "resolve")):
            return [m["id"] for m in backend.resolve(request)["semanticMemories"]]

    try:
        resolve()  # opens the pool, sets the session's statement_timeout once
        answers: list[list[str]] = []
        trips = _round_trips(backend._get_pool(), lambda: answers.extend(resolve() for _ in range(3)))
        counters = backend.counters()
    finally:
        backend.close()
    expected = ["new-1", "new-2", "new-3"] if model is None else ["old-1", "old-2"]
    assert answers == [expected] * 3
    assert trips == 3
    assert counters["resolves"] == 4 and counters["otherModelRowsLeftOut"] == 4 * (5 - len(expected))


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_server_formatted_timestamps_read_as_pythons_isoformat(pg_url: str, zone: str) -> None:
    """Issue 20: resolve reads createdAt/updatedAt as text formatted by PostgreSQL; it must be exactly
    what ``datetime.isoformat()`` gives for the same value in the session's time zone."""
    from memwork.backends.pgvector import _iso
    from memwork.db import embedded

    values = ["2025-06-01 10:00:00+00", "2025-06-01 10:00:00.5+00", "2024-12-31 23:59:59.000001+00"]
    with psycopg.connect(embedded.ensure(pg_url, create=False).libpq or "", autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        for value in values:
            parsed, text = conn.execute(
                f"SELECT x, {_iso('x')} FROM (SELECT %s::timestamptz AS x) AS v", (value,)
            ).fetchone()
            assert text == parsed.isoformat(), (zone, value)


@pytest.mark.parametrize("search", ["exact", "hnsw"])
@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_resolve_timestamps_are_isoformat_whether_updated_or_not(
    pg_url: str, search: str, zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """createdAt/updatedAt are ``datetime.isoformat()`` in the session's time zone, whole seconds and
    fractions alike; a row never updated (updated_at = created_at) is formatted once and its
    updatedAt is the same text, a row updated later gets its own."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    ensure_schema(pg_url, "memory_embeddings", 3, create_vector_index=True)
    stamps = {  # source id -> (created_at, updated_at)
        "same-whole": ("2025-06-01 10:00:00+00", "2025-06-01 10:00:00+00"),
        "same-fraction": ("2024-12-31 23:59:59.000001+00", "2024-12-31 23:59:59.000001+00"),
        "updated": ("2025-06-01 10:00:00+00", "2025-11-02 04:30:00.5+00"),
        "updated-whole": ("2025-01-15 12:00:00.25+00", "2025-03-09 06:59:59+00"),
    }
    with psycopg.connect(pg_url) as conn:
        register_vector(conn)
        for i, (source_id, (created, updated)) in enumerate(stamps.items()):
            conn.execute(
                "INSERT INTO memory_embeddings (user_id, content, embedding, source_memory_id, "
                "created_at, updated_at) VALUES ('alice', 'c', %s, %s, %s, %s)",
                (np.asarray([1.0, float(i), 0.0], dtype=np.float32), source_id, created, updated),
            )
    monkeypatch.setenv("PGTZ", zone)  # the pool's sessions run in this time zone
    backend = PgvectorBackend(pg_url, search=search)
    try:
        found = backend.resolve({"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 10})
    finally:
        backend.close()
    got = {m["id"]: (m["createdAt"], m["updatedAt"]) for m in found["semanticMemories"]}

    def iso(value: str) -> str:
        return datetime.fromisoformat(value.replace(" ", "T")).astimezone(ZoneInfo(zone)).isoformat()

    assert got == {source: (iso(c), iso(u)) for source, (c, u) in stamps.items()}
    assert got["same-whole"][0] == got["same-whole"][1] and got["updated"][0] != got["updated"][1]
