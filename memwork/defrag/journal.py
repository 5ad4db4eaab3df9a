"""The audit journal: one JSON-lines file per applied run under ``<workspace>/journal/``.

Line 1 is the run header (run id, action, parameters, store, scope, time); then one ``change`` line
per entry touched, written *before* the store is changed, with full before and after images
(:meth:`Entry.to_record`); the last line is the footer with the status. :func:`undo` replays the
before-images in reverse and is itself journaled.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memwork.defrag.apply import Change, fingerprint
from memwork.entry import Entry, utcnow
from memwork.errors import CheckFailed, UsageError
from memwork.stores.base import Store
from memwork.stores.progress import Progress, track
from memwork.workspace import workspace_dir


def journal_dir() -> Path:
    """Where run files live (created on demand)."""
    path = workspace_dir() / "journal"
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_run_id(now: datetime | None = None) -> str:
    """Sortable and unique: ``20250102T030405Z-1a2b3c``."""
    return f"{(now or utcnow()).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


class Journal:
    """Writes one run's file; use as a context manager so the footer is always written."""

    def __init__(self, action: str, params: dict[str, Any], store: Store, scope: str | None, **extra: Any):
        self.run_id = new_run_id()
        self.path = journal_dir() / f"{self.run_id}.jsonl"
        self.count = 0
        self._fh = self.path.open("x", encoding="utf-8")
        self._write(
            {
                "type": "run",
                "run_id": self.run_id,
                "action": action,
                "params": params,
                "store": store.describe(),
                "scope": scope,
                "started_at": utcnow().isoformat(),
                **extra,
            }
        )

    def _write(self, data: dict[str, Any]) -> None:
        self._fh.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def record(self, change: Change) -> None:
        self.count += 1
        self._write(
            {
                "type": "change",
                "seq": self.count,
                "scope": change.scope,
                "path": change.path,
                "change": change.kind,
                "before": None if change.before is None else change.before.to_record(),
                "after": None if change.after is None else change.after.to_record(),
            }
        )

    def close(self, status: str, summary: dict[str, Any] | None = None) -> None:
        if self._fh.closed:
            return
        self._write(
            {"type": "end", "status": status, "changes": self.count, "finished_at": utcnow().isoformat()}
            | ({"summary": summary} if summary else {})
        )
        os.fsync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close("ok" if exc_type is None else f"failed: {exc}")


@dataclass
class RunRecord:
    """One journal file, parsed."""

    header: dict[str, Any]
    changes: list[dict[str, Any]] = field(default_factory=list)
    footer: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "action": self.header.get("action"),
            "store": self.header.get("store"),
            "scope": self.header.get("scope"),
            "started_at": self.header.get("started_at"),
            "params": self.header.get("params"),
            "changes": len(self.changes),
            "status": (self.footer or {}).get("status", "incomplete"),
            "undoes": self.header.get("undoes"),
        }


def read_run(run_id: str) -> RunRecord:
    """Parse a run's journal file; unknown run ids are a usage error."""
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise UsageError("run_id", run_id, "not a run id")
    path = journal_dir() / f"{run_id}.jsonl"
    if not path.exists():
        raise UsageError("run_id", run_id, f"no such run in {journal_dir()}")
    return _parse(path)


def _parse(path: Path) -> RunRecord:
    record: RunRecord | None = None
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            data = json.loads(line)
            if data["type"] == "run":
                record = RunRecord(header=data)
            elif record is not None and data["type"] == "change":
                record.changes.append(data)
            elif record is not None and data["type"] == "end":
                record.footer = data
    if record is None:
        raise UsageError("journal", str(path), "has no run header")
    return record


def list_runs() -> list[dict[str, Any]]:
    """Summaries of every journaled run, oldest first, with ``undone_by`` filled in."""
    runs = sorted(
        (_parse(p) for p in journal_dir().glob("*.jsonl")),
        key=lambda r: (str(r.header.get("started_at")), r.run_id),
    )
    undone = {r.header["undoes"]: r.run_id for r in runs if r.header.get("undoes")}
    return [r.summary() | {"undone_by": undone.get(r.run_id)} for r in runs]


def undo(
    run_id: str, store: Store, *, force: bool = False, progress: Progress | None = None
) -> tuple[str, list[Change]]:
    """Restore every entry ``run_id`` touched to its before-image (exactly: timestamps and hits too).

    Refuses (:class:`CheckFailed`) when an entry changed after the run or the run was already undone,
    unless ``force``. Returns the undo's own run id (it is journaled like any run) and its changes.
    """
    run = read_run(run_id)
    if not force:
        done = [r for r in list_runs() if r["undoes"] == run_id]
        if done:
            raise CheckFailed(f"run_id={run_id!r}: already undone by {done[0]['run_id']} (use force)")
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for change in run.changes:
        latest[(change["scope"], change["path"])] = change
    planned: list[Change] = []
    for key, change in latest.items():
        current = store.get(key[1], scope=key[0])
        expected = None if change["after"] is None else Entry.from_record(change["after"])
        if not force and fingerprint(current) != fingerprint(expected):
            raise CheckFailed(
                f"path={key[1]!r}: changed after run {run_id} (scope {key[0]!r}); nothing undone (use force)"
            )
    # the first before-image of each key is the state before the run
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for change in run.changes:
        first.setdefault((change["scope"], change["path"]), change)
    for (scope, path), change in reversed(list(first.items())):
        before = None if change["before"] is None else Entry.from_record(change["before"])
        current = store.get(path, scope=scope)
        if before is None and current is None:
            continue
        planned.append(Change(scope, path, current, before))
    params = {"run_id": run_id, "force": force}
    with Journal("undo", params, store, run.header.get("scope"), undoes=run_id) as journal:
        for change in track(planned, progress, "restoring entries", len(planned), every=1):
            journal.record(change)
            if change.after is None:
                store.delete(change.path, scope=change.scope)
            else:
                store.put(change.after)
    return journal.run_id, planned
