"""The facade's self-check (``memwork check health``): write -> compact -> resolve for a throw-away user,
then cleanup.

Runs through the configured facade (so it proves selection, timeouts and fail-open too) and removes
the synthetic user's data from every backend that offers ``purge_user(user_id)``. Called a self-check,
not "health": in memwork health is the defrag health score (:mod:`memwork.defrag.scores`); the CLI
command ``check health`` and its JSON keep their names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from memwork.backends.base import backend_name
from memwork.facade.facade import MemoryFacade
from memwork.facade.safety import call_with_timeout
from memwork.redaction import describe_error

SYNTHETIC_MESSAGES = [
    {"role": "user", "content": "My name is Health Check. I like synthetic round trips."},
    {"role": "assistant", "content": "Noted."},
]


@dataclass(frozen=True)
class SelfCheckStep:
    """One named expectation or operation of the self-check and how it went."""

    name: str
    ok: bool
    detail: str


@dataclass
class SelfCheckReport:
    """Every step of one self-check run, and what the cleanup purged per backend."""

    userId: str
    checks: list[SelfCheckStep] = field(default_factory=list)
    cleanup: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(SelfCheckStep(name, ok, detail))

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}


def _matches(facade: MemoryFacade, expected: str, actual: str | None) -> bool:
    """``expected`` may be a name or an alias (``legacy`` matches ``legacy-conversation-memory``)."""
    return facade.registry.same(expected, actual)


def _expectations(
    facade: MemoryFacade,
    report: SelfCheckReport,
    status: dict[str, Any],
    require_enabled: bool,
    expect_backend: str | None,
    expect_selected: str | None,
) -> None:
    if require_enabled:
        report.add("enabled", status["enabled"], f"enabled={status['enabled']}")
    if expect_backend is not None:
        ok = status["backend"] == expect_backend or _matches(facade, expect_backend, status["backend"])
        report.add("backend", ok, f"configured backend {status['backend']!r}, expected {expect_backend!r}")
    if expect_selected is not None:
        ok = _matches(facade, expect_selected, status["selectedBackend"])
        detail = f"selected backend {status['selectedBackend']!r}, expected {expect_selected!r}"
        report.add("selectedBackend", ok, detail)


def _round_trip(facade: MemoryFacade, report: SelfCheckReport, session_id: str) -> None:
    request = {"userId": report.userId, "sessionId": session_id}
    for operation, payload in (
        ("write", {**request, "messages": SYNTHETIC_MESSAGES}),
        ("compact", request),
        ("resolve", {**request, "query": "health check", "limit": 5}),
    ):
        result = getattr(facade, operation)(payload)
        detail = result.get("reason") or f"source={result.get('source')}"
        report.add(operation, bool(result.get("ok")), detail)
        if operation == "resolve" and result.get("ok") and not result.get("skipped"):
            same = result.get("source") == facade.select("write").name
            found = bool(result.get("memories") or result.get("semanticMemories"))
            if same:
                report.add("roundTrip", found, "written memory resolved" if found else "nothing resolved")


def purge_user_everywhere(facade: MemoryFacade, user_id: str) -> dict[str, Any]:
    """Remove ``user_id``'s data from every available backend offering ``purge_user``.

    What each backend purged (its own counts), or ``{"error": ...}`` for one that failed; shared by
    the self-check and the service's ``/user-memory/v1/forget`` (synthetic canary users only)."""
    done: dict[str, Any] = {}
    for backend in facade.registry.backends():
        purge: Callable[[str], Any] | None = getattr(backend, "purge_user", None)
        if purge is None or not callable(purge) or not facade.availability(backend).available:
            continue
        try:
            done[backend_name(backend)] = call_with_timeout(
                partial(purge, user_id), facade.policy.timeout_s, "purge_user"
            )
        except Exception as exc:
            done[backend_name(backend)] = {"error": describe_error(exc)}
    return done


def run_selfcheck(
    facade: MemoryFacade,
    *,
    require_enabled: bool = False,
    expect_backend: str | None = None,
    expect_selected_backend: str | None = None,
) -> SelfCheckReport:
    """Check the expectations, run the synthetic round trip, remove the synthetic user."""
    report = SelfCheckReport(userId=f"memwork-health-{uuid.uuid4().hex[:12]}")
    status = facade.status()
    _expectations(facade, report, status, require_enabled, expect_backend, expect_selected_backend)
    if not facade.policy.enabled:  # MEMORY_ENABLED=0: nothing is written, no backend is touched
        _round_trip(facade, report, session_id=f"{report.userId}-session")
        return report
    try:
        _round_trip(facade, report, session_id=f"{report.userId}-session")
    finally:
        report.cleanup = purge_user_everywhere(facade, report.userId)
    return report
