"""Pure ASGI guards in front of the service: an access log, a last-resort error catcher, bearer auth,
a body cap -- and the reading of the bearer token they check.

They are plain ASGI callables rather than ``BaseHTTPMiddleware`` so they see the raw ``receive``
stream: the body cap counts bytes as they arrive (a ``Content-Length`` over the cap is refused before
any byte is read; a chunked body is refused as soon as the count passes the cap) and never buffers
more than the cap. Auth runs before the body is read, so an unauthenticated caller cannot make the
service read anything. Every refusal is the service's JSON error shape ``{"error", "field"}``.

The token (``MEMWORK_API_TOKEN``, :func:`token_setting`): unset means no auth (every route open; the
status and the startup log say so). Set, it must be usable in ``Authorization: Bearer <token>``:
surrounding ASCII whitespace (a secret file's trailing newline) is trimmed, and what is left must be one or
more visible ASCII characters (``!`` to ``~``, RFC 9110 field-value characters without spaces). An
empty or whitespace-only value, or one holding a space, tab, control or non-ASCII character inside,
can never be sent as such a header: it is a config error and the service refuses to start (a guard that
cannot work is never served), never a service without auth.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from memwork.errors import ConfigError
from memwork.loggable import loggable_error

log = logging.getLogger("memwork.service")
access_log = logging.getLogger("memwork.service.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/healthz"})  #: the only routes that never need the token
TOKEN_VAR = "MEMWORK_API_TOKEN"
_TOKEN_RE = re.compile(r"[!-~]+")
ASCII_WHITESPACE = " \t\r\n\f\v"  #: what is trimmed around a token (a no-break space is not)
UNKNOWN_PATH = "<other path>"  #: how the access log names a path that is not one of the service's routes
#: the methods the access log names; any other token a client sends there is ``<other method>``
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"})
UNKNOWN_METHOD = "<other method>"


@dataclass(frozen=True)
class TokenSetting:
    """The bearer token the environment sets: ``token`` (None: none), or ``problem`` when unusable.

    ``shape`` describes an unusable value without showing it (``<only whitespace>``)."""

    token: str | None = None
    problem: str | None = None
    shape: str | None = None

    @property
    def auth(self) -> str:
        """``required``, ``off`` (unset) or ``misconfigured`` (set but unusable: no service starts)."""
        if self.problem is not None:
            return "misconfigured"
        return "off" if self.token is None else "required"


def _shape(raw: str) -> str:
    """What is wrong with a token value, in words that show none of its characters."""
    trimmed = raw.strip(ASCII_WHITESPACE)
    if not raw:
        return "<empty>"
    if not trimmed:
        return "<only whitespace>"
    if any(not ch.isascii() for ch in trimmed):
        return "<holds a non-ASCII character>"
    return "<holds whitespace or a control character inside>"


def token_setting(env: Mapping[str, str]) -> TokenSetting:
    """``MEMWORK_API_TOKEN`` as the service reads it (rules in the module docstring); never raises."""
    raw = env.get(TOKEN_VAR)
    if raw is None:
        return TokenSetting()
    token = raw.strip(ASCII_WHITESPACE)
    if _TOKEN_RE.fullmatch(token):
        return TokenSetting(token)
    problem = (
        "is set but unusable as 'Authorization: Bearer <token>' (visible ASCII characters, no spaces): "
        f"set a usable token, or unset {TOKEN_VAR} to serve without auth"
    )
    return TokenSetting(None, problem, _shape(raw))


AUTH_WORDS = {
    "required": f"required ({TOKEN_VAR}: Authorization: Bearer on every route but /healthz)",
    "off": f"off ({TOKEN_VAR} is unset: memwork serve answers anyone who can connect)",
    "misconfigured": f"misconfigured ({TOKEN_VAR} is set but unusable: memwork serve will not start)",
}


def auth_status(env: Mapping[str, str]) -> dict[str, Any]:
    """What ``memwork status`` shows of the service's auth: ``{auth, authRequired, configErrors}``."""
    setting = token_setting(env)
    errors = [] if setting.problem is None else [
        {"field": TOKEN_VAR, "value": setting.shape, "problem": setting.problem}
    ]  # fmt: skip
    return {"auth": setting.auth, "authRequired": setting.token is not None, "configErrors": errors}


def token_config_error(setting: TokenSetting) -> ConfigError | None:
    """The error that stops the service for an unusable token (its value never shown), or None."""
    if setting.problem is None:
        return None
    return ConfigError(TOKEN_VAR, setting.shape, setting.problem)


async def send_error(
    send: Send, status: int, error: str, field: str | None, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """One JSON error response (the shape of every refusal the service makes)."""
    body = json.dumps({"error": error, "field": field}).encode()
    base = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": base + (headers or [])})
    await send({"type": "http.response.body", "body": body})


class CatchAll:
    """Anything the app raises becomes a 500 JSON line naming only the error's type.

    Starlette's own server-error middleware would log the full traceback (whose text may hold a URL
    with a password); here the log gets one redacted line and the caller no detail at all.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), loggable_error(exc).line())
            if not started:
                await send_error(send, 500, f"internal error ({type(exc).__name__})", None)


class BearerAuth:
    """With a token configured, every path but ``/healthz`` needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    def _authorized(self, scope: Scope) -> bool:
        if self.token is None or scope.get("path") in PUBLIC_PATHS:
            return True
        for name, value in scope.get("headers") or []:
            if name.lower() == b"authorization":
                scheme, _, credential = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    return hmac.compare_digest(credential.strip(), self.token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await send_error(
            send,
            401,
            "missing or wrong bearer token (Authorization: Bearer <MEMWORK_API_TOKEN>)",
            "Authorization",
            [(b"www-authenticate", b"Bearer")],
        )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """Refuse bodies over ``max_bytes`` with 413, counting bytes as they arrive (chunked too).

    The body is read up to the cap before the app runs and handed on as one message, so the app
    never starts on a body that turns out too large and nothing past the cap is ever read.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send: Send) -> None:
        await send_error(send, 413, f"request body larger than {self.max_bytes} bytes", "body")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nothing to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class AccessLog:
    """One line per request: method, path and status -- nothing else.

    Never the query string (a client may put a token or a user's id there), never a header, never the
    client's address; a path that is not one of the service's routes is logged as ``<other path>``
    (a client may put a token there too, or control characters to forge log lines), and a method that
    is not an HTTP method as ``<other method>`` (the same goes for the request line's first word). Replaces
    uvicorn's access log, which prints the path with its query string."""

    def __init__(self, app: ASGIApp, paths: Collection[str]) -> None:
        self.app = app
        self.paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets if the app fails before answering (CatchAll answers 500)

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            path = scope.get("path")
            shown = path if path in self.paths else UNKNOWN_PATH
            method = scope.get("method")
            access_log.info("%s %s %d", method if method in HTTP_METHODS else UNKNOWN_METHOD, shown, status)


def log_auth(setting: TokenSetting) -> None:
    """One startup line saying whether the service asks for the token (a warning when it does not)."""
    if setting.auth == "required":
        log.info("auth: %s required on every route but /healthz", TOKEN_VAR)
    else:
        log.warning("auth is OFF: %s is unset, so every route is open to anyone who can connect", TOKEN_VAR)


def service_log_config() -> dict[str, Any]:
    """uvicorn's logging configuration plus memwork's loggers (INFO, on stderr, uvicorn's format).

    memwork's own lines -- the access log, the auth line, degraded calls -- are then printed like
    uvicorn's; without this, Python prints only warnings and those without a level."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["memwork"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
