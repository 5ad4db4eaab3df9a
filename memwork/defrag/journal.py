"""The audit journal: one JSON-lines file per applied run under ``<workspace>/journal/``.

Line 1 is the run header (run id, action, parameters, store and its identity, scope, time, and
``clock``: the time the run stamps on what it writes, taken before it loads the entries; ``--since
RUN_ID`` starts from the earlier of the two, :mod:`memwork.defrag.since`); then one
``change`` line per entry touched, written *before* the store is changed, with full before and after
images (:meth:`Entry.to_record`); the last line is the footer with the status. :func:`undo` replays the
before-images in reverse and is itself journaled.

Crash rules. Because the journal is write-ahead, the last change of a killed run may never have reached
the store, so undo accepts an entry that equals either image of its last change (or the state before
the run, which is what a killed undo leaves behind); anything else is a real concurrent edit. A run
counts as undone only when its undo run finished (footer status ``ok``). A torn last line (ENOSPC,
power loss) is ignored: its change was never written, so the run is undone up to its last complete
line. A damaged file (not JSON, wrong shape, no header, a bad line before the end) is skipped by
:func:`scan_journal` and named, and never breaks the listing or the undo of another run.

``index.json`` caches each file's summary keyed by name, mtime and size, so listing the journal
parses only new or changed files; it is a cache (rewritten atomically, rebuilt when missing or wrong).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from memwork.defrag.apply import Change, fingerprint
from memwork.entry import Entry, utcnow
from memwork.errors import CheckFailed, DamagedJournal, MemworkError, UsageError, WriteConflict
from memwork.progress import Progress, track
from memwork.stores.base import Store
from memwork.workspace import workspace_dir

INDEX_NAME = "index.json"
INDEX_VERSION = 1
COMPLETED = "ok"


def journal_dir(create: bool = False) -> Path:
    """Where run files live; created by the first write (``create``), never by a listing."""
    path = workspace_dir() / "journal"
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def new_run_id(now: datetime | None = None) -> str:
    """Sortable and unique: ``20250102T030405Z-1a2b3c``."""
    return f"{(now or utcnow()).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def store_identity(store: Store) -> str:
    """Which store this is, independent of how it was spelled or described (no credentials).

    Filesystem: the resolved root. SQL: dialect, host, port, database (a SQLite file resolved to an
    absolute path) and table. Other stores (in-memory): only their kind, they do not outlive a process.
    """
    root = getattr(store, "root", None)
    if store.kind == "filesystem" and root is not None:
        return f"filesystem:{Path(root).resolve()}"
    url, table = getattr(store, "url", None), getattr(store, "table", None)
    if url is None or table is None:
        return str(store.kind)
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:":
        database = str(Path(database).resolve())
    socket = parsed.query.get("host", "")
    where = f"{parsed.host or socket or ''}:{parsed.port or ''}"
    return f"{parsed.get_backend_name()}://{where}/{database}#{table.name}"


class Journal:
    """Writes one run's file; use as a context manager so the footer is always written."""

    def __init__(self, action: str, params: dict[str, Any], store: Store, scope: str | None, **extra: Any):
        self.run_id = new_run_id()
        self.path = journal_dir(create=True) / f"{self.run_id}.jsonl"
        self.count = 0
        self._fh = self.path.open("x", encoding="utf-8")
        self.header = {
            "type": "run",
            "run_id": self.run_id,
            "action": action,
            "params": params,
            "store": store.describe(),
            "store_id": store_identity(store),
            "scope": scope,
            "started_at": utcnow().isoformat(),
            **extra,
        }
        self._write(self.header)

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
        footer = {"type": "end", "status": status, "changes": self.count, "finished_at": utcnow().isoformat()}
        self._write(footer | ({"summary": summary} if summary else {}))
        os.fsync(self._fh.fileno())
        self._fh.close()
        record = RunRecord(header=self.header, path=self.path, footer=footer, change_count=self.count)
        with contextlib.suppress(OSError):  # the index is only a cache; listing rebuilds it
            _update_index({self.path.name: _index_row(self.path, record.summary())})

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close("ok" if exc_type is None else f"failed: {exc}")


@dataclass
class RunRecord:
    """One journal file, parsed. ``torn``: the last line was incomplete and is ignored."""

    header: dict[str, Any]
    path: Path | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    footer: dict[str, Any] | None = None
    torn: bool = False
    change_count: int | None = None

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    @property
    def status(self) -> str:
        return str((self.footer or {}).get("status", "incomplete"))

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "action": self.header.get("action"),
            "store": self.header.get("store"),
            "store_id": self.header.get("store_id"),
            "scope": self.header.get("scope"),
            "started_at": self.header.get("started_at"),
            "params": self.header.get("params"),
            "changes": len(self.changes) if self.change_count is None else self.change_count,
            "status": self.status,
            "undoes": self.header.get("undoes"),
            "torn": self.torn,
        }


def _check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise UsageError("run_id", run_id, "not a run id")


def read_run(run_id: str) -> RunRecord:
    """Parse one run's journal file (only that file); unknown run ids and damaged files are usage errors."""
    _check_run_id(run_id)
    path = journal_dir() / f"{run_id}.jsonl"
    if not path.exists():
        raise UsageError("run_id", run_id, f"no such run in {journal_dir()}")
    return _parse(path)


_CHANGE_FIELDS = {"scope": str, "path": str}


def _line_problem(data: Any, record: RunRecord | None, path: Path) -> str | None:
    """Why a parsed line does not fit a run file at this point (None when it fits)."""
    if not isinstance(data, dict) or data.get("type") not in ("run", "change", "end"):
        return "not a journal line (needs an object with type run, change or end)"
    kind = data["type"]
    if record is None:
        if kind != "run":
            return "does not start with a run header"
        if not isinstance(data.get("run_id"), str) or data["run_id"] != path.stem:
            return f"run header's run_id {data.get('run_id')!r} does not match the file name"
        return None
    if kind == "run":
        return "a second run header"
    if record.footer is not None:
        return "a line after the footer"
    if kind == "change":
        for name, kind_of in _CHANGE_FIELDS.items():
            if not isinstance(data.get(name), kind_of):
                return f"change without a {name}"
        for name in ("before", "after"):
            if name not in data or not (data[name] is None or isinstance(data[name], dict)):
                return f"change without a {name} image"
    return None


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, bytes, is_last)`` of every non-blank line."""
    with path.open("rb") as fh:
        pending: tuple[int, bytes] | None = None
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (lineno, raw)
        if pending is not None:
            yield pending[0], pending[1], True


def _parse(path: Path) -> RunRecord:
    """Read a run file; a torn last line is dropped, any other bad line raises :class:`DamagedJournal`."""
    record: RunRecord | None = None
    try:
        for lineno, raw, is_last in _lines(path):
            try:
                data = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                if is_last and record is not None and not raw.endswith(b"\n"):
                    record.torn = True  # write-ahead: this change never reached the store
                    break
                raise DamagedJournal(path, f"line {lineno} is not JSON ({exc})") from None
            problem = _line_problem(data, record, path)
            if problem is not None:
                raise DamagedJournal(path, f"line {lineno}: {problem}")
            if record is None:
                record = RunRecord(header=data, path=path)
            elif data["type"] == "change":
                record.changes.append(data)
            else:
                record.footer = data
    except OSError as exc:
        raise DamagedJournal(path, f"cannot be read ({exc.strerror or exc})") from None
    except RecursionError:
        raise DamagedJournal(path, "nested too deeply") from None
    if record is None:
        raise DamagedJournal(path, "has no run header")
    return record


# ---- the index: a cache of summaries keyed by file name, mtime and size -----------------------------
def _index_path() -> Path:
    return journal_dir() / INDEX_NAME


def _load_index() -> dict[str, Any]:
    try:
        data = json.loads(_index_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != INDEX_VERSION
        or not isinstance(data.get("files"), dict)
    ):
        return {}
    return data["files"]


def _save_index(files: dict[str, Any]) -> None:
    folder = journal_dir(create=True)
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": INDEX_VERSION, "files": files}, fh, ensure_ascii=False, default=str)
        os.replace(tmp, folder / INDEX_NAME)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _update_index(rows: dict[str, Any]) -> None:
    files = _load_index()
    files.update(rows)
    _save_index(files)


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"mtime_ns": st.st_mtime_ns, "size": st.st_size}


def _index_row(
    path: Path, summary: dict[str, Any] | None = None, damaged: str | None = None
) -> dict[str, Any]:
    return _stamp(path) | ({"summary": summary} if damaged is None else {"damaged": damaged})


def _fresh(row: Any, stamp: dict[str, int]) -> bool:
    return (
        isinstance(row, dict)
        and row.get("mtime_ns") == stamp["mtime_ns"]
        and row.get("size") == stamp["size"]
        and (isinstance(row.get("summary"), dict) or isinstance(row.get("damaged"), str))
    )


@dataclass
class JournalScan:
    """Every readable run (oldest first, ``undone_by`` filled in) and every damaged file with its problem."""

    runs: list[dict[str, Any]]
    damaged: list[dict[str, str]]


def scan_journal() -> JournalScan:
    """Summaries of every journaled run, from the index where a file is unchanged; damaged files named."""
    files = _load_index()
    rows: dict[str, Any] = {}
    changed = False
    for path in sorted(journal_dir().glob("*.jsonl")):
        try:
            stamp = _stamp(path)
        except OSError:
            continue  # removed while listing
        row = files.get(path.name)
        if not _fresh(row, stamp):
            try:
                row = stamp | {"summary": _parse(path).summary()}
            except DamagedJournal as exc:
                row = stamp | {"damaged": exc.problem}
            changed = True
        rows[path.name] = row
    if changed or set(rows) != set(files):
        with contextlib.suppress(OSError):
            _save_index(rows)
    summaries = sorted(
        (row["summary"] for row in rows.values() if "summary" in row),
        key=lambda r: (str(r.get("started_at")), str(r["run_id"])),
    )
    undone = {r["undoes"]: r["run_id"] for r in summaries if r.get("undoes") and r.get("status") == COMPLETED}
    damaged = [{"file": name, "problem": row["damaged"]} for name, row in rows.items() if "damaged" in row]
    return JournalScan([r | {"undone_by": undone.get(r["run_id"])} for r in summaries], damaged)


def list_runs() -> list[dict[str, Any]]:
    """Summaries of every readable journaled run, oldest first (see :func:`scan_journal`)."""
    return scan_journal().runs


# ---- undo ---------------------------------------------------------------------------------------------
def _check_same_store(run: RunRecord, store: Store) -> None:
    """Undo writes only into the store the run changed; ``force`` does not override this."""
    recorded = run.header.get("store_id")
    here = store_identity(store)
    if recorded is None:  # journaled before store_id existed: the description is all there is
        shown = str(run.header.get("store"))
        same = shown == store.describe() if store.kind == "filesystem" else shown.split(":")[0] == store.kind
    else:
        shown, same = str(recorded), recorded == here
    if not same:
        raise UsageError(
            "store",
            store.describe(),
            f"run {run.run_id} was journaled for {shown}, not this store ({here}); nothing undone",
        )


def _image(run: RunRecord, change: dict[str, Any], which: str) -> Entry | None:
    record = change[which]
    if record is None:
        return None
    try:
        return Entry.from_record(record)
    except (MemworkError, TypeError, ValueError) as exc:
        where = run.path.name if run.path is not None else run.run_id
        raise DamagedJournal(
            Path(where), f"change seq {change.get('seq')}: bad {which} image ({exc})"
        ) from None


def undo(
    run_id: str,
    store: Store,
    *,
    force: bool = False,
    progress: Progress | None = None,
    lock_timeout: float | None = None,
) -> tuple[str, list[Change]]:
    """Restore every entry ``run_id`` touched to its before-image (exactly: timestamps and hits too).

    Refuses (:class:`CheckFailed`) when an entry changed after the run or the run was already undone
    by a completed undo, unless ``force``; refuses (:class:`UsageError`) another store than the run's,
    even with ``force``. An entry may equal either image of its last change (write-ahead: a killed
    run's last change may not have been written) or its state before the run (a killed undo).
    The checks and writes hold the store's run lock for the run's scope (so no defrag apply or other
    undo interleaves), and each write is a compare-and-set against the state the check saw, so an
    ordinary writer's edit in between stops the undo (:class:`CheckFailed`) instead of being lost.
    Returns the undo's own run id (it is journaled like any run) and its changes.
    """
    run = read_run(run_id)
    _check_same_store(run, store)
    bad_timeout = isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float | None)
    if bad_timeout or (lock_timeout is not None and not 0 <= lock_timeout < float("inf")):
        raise UsageError("lock_timeout", lock_timeout, "must be a number of seconds >= 0")
    timeout = {} if lock_timeout is None else {"timeout": float(lock_timeout)}
    with store.run_lock(run.header.get("scope"), **timeout):
        if not force:
            done = [r for r in list_runs() if r["undoes"] == run_id and r["status"] == COMPLETED]
            if done:
                raise CheckFailed(f"run_id={run_id!r}: already undone by {done[0]['run_id']} (use force)")
        planned = _plan_undo(run, store, force=force)
        params = {"run_id": run_id, "force": force}
        with Journal("undo", params, store, run.header.get("scope"), undoes=run_id) as journal:
            try:
                _restore(store, planned, journal, progress)
            except WriteConflict as exc:
                raise CheckFailed(
                    f"{exc}; undo of {run_id} stopped after restoring {journal.count} of "
                    f"{len(planned)} entries (journaled as {journal.run_id}, not counted as an undo); "
                    f"memwork defrag undo {run_id} --force restores the rest and overwrites that edit"
                ) from None
    return journal.run_id, planned


def _plan_undo(run: RunRecord, store: Store, *, force: bool) -> list[Change]:
    """One change per touched entry, from its current state to its state before the run.

    Without ``force`` every entry must still be in a state the run (or a killed undo of it) left.
    """
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for change in run.changes:
        key = (change["scope"], change["path"])
        latest[key] = change
        first.setdefault(key, change)
    restore = {key: _image(run, change, "before") for key, change in first.items()}
    current = {key: store.get(key[1], scope=key[0]) for key in restore}
    if not force:
        for key, change in latest.items():
            allowed = {
                fingerprint(_image(run, change, "after")),
                fingerprint(_image(run, change, "before")),  # write-ahead: never written
                fingerprint(restore[key]),  # already restored by a killed undo
            }
            if fingerprint(current[key]) not in allowed:
                raise CheckFailed(
                    f"path={key[1]!r}: changed after run {run.run_id} (scope {key[0]!r});"
                    " nothing undone (use force)"
                )
    return [
        Change(scope, path, current[(scope, path)], before)
        for (scope, path), before in reversed(list(restore.items()))
        if not _same_record(current[(scope, path)], before)
    ]


def _restore(store: Store, planned: list[Change], journal: Journal, progress: Progress | None) -> None:
    """Write each change if the entry is still as planned; journal it right before the write."""
    for change in track(planned, progress, "restoring entries", len(planned), every=1):
        store.put_if_unchanged(change.before, change.after, before_write=partial(journal.record, change))


def _same_record(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.to_record() == b.to_record()
