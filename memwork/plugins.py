"""The plugin registry: built-ins and third-party plugins registered the same way, for backends and sources.

Two entry-point groups, one mechanism (:class:`Plugins`). Built-ins are
:class:`importlib.metadata.EntryPoint` objects, exactly what a plugin declares in its
``pyproject.toml``::

    [project.entry-points."memwork.backends"]
    acme = "memwork_acme:from_env"

    [project.entry-points."memwork.sources"]
    acme = "memwork_acme:source_from_env"

A ``memwork.backends`` entry point names a factory ``from_env(env) -> backend``, a ``memwork.sources``
one a factory ``source_from_env(env) -> source`` (or an object with that attribute); the contracts
are in :mod:`memwork.contracts`. Installed plugins are discovered lazily, on first use, with stdlib
``importlib.metadata``. A plugin that cannot be discovered, imported or built, or that takes a name
already registered, is a :class:`PluginProblem` -- the same for both groups: listed by
``memwork status`` (backends) and failed by ``memwork check contracts`` (both), never swallowed, and
never a crash of the host. A name is taken once, by the first to register it (built-ins first).

:class:`Registry` holds the backends built from the ``memwork.backends`` group (names and aliases
come from each backend's declaration; the registry knows no backend by name); :func:`open_source`
builds one source of the ``memwork.sources`` group.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from memwork.backends.base import declaration_of
from memwork.contracts import Backend, Source, SourceFactory
from memwork.errors import BackendError, DuplicateBackend, UnknownBackend, UsageError
from memwork.redaction import describe_error

BACKENDS = "memwork.backends"
SOURCES = "memwork.sources"
GROUPS = (BACKENDS, SOURCES)
#: the attribute of an entry point's target that is the factory (else the target itself is)
FACTORY = {BACKENDS: "from_env", SOURCES: "source_from_env"}

#: the adapters memwork ships, registered exactly as a plugin is (legacy first)
BUILTIN_BACKENDS: tuple[EntryPoint, ...] = (
    EntryPoint("legacy", "memwork.backends.legacy:from_env", BACKENDS),
    EntryPoint("pgvector", "memwork.backends.pgvector:from_env", BACKENDS),
    EntryPoint("qdrant", "memwork.backends.qdrant:from_env", BACKENDS),
    EntryPoint("weaviate", "memwork.backends.weaviate:from_env", BACKENDS),
    EntryPoint("mem0", "memwork.backends.mem0:from_env", BACKENDS),
    EntryPoint("letta", "memwork.backends.letta:from_env", BACKENDS),
    EntryPoint("neo4j", "memwork.backends.neo4j:from_env", BACKENDS),
    EntryPoint("redis-streams", "memwork.backends.redis_streams:from_env", BACKENDS),
    EntryPoint("langgraph", "memwork.backends.langgraph:from_env", BACKENDS),
)

#: the sources memwork ships, registered exactly as a plugin's would be
BUILTIN_SOURCES: tuple[EntryPoint, ...] = (
    EntryPoint("legacy-mysql", "memwork.migrate.legacy_mysql:source_from_env", SOURCES),
    EntryPoint("qdrant", "memwork.backends.qdrant_points:source_from_env", SOURCES),
    EntryPoint("weaviate", "memwork.backends.weaviate:source_from_env", SOURCES),
    EntryPoint("mem0", "memwork.backends.mem0:source_from_env", SOURCES),
    EntryPoint("letta", "memwork.backends.letta:source_from_env", SOURCES),
    EntryPoint("langgraph", "memwork.backends.langgraph:source_from_env", SOURCES),
    EntryPoint("redis-streams", "memwork.backends.redis_streams:source_from_env", SOURCES),
    EntryPoint("pgvector", "memwork.backends.pgvector:source_from_env", SOURCES),
)

BUILTINS: dict[str, tuple[EntryPoint, ...]] = {BACKENDS: BUILTIN_BACKENDS, SOURCES: BUILTIN_SOURCES}
BUILTIN = "builtin"  #: the origin of a built-in


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that could not be registered: failed discovery or import, failing factory, duplicate name."""

    name: str
    origin: str
    problem: str
    group: str = BACKENDS


@dataclass(frozen=True)
class Plugin:
    """One registered entry point and where it came from (``builtin`` or ``entry point MODULE:ATTR``)."""

    entry_point: EntryPoint
    origin: str

    @property
    def name(self) -> str:
        return self.entry_point.name


def origin_of(ep: EntryPoint) -> str:
    return f"entry point {ep.value}"


class Plugins:
    """The entry points of one group: memwork's built-ins first, then the installed plugins.

    ``plugins`` replaces discovery of installed entry points (None: discover lazily, on first use).
    Discovery never raises: a distribution whose metadata cannot be read, and a plugin whose name is
    already taken, become :meth:`problems`; so does a plugin that :meth:`load` cannot import.
    """

    def __init__(self, group: str, *, plugins: Iterable[EntryPoint] | None = None) -> None:
        if group not in GROUPS:
            raise UsageError("group", group, f"must be one of {', '.join(GROUPS)}")
        self.group = group
        self._given = None if plugins is None else [ep for ep in plugins if ep.group == group]
        self._plugins: list[Plugin] | None = None
        self._problems: list[PluginProblem] = []
        self._lock = threading.RLock()

    def _discover(self) -> list[EntryPoint]:
        if self._given is not None:
            return self._given
        try:
            return list(entry_points(group=self.group))
        except Exception as exc:  # a broken distribution's metadata must not break the built-ins
            self.problem("*", self.group, f"discovery failed: {describe_error(exc)}")
            return []

    def plugins(self) -> list[Plugin]:
        """Every entry point, built-ins first; a plugin taking a name already registered is refused."""
        with self._lock:
            if self._plugins is None:
                found = {ep.name: Plugin(ep, BUILTIN) for ep in BUILTINS[self.group]}
                for ep in self._discover():
                    if ep.name in found:
                        taken = found[ep.name].origin
                        self.problem(ep.name, origin_of(ep), f"already registered by {taken}; refused")
                    else:
                        found[ep.name] = Plugin(ep, origin_of(ep))
                self._plugins = list(found.values())
            return list(self._plugins)

    def names(self) -> list[str]:
        return [plugin.name for plugin in self.plugins()]

    def find(self, name: str) -> Plugin | None:
        return next((plugin for plugin in self.plugins() if plugin.name == name), None)

    def problem(self, name: str, origin: str, problem: str) -> PluginProblem:
        """Record (and return) one problem of this group."""
        found = PluginProblem(name, origin, problem, self.group)
        with self._lock:
            self._problems.append(found)
        return found

    def problems(self) -> list[PluginProblem]:
        """Every problem so far: discovery, refused names, and each :meth:`load` that failed."""
        self.plugins()
        with self._lock:
            return list(self._problems)

    def load(self, plugin: Plugin) -> Callable[[Mapping[str, str]], Any] | None:
        """The plugin's factory (its target's ``from_env``/``source_from_env``, else the target); None,
        and a problem recorded, when the target cannot be imported or is not callable."""
        try:
            target = plugin.entry_point.load()
        except Exception as exc:
            self.problem(plugin.name, plugin.origin, f"failed to load: {describe_error(exc)}")
            return None
        factory = getattr(target, FACTORY[self.group], target)
        if not callable(factory):
            problem = f"failed to load: {plugin.entry_point.value} is not callable (no {FACTORY[self.group]})"
            self.problem(plugin.name, plugin.origin, problem)
            return None
        return factory

    def load_all(self) -> list[tuple[Plugin, Callable[[Mapping[str, str]], Any]]]:
        """Every plugin that loads, with its factory (the others become problems)."""
        loaded = []
        for plugin in self.plugins():
            factory = self.load(plugin)
            if factory is not None:
                loaded.append((plugin, factory))
        return loaded


# ---- backends ------------------------------------------------------------------------------------
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
        """``plugins`` replaces discovery of installed entry points (None: discover lazily; entry points
        of other groups are ignored); ``overrides`` maps a built-in entry point name to a ready
        instance (e.g. a legacy backend with a custom extractor)."""
        self._env = dict(os.environ if env is None else env)
        self.plugins = Plugins(BACKENDS, plugins=plugins)
        self._backends: dict[str, Backend] = {}
        self._index: dict[str, str] = {}
        self._origins: dict[str, str] = {}
        self._overrides = dict(overrides or {})
        self._loaded = False
        self._lock = threading.RLock()

    # ---- loading -------------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for plugin in self.plugins.plugins():
                if plugin.origin == BUILTIN and plugin.name in self._overrides:
                    self._add(self._overrides[plugin.name], plugin.name, plugin.origin)
                else:
                    self._build(plugin)

    def _build(self, plugin: Plugin) -> None:
        factory = self.plugins.load(plugin)
        if factory is None:
            return
        try:
            backend: Backend = factory(self._env)
        except Exception as exc:
            self.plugins.problem(plugin.name, plugin.origin, f"failed to load: {describe_error(exc)}")
            return
        try:
            self._add(backend, plugin.name, plugin.origin)
        except DuplicateBackend as exc:
            self.plugins.problem(plugin.name, plugin.origin, exc.problem)

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
        return self.plugins.problems()

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


# ---- sources -------------------------------------------------------------------------------------
def source_names(plugins: Iterable[EntryPoint] | None = None) -> list[str]:
    """Every registered source name: the built-ins, then installed plugins."""
    return Plugins(SOURCES, plugins=plugins).names()


def source_factory(name: str, *, plugins: Iterable[EntryPoint] | None = None) -> SourceFactory:
    """The factory of the source ``name``: a UsageError names an unknown name (and what exists), a
    BackendError a plugin that cannot be imported -- its problem, as ``check contracts`` reports it."""
    registry = Plugins(SOURCES, plugins=plugins)
    plugin = registry.find(name)
    if plugin is None:
        raise UsageError("from", name, f"unknown source; known: {', '.join(sorted(registry.names()))}")
    factory = registry.load(plugin)
    if factory is None:
        problem = registry.problems()[-1]
        raise BackendError(f"source {name} ({problem.origin}): {problem.problem}")
    return factory


def open_source(name: str, env: Mapping[str, str], *, plugins: Iterable[EntryPoint] | None = None) -> Source:
    """The source ``name`` configured from ``env``; a UsageError names a bad name or a missing variable."""
    source: Source = source_factory(name, plugins=plugins)(env)
    return source
