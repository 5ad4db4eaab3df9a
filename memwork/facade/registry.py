"""The backend registry: built-ins and third-party plugins registered the same way.

Built-ins are :class:`importlib.metadata.EntryPoint` objects of group ``memwork.backends``, exactly
what a plugin declares in its ``pyproject.toml``::

    [project.entry-points."memwork.backends"]
    qdrant = "memwork_qdrant:from_env"

An entry point names a factory ``from_env(env: Mapping[str, str]) -> backend`` (or an object with a
``from_env`` attribute). Installed plugins are discovered lazily, on first use, with stdlib
``importlib.metadata``. A plugin that fails to load or duplicates a name is reported in
:meth:`Registry.problems` instead of crashing the host; a name (or alias) is taken once, by the first
to register it (built-ins first). Names and aliases come from each backend's declaration; the
registry knows no backend by name.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from memwork.backends.base import Backend, declaration_of
from memwork.errors import DuplicateBackend, UnknownBackend
from memwork.redaction import describe_error

GROUP = "memwork.backends"

#: the adapters memwork ships, registered exactly as a plugin is (legacy first)
BUILTIN_ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("legacy", "memwork.backends.legacy:from_env", GROUP),
    EntryPoint("pgvector", "memwork.backends.pgvector:from_env", GROUP),
    EntryPoint("qdrant", "memwork.backends.qdrant:from_env", GROUP),
    EntryPoint("weaviate", "memwork.backends.weaviate:from_env", GROUP),
    EntryPoint("mem0", "memwork.backends.mem0:from_env", GROUP),
    EntryPoint("letta", "memwork.backends.letta:from_env", GROUP),
    EntryPoint("neo4j", "memwork.backends.neo4j:from_env", GROUP),
    EntryPoint("redis-streams", "memwork.backends.redis_streams:from_env", GROUP),
    EntryPoint("langgraph", "memwork.backends.langgraph:from_env", GROUP),
)


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that could not be registered: failed import, failing factory or duplicate name."""

    name: str
    origin: str
    problem: str


def _keys_of(backend: Backend, registered_as: str) -> list[str]:
    keys = [getattr(backend, "name", None) or registered_as, *declaration_of(backend).aliases]
    if registered_as not in keys:
        keys.append(registered_as)
    return list(dict.fromkeys(keys))


class Registry:
    """Ordered backends (built-ins first, legacy first), looked up by name or alias."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        plugins: Iterable[EntryPoint] | None = None,
        overrides: Mapping[str, Backend] | None = None,
    ) -> None:
        """``plugins`` replaces discovery of installed entry points (None: discover lazily);
        ``overrides`` maps a built-in entry point name to a ready instance (e.g. a legacy backend
        with a custom extractor)."""
        self._env = dict(os.environ if env is None else env)
        self._plugins = None if plugins is None else list(plugins)
        self._backends: dict[str, Backend] = {}
        self._index: dict[str, str] = {}
        self._origins: dict[str, str] = {}
        self._problems: list[PluginProblem] = []
        self._overrides = dict(overrides or {})
        self._loaded = False
        self._lock = threading.RLock()

    # ---- loading -------------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for ep in BUILTIN_ENTRY_POINTS:
                if ep.name in self._overrides:
                    self._add(self._overrides[ep.name], ep.name, "builtin")
                else:
                    self._load_entry_point(ep, "builtin")
            for ep in self._discover():
                self._load_entry_point(ep, f"entry point {ep.value}")

    def _discover(self) -> list[EntryPoint]:
        if self._plugins is not None:
            return self._plugins
        try:
            return list(entry_points(group=GROUP))
        except Exception as exc:  # a broken distribution's metadata must not break the host
            self._problems.append(PluginProblem("*", GROUP, f"discovery failed: {describe_error(exc)}"))
            return []

    def _load_entry_point(self, ep: EntryPoint, origin: str) -> None:
        try:
            target = ep.load()
            factory: Callable[[Mapping[str, str]], Backend] = getattr(target, "from_env", target)
            backend = factory(self._env)
        except Exception as exc:
            self._problems.append(PluginProblem(ep.name, origin, f"failed to load: {describe_error(exc)}"))
            return
        try:
            self._add(backend, ep.name, origin)
        except DuplicateBackend as exc:
            self._problems.append(PluginProblem(ep.name, origin, exc.problem))

    def _add(self, backend: Backend, registered_as: str, origin: str) -> None:
        keys = _keys_of(backend, registered_as)
        owners = {self._index[k] for k in keys if k in self._index}
        if owners:
            taken = ", ".join(sorted(owners))
            raise DuplicateBackend("name", keys[0], f"already registered by {taken}; refused")
        primary = keys[0]
        self._backends[primary] = backend
        self._origins[primary] = origin
        for key in keys:
            self._index[key] = primary

    # ---- public API ----------------------------------------------------------------------------
    def register(self, backend: Backend) -> Backend:
        """Add a backend instance; refuses a name or alias already taken."""
        self._ensure_loaded()
        with self._lock:
            self._add(backend, getattr(backend, "name", "") or "", "code")
        return backend

    def backends(self) -> list[Backend]:
        """Every registered backend: the built-ins (legacy first), then plugins."""
        self._ensure_loaded()
        return list(self._backends.values())

    def names(self) -> list[str]:
        self._ensure_loaded()
        return list(self._backends)

    def problems(self) -> list[PluginProblem]:
        """Plugins that failed to load or were refused."""
        self._ensure_loaded()
        return list(self._problems)

    def origin(self, name: str) -> str:
        self._ensure_loaded()
        return self._origins.get(self._index.get(name, name), "unknown")

    def find(self, name: str) -> Backend | None:
        """The backend registered under ``name`` or one of its aliases, else None."""
        self._ensure_loaded()
        primary = self._index.get(name)
        return None if primary is None else self._backends[primary]

    def get(self, name: str) -> Backend:
        """Like :meth:`find` but raises :class:`UnknownBackend` naming what exists."""
        backend = self.find(name)
        if backend is None:
            known = ", ".join(sorted(self._index))
            raise UnknownBackend("backend", name, f"unknown backend; known: {known}")
        return backend

    def same(self, one: str | None, other: str | None) -> bool:
        """Whether two names or aliases (``legacy``, ``legacy-conversation-memory``) are one backend."""
        if one is None or other is None:
            return False
        if one == other:
            return True
        found = self.find(one)
        return found is not None and found is self.find(other)

    def close(self) -> None:
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):  # closing is best effort
                    close()
