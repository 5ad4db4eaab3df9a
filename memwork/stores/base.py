"""The storage contract every memory store implements (the defrag engine reads and writes only through it).

A store keeps :class:`~memwork.entry.Entry` objects keyed by ``(scope, path)``. Subclasses implement
five primitives -- :meth:`get`, :meth:`put`, :meth:`_delete`, :meth:`iter_entries`, :meth:`scopes` --
plus :meth:`bump_hits`; the defrag methods (``list``, ``read_entry``, ``write``, ``delete``,
``total_size``, ``all_entries``) and the user-facing :meth:`read` are built on them here, once, so
validation, stub following and hit counting behave the same in every store.

Two more methods make modifying runs safe against other writers: :meth:`Store.run_lock` is a
run-wide, inter-process lock per store and scope held for a defrag run's plan-check and writes, and
:meth:`Store.put_if_unchanged` is a compare-and-set write that raises :class:`WriteConflict` when
the entry no longer equals the image the caller read (an ordinary ``write``/``put`` by someone else
is never silently overwritten).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memwork.entry import (
    DEFAULT_SCOPE,
    MAX_STUB_HOPS,
    Entry,
    as_embedding,
    as_utc,
    check_content_size,
    normalize_path,
    utcnow,
    validate_scope,
)
from memwork.errors import EntryNotFound, StubChainError, UsageError, WriteConflict
from memwork.progress import Progress

#: how long a modifying run waits for another run on the same store/scope before giving up
DEFAULT_RUN_LOCK_TIMEOUT = 60.0


def fingerprint(entry: Entry | None) -> tuple[Any, ...] | None:
    """What must be unchanged for a plan (or an undo) to still hold: content, title, metadata, the
    vector itself (a hash of its float32 bytes) and updated_at to the second. Hits may move."""
    if entry is None:
        return None
    vector = None
    if entry.embedding is not None:
        vector = hashlib.blake2b(entry.embedding.astype("<f4").tobytes(), digest_size=16).hexdigest()
    return (
        entry.content,
        entry.title,
        json.dumps(entry.metadata, sort_keys=True, default=str),
        vector,
        entry.updated_at.replace(microsecond=0),
    )


def same_entry(a: Entry | None, b: Entry | None) -> bool:
    """True when ``a`` and ``b`` are the same state of an entry (see :func:`fingerprint`)."""
    return fingerprint(a) == fingerprint(b)


def cas_key(expected: Entry | None, new: Entry | None) -> tuple[str, str] | None:
    """The (scope, path) a compare-and-set write is about; None when there is nothing to do."""
    keys = {(validate_scope(e.scope), normalize_path(e.path)) for e in (expected, new) if e is not None}
    if len(keys) > 1:
        raise ValueError(f"put_if_unchanged: expected and new name different entries: {sorted(keys)}")
    return keys.pop() if keys else None


def check_unchanged(current: Entry | None, expected: Entry | None, scope: str, path: str) -> None:
    """Raise :class:`WriteConflict` unless ``current`` is still ``expected``."""
    if same_entry(current, expected):
        return
    if expected is None:
        raise WriteConflict(path, scope, "was created by another writer since it was read")
    if current is None:
        raise WriteConflict(path, scope, "was deleted by another writer since it was read")
    raise WriteConflict(path, scope)


@dataclass(frozen=True)
class CasWrite:
    """One compare-and-set write, its entry named once: ``new`` (None = delete) for ``(scope, path)``
    if that entry is still ``expected`` (None = absent); ``before_write`` runs right before the write."""

    scope: str
    path: str
    expected: Entry | None
    new: Entry | None
    before_write: Callable[[], None] | None = None

    def check(self, current: Entry | None) -> None:
        """Raise :class:`WriteConflict` unless ``current`` is still ``expected``; then ``before_write``."""
        check_unchanged(current, self.expected, self.scope, self.path)
        if self.before_write is not None:
            self.before_write()


@dataclass(frozen=True)
class EntryInfo:
    """What ``list`` returns per entry (``{path, title, size, updated_at, scope}``)."""

    path: str
    title: str
    size: int
    updated_at: datetime
    scope: str = DEFAULT_SCOPE


class Store(ABC):
    """A memory store. Use as a context manager or call :meth:`close`."""

    #: short kind name shown in reports ("filesystem", "sqlite", "postgresql")
    kind: str = "abstract"

    # ---- primitives -------------------------------------------------------------------------
    @abstractmethod
    def get(self, path: str, *, scope: str = DEFAULT_SCOPE) -> Entry | None:
        """The raw entry at (scope, path) or None. Never follows stubs, never counts a hit."""

    @abstractmethod
    def put(self, entry: Entry) -> Entry:
        """Store ``entry`` exactly as given (timestamps and hits included); upsert on (scope, path).

        This is what undo and import use to restore an entry byte for byte.
        """

    def put_many(self, entries: Iterable[Entry], *, progress: Progress | None = None) -> int:
        """:meth:`put` for many entries (import, undo, benchmarks); stores override it to batch.

        ``progress.advance(n)`` is called as entries are written, within the stage the caller started
        (it knows the total); the calls sum to the count written.
        Returns how many entries were written."""
        count = 0
        for entry in entries:
            self.put(entry)
            count += 1
            if progress is not None:
                progress.advance(1)
        return count

    @abstractmethod
    def _delete(self, path: str, scope: str) -> bool:
        """Remove the entry; return False when there was none."""

    @abstractmethod
    def iter_entries(self, *, scope: str | None = None, prefix: str | None = None) -> Iterator[Entry]:
        """Every entry (stubs included), in (scope, path) order, optionally of one scope/prefix."""

    @abstractmethod
    def scopes(self) -> list[str]:
        """The scopes that hold at least one entry, sorted."""

    @abstractmethod
    def bump_hits(self, path: str, *, scope: str = DEFAULT_SCOPE, by: int = 1) -> None:
        """Add to the entry's hit counter without touching ``updated_at``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections or locks."""

    # ---- safe modifying runs -----------------------------------------------------------------
    def run_lock(
        self, scope: str | None, *, timeout: float = DEFAULT_RUN_LOCK_TIMEOUT
    ) -> AbstractContextManager[None]:
        """A run-wide lock for one modifying run (defrag apply, undo) on ``scope`` (None = every scope).

        Held for the plan-check and every write, so two runs on the same store and scope never
        interleave; a whole-store run excludes every scoped run. Waits at most ``timeout`` seconds,
        then raises :class:`StoreLocked`. Not re-entrant. Stores that other processes can open
        override this (this default is for in-process stores such as the defrag simulation)."""
        return contextlib.nullcontext()

    def put_if_unchanged(
        self,
        expected: Entry | None,
        new: Entry | None,
        *,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        """Compare-and-set: write ``new`` (None = delete) only if the entry is still ``expected``
        (None = absent), else raise :class:`WriteConflict` naming it and write nothing.

        ``before_write`` runs after the compare matched and right before the write (a journal line).
        Stores override :meth:`_compare_and_write` to make compare and write atomic against other
        writers; its default is only for single-process stores."""
        key = cas_key(expected, new)
        if key is None:
            return
        self._compare_and_write(CasWrite(*key, expected, new, before_write))

    def _compare_and_write(self, write: CasWrite) -> None:
        """The compare and the write of :meth:`put_if_unchanged` (scope and path already normalised)."""
        write.check(self.get(write.path, scope=write.scope))
        if write.new is None:
            self._delete(write.path, write.scope)
        else:
            self.put(write.new)

    def describe(self) -> str:
        """A human-readable, secret-free description of where the store lives."""
        return self.kind

    # ---- the defrag methods, built on the primitives ---------------------------------------
    def list(
        self, prefix: str | None = None, *, scope: str | None = None, history: bool = False
    ) -> list[EntryInfo]:
        """``{path, title, size, updated_at, scope}`` of every entry, stubs included; superseded
        entries (``defrag supersede``) only with ``history``."""
        return [
            EntryInfo(e.path, e.title, e.size, e.updated_at, e.scope)
            for e in self.iter_entries(scope=scope, prefix=prefix)
            if history or e.superseded_by is None
        ]

    def read_entry(self, path: str, *, scope: str = DEFAULT_SCOPE) -> Entry:
        """The raw entry (no stub following, no hit). Raises :class:`EntryNotFound`."""
        path, scope = normalize_path(path), validate_scope(scope)
        entry = self.get(path, scope=scope)
        if entry is None:
            raise EntryNotFound(path, scope)
        return entry

    def write(
        self,
        path: str,
        content: str,
        title: str = "",
        embedding: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        scope: str = DEFAULT_SCOPE,
        updated_at: datetime | str | None = None,
    ) -> Entry:
        """Create or update an entry (upsert). Keeps ``created_at`` and ``hits`` of an existing one."""
        path, scope = normalize_path(path), validate_scope(scope)
        if not isinstance(content, str):
            raise UsageError("content", type(content).__name__, "must be a string")
        size = check_content_size(content)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise UsageError("metadata", metadata, "must be a mapping with string keys")
        existing = self.get(path, scope=scope)
        now = utcnow()
        entry = Entry(
            path=path,
            scope=scope,
            content=content,
            title=title or "",
            metadata=dict(metadata or {}),
            embedding=as_embedding(embedding),
            size=size,
            created_at=existing.created_at if existing else now,
            updated_at=as_utc(updated_at) if updated_at is not None else now,
            hits=existing.hits if existing else 0,
        )
        return self.put(entry)

    def delete(self, path: str, *, scope: str = DEFAULT_SCOPE) -> None:
        """Permanently remove an entry. Raises :class:`EntryNotFound` when absent."""
        path, scope = normalize_path(path), validate_scope(scope)
        if not self._delete(path, scope):
            raise EntryNotFound(path, scope)

    def count(self, *, scope: str | None = None) -> int:
        """Number of entries (stubs included), of one scope or all; stores override it to be cheap."""
        return sum(1 for _ in self.iter_entries(scope=scope))

    def scope_counts(self) -> dict[str, int]:
        """Entries (stubs included) per scope, every scope that holds one; stores override it to be cheap
        (one ``GROUP BY``: the duplicate review sizes its scope sample without reading the entries)."""
        counts: dict[str, int] = {}
        for entry in self.iter_entries():
            counts[entry.scope] = counts.get(entry.scope, 0) + 1
        return counts

    def total_size(self, *, scope: str | None = None) -> int:
        """Sum of entry content sizes in bytes."""
        return sum(e.size for e in self.iter_entries(scope=scope))

    def all_entries(self, *, scope: str | None = None) -> builtins.list[Entry]:
        """Every entry with full content, stubs included, in (scope, path) order."""
        return list(self.iter_entries(scope=scope))

    # ---- user-facing read --------------------------------------------------------------------
    def read(
        self, path: str, *, scope: str = DEFAULT_SCOPE, count_hit: bool = True, history: bool = False
    ) -> Entry:
        """Read as a user does: follow stub redirects (at most 5 hops) and count a hit on each
        entry of the chain. Raises :class:`StubChainError` naming the chain on a cycle or overflow.

        A superseded entry (``defrag supersede``: a newer entry contradicts it) is history: it is
        followed to the entry that superseded it like a redirect, unless ``history`` is asked for,
        which returns it as kept (with ``superseded_by`` and ``valid_until`` in its metadata)."""
        path, scope = normalize_path(path), validate_scope(scope)
        chain: list[str] = []
        current = path
        while True:
            entry = self.get(current, scope=scope)
            if entry is None:
                if chain:
                    raise StubChainError([*chain, current], "stub points at a missing entry")
                raise EntryNotFound(current, scope)
            if current in chain:
                raise StubChainError([*chain, current], "redirect cycle")
            chain.append(current)
            if count_hit:
                self.bump_hits(current, scope=scope)
                entry.hits += 1
            newer = None if history else entry.superseded_by
            if not entry.is_stub and newer is None:
                return entry
            if len(chain) > MAX_STUB_HOPS:
                raise StubChainError(chain, f"more than {MAX_STUB_HOPS} redirect hops")
            target = newer or entry.redirect_to
            if not target:
                raise StubChainError(chain, "stub has no redirect_to")
            current = normalize_path(target)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
