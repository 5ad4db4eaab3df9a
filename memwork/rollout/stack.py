"""``memwork check stack``: every gate of a deployment in one run, one summary table.

In order: the backend contracts (:func:`memwork.facade.contract.check_all`), the facade's self-check
(:func:`memwork.rollout.selfcheck.run_selfcheck`, through the facade this environment configures), the
app canary against the running service (:func:`memwork.rollout.app_canary.run_app_canary`), then a smoke of
every non-legacy backend straight to the backend
(:func:`memwork.rollout.smoke.run_external_smoke`; one call, resolve when the backend offers
it). A backend that is not configured is reported ``not_configured`` -- dormant is the default, not a
failure. Every gate runs even after one failed; any ``failed`` row fails the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from memwork.backends.base import declaration_of, supports_of
from memwork.facade.contract import check_all
from memwork.facade.facade import facade_from_env
from memwork.facade.policy import DEFAULT_BACKEND
from memwork.plugins import Registry
from memwork.redaction import describe_error
from memwork.rollout.app_canary import TOKEN_ENV, bearer_token, check_base_url, run_app_canary
from memwork.rollout.selfcheck import run_selfcheck
from memwork.rollout.smoke import run_external_smoke

OK, FAILED, NOT_CONFIGURED = "ok", "failed", "not_configured"
#: the operation the smoke calls, in order of preference (resolve reads; the others write)
SMOKE_PREFERENCE = ("resolve", "write", "compact")


@dataclass(frozen=True)
class StackRow:
    """One gate of the stack and its outcome."""

    check: str
    status: str  # ok, failed or not_configured
    detail: str


@dataclass
class StackReport:
    rows: list[StackRow] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.status != FAILED for r in self.rows)

    @property
    def failures(self) -> list[str]:
        return [f"{r.check}: {r.detail}" for r in self.rows if r.status == FAILED]

    def add(self, check: str, status: str, detail: str) -> None:
        self.rows.append(StackRow(check, status, detail))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rows": [asdict(r) for r in self.rows],
            "failures": self.failures,
            "details": self.details,
        }


def _guarded(report: StackReport, check: str, gate: Callable[[], None]) -> None:
    """Run one gate; an exception is that gate failing (one line, redacted), never the whole run."""
    try:
        gate()
    except Exception as exc:
        report.add(check, FAILED, describe_error(exc))


def contracts_gate(report: StackReport, env: Mapping[str, str]) -> None:
    result = check_all(env, adapters=True)
    report.details["contracts"] = result.to_dict()
    detail = f"{len(result.checked)} backends checked, {len(result.violations)} violations"
    if result.violations:
        detail += ": " + "; ".join(str(v) for v in result.violations[:5])
    report.add("contracts", OK if result.ok else FAILED, detail)


def health_gate(
    report: StackReport,
    env: Mapping[str, str],
    require_enabled: bool,
    expect_backend: str | None,
    expect_selected_backend: str | None,
) -> None:
    facade = facade_from_env(dict(env))
    try:
        result = run_selfcheck(
            facade,
            require_enabled=require_enabled,
            expect_backend=expect_backend,
            expect_selected_backend=expect_selected_backend,
        )
    finally:
        facade.close()
    report.details["health"] = result.to_dict()
    failed = [f"{c.name}: {c.detail}" for c in result.checks if not c.ok]
    detail = "; ".join(failed) if failed else f"{len(result.checks)} checks ok"
    report.add("facade health", OK if result.ok else FAILED, detail)


def app_gate(
    report: StackReport,
    base_url: str,
    token: str | None,
    env: Mapping[str, str],
    require_enabled: bool,
    require_target_healthy: bool,
    expect_backend: str | None,
    expect_selected_backend: str | None,
) -> None:
    result = run_app_canary(
        base_url,
        token=token,
        env=env,
        require_enabled=require_enabled,
        require_target_healthy=require_target_healthy,
        expect_backend=expect_backend,
        expect_selected_backend=expect_selected_backend,
    )
    report.details["app"] = result.to_dict()
    detail = "; ".join(result.failures) if result.failures else f"{len(result.steps)} steps ok"
    report.add("app canary", OK if result.ok else FAILED, detail)


def smoke_gates(report: StackReport, env: Mapping[str, str]) -> None:
    """One smoke per non-legacy backend, each in its own row."""
    registry = Registry(dict(env))
    smokes: dict[str, Any] = {}
    try:
        for backend in registry.backends():
            name = declaration_of(backend).name
            if registry.same(name, DEFAULT_BACKEND):
                continue
            supported = supports_of(backend)
            operation = next((op for op in SMOKE_PREFERENCE if supported.get(op)), None)
            if operation is None:
                report.add(f"smoke {name}", FAILED, "implements none of resolve, write, compact")
                continue
            result = run_external_smoke(name, operation, env, registry=registry)
            smokes[name] = result.to_dict()
            detail = result.reason or f"{operation} answered in {result.elapsed_ms:.0f} ms"
            report.add(f"smoke {name}", result.status, detail)
    finally:
        registry.close()
    report.details["smoke"] = smokes


def run_stack(
    base_url: str,
    env: Mapping[str, str],
    *,
    token: str | None = None,
    require_enabled: bool = False,
    require_target_healthy: bool = False,
    expect_backend: str | None = None,
    expect_selected_backend: str | None = None,
) -> StackReport:
    """Contracts, facade health, app canary, smokes: every gate, a row each."""
    check_base_url(base_url)
    bearer_token(env.get(TOKEN_ENV, "") if token is None else token)  # bad input before any gate runs
    report = StackReport()
    _guarded(report, "contracts", lambda: contracts_gate(report, env))
    _guarded(
        report,
        "facade health",
        lambda: health_gate(report, env, require_enabled, expect_backend, expect_selected_backend),
    )
    _guarded(
        report,
        "app canary",
        lambda: app_gate(
            report,
            base_url,
            token,
            env,
            require_enabled,
            require_target_healthy,
            expect_backend,
            expect_selected_backend,
        ),
    )
    _guarded(report, "smoke", lambda: smoke_gates(report, env))
    return report
