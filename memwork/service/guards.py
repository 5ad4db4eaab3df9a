"""Pure ASGI guards in front of the service: a last-resort error catcher, bearer auth, a body cap.

They are plain ASGI callables rather than ``BaseHTTPMiddleware`` so they see the raw ``receive``
stream: the body cap counts bytes as they arrive (a ``Content-Length`` over the cap is refused before
any byte is read; a chunked body is refused as soon as the count passes the cap) and never buffers
more than the cap. Auth runs before the body is read, so an unauthenticated caller cannot make the
service read anything. Every refusal is the service's JSON error shape ``{"error", "field"}``.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from memwork.redaction import describe_error

log = logging.getLogger("memwork.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/healthz"})  #: the only routes that never need the token


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
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), describe_error(exc))
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
