"""The shared machinery of the fake services: a threaded HTTP server, routes, faults, recorded requests.

A fake subclasses :class:`FakeService` and registers routes with :meth:`FakeService.route`::

    class FakeThing(FakeService):
        def __init__(self):
            super().__init__()
            self.route("POST", r"/v1/things/(?P<id>[^/]+)", self.post_thing)

        def post_thing(self, request: Request) -> Response:
            return Response(200, {"id": request.params["id"]})

and is served with ``with serve(FakeThing()) as base_url: ...``. Setting ``fake.fault`` makes every
following request fail in one way (see :class:`Fault`) until it is reset to None.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    """One request as the fake saw it (kept in ``fake.requests`` for assertions)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw: bytes
    params: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Response:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as is (malformed JSON)


@dataclass(frozen=True)
class Fault:
    """``status``: answer with it; ``malformed``: 200 with broken JSON; ``delay_s``: sleep first (cut
    short when the fake is torn down, so a slow fault never outlives its test); ``drop``: close the
    connection without answering."""

    status: int | None = None
    malformed: bool = False
    delay_s: float = 0.0
    drop: bool = False


Handler = Callable[[Request], Response]


class FakeService:
    """Routes, recorded requests and fault injection; subclasses add the service's endpoints."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.requests: list[Request] = []
        self.fault: Fault | None = None
        self.lock = threading.Lock()
        #: set when the fake is torn down: a sleeping slow fault wakes up and the handler ends
        self.stopped = threading.Event()

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method.upper(), re.compile(pattern + r"\Z"), handler))

    def handle(self, request: Request) -> Response:
        for method, pattern, handler in self.routes:
            match = pattern.match(request.path)
            if match and method == request.method:
                request.params = match.groupdict()
                return handler(request)
        return Response(404, {"detail": f"no route for {request.method} {request.path}"})


def _handler_class(fake: FakeService) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            parts = urlsplit(self.path)
            request = Request(
                self.command,
                parts.path,
                parse_qs(parts.query),
                {k.lower(): v for k, v in self.headers.items()},
                body,
                raw,
            )
            with fake.lock:
                fake.requests.append(request)
            fault = fake.fault
            if fault is not None and fault.delay_s:
                fake.stopped.wait(fault.delay_s)
            if fault is not None and fault.drop:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault is not None and fault.status is not None:
                response = Response(fault.status, {"error": f"injected {fault.status}"})
            elif fault is not None and fault.malformed:
                response = Response(200, raw=b'{"results": [ {"oops"')
            else:
                response = fake.handle(request)
            payload = response.raw if response.raw is not None else json.dumps(response.body).encode()
            self.send_response(response.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return _Handler


@contextlib.contextmanager
def serve(fake: FakeService) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1 in a thread; yields its base URL (``http://127.0.0.1:PORT``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(fake))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-service", daemon=True
    )  # a short poll: shutdown() returns in ~50 ms, not 500
    thread.start()
    fake.stopped.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        fake.stopped.set()
        server.shutdown()
        server.server_close()


def refused_url() -> str:
    """A URL nothing listens on (connection refused): a port bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
