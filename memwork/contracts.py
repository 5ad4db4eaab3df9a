"""What a plugin implements, in one place at the bottom: a facade :class:`Backend`, a migration
:class:`Source`, and the :class:`Row` the migration writer takes.

Every feature imports this module; it imports no feature (only the standard library and
:mod:`memwork.errors`), so a backend or a source module -- memwork's own or a third party's --
depends on nothing that moves when a feature is restructured.

**A backend** is any object with a stable lowercase kebab-case ``name``, ``availability()`` (an
:class:`Availability`: ``available`` and, when False, a ``reason``), ``supports(operation)`` and any
non-empty subset of ``resolve(request)``, ``write(request)``, ``compact(request)``. Each operation
takes the JSON-shaped request (``userId``, ``sessionId``, ``query``, ``limit``, ``messages``, optional
``embedding``) and returns a JSON-shaped ``dict``; ``resolve`` returns any of ``profile``,
``semanticMemories``, ``behaviorSummary``, ``activeGoals``, ``memories`` and the facade fills in the
rest. Everything else memwork needs to know about a backend -- its environment variables (which are
required, which secret), its aliases, its capabilities, its feature flag and its database-URL
variable -- is its :class:`Declaration`, kept in the backend's own module. Subclass
:class:`BaseBackend` and set ``declaration`` to get all of it from one place. A backend is registered
under the entry-point group ``memwork.backends`` with a factory ``from_env(env) -> backend``.

**A source** lists every memory it holds, page by page, to the end: ``read_page(cursor, size)`` returns
a :class:`Page` of :class:`SourceRecord` and the opaque cursor of the next page (None: the last);
:func:`record_page` builds one from the records' fields in one call. A source is built from the same
variables as its backend by a factory ``source_from_env(env) -> Source`` (:func:`require` reads a
variable it cannot do without), registered under the entry-point group ``memwork.sources``. Its ``key``
names *what* is read, without secrets; it keys the import's checkpoint and is recorded on every imported
row.

**A row** (:class:`Row`) is one memory as the migration writer takes it: text columns, the
timestamps as naive-UTC ISO text, the metadata as JSON text -- what a MySQL keyset page already is,
and what :func:`memwork.migrate.rows.record_row` makes of a :class:`SourceRecord`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, NotRequired, Protocol, TypedDict, runtime_checkable

from memwork.errors import UsageError

__all__ = [
    "CATEGORIES",
    "FLAG_RE",
    "NAME_RE",
    "OPERATIONS",
    "Availability",
    "Backend",
    "BaseBackend",
    "Declaration",
    "EnvVar",
    "Operation",
    "Page",
    "Row",
    "Source",
    "SourceFactory",
    "SourceRecord",
    "flag_var",
    "record_page",
    "require",
    "source_records",
]

# ---- the facade backend --------------------------------------------------------------------------
OPERATIONS = ("resolve", "write", "compact")
CATEGORIES = ("semantic", "extraction", "lifecycle", "behavior", "policy")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")  #: backend and source names: lowercase kebab-case
FLAG_RE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*\Z")  #: environment variables: SCREAMING_SNAKE_CASE

#: one backend operation: a JSON-shaped request in, a JSON-shaped object out
Operation = Callable[[Mapping[str, Any]], dict[str, Any]]


#: how a backend orders what ``resolve`` returns: newest first, nearest to the query first, or by its
#: own rules (a hybrid score, a graph walk); see :attr:`BaseBackend.ranking`
RANKING_RECENCY, RANKING_SEMANTIC, RANKING_POLICY = "recency", "semantic", "policy"
RANKINGS = (RANKING_RECENCY, RANKING_SEMANTIC, RANKING_POLICY)


@dataclass(frozen=True)
class Availability:
    """Whether a backend can serve calls now; an unavailable backend always says why."""

    available: bool
    reason: str | None = None

    @classmethod
    def ok(cls) -> Availability:
        return cls(True, None)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@dataclass(frozen=True)
class EnvVar:
    """One environment variable a backend reads (``check config`` lists it; secrets are never shown).

    ``flag``: a feature switch that must be on (1/true/yes/on) before the backend counts as configured.
    """

    name: str
    description: str = ""
    required: bool = False
    secret: bool = False
    default: str | None = None
    flag: bool = False


def flag_var(name: str) -> EnvVar:
    """The backend's feature flag: required, and must be 1."""
    return EnvVar(name, "feature flag; must be 1", required=True, flag=True)


@dataclass(frozen=True)
class Declaration:
    """What a backend tells the rest of memwork about itself, in its own module.

    ``aliases``: other names ``MEMORY_BACKEND`` may use (the first is the documented selector);
    ``capabilities``: the operations it implements;
    ``database_url_var``: the variable holding its database URL, if it has one (the canary probes it
    and unsets it to prove the fallback); ``mapping``: how its results fill the facade's payload,
    ``(payload field or operation, where it comes from)`` pairs, listed in docs/backends.md.
    """

    name: str
    category: str | None = None
    role: str | None = None
    capabilities: tuple[str, ...] = ()
    variables: tuple[EnvVar, ...] = ()
    aliases: tuple[str, ...] = ()
    database_url_var: str | None = None
    mapping: tuple[tuple[str, str], ...] = ()

    @property
    def flag(self) -> str | None:
        """The feature-flag variable, if the backend has one."""
        return next((v.name for v in self.variables if v.flag), None)

    @property
    def selector(self) -> str:
        """What to write in ``MEMORY_BACKEND=`` to select this backend."""
        return self.aliases[0] if self.aliases else self.name

    def variable(self, name: str) -> EnvVar | None:
        return next((v for v in self.variables if v.name == name), None)


@runtime_checkable
class Backend(Protocol):
    """What the facade calls on every backend; the operations themselves are optional (see ``supports``)."""

    @property
    def name(self) -> str: ...

    def availability(self) -> Availability:
        """Cheap and connection-free where possible; a dead server may fail per call instead."""
        ...

    def supports(self, operation: str) -> bool:
        """True when ``operation`` (resolve | write | compact) is implemented."""
        ...


class BaseBackend:
    """Convenience base: name, category, role, flag and aliases come from ``declaration``.

    A subclass may instead set those as plain class attributes (a minimal third-party backend); then
    :func:`memwork.backends.base.declaration_of` derives its declaration from them.
    """

    declaration: ClassVar[Declaration | None] = None
    name: ClassVar[str] = ""
    category: ClassVar[str | None] = None
    role: ClassVar[str | None] = None
    flag: ClassVar[str | None] = None
    aliases: ClassVar[tuple[str, ...]] = ()
    #: how ``resolve`` orders a user's memories (:data:`RANKINGS`): the rollout judge lets agreement
    #: between two backends decide only when they rank alike (None: not declared, judged as alike)
    ranking: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        decl = cls.__dict__.get("declaration")
        if isinstance(decl, Declaration):
            for attr in ("name", "category", "role", "flag", "aliases"):
                if attr not in cls.__dict__:
                    setattr(cls, attr, getattr(decl, attr))

    def availability(self) -> Availability:
        return Availability.ok()

    def supports(self, operation: str) -> bool:
        """Implemented by the class (a callable attribute) and, when declared, among the capabilities."""
        if operation not in OPERATIONS or not callable(getattr(type(self), operation, None)):
            return False
        decl = type(self).declaration
        return decl is None or not decl.capabilities or operation in decl.capabilities

    def close(self) -> None:
        """Release pools or clients (optional)."""


# ---- the migration source ------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceRecord:
    """One memory as a source holds it; ``vector``/``model`` only when the source stores embeddings.

    Timestamps are timezone-aware (UTC) or None; ``metadata`` is the source's own, JSON-shaped.
    ``problem``: set by a source that could read a record but not interpret it (one line naming the
    field, e.g. ``position: '²' is not a whole number``); the import quarantines it with that reason
    and goes on -- a source never raises for one odd record.
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
    problem: str | None = None


def source_records(fields: Iterable[Mapping[str, Any]]) -> list[SourceRecord]:
    """A page of records from their fields (``SourceRecord(**f)`` each): a source builds a page in
    one call rather than one per record."""
    return [SourceRecord(**f) for f in fields]


@dataclass(frozen=True)
class Page:
    """One page of a listing and the cursor of the next one (None: this was the last page)."""

    records: list[SourceRecord]
    next_cursor: str | None


def record_page(fields: Iterable[Mapping[str, Any]], next_cursor: str | None) -> Page:
    """A whole page from its records' fields (``SourceRecord(**f)`` each) and the next cursor.

    A source maps its items to plain field dicts in its own module and crosses into the contract
    once per page, not once per record (a migration's cost is per page, whatever the page size)."""
    return Page(source_records(fields), next_cursor)


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


#: the ``memwork.sources`` entry point's target: the backend's environment in, a source out
SourceFactory = Callable[[Mapping[str, str]], Source]


def require(env: Mapping[str, str], name: str) -> str:
    """A variable a source cannot do without: its stripped value, or a UsageError naming it."""
    value = (env.get(name) or "").strip()
    if not value:
        raise UsageError(name, value, "is not set (the source reads the backend's own variables)")
    return value


# ---- the migration writer's row ------------------------------------------------------------------
class Row(TypedDict):
    """One memory as the writer takes it: text only, so a page goes to COPY without a Python object
    per value (PostgreSQL casts ``metadata::jsonb`` and the timestamps once, in the merge)."""

    id: str  #: the source's id of the memory (``source_memory_id``)
    user_id: str
    content: str
    type: str
    source_session_id: str | None
    source_message_id: str | None
    metadata: str  #: a JSON object, as text
    created_at: str  #: naive UTC, ISO text
    updated_at: str  #: naive UTC, ISO text
    #: the model of the source's own vector, when the row keeps it (``--vectors keep``)
    embedding_model: NotRequired[str]
