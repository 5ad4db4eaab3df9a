"""memwork/http.py against a real (fake-service) HTTP server: deadline, retries for reads only, size cap,
malformed JSON, refused connections, and no secret in any error."""

from __future__ import annotations

import time

import pytest
from deadlines import slow_delay, within_deadline
from fakes.server import FakeService, Fault, Request, Response, refused_url, serve

from memwork.http import HttpError, HttpSettings, JsonHttpClient, settings_from_env

SECRET = "sk-live-0123456789abcdef"


class Echo(FakeService):
    """GET /items answers its query; POST /items echoes the body; /flaky fails twice, then answers."""

    def __init__(self) -> None:
        super().__init__()
        self.flaky_left = 0
        self.route("GET", r"/items", lambda r: Response(200, {"q": r.arg("q")}))
        self.route("POST", r"/items", lambda r: Response(200, {"got": r.body}))
        self.route("GET", r"/big", lambda r: Response(200, {"blob": "x" * 5000}))
        self.route("GET", r"/flaky", self.flaky)
        self.route("POST", r"/flaky", self.flaky)

    def flaky(self, request: Request) -> Response:
        if self.flaky_left > 0:
            self.flaky_left -= 1
            return Response(503, {"error": "busy"})
        return Response(200, {"ok": True})


def _client(url: str, **settings: float) -> JsonHttpClient:
    """A client whose deadline never decides a test unless the test sets ``timeout_s`` itself (a loaded
    machine can spend a second on one local round trip)."""
    values = {"timeout_s": 30.0, "connect_timeout_s": 0.5, "retries": 2, "backoff_s": 0.01, **settings}
    return JsonHttpClient(
        "echo",
        url,
        headers={"Authorization": f"Token {SECRET}"},
        settings=HttpSettings(**values),
        secrets=[SECRET],
    )


def test_get_and_post_json_round_trip_with_the_headers_sent() -> None:
    fake = Echo()
    with serve(fake) as url:
        client = _client(url)
        assert client.get_json("/items", {"q": "é x"}) == {"q": "é x"}
        assert client.post_json("/items", {"a": [1, 2]}) == {"got": {"a": [1, 2]}}
        client.close()
    assert fake.requests[0].headers["authorization"] == f"Token {SECRET}"


def test_reads_are_retried_on_503_and_writes_are_sent_once() -> None:
    fake = Echo()
    with serve(fake) as url:
        client = _client(url)
        fake.flaky_left = 2
        assert client.get_json("/flaky") == {"ok": True}
        assert sum(r.path == "/flaky" for r in fake.requests) == 3
        fake.flaky_left, fake.requests = 2, []
        with pytest.raises(HttpError) as caught:
            client.post_json("/flaky", {"write": 1})
        assert caught.value.status == 503 and len(fake.requests) == 1  # never retried
        fake.flaky_left, fake.requests = 1, []
        assert client.post_json("/flaky", {"search": 1}, idempotent=True) == {"ok": True}
        assert len(fake.requests) == 2


def test_4xx_is_not_retried_and_names_status_service_and_path_without_the_query() -> None:
    fake = Echo()
    with serve(fake) as url:
        fake.fault = Fault(status=404)
        with pytest.raises(HttpError) as caught:
            _client(url).get_json("/items", {"token": SECRET})
    message = str(caught.value)
    assert caught.value.status == 404 and len(fake.requests) == 1
    assert message.startswith("echo GET http://127.0.0.1:") and "/items: HTTP 404" in message
    assert SECRET not in message and "token=" not in message


def test_malformed_json_is_one_clear_error() -> None:
    fake = Echo()
    with serve(fake) as url:
        fake.fault = Fault(malformed=True)
        with pytest.raises(HttpError, match="malformed JSON"):
            _client(url).get_json("/items")


def test_a_slow_server_fails_within_the_deadline_retries_included() -> None:
    deadline_s = 0.4
    fake = Echo()
    with serve(fake) as url:
        fake.fault = Fault(delay_s=slow_delay(deadline_s))  # only the deadline can end the wait
        started = time.monotonic()
        with pytest.raises(HttpError, match="timed out"):
            _client(url, timeout_s=deadline_s).get_json("/items")
        elapsed = time.monotonic() - started
    assert within_deadline(elapsed, deadline_s), elapsed
    assert len(fake.requests) >= 1


def test_connection_refused_is_an_error_within_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(HttpError, match="ConnectError"):
        _client(refused_url(), timeout_s=0.5).get_json("/items")
    assert within_deadline(time.monotonic() - started, 0.5)


def test_a_response_over_the_cap_is_refused() -> None:
    with serve(Echo()) as url, pytest.raises(HttpError, match="exceeds the cap"):
        _client(url, max_response_bytes=1000).get_json("/big")


def test_a_dropped_connection_is_an_error_and_a_password_in_the_base_url_never_shows() -> None:
    fake = Echo()
    with serve(fake) as url:
        fake.fault = Fault(drop=True)
        with_password = url.replace("http://", "http://admin:hunter2-pass@")
        client = JsonHttpClient("echo", with_password, settings=HttpSettings(timeout_s=1.0, retries=0))
        with pytest.raises(HttpError) as caught:
            client.get_json("/items")
    assert "hunter2-pass" not in str(caught.value) and "admin:***@" in str(caught.value)


def test_settings_stay_under_the_facade_deadline() -> None:
    assert settings_from_env({"MEMORY_BACKEND_TIMEOUT_MS": "500"}).timeout_s == pytest.approx(0.45)
    assert settings_from_env({}).timeout_s == pytest.approx(1.8)
    assert settings_from_env({"MEMORY_BACKEND_TIMEOUT_MS": "nonsense"}).timeout_s == pytest.approx(1.8)


def test_building_a_client_opens_no_connection() -> None:
    client = JsonHttpClient("echo", refused_url())
    assert client._client is None  # created on first use only
    client.close()
