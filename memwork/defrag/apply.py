"""Execute a plan: compute every touched entry's after-image first, then write them.

The compute phase only reads the store (``get``: no hits) and is the same code for a dry-run
simulation (on a :class:`~memwork.stores.memory.MemoryStore`) and for the real run, so the preview is
what apply does. The write phase writes each change with a compare-and-set
(:meth:`~memwork.stores.base.Store.put_if_unchanged`): the entry is written only if it still equals
the before-image, and its journal line is written right before (write-ahead), so a run that dies
half way can still be undone and an edit made by someone else meanwhile is never overwritten -- the
run stops with :class:`ApplyConflict` naming the entry. Callers hold the store's run lock
(:meth:`~memwork.stores.base.Store.run_lock`) around planning and writing (see
:func:`memwork.defrag.actions.run_action`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from memwork.coverage import drop_marks, embed_entries
from memwork.defrag import merge as m
from memwork.defrag.plan import Operation, Plan
from memwork.embed import Embedder
from memwork.entry import MAX_CONTENT_BYTES, Entry
from memwork.errors import ApplyConflict, PlanConflict, UsageError, WriteConflict
from memwork.progress import Progress
from memwork.stores.base import Store, fingerprint

Key = tuple[str, str]


__all__ = ["Change", "compute_changes", "execute", "fingerprint"]


@dataclass
class Change:
    """One entry's before and after image (None = absent)."""

    scope: str
    path: str
    before: Entry | None
    after: Entry | None

    @property
    def kind(self) -> str:
        if self.before is None:
            return "create"
        if self.after is None:
            return "delete"
        return "update"

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "path": self.path, "change": self.kind}


class ChangeSink(Protocol):
    def record(self, change: Change) -> None: ...


class _Overlay:
    """Reads through to the store once per key and keeps the working after-images."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.before: dict[Key, Entry | None] = {}
        self.after: dict[Key, Entry | None] = {}

    def load(self, scope: str, path: str) -> Entry | None:
        key = (scope, path)
        if key not in self.after:
            entry = self.store.get(path, scope=scope)
            self.before[key] = entry
            self.after[key] = entry.copy() if entry is not None else None
        return self.after[key]

    def require(self, op: Operation, path: str, *, stub: bool | None) -> Entry:
        entry = self.load(op.scope, path)
        if entry is None:
            raise PlanConflict(path, op.scope, f"{op.describe()}: entry is gone")
        if stub is not None and entry.is_stub != stub:
            what = "a stub" if stub else "an entry, not a stub"
            raise PlanConflict(path, op.scope, f"{op.describe()}: expected {what}")
        return entry

    def set(self, scope: str, path: str, entry: Entry | None) -> None:
        self.after[(scope, path)] = entry


def _run_op(ov: _Overlay, op: Operation, now: datetime, stale: dict[Key, None]) -> None:
    if op.kind == "merge":
        assert op.target and op.strategy
        source = ov.require(op, op.path, stub=False)
        survivor = ov.require(op, op.target, stub=False)
        merged = m.merge_entries(survivor, source, op.strategy, now)
        if merged.content != survivor.content:
            stale[(op.scope, op.target)] = None
        ov.set(op.scope, op.target, merged)
    elif op.kind == "stub":
        assert op.target
        ov.set(op.scope, op.path, m.make_stub(ov.require(op, op.path, stub=None), op.target, now))
    elif op.kind == "repoint":
        assert op.target
        ov.set(op.scope, op.path, m.repoint_stub(ov.require(op, op.path, stub=True), op.target))
    elif op.kind == "link":
        assert op.target
        a = ov.require(op, op.path, stub=False)
        b = ov.require(op, op.target, stub=False)
        ov.set(op.scope, op.path, m.add_link(a, op.target))
        ov.set(op.scope, op.target, m.add_link(b, op.path))
    elif op.kind == "supersede":
        assert op.target
        older = ov.require(op, op.path, stub=False)
        newer = ov.require(op, op.target, stub=False)
        if older.superseded_by is not None:
            raise PlanConflict(op.path, op.scope, f"{op.describe()}: already superseded")
        ov.set(op.scope, op.path, m.supersede(older, newer, op.reason))
    elif op.kind == "delete":
        expect_stub = {"cleanup_stubs": True, "compact": False}.get(op.step or "")
        ov.require(op, op.path, stub=expect_stub)
        ov.set(op.scope, op.path, None)
    else:  # pragma: no cover - Operation.kind is a closed set
        raise ValueError(f"unknown operation {op.kind!r}")


def _refresh_embeddings(ov: _Overlay, stale: dict[Key, None], embedder: Embedder | None) -> None:
    """Re-embed entries whose content changed, or drop their vector and mark them stale."""
    entries = [e for k in stale if (e := ov.after.get(k)) is not None and not e.is_stub]
    if not entries:
        return
    if embedder is not None:
        embed_entries(embedder, entries)  # marks each new vector in or out of the model's range
        for entry in entries:
            entry.metadata.pop("embedding_stale", None)
    else:
        for entry in entries:
            entry.embedding = None
            entry.metadata["embedding_stale"] = True
            drop_marks(entry)  # the marks belong to the dropped vector


def compute_changes(
    store: Store, plan: Plan, *, now: datetime, embedder: Embedder | None = None
) -> list[Change]:
    """Every entry the plan touches, before and after, in write order (entries, stubs, deletions)."""
    ov = _Overlay(store)
    stale: dict[Key, None] = {}
    for op in plan:
        _run_op(ov, op, now, stale)
    _refresh_embeddings(ov, stale, embedder)
    for (scope, path), after in ov.after.items():
        if after is not None and len(after.content.encode("utf-8")) > MAX_CONTENT_BYTES:
            # found while planning, so the dry run shows it and apply writes nothing
            raise UsageError(
                "path",
                path,
                f"merged content would be {after.size} bytes, over the {MAX_CONTENT_BYTES} byte limit "
                f"(scope {scope!r}); use --strategy keep_newer or keep_larger",
            )
    changes = [
        Change(scope, path, ov.before[(scope, path)], after)
        for (scope, path), after in ov.after.items()
        if _differs(ov.before[(scope, path)], after)
    ]

    def order(change: Change) -> int:
        if change.after is None:
            return 2
        return 1 if change.after.is_stub else 0

    return sorted(changes, key=order)


def _differs(before: Entry | None, after: Entry | None) -> bool:
    if before is None or after is None:
        return before is not after
    return before.to_record() != after.to_record()


def execute(
    store: Store,
    plan: Plan,
    *,
    now: datetime,
    embedder: Embedder | None = None,
    journal: ChangeSink | None = None,
    expected: Mapping[Key, Entry | None] | None = None,
    progress: Progress | None = None,
) -> list[Change]:
    """Apply ``plan`` to ``store`` and return the changes made.

    ``expected`` is the snapshot the plan was computed from: if any touched entry differs from it now
    (other than in hits), :class:`PlanConflict` is raised before anything is written. Each write is a
    compare-and-set against the before-image read here, journaled right before it is made; when
    another writer changed the entry meanwhile :class:`ApplyConflict` is raised, naming the entry and
    carrying the changes already written (``.applied``; they stay journaled and undoable).
    """
    changes = compute_changes(store, plan, now=now, embedder=embedder)
    if expected is not None:
        for change in changes:
            if fingerprint(change.before) != fingerprint(expected.get((change.scope, change.path))):
                raise PlanConflict(
                    change.path, change.scope, "changed since the plan was made", planned=len(changes)
                )
    if progress is not None:
        progress.start(f"applying {plan.action}", len(changes))
    written: list[Change] = []
    for change in changes:
        record = None if journal is None else partial(journal.record, change)
        try:
            store.put_if_unchanged(change.before, change.after, before_write=record)
        except WriteConflict as exc:
            raise ApplyConflict(
                exc.path, exc.scope, exc.problem, applied=written, planned=len(changes)
            ) from None
        written.append(change)
        if progress is not None:
            progress.advance(1)
    return changes
