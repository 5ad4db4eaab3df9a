"""The facade's self-check (``memwork check health``): write -> compact -> resolve for a throw-away user,
then cleanup.

Runs through the configured facade (so it proves selection, timeouts and fail-open too) and removes
the synthetic user's data from every backend that offers ``purge_user(user_id)``. Called a self-check,
not "health": in memwork health is the defrag health score (:mod:`memwork.defrag.scores`); the CLI
command ``check health`` and its JSON keep their names.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from memwork.facade.facade import MemoryFacade, purge_user_everywhere
from memwork.rollout.roundtrip import Step, answer_items, synthetic_request

#: the self-check's synthetic users
SELFCHECK_USER_PREFIX = "memwork-health-"


@dataclass
class SelfCheckReport:
    """Every step of one self-check run, and what the cleanup purged per backend."""

    userId: str
    checks: list[Step] = field(default_factory=list)
    cleanup: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Step(name, ok, detail))

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


def _round_trip(facade: MemoryFacade, report: SelfCheckReport) -> None:
    for operation in ("write", "compact", "resolve"):
        result = getattr(facade, operation)(synthetic_request(report.userId, operation))
        detail = result.get("reason") or f"source={result.get('source')}"
        report.add(operation, bool(result.get("ok")), detail)
        if operation == "resolve" and result.get("ok") and not result.get("skipped"):
            same = result.get("source") == facade.select("write").name
            found = bool(answer_items(result))
            if same:
                report.add("roundTrip", found, "written memory resolved" if found else "nothing resolved")


def run_selfcheck(
    facade: MemoryFacade,
    *,
    require_enabled: bool = False,
    expect_backend: str | None = None,
    expect_selected_backend: str | None = None,
) -> SelfCheckReport:
    """Check the expectations, run the synthetic round trip, remove the synthetic user."""
    report = SelfCheckReport(userId=f"{SELFCHECK_USER_PREFIX}{uuid.uuid4().hex[:12]}")
    status = facade.status()
    _expectations(facade, report, status, require_enabled, expect_backend, expect_selected_backend)
    if not facade.policy.enabled:  # MEMORY_ENABLED=0: nothing is written, no backend is touched
        _round_trip(facade, report)
        return report
    try:
        _round_trip(facade, report)
    finally:
        report.cleanup = purge_user_everywhere(facade, report.userId)
    return report
