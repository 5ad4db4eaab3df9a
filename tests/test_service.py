"""``memwork serve``: every route over real HTTP (uvicorn on loopback, httpx), validation, auth, body cap,
fail-open through the service, forget, the CLI. Test backends are registered through the registry's
entry points (they are backends, not mocks of memwork)."""

from __future__ import annotations

import hmac
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import EntryPoint
from typing import Any

import httpx
import pytest
import serve_process
from deadlines import within_deadline
from fakes.server import refused_url

from memwork.contracts import BaseBackend
from memwork.facade.facade import facade_from_env
from memwork.legacy.schema import init_schema
from memwork.plugins import BACKENDS, Registry
from memwork.service import guards
from memwork.service.app import create_app, running

SECRET = "hunter2-sekret"
RELEASE = threading.Event()
HUNG = threading.Event()  #: set once the hanging backend holds its worker


class ExplodingBackend(BaseBackend):
    """Available; every call raises an error whose text holds a URL with a password."""

    name = "exploding"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise RuntimeError(f"boom mysql://app:{SECRET}@db.internal/x")

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise RuntimeError(f"boom mysql://app:{SECRET}@db.internal/x")


class HangingBackend(BaseBackend):
    name = "hanging"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        HUNG.set()
        RELEASE.wait(60)  # released when the test ends: far beyond any deadline here
        return {"semanticMemories": [{"id": "late", "userId": request["userId"], "content": "too late"}]}


class LeakyBackend(BaseBackend):
    """Returns one memory of the caller and one of a look-alike user (a misbehaving plugin)."""

    name = "leaky"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        uid = request["userId"]
        return {
            "semanticMemories": [
                {"id": "mine", "userId": uid, "content": "mine"},
                {"id": "theirs", "userId": uid.lower(), "content": "another user's"},
            ]
        }


def make_exploding(env: Mapping[str, str]) -> ExplodingBackend:
    return ExplodingBackend()


def make_hanging(env: Mapping[str, str]) -> HangingBackend:
    return HangingBackend()


def make_leaky(env: Mapping[str, str]) -> LeakyBackend:
    return LeakyBackend()


PLUGINS = [
    EntryPoint("exploding", f"{__name__}:make_exploding", BACKENDS),
    EntryPoint("hanging", f"{__name__}:make_hanging", BACKENDS),
    EntryPoint("leaky", f"{__name__}:make_leaky", BACKENDS),
]


@pytest.fixture(autouse=True)
def _release_hangs() -> Iterator[None]:
    RELEASE.clear()
    HUNG.clear()
    yield
    RELEASE.set()


@pytest.fixture
def legacy_env(sqlite_url: str) -> dict[str, str]:
    """A legacy service whose answers do not depend on the machine's load.

    The deadline is generous on purpose: the service sheds new requests while its event loop lags more than
    a quarter of the deadline, and a loaded CI box (xdist workers beside it) once lagged 144 ms -- over a
    400 ms deadline's quarter -- so a test about the token guard got a shed resolve. Tests of the deadline
    itself set their own."""
    init_schema(sqlite_url, apply=True)
    return {"MEMORY_LEGACY_DATABASE_URL": sqlite_url, "MEMORY_BACKEND_TIMEOUT_MS": "10000"}


@contextmanager
def service(env: Mapping[str, str]) -> Iterator[httpx.Client]:
    """The app over a facade with the test plugins, served on loopback; an httpx client for it."""
    facade = facade_from_env(env, registry=Registry(env, plugins=PLUGINS))
    app = create_app(env, facade=facade)
    try:
        with running(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client
    finally:
        facade.close()


WRITE = {
    "userId": "u1",
    "sessionId": "s1",
    "messages": [{"role": "user", "content": "My name is Alice. I want to learn Rust."}],
}


def test_every_route_round_trip_through_legacy(legacy_env: dict[str, str]) -> None:
    with service(legacy_env) as client:
        assert client.get("/healthz").json() == {"ok": True}
        written = client.post("/user-memory/v1/remember-recent", json=WRITE)
        assert written.status_code == 200 and written.json()["ok"] is True
        assert client.post("/user-memory/v1/sync", json={"userId": "u1"}).json()["ok"] is True
        resolved = client.post("/user-memory/v1/resolve", json={"userId": "u1", "query": "rust", "limit": 5})
        body = resolved.json()
        assert resolved.status_code == 200 and body["ok"] is True
        assert body["source"] == "legacy-conversation-memory"
        assert any("Rust" in m["content"] for m in body["memories"])
        assert resolved.headers["x-request-id"]
        other = client.post("/user-memory/v1/resolve", json={"userId": "U1"}).json()
        assert other["ok"] is True and other["memories"] == []  # a look-alike user sees nothing
        status = client.get("/api/runtime/status").json()
        assert status["memory"]["selectedBackend"] == "legacy-conversation-memory"
        assert {b["name"] for b in status["memory"]["backends"]} >= {"legacy-conversation-memory", "hanging"}
        assert status["service"]["degraded"] is False
        assert status["service"]["operations"]["resolve"]["ok"] == 2
        assert status["shadow"]["enabled"] is False
        paths = client.get("/openapi.json").json()["paths"]
        assert set(paths) == {
            "/healthz",
            "/api/runtime/status",
            "/user-memory/v1/resolve",
            "/user-memory/v1/remember-recent",
            "/user-memory/v1/sync",
            "/user-memory/v1/forget",
        }
        resolve_schema = paths["/user-memory/v1/resolve"]["post"]["requestBody"]
        assert "ResolveRequest" in json.dumps(resolve_schema)


REMEMBER = "/user-memory/v1/remember-recent"
BAD_REQUESTS = [
    ("/user-memory/v1/resolve", {}, "userId"),
    ("/user-memory/v1/resolve", {"userId": ""}, "userId"),
    ("/user-memory/v1/resolve", {"userId": " u1"}, "userId"),
    ("/user-memory/v1/resolve", {"userId": "u1 "}, "userId"),
    ("/user-memory/v1/resolve", {"userId": "u\x001"}, "userId"),
    ("/user-memory/v1/resolve", {"userId": 7}, "userId"),
    ("/user-memory/v1/resolve", {"userId": "u" * 65}, "userId"),
    ("/user-memory/v1/resolve", {"userId": "u1", "limit": "5"}, "limit"),
    ("/user-memory/v1/resolve", {"userId": "u1", "limit": True}, "limit"),
    ("/user-memory/v1/resolve", {"userId": "u1", "limit": 0}, "limit"),
    ("/user-memory/v1/resolve", {"userId": "u1", "limit": 201}, "limit"),
    ("/user-memory/v1/resolve", {"userId": "u1", "embedding": ["x"]}, "embedding[0]"),
    ("/user-memory/v1/resolve", {"userId": "u1", "query": "a\x00b"}, "query"),
    (REMEMBER, {"userId": "u1", "sessionId": "s1"}, "messages"),
    (REMEMBER, {"userId": "u1", "messages": []}, "sessionId"),
    (REMEMBER, {**WRITE, "messages": "hi"}, "messages"),
    (REMEMBER, {**WRITE, "messages": [{"role": "x", "content": "a"}]}, "messages[0].role"),
    (REMEMBER, {**WRITE, "messages": [{"role": "user"}]}, "messages[0].content"),
    (REMEMBER, {**WRITE, "messages": [{"role": "user", "content": "a\x00"}]}, "messages[0].content"),
    ("/user-memory/v1/sync", {"userId": None}, "userId"),
    ("/user-memory/v1/forget", {}, "userId"),
]  # fmt: skip


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One service for the bad-input tests: none of them may reach the facade."""
    url = f"sqlite:///{tmp_path_factory.mktemp('refusing') / 'legacy.db'}"
    init_schema(url, apply=True)
    with service({"MEMORY_LEGACY_DATABASE_URL": url}) as client:
        yield client
    assert client.is_closed


@pytest.mark.parametrize(("path", "body", "field"), BAD_REQUESTS)
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(
    refusing: httpx.Client, path: str, body: dict[str, Any], field: str
) -> None:
    response = refusing.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert field in response.json()["error"]
    status = refusing.get("/api/runtime/status").json()
    assert status["service"]["operations"] == {}  # no facade call was made


RAW_BODIES = [
    b"{not json",
    b"[]",
    b'"a string"',
    b"null",
    b"[" * 5000 + b"]" * 5000,
    b'{"userId": "\\ud800"}',
    b"\xff\xfe\x00garbage",
]


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_a_non_finite_embedding_is_refused(refusing: httpx.Client, number: bytes) -> None:
    raw = b'{"userId": "u1", "embedding": [0.5, ' + number + b"]}"
    response = refusing.post(
        "/user-memory/v1/resolve", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422 and response.json()["field"] == "embedding[1]"


@pytest.mark.parametrize("raw", RAW_BODIES)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_garbage_bodies_are_4xx_never_500(refusing: httpx.Client, raw: bytes, content_type: str) -> None:
    for path in ("/user-memory/v1/resolve", REMEMBER, "/user-memory/v1/sync", "/user-memory/v1/forget"):
        response = refusing.post(path, content=raw, headers={"content-type": content_type})
        assert 400 <= response.status_code < 500, (path, response.text)
        body = response.json()
        assert set(body) == {"error", "field"} and body["field"]
        assert "Traceback" not in response.text
    assert refusing.get("/api/runtime/status").json()["service"]["operations"] == {}


def test_token_guards_every_route_but_healthz(legacy_env: dict[str, str]) -> None:
    env = {**legacy_env, "MEMWORK_API_TOKEN": SECRET}
    with service(env) as client:
        assert client.get("/healthz").status_code == 200
        for method, path in [
            ("GET", "/api/runtime/status"),
            ("GET", "/openapi.json"),
            ("GET", "/docs"),
            ("POST", "/user-memory/v1/resolve"),
            ("POST", "/user-memory/v1/remember-recent"),
            ("POST", "/user-memory/v1/sync"),
            ("POST", "/user-memory/v1/forget"),
            ("GET", "/no-such-route"),
        ]:
            for headers in (
                {},
                {"Authorization": f"Bearer {SECRET[:-1]}"},
                {"Authorization": f"Bearer {SECRET.upper()}"},
                {"Authorization": f"Basic {SECRET}"},
                {"Authorization": SECRET},
            ):
                response = client.request(method, path, json={"userId": "u1"}, headers=headers)
                assert response.status_code == 401, (method, path, headers)
                assert response.json()["field"] == "Authorization"
                assert SECRET not in response.text
        good = {"Authorization": f"Bearer {SECRET}"}
        assert client.get("/api/runtime/status", headers=good).status_code == 200
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}, headers=good).json()["ok"]
        status = client.get("/api/runtime/status", headers=good)
        assert status.json()["service"]["authRequired"] is True
        assert SECRET not in status.text


def test_without_a_token_no_auth_is_needed_and_the_compare_is_constant_time(
    legacy_env: dict[str, str],
) -> None:
    with service(legacy_env) as client:
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).status_code == 200
        assert client.get("/api/runtime/status").json()["service"]["authRequired"] is False
    assert "hmac.compare_digest" in inspect.getsource(guards.BearerAuth)
    assert hmac.compare_digest(b"a", b"a")


def test_body_cap_refuses_declared_and_chunked_bodies_before_anything_is_written(
    legacy_env: dict[str, str],
) -> None:
    env = {**legacy_env, "MEMWORK_MAX_BODY_BYTES": "2048"}
    big = {**WRITE, "messages": [{"role": "user", "content": "My name is Bob. " * 200}]}
    with service(env) as client:
        declared = client.post("/user-memory/v1/remember-recent", json=big)
        assert declared.status_code == 413 and declared.json()["field"] == "body"

        def chunks() -> Iterator[bytes]:
            payload = json.dumps(big).encode()
            for start in range(0, len(payload), 256):
                yield payload[start : start + 256]

        chunked = client.post(
            "/user-memory/v1/remember-recent", content=chunks(), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413 and chunked.json()["field"] == "body"
        small = client.post("/user-memory/v1/remember-recent", json=WRITE)
        assert small.status_code == 200 and small.json()["ok"], small.json()
        client.post("/user-memory/v1/sync", json={"userId": "u1"})
        memories = client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["memories"]
        assert memories and not any("Bob" in m["content"] for m in memories)
        assert client.get("/api/runtime/status").json()["service"]["maxBodyBytes"] == 2048


def test_a_raising_backend_is_a_200_degraded_payload_without_the_secret(
    legacy_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {**legacy_env, "MEMORY_BACKEND": "exploding"}
    with service(env) as client:
        response = client.post("/user-memory/v1/resolve", json={"userId": "u1"})
        body = response.json()
        assert response.status_code == 200 and body["ok"] is False
        assert body["source"] == "exploding" and "boom" in body["reason"]
        assert body["memories"] == [] and body["semanticMemories"] == []
        status = client.get("/api/runtime/status")
        service_status = status.json()["service"]
        assert service_status["degraded"] is True
        assert service_status["operations"]["resolve"] == {
            "ok": 0,
            "degraded": 1,
            "shed": 0,
            "timedOut": 0,
            "last": service_status["operations"]["resolve"]["last"],
        }
        assert "boom" in service_status["operations"]["resolve"]["last"]["reason"]
        for text in (response.text, status.text, caplog.text):
            assert SECRET not in text
        assert "degraded" in caplog.text


def test_a_hanging_backend_is_cut_off_within_the_deadline_and_the_loop_stays_free(
    legacy_env: dict[str, str],
) -> None:
    deadline_s = 2.0  # the hung call pends this long: the probe below must not wait for it
    env = {
        **legacy_env,
        "MEMORY_BACKEND": "hanging",
        "MEMORY_BACKEND_TIMEOUT_MS": str(int(deadline_s * 1000)),
    }
    with service(env) as client:
        results: list[httpx.Response] = []
        started = time.monotonic()
        worker = threading.Thread(
            target=lambda: results.append(client.post("/user-memory/v1/resolve", json={"userId": "u1"}))
        )
        worker.start()
        assert HUNG.wait(30)  # the call is on its worker, hung
        # the event loop is not blocked by the hung call: /healthz is answered while the call still pends
        assert client.get("/healthz").status_code == 200
        assert results == [], "the health probe waited for the hung call"
        worker.join(30)
        elapsed = time.monotonic() - started
        assert results[0].status_code == 200 and results[0].json()["ok"] is False
        assert "timed out" in results[0].json()["reason"]
        assert within_deadline(elapsed, deadline_s), elapsed  # cut off at the deadline, not the hang's end
        assert client.get("/api/runtime/status").json()["service"]["degraded"] is True


def test_an_unreachable_legacy_server_fails_open_for_every_operation() -> None:
    port = refused_url().rsplit(":", 1)[1].strip("/")
    env = {
        "MEMORY_LEGACY_DATABASE_URL": f"mysql://app:{SECRET}@127.0.0.1:{port}/nowhere",
        "MEMORY_BACKEND_TIMEOUT_MS": "1500",
    }
    with service(env) as client:
        for path, body in [
            ("/user-memory/v1/resolve", {"userId": "u1"}),
            ("/user-memory/v1/remember-recent", WRITE),
            ("/user-memory/v1/sync", {"userId": "u1"}),
        ]:
            started = time.monotonic()
            response = client.post(path, json=body)
            assert response.status_code == 200 and response.json()["ok"] is False, response.text
            assert within_deadline(time.monotonic() - started, 1.5)
            assert SECRET not in response.text
        status = client.get("/api/runtime/status")
        assert status.json()["service"]["degraded"] is True
        assert SECRET not in status.text


def test_fail_closed_is_a_503_naming_no_secret(legacy_env: dict[str, str]) -> None:
    env = {**legacy_env, "MEMORY_BACKEND": "exploding", "MEMORY_FAIL_OPEN": "0"}
    with service(env) as client:
        response = client.post("/user-memory/v1/resolve", json={"userId": "u1"})
        assert response.status_code == 503
        assert "boom" in response.json()["error"] and SECRET not in response.text


def test_the_caller_never_gets_another_users_memory(legacy_env: dict[str, str]) -> None:
    env = {**legacy_env, "MEMORY_BACKEND": "leaky"}
    with service(env) as client:
        body = client.post("/user-memory/v1/resolve", json={"userId": "TenantX"}).json()
        assert body["ok"] is True
        assert [m["id"] for m in body["semanticMemories"]] == ["mine"]


def test_forget_purges_only_synthetic_canary_users(legacy_env: dict[str, str]) -> None:
    canary = "memory-v2-canary-abc123"
    with service(legacy_env) as client:
        for user in (canary, "u1"):
            client.post("/user-memory/v1/remember-recent", json={**WRITE, "userId": user})
            client.post("/user-memory/v1/sync", json={"userId": user})
        assert client.post("/user-memory/v1/resolve", json={"userId": canary}).json()["memories"]
        for other in ("u1", "Memory-v2-canary-abc123", "memory-v2-canar-y", "xmemory-v2-canary-1"):
            refused = client.post("/user-memory/v1/forget", json={"userId": other})
            assert refused.status_code == 403 and refused.json()["field"] == "userId", other
        padded = client.post("/user-memory/v1/forget", json={"userId": f"{canary} "})
        assert padded.status_code == 422 and padded.json()["field"] == "userId"
        done = client.post("/user-memory/v1/forget", json={"userId": canary})
        body = done.json()
        assert done.status_code == 200 and body["ok"] is True
        assert body["purged"]["legacy-conversation-memory"]["items"] >= 1
        assert client.post("/user-memory/v1/resolve", json={"userId": canary}).json()["memories"] == []
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["memories"]


def test_memory_disabled_skips_without_touching_a_backend() -> None:
    env = {"MEMORY_ENABLED": "0", "MEMORY_LEGACY_DATABASE_URL": f"mysql://x:{SECRET}@127.0.0.1:1/none"}
    with service(env) as client:
        body = client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()
        assert body["ok"] is True and body["skipped"] is True and body["memories"] == []
        forgot = client.post("/user-memory/v1/forget", json={"userId": "memory-v2-canary-1"}).json()
        assert forgot["skipped"] is True


def test_bad_service_settings_are_config_errors_in_the_status(legacy_env: dict[str, str]) -> None:
    env = {**legacy_env, "MEMWORK_MAX_BODY_BYTES": "lots", "MEMORY_SHADOW_SAMPLE": "2"}
    with service(env) as client:
        errors = client.get("/api/runtime/status").json()["memory"]["configErrors"]
        assert {e["field"] for e in errors} >= {"MEMWORK_MAX_BODY_BYTES", "MEMORY_SHADOW_SAMPLE"}
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).status_code == 200


def test_memwork_serve_runs_the_app(sqlite_url: str, tmp_path: Any) -> None:
    init_schema(sqlite_url, apply=True)
    env = {**os.environ, "MEMORY_LEGACY_DATABASE_URL": sqlite_url, "MEMWORK_API_TOKEN": SECRET}
    with serve_process.serving(env) as (url, output):
        assert httpx.get(f"{url}/healthz", timeout=5).json() == {"ok": True}
        headers = {"Authorization": f"Bearer {SECRET}"}
        resolved = httpx.post(f"{url}/user-memory/v1/resolve", json={"userId": "u1"}, headers=headers)
        assert resolved.status_code == 200 and resolved.json()["ok"] is True
    (text,) = output
    assert "running on http://127.0.0.1:" in text  # the output was read whole
    assert SECRET not in text


def test_fresh_request_ids_are_32_hex_digits_and_never_repeat(legacy_env: dict[str, str]) -> None:
    """A request without a usable X-Request-Id gets a fresh id (a per-process random prefix and a
    counter, no uuid4 per request): the comparison log's key, so never two alike."""
    with service(legacy_env) as client:
        ids = [
            client.post(
                "/user-memory/v1/resolve", json={"userId": "u1"}, headers={"X-Request-Id": "bad id!"}
            ).headers["x-request-id"]
            for _ in range(20)
        ]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_a_forked_child_draws_its_own_request_id_prefix() -> None:
    """A pre-forking server's workers never hand out their parent's (or each other's) ids."""
    from memwork.service.app import fresh_request_id

    parent = fresh_request_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out without running the parent's cleanup
        os.write(write, fresh_request_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32 and child[:16] != parent[:16]
