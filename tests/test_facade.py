"""MemoryFacade: selection, fail-open (raise, hang, closed port), flags, bad input, status -- real DBs."""

import json
import logging
import threading
import time

import pytest
from deadlines import within_deadline

from memwork.contracts import BaseBackend
from memwork.errors import BackendError, BackendTimeout, UsageError
from memwork.facade.facade import STATUS_SCALAR_KEYS, facade_from_env
from memwork.legacy.schema import init_schema

RELEASE = threading.Event()


class ExplodingBackend(BaseBackend):
    """Available, and every call raises -- deliberately failing test backend."""

    name = "exploding"
    category = "semantic"

    def resolve(self, request):
        raise RuntimeError("boom mysql://app:hunter2@db/x")

    def write(self, request):
        raise RuntimeError("boom")

    def compact(self, request):
        raise RuntimeError("boom")


class HangingBackend(BaseBackend):
    name = "hanging"

    def resolve(self, request):
        RELEASE.wait(10)
        return {"memories": [{"content": "too late"}]}


class SemanticBackend(BaseBackend):
    """Available, resolve only: like pgvector once configured."""

    name = "semantic-test"
    category = "semantic"

    def __init__(self):
        self.calls = []

    def resolve(self, request):
        self.calls.append(request)
        return {
            "semanticMemories": [{"content": "nearest", "score": 0.9}],
            "profile": {"attributes": {"x": 1}},
        }


class FakeSemantic(BaseBackend):
    name = "acme-semantic"
    category = "semantic"

    def resolve(self, request):
        return {"semanticMemories": [{"content": "from acme"}]}


class BrokenAvailability(BaseBackend):
    name = "broken-availability"

    def availability(self):
        raise RuntimeError("cannot tell")

    def write(self, request):
        return {}


@pytest.fixture(autouse=True)
def _release_hangs():
    RELEASE.clear()
    yield
    RELEASE.set()


@pytest.fixture(params=["sqlite", "mysql"])
def legacy_url(request):
    url = request.getfixturevalue(f"{request.param}_url")
    init_schema(url, apply=True)
    return url


#: a deadline no loaded machine misses: these tests are about behaviour, not deadlines (tests that are
#: about deadlines pass their own ``MEMORY_BACKEND_TIMEOUT_MS``)
PATIENT_MS = "60000"


def make(legacy_url, **env):
    return facade_from_env(
        {"MEMORY_LEGACY_DATABASE_URL": legacy_url, "MEMORY_BACKEND_TIMEOUT_MS": PATIENT_MS, **env}
    )


WRITE = {
    "userId": "u1",
    "sessionId": "s1",
    "messages": [{"role": "user", "content": "My name is Alice. I want to learn Rust."}],
}
RESOLVE_KEYS = {
    "ok",
    "enabled",
    "skipped",
    "source",
    "profile",
    "semanticMemories",
    "behaviorSummary",
    "activeGoals",
    "memories",
    "policy",
}


def test_round_trip_through_legacy(legacy_url):
    facade = make(legacy_url)
    written = facade.write(WRITE)
    assert (
        written["ok"] and written["source"] == "legacy-conversation-memory" and len(written["created"]) == 2
    )
    compacted = facade.compact({"userId": "u1", "sessionId": "s1"})
    assert compacted["ok"] and compacted["changed"] is False
    resolved = facade.resolve({"userId": "u1", "sessionId": "s1", "query": "who am I", "limit": 40})
    assert set(resolved) == RESOLVE_KEYS
    assert resolved["ok"] and not resolved["skipped"] and resolved["enabled"]
    assert resolved["profile"]["attributes"] == {"name": "Alice"}
    assert [g["content"] for g in resolved["activeGoals"]] == ["I want to learn Rust"]
    json.dumps(resolved)  # a JSON client sees exactly this


def test_memory_disabled_skips_without_touching_backend():
    facade = facade_from_env(
        {"MEMORY_ENABLED": "0", "MEMORY_LEGACY_DATABASE_URL": "mysql://root@127.0.0.1:1/x"}
    )
    for op, req in (("resolve", {"userId": "u"}), ("write", WRITE), ("compact", {"userId": "u"})):
        result = getattr(facade, op)(req)
        assert result["ok"] and result["skipped"] and result["enabled"] is False and result["source"] is None
    assert facade.resolve({})["memories"] == []  # not even validated: nothing is touched


def test_event_log_disabled_skips_write_only(legacy_url):
    facade = make(legacy_url, MEMORY_EVENT_LOG_ENABLED="0")
    result = facade.write(WRITE)
    assert result["skipped"] and result["enabled"] and "event log" in result["reason"]
    assert facade.resolve({"userId": "u1"})["memories"] == []


def test_profile_disabled_suppresses_profile(legacy_url):
    make(legacy_url).write(WRITE)
    resolved = make(legacy_url, MEMORY_PROFILE_ENABLED="0").resolve({"userId": "u1"})
    assert resolved["ok"] and resolved["profile"] is None and resolved["memories"]


def test_backend_that_raises_fails_open_and_logs(legacy_url, caplog):
    facade = make(legacy_url, MEMORY_BACKEND="exploding")
    facade.registry.register(ExplodingBackend())
    with caplog.at_level(logging.WARNING, logger="memwork.facade"):
        result = facade.resolve({"userId": "u1"})
    assert result["ok"] is False and result["source"] == "exploding" and result["memories"] == []
    assert "RuntimeError: boom" in result["reason"] and "hunter2" not in result["reason"]
    assert "degraded" in caplog.text
    # write/compact: MEMORY_BACKEND=exploding is available and supports them, so it is used and degrades
    assert facade.write(WRITE)["ok"] is False


def test_backend_that_raises_with_fail_open_off_raises_typed_error(legacy_url):
    facade = make(legacy_url, MEMORY_BACKEND="exploding", MEMORY_FAIL_OPEN="0")
    facade.registry.register(ExplodingBackend())
    with pytest.raises(BackendError, match="exploding resolve failed: RuntimeError"):
        facade.resolve({"userId": "u1"})


def test_hanging_backend_is_cut_off_at_the_timeout(legacy_url):
    facade = make(legacy_url, MEMORY_BACKEND="hanging", MEMORY_BACKEND_TIMEOUT_MS="200")
    facade.registry.register(HangingBackend())
    started = time.monotonic()
    result = facade.resolve({"userId": "u1"})
    assert within_deadline(time.monotonic() - started, 0.2)  # never the hang's own length
    assert result["ok"] is False and "timed out after 200 ms" in result["reason"]


def test_hanging_backend_with_fail_open_off_raises_timeout(legacy_url):
    facade = make(
        legacy_url, MEMORY_BACKEND="hanging", MEMORY_BACKEND_TIMEOUT_MS="100", MEMORY_FAIL_OPEN="off"
    )
    facade.registry.register(HangingBackend())
    with pytest.raises(BackendTimeout):
        facade.resolve({"userId": "u1"})


def test_closed_port_fails_open_for_every_operation():
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": "mysql://root:s3cret@127.0.0.1:1/x"})
    for op, req in (("resolve", {"userId": "u"}), ("write", WRITE), ("compact", {"userId": "u"})):
        result = getattr(facade, op)(req)
        assert result["ok"] is False and result["source"] == "legacy-conversation-memory"
        assert "OperationalError" in result["reason"] and "s3cret" not in result["reason"]


def test_closed_port_with_fail_open_off_raises():
    facade = facade_from_env(
        {"MEMORY_LEGACY_DATABASE_URL": "mysql://root@127.0.0.1:1/x", "MEMORY_FAIL_OPEN": "0"}
    )
    with pytest.raises(BackendError, match="OperationalError"):
        facade.write(WRITE)


@pytest.mark.parametrize(
    ("op", "request_", "field"),
    [
        ("resolve", {"limit": 5}, "userId"),
        ("resolve", {"userId": "u1", "limit": 500}, "limit"),
        (
            "write",
            {"userId": "u1", "sessionId": "s", "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
        ),
        ("write", {"userId": "u1", "sessionId": "s", "messages": {"role": "user"}}, "messages"),
        (
            "write",
            {"userId": "u1", "sessionId": "s", "messages": [{"role": "user", "content": "x" * 20000}]},
            "messages[0].content",
        ),
        ("compact", "not an object", "request"),
    ],
)
def test_bad_input_degrades_naming_the_field_and_writes_nothing(legacy_url, op, request_, field):
    facade = make(legacy_url)
    result = getattr(facade, op)(request_)
    assert result["ok"] is False and result["field"] == field and field in result["reason"]
    assert make(legacy_url).resolve({"userId": "u1"})["memories"] == []
    with pytest.raises(UsageError) as err:
        getattr(make(legacy_url, MEMORY_FAIL_OPEN="0"), op)(request_)
    assert err.value.field == field


def test_semantic_backend_serves_resolve_while_write_and_compact_stay_legacy(legacy_url):
    facade = make(legacy_url, MEMORY_BACKEND="semantic-test")
    semantic = facade.registry.register(SemanticBackend())
    status = facade.status()
    assert status["selectedBackend"] == "semantic-test"
    assert status["selectedBackends"] == {
        "resolve": "semantic-test",
        "write": "legacy-conversation-memory",
        "compact": "legacy-conversation-memory",
    }
    assert facade.write(WRITE)["source"] == "legacy-conversation-memory"
    resolved = facade.resolve({"userId": "u1", "query": "q"})
    assert resolved["source"] == "semantic-test" and resolved["semanticMemories"][0]["content"] == "nearest"
    assert semantic.calls[0]["limit"] == 40 and semantic.calls[0]["query"] == "q"


def test_a_backend_registered_in_code_is_selected_once_available(legacy_url):
    facade = make(legacy_url, MEMORY_BACKEND="acme-semantic")
    assert facade.status()["selectedBackend"] == "legacy-conversation-memory"
    facade.registry.register(FakeSemantic())
    assert facade.resolve({"userId": "u1"})["source"] == "acme-semantic"
    assert [b["name"] for b in facade.status()["backends"]].count("acme-semantic") == 1


@pytest.mark.parametrize("wanted", ["qdrant", "mem0", "letta", "no-such-backend", "pgvector"])
def test_unavailable_or_unknown_backend_falls_back_to_legacy_and_says_so(legacy_url, wanted):
    facade = make(legacy_url, MEMORY_BACKEND=wanted)
    status = facade.status()
    assert set(status["selectedBackends"].values()) == {"legacy-conversation-memory"}
    assert wanted in status["fallbacks"]["resolve"]
    assert facade.resolve({"userId": "u1"})["source"] == "legacy-conversation-memory"


def test_broken_availability_counts_as_unavailable(legacy_url):
    facade = make(legacy_url, MEMORY_BACKEND="broken-availability")
    facade.registry.register(BrokenAvailability())
    row = next(b for b in facade.status()["backends"] if b["name"] == "broken-availability")
    assert row["available"] is False and "cannot tell" in row["reason"]
    assert facade.write(WRITE)["source"] == "legacy-conversation-memory"


def test_no_available_backend_degrades(legacy_url):
    facade = facade_from_env({"MEMORY_LEGACY_DATABASE_URL": "nonsense"})
    result = facade.resolve({"userId": "u1"})
    assert result["ok"] is False and "legacy" in result["reason"]


def test_status_payload_shape_and_no_secrets():
    env = {
        "MEMORY_LEGACY_DATABASE_URL": "mysql://app:hunter2@db:3306/memind",
        "MEMORY_MEM0_API_KEY": "mem0-key-123",
        "MEMORY_NEO4J_PASSWORD": "neo-pass-456",
        "MEMORY_PGVECTOR_DATABASE_URL": "postgresql://pg:pgpass789@h/db",
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_ENABLED": "perhaps",
    }
    status = facade_from_env(env).status()
    for key in STATUS_SCALAR_KEYS:
        assert key in status
    assert [b["name"] for b in status["backends"]][:2] == ["legacy-conversation-memory", "pgvector"]
    names = {b["name"] for b in status["backends"]}
    assert {"qdrant", "weaviate", "mem0", "letta", "neo4j", "redis-streams", "langgraph"} <= names
    for row in status["backends"]:
        assert set(row) >= {"name", "category", "available", "reason", "supports"}
    assert status["configErrors"][0]["field"] == "MEMORY_ENABLED"
    text = json.dumps(status)
    for secret in ("hunter2", "mem0-key-123", "neo-pass-456", "pgpass789"):
        assert secret not in text


def test_memwork_exports_facade_lazily():
    import memwork

    assert memwork.facade_from_env is facade_from_env
    assert memwork.MemoryFacade.__name__ == "MemoryFacade"


class SpyBackend(BaseBackend):
    """Records every touch, availability checks included."""

    name = "spy"

    def __init__(self):
        self.touched = []

    def availability(self):
        self.touched.append("availability")
        return super().availability()

    def resolve(self, request):
        self.touched.append("resolve")
        return {}

    def write(self, request):
        self.touched.append("write")
        return {}

    def compact(self, request):
        self.touched.append("compact")
        return {}


def test_memory_disabled_never_touches_any_backend(sqlite_url):
    facade = facade_from_env(
        {"MEMORY_ENABLED": "0", "MEMORY_BACKEND": "spy", "MEMORY_LEGACY_DATABASE_URL": sqlite_url}
    )
    spy = facade.registry.register(SpyBackend())
    for op, req in (("resolve", {"userId": "u"}), ("write", WRITE), ("compact", {"userId": "u"})):
        assert getattr(facade, op)(req)["skipped"]
    assert spy.touched == []


def test_event_log_disabled_never_touches_the_write_backend(sqlite_url):
    facade = facade_from_env(
        {"MEMORY_EVENT_LOG_ENABLED": "off", "MEMORY_BACKEND": "spy", "MEMORY_LEGACY_DATABASE_URL": sqlite_url}
    )
    spy = facade.registry.register(SpyBackend())
    assert facade.write(WRITE)["skipped"] and spy.touched == []
    facade.compact({"userId": "u"})
    assert spy.touched[-1] == "compact"  # only write is gated by the event log flag


def _rows(url):
    from sqlalchemy import func, select

    from memwork.db import get_engine
    from memwork.legacy.schema import memory_items, messages

    with get_engine(url).connect() as conn:
        return [
            conn.execute(select(func.count()).select_from(t)).scalar_one() for t in (messages, memory_items)
        ]


BAD_INPUTS = [
    ("write", {"sessionId": "s", "messages": WRITE["messages"]}, "userId"),
    ("write", {"userId": "u1", "messages": WRITE["messages"]}, "sessionId"),
    ("write", {"userId": "u1", "sessionId": "s"}, "messages"),
    ("write", {"userId": "u1", "sessionId": "s", "messages": ["I like tea"]}, "messages[0]"),
    (
        "write",
        {"userId": "u1", "sessionId": "s", "messages": [{"content": "I like tea"}]},
        "messages[0].role",
    ),
    (
        "write",
        {"userId": "u1", "sessionId": "s", "messages": [*WRITE["messages"], {"role": "user", "content": ""}]},
        "messages[1].content",
    ),
    (
        "write",
        {
            "userId": "u1",
            "sessionId": "s",
            "messages": [*WRITE["messages"], {"role": "user", "content": "x" * 16001}],
        },
        "messages[1].content",
    ),
    ("write", {"userId": "u1", "sessionId": "s", "messages": WRITE["messages"] * 101}, "messages"),
    ("compact", {"sessionId": "s"}, "userId"),
    ("resolve", {"userId": "u1", "limit": 0}, "limit"),
    ("resolve", {"userId": "u1", "limit": 201}, "limit"),
    ("resolve", {"userId": "u1", "limit": "40"}, "limit"),
]


@pytest.mark.parametrize(("op", "request_", "field"), BAD_INPUTS)
def test_bad_input_leaves_both_tables_untouched(legacy_url, op, request_, field):
    """A valid first message must not be saved when a later one is bad: all or nothing."""
    facade = make(legacy_url)
    result = getattr(facade, op)(request_)
    assert result["ok"] is False and result["field"] == field and field in result["reason"]
    assert _rows(legacy_url) == [0, 0]
    with pytest.raises(UsageError) as err:
        getattr(make(legacy_url, MEMORY_FAIL_OPEN="0"), op)(request_)
    assert err.value.field == field
    assert _rows(legacy_url) == [0, 0]


@pytest.mark.parametrize("limit", [1, 200])
def test_limit_bounds_are_inclusive(legacy_url, limit):
    facade = make(legacy_url)
    for i in range(3):
        facade.write(
            {"userId": "u1", "sessionId": "s", "messages": [{"role": "user", "content": f"I have {i} cats"}]}
        )
    resolved = facade.resolve({"userId": "u1", "limit": limit})
    assert resolved["ok"] and len(resolved["memories"]) == min(limit, 3)
    assert resolved["memories"][0]["content"] == "I have 2 cats"  # newest first
