"""The one HTTP client every HTTP backend and source uses (Weaviate, Mem0, Letta, Neo4j, LangGraph).

What it adds to httpx, once, so no adapter re-invents it:

* a **deadline** per call: connect, read, write and pool timeouts all fit inside ``timeout_s`` (set
  under the facade's ``MEMORY_BACKEND_TIMEOUT_MS``), retries included;
* **retries with backoff for idempotent requests only** (GET, and reads sent as POST such as a
  search, marked ``idempotent=True``): a write is sent once, never twice;
* a **response size cap**: the body is streamed and refused past ``max_response_bytes``;
* **no secret in any error**: messages name the service, method and path (never the query string),
  URL passwords and query tokens are hidden by :mod:`memwork.redaction`, and every configured
  secret (API key, password) is replaced by ``***`` wherever it would appear;
* **no request value in any error**: the start of an error response's body (which often echoes the
  request) is kept for diagnosis only with every value of the request removed
  (:func:`memwork.loggable.without_request_values`), and never in :attr:`HttpError.summary`, the form
  logs and stored reasons use.

The httpx client is created on first use, so building an adapter never opens a connection. Importing
this module puts a filter on httpx's own logger: its ``HTTP Request: GET <url>`` lines (INFO, printed
when a host application logs at INFO) keep scheme, host and path, never the query string, which
holds a user's id and query for some backends (:class:`QueryFreeUrls`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwork.errors import BackendError
from memwork.loggable import request_values, without_request_values
from memwork.redaction import REDACTED, redact_text, redact_url

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "MAX_TIMEOUT_MS",
    "RETRY_STATUSES",
    "HttpError",
    "HttpSettings",
    "JsonHttpClient",
    "settings_from_env",
]

#: ``MEMORY_BACKEND_TIMEOUT_MS``: the deadline of one backend call, by default and at most (the facade's
#: policy reads the same variable with these bounds, so both always agree)
DEFAULT_TIMEOUT_MS = 2000
MAX_TIMEOUT_MS = 600_000

#: statuses worth another attempt of an idempotent request (the server says: not now)
RETRY_STATUSES = frozenset({429, 502, 503, 504})
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
TOO_LARGE = "response_too_large"


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts, retries and the size cap of one client; ``timeout_s`` bounds a whole call."""

    timeout_s: float = 1.8
    connect_timeout_s: float = 1.0
    retries: int = 2
    backoff_s: float = 0.05
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


def settings_from_env(env: Mapping[str, str], **overrides: Any) -> HttpSettings:
    """Settings under the facade's deadline: 90 % of ``MEMORY_BACKEND_TIMEOUT_MS`` (default 2000 ms), so
    the adapter's own error, not the facade's timeout, reaches the caller."""
    raw = (env.get("MEMORY_BACKEND_TIMEOUT_MS") or "").strip()
    try:
        ms = int(raw) if raw else DEFAULT_TIMEOUT_MS
    except ValueError:
        ms = DEFAULT_TIMEOUT_MS
    if not 1 <= ms <= MAX_TIMEOUT_MS:
        ms = DEFAULT_TIMEOUT_MS
    total = ms / 1000.0 * 0.9
    values: dict[str, Any] = {"timeout_s": total, "connect_timeout_s": min(1.0, total)}
    values.update(overrides)
    return HttpSettings(**values)


class QueryFreeUrls(logging.Filter):
    """A log filter: every URL among a record's arguments loses its query string and password."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_query_free(arg) for arg in record.args)
        return True


def _query_free(arg: object) -> object:
    text = str(arg) if type(arg).__name__ == "URL" or isinstance(arg, str) else None
    if text is None or "://" not in text:
        return arg
    return (redact_url(text) or "").split("?", 1)[0].split("#", 1)[0]


def _filter_httpx_log() -> None:
    """Install :class:`QueryFreeUrls` on httpx's logger, once per process."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, QueryFreeUrls) for f in logger.filters):
        logger.addFilter(QueryFreeUrls())


_filter_httpx_log()


class HttpError(BackendError):
    """An HTTP call that failed: ``status`` is the HTTP status, or None for transport errors.

    ``kind`` names a failure without a status (``timeout``, ``connection_refused``,
    ``connection_error``, ``response_too_large``, ``malformed_response``); ``summary`` is the message
    without the response body (what :func:`memwork.loggable.loggable_error` keeps). The message itself
    may end with the start of the body, with every value of the request removed from it."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        kind: str | None = None,
        summary: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.kind = kind
        self.summary = summary if summary is not None else message


class JsonHttpClient:
    """JSON over HTTP to one service at ``base_url``; thread-safe, lazily connected.

    ``secrets``: strings (API keys, passwords, tokens) that must never appear in an error message.
    ``transport``: an httpx transport (tests may pass ``httpx.MockTransport`` for transport-level
    faults; the fakes in ``tests/fakes`` are real servers).
    """

    def __init__(
        self,
        service: str,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        settings: HttpSettings | None = None,
        secrets: Iterable[str] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.settings = settings or HttpSettings()
        self._headers = dict(headers or {})
        self._auth = auth
        self._secrets = tuple(s for s in secrets if s)
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    # ---- public API ----------------------------------------------------------------------------
    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET and decode JSON; retried on transport errors and 429/502/503/504."""
        return self.request_json("GET", path, params=params, idempotent=True)

    def post_json(self, path: str, body: Any, *, idempotent: bool = False) -> Any:
        """POST JSON; retried only when ``idempotent`` (a search, a read-only query)."""
        return self.request_json("POST", path, json_body=body, idempotent=idempotent)

    def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        idempotent: bool | None = None,
    ) -> Any:
        """One call within the deadline; raises :class:`HttpError` with a redacted, one-line message."""
        retry = (method.upper() in ("GET", "HEAD")) if idempotent is None else idempotent
        deadline = time.monotonic() + self.settings.timeout_s
        attempts = 1 + (max(0, self.settings.retries) if retry else 0)
        last: HttpError | None = None
        for attempt in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return self._once(method, path, params, json_body, remaining)
            except HttpError as exc:
                last = exc
                if not exc.retryable or attempt == attempts - 1:
                    raise
            pause = self.settings.backoff_s * (2**attempt)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        raise last or self._error(
            method, path, f"no time left within {self.settings.timeout_s:.2f} s", kind="timeout"
        )

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def scrub(self, text: str) -> str:
        """``text`` with every configured secret and URL password hidden."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact_text(text)

    # ---- internals -----------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(
                    base_url=self.base_url,
                    headers=self._headers,
                    auth=self._auth,
                    transport=self._transport,
                    follow_redirects=False,
                    trust_env=False,
                )
            return self._client

    def _once(
        self, method: str, path: str, params: Mapping[str, Any] | None, body: Any, remaining: float
    ) -> Any:
        import httpx

        timeout = httpx.Timeout(
            remaining,
            connect=min(self.settings.connect_timeout_s, remaining),
            read=remaining,
            write=remaining,
            pool=remaining,
        )
        cap = self.settings.max_response_bytes
        try:
            with self._http().stream(
                method, path, params=dict(params) if params else None, json=body, timeout=timeout
            ) as response:
                declared = response.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > cap:
                    raise self._error(
                        method, path, f"response of {declared} bytes exceeds the cap ({cap})", kind=TOO_LARGE
                    )
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > cap:
                        problem = f"response exceeds the {cap}-byte cap"
                        raise self._error(method, path, problem, kind=TOO_LARGE)
                    chunks.append(chunk)
                status = response.status_code
        except httpx.TimeoutException:
            raise self._error(method, path, "timed out", retryable=True, kind="timeout") from None
        except httpx.TransportError as exc:
            kind = type(exc).__name__
            code = "connection_refused" if "refused" in str(exc).lower() else "connection_error"
            raise self._error(method, path, f"{kind}: {exc}", retryable=True, kind=code) from None
        raw = b"".join(chunks)
        if status >= 400:
            detail = raw[:200].decode("utf-8", "replace").replace("\n", " ").strip()
            detail = without_request_values(detail, request_values({"params": params, "body": body}))
            raise self._error(
                method,
                path,
                f"HTTP {status}",
                status=status,
                retryable=status in RETRY_STATUSES,
                detail=detail,
            )
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise self._error(
                method, path, f"malformed JSON in the response (HTTP {status})", kind="malformed_response"
            ) from None

    def _error(self, method: str, path: str, problem: str, *, detail: str = "", **kwargs: Any) -> HttpError:
        """The error of one call: ``service METHOD base/path: problem[: detail]`` (never the query)."""
        where = f"{redact_url(self.base_url)}{path.split('?', 1)[0]}"
        summary = self.scrub(f"{self.service} {method} {where}: {problem}")
        message = f"{summary}: {self.scrub(detail)}" if detail else summary
        return HttpError(message, summary=summary, **kwargs)
