"""MemoryFacade: resolve / write / compact / status over the registry, selected per operation.

Selection is operation-aware: ``resolve`` uses ``MEMORY_BACKEND`` when that backend is available and
supports resolve, else legacy; ``write`` and ``compact`` use ``MEMORY_BACKEND`` when it is available
and supports the operation, else the first available backend that does (legacy is first). Every
backend call runs in a worker thread with a deadline (``MEMORY_BACKEND_TIMEOUT_MS``). With fail-open
(the default) bad input, errors and timeouts give the degraded payload (``ok: false`` and a
``reason``) and a log line; with ``MEMORY_FAIL_OPEN=0`` they raise typed errors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
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
from memwork.errors import BackendError, BackendTimeout, UsageError
from memwork.facade.policy import DEFAULT_BACKEND, Policy, policy_from_env
from memwork.facade.safety import call_with_timeout
from memwork.loggable import loggable_error
from memwork.plugins import Registry
from memwork.redaction import describe_error, redact_text

if TYPE_CHECKING:
    from memwork.legacy.extractor import Extractor

log = logging.getLogger("memwork.facade")

LEGACY = DEFAULT_BACKEND  #: resolve falls back to the default backend (legacy), found by its alias
RESOLVE_KEYS = ("profile", "semanticMemories", "behaviorSummary", "activeGoals", "memories", "policy")
_ENVELOPE = ("ok", "enabled", "skipped", "source", "reason")


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

    def __init__(self, policy: Policy, registry: Registry) -> None:
        self.policy = policy
        self.registry = registry

    # ---- selection -----------------------------------------------------------------------------
    def availability(self, backend: Backend) -> Availability:
        """The backend's availability; a raising or hanging check counts as unavailable."""
        try:
            avail = call_with_timeout(
                lambda: availability_of(backend),
                self.policy.timeout_s,
                f"{backend_name(backend)}.availability",
            )
        except Exception as exc:
            return Availability.no(f"availability check failed: {describe_error(exc)}")
        reason = redact_text(avail.reason) if isinstance(avail.reason, str) else avail.reason
        return Availability(avail.available, reason)

    def _usable(self, backend: Backend, operation: str) -> str | None:
        """None when ``backend`` can serve ``operation``, else why not."""
        if not supports_of(backend)[operation]:
            return f"does not support {operation}"
        avail = self.availability(backend)
        return None if avail.available else f"unavailable ({avail.reason or 'no reason given'})"

    def select(self, operation: str) -> Selection:
        """Operation-aware selection; never an unavailable backend."""
        wanted = self.policy.backend
        preferred = self.registry.find(wanted)
        if preferred is None:
            note = f"MEMORY_BACKEND={wanted!r} is not a registered backend"
        else:
            problem = self._usable(preferred, operation)
            if problem is None:
                return Selection(operation, preferred)
            note = f"MEMORY_BACKEND={wanted!r} {problem}"
        fallback = self._fallback(operation)
        target = "legacy" if operation == "resolve" else f"the first available {operation} backend"
        suffix = f"; using {backend_name(fallback)}" if fallback else f"; no {target} is available"
        return Selection(operation, fallback, note + suffix)

    def _fallback(self, operation: str) -> Backend | None:
        if operation == "resolve":
            legacy = self.registry.find(LEGACY)
            return legacy if legacy is not None and self._usable(legacy, operation) is None else None
        for backend in self.registry.backends():
            if self._usable(backend, operation) is None:
                return backend
        return None

    # ---- operations ----------------------------------------------------------------------------
    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Memory for the current request: ``{ok, enabled, skipped, source, profile, ...}``."""
        return self._run("resolve", request)

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Record memory evidence (legacy: saveAndAnalyze)."""
        return self._run("write", request)

    def compact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Analyze / compact pending memory (legacy: analyzeUser)."""
        return self._run("compact", request)

    def _run(self, operation: str, request: Mapping[str, Any]) -> dict[str, Any]:
        if not self.policy.enabled:
            return self._skipped(operation, "memory disabled (MEMORY_ENABLED=0)")
        if operation == "write" and not self.policy.event_log_enabled:
            return self._skipped(operation, "event log disabled (MEMORY_EVENT_LOG_ENABLED=0)")
        try:
            clean = validate(operation, request)
        except UsageError as exc:
            return self._degrade(operation, None, exc, f"invalid input: {exc}", request=request)
        selection = self.select(operation)
        if selection.backend is None:
            reason = selection.note or f"no available backend supports {operation}"
            return self._degrade(operation, None, BackendError(reason), reason, request=clean)
        return self._call(operation, selection.backend, clean)

    def _call(self, operation: str, backend: Backend, clean: dict[str, Any]) -> dict[str, Any]:
        name = backend_name(backend)
        method = operation_of(backend, operation)
        try:
            result = call_with_timeout(
                lambda: method(dict(clean)), self.policy.timeout_s, f"{name}.{operation}"
            )
            if not isinstance(result, Mapping):
                raise BackendError(f"{name} {operation} returned {type(result).__name__}, not an object")
        except BackendTimeout as exc:
            return self._degrade(operation, name, exc, str(exc), request=clean)
        except UsageError as exc:
            return self._degrade(operation, name, exc, f"invalid input: {exc}", request=clean)
        except Exception as exc:
            reason = f"{name} {operation} failed: {describe_error(exc)}"
            return self._degrade(operation, name, BackendError(reason), reason, cause=exc, request=clean)
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
            "backends": [self.describe_backend(b) for b in self.registry.backends()],
            "configErrors": [
                {"field": e.field, "value": e.value, "problem": e.problem} for e in policy.errors
            ],
            "pluginErrors": [
                {"name": p.name, "origin": p.origin, "problem": redact_text(p.problem)}
                for p in self.registry.problems()
            ],
        }

    def close(self) -> None:
        self.registry.close()


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
) -> MemoryFacade:
    """The facade the environment describes (``os.environ`` by default); never raises on bad config.

    ``extractor`` plugs a callable into the legacy backend (see :mod:`memwork.legacy.extractor`).
    """
    env = dict(os.environ if env is None else env)
    policy = policy_from_env(env)
    if registry is None:
        overrides: dict[str, Backend] = {}
        if extractor is not None:
            from memwork.backends.legacy import from_env as legacy_from_env

            overrides[LEGACY] = legacy_from_env(env, extractor=extractor)
        registry = Registry(env, overrides=overrides)
    return MemoryFacade(policy, registry)
