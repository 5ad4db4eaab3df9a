"""Fail-open plumbing: a fixed pool of persistent worker threads that run backend calls under deadlines.

Why a fixed pool (F-18 of the be70b28 review): a call that runs into its deadline keeps running on
its thread -- Python cannot kill a thread, and a driver blocked in ``recv`` ignores everything. One
new thread per call made those abandoned calls unbounded (1,737 threads after 20 s of a held table
lock). Here every call runs on one of ``size`` persistent threads, started on demand up to that size
and never per call:

* a call waits in a FIFO queue for a worker, and its deadline runs while it waits: a call still queued
  at its deadline is *shed* (it never runs, :class:`~memwork.errors.Shed`), and a worker never starts
  a call whose deadline has passed;
* :meth:`WorkerPool.submit` sheds at once -- before queueing -- a call that cannot get a worker in
  time: when every worker is held by a call its caller already gave up on, when the queue is at
  ``queue_max``, or when the queue ahead of it (at the recent run time per call) is longer than the
  time it has left;
* a caller that gives up on a running call (:meth:`Call.give_up`) learns how it ended: cut off (its
  write path asked the commit gate and was refused: nothing stored, :class:`~memwork.errors.CutOff`),
  or timed out (the outcome is unknown: :class:`~memwork.errors.BackendTimeout`). The call itself
  runs on; :mod:`memwork.db` has its statements cancelled by the server at the deadline, so the
  worker comes back soon after.

Workers are daemon threads rather than a ``ThreadPoolExecutor``'s: the executor joins its workers at
interpreter exit, so one hung backend would hang the host's shutdown.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from memwork.deadline import ABANDONED, COMMITTING, CallScope, Clock, Deadline, using_scope
from memwork.deadline import FINISHED as SCOPE_FINISHED
from memwork.deadline import RUNNING as SCOPE_RUNNING
from memwork.errors import BackendTimeout, CutOff, Shed

__all__ = ["Call", "Watchdog", "WorkerPool", "call_with_timeout", "shared_pool", "watchdog"]

log = logging.getLogger("memwork.facade")

T = TypeVar("T")

SHARED_WORKERS = 8  #: the process-wide pool for calls that bring none (status checks, shadow, CLI)
QUEUE_PER_WORKER = 16  #: default ``queue_max`` per worker
#: a call is not queued behind one that has already waited this share of its budget: under overload the
#: queue stays short and the excess is shed at once, instead of every call waiting to its deadline
QUEUE_WAIT_SHARE = 0.25
RUN_TIME_WEIGHT = 0.1  #: weight of the newest run time in the moving average the shed estimate uses

# how a call ended, as its caller sees it
QUEUED = "queued"
RUNNING = "running"
DONE = "done"  #: a result or an error is there
SHED = "shed"  #: never ran
CUT_OFF = "cut-off"  #: given up while running; its write path can no longer commit
TIMED_OUT = "timed-out"  #: given up while running; the outcome is unknown


class Call(Generic[T]):
    """One function submitted to a :class:`WorkerPool`: its scope, then its result or error."""

    def __init__(self, fn: Callable[[], T], scope: CallScope, pool: WorkerPool) -> None:
        self.fn = fn
        self.scope = scope
        self.state = QUEUED
        self.result: T | None = None
        self.error: BaseException | None = None
        self.abandoned = False  #: the caller gave up while it ran
        self.run_s: float | None = None
        self.queued_at = scope.deadline.clock()
        self._pool = pool
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._callbacks: list[Callable[[Call[T]], None]] = []

    @property
    def label(self) -> str:
        return self.scope.label

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def add_done_callback(self, callback: Callable[[Call[T]], None]) -> None:
        """``callback(call)`` once it has a result, an error or was shed (at once if it has)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        _safely(callback, self)

    # ---- the worker's side ------------------------------------------------------------------------
    def _run(self) -> str:
        """Run on a worker: :data:`DONE`, :data:`SHED` (its deadline passed in the queue) or
        :data:`QUEUED` when its caller had already given up on it (nothing to do)."""
        with self._lock:
            if self.state != QUEUED:
                return QUEUED
            if self.scope.deadline.statement_budget() <= 0:  # no time left to do anything useful
                self._shed_locked("its deadline passed while it waited for a worker")
                callbacks = self._take_callbacks()
            else:
                self.state = RUNNING
                callbacks = None
        if callbacks is not None:
            self._notify(callbacks)
            return SHED
        clock = self.scope.deadline.clock
        started = clock()
        fn, self.fn = self.fn, _ran  # the closure (and what it holds) is freed once the call is over
        try:
            with using_scope(self.scope):
                value = fn()
            del fn
        except BaseException as exc:
            self.run_s = clock() - started
            self._settle(None, exc)
        else:
            self.run_s = clock() - started
            self._settle(value, None)
        return DONE

    def _settle(self, value: T | None, error: BaseException | None) -> None:
        with self._lock:
            self.state = DONE
            self.result, self.error = value, error
            self.scope.finish()
            callbacks = self._take_callbacks()
        self._notify(callbacks)

    def _shed_locked(self, why: str) -> None:
        self.state = SHED
        self.error = Shed(f"{self.label} shed: {why} (deadline {self.scope.deadline.budget_ms} ms)")

    def _take_callbacks(self) -> list[Callable[[Call[T]], None]]:
        callbacks, self._callbacks = self._callbacks, []
        self._event.set()
        return callbacks

    def _notify(self, callbacks: list[Callable[[Call[T]], None]]) -> None:
        for callback in callbacks:
            _safely(callback, self)

    # ---- the caller's side ------------------------------------------------------------------------
    def give_up(self) -> str:
        """The caller stops waiting: :data:`DONE`, :data:`SHED`, :data:`CUT_OFF` or :data:`TIMED_OUT`."""
        pool = self._pool
        with pool._cond, self._lock:
            if self.state in (DONE, SHED):
                return self.state
            if self.state == QUEUED:
                self._shed_locked("no worker was free before its deadline")
                pool._forget_queued(self)
                callbacks = self._take_callbacks()
            else:  # RUNNING
                gate = self.scope.abandon()
                self.abandoned = True
                pool._abandoned += 1
                pool.counters["timedOut"] += 1
                scope = self.scope
                if not scope.entered:  # the job checks before it calls the backend: it never will
                    return CUT_OFF
                guarded = scope.guarded and not scope.committed
                return CUT_OFF if guarded and gate not in (COMMITTING, ABANDONED) else TIMED_OUT
        self._notify(callbacks)
        return SHED

    def outcome(self) -> T:
        """Wait until the deadline; the result, the call's own error, or the error of how it ended."""
        if not self.wait(max(0.0, self.scope.deadline.remaining())):
            verdict = self.give_up()
            ms = self.scope.deadline.budget_ms
            if verdict == CUT_OFF:
                raise CutOff(f"{self.label} timed out after {ms} ms; it was rolled back")
            if verdict == TIMED_OUT:
                raise BackendTimeout(f"{self.label} timed out after {ms} ms")
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # DONE without an error: fn's value


def _ran() -> Any:
    raise RuntimeError("this call has already run")


def _safely(callback: Callable[[Any], None], call: Call[Any]) -> None:
    try:
        callback(call)
    except Exception:  # a bookkeeping callback must never take a worker down
        log.exception("callback of %s failed", call.label)


class WorkerPool:
    """``size`` persistent daemon threads and a bounded FIFO queue of :class:`Call` s (see module doc)."""

    def __init__(
        self,
        size: int,
        *,
        name: str = "memwork-call",
        queue_max: int | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, not {size}")
        self.size = size
        self.name = name
        self.queue_max = queue_max if queue_max is not None else QUEUE_PER_WORKER * size
        self.clock = clock
        self.counters = {"submitted": 0, "shed": 0, "completed": 0, "timedOut": 0}
        self._cond = threading.Condition()
        self._queue: deque[Call[Any]] = deque()
        self._threads = 0
        self._idle = 0
        self._busy = 0
        self._abandoned = 0  #: running calls whose caller gave up
        self._run_s = 0.0  #: moving average of a call's run time (capped at its budget)
        self._closed = False
        self._serial = 0

    def submit(self, fn: Callable[[], T], deadline: Deadline, label: str) -> Call[T]:
        """Queue ``fn`` for a worker, or :class:`~memwork.errors.Shed` when it cannot start in time."""
        call = Call(fn, CallScope(deadline, label), self)
        with self._cond:
            problem = self._admission_problem(deadline)
            if problem is not None:
                self.counters["shed"] += 1
                raise Shed(f"{label} shed: {problem} (deadline {deadline.budget_ms} ms)")
            self.counters["submitted"] += 1
            self._queue.append(call)
            if self._idle < len(self._queue) and self._threads < self.size:
                self._start_worker()
            else:
                self._cond.notify()
        return call

    def _admission_problem(self, deadline: Deadline) -> str | None:
        if self._closed:
            return "the worker pool is closed"
        if deadline.expired():
            return "no time left"
        if self._idle > len(self._queue) or self._threads < self.size:
            return None  # a worker is free, or one more may be started
        usable = self.size - self._abandoned
        if usable <= 0:
            return f"all {self.size} workers are held by calls past their deadline"
        waiting = len(self._queue)
        if waiting >= self.queue_max:
            return f"{waiting} calls already wait for a worker"
        if waiting:
            waited = deadline.clock() - self._queue[0].queued_at
            if waited > QUEUE_WAIT_SHARE * deadline.budget_s:
                return f"the oldest of {waiting} queued calls has waited {waited * 1000:.0f} ms"
        expected = (waiting + 1) / usable * self._run_s
        if expected >= deadline.remaining():
            return f"about {expected * 1000:.0f} ms to wait for one of {usable} busy workers"
        return None

    def _forget_queued(self, call: Call[Any]) -> None:
        """Drop a call its caller shed from the queue (held: ``_cond``)."""
        self.counters["shed"] += 1
        with contextlib.suppress(ValueError):  # a worker has just taken it; it sees the call is shed
            self._queue.remove(call)

    def _start_worker(self) -> None:
        self._serial += 1
        self._threads += 1
        worker = threading.Thread(target=self._work, name=f"{self.name}-{self._serial}", daemon=True)
        worker.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closed:
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                call = self._queue.popleft()
                self._busy += 1
            ended = call._run()
            with self._cond:
                self._busy -= 1
                if call.abandoned:
                    self._abandoned -= 1
                if ended == SHED:
                    self.counters["shed"] += 1
                elif ended == DONE and call.run_s is not None:
                    sample = min(call.run_s, call.scope.deadline.budget_s)
                    self._run_s += RUN_TIME_WEIGHT * (sample - self._run_s)
                    self.counters["completed"] += 1
            del call  # an idle worker keeps nothing alive (a backend, its client, a file lock)

    def stats(self) -> dict[str, Any]:
        """For status pages: size, threads, busy, abandoned, queued, and the counters so far."""
        with self._cond:
            return {
                "size": self.size,
                "threads": self._threads,
                "busy": self._busy,
                "abandoned": self._abandoned,
                "queued": len(self._queue),
                "queueMax": self.queue_max,
                "runMs": round(self._run_s * 1000, 2),
                **self.counters,
            }

    def close(self) -> None:
        """Idle workers exit now, busy ones after their call; queued calls are shed."""
        with self._cond:
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for call in queued:
            call.give_up()


_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> WorkerPool:
    """The process-wide pool (:data:`SHARED_WORKERS` threads), for callers that bring no pool."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerPool(SHARED_WORKERS, name="memwork-shared")
        return _shared


def call_with_timeout(
    fn: Callable[[], T], timeout_s: float, what: str, *, pool: WorkerPool | None = None
) -> T:
    """``fn()`` on a pool worker: its value or exception, :class:`BackendTimeout` after ``timeout_s``
    (:class:`~memwork.errors.CutOff` when its write path was refused the commit), or
    :class:`~memwork.errors.Shed` when no worker could start it in time."""
    call = (pool or shared_pool()).submit(fn, Deadline.after(timeout_s), what)
    return call.outcome()


class Watchdog:
    """One long-lived daemon thread that gives up on calls running on their caller's own thread
    (the facade's inline resolve) when their deadline passes: :meth:`CallScope.abandon`, which runs
    the abort the callee registered (pgvector shuts its connection's socket down), so a hung server
    is answered fail-open at the deadline without a thread per call."""

    def __init__(self, name: str = "memwork-watchdog") -> None:
        self.name = name
        self.counters = {"watched": 0, "abandoned": 0}
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, CallScope]] = []
        self._serial = 0
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  #: when the thread wakes by itself next (inf: only when notified)

    def watch(self, scope: CallScope) -> None:
        """Abandon ``scope`` at its deadline unless it has finished by then.

        Calls at the front of the heap that finished in time are forgotten here, so the heap holds
        about the running calls instead of every call of the last deadline's span (which the thread
        then drained at each wake, taking the lock from the callers hundreds of times); the thread is
        woken only for a deadline earlier than the one it sleeps until."""
        at = scope.deadline.at
        heap = self._heap
        with self._cond:
            self._serial += 1
            self.counters["watched"] += 1
            while heap and heap[0][2].state == SCOPE_FINISHED:
                heapq.heappop(heap)
            heapq.heappush(heap, (at, self._serial, scope))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            elif at < self._wakes_at:  # a new earliest deadline: wake the thread to re-arm
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._wakes_at = -math.inf  # awake: a new deadline needs no notify
                while not self._heap:
                    self._wakes_at = math.inf
                    self._cond.wait()
                    self._wakes_at = -math.inf
                at, _, scope = self._heap[0]
                left = at - scope.deadline.clock()
                if left > 0:  # sleeps until the earliest deadline, not once per call
                    # (a call that finished meanwhile is forgotten by the next watch(): forgetting it
                    # here would empty the heap, and the next call would have to wake this thread)
                    self._wakes_at = at
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
            if scope.abandon() == SCOPE_RUNNING:  # it was still running: now it may not go on
                with self._cond:
                    self.counters["abandoned"] += 1
            del scope

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {**self.counters, "pending": len(self._heap)}


_watchdog: Watchdog | None = None


def watchdog() -> Watchdog:
    """The process-wide :class:`Watchdog` (its thread starts with the first watched call). Once made
    it is read without the lock: every inline resolve asks for it."""
    global _watchdog
    made = _watchdog
    if made is not None:
        return made
    with _shared_lock:
        if _watchdog is None:
            _watchdog = Watchdog()
        return _watchdog
