"""An in-memory :class:`~memwork.stores.base.Store`: the simulated state ``full`` previews on, and a
fast store for tests and notebooks that work on a list of entries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from memwork.entry import DEFAULT_SCOPE, Entry
from memwork.stores.base import Store


class MemoryStore(Store):
    """Entries in a dict keyed by (scope, path); every get/put copies, so callers never alias state."""

    kind = "memory"

    def __init__(self, entries: Iterable[Entry] = (), *, copy: bool = True) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        for entry in entries:
            self._entries[entry.key] = entry.copy() if copy else entry

    def snapshot(self) -> list[Entry]:
        """The stored entries themselves, in (scope, path) order; treat them as read-only."""
        return [self._entries[k] for k in sorted(self._entries)]

    def get(self, path: str, *, scope: str = DEFAULT_SCOPE) -> Entry | None:
        entry = self._entries.get((scope, path))
        return entry.copy() if entry is not None else None

    def put(self, entry: Entry) -> Entry:
        self._entries[entry.key] = entry.copy()
        return entry

    def _delete(self, path: str, scope: str) -> bool:
        return self._entries.pop((scope, path), None) is not None

    def iter_entries(self, *, scope: str | None = None, prefix: str | None = None) -> Iterator[Entry]:
        for key in sorted(self._entries):
            entry = self._entries[key]
            if scope is not None and entry.scope != scope:
                continue
            if prefix and not entry.path.startswith(prefix):
                continue
            yield entry.copy()

    def count(self, *, scope: str | None = None) -> int:
        if scope is None:
            return len(self._entries)
        return sum(1 for s, _ in self._entries if s == scope)

    def scope_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for scope, _ in self._entries:
            counts[scope] = counts.get(scope, 0) + 1
        return counts

    def scopes(self) -> list[str]:
        return sorted({scope for scope, _ in self._entries})

    def bump_hits(self, path: str, *, scope: str = DEFAULT_SCOPE, by: int = 1) -> None:
        entry = self._entries.get((scope, path))
        if entry is not None:
            entry.hits += by

    def describe(self) -> str:
        return f"memory ({len(self._entries)} entries)"
