"""What every memory-backend adapter promises, checked once per (adapter, fake) pair.

Each adapter meets the same faults through the fail-open facade -- an HTTP error status, malformed
JSON, a dropped connection, a refused connection, a server slower than the deadline -- and must answer
degraded (``ok: false``, its own name as ``source``, the fault named in ``reason``, the empty payload),
stay listed as available, keep its secret out of the payload, the status page and the log, honour the
deadline, and raise a typed error without the secret when fail-closed. Configured, it is available
without connecting anywhere; unconfigured, it is dormant and passes the contract gate.

The adapters run their real client code against the fakes of ``tests/fakes`` (HTTP services) or a bare
TCP listener (Redis); a backend's own behaviour (its requests, mapping, retry policy, tenant guard on
its data) stays in its ``test_backend_<name>.py``. Timings follow ``tests/deadlines.py``: the slow fake
sleeps twenty deadlines, so an answer in under ten proves the deadline ended the call on any machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deadlines import slow_delay, within_deadline
from fakes.langgraph import FakeLangGraph
from fakes.letta import FakeLetta
from fakes.mem0 import FakeMem0
from fakes.neo4j import FakeNeo4j
from fakes.qdrant import QdrantRest
from fakes.server import FakeService, Fault, refused_url, serve
from fakes.tcp import Listener, tcp_listener
from fakes.weaviate import FakeWeaviate

from memwork.backends.base import supports_of
from memwork.errors import BackendError
from memwork.facade.contract import validate_backend
from memwork.facade.facade import RESOLVE_KEYS, facade_from_env
from memwork.plugins import Registry

#: the slow server: the deadline itself is under test (long enough that selecting the backend -- its
#: availability check, on a loaded machine -- ends before it, so the timeout is the adapter's call's)
DEADLINE_MS = 1000
#: every other fault: its own reason must decide, even on a loaded machine where the first call of a
#: process (importing the HTTP client on a worker thread) can take a second
ERROR_DEADLINE_MS = 5000
LEGACY = "legacy-conversation-memory"

#: the faults an HTTP fake can inject (``slow`` is built per deadline: see :func:`_fault`)
HTTP_FAULTS = {
    "http-400": Fault(status=400),
    "http-404": Fault(status=404),
    "http-422": Fault(status=422),
    "http-500": Fault(status=500),
    "http-503": Fault(status=503),
    "malformed": Fault(malformed=True),
    "drop": Fault(drop=True),
}
#: the modes of the TCP listener standing in for a Redis server
TCP_FAULTS = {"drop": "hangup", "slow": "silent"}

MESSAGES = [
    {"role": "user", "content": "I prefer tea in the morning."},
    {"role": "assistant", "content": "Noted: tea, mornings."},
]


def _request(operation: str) -> dict[str, Any]:
    request: dict[str, Any] = {"userId": "user-01", "sessionId": "s-1", "query": "likes tea", "limit": 5}
    if operation == "write":
        request["messages"] = MESSAGES
    return request


# ---- the adapters and their fakes ----------------------------------------------------------------
class Service:
    """A running fake: its URL, how to inject a fault, how many requests (connections) it saw."""

    def __init__(self, url: str, fake: FakeService | None = None, listener: Listener | None = None):
        self.url = url
        self.fake = fake
        self.listener = listener

    def inject(self, fault: str) -> None:
        if self.fake is not None:
            self.fake.fault = _fault(fault)
        else:
            assert self.listener is not None
            self.listener.mode = TCP_FAULTS[fault]

    def seen(self) -> int:
        """Requests the HTTP fake recorded, or connections the listener accepted so far."""
        if self.fake is not None:
            return len(self.fake.requests)
        assert self.listener is not None
        return self.listener.accepted


def _fault(name: str) -> Fault:
    if name == "slow":
        return Fault(delay_s=slow_delay(DEADLINE_MS / 1000))
    return HTTP_FAULTS[name]


@dataclass(frozen=True)
class Adapter:
    """One adapter as the conformance suite drives it.

    ``env(url, folder)``: the adapter configured for ``url`` with its secret set (``folder`` for
    files it needs, such as an embedding module); ``serve(folder)``: its fake, running;
    ``faults``: for every fault it meets, the texts of which its reason names at least one;
    ``sent``: for the faults whose request count is part of the adapter's retry policy, that count;
    ``refused``: the reason's text for a refused connection; ``url_for(port)`` a URL of a local port,
    with the secret in it where the adapter takes credentials from the URL."""

    name: str
    operations: tuple[str, ...]
    secret: str
    env: Callable[[str, Path], dict[str, str]]
    serve: Callable[[Path], contextlib.AbstractContextManager[Service]]
    faults: dict[str, tuple[str, ...]]
    refused: tuple[str, ...]
    url_for: Callable[[int], str] = lambda port: f"http://127.0.0.1:{port}"
    sent: dict[str, int] = field(default_factory=dict)
    #: where the secret goes when it is also in the URL of a refused connection (a password in the URL)
    refused_url_secret: Callable[[int], str] | None = None
    #: a resolve adapter: make its fake misbehave (answer with the look-alikes' items too, filter ignored)
    misbehave: Callable[[Service], None] | None = None

    def __repr__(self) -> str:
        return self.name


def _http(make: Callable[[], FakeService]) -> Callable[[Path], contextlib.AbstractContextManager[Service]]:
    @contextlib.contextmanager
    def run(_folder: Path) -> Iterator[Service]:
        fake = make()
        with serve(fake) as url:
            yield Service(url, fake=fake)

    return run


@contextlib.contextmanager
def _redis_listener(_folder: Path) -> Iterator[Service]:
    with tcp_listener("silent") as listener:
        yield Service(f"redis://:{REDIS_PASSWORD}@127.0.0.1:{listener.port}/0", listener=listener)


def _qdrant_fake() -> FakeService:
    from qdrant_client import QdrantClient, models

    engine = QdrantClient(":memory:")
    engine.create_collection("memind_memory", vectors_config=models.VectorParams(size=3, distance="Cosine"))
    points = [
        models.PointStruct(
            id=10 * u + k + 1,
            vector=[1.0, 0.1 * k + 0.01 * u, 0.05 * u],
            payload={"user_id": user, "content": f"{user!r} likes tea {k}", "type": "fact"},
        )
        for u, user in enumerate(LOOKALIKES)
        for k in range(3)
    ]
    engine.upsert("memind_memory", points)
    return QdrantRest(engine, api_key=QDRANT_KEY)


def _letta_misbehaves(service: Service) -> None:
    fake = service.fake
    assert isinstance(fake, FakeLetta)
    for user in LOOKALIKES:
        fake.insert(f"user: {user!r} likes tea", [f"memwork-user:{user}", "memwork-kind:turn"])
    fake.misbehave = True  # the search ignores the tag filter


def _misbehaves(service: Service) -> None:
    service.fake.misbehave = True  # type: ignore[union-attr]  # the user filter is ignored


def _weaviate_env(url: str, folder: Path) -> dict[str, str]:
    from memwork.pgvector.local_hash import write_module

    return {
        "MEMORY_WEAVIATE_ENABLED": "1",
        "MEMORY_WEAVIATE_URL": url,
        "MEMORY_WEAVIATE_EMBEDDING_MODULE": write_module(8, folder),
        "MEMORY_WEAVIATE_API_KEY": WEAVIATE_KEY,
    }


def _weaviate_fake() -> FakeService:
    fake = FakeWeaviate(dimension=8, api_key=WEAVIATE_KEY)
    fake.seed(users=2, per_user=5)
    return fake


def _langgraph_fake() -> FakeService:
    fake = FakeLangGraph(api_key=LANGGRAPH_KEY)
    fake.seed(users=2, per_user=5)
    return fake


#: users whose ids differ only in case or a trailing space: each is its own tenant
LOOKALIKES = ("TenantX", "tenantx", "tenantx ")
#: the look-alikes a facade call can name (an id with a trailing space is refused at its door)
CALLERS = LOOKALIKES[:2]
LETTA_KEY = "letta-test-key"
MEM0_KEY = "m0-test-key"
QDRANT_KEY = "qdrant-key-SEKRIT-7f3a"
WEAVIATE_KEY = "wv-key-Zq8!never-shown"
LANGGRAPH_KEY = "lg-key-Zq8!never-shown"
NEO4J_PASSWORD = "pw-Zq8!never-shown"
REDIS_PASSWORD = "rs-pw-Kq7!never-shown"

ADAPTERS = [
    Adapter(
        name="letta",
        operations=("resolve", "write", "compact"),
        secret=LETTA_KEY,
        env=lambda url, _f: {
            "MEMORY_LETTA_ENABLED": "1",
            "MEMORY_LETTA_API_KEY": LETTA_KEY,
            "MEMORY_LETTA_AGENT_ID": "agent-memwork",
            "MEMORY_LETTA_BASE_URL": url,
        },
        serve=_http(lambda: FakeLetta().seed(users=2, per_user=5)),
        faults={
            "http-404": ("HTTP 404",),
            "http-500": ("HTTP 500",),
            "malformed": ("malformed JSON",),
            "drop": ("letta",),
            "slow": ("timed out",),
        },
        refused=("letta",),
        misbehave=_letta_misbehaves,
    ),
    Adapter(
        name="mem0",
        operations=("write", "compact"),
        secret=MEM0_KEY,
        env=lambda url, _f: {
            "MEMORY_MEM0_ENABLED": "1",
            "MEMORY_MEM0_API_KEY": MEM0_KEY,
            "MEMORY_MEM0_BASE_URL": url,
        },
        serve=_http(lambda: FakeMem0(api_key=MEM0_KEY).seed(users=2, per_user=5)),
        faults={
            "http-400": ("HTTP 400",),
            "http-500": ("HTTP 500",),
            "malformed": ("malformed JSON",),
            "drop": ("mem0",),
            "slow": ("timed out",),
        },
        refused=("mem0",),
    ),
    Adapter(
        name="qdrant",
        operations=("resolve",),
        secret=QDRANT_KEY,
        env=lambda url, _f: {
            "MEMORY_QDRANT_ENABLED": "1",
            "MEMORY_QDRANT_URL": url,
            "MEMORY_QDRANT_EMBEDDING_MODULE": "memwork.pgvector.local_hash",
            "MEMORY_QDRANT_API_KEY": QDRANT_KEY,
        },
        serve=_http(_qdrant_fake),
        faults={
            "http-400": ("HTTP 400",),
            "http-500": ("HTTP 500",),
            # a read: retried with backoff, and the retries may outlast the deadline (equally fail-open)
            "http-503": ("HTTP 503", f"timed out after {ERROR_DEADLINE_MS} ms"),
            "malformed": ("qdrant get_collection failed",),
            "drop": ("qdrant get_collection failed",),
            "slow": ("timed out", "Timed out", "timeout"),
        },
        refused=("qdrant get_collection failed",),
        misbehave=_misbehaves,
    ),
    Adapter(
        name="weaviate",
        operations=("resolve",),
        secret=WEAVIATE_KEY,
        env=_weaviate_env,
        serve=_http(_weaviate_fake),
        faults={
            "http-400": ("HTTP 400",),
            "http-422": ("HTTP 422",),
            "http-500": ("HTTP 500",),
            "http-503": ("HTTP 503",),
            "malformed": ("malformed JSON",),
            "drop": ("weaviate POST",),
            "slow": ("timed out",),
        },
        # a read: a 503 and a dropped connection are retried (twice) within the deadline
        sent={"http-400": 1, "http-422": 1, "http-500": 1, "http-503": 3, "malformed": 1, "drop": 3},
        refused=("ConnectError",),
        misbehave=_misbehaves,
    ),
    Adapter(
        name="langgraph",
        operations=("resolve",),
        secret=LANGGRAPH_KEY,
        env=lambda url, _f: {
            "MEMORY_LANGGRAPH_ENABLED": "1",
            "MEMORY_LANGGRAPH_URL": url,
            "MEMORY_LANGGRAPH_API_KEY": LANGGRAPH_KEY,
        },
        serve=_http(_langgraph_fake),
        faults={
            "http-400": ("HTTP 400",),
            "http-422": ("HTTP 422",),
            "http-500": ("HTTP 500",),
            "http-503": ("HTTP 503",),
            "malformed": ("malformed JSON",),
            "drop": ("langgraph POST",),
            "slow": ("timed out",),
        },
        # a run is not a pure read: one run, never two, whatever the fault
        sent={f: 1 for f in ("http-400", "http-422", "http-500", "http-503", "malformed", "drop", "slow")},
        refused=("ConnectError",),
        misbehave=_misbehaves,
    ),
    Adapter(
        name="neo4j",
        operations=("write",),
        secret=NEO4J_PASSWORD,
        env=lambda url, _f: {
            "MEMORY_NEO4J_ENABLED": "1",
            "MEMORY_NEO4J_HTTP_URL": url,
            "MEMORY_NEO4J_USER": "neo4j",
            "MEMORY_NEO4J_PASSWORD": NEO4J_PASSWORD,
        },
        serve=_http(lambda: FakeNeo4j(password=NEO4J_PASSWORD)),
        faults={
            "http-400": ("HTTP 400",),
            "http-500": ("HTTP 500",),
            "http-503": ("HTTP 503",),
            "malformed": ("malformed JSON",),
            "drop": ("neo4j POST",),
            "slow": ("timed out",),
        },
        # a write is sent once, even on a 503 or a dropped connection
        sent={f: 1 for f in ("http-400", "http-500", "http-503", "malformed", "drop", "slow")},
        refused=("ConnectError",),
        refused_url_secret=lambda port: f"http://neo4j:{NEO4J_PASSWORD}@127.0.0.1:{port}",
    ),
    Adapter(
        name="redis-streams",
        operations=("write",),
        secret=REDIS_PASSWORD,
        env=lambda url, _f: {
            "MEMORY_REDIS_STREAMS_ENABLED": "1",
            "MEMORY_REDIS_STREAMS_URL": url,
            "MEMORY_REDIS_STREAMS_STREAM": "s",
        },
        serve=_redis_listener,
        faults={"drop": ("ConnectionError",), "slow": ("Timeout", "timed out")},
        sent={"drop": 1, "slow": 1},  # a write is never retried
        refused=("ConnectionError", "redis://:***@127.0.0.1"),
        url_for=lambda port: f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0",
    ),
]
BY_NAME = {a.name: a for a in ADAPTERS}


def _cases(*, with_fault: bool) -> list[Any]:
    cases = []
    for adapter in ADAPTERS:
        for operation in adapter.operations:
            if not with_fault:
                cases.append(pytest.param(adapter, operation, id=f"{adapter.name}-{operation}"))
                continue
            for fault in adapter.faults:
                cases.append(
                    pytest.param(adapter, operation, fault, id=f"{adapter.name}-{operation}-{fault}")
                )
    return cases


def _through_facade(
    env: dict[str, str], operation: str, caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """One call through the facade: its payload, how long it took, the status page afterwards.

    Returns once the job on the facade's worker has ended too (the answer may come first, at the
    deadline), so the requests a fake recorded are all the adapter will ever send for this call."""
    facade = facade_from_env(env)
    try:
        with caplog.at_level(logging.DEBUG):
            started = time.monotonic()
            call = facade.begin(operation, _request(operation))
            payload = call.answer_when_due()
            elapsed = time.monotonic() - started
            status = facade.status()
            if call.call is not None:
                assert call.call.wait(60), "the job outlived its adapter's own timeout and the slow fake"
    finally:
        facade.close()
    return payload, elapsed, status


def _assert_degraded(
    adapter: Adapter, operation: str, payload: dict[str, Any], status: dict[str, Any], log: str
) -> None:
    """The degraded payload of ``adapter``, the adapter still listed, its secret nowhere."""
    assert payload["ok"] is False and payload["source"] == adapter.name, payload
    if operation == "resolve":
        assert {k: payload[k] for k in RESOLVE_KEYS} == {
            "profile": None,
            "semanticMemories": [],
            "behaviorSummary": None,
            "activeGoals": [],
            "memories": [],
            "policy": None,
        }
    else:
        assert payload["status"] in ("failed", "pending"), payload
    row = next(b for b in status["backends"] if b["name"] == adapter.name)
    assert row["available"] is True and row["supports"][operation] is True
    assert status["selectedBackends"][operation] == adapter.name
    for text in (json.dumps(payload), json.dumps(status), log):
        assert adapter.secret not in text


# ---- fail-open under each fault, within the deadline ---------------------------------------------
@pytest.mark.parametrize(("adapter", "operation", "fault"), _cases(with_fault=True))
def test_each_fault_fails_open_within_the_deadline(adapter, operation, fault, tmp_path, caplog):
    deadline_ms = DEADLINE_MS if fault == "slow" else ERROR_DEADLINE_MS
    with adapter.serve(tmp_path) as service:
        service.inject(fault)
        env = {
            **adapter.env(service.url, tmp_path),
            "MEMORY_BACKEND": adapter.name,
            "MEMORY_BACKEND_TIMEOUT_MS": str(deadline_ms),
        }
        payload, elapsed, status = _through_facade(env, operation, caplog)
        seen = service.seen()
    if service.listener is not None:
        seen = service.listener.accepted  # counted again once the backlog is drained
    _assert_degraded(adapter, operation, payload, status, caplog.text)
    assert any(text in payload["reason"] for text in adapter.faults[fault]), payload["reason"]
    assert within_deadline(elapsed, deadline_ms / 1000), elapsed
    if fault == "slow":  # at most one request: a job that ran out of time before its call sends none
        assert seen <= adapter.sent.get(fault, seen), seen
    elif fault in adapter.sent:
        assert seen == adapter.sent[fault], seen


@pytest.mark.parametrize(("adapter", "operation"), _cases(with_fault=False))
def test_a_refused_connection_fails_open_within_the_deadline(adapter, operation, tmp_path, caplog):
    port = int(refused_url().rsplit(":", 1)[1])
    url = (adapter.refused_url_secret or adapter.url_for)(port)
    env = {
        **adapter.env(url, tmp_path),
        "MEMORY_BACKEND": adapter.name,
        "MEMORY_BACKEND_TIMEOUT_MS": str(ERROR_DEADLINE_MS),
    }
    payload, elapsed, status = _through_facade(env, operation, caplog)
    _assert_degraded(adapter, operation, payload, status, caplog.text)
    assert all(text in payload["reason"] for text in adapter.refused), payload["reason"]
    assert within_deadline(elapsed, ERROR_DEADLINE_MS / 1000), elapsed


@pytest.mark.parametrize(("adapter", "operation"), _cases(with_fault=False))
def test_fail_closed_raises_a_typed_error_without_the_secret(adapter, operation, tmp_path):
    fault = "http-500" if "http-500" in adapter.faults else "drop"
    with adapter.serve(tmp_path) as service:
        service.inject(fault)
        env = {
            **adapter.env(service.url, tmp_path),
            "MEMORY_BACKEND": adapter.name,
            "MEMORY_BACKEND_TIMEOUT_MS": str(ERROR_DEADLINE_MS),
            "MEMORY_FAIL_OPEN": "0",
        }
        facade = facade_from_env(env)
        try:
            with pytest.raises(BackendError) as info:
                getattr(facade, operation)(_request(operation))
        finally:
            facade.close()
    assert any(text in str(info.value) for text in adapter.faults[fault]), str(info.value)
    assert adapter.secret not in str(info.value)


# ---- the tenant guard ----------------------------------------------------------------------------
GUARDED = [a for a in ADAPTERS if a.misbehave is not None]


@pytest.mark.parametrize("user", CALLERS)
@pytest.mark.parametrize("adapter", GUARDED, ids=[a.name for a in GUARDED])
def test_a_misbehaving_server_never_hands_over_a_look_alikes_items(adapter, user, tmp_path, caplog):
    """The server ignores the user filter and answers with every look-alike's items: the adapter
    drops each one that is not the caller's (exact id, case and spaces included) and says so."""
    assert adapter.misbehave is not None
    with adapter.serve(tmp_path) as service:
        adapter.misbehave(service)
        env = {
            **adapter.env(service.url, tmp_path),
            "MEMORY_BACKEND": adapter.name,
            "MEMORY_BACKEND_TIMEOUT_MS": str(ERROR_DEADLINE_MS),
        }
        facade = facade_from_env(env)
        try:
            with caplog.at_level(logging.WARNING):
                payload = facade.resolve({"userId": user, "query": "likes tea", "limit": 50})
        finally:
            facade.close()
    assert payload["ok"] is True and payload["source"] == adapter.name, payload
    items = [
        item
        for key in ("semanticMemories", "memories", "activeGoals")
        for item in payload[key]
        if isinstance(item, dict)
    ]
    assert items and {item["userId"] for item in items} == {user}, items
    assert "of another user; dropped" in caplog.text


# ---- configuration: dormant, available without connecting, the contract -------------------------
def _backend(adapter: Adapter, env: dict[str, str]) -> Any:
    registry = Registry(env, plugins=[])
    backend = registry.find(adapter.name)
    assert backend is not None, adapter.name
    return backend, registry


@pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.name for a in ADAPTERS])
def test_unconfigured_is_dormant_and_passes_the_contract_gate(adapter):
    backend, registry = _backend(adapter, {})
    assert backend.availability().available is False
    assert validate_backend(backend) == []
    supported = {op for op, yes in supports_of(backend).items() if yes}
    assert supported == set(adapter.operations)
    facade = facade_from_env({"MEMORY_BACKEND": adapter.name}, registry=registry)
    try:
        status = facade.status()
    finally:
        facade.close()  # and the registry
    assert status["selectedBackends"]["resolve"] == LEGACY  # never an unavailable backend
    row = next(b for b in status["backends"] if b["name"] == adapter.name)
    assert row["available"] is False and row["reason"]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.name for a in ADAPTERS])
def test_configured_is_available_without_connecting(adapter, tmp_path):
    with tcp_listener("silent") as listener:
        backend, registry = _backend(adapter, adapter.env(adapter.url_for(listener.port), tmp_path))
        try:
            assert backend.availability().available, backend.availability().reason
            assert validate_backend(backend) == []
            assert adapter.secret not in repr(backend)
        finally:
            registry.close()
    assert listener.accepted == 0  # availability is configuration, never a round trip
