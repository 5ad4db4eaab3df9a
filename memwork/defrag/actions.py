"""``run_action``: the ten defrag actions against a store (plan, then preview or apply).

An applied run holds the store's run lock (:meth:`~memwork.stores.base.Store.run_lock`, per store and
scope) from loading the entries to the last write, so two runs never interleave: a second run waits
(at most ``lock_timeout`` seconds, then :class:`~memwork.stores.base.StoreLocked`) and then plans on
what the first one left. A conflict with another writer stops the run with :class:`RunStopped`,
which says what was applied (per step) and that ``memwork defrag undo RUN_ID`` reverts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memwork.defrag import findings
from memwork.defrag.apply import Change, PlanConflict, compute_changes, execute
from memwork.defrag.journal import Journal
from memwork.defrag.memory import MemoryStore
from memwork.defrag.params import READ_ONLY, normalize_action, validate_params
from memwork.defrag.plan import Plan
from memwork.defrag.planners import (
    Planned,
    plan_cleanup_stubs,
    plan_compact,
    plan_link_related,
    plan_merge_duplicates,
)
from memwork.defrag.review import read_approved_pairs
from memwork.defrag.scores import health
from memwork.embed import Embedder, load_embedder
from memwork.entry import Entry, as_utc, utcnow, validate_scope
from memwork.errors import UsageError
from memwork.stores.base import DEFAULT_RUN_LOCK_TIMEOUT, Store
from memwork.stores.progress import Progress, track


@dataclass
class ActionResult:
    """What an action found, planned or did; :meth:`to_dict` is the ``--json`` output."""

    action: str
    params: dict[str, Any]
    scope: str | None
    store: str
    applied: bool = False
    run_id: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    pairs: list[findings.Pair] = field(default_factory=list)
    entries: list[findings.EntryReport] = field(default_factory=list)
    skipped: list[findings.EntryReport] = field(default_factory=list)
    plan: Plan | None = None
    changes: list[Change] = field(default_factory=list)

    @property
    def modifies(self) -> bool:
        return self.plan is not None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "action": self.action,
            "store": self.store,
            "scope": self.scope,
            "params": self.params,
            "dry_run": self.modifies and not self.applied,
            "applied": self.applied,
            "run_id": self.run_id,
            "summary": self.summary,
        }
        if self.pairs or self.action in (
            "find_duplicates",
            "find_related",
            "link_related",
            "merge_duplicates",
        ):
            data["pairs"] = [p.to_dict() for p in self.pairs]
        if self.entries or self.action in (
            "find_low_quality",
            "find_archival_candidates",
            "cleanup_stubs",
            "compact",
        ):
            data["entries"] = [e.to_dict() for e in self.entries]
        if self.skipped:
            data["skipped"] = [e.to_dict() for e in self.skipped]
        if self.plan is not None:
            data["operations"] = self.plan.to_dict()
            data["changes"] = [c.to_dict() for c in self.changes]
        return data


class RunStopped(PlanConflict):
    """An applied run stopped on a conflict; it says what was already written and how to undo it."""

    def __init__(self, conflict: PlanConflict, *, action: str, run_id: str, steps: list[dict[str, Any]]):
        self.action, self.run_id, self.steps = action, run_id, steps
        self.changes_applied = sum(step["changes"] for step in steps)
        super().__init__(
            conflict.path,
            conflict.scope,
            conflict.problem,
            applied=conflict.applied,
            planned=conflict.planned,
            detail=self._detail(),
        )

    def _detail(self) -> str:
        if not self.changes_applied:
            return f"nothing was written (run {self.run_id}); run the action again"
        done = ", ".join(
            f"{s['action']} {s['changes']}" + (f" of {s['planned']}" if s["status"] != "applied" else "")
            for s in self.steps
            if s["status"] != "not run"
        )
        return (
            f"the run stopped after applying {self.changes_applied} changes ({done}); they are journaled "
            f"and `memwork defrag undo {self.run_id}` (same --store) reverts them"
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` answer of a stopped run."""
        return {
            "action": self.action,
            "applied": self.changes_applied > 0,
            "complete": False,
            "run_id": self.run_id,
            "error": str(self),
            "conflict": {"path": self.path, "scope": self.scope, "problem": self.problem},
            "changes_applied": self.changes_applied,
            "steps": self.steps,
            "undo": f"memwork defrag undo {self.run_id}" if self.changes_applied else None,
        }


def _stopped_step(action: str, conflict: PlanConflict) -> dict[str, Any]:
    return {
        "action": action,
        "status": "stopped",
        "changes": len(conflict.applied),
        "planned": conflict.planned,
        "conflict": conflict.path,
    }


def _lock_timeout(value: float | None) -> float:
    if value is None:
        return DEFAULT_RUN_LOCK_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise UsageError("lock_timeout", value, "must be a number of seconds >= 0")
    return float(value)


def _change_summary(changes: list[Change]) -> dict[str, int]:
    size_before = sum(c.before.size for c in changes if c.before is not None)
    size_after = sum(c.after.size for c in changes if c.after is not None)
    kinds = [c.kind for c in changes]
    return {
        "entries_updated": kinds.count("update"),
        "entries_created": kinds.count("create"),
        "entries_deleted": kinds.count("delete"),
        "bytes_freed": size_before - size_after,
    }


def _plan_for(
    action: str,
    entries: list[Entry],
    params: dict[str, Any],
    approved: list[tuple[str, str, str]] | None,
    now: datetime,
    progress: Progress | None,
) -> Planned:
    if action == "merge_duplicates":
        return plan_merge_duplicates(
            entries, params["similarity_threshold"], params["strategy"], approved=approved, progress=progress
        )
    if action == "link_related":
        return plan_link_related(
            entries, params["min_similarity"], params["max_similarity"], progress=progress
        )
    if action == "cleanup_stubs":
        return plan_cleanup_stubs(entries, params["age_days"], params["max_hits"], now=now)
    if action == "compact":
        return plan_compact(
            entries, params["min_quality_score"], params["min_age_days"], params["max_hits"], now=now
        )
    raise AssertionError(action)  # pragma: no cover


def _read_only(
    result: ActionResult,
    entries: list[Entry],
    params: dict[str, Any],
    now: datetime,
    progress: Progress | None,
) -> None:
    action = result.action
    if action == "analyze":
        result.summary = findings.analyze(entries)
    elif action == "find_duplicates":
        result.pairs = findings.find_duplicates(entries, params["similarity_threshold"], progress=progress)
        result.summary = {"pairs": len(result.pairs)}
    elif action == "find_related":
        result.pairs = findings.find_related(
            entries, params["min_similarity"], params["max_similarity"], progress=progress
        )
        status = [p.link_status for p in result.pairs]
        result.summary = {"pairs": len(status)} | {
            s: status.count(s) for s in ("unlinked", "one-way", "bidirectional")
        }
    elif action == "find_low_quality":
        result.entries = findings.find_low_quality(entries, params["confidence_filter"], now=now)
        result.summary = {"entries": len(result.entries)}
    elif action == "find_archival_candidates":
        result.entries = findings.find_archival_candidates(entries, params["age_days"], now=now)
        result.summary = {"entries": len(result.entries)}


def load_entries(store: Store, scope: str | None = None, progress: Progress | None = None) -> list[Entry]:
    """``store.all_entries(scope=scope)``, as a "loading entries" stage of ``progress`` when given."""
    if progress is None:
        return store.all_entries(scope=scope)
    return list(track(store.iter_entries(scope=scope), progress, "loading entries", store.count(scope=scope)))


def run_action(
    store: Store,
    action: str,
    *,
    scope: str | None = None,
    apply: bool = False,
    now: datetime | str | None = None,
    embedder: Embedder | str | None = None,
    progress: Progress | None = None,
    lock_timeout: float | None = None,
    **params: Any,
) -> ActionResult:
    """Run one defrag action on ``store`` (every scope, or only ``scope``).

    Modifying actions are a dry run unless ``apply``: the result then holds the plan and the predicted
    changes; with ``apply`` exactly that plan is executed and journaled (``result.run_id``), under the
    store's run lock (waiting at most ``lock_timeout`` seconds, default 60) from loading the entries
    to the last write. ``progress`` (see :class:`~memwork.stores.progress.Progress`) hears the long
    stages: loading entries, finding pairs and applying changes.
    """
    name = normalize_action(action)
    scope = validate_scope(scope) if scope is not None else None
    checked = validate_params(name, params)
    if apply and name in READ_ONLY:
        raise UsageError("apply", apply, f"{name} only reads; there is nothing to apply")
    timeout = _lock_timeout(lock_timeout)
    if isinstance(embedder, str):
        embedder = load_embedder(embedder)
    when = as_utc(now) if now is not None else utcnow()
    if not apply:
        return _run(store, name, scope, checked, when, embedder, False, progress)
    with store.run_lock(scope, timeout=timeout):
        return _run(store, name, scope, checked, when, embedder, True, progress)


def _run(
    store: Store,
    name: str,
    scope: str | None,
    checked: dict[str, Any],
    when: datetime,
    embedder: Embedder | None,
    apply: bool,
    progress: Progress | None,
) -> ActionResult:
    """Load, plan and (with ``apply``, under the caller's run lock) write one action."""
    entries = load_entries(store, scope, progress)
    result = ActionResult(name, checked, scope, store.describe())
    if name in READ_ONLY:
        _read_only(result, entries, checked, when, progress)
        return result
    approved = None
    if checked.get("approved"):
        approved = read_approved_pairs(checked["approved"], entries, scope=scope)
    if name == "full":
        return _run_full(result, store, entries, approved, when, embedder, apply, progress)
    planned = _plan_for(name, entries, checked, approved, when, progress)
    result.plan, result.pairs = planned.plan, planned.pairs
    result.entries, result.skipped = planned.entries, planned.skipped
    if apply:
        with Journal(name, checked, store, scope) as journal:
            try:
                result.changes = execute(
                    store,
                    planned.plan,
                    now=when,
                    embedder=embedder,
                    journal=journal,
                    expected={e.key: e for e in entries},
                    progress=progress,
                )
            except PlanConflict as exc:
                steps = [_stopped_step(name, exc)]
                raise RunStopped(exc, action=name, run_id=journal.run_id, steps=steps) from None
        result.applied, result.run_id = True, journal.run_id
    else:
        result.changes = compute_changes(
            MemoryStore(entries, copy=False), planned.plan, now=when, embedder=embedder
        )
    result.summary = {"operations": planned.plan.counts()} | _change_summary(result.changes)
    if planned.clusters:
        result.summary["clusters"] = planned.clusters
    return result


def _full_steps(
    names: tuple[str, ...],
    applied: list[list[Change]],
    predicted: list[list[Change]],
    conflict: PlanConflict,
) -> list[dict[str, Any]]:
    """Per step of a stopped ``full`` run: applied, stopped (with its partial count) or not run."""
    report: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        if index < len(applied):
            step = {"action": name, "status": "applied", "changes": len(applied[index])}
            report.append(step | {"planned": len(predicted[index])} | _change_summary(applied[index]))
        elif index == len(applied):
            report.append(_stopped_step(name, conflict))
        else:
            report.append(
                {"action": name, "status": "not run", "changes": 0, "planned": len(predicted[index])}
            )
    return report


def _run_full(
    result: ActionResult,
    store: Store,
    entries: list[Entry],
    approved: list[tuple[str, str, str]] | None,
    now: datetime,
    embedder: Embedder | None,
    apply: bool,
    progress: Progress | None = None,
) -> ActionResult:
    """merge_duplicates → cleanup_stubs → compact, each planned on the state the previous one leaves.

    The three plans are computed on an in-memory simulation first, so the preview (including the
    predicted health) is what apply does; apply then executes exactly those plans, in order, checking
    each against the simulated state before writing.
    """
    p = result.params
    sim = MemoryStore(entries, copy=False)
    steps: list[tuple[Planned, dict[tuple[str, str], Entry]]] = []
    step_changes: list[list[Change]] = []
    planners = (
        lambda es: plan_merge_duplicates(
            es, p["similarity_threshold"], p["strategy"], approved=approved, progress=progress
        ),
        lambda es: plan_cleanup_stubs(es, p["age_days"], p["max_hits"], now=now),
        lambda es: plan_compact(
            es, p["min_quality_score"], p["min_age_days"], p["compact_max_hits"], now=now
        ),
    )
    for planner in planners:
        state = sim.snapshot()
        planned = planner(state)
        steps.append((planned, {e.key: e for e in state}))
        step_changes.append(execute(sim, planned.plan, now=now, embedder=embedder))
    before = health(entries)
    after = health(sim.snapshot())
    plan = Plan("full")
    for planned, _ in steps:
        plan.extend(planned.plan)
    result.plan = plan
    result.pairs = steps[0][0].pairs
    result.entries = steps[1][0].entries + steps[2][0].entries
    result.skipped = steps[1][0].skipped + steps[2][0].skipped
    names = ("merge_duplicates", "cleanup_stubs", "compact")
    if apply:
        applied: list[list[Change]] = []
        with Journal("full", p, store, result.scope) as journal:
            for planned, snapshot in steps:
                try:
                    applied.append(
                        execute(
                            store,
                            planned.plan,
                            now=now,
                            embedder=embedder,
                            journal=journal,
                            expected=snapshot,
                            progress=progress,
                        )
                    )
                except PlanConflict as exc:
                    report = _full_steps(names, applied, step_changes, exc)
                    raise RunStopped(exc, action="full", run_id=journal.run_id, steps=report) from None
        step_changes = applied
        result.applied, result.run_id = True, journal.run_id
        after = health(load_entries(store, result.scope, progress))
    result.changes = [c for changes in step_changes for c in changes]
    result.summary = {
        "health_before": before.to_dict(),
        "health_after": after.to_dict() | {"predicted": not apply},
        "health_change": after.score - before.score,
        "steps": [
            {"action": n, "operations": s[0].plan.counts()} | _change_summary(c)
            for n, s, c in zip(names, steps, step_changes, strict=True)
        ],
    } | _change_summary(result.changes)
    if steps[0][0].clusters:
        result.summary["clusters"] = steps[0][0].clusters
    return result
