"""The runtime service (``memwork serve``): the facade over HTTP, with shadow reads.

Routes (where the application calls memory, ``docs`` in the served ``/openapi.json``):

* ``GET  /healthz`` -- liveness only, never needs the token, touches no backend;
* ``GET  /api/runtime/status`` -- ``{"memory": facade.status(), "service": ..., "shadow": ...}``;
* ``POST /user-memory/v1/resolve`` -- ``facade.resolve`` (and, when sampled, a shadow read); the
  reply's ``X-Request-Id`` (the caller's own when it sent a plain one) names its comparison record;
* ``POST /user-memory/v1/remember-recent`` -- ``facade.write``;
* ``POST /user-memory/v1/sync`` -- ``facade.compact``;
* ``POST /user-memory/v1/forget`` -- purge a synthetic canary user (``memory-v2-canary-*`` only).

Bad input is a 4xx ``{"error": ..., "field": ...}`` before any backend is touched; a failing, hanging
or unreachable backend is a 200 with the facade's degraded payload (``ok: false``) within the
deadline, and the status counts it. The deadline (``MEMORY_BACKEND_TIMEOUT_MS``) runs from the
request's arrival; facade calls run on a fixed pool of worker threads and the event loop never waits
past the deadline: overload is shed with the degraded payload (``shed: true``), never queued without
bound (:mod:`memwork.service.execution`). Settings: ``MEMWORK_API_TOKEN`` (bearer token for every
route but ``/healthz``; unset: no auth; set but unusable: the service does not start, see
:mod:`memwork.service.guards`), ``MEMWORK_MAX_BODY_BYTES`` (default 1 MiB, 413 past it),
``MEMWORK_SERVICE_THREADS`` (the worker pool: at most this many backend calls at once, including
calls abandoned at their deadline; default two per CPU, 4..32), and the shadow settings of
:mod:`memwork.service.shadow`.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memwork.backends.requests import validate
from memwork.deadline import Deadline
from memwork.errors import BackendError, UsageError
from memwork.facade.facade import MemoryFacade, facade_from_env, purge_user_everywhere
from memwork.facade.policy import ConfigIssue
from memwork.facade.safety import WorkerPool
from memwork.loggable import loggable_error
from memwork.redaction import redact_text
from memwork.service.execution import (
    ArrivalStamp,
    LoopLag,
    Outcomes,
    arrival_of,
    json_answer,
    until_due,
)
from memwork.service.guards import (
    TOKEN_VAR,
    AccessLog,
    BearerAuth,
    BodyLimit,
    CatchAll,
    TokenSetting,
    log_auth,
    service_log_config,
    token_config_error,
    token_setting,
)
from memwork.service.models import (
    CANARY_USER_PREFIX,
    ForgetRequest,
    RememberRequest,
    ResolveRequest,
    SyncRequest,
)
from memwork.service.shadow import ShadowReader, shadow_from_env

log = logging.getLogger("memwork.service")

MAX_BODY_VAR = "MEMWORK_MAX_BODY_BYTES"
THREADS_VAR = "MEMWORK_SERVICE_THREADS"
DEFAULT_MAX_BODY_BYTES = 1 << 20


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 2


#: worker threads for facade calls: two per CPU (4..32). A legacy or pgvector call is mostly Python,
#: so more workers than that only take the GIL from the event loop (measured: at 200 clients on 2 CPUs,
#: 16 workers tripled p99 against 4); raise it for backends that mostly wait on a remote API
DEFAULT_THREADS = min(32, max(4, 2 * _usable_cpus()))
#: threads for the status and forget routes (they run outside the worker pool, never many at once)
ADMIN_THREADS = 2
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


@dataclass(frozen=True)
class ServiceSettings:
    """The service's own settings; a bad value is a config issue (shown in status), never a crash --
    but an unusable token stops :func:`create_app` (see :func:`memwork.service.guards.token_setting`)."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    threads: int = DEFAULT_THREADS
    errors: tuple[ConfigIssue, ...] = ()
    auth: TokenSetting = field(default_factory=TokenSetting)


def _positive_int(env: Mapping[str, str], name: str, default: int, errors: list[ConfigIssue]) -> int:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        errors.append(ConfigIssue(name, raw, f"must be a whole number >= 1; using {default}"))
        return default
    return value


def service_settings_from_env(env: Mapping[str, str]) -> ServiceSettings:
    """``MEMWORK_API_TOKEN``, ``MEMWORK_MAX_BODY_BYTES`` and ``MEMWORK_SERVICE_THREADS``."""
    errors: list[ConfigIssue] = []
    auth = token_setting(env)
    if auth.problem is not None:
        errors.append(ConfigIssue(TOKEN_VAR, auth.shape, auth.problem))
    max_body = _positive_int(env, MAX_BODY_VAR, DEFAULT_MAX_BODY_BYTES, errors)
    threads = _positive_int(env, THREADS_VAR, DEFAULT_THREADS, errors)
    return ServiceSettings(auth.token, max_body, threads, tuple(errors), auth)


class ServiceState:
    """What one app instance holds: the facade, the shadow reader, and per-operation outcomes."""

    def __init__(self, facade: MemoryFacade, shadow: ShadowReader, settings: ServiceSettings) -> None:
        self.facade = facade
        self.shadow = shadow
        self.settings = settings
        self.outcomes = Outcomes()
        self.lag = LoopLag()
        self._limiter: anyio.CapacityLimiter | None = None

    def limiter(self) -> anyio.CapacityLimiter:
        """The admin routes' threads (status, forget); created on first use: an anyio limiter
        belongs to the running event loop."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(ADMIN_THREADS)
        return self._limiter

    def status(self) -> dict[str, Any]:
        operations = self.outcomes.snapshot()
        last = [row["last"] for row in operations.values() if row["last"]]
        return {
            "authRequired": self.settings.token is not None,
            "auth": self.settings.auth.auth,
            "maxBodyBytes": self.settings.max_body_bytes,
            "threads": self.settings.threads,
            "degraded": any(not item["ok"] for item in last),
            "shed": self.outcomes.shed(),
            "workers": self.facade.pool.stats(),
            "eventLoopLagMs": {
                "now": round(self.lag.seconds * 1000, 1),
                "peak": round(self.lag.peak * 1000, 1),
            },
            "operations": operations,
        }


def with_loggable_reason(payload: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """A degraded payload whose ``reason`` holds no value of ``request`` and no backend's response body.

    The reason is kept in the status and may be logged by the caller, and a backend's error may echo
    the request (another user's query in a shared status): the answer gets the loggable form
    (:func:`memwork.loggable.loggable_error`) and its ``errorCode``."""
    if payload.get("ok") or not isinstance(payload.get("reason"), str):
        return payload
    problem = loggable_error(payload["reason"], request)
    return {**payload, "reason": problem.reason, "errorCode": problem.code}


def without_other_users(payload: dict[str, Any], user_id: str) -> dict[str, Any]:
    """The resolve payload without any memory that names another user (the tenant guard, again).

    Items carrying no ``userId`` (the legacy backend's) are kept: they are scoped by its query."""
    cleaned = dict(payload)
    for key in ("semanticMemories", "memories"):
        items = payload.get(key)
        if isinstance(items, list):
            kept = [i for i in items if not isinstance(i, Mapping) or i.get("userId", user_id) == user_id]
            if len(kept) != len(items):
                log.warning(
                    "resolve answer held %d memory item(s) of another user; dropped", len(items) - len(kept)
                )
            cleaned[key] = kept
    return cleaned


#: fresh request ids: a random 64-bit prefix per process and a counter -- unique like a uuid4's 32 hex digits
#: (the comparison log outlives a restart), without a ``getrandom`` call on the event loop per request
#: (``uuid4`` was ~1.5 % of the service's CPU under load)
_ID_PREFIX = secrets.token_hex(8)
_ID_SERIAL = itertools.count(1)


def _new_id_prefix() -> None:
    """A forked child (a pre-forking server's worker) draws its own prefix: never its parent's ids."""
    global _ID_PREFIX, _ID_SERIAL
    _ID_PREFIX, _ID_SERIAL = secrets.token_hex(8), itertools.count(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_id_prefix)


def fresh_request_id() -> str:
    """A new request id (32 hex digits, never repeated in this process)."""
    return f"{_ID_PREFIX}{next(_ID_SERIAL):016x}"


def request_id_of(request: Request) -> str:
    """The caller's ``X-Request-Id`` when it is a plain token (for correlation), else a fresh one."""
    given = request.headers.get("x-request-id", "")
    return given if REQUEST_ID_RE.fullmatch(given) else fresh_request_id()


def field_of(loc: Sequence[Any]) -> str:
    """Pydantic's error location -> the field as memwork names it (``messages[0].content``)."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def error_response(status: int, error: str, field: str | None) -> JSONResponse:
    return JSONResponse({"error": redact_text(error), "field": field}, status_code=status)


def _install_error_handlers(app: FastAPI) -> None:
    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
        field = "body" if first.get("type") == "json_invalid" else field_of(first.get("loc", ()))
        return error_response(422, f"{field}: {first.get('msg', 'invalid')}", field)

    async def on_usage(request: Request, exc: Exception) -> JSONResponse:
        field = exc.field if isinstance(exc, UsageError) else None
        return error_response(422, str(exc), field)

    async def on_backend(request: Request, exc: Exception) -> JSONResponse:
        # fail-closed (MEMORY_FAIL_OPEN=0): the backend's failure, one redacted line
        message = str(exc) if isinstance(exc, BackendError) else type(exc).__name__
        return error_response(503, message, None)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
        detail = exc.detail if isinstance(exc, StarletteHTTPException) else "error"
        # FastAPI's 400 is a body it could not parse (e.g. JSON nested too deep)
        return error_response(status, str(detail), "body" if status == 400 else None)

    async def on_anything(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed: %s", request.method, request.url.path, loggable_error(exc).line())
        return error_response(500, f"internal error ({type(exc).__name__})", None)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(UsageError, on_usage)
    app.add_exception_handler(BackendError, on_backend)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_anything)


async def _call_facade(
    state: ServiceState, operation: str, clean: dict[str, Any], request: Request
) -> dict[str, Any]:
    """``facade.<operation>(clean)`` on the worker pool, answered by the deadline from the request's
    arrival at the latest (the degraded payload when shed or still running). Fail-closed
    (``MEMORY_FAIL_OPEN=0``) errors propagate."""
    budget = state.facade.policy.timeout_s
    arrived = state.lag.arrival(arrival_of(request), budget)
    deadline = Deadline.after(budget, start=arrived)
    call = state.facade.begin(operation, clean, deadline, overloaded=state.lag.overloaded(budget))
    await until_due(call)
    payload = with_loggable_reason(call.answer(), clean)
    state.outcomes.record(call, payload, (time.monotonic() - arrived) * 1000)
    return payload


def _install_routes(app: FastAPI, state: ServiceState) -> None:
    @app.get("/healthz", tags=["runtime"])
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers (no backend is touched, no token needed)."""
        return {"ok": True}

    @app.get("/api/runtime/status", tags=["runtime"])
    async def runtime_status() -> JSONResponse:
        """The facade status (policy, selections, every backend), the service's and the shadow's."""
        memory = await anyio.to_thread.run_sync(state.facade.status, limiter=state.limiter())
        shadow = state.shadow.status()
        extra = [*state.settings.errors, *state.shadow.settings.errors]
        memory["configErrors"] = [
            *memory.get("configErrors", []),
            *({"field": e.field, "value": e.value, "problem": e.problem} for e in extra),
        ]
        return JSONResponse(jsonable_encoder({"memory": memory, "service": state.status(), "shadow": shadow}))

    @app.post("/user-memory/v1/resolve", tags=["memory"])
    async def resolve(body: ResolveRequest, request: Request) -> JSONResponse:
        """Memory for the current request (the primary answers; sampled requests are shadowed)."""
        clean = validate("resolve", body.model_dump(exclude_none=True))
        request_id = request_id_of(request)
        started = time.perf_counter()
        payload = await _call_facade(state, "resolve", clean, request)
        if not payload.get("shed"):  # a shed request never ran: nothing to compare, and no time for it
            state.shadow.submit(clean, payload, (time.perf_counter() - started) * 1000, request_id)
        answer = without_other_users(payload, clean["userId"])
        return json_answer(answer, headers={"X-Request-Id": request_id})

    @app.post("/user-memory/v1/remember-recent", tags=["memory"])
    async def remember_recent(body: RememberRequest, request: Request) -> JSONResponse:
        """Record recent messages as memory evidence (the facade's write). ``status``: ``stored``,
        ``failed`` (nothing stored) or ``pending`` (not known at the deadline); a retry of the same
        messages never stores them twice."""
        clean = validate("write", body.model_dump(exclude_none=True))
        return json_answer(await _call_facade(state, "write", clean, request))

    @app.post("/user-memory/v1/sync", tags=["memory"])
    async def sync(body: SyncRequest, request: Request) -> JSONResponse:
        """Analyze / compact the user's pending memory (the facade's compact)."""
        clean = validate("compact", body.model_dump(exclude_none=True))
        return json_answer(await _call_facade(state, "compact", clean, request))

    @app.post("/user-memory/v1/forget", tags=["memory"])
    async def forget(body: ForgetRequest) -> JSONResponse:
        """Purge a synthetic canary user (``memory-v2-canary-*``) from every backend that can."""
        user_id = validate("compact", {"userId": body.userId})["userId"]
        if not user_id.startswith(CANARY_USER_PREFIX):
            problem = f"only synthetic canary users ({CANARY_USER_PREFIX}*) may be forgotten"
            return error_response(403, f"userId={user_id!r}: {problem}", "userId")
        if not state.facade.policy.enabled:
            return JSONResponse(
                {
                    "ok": True,
                    "skipped": True,
                    "userId": user_id,
                    "reason": "memory disabled (MEMORY_ENABLED=0)",
                }
            )
        purged = await anyio.to_thread.run_sync(
            purge_user_everywhere, state.facade, user_id, limiter=state.limiter()
        )
        ok = not any(isinstance(v, Mapping) and "error" in v for v in purged.values())
        return JSONResponse(
            jsonable_encoder({"ok": ok, "skipped": False, "userId": user_id, "purged": purged})
        )


#: idle keep-alive connections are kept longer than clients keep them (httpx: 5 s, uvicorn's own default),
#: so a client never sends a request on a connection the server is closing at that moment (a
#: connection closed without a response, seen once in 2,500 requests at 200 clients with equal timeouts)
KEEP_ALIVE_S = 75


def create_app(env: Mapping[str, str] | None = None, *, facade: MemoryFacade | None = None) -> FastAPI:
    """The ASGI app over ``facade`` (default: the one ``env`` describes; ``os.environ`` by default).

    Never raises on bad configuration (each bad value is a config error in the status) but one: a
    ``MEMWORK_API_TOKEN`` that is set but unusable raises :class:`~memwork.errors.ConfigError` (its
    value never shown), since the only other choices are a service without auth or one nobody can
    use. A facade built here is closed, and the shadow worker stopped, when the app shuts down."""
    env = dict(os.environ if env is None else env)
    settings = service_settings_from_env(env)
    refusal = token_config_error(settings.auth)
    if refusal is not None:
        raise refusal
    owned = facade is None
    # an injected facade keeps its own worker pool; one built here gets MEMWORK_SERVICE_THREADS workers
    pool = WorkerPool(settings.threads, name="memwork-worker") if owned else None
    active = facade_from_env(env, pool=pool) if facade is None else facade
    state = ServiceState(active, shadow_from_env(env, active), settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log_auth(settings.auth)
        state.lag.start()
        yield
        await state.lag.stop()
        state.shadow.close()
        if owned:
            active.close()
        if pool is not None:
            pool.close()

    app = FastAPI(
        title="memwork",
        summary="Memory V2 runtime service: the memory facade over HTTP, with shadow reads.",
        lifespan=lifespan,
    )
    app.state.memwork = state
    _install_error_handlers(app)
    _install_routes(app, state)
    # added innermost first: AccessLog -> CatchAll -> BearerAuth -> BodyLimit -> the app
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(BearerAuth, token=settings.token)
    app.add_middleware(CatchAll)
    app.add_middleware(AccessLog, paths=route_paths(app))
    app.add_middleware(ArrivalStamp)  # outermost: the deadline runs from here
    return app


def route_paths(app: FastAPI) -> set[str]:
    """The paths the app serves (the access log names only these; anything else is ``<other path>``)."""
    return {path for route in app.routes if isinstance(path := getattr(route, "path", None), str)}


def serve(host: str = "127.0.0.1", port: int = 8081, *, env: Mapping[str, str] | None = None) -> None:
    """Run :func:`create_app` under uvicorn until interrupted (``memwork serve``).

    Access lines (:class:`~memwork.service.guards.AccessLog`, uvicorn's own is off) name method, path
    and status only: never a query string, a header (the token) or a path the service does not serve.
    An unusable ``MEMWORK_API_TOKEN`` raises :class:`~memwork.errors.ConfigError` before anything
    listens."""
    import uvicorn

    app = create_app(env)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="info",
        log_config=service_log_config(),
        access_log=False,
        server_header=False,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL, stops it on exit.

    For tests, benchmarks and the demo (port 0: a free port is chosen). The app's lifespan runs, so
    its shadow worker is stopped and its own facade closed afterwards."""
    import threading

    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", timeout_keep_alive=KEEP_ALIVE_S
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="memwork-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the service did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
