"""A migration source: any backend that can list every memory it holds, page by page, to the end.

A source is built from the same variables as its backend (``MEMORY_QDRANT_URL``, ...; the feature
flag is not needed to read) by a factory ``source_from_env(env) -> Source`` in the backend's own
module, registered like backends are: entry points of group ``memwork.sources`` (the built-ins are
declared in code below, exactly as a plugin declares its own in ``pyproject.toml``).

Paging is by an opaque ``cursor`` the source itself returns (Qdrant's next point id, Letta's last
passage id, a Redis stream id, a page number): :func:`iter_pages` follows it until the source says
there is nothing more, and refuses a source whose cursor does not move, so a listing is never
silently cut at the first page nor looped forever. The import run stores the cursor of each
committed page as its checkpoint, so ``--resume`` continues where a killed run stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol, runtime_checkable

from memwork.errors import BackendError, UsageError

SOURCE_GROUP = "memwork.sources"

#: the sources memwork ships, registered exactly as a plugin's would be
BUILTIN_SOURCES: tuple[EntryPoint, ...] = (
    EntryPoint("qdrant", "memwork.backends.qdrant:source_from_env", SOURCE_GROUP),
    EntryPoint("weaviate", "memwork.backends.weaviate:source_from_env", SOURCE_GROUP),
    EntryPoint("mem0", "memwork.backends.mem0:source_from_env", SOURCE_GROUP),
    EntryPoint("letta", "memwork.backends.letta:source_from_env", SOURCE_GROUP),
    EntryPoint("langgraph", "memwork.backends.langgraph:source_from_env", SOURCE_GROUP),
    EntryPoint("redis-streams", "memwork.backends.redis_streams:source_from_env", SOURCE_GROUP),
)


@dataclass(frozen=True)
class SourceRecord:
    """One memory as a source holds it; ``vector``/``model`` only when the source stores embeddings.

    Timestamps are timezone-aware (UTC) or None; ``metadata`` is the source's own, JSON-shaped.
    """

    id: str
    user_id: str
    content: str
    type: str = "fact"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    session_id: str | None = None
    message_id: str | None = None
    agent_id: str | None = None
    vector: Sequence[float] | None = None
    model: str | None = None


@dataclass(frozen=True)
class Page:
    """One page of a listing and the cursor of the next one (None: this was the last page)."""

    records: list[SourceRecord]
    next_cursor: str | None


@runtime_checkable
class Source(Protocol):
    """What the import run needs of a source."""

    #: the registry name (``qdrant``, ``redis-streams``, ...)
    name: str

    @property
    def key(self) -> str:
        """Stable identity of *what* is read, without secrets: ``qdrant:http://host:6333/memind_memory``.

        It keys the import's checkpoint and is recorded on every imported row."""
        ...

    def read_page(self, cursor: str | None, size: int) -> Page:
        """Up to ``size`` records after ``cursor`` (None: from the beginning)."""
        ...

    def close(self) -> None: ...


SourceFactory = Callable[[Mapping[str, str]], Source]


def source_entry_points() -> list[EntryPoint]:
    """Built-in sources first, then installed plugins (a plugin cannot take a built-in's name)."""
    found = {ep.name: ep for ep in BUILTIN_SOURCES}
    try:
        for ep in entry_points(group=SOURCE_GROUP):
            found.setdefault(ep.name, ep)
    except Exception:  # a broken distribution's metadata must not break the built-ins
        pass
    return list(found.values())


def source_names() -> list[str]:
    return [ep.name for ep in source_entry_points()]


def open_source(name: str, env: Mapping[str, str]) -> Source:
    """The source ``name`` configured from ``env``; a UsageError names a bad name or a missing variable."""
    eps = {ep.name: ep for ep in source_entry_points()}
    ep = eps.get(name)
    if ep is None:
        raise UsageError("from", name, f"unknown source; known: {', '.join(sorted(eps))}")
    target = ep.load()
    factory: SourceFactory = getattr(target, "source_from_env", target)
    return factory(env)


def iter_pages(source: Source, cursor: str | None, size: int) -> Iterator[tuple[Page, str | None]]:
    """Every page from ``cursor`` to the end, each with the cursor it was read from.

    Raises BackendError when the source hands back the cursor it was given (it would loop forever).
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError("page_size", size, "must be a positive integer")
    while True:
        page = source.read_page(cursor, size)
        yield page, cursor
        if page.next_cursor is None:
            return
        if page.next_cursor == cursor:
            raise BackendError(f"{source.name}: the listing did not advance past cursor {cursor!r}")
        cursor = page.next_cursor


def require(env: Mapping[str, str], name: str) -> str:
    """A variable a source cannot do without: its stripped value, or a UsageError naming it."""
    value = (env.get(name) or "").strip()
    if not value:
        raise UsageError(name, value, "is not set (the source reads the backend's own variables)")
    return value
