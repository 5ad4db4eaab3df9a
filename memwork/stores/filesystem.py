"""A memory store in a plain directory: one file per entry, readable and editable by hand.

Each entry is three files: ``<path>`` (the content, UTF-8), ``<path>.yml`` (a sidecar with title,
metadata, created_at, updated_at and hits) and ``<path>.emb`` (the embedding as raw little-endian
float32; absent when the entry has none). Scope ``default`` lives directly under the root, so an
existing directory of memory files opens as-is; other scopes live under ``<root>/.scopes/<scope>/``.

Writes happen under a lock file in the root (two writers never interleave), and an entry's three
files change together, so that neither a reader nor a kill -9 ever sees a stub sidecar over the
original content:

1. the new content, sidecar and embedding are written to hidden temp files beside the entry;
2. a commit marker ``.<name>.<hash>.commit`` (JSON: which temp becomes which file, and whether the
   ``.emb`` goes away) is renamed into place -- that rename is the commit point;
3. the temps are renamed over ``<path>.yml``, ``<path>.emb`` and ``<path>``; the marker is removed.

A kill before step 2 leaves the old entry (and stray hidden temps); a kill after it leaves a marker
that the next access to that entry -- a read, a write, a listing -- completes under the lock (roll
forward), so the entry is the new one. A reader does not take the lock: it stats the three files
before and after reading them, and if any of them changed meanwhile or a marker is present it waits
for the lock and reads again. At every instant a reader therefore gets the old or the new entry.

Modifying runs (defrag apply, undo) also hold :meth:`FilesystemStore.run_lock`: flock files
``.memwork-run.lock`` / ``.memwork-run.<scope>.lock`` in the root (see :mod:`memwork.stores.runlock`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from memwork.entry import (
    DEFAULT_SCOPE,
    Entry,
    as_embedding,
    as_utc,
    check_limits,
    normalize_path,
    validate_scope,
)
from memwork.errors import EntryNotFound, InvalidPath, UsageError
from memwork.progress import Progress
from memwork.stores.base import DEFAULT_RUN_LOCK_TIMEOUT, CasWrite, Store
from memwork.stores.runlock import flock_run_lock

SCOPES_DIR = ".scopes"
LOCK_NAME = ".memwork.lock"
WRITE_LOCK_POLL = 0.001
RUN_LOCK_STEM = ".memwork-run"
COMMIT_SUFFIX = ".commit"
_OPTIMISTIC_READS = 3
SIDE_SUFFIXES = (".yml", ".emb")


# yaml and filelock are imported by the first filesystem store, not with memwork.stores: a report
# reading a SQL store does not load them (issue 20)
@functools.cache
def _yaml() -> tuple[Any, Any, Any]:
    """(yaml, its safe loader, its safe dumper): the C ones when built."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader), getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class FilesystemStore(Store):
    """Entries as files under ``root`` (created when missing)."""

    kind = "filesystem"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        if self.root.exists() and not self.root.is_dir():
            raise UsageError("store", str(root), "exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        # a short poll: a writer waiting while a defrag run writes entry after entry must find one
        # of the short gaps between its writes instead of starving until the run ends
        from filelock import FileLock

        self._lock = FileLock(str(self.root / LOCK_NAME), poll_interval=WRITE_LOCK_POLL)

    def describe(self) -> str:
        return f"filesystem:{self.root}"

    # ---- locations ------------------------------------------------------------------------------
    def _scope_dir(self, scope: str) -> Path:
        return self.root if scope == DEFAULT_SCOPE else self.root / SCOPES_DIR / scope

    def _file(self, path: str, scope: str) -> Path:
        return self._scope_dir(scope).joinpath(*path.split("/"))

    # ---- primitives -----------------------------------------------------------------------------
    def get(self, path: str, *, scope: str = DEFAULT_SCOPE) -> Entry | None:
        path, scope = normalize_path(path), validate_scope(scope)
        return self._load(path, scope)

    def put(self, entry: Entry) -> Entry:
        with self._lock:
            return self._put_unlocked(entry)

    def run_lock(
        self, scope: str | None, *, timeout: float = DEFAULT_RUN_LOCK_TIMEOUT
    ) -> AbstractContextManager[None]:
        """flock files in the store root (see :meth:`Store.run_lock`)."""
        scope = validate_scope(scope) if scope is not None else None
        return flock_run_lock(self.root / RUN_LOCK_STEM, scope, timeout, self.describe())

    def _compare_and_write(self, write: CasWrite) -> None:
        """Compare and write under the store's write lock (see :meth:`Store.put_if_unchanged`)."""
        if write.new is not None:
            check_limits(write.new)  # refused before the lock is taken
        with self._lock:
            write.check(self._load_locked(write.path, write.scope))
            if write.new is None:
                self._delete_unlocked(write.path, write.scope)
            else:
                self._put_unlocked(write.new)

    def put_many(self, entries: Iterable[Entry], *, progress: Progress | None = None) -> int:
        """Write many entries under one lock acquisition (the write lock is re-entrant, so each
        :meth:`put` inside the base class's loop only counts it up)."""
        with self._lock:
            return super().put_many(entries, progress=progress)

    def _delete(self, path: str, scope: str) -> bool:
        path, scope = normalize_path(path), validate_scope(scope)
        with self._lock:
            return self._delete_unlocked(path, scope)

    def _delete_unlocked(self, path: str, scope: str) -> bool:
        """Content first: once it is gone the entry is gone; leftover sidecars are ignored."""
        target = self._file(path, scope)
        _roll_forward(target)
        if not target.is_file():
            return False
        for suffix in ("", *SIDE_SUFFIXES):
            _unlink(target.with_name(target.name + suffix))
        self._prune_empty_dirs(target.parent, self._scope_dir(scope))
        return True

    def iter_entries(self, *, scope: str | None = None, prefix: str | None = None) -> Iterator[Entry]:
        scopes = [validate_scope(scope)] if scope is not None else self.scopes()
        for name in scopes:
            for path in self._paths(name):
                if prefix and not path.startswith(prefix):
                    continue
                entry = self._load(path, name)
                if entry is not None:  # deleted meanwhile
                    yield entry

    def count(self, *, scope: str | None = None) -> int:
        """Number of content files (no file is read)."""
        scopes = [validate_scope(scope)] if scope is not None else self.scopes()
        return sum(len(self._paths(name)) for name in scopes)

    def scopes(self) -> list[str]:
        found = []
        if next(self._walk(self.root), None) is not None:
            found.append(DEFAULT_SCOPE)
        scopes_root = self.root / SCOPES_DIR
        if scopes_root.is_dir():
            for child in scopes_root.iterdir():
                if child.is_dir() and next(self._walk(child), None) is not None:
                    found.append(child.name)
        return sorted(found)

    def bump_hits(self, path: str, *, scope: str = DEFAULT_SCOPE, by: int = 1) -> None:
        path, scope = normalize_path(path), validate_scope(scope)
        target = self._file(path, scope)
        with self._lock:
            _roll_forward(target)
            if not target.is_file():
                raise EntryNotFound(path, scope)
            side = self._read_sidecar(target)
            side["hits"] = int(side.get("hits") or 0) + by
            if "created_at" not in side or "updated_at" not in side:
                stamp = _mtime(target).isoformat()
                side.setdefault("created_at", stamp)
                side.setdefault("updated_at", stamp)
            _atomic_write(_side(target, ".yml"), _dump_yaml(side))

    # ---- import validation (checked for a whole file before its first write) ---------------------
    def embedding_dimension(self) -> int | None:
        """The dimension of the store's embeddings (its first ``.emb`` file), None when it has none."""
        for name in self.scopes():
            base = self._scope_dir(name)
            for path in self._paths(name):
                emb = _side(base.joinpath(*path.split("/")), ".emb")
                with contextlib.suppress(OSError):
                    size = emb.stat().st_size
                    if size:
                        return size // 4
        return None

    def path_conflict(self, path: str, *, scope: str = DEFAULT_SCOPE) -> str | None:
        """Why ``path`` cannot be written beside what the store holds (None when it can): one of its
        parents is a file (an entry or a sidecar), or its file or a sidecar name is a directory."""
        path, scope = normalize_path(path), validate_scope(scope)
        base = self._scope_dir(scope)
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = base.joinpath(*parts[:depth])
            if parent.is_file():
                return f"lies below the file {'/'.join(parts[:depth])!r} already in this store"
            if not parent.exists():
                break
        target = self._file(path, scope)
        for suffix in ("", *SIDE_SUFFIXES):
            if _side(target, suffix).is_dir():
                return f"{path + suffix!r} is a directory already in this store"
        return None

    # ---- helpers --------------------------------------------------------------------------------
    def _put_unlocked(self, entry: Entry) -> Entry:
        path, scope, size = check_limits(entry)
        entry = entry.copy(path=path, scope=scope, size=size)
        target = self._file(path, scope)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir():
                raise IsADirectoryError(str(target))
            _roll_forward(target)  # a killed earlier put of this entry is completed first
            files = {".yml": _dump_yaml(_sidecar(entry)), "": entry.content.encode("utf-8")}
            if entry.embedding is not None:
                files[".emb"] = entry.embedding.astype("<f4").tobytes()
            _commit_files(target, files)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            raise InvalidPath(path, "collides with another entry's directory in this store") from None
        return entry

    def _load(self, path: str, scope: str) -> Entry | None:
        """Read without the lock; fall back to reading under it when a write raced (module docstring)."""
        target = self._file(path, scope)
        base, marker = os.fspath(target), os.fspath(_marker(target))
        files = (base, base + ".yml", base + ".emb")
        for _ in range(_OPTIMISTIC_READS):
            if os.path.exists(marker):
                break
            stamps = _stamps(files)
            entry = self._read(target, path, scope)
            if _stamps(files) == stamps and not os.path.exists(marker):
                return entry
        with self._lock:
            return self._load_locked(path, scope)

    def _load_locked(self, path: str, scope: str) -> Entry | None:
        target = self._file(path, scope)
        _roll_forward(target)
        return self._read(target, path, scope)

    def _read(self, target: Path, path: str, scope: str) -> Entry | None:
        try:
            raw = target.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        side = self._read_sidecar(target)
        stamp = None if "created_at" in side and "updated_at" in side else _mtime(target)
        metadata = side.get("metadata") or {}
        if not isinstance(metadata, dict):
            metadata = {}
        return Entry(
            path=path,
            scope=scope,
            content=raw.decode("utf-8", errors="replace"),
            title=str(side.get("title") or ""),
            metadata=metadata,
            embedding=_read_embedding(_side(target, ".emb")),
            size=len(raw),
            created_at=as_utc(side.get("created_at") or stamp),
            updated_at=as_utc(side.get("updated_at") or stamp),
            hits=int(side.get("hits") or 0),
        )

    @staticmethod
    def _read_sidecar(target: Path) -> dict[str, Any]:
        try:
            text = _side(target, ".yml").read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        yaml, loader, _ = _yaml()
        data = yaml.load(text, Loader=loader)  # a safe loader (C or pure Python)
        return data if isinstance(data, dict) else {}

    def _paths(self, scope: str) -> list[str]:
        """Entry paths of one scope, sorted by code point like every other store (a killed put of a
        new entry is completed first, so it is listed)."""
        base = self._scope_dir(scope)
        markers: list[Path] = []
        paths = sorted(self._walk(base, markers))
        if not markers:
            return paths
        with self._lock:
            for marker in markers:
                _roll_forward_marker(marker)
        return sorted(self._walk(base))

    @staticmethod
    def _walk(base: Path, markers: list[Path] | None = None) -> Iterator[str]:
        """Relative paths of content files under ``base``; hidden files/dirs and sidecars skipped
        (commit markers found on the way are appended to ``markers``)."""
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, base)
            for name in filenames:
                if name.startswith(".") or name.endswith(SIDE_SUFFIXES):
                    if markers is not None and name.startswith(".") and name.endswith(COMMIT_SUFFIX):
                        markers.append(Path(dirpath, name))
                    continue
                yield name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"

    @staticmethod
    def _prune_empty_dirs(directory: Path, stop: Path) -> None:
        while directory != stop and stop in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent


def _side(target: Path, suffix: str) -> Path:
    return target.with_name(target.name + suffix)


def _marker(target: Path) -> Path:
    """The commit marker of one entry (a short, fixed-length hidden name even for long names)."""
    digest = hashlib.blake2b(target.name.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return target.with_name(f".{target.name[:40]}.{digest}{COMMIT_SUFFIX}")


def _stamps(files: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    """Identity of the entry's files (inode, mtime, size): a rename over any of them changes it."""
    out: list[tuple[int, int, int] | None] = []
    for name in files:
        try:
            st = os.stat(name)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _commit_files(target: Path, files: dict[str, bytes]) -> None:
    """Replace the entry's files (suffix -> bytes; ``.emb`` absent = remove it) as one commit."""
    temps: dict[str, str] = {}
    try:
        for suffix, data in files.items():
            temps[suffix] = _write_temp(_side(target, suffix), data)
        marker = {"name": target.name, "files": temps, "drop": [s for s in SIDE_SUFFIXES if s not in files]}
        _atomic_write(_marker(target), json.dumps(marker).encode("utf-8"))  # the commit point
    except BaseException:
        for name in temps.values():
            _unlink(target.parent / name)
        raise
    _apply_marker(target, marker)


def _apply_marker(target: Path, marker: dict[str, Any]) -> None:
    """Rename the committed temps into place (those already moved are skipped), drop, then unmark."""
    files = marker.get("files") or {}
    for suffix in (".yml", ".emb", ""):
        if suffix in files:
            temp = target.parent / files[suffix]
            if temp.exists():
                os.replace(temp, _side(target, suffix))
        elif suffix in (marker.get("drop") or ()):
            _unlink(_side(target, suffix))
    _unlink(_marker(target))


def _roll_forward(target: Path) -> None:
    """Complete a put that was killed after its commit point (call with the store lock held)."""
    marker = _marker(target)
    if marker.exists():
        _roll_forward_marker(marker)


def _roll_forward_marker(marker: Path) -> None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    _apply_marker(marker.parent / data["name"], data)


def _sidecar(entry: Entry) -> dict[str, Any]:
    return {
        "title": entry.title,
        "metadata": entry.metadata,
        "created_at": entry.created_at.isoformat(),
        "updated_at": entry.updated_at.isoformat(),
        "hits": int(entry.hits),
    }


def _dump_yaml(data: dict[str, Any]) -> bytes:
    yaml, _, dumper = _yaml()
    text = yaml.dump(data, Dumper=dumper, allow_unicode=True, sort_keys=False, default_flow_style=False)
    return text.encode("utf-8")


def _read_embedding(path: Path) -> np.ndarray | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return as_embedding(np.frombuffer(raw, dtype="<f4").astype(np.float32))


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _write_temp(target: Path, data: bytes) -> str:
    """Write ``data`` to a new hidden temp file beside ``target``; return the temp's name."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        _unlink(Path(tmp))
        raise
    return os.path.basename(tmp)


def _atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to a hidden temp file beside ``target`` and rename it into place."""
    tmp = target.parent / _write_temp(target, data)
    try:
        os.replace(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
