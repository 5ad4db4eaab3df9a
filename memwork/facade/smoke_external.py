"""``memwork smoke external``: one synthetic call of one operation on one backend, straight to the backend.

Unlike the facade (which fails open and would hide a broken backend behind legacy), the smoke calls the
backend itself, within the facade's deadline, and says exactly what happened:

* ``not_configured`` -- the backend's flag or a required variable is missing (exit 0: a dormant backend
  is the default, not a failure); the reason names what to set;
* ``failed`` -- configured, but unavailable (an invalid value, an unloadable embedding module) or the
  call raised, timed out, returned something that is not an object, or returned a memory of another
  user (exit 1, with the redacted reason);
* ``ok`` -- the call answered; for resolve, how many memories came back.

The synthetic user is ``memory-v2-smoke-<hex>``; a backend that offers ``purge_user`` is asked to remove
it afterwards. An operation the backend does not implement is bad input (exit 2).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memwork.backends.base import (
    OPERATIONS,
    availability_of,
    configuration_problems,
    declaration_of,
    operation_of,
    reason_of,
    supports_of,
)
from memwork.errors import UsageError
from memwork.facade.policy import policy_from_env
from memwork.facade.safety import call_with_timeout
from memwork.plugins import Registry
from memwork.redaction import describe_error, redact_text

SMOKE_USER_PREFIX = "memory-v2-smoke-"
STATUSES = ("ok", "not_configured", "failed")
_MEMORY_KEYS = ("semanticMemories", "memories")


@dataclass
class ExternalSmokeReport:
    """What one smoke call did; ``ok`` is False only for ``failed``."""

    backend: str
    operation: str
    status: str
    reason: str | None = None
    elapsed_ms: float = 0.0
    user_id: str = ""
    returned: dict[str, int] = field(default_factory=dict)
    cleanup: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "operation": self.operation,
            "status": self.status,
            "ok": self.ok,
            "reason": self.reason,
            "elapsedMs": self.elapsed_ms,
            "userId": self.user_id,
            "returned": self.returned,
            "cleanup": self.cleanup,
        }


def synthetic_request(user_id: str) -> dict[str, Any]:
    """The smoke's request: a throw-away user, one short exchange, a small limit."""
    return {
        "userId": user_id,
        "sessionId": f"{user_id}-session",
        "query": "memory v2 smoke: what does the synthetic user like?",
        "limit": 3,
        "messages": [
            {"role": "user", "content": "Memory V2 smoke test: I like synthetic round trips."},
            {"role": "assistant", "content": "Noted."},
        ],
    }


def run_external_smoke(
    backend: str,
    operation: str,
    env: Mapping[str, str] | None = None,
    *,
    registry: Registry | None = None,
) -> ExternalSmokeReport:
    """Smoke ``operation`` on ``backend`` as the environment configures it (``os.environ`` by default).

    Raises UsageError for an unknown backend or an operation it does not implement.
    """
    env = dict(os.environ if env is None else env)
    if operation not in OPERATIONS:
        raise UsageError("operation", operation, f"must be one of {', '.join(OPERATIONS)}")
    registry = registry or Registry(env)
    target = registry.get(backend)
    decl = declaration_of(target)
    if not supports_of(target)[operation]:
        offered = ", ".join(op for op, yes in supports_of(target).items() if yes) or "nothing"
        raise UsageError("operation", operation, f"{decl.name} does not support it (it supports {offered})")
    report = ExternalSmokeReport(decl.name, operation, "ok")
    problems = configuration_problems(decl, env)
    if problems:
        report.status, report.reason = "not_configured", reason_of(problems)
        return report
    timeout_s = policy_from_env(env).timeout_s
    try:
        avail = call_with_timeout(lambda: availability_of(target), timeout_s, f"{decl.name}.availability")
    except Exception as exc:
        return _failed(report, f"availability check failed: {describe_error(exc)}")
    if not avail.available:
        return _failed(report, f"configured but unavailable: {avail.reason or 'no reason given'}")
    report.user_id = f"{SMOKE_USER_PREFIX}{uuid.uuid4().hex[:12]}"
    method = operation_of(target, operation)
    request = synthetic_request(report.user_id)
    started = time.perf_counter()
    try:
        result = call_with_timeout(lambda: method(dict(request)), timeout_s, f"{decl.name}.{operation}")
    except Exception as exc:
        report.elapsed_ms = _ms(started)
        return _failed(report, describe_error(exc))
    report.elapsed_ms = _ms(started)
    if not isinstance(result, Mapping):
        return _failed(report, f"{operation} returned {type(result).__name__}, not an object")
    report.returned = _counts(result)
    foreign = _foreign_items(result, report.user_id)
    if foreign:
        return _failed(report, f"{operation} returned {foreign} memory item(s) of another user")
    report.cleanup = _purge(target, report.user_id, timeout_s)
    return report


def _failed(report: ExternalSmokeReport, reason: str) -> ExternalSmokeReport:
    report.status, report.reason = "failed", redact_text(reason)
    return report


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _counts(result: Mapping[str, Any]) -> dict[str, int]:
    return {key: len(value) for key, value in result.items() if isinstance(value, list)}


def _foreign_items(result: Mapping[str, Any], user_id: str) -> int:
    items = [item for key in _MEMORY_KEYS for item in result.get(key) or [] if isinstance(item, Mapping)]
    return sum(1 for item in items if "userId" in item and item["userId"] != user_id)


def _purge(target: object, user_id: str, timeout_s: float) -> str | None:
    purge = getattr(target, "purge_user", None)
    if not callable(purge):
        return None
    try:
        call_with_timeout(lambda: purge(user_id), timeout_s, "purge_user")
    except Exception as exc:
        return f"cleanup failed: {describe_error(exc)}"
    return "purged"
