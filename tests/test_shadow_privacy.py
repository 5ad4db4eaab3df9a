"""Nothing of a request reaches a log, the status or a stored reason but the hashed user id -- even when
a backend's error echoes the request (F-2).

The backends are memwork's real Letta and LangGraph adapters against a fake server that answers every
call with an error echoing what it got (a 400 naming the path and query string, as many APIs' validation
errors do; a 422 in FastAPI's shape, whose ``input`` is the request body), and a plugin backend whose
connection error names the URL with its query string. The service runs for real (uvicorn on loopback);
the checks read the comparison log file, the answers, the status and every log line the process wrote.
"""

from __future__ import annotations

import html
import json
import logging
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import httpx
import pytest
from fakes.server import FakeService, Request, Response, serve

from memwork.contracts import BaseBackend
from memwork.facade.facade import facade_from_env
from memwork.legacy.schema import init_schema
from memwork.plugins import BACKENDS, Registry
from memwork.service.app import create_app, running
from memwork.service.shadow import read_comparisons, user_digest

USER = "Alice.Private+Zq@example.com"
QUERY = 'my HIV test results "positive" & café zqvx'
SESSION = "sess-Zq/Ωmega 42"
REQUEST = {"userId": USER, "query": QUERY, "sessionId": SESSION, "limit": 5}


def forms(value: str) -> set[str]:
    """A value as an echo may hold it: raw, percent-encoded, JSON-escaped, HTML-escaped, NFD; casefolded
    (so upper and lower case are covered)."""
    out = {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
        unicodedata.normalize("NFD", value),
    }
    return {form.casefold() for form in out}


FORMS = sorted({form for value in (USER, QUERY, SESSION) for form in forms(value)})


def leaks(text: str) -> list[str]:
    folded = text.casefold()
    return [form for form in FORMS if form in folded]


class EchoingService(FakeService):
    """Every call fails with an error that echoes the request (``status`` 400 or 422)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def handle(self, request: Request) -> Response:
        target = f"{request.path}?{urlencode(request.query, doseq=True)}"
        if self.status == 422:  # FastAPI's validation error: the body it refused, as `input`
            detail = [
                {"type": "missing", "loc": ["body", "x"], "msg": "Field required", "input": request.body}
            ]
            return Response(422, {"detail": detail, "url": target})
        return Response(self.status, {"detail": f"invalid request {target} {request.raw.decode()}"})


class RefusedWithUrl(BaseBackend):
    """A backend whose connection error names the URL it tried, query string and all."""

    name = "refused-with-url"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        url = (
            f"http://svc:pw@127.0.0.1:9/users/{quote(request['userId'], safe='')}/search"
            f"?q={quote_plus(request.get('query', ''))}&session={request.get('sessionId')}"
        )
        raise ConnectionRefusedError(f"[Errno 111] Connection refused: {url} (user {request['userId']})")


def make_refused_with_url(env: Mapping[str, str]) -> RefusedWithUrl:
    return RefusedWithUrl()


PLUGINS = [EntryPoint(RefusedWithUrl.name, f"{__name__}:make_refused_with_url", BACKENDS)]


@contextmanager
def echoing(status: int) -> Iterator[str]:
    with serve(EchoingService(status)) as url:
        yield url


def backend_env(letta_url: str, langgraph_url: str) -> dict[str, str]:
    return {
        "MEMORY_LETTA_ENABLED": "1",
        "MEMORY_LETTA_API_KEY": "letta-key-123456",
        "MEMORY_LETTA_AGENT_ID": "agent-1",
        "MEMORY_LETTA_BASE_URL": letta_url,
        "MEMORY_LANGGRAPH_ENABLED": "1",
        "MEMORY_LANGGRAPH_URL": langgraph_url,
        "MEMORY_BACKEND_TIMEOUT_MS": "3000",
    }


@contextmanager
def service(env: Mapping[str, str]) -> Iterator[httpx.Client]:
    facade = facade_from_env(env, registry=Registry(env, plugins=PLUGINS))
    app = create_app(env, facade=facade)
    try:
        with running(app) as url, httpx.Client(base_url=url, timeout=15) as client:
            yield client
            assert app.state.memwork.shadow.drain(15)
    finally:
        facade.close()


@pytest.mark.parametrize(
    ("primary", "shadow"),
    [
        ("legacy", "letta"),  # the adversary's reproduction: a 400 echoing path and query string
        ("legacy", "langgraph"),  # a 422 echoing the JSON body as FastAPI does
        ("legacy", "refused-with-url"),  # a connection error naming the URL with its query
        ("langgraph", "letta"),  # the primary's reason echoes the request too
        ("letta", "refused-with-url"),
    ],
)
def test_no_request_value_reaches_the_log_the_status_or_an_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, primary: str, shadow: str
) -> None:
    caplog.set_level(logging.DEBUG)
    log_path = tmp_path / "comparisons.jsonl"
    legacy_url = f"sqlite:///{tmp_path / 'legacy.db'}"
    init_schema(legacy_url, apply=True)
    with echoing(400) as letta_url, echoing(422) as langgraph_url:
        env = {
            **backend_env(letta_url, langgraph_url),
            "MEMORY_LEGACY_DATABASE_URL": legacy_url,
            "MEMORY_BACKEND": primary,
            "MEMORY_SHADOW_BACKEND": shadow,
            "MEMORY_SHADOW_SAMPLE": "1",
            "MEMORY_SHADOW_LOG": str(log_path),
        }
        with service(env) as client:
            answer = client.post("/user-memory/v1/resolve", json=REQUEST)
            status = client.get("/api/runtime/status")
    records = read_comparisons(log_path)
    assert len(records) == 1 and records[0]["user"] == user_digest(USER)
    record = records[0]
    assert record["shadow"]["ok"] is False and record["shadow"]["errorCode"]
    expected_code = {"letta": "http_400", "langgraph": "http_422", "refused-with-url": "connection_refused"}
    if primary != "legacy":
        assert record["primary"]["ok"] is False and record["primary"]["errorCode"] == expected_code[primary]
        assert answer.json()["ok"] is False and answer.json()["errorCode"] == expected_code[primary]
        last = status.json()["service"]["operations"]["resolve"]["last"]
        assert last["reason"] == answer.json()["reason"] and "HTTP" in last["reason"]
        assert last["errorCode"] == expected_code[primary]
    else:
        assert record["primary"]["ok"] is True and record["primary"]["error"] is None
    assert record["shadow"]["errorCode"] == expected_code[shadow]
    assert answer.status_code == 200 and status.status_code == 200
    assert "degraded" in caplog.text or primary == "legacy"
    for name, text in [
        ("comparison log", log_path.read_text(encoding="utf-8")),
        ("answer", answer.text),
        ("status", status.text),
        ("service log", caplog.text),
    ]:
        assert leaks(text) == [], f"{name} holds a request value: {text[:2000]}"
    assert "pw@" not in log_path.read_text() and "?" not in json.dumps(record["shadow"]["error"])


def test_the_echo_is_real(tmp_path: Path) -> None:
    """The fake does echo the request: the backends' own errors hold it before memwork reduces them."""
    from memwork.backends.letta import from_env as letta_from_env

    with echoing(400) as url:
        backend = letta_from_env(backend_env(url, url))
        try:
            with pytest.raises(Exception) as caught:
                backend.resolve(dict(REQUEST))
        finally:
            backend.close()
    error = caught.value
    # the exception message keeps the start of the body for diagnosis, but already without request values
    assert leaks(str(error)) == []
    assert "HTTP 400: " in str(error) and "invalid request" in str(error)
