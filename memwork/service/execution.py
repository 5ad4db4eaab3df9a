"""How ``memwork serve`` runs a memory request: a deadline from its arrival, load shedding, counts.

* :class:`ArrivalStamp` (the outermost middleware) stamps each request when it reaches the app; the
  deadline (``MEMORY_BACKEND_TIMEOUT_MS``) runs from that moment, so time spent queueing for a worker
  is inside it, not added to it.
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
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
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
