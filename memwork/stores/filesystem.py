"""A memory store in a plain directory, in the layout the defrag guide's tool uses.

Each entry is three files: ``<path>`` (the content, UTF-8), ``<path>.yml`` (a sidecar with title,
metadata, created_at, updated_at and hits) and ``<path>.emb`` (the embedding as raw little-endian
float32; absent when the entry has none). Scope ``default`` lives directly under the root, so an
existing guide directory opens as-is; other scopes live under ``<root>/.scopes/<scope>/``.

Every write goes to a hidden temp file in the same directory and is renamed into place (readers
never see half a file), under a lock file in the root (two writers never interleave).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from filelock import FileLock

from memwork.entry import (
    DEFAULT_SCOPE,
    Entry,
    as_embedding,
    as_utc,
    check_content_size,
    normalize_path,
    validate_scope,
)
from memwork.errors import EntryNotFound, InvalidPath, UsageError
from memwork.stores.base import Store

SCOPES_DIR = ".scopes"
LOCK_NAME = ".memwork.lock"
SIDE_SUFFIXES = (".yml", ".emb")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class FilesystemStore(Store):
    """Entries as files under ``root`` (created when missing)."""

    kind = "filesystem"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        if self.root.exists() and not self.root.is_dir():
            raise UsageError("store", str(root), "exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.root / LOCK_NAME))

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

    def put_many(self, entries: Iterable[Entry], *, progress: Callable[[int], None] | None = None) -> int:
        """Write many entries under one lock acquisition."""
        count = 0
        with self._lock:
            for entry in entries:
                self._put_unlocked(entry)
                count += 1
                if progress is not None:
                    progress(1)
        return count

    def _delete(self, path: str, scope: str) -> bool:
        path, scope = normalize_path(path), validate_scope(scope)
        target = self._file(path, scope)
        with self._lock:
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
        path, scope = normalize_path(entry.path), validate_scope(entry.scope)
        size = check_content_size(entry.content)
        entry = entry.copy(path=path, scope=scope, size=size)
        target = self._file(path, scope)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir():
                raise IsADirectoryError(str(target))
            _atomic_write(_side(target, ".yml"), _dump_yaml(_sidecar(entry)))
            if entry.embedding is None:
                _unlink(_side(target, ".emb"))
            else:
                _atomic_write(_side(target, ".emb"), entry.embedding.astype("<f4").tobytes())
            _atomic_write(target, entry.content.encode("utf-8"))
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            raise InvalidPath(path, "collides with another entry's directory in this store") from None
        return entry

    def _load(self, path: str, scope: str) -> Entry | None:
        target = self._file(path, scope)
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
        data = yaml.load(text, Loader=_Loader)  # a safe loader (C or pure Python)
        return data if isinstance(data, dict) else {}

    def _paths(self, scope: str) -> list[str]:
        """Entry paths of one scope, sorted by code point like every other store."""
        base = self._scope_dir(scope)
        return sorted(self._walk(base))

    @staticmethod
    def _walk(base: Path) -> Iterator[str]:
        """Relative paths of content files under ``base``; hidden files/dirs and sidecars skipped."""
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, base)
            for name in filenames:
                if name.startswith(".") or name.endswith(SIDE_SUFFIXES):
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


def _sidecar(entry: Entry) -> dict[str, Any]:
    return {
        "title": entry.title,
        "metadata": entry.metadata,
        "created_at": entry.created_at.isoformat(),
        "updated_at": entry.updated_at.isoformat(),
        "hits": int(entry.hits),
    }


def _dump_yaml(data: dict[str, Any]) -> bytes:
    text = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, default_flow_style=False)
    return text.encode("utf-8")


def _read_embedding(path: Path) -> np.ndarray | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return as_embedding(np.frombuffer(raw, dtype="<f4").astype(np.float32))


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to a hidden temp file beside ``target`` and rename it into place."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
