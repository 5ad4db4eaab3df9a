"""The storage contract every memory store implements (the defrag guide's adapter contract).

A store keeps :class:`~memwork.entry.Entry` objects keyed by ``(scope, path)``. Subclasses implement
five primitives -- :meth:`get`, :meth:`put`, :meth:`_delete`, :meth:`iter_entries`, :meth:`scopes` --
plus :meth:`bump_hits`; the guide's methods (``list``, ``read_entry``, ``write``, ``delete``,
``total_size``, ``all_entries``) and the user-facing :meth:`read` are built on them here, once, so
validation, stub following and hit counting behave the same in every store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
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
from memwork.errors import EntryNotFound, StubChainError, UsageError


@dataclass(frozen=True)
class EntryInfo:
    """What ``list`` returns per entry (the guide's ``{path, title, size, updated_at}``, plus scope)."""

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

    def put_many(self, entries: Iterable[Entry], *, progress: Callable[[int], None] | None = None) -> int:
        """:meth:`put` for many entries (import, undo, benchmarks); stores override it to batch.

        ``progress(n)`` is called as entries are written (the calls sum to the count written).
        Returns how many entries were written."""
        count = 0
        for entry in entries:
            self.put(entry)
            count += 1
            if progress is not None:
                progress(1)
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

    def describe(self) -> str:
        """A human-readable, secret-free description of where the store lives."""
        return self.kind

    # ---- the guide's contract ----------------------------------------------------------------
    def list(self, prefix: str | None = None, *, scope: str | None = None) -> list[EntryInfo]:
        """``{path, title, size, updated_at, scope}`` of every entry, stubs included."""
        return [
            EntryInfo(e.path, e.title, e.size, e.updated_at, e.scope)
            for e in self.iter_entries(scope=scope, prefix=prefix)
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

    def total_size(self, *, scope: str | None = None) -> int:
        """Sum of entry content sizes in bytes."""
        return sum(e.size for e in self.iter_entries(scope=scope))

    def all_entries(self, *, scope: str | None = None) -> list[Entry]:
        """Every entry with full content, stubs included, in (scope, path) order."""
        return list(self.iter_entries(scope=scope))

    # ---- user-facing read --------------------------------------------------------------------
    def read(self, path: str, *, scope: str = DEFAULT_SCOPE, count_hit: bool = True) -> Entry:
        """Read as a user does: follow stub redirects (at most 5 hops) and count a hit on each
        entry of the chain. Raises :class:`StubChainError` naming the chain on a cycle or overflow."""
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
            if not entry.is_stub:
                return entry
            if len(chain) > MAX_STUB_HOPS:
                raise StubChainError(chain, f"more than {MAX_STUB_HOPS} redirect hops")
            target = entry.redirect_to
            if not target:
                raise StubChainError(chain, "stub has no redirect_to")
            current = normalize_path(target)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
