"""``run_action``: a registered defrag action against a store (plan, then preview or apply).

What each action is (its parameters, read-only or not, how it finds or plans) is declared once in
:mod:`memwork.defrag.table`; this module loads the entries, dispatches, executes and journals.

An applied run holds the store's run lock (:meth:`~memwork.stores.base.Store.run_lock`, per store and
scope) from loading the entries to the last write, so two runs never interleave: a second run waits
(at most ``lock_timeout`` seconds, then :class:`~memwork.errors.StoreLocked`) and then plans on what
the first one left. A conflict with another writer stops the run with
:class:`~memwork.errors.RunStopped`, which says what was applied (per step) and that
``memwork defrag undo RUN_ID`` reverts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memwork.defrag import findings
from memwork.defrag.apply import Change, compute_changes, execute
from memwork.defrag.journal import Journal
from memwork.defrag.plan import Plan
from memwork.defrag.planners import Planned
from memwork.defrag.review import read_approved_pairs
from memwork.defrag.scores import health
from memwork.defrag.table import ACTIONS, Action, Context, lookup
from memwork.embed import Embedder, load_embedder
from memwork.entry import Entry, as_utc, utcnow, validate_scope
from memwork.errors import PlanConflict, RunStopped, UsageError
from memwork.progress import Progress, track
from memwork.stores.base import DEFAULT_RUN_LOCK_TIMEOUT, Store
from memwork.stores.memory import MemoryStore

if TYPE_CHECKING:
    import pandas as pd

#: what :meth:`ActionResult.frame` can show
FRAMES = ("pairs", "entries", "skipped", "operations", "changes")


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
        lists = ACTIONS[self.action].lists if self.action in ACTIONS else ()
        if self.pairs or "pairs" in lists:
            data["pairs"] = [p.to_dict() for p in self.pairs]
        if self.entries or "entries" in lists:
            data["entries"] = [e.to_dict() for e in self.entries]
        if self.skipped:
            data["skipped"] = [e.to_dict() for e in self.skipped]
        if self.plan is not None:
            data["operations"] = self.plan.to_dict()
            data["changes"] = [c.to_dict() for c in self.changes]
        return data

    def frame(self, name: str = "operations") -> pd.DataFrame:
        """One list of the result as a pandas table, for a notebook: ``pairs``, ``entries``,
        ``skipped``, ``operations`` (the plan, one row per operation) or ``changes`` (predicted by a
        dry run, made by an applied one)."""
        import pandas as pd

        if name not in FRAMES:
            raise UsageError("frame", name, f"must be one of {', '.join(FRAMES)}")
        if name == "operations":
            rows = self.plan.to_dict() if self.plan is not None else []
        else:
            rows = [item.to_dict() for item in getattr(self, name)]
        return pd.DataFrame(rows)


def stopped_run(
    conflict: PlanConflict, *, action: str, run_id: str, steps: list[dict[str, Any]]
) -> RunStopped:
    """The error of an applied run that stopped on ``conflict``: what was written, and the undo command."""
    applied = sum(step["changes"] for step in steps)
    if not applied:
        detail = f"nothing was written (run {run_id}); run the action again"
    else:
        done = ", ".join(
            f"{s['action']} {s['changes']}" + (f" of {s['planned']}" if s["status"] != "applied" else "")
            for s in steps
            if s["status"] != "not run"
        )
        detail = (
            f"the run stopped after applying {applied} changes ({done}); they are journaled "
            f"and `{undo_command(run_id)}` (same --store) reverts them"
        )
    return RunStopped(conflict, action=action, run_id=run_id, steps=steps, detail=detail)


def undo_command(run_id: str) -> str:
    return f"memwork defrag undo {run_id}"


def stopped_run_dict(stopped: RunStopped) -> dict[str, Any]:
    """The ``--json`` answer of a stopped run."""
    return {
        "action": stopped.action,
        "applied": stopped.changes_applied > 0,
        "complete": False,
        "run_id": stopped.run_id,
        "error": str(stopped),
        "conflict": {"path": stopped.path, "scope": stopped.scope, "problem": stopped.problem},
        "changes_applied": stopped.changes_applied,
        "steps": stopped.steps,
        "undo": undo_command(stopped.run_id) if stopped.changes_applied else None,
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
    to the last write. ``progress`` (see :class:`~memwork.progress.Progress`) hears the long
    stages: loading entries, finding pairs and applying changes.
    """
    act = lookup(action)
    scope = validate_scope(scope) if scope is not None else None
    checked = act.validate(params)
    if apply and act.read_only:
        raise UsageError("apply", apply, f"{act.name} only reads; there is nothing to apply")
    timeout = _lock_timeout(lock_timeout)
    if isinstance(embedder, str):
        embedder = load_embedder(embedder)
    when = as_utc(now) if now is not None else utcnow()
    if not apply:
        return _run(store, act, scope, checked, when, embedder, False, progress)
    with store.run_lock(scope, timeout=timeout):
        return _run(store, act, scope, checked, when, embedder, True, progress)


def _run(
    store: Store,
    act: Action,
    scope: str | None,
    checked: dict[str, Any],
    when: datetime,
    embedder: Embedder | None,
    apply: bool,
    progress: Progress | None,
) -> ActionResult:
    """Load, plan and (with ``apply``, under the caller's run lock) write one action."""
    name = act.name
    result = ActionResult(name, checked, scope, store.describe())
    if act.reads_store(checked):  # the approximate candidate stage: the store is never loaded whole
        assert act.find_in_store is not None  # reads_store says so
        found = act.find_in_store(store, scope, checked, Context(when, progress))
        result.summary, result.pairs, result.entries = found.summary, found.pairs, found.entries
        return result
    entries = load_entries(store, scope, progress)
    if act.find is not None:
        found = act.find(entries, checked, Context(when, progress))
        result.summary, result.pairs, result.entries = found.summary, found.pairs, found.entries
        return result
    approved = None
    if checked.get("approved"):
        approved = read_approved_pairs(checked["approved"], entries, scope=scope)
    ctx = Context(when, progress, approved)
    if act.steps:
        return _run_steps(result, act, store, entries, ctx, embedder, apply)
    assert act.plan is not None  # register() guarantees find, plan or steps
    planned = act.plan(entries, checked, ctx)
    result.plan, result.pairs = planned.plan, planned.pairs
    result.entries, result.skipped = planned.entries, planned.skipped
    if apply:
        with Journal(name, checked, store, scope, clock=when.isoformat()) as journal:
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
                raise stopped_run(exc, action=name, run_id=journal.run_id, steps=steps) from None
        result.applied, result.run_id = True, journal.run_id
    else:
        result.changes = compute_changes(
            MemoryStore(entries, copy=False), planned.plan, now=when, embedder=embedder
        )
    result.summary = {"operations": planned.plan.counts()} | _change_summary(result.changes) | planned.summary
    if planned.clusters:
        result.summary["clusters"] = planned.clusters
    return result


def _step_summary(name: str, planned: Planned, changes: list[Change]) -> dict[str, Any]:
    """One step of a composite run: its operations, its changes and its planner's figures."""
    return {"action": name, "operations": planned.plan.counts()} | _change_summary(changes) | planned.summary


def _step_report(
    names: tuple[str, ...],
    applied: list[list[Change]],
    predicted: list[list[Change]],
    conflict: PlanConflict,
) -> list[dict[str, Any]]:
    """Per step of a stopped composite run: applied, stopped (with its partial count) or not run."""
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


def _distinct_pairs(pairs: Iterable[findings.Pair]) -> list[findings.Pair]:
    """Each pair once, as the first step that found it saw it (merge and supersede both list a
    contradiction pair in the duplicate band)."""
    seen: dict[tuple[str, str, str], findings.Pair] = {}
    for pair in pairs:
        seen.setdefault((pair.scope, pair.path_a, pair.path_b), pair)
    return list(seen.values())


def _run_steps(
    result: ActionResult,
    act: Action,
    store: Store,
    entries: list[Entry],
    ctx: Context,
    embedder: Embedder | None,
    apply: bool,
) -> ActionResult:
    """A composite action (``full``): its steps' planners, each on the state the previous one leaves.

    The plans are computed on an in-memory simulation first, so the preview (including the
    predicted health) is what apply does; apply then executes exactly those plans, in order, checking
    each against the simulated state before writing.
    """
    p, now, progress = result.params, ctx.now, ctx.progress
    sim = MemoryStore(entries, copy=False)
    steps: list[tuple[Planned, dict[tuple[str, str], Entry]]] = []
    step_changes: list[list[Change]] = []
    for step in act.steps:
        planner = ACTIONS[step.action]
        assert planner.plan is not None  # register() refuses a step that is not a planner
        state = sim.snapshot()
        planned = planner.plan(state, step.params_of(p, planner.params), ctx)
        steps.append((planned, {e.key: e for e in state}))
        step_changes.append(execute(sim, planned.plan, now=now, embedder=embedder))
    before = health(entries)
    after = health(sim.snapshot())
    plan = Plan(act.name)
    for planned, _ in steps:
        plan.extend(planned.plan)
    result.plan = plan
    result.pairs = _distinct_pairs(pair for planned, _ in steps for pair in planned.pairs)
    result.entries = [e for planned, _ in steps for e in planned.entries]
    result.skipped = [e for planned, _ in steps for e in planned.skipped]
    clusters = [c for planned, _ in steps for c in planned.clusters]
    names = tuple(step.action for step in act.steps)
    if apply:
        applied: list[list[Change]] = []
        with Journal(act.name, p, store, result.scope, clock=now.isoformat()) as journal:
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
                    report = _step_report(names, applied, step_changes, exc)
                    raise stopped_run(exc, action=act.name, run_id=journal.run_id, steps=report) from None
        step_changes = applied
        result.applied, result.run_id = True, journal.run_id
        after = health(load_entries(store, result.scope, progress))
    result.changes = [c for changes in step_changes for c in changes]
    result.summary = {
        "health_before": before.to_dict(),
        "health_after": after.to_dict() | {"predicted": not apply},
        "health_change": after.score - before.score,
        "steps": [_step_summary(n, s[0], c) for n, s, c in zip(names, steps, step_changes, strict=True)],
    } | _change_summary(result.changes)
    if clusters:
        result.summary["clusters"] = clusters
    return result
