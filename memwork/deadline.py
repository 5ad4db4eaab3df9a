"""Per-call deadlines and the commit gate, visible to the database layer while a call runs.

A facade call runs on a worker thread of :class:`memwork.facade.safety.WorkerPool` under a
:class:`CallScope`: its :class:`Deadline` (from the request's arrival) and a commit gate. Code far
below the facade reads the scope of the running call with :func:`current_scope`:

* :mod:`memwork.db` bounds every SQL statement by the time left (MariaDB ``SET STATEMENT
  max_statement_time``, PostgreSQL ``statement_timeout``, SQLite ``busy_timeout``), so a statement
  blocked by a lock is cancelled *on the server* a little before the answer is due
  (:meth:`Deadline.statement_budget` keeps :data:`STATEMENT_RESERVE` of the budget for the rollback
  to reach the caller) and never runs on after its caller gave up;
* a write path that calls :meth:`CallScope.guard_commits` promises to ask :meth:`CallScope.may_commit`
  right before it commits and to roll back when refused. The gate and the caller's give-up
  (:meth:`CallScope.abandon`) are decided under one lock, so when the caller answers "not stored"
  the write can no longer commit -- the answer never contradicts what is stored.

No scope (a library call outside the pool, a CLI run) means no deadline: nothing is bounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

from memwork.errors import CutOff

Clock = Callable[[], float]

#: the share of a call's budget kept back from its statements, so a statement the server cancels has
#: rolled back, and the worker has reported it, before the answer is due
STATEMENT_RESERVE = 0.1
#: ... but never more than this much (a long budget needs no long reserve)
MAX_STATEMENT_RESERVE_S = 0.25


class Deadline:
    """An absolute point on ``clock`` (``time.monotonic`` unless a test injects one)."""

    __slots__ = ("at", "budget_s", "clock")

    def __init__(self, at: float, budget_s: float, clock: Clock = time.monotonic) -> None:
        self.at = at
        self.budget_s = budget_s  #: the whole budget, for messages and the statement reserve
        self.clock = clock

    @classmethod
    def after(cls, seconds: float, *, start: float | None = None, clock: Clock = time.monotonic) -> Deadline:
        """``seconds`` after ``start`` (default: now) -- the service passes the request's arrival."""
        begin = clock() if start is None else start
        return cls(begin + seconds, seconds, clock)

    def remaining(self) -> float:
        return self.at - self.clock()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def statement_budget(self) -> float:
        """Seconds one statement may still take: the time left less the reserve (may be <= 0)."""
        reserve = min(self.budget_s * STATEMENT_RESERVE, MAX_STATEMENT_RESERVE_S)
        return self.remaining() - reserve

    @property
    def budget_ms(self) -> int:
        return round(self.budget_s * 1000)


# states of a scope's commit gate
RUNNING = "running"
COMMITTING = "committing"  #: the callee was allowed to commit: the outcome is the callee's
ABANDONED = "abandoned"  #: the caller gave up first: the callee may no longer commit
FINISHED = "finished"


class CallScope:
    """What a running call knows about itself: deadline, label, commit gate (thread-safe)."""

    def __init__(self, deadline: Deadline, label: str) -> None:
        self.deadline = deadline
        self.label = label  #: e.g. ``write``; the facade renames it ``<backend>.write`` once selected
        self.source: str | None = None  #: the backend serving the call, once the facade selected it
        self.guarded = False  #: the callee promised to ask :meth:`may_commit` before committing
        self.committed = False  #: the callee has committed something (its outcome is its own)
        self.timed_out = False  #: the callee itself ran into the deadline (a statement the server ended)
        self.entered = False  #: the backend has been called (before that, giving up stops everything)
        self._state = RUNNING
        self._lock = threading.Lock()
        self._abort: Callable[[], None] | None = None

    def on_abandon(self, abort: Callable[[], None]) -> bool:
        """While the callee blocks in I/O: ``abort()`` (e.g. shut its socket down) runs if the caller
        gives up meanwhile, so the callee returns at once instead of at the server's own timeout.
        False (nothing registered) when the caller already gave up. Undo with :meth:`clear_abandon`
        before the resource is reused -- both hold the scope's lock, so an abort never hits a reused
        connection."""
        with self._lock:
            if self._state == ABANDONED:
                return False
            self._abort = abort
            return True

    def clear_abandon(self) -> None:
        with self._lock:
            self._abort = None

    @property
    def state(self) -> str:
        return self._state

    def enter(self) -> bool:
        """Called right before the backend itself: False (do not call it) once the caller gave up."""
        with self._lock:
            if self._state == ABANDONED:
                return False
            self.entered = True
            return True

    def guard_commits(self) -> None:
        """Called by a write path that will ask :meth:`may_commit` before it commits."""
        self.guarded = True

    def may_commit(self) -> bool:
        """True (and the gate closes behind it) unless the caller gave up or the deadline passed."""
        with self._lock:
            if self._state != RUNNING or self.deadline.expired():
                return False
            self._state = COMMITTING
            return True

    def commit_done(self) -> None:
        """The commit :meth:`may_commit` allowed is over (either way): the gate opens for another."""
        with self._lock:
            self.committed = True
            if self._state == COMMITTING:
                self._state = RUNNING

    def abandon(self) -> str:
        """The caller gives up; returns the state the gate was in (``running`` -> now abandoned)."""
        with self._lock:
            before = self._state
            if before == RUNNING:
                self._state = ABANDONED
                abort, self._abort = self._abort, None
                if abort is not None:  # best effort: the server's own timeout still applies
                    with contextlib.suppress(Exception):
                        abort()
            return before

    def finish(self) -> None:
        with self._lock:
            if self._state in (RUNNING, COMMITTING):
                self._state = FINISHED

    def check(self) -> float:
        """The statement budget in seconds, or :class:`CutOff` when none is left (nothing is sent)."""
        if self._state == ABANDONED:
            raise CutOff(f"{self.label} timed out after {self.deadline.budget_ms} ms; statement not sent")
        budget = self.deadline.statement_budget()
        if budget <= 0:
            ms = self.deadline.budget_ms
            raise CutOff(f"{self.label} timed out: no time left of its {ms} ms; statement not sent")
        return budget


_current: ContextVar[CallScope | None] = ContextVar("memwork_call_scope", default=None)


def current_scope() -> CallScope | None:
    """The scope of the call this thread is running, or None outside a bounded call."""
    return _current.get()


class using_scope:  # lower case: it is used like the function it was
    """Run the body under ``scope`` (the worker pool does this around each call). A class, not a
    generator context manager: it runs on every call (0.3 us instead of 2 us)."""

    __slots__ = ("_token", "scope")

    def __init__(self, scope: CallScope) -> None:
        self.scope = scope

    def __enter__(self) -> CallScope:
        self._token = _current.set(self.scope)
        return self.scope

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)
