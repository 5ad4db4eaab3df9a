"""Schemathesis against the served ``/openapi.json``: for every route, valid and invalid generated
requests never get a 500, a traceback or a secret (the API token, a database URL's password).

A bounded number of examples per route (the whole file stays within seconds), deterministic, so a
failure reproduces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from memwork.legacy.schema import init_schema
from memwork.service.app import create_app, running

TOKEN = "tok-schemathesis-Zq7"
DB_SECRET = "pw-schemathesis-Kx9"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRETS = (TOKEN, DB_SECRET)
EXAMPLES = 12


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("schema")


@pytest.fixture(scope="module")
def served_url(home: Path) -> Iterator[str]:
    legacy = f"sqlite:///{home / 'legacy.db'}"
    init_schema(legacy, apply=True)
    env = {
        "MEMORY_LEGACY_DATABASE_URL": legacy,
        "MEMWORK_API_TOKEN": TOKEN,
        # a configured semantic backend whose server is not there, shadowing every resolve: its
        # errors and reasons may name the URL
        "MEMORY_PGVECTOR_DATABASE_URL": f"postgresql://app:{DB_SECRET}@127.0.0.1:9/memory",
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": "memwork.pgvector.local_hash",
        # generous: the service sheds while its loop lags past a quarter of the deadline, and a loaded
        # machine must not turn the resolve below into a shed one
        "MEMORY_BACKEND_TIMEOUT_MS": "2000",
        "MEMORY_SHADOW_BACKEND": "pgvector",
        "MEMORY_SHADOW_SAMPLE": "1",
        "MEMORY_SHADOW_LOG": str(Path(home) / "shadow.jsonl"),
    }
    with running(create_app(env)) as url:
        yield url


def load_schema(url: str) -> schemathesis.BaseSchema:
    loaded = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=AUTH)
    loaded.config.generation.update(max_examples=EXAMPLES, deterministic=True)
    return loaded


def assert_clean(response_text: str, status: int) -> None:
    assert status < 500, response_text
    assert "Traceback" not in response_text and 'File "' not in response_text
    for secret in SECRETS:
        assert secret not in response_text


def run_cases(
    url: str, mode: GenerationMode, check: Callable[[schemathesis.Case], None], examples: int
) -> set[str]:
    """Every operation of the served schema, ``examples`` generated cases each; returns the routes run."""
    seen: set[str] = set()
    for result in load_schema(url).get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and operation.method.upper() != "POST":
            continue  # nothing to get wrong in a GET without parameters
        seen.add(f"{operation.method.upper()} {operation.path}")

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
        )
        def run(case: schemathesis.Case) -> None:
            check(case)

        run()
    return seen


ROUTES = {
    "GET /healthz",
    "GET /api/runtime/status",
    "POST /user-memory/v1/resolve",
    "POST /user-memory/v1/remember-recent",
    "POST /user-memory/v1/sync",
    "POST /user-memory/v1/forget",
}


def _no_500_no_traceback_no_secret(case: schemathesis.Case) -> None:
    response = case.call(headers=AUTH, timeout=10)
    assert_clean(response.text, response.status_code)
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400:
        assert set(response.json()) == {"error", "field"}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_500_no_traceback_no_secret(served_url: str, mode: GenerationMode) -> None:
    expected = ROUTES if mode is GenerationMode.POSITIVE else {r for r in ROUTES if r.startswith("POST")}
    assert run_cases(served_url, mode, _no_500_no_traceback_no_secret, EXAMPLES) == expected


def _needs_the_token(case: schemathesis.Case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}x"}, timeout=10)
    assert_clean(response.text, response.status_code)
    assert response.status_code == (200 if case.path == "/healthz" else 401)


def test_every_route_but_healthz_needs_the_token(served_url: str) -> None:
    assert run_cases(served_url, GenerationMode.POSITIVE, _needs_the_token, 3) == ROUTES


def test_the_schema_the_status_and_the_shadow_log_hold_no_secret(served_url: str, home: Path) -> None:
    resolved = httpx.post(f"{served_url}/user-memory/v1/resolve", json={"userId": "u1"}, headers=AUTH)
    assert resolved.json()["ok"] is True
    for path in ("/openapi.json", "/api/runtime/status", "/docs"):
        response = httpx.get(f"{served_url}{path}", headers=AUTH, timeout=10)
        assert response.status_code == 200
        assert_clean(response.text, response.status_code)
    status = httpx.get(f"{served_url}/api/runtime/status", headers=AUTH, timeout=10).json()
    assert status["shadow"]["enabled"] is True and status["shadow"]["counters"]["sampled"] > 0
    deadline = time.monotonic() + 10
    while status["shadow"]["counters"]["recorded"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        status = httpx.get(f"{served_url}/api/runtime/status", headers=AUTH, timeout=10).json()
    log_text = (home / "shadow.jsonl").read_text()
    assert '"ok":false' in log_text  # the shadow (pgvector, no server) failed and was recorded
    for secret in SECRETS:
        assert secret not in log_text
