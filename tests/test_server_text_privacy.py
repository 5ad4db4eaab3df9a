"""A backend's own message inside a successful answer never reaches a log, the status or an answer
(second adversarial pass, class 3).

Weaviate answers a failed GraphQL query with HTTP 200 and an ``errors`` array; Neo4j does the same for
a failed statement. Their message may echo the request transformed past recognition: cut short,
upper-cased without dots, slugged, base64-encoded, split at ``@`` into a JSON list. Before, those forms
went into the shadow comparison log (and the status, the answer, the service log) -- only the exact
forms of a request value were removed. Now the adapters put the server's text after
:data:`memwork.loggable.SERVER_SAID`, and every loggable reason drops it like an HTTP body.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path

import httpx
import pytest
from fakes.server import FakeService, Request, Response, serve

from memwork.backends.neo4j import Neo4jBackend
from memwork.errors import BackendError
from memwork.legacy.schema import init_schema
from memwork.loggable import loggable_error
from memwork.service.app import create_app, running
from memwork.service.shadow import read_comparisons

USER = "kenji.tanaka+hiv@clinic.example.jp"


def transformed(user: str) -> list[str]:
    """The user id as a server's message may echo it, none of them a form memwork recognises."""
    return [
        f'valueText "{user[:20]}..." is not a valid uuid',
        "tenant not found: " + re.sub(r"[^a-z0-9]+", "-", user.lower()).strip("-"),
        "tenant not found: " + base64.b64encode(user.encode()).decode(),
        "no tenant " + user.upper().replace(".", ""),
        json.dumps({"detail": [{"loc": ["where"], "input": user.split("@")}]}),
    ]


FRAGMENTS = [
    "kenji.tanaka+hiv",
    "kenji-tanaka",
    "a2vuamku",
    "KENJITANAKA",
    "clinic.example",
    "clinic-example",
]


class EchoingGraphQL(FakeService):
    """Weaviate's GraphQL endpoint failing every query with HTTP 200 and an ``errors`` array whose
    message echoes the user id of the ``where`` filter, in the next of :func:`transformed`'s forms."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.route("POST", r"/v1/graphql", self.graphql)

    def graphql(self, request: Request) -> Response:
        query = request.body.get("query", "") if isinstance(request.body, dict) else ""
        found = re.search(r'valueText: ("(?:[^"\\]|\\.)*")', query)
        user = json.loads(found.group(1)) if found else ""
        messages = transformed(user)
        message = messages[self.calls % len(messages)]
        self.calls += 1
        return Response(200, {"data": {"Get": {"Memory": None}}, "errors": [{"message": message}]})


def leaked(text: str) -> list[str]:
    folded = text.casefold()
    return [f for f in FRAGMENTS if f.casefold() in folded]


@pytest.mark.parametrize("primary", ["legacy", "weaviate"])
def test_a_graphql_error_echoing_the_user_reaches_no_log_status_or_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, primary: str
) -> None:
    caplog.set_level(logging.DEBUG)
    legacy_url = f"sqlite:///{tmp_path / 'legacy.db'}"
    init_schema(legacy_url, apply=True)
    log_path = tmp_path / "comparisons.jsonl"
    fake = EchoingGraphQL()
    with serve(fake) as url:
        env = {
            "MEMORY_ENABLED": "1",
            "MEMORY_BACKEND": primary,
            "MEMORY_LEGACY_DATABASE_URL": legacy_url,
            "MEMORY_WEAVIATE_ENABLED": "1",
            "MEMORY_WEAVIATE_URL": url,
            "MEMORY_WEAVIATE_COLLECTION": "Memory",
            "MEMORY_WEAVIATE_EMBEDDING_MODULE": "memwork.pgvector.local_hash",
            "MEMORY_SHADOW_BACKEND": "weaviate",
            "MEMORY_SHADOW_SAMPLE": "1",
            "MEMORY_SHADOW_LOG": str(log_path),
            "MEMORY_BACKEND_TIMEOUT_MS": "5000",
        }
        app = create_app(env)
        with running(app) as base, httpx.Client(base_url=base, timeout=20) as client:
            answers = [
                client.post(
                    "/user-memory/v1/resolve",
                    json={"userId": USER, "query": "what do I drink", "limit": 3, "embedding": [0.1] * 8},
                )
                for _ in transformed(USER)
            ]
            assert app.state.memwork.shadow.drain(15)
            status = client.get("/api/runtime/status")
    records = read_comparisons(log_path)
    assert len(records) == len(transformed(USER)) and fake.calls >= len(records)
    assert all(r["shadow"]["ok"] is False and r["shadow"]["error"] for r in records)
    assert all("graphql error" in r["shadow"]["error"] for r in records)  # the reason is still named
    for name, text in [
        ("comparison log", log_path.read_text(encoding="utf-8")),
        ("answers", "".join(a.text for a in answers)),
        ("status", status.text),
        ("service log", caplog.text),
    ]:
        assert leaked(text) == [], f"{name} holds the echoed user id: {text[:1500]}"


def test_a_neo4j_error_echoing_the_request_keeps_only_its_code_in_a_loggable_reason() -> None:
    backend = Neo4jBackend("http://127.0.0.1:1", "neo4j", "pw-never-used")
    request = {"userId": USER, "sessionId": "s-1", "messages": [{"role": "user", "content": "tea"}]}
    for message in transformed(USER):
        body = {"results": [], "errors": [{"code": "Neo.ClientError.Schema.ConstraintValidationFailed",
                                           "message": message}]}  # fmt: skip
        with pytest.raises(BackendError) as caught:
            backend._check_response(body, 1)
        assert message in str(caught.value)  # the person at a terminal still sees it
        problem = loggable_error(str(caught.value), request)
        assert "Neo.ClientError.Schema.ConstraintValidationFailed" in problem.reason
        assert leaked(problem.reason) == [], problem.reason
