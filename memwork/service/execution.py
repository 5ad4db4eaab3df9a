"""How ``memwork serve`` runs a memory request: a deadline from its arrival, load shedding, counts.

* :class:`ArrivalStamp` (the outermost middleware) stamps each request when it reaches the app; the
  deadline (``MEMORY_BACKEND_TIMEOUT_MS``) runs from that moment, so time spent queueing for a worker
  is inside it, not added to it.
* :class:`LoopLag` measures how late the event loop runs a timer. A request waits about that long in
  the socket before the app sees it, so its arrival is taken as the stamp less the lag; and while the
  lag is over :data:`LAG_SHED_SHARE` of the deadline the loop itself is the bottleneck (the CPU is
  short, or the workers hold the GIL): new requests are shed at once, without a worker, so the loop
  catches up instead of every request waiting in front of it.
* The facade call is one job on the service's fixed worker pool (``MEMWORK_SERVICE_THREADS``,
  :class:`memwork.facade.safety.WorkerPool`); the event loop awaits it (:func:`until_due`) and never
  waits past the deadline: a job that could not get a worker in time is shed, one still running is
  answered degraded at once, and either way the request gets the fail-open payload on time.
* :class:`Outcomes` counts, per operation, what was answered (ok, degraded, shed, timed out,
  pending) and, for writes and compactions, each one's *final* outcome (stored, notStored, unknown)
  once it is known -- a write answered ``pending`` is counted again when its job ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fastapi.encoders import jsonable_encoder
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from memwork.deadline import Clock
from memwork.facade.facade import (
    CHANGING,
    FAILED,
    FINAL_NOT_STORED,
    FINAL_STORED,
    FINAL_UNKNOWN,
    PENDING,
    FacadeCall,
)
from memwork.facade.safety import CUT_OFF, SHED, TIMED_OUT, Call

ARRIVAL_KEY = "memwork.arrived"
LAG_TICK_S = 0.02  #: how often the lag monitor looks
LAG_SHED_SHARE = 0.25  #: shed new requests at once while the loop lags more than this share of the deadline
LAG_ARRIVAL_SHARE = 0.1  #: the arrival is moved back by the lag, but by at most this share of the deadline
LAG_WEIGHT = 0.25  #: weight of the newest tick in the lag's moving average (a lone stall does not shed)


class ArrivalStamp:
    """Pure ASGI middleware: ``scope["state"][ARRIVAL_KEY]`` = when the request reached the app."""

    def __init__(self, app: ASGIApp, clock: Clock = time.monotonic) -> None:
        self.app = app
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVAL_KEY] = self.clock()
        await self.app(scope, receive, send)


def arrival_of(request: Request) -> float:
    """The request's arrival on the monotonic clock (now, if no stamp: an app without the middleware)."""
    stamp = request.scope.get("state", {}).get(ARRIVAL_KEY)
    return stamp if isinstance(stamp, float) else time.monotonic()


class LoopLag:
    """How late the event loop runs a timer (seconds, a moving average over the last few ticks).

    Started with the app (:meth:`start`), read by the request path (:attr:`seconds`)."""

    def __init__(self, tick_s: float = LAG_TICK_S) -> None:
        self.tick_s = tick_s
        self.seconds = 0.0
        self.peak = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="memwork-loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.tick_s)
            self.observe(loop.time() - before - self.tick_s)

    def observe(self, late: float) -> None:
        late = max(0.0, late)
        self.seconds += LAG_WEIGHT * (late - self.seconds)
        self.peak = max(self.peak, late)

    def overloaded(self, budget_s: float) -> str | None:
        """Why new work should be shed now, or None."""
        if self.seconds > LAG_SHED_SHARE * budget_s:
            return f"the service's event loop runs {self.seconds * 1000:.0f} ms late"
        return None

    def arrival(self, stamp: float, budget_s: float) -> float:
        """When the request most likely reached the socket: the stamp less the current lag."""
        return stamp - min(self.seconds, LAG_ARRIVAL_SHARE * budget_s)


async def until_due(call: FacadeCall) -> None:
    """Wait, without blocking the event loop, until ``call``'s job is done or its deadline passed."""
    job, deadline = call.call, call.deadline
    if job is None or deadline is None or job.done():
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: Call[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed (shutdown): nobody waits
            loop.call_soon_threadsafe(_set_done, woken)

    job.add_done_callback(wake)
    remaining = deadline.remaining()
    if remaining > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken, remaining)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _EncodedJSON(JSONResponse):
    """A JSON response whose body is already encoded."""

    def render(self, content: Any) -> bytes:
        return content if isinstance(content, bytes) else super().render(content)


def json_answer(payload: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A facade payload as a JSON response. Payloads are plain JSON values almost always, so they are
    serialised directly -- FastAPI's ``jsonable_encoder`` walk costs the event loop ~10x as much
    (0.8 ms for a 10-memory resolve); only a payload ``json`` cannot serialise takes that path."""
    try:
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:  # NaN or infinity (a score of a vector without direction): null, never a 500
        return json_answer(finite_or_null(payload), headers)
    except TypeError:  # a plugin backend's datetime, set, model ...
        return JSONResponse(jsonable_encoder(finite_or_null(payload)), headers=headers)
    return _EncodedJSON(body, headers=headers)


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float made None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


class Outcomes:
    """Per-operation answer counts and final outcomes (thread-safe: jobs settle on worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, Any]] = {}

    def _row(self, operation: str) -> dict[str, Any]:
        row = self._rows.get(operation)
        if row is None:
            row = {"ok": 0, "degraded": 0, "shed": 0, "timedOut": 0, "last": None}
            if operation in CHANGING:
                row["pending"] = 0
                row["final"] = {FINAL_STORED: 0, FINAL_NOT_STORED: 0, FINAL_UNKNOWN: 0, "inFlight": 0}
                row["contradicted"] = 0  #: answered failed, yet stored: must stay 0
            self._rows[operation] = row
        return row

    def record(self, call: FacadeCall, payload: Mapping[str, Any], latency_ms: float) -> None:
        """Count the answer; for a write or compaction, its final outcome now or when its job ends."""
        operation = call.operation
        degraded = not payload.get("ok")
        with self._lock:
            row = self._row(operation)
            row["degraded" if degraded else "ok"] += 1
            if call.ended == SHED:
                row["shed"] += 1
            elif call.ended in (CUT_OFF, TIMED_OUT):
                row["timedOut"] += 1
            if operation in CHANGING:
                row["pending"] += payload.get("status") == PENDING
                row["final"]["inFlight"] += 1
            row["last"] = {
                "at": datetime.now(UTC).isoformat(),
                "ok": not degraded,
                "source": payload.get("source"),
                "reason": payload.get("reason"),
                "errorCode": payload.get("errorCode"),
                "latencyMs": round(latency_ms, 2),
            }
        if operation in CHANGING:
            answered = payload.get("status")
            call.on_final(lambda final: self._settle(operation, answered, final))

    def _settle(self, operation: str, answered: Any, final: str) -> None:
        with self._lock:
            row = self._row(operation)
            row["final"]["inFlight"] -= 1
            row["final"][final] += 1
            if answered == FAILED and final == FINAL_STORED:
                row["contradicted"] += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {
                op: {k: dict(v) if isinstance(v, dict) else v for k, v in row.items()}
                for op, row in self._rows.items()
            }

    def shed(self) -> int:
        with self._lock:
            return sum(row["shed"] for row in self._rows.values())
