"""MemoryFacade: resolve / write / compact / status over the registry, selected per operation.

Selection is operation-aware: ``resolve`` uses ``MEMORY_BACKEND`` when that backend is available and
supports resolve, else legacy; ``write`` and ``compact`` use ``MEMORY_BACKEND`` when it is available
and supports the operation, else the first available backend that does (legacy is first). With
fail-open (the default) bad input, errors and timeouts give the degraded payload (``ok: false`` and a
``reason``) and a log line; with ``MEMORY_FAIL_OPEN=0`` they raise typed errors.

Deadlines: each operation -- selection (availability checks) and the backend call together -- is one
job on the facade's fixed :class:`~memwork.facade.safety.WorkerPool`, under a deadline of
``MEMORY_BACKEND_TIMEOUT_MS`` (the service passes one that runs from the request's arrival). A job
that cannot get a worker before its deadline is shed (``shed: true``), and a job still running at
the deadline is answered degraded at once; no thread is started per call.

Inline resolve: :meth:`MemoryFacade.resolve` (the blocking call; not :meth:`~MemoryFacade.begin`, which
the service awaits on its event loop) runs on the caller's own thread when the selected backend says
that every wait of this request is bounded by the call's deadline (``deadline_inline(request)``:
pgvector with an embedding given -- pool wait, ``statement_timeout``, and its socket shut down by the
process-wide :class:`~memwork.facade.safety.Watchdog` at the deadline; legacy on MariaDB/MySQL once its
read path holds a connection -- ``max_statement_time`` and the same watchdog, see
:mod:`memwork.legacy.reader`). That saves the hand-off to a worker and back, which cost more than the
query itself; the answer is still fail-open by the deadline.

Writes (and compactions) say what happened in ``status``: ``stored`` (committed), ``failed``
(nothing stored: bad input, shed, rolled back, or cut off at the deadline by the commit gate of
:mod:`memwork.deadline`), or ``pending`` (``ok: false``; not known at the deadline -- it may still
land). A retried legacy write never duplicates its messages (see :mod:`memwork.legacy.store`), so
retrying after ``failed`` or ``pending`` is safe.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwork.backends.base import (
    OPERATIONS,
    Availability,
    Backend,
    availability_of,
    backend_name,
    declaration_of,
    operation_of,
    supports_of,
)
from memwork.backends.requests import validate
from memwork.deadline import CallScope, Deadline, current_scope, using_scope
from memwork.errors import BackendError, BackendTimeout, CutOff, NotStored, Shed, UsageError
from memwork.facade.policy import DEFAULT_BACKEND, Policy, policy_from_env
from memwork.facade.safety import (
    CUT_OFF,
    DONE,
    SHED,
    TIMED_OUT,
    Call,
    WorkerPool,
    call_with_timeout,
    watchdog,
)
from memwork.loggable import loggable_error
from memwork.plugins import Registry
from memwork.redaction import describe_error, redact_text

if TYPE_CHECKING:
    from memwork.legacy.extractor import Extractor

log = logging.getLogger("memwork.facade")

LEGACY = DEFAULT_BACKEND  #: resolve falls back to the default backend (legacy), found by its alias
RESOLVE_KEYS = ("profile", "semanticMemories", "behaviorSummary", "activeGoals", "memories", "policy")
_ENVELOPE = ("ok", "enabled", "skipped", "source", "reason", "status", "shed")
DEFAULT_WORKERS = 16  #: threads of a facade's own pool (the service sizes its own: MEMWORK_SERVICE_THREADS)
#: operations whose answer carries ``status`` (stored / failed / pending): they change stored data
CHANGING = frozenset({"write", "compact"})
# a write's status in its answer, and the final outcomes the service counts
STORED, FAILED, PENDING = "stored", "failed", "pending"
FINAL_STORED, FINAL_NOT_STORED, FINAL_UNKNOWN = "stored", "notStored", "unknown"


def empty_resolve() -> dict[str, Any]:
    """The empty resolve body (fresh lists every time)."""
    return {
        "profile": None,
        "semanticMemories": [],
        "behaviorSummary": None,
        "activeGoals": [],
        "memories": [],
        "policy": None,
    }


@dataclass(frozen=True)
class Selection:
    """The backend chosen for one operation, and why a fallback happened (``note``)."""

    operation: str
    backend: Backend | None
    note: str | None = None

    @property
    def name(self) -> str | None:
        return None if self.backend is None else backend_name(self.backend)


class MemoryFacade:
    """The unified memory API. Construct with :func:`facade_from_env` or from a policy and registry."""

    def __init__(self, policy: Policy, registry: Registry, *, pool: WorkerPool | None = None) -> None:
        self.policy = policy
        self.registry = registry
        self._owns_pool = pool is None
        #: every backend call runs here; the service hands in a pool of MEMWORK_SERVICE_THREADS
        self.pool = pool if pool is not None else WorkerPool(DEFAULT_WORKERS, name="memwork-facade")
        #: resolves run on the caller's thread (see the module doc): how many, and how many of them
        #: the watchdog gave up on at their deadline
        self.inline = {"calls": 0, "timedOut": 0}
        self._inline_lock = threading.Lock()
        self._inline_cached: tuple[Backend, Callable[[Mapping[str, Any]], bool] | None] | None = None

    # ---- selection -----------------------------------------------------------------------------
    def availability(self, backend: Backend) -> Availability:
        """The backend's availability; a raising or hanging check is unavailable. Checked on the shared
        pool, not the requests' (status pages and shadow reads are never shed by the requests' load)."""
        try:
            return call_with_timeout(
                lambda: self._availability_here(backend),
                self.policy.timeout_s,
                f"{backend_name(backend)}.availability",
            )
        except Exception as exc:
            return Availability.no(f"availability check failed: {describe_error(exc)}")

    @staticmethod
    def _availability_here(backend: Backend) -> Availability:
        """The check on this thread (a pool worker: the job's deadline bounds it), reason redacted."""
        try:
            avail = availability_of(backend)
        except Exception as exc:
            return Availability.no(f"availability check failed: {describe_error(exc)}")
        reason = redact_text(avail.reason) if isinstance(avail.reason, str) else avail.reason
        return Availability(avail.available, reason)

    def _usable(self, backend: Backend, operation: str, here: bool) -> str | None:
        """None when ``backend`` can serve ``operation``, else why not."""
        if not supports_of(backend)[operation]:
            return f"does not support {operation}"
        avail = self._availability_here(backend) if here else self.availability(backend)
        return None if avail.available else f"unavailable ({avail.reason or 'no reason given'})"

    def select(self, operation: str, *, here: bool = False) -> Selection:
        """Operation-aware selection; never an unavailable backend.

        ``here``: check availability on this thread -- for a job already running on a pool worker,
        which must not queue nested jobs behind itself."""
        wanted = self.policy.backend
        preferred = self.registry.find(wanted)
        if preferred is None:
            note = f"MEMORY_BACKEND={wanted!r} is not a registered backend"
        else:
            problem = self._usable(preferred, operation, here)
            if problem is None:
                return Selection(operation, preferred)
            note = f"MEMORY_BACKEND={wanted!r} {problem}"
        fallback = self._fallback(operation, here)
        target = "legacy" if operation == "resolve" else f"the first available {operation} backend"
        suffix = f"; using {backend_name(fallback)}" if fallback else f"; no {target} is available"
        return Selection(operation, fallback, note + suffix)

    def _fallback(self, operation: str, here: bool) -> Backend | None:
        if operation == "resolve":
            legacy = self.registry.find(LEGACY)
            usable = legacy is not None and self._usable(legacy, operation, here) is None
            return legacy if usable else None
        for backend in self.registry.backends():
            if self._usable(backend, operation, here) is None:
                return backend
        return None

    # ---- operations ----------------------------------------------------------------------------
    def resolve(self, request: Mapping[str, Any], *, deadline: Deadline | None = None) -> dict[str, Any]:
        """Memory for the current request: ``{ok, enabled, skipped, source, profile, ...}``."""
        if deadline is None:
            deadline = Deadline.after(self.policy.timeout_s)
        inline = self._inline_resolve(request, deadline)
        if inline is not None:
            return inline
        return self.begin("resolve", request, deadline).answer_when_due()

    def _inline_resolve(self, request: Mapping[str, Any], deadline: Deadline) -> dict[str, Any] | None:
        """The resolve on this thread when the preferred backend bounds every wait of ``request`` by
        the deadline (``deadline_inline``); None to take the worker pool (anything else)."""
        if not self.policy.enabled:
            return None
        backend = self.registry.find(self.policy.backend)
        if backend is None:
            return None
        inline = self._inline_check(backend)
        if inline is None:
            return None
        try:
            clean = validate("resolve", request)
            if not inline(clean) or not self._availability_here(backend).available:
                return None
        except Exception:  # bad input, a raising check: the pool path answers it as ever
            return None
        name = backend_name(backend)
        scope = CallScope(deadline, f"{name}.resolve")
        scope.source = name
        scope.enter()
        watchdog().watch(scope)
        try:
            with using_scope(scope):
                return self._call("resolve", backend, clean, name)
        finally:
            scope.finish()
            with self._inline_lock:
                self.inline["calls"] += 1
                self.inline["timedOut"] += scope.timed_out

    def _inline_check(self, backend: Backend) -> Callable[[Mapping[str, Any]], bool] | None:
        """The backend's ``deadline_inline`` when it has one and supports resolve (remembered for the
        last backend asked: this runs on every resolve)."""
        cached = self._inline_cached
        if cached is not None and cached[0] is backend:
            return cached[1]
        inline = getattr(backend, "deadline_inline", None)
        usable = inline if callable(inline) and supports_of(backend)["resolve"] else None
        self._inline_cached = (backend, usable)
        return usable

    def write(self, request: Mapping[str, Any], *, deadline: Deadline | None = None) -> dict[str, Any]:
        """Record memory evidence (legacy: saveAndAnalyze); ``status`` says whether it is stored."""
        return self.begin("write", request, deadline).answer_when_due()

    def compact(self, request: Mapping[str, Any], *, deadline: Deadline | None = None) -> dict[str, Any]:
        """Analyze / compact pending memory (legacy: analyzeUser)."""
        return self.begin("compact", request, deadline).answer_when_due()

    def begin(
        self,
        operation: str,
        request: Mapping[str, Any],
        deadline: Deadline | None = None,
        *,
        overloaded: str | None = None,
    ) -> FacadeCall:
        """Start ``operation`` on a pool worker and return at once (the service awaits it on its
        event loop). ``deadline`` defaults to ``MEMORY_BACKEND_TIMEOUT_MS`` from now. Skipped, bad or
        shed requests are answered here -- ``overloaded`` (the caller's reason) sheds it without a
        worker; fail-closed, their errors are raised here."""
        if deadline is None:
            deadline = Deadline.after(self.policy.timeout_s)
        if not self.policy.enabled:
            return FacadeCall(self, operation, self._skipped(operation, "memory disabled (MEMORY_ENABLED=0)"))
        if operation == "write" and not self.policy.event_log_enabled:
            reason = "event log disabled (MEMORY_EVENT_LOG_ENABLED=0)"
            return FacadeCall(self, operation, self._skipped(operation, reason))
        try:
            clean = validate(operation, request)
        except UsageError as exc:
            return FacadeCall(
                self, operation, self._degrade(operation, None, exc, f"invalid input: {exc}", request=request)
            )
        try:
            if overloaded is not None:
                raise Shed(f"{operation} shed: {overloaded} (deadline {deadline.budget_ms} ms)")
            call = self.pool.submit(lambda: self._select_and_call(operation, clean), deadline, operation)
        except Shed as exc:
            return FacadeCall(self, operation, self._degrade(operation, None, exc, str(exc), request=clean))
        return FacadeCall(self, operation, call)

    def _select_and_call(self, operation: str, clean: dict[str, Any]) -> dict[str, Any]:
        """The job on the worker: selection, then the backend call (its payload, ok or degraded)."""
        selection = self.select(operation, here=True)
        if selection.backend is None:
            reason = selection.note or f"no available backend supports {operation}"
            error = NotStored(reason) if operation in CHANGING else BackendError(reason)
            return self._degrade(operation, None, error, reason, request=clean)
        scope = current_scope()
        if scope is not None:
            scope.source = selection.name
            scope.label = f"{selection.name}.{operation}"
            if getattr(selection.backend, "commit_gate", False):
                scope.guard_commits()  # it asks the gate before committing: cut off means not stored
            if not scope.enter():  # the caller gave up during selection: the backend is never called
                ms = scope.deadline.budget_ms
                error = CutOff(f"{scope.label} timed out after {ms} ms before the backend was called")
                return self._degrade(operation, selection.name, error, str(error), request=clean)
        return self._call(operation, selection.backend, clean)

    def _call(
        self, operation: str, backend: Backend, clean: dict[str, Any], name: str | None = None
    ) -> dict[str, Any]:
        """The backend call on this thread (a pool worker, bounded by the job's deadline); ``name``:
        the backend's, when the caller has it already."""
        if name is None:
            name = backend_name(backend)
        method = operation_of(backend, operation)
        try:
            result = method(dict(clean))
            if type(result) is not dict and not isinstance(result, Mapping):  # dict: the usual, fast
                raise BackendError(f"{name} {operation} returned {type(result).__name__}, not an object")
        except BackendTimeout as exc:
            scope = current_scope()
            if scope is not None:
                scope.timed_out = True
            return self._degrade(operation, name, exc, str(exc), request=clean)
        except UsageError as exc:
            return self._degrade(operation, name, exc, f"invalid input: {exc}", request=clean)
        except Exception as exc:
            reason = f"{name} {operation} failed: {describe_error(exc)}"
            error = NotStored(reason) if isinstance(exc, NotStored) else BackendError(reason)
            return self._degrade(operation, name, error, reason, cause=exc, request=clean)
        return self._ok(operation, name, result)

    # ---- payloads ------------------------------------------------------------------------------
    def _ok(self, operation: str, name: str, result: Mapping[str, Any]) -> dict[str, Any]:
        payload: dict[str, Any] = {"ok": True, "enabled": True, "skipped": False, "source": name}
        if operation == "resolve":
            payload.update(empty_resolve())
            payload.update({k: result[k] for k in RESOLVE_KEYS if result.get(k) is not None})
            if not self.policy.profile_enabled:
                payload["profile"] = None
        else:
            payload.update({k: v for k, v in result.items() if k not in _ENVELOPE})
            payload["status"] = STORED
        return payload

    def _skipped(self, operation: str, reason: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "ok": True,
            "enabled": self.policy.enabled,
            "skipped": True,
            "source": None,
            "reason": reason,
        }
        return {**payload, **empty_resolve()} if operation == "resolve" else payload

    def _degrade(
        self,
        operation: str,
        source: str | None,
        error: Exception,
        reason: str,
        *,
        cause: BaseException | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Fail-open: log and return the degraded payload. Fail-closed: raise ``error``.

        The log line holds the loggable form of the error (a code, no value of ``request``, no
        response body); the payload's ``reason`` is the caller's own, in full."""
        logged = loggable_error(cause or reason, request).line()
        log.warning("memory %s degraded (source=%s): %s", operation, source, logged)
        if not self.policy.fail_open:
            raise error from cause
        payload: dict[str, Any] = {"ok": False, "enabled": True, "skipped": False, "source": source}
        if operation == "resolve":
            payload.update(empty_resolve())
        payload["reason"] = reason
        if operation in CHANGING:
            payload["status"] = FAILED if isinstance(error, NotStored | UsageError) else PENDING
        if isinstance(error, Shed):
            payload["shed"] = True
        if isinstance(error, UsageError):
            payload["field"] = error.field
        return payload

    # ---- observability -------------------------------------------------------------------------
    def describe_backend(self, backend: Backend) -> dict[str, Any]:
        """One row of ``status()["backends"]``, from the backend's declaration and availability."""
        avail = self.availability(backend)
        decl = declaration_of(backend)
        return {
            "name": backend_name(backend),
            "category": decl.category,
            "role": decl.role,
            "flag": decl.flag,
            "available": avail.available,
            "reason": avail.reason,
            "supports": supports_of(backend),
            "origin": self.registry.origin(backend_name(backend)),
            **_counters(backend),
        }

    def status(self) -> dict[str, Any]:
        """The read-only status payload (no secret in it), plus selections and config errors."""
        selections = {op: self.select(op) for op in OPERATIONS}
        policy = self.policy
        return {
            "enabled": policy.enabled,
            "backend": policy.backend,
            "selectedBackend": selections["resolve"].name,
            "selectedBackends": {op: sel.name for op, sel in selections.items()},
            "fallbacks": {op: sel.note for op, sel in selections.items() if sel.note},
            "profileEnabled": policy.profile_enabled,
            "eventLogEnabled": policy.event_log_enabled,
            "vectorEnabled": policy.vector_enabled,
            "failOpen": policy.fail_open,
            "timeoutMs": policy.timeout_ms,
            "workers": {**self.pool.stats(), "inline": self.inline_stats(), "watchdog": watchdog().stats()},
            "backends": [self.describe_backend(b) for b in self.registry.backends()],
            "configErrors": [
                {"field": e.field, "value": e.value, "problem": e.problem} for e in policy.errors
            ],
            "pluginErrors": [
                {"name": p.name, "origin": p.origin, "problem": redact_text(p.problem)}
                for p in self.registry.problems()
            ],
        }

    def inline_stats(self) -> dict[str, int]:
        with self._inline_lock:
            return dict(self.inline)

    def close(self) -> None:
        self.registry.close()
        if self._owns_pool:
            self.pool.close()


def _counters(backend: Backend) -> dict[str, Any]:
    """A backend's own running counters (the pgvector mixed-model guard's), when it keeps any."""
    counters = getattr(backend, "counters", None)
    return {"counters": counters()} if callable(counters) else {}


class FacadeCall:
    """One facade operation: answered at once (skipped, bad input, shed) or running on a worker.

    :meth:`answer` gives the payload -- the job's own when it is done, else the degraded payload of
    how it ended at the deadline (shed, cut off, or timed out). :meth:`on_final` reports a write's
    final outcome (stored / notStored / unknown) once it is known, which may be after the answer."""

    def __init__(self, facade: MemoryFacade, operation: str, ready: dict[str, Any] | Call[Any]) -> None:
        self.facade = facade
        self.operation = operation
        self.call: Call[Any] | None = ready if isinstance(ready, Call) else None
        self.payload: dict[str, Any] | None = None if isinstance(ready, Call) else ready
        #: how the answer came about: done, shed, cut-off or timed-out (None until answered)
        self.ended: str | None = None
        if self.payload is not None:
            self.ended = SHED if self.payload.get("shed") else DONE

    @property
    def deadline(self) -> Deadline | None:
        return None if self.call is None else self.call.scope.deadline

    def done(self) -> bool:
        return self.call is None or self.call.done()

    def answer_when_due(self) -> dict[str, Any]:
        """Block until the job is done or its deadline passed, then :meth:`answer`."""
        if self.call is not None:
            self.call.wait(max(0.0, self.call.scope.deadline.remaining()))
        return self.answer()

    def answer(self) -> dict[str, Any]:
        """The payload now (never waits); fail-closed, the error instead."""
        if self.payload is not None:
            return self.payload
        call = self.call
        assert call is not None  # no payload yet: a job is running
        verdict = call.give_up() if not call.done() else call.state
        facade, operation, scope = self.facade, self.operation, call.scope
        if verdict == DONE:
            if scope.timed_out:  # the job ended itself at the deadline (the server cancelled it)
                verdict = CUT_OFF if isinstance(call.error, NotStored) or _failed(call.result) else TIMED_OUT
            if call.error is not None:
                self.ended = verdict
                raise call.error  # fail-closed: the job's typed error
            payload: dict[str, Any] = call.result or {}
        elif verdict == SHED:
            shed = call.error if isinstance(call.error, Shed) else Shed(f"{scope.label} shed")
            payload = facade._degrade(operation, None, shed, str(shed))
        else:
            what = f"{scope.label} timed out after {scope.deadline.budget_ms} ms"
            error: BackendTimeout = (
                CutOff(f"{what}; nothing stored" if operation in CHANGING else what)
                if verdict == CUT_OFF
                else BackendTimeout(what)
            )
            payload = facade._degrade(operation, scope.source, error, str(error))
        self.payload, self.ended = payload, verdict
        return payload

    def on_final(self, callback: Callable[[str], None]) -> None:
        """``callback(outcome)`` once the final outcome of this write or compaction is known:
        ``stored``, ``notStored`` or ``unknown`` (a backend that could not tell)."""
        if self.call is None:
            assert self.payload is not None
            callback(_final_of_payload(self.payload))
            return
        self.call.add_done_callback(lambda call: callback(_final_of_call(call)))


def _failed(payload: Any) -> bool:
    return isinstance(payload, Mapping) and payload.get("status") == FAILED


def _final_of_payload(payload: Mapping[str, Any]) -> str:
    if payload.get("ok") and not payload.get("skipped"):
        return FINAL_STORED
    if payload.get("ok") or payload.get("status") == FAILED:
        return FINAL_NOT_STORED
    return FINAL_UNKNOWN


def _final_of_call(call: Call[Any]) -> str:
    """How a finished (or shed) job ended for its data, whatever its caller was told."""
    if call.error is not None:
        return FINAL_NOT_STORED if isinstance(call.error, NotStored | UsageError) else FINAL_UNKNOWN
    return _final_of_payload(call.result or {})


#: The status payload's one-value fields, in the order ``memwork status`` prints them.
STATUS_SCALAR_KEYS = (
    "enabled",
    "backend",
    "selectedBackend",
    "profileEnabled",
    "eventLogEnabled",
    "vectorEnabled",
    "failOpen",
    "timeoutMs",
)


def facade_from_env(
    env: Mapping[str, str] | None = None,
    *,
    extractor: Extractor | None = None,
    registry: Registry | None = None,
    pool: WorkerPool | None = None,
) -> MemoryFacade:
    """The facade the environment describes (``os.environ`` by default); never raises on bad config.

    ``extractor`` plugs a callable into the legacy backend (see :mod:`memwork.legacy.extractor`);
    ``pool`` runs its backend calls (default: its own pool of :data:`DEFAULT_WORKERS` threads).
    """
    env = dict(os.environ if env is None else env)
    policy = policy_from_env(env)
    if registry is None:
        overrides: dict[str, Backend] = {}
        if extractor is not None:
            from memwork.backends.legacy import from_env as legacy_from_env

            overrides[LEGACY] = legacy_from_env(env, extractor=extractor)
        registry = Registry(env, overrides=overrides)
    return MemoryFacade(policy, registry, pool=pool)


def purge_user_everywhere(facade: MemoryFacade, user_id: str) -> dict[str, Any]:
    """Remove ``user_id``'s data from every available backend offering ``purge_user``.

    What each backend purged (its own counts), or ``{"error": ...}`` for one that failed; shared by
    the rollout's self-check and the service's ``/user-memory/v1/forget`` (synthetic canary users
    only)."""
    done: dict[str, Any] = {}
    for backend in facade.registry.backends():
        purge: Callable[[str], Any] | None = getattr(backend, "purge_user", None)
        if purge is None or not callable(purge) or not facade.availability(backend).available:
            continue
        try:
            done[backend_name(backend)] = call_with_timeout(
                functools.partial(purge, user_id), facade.policy.timeout_s, "purge_user"
            )
        except Exception as exc:
            done[backend_name(backend)] = {"error": describe_error(exc)}
    return done
