"""The legacy conversation-memory backend: the facade's default, over :mod:`memwork.legacy.store`.

Selected as ``MEMORY_BACKEND=legacy``; reports itself as ``legacy-conversation-memory`` (the status's
``selectedBackend``). Its database is ``MEMORY_LEGACY_DATABASE_URL``, never the app's
``DATABASE_URL``. Runtime never creates schema in a configured database (run ``memwork legacy init``);
only memwork's own default SQLite file in the workspace is created on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from memwork.backends.base import Availability, BaseBackend, Declaration, EnvVar
from memwork.backends.requests import validate
from memwork.contracts import RANKING_RECENCY
from memwork.db import parse_url
from memwork.errors import UsageError
from memwork.legacy.extractor import Extractor
from memwork.legacy.store import LegacyMemoryStore
from memwork.redaction import describe_error
from memwork.workspace import workspace_dir

LEGACY_URL_VAR = "MEMORY_LEGACY_DATABASE_URL"  #: the legacy tables' URL (never the app's ``DATABASE_URL``)
EXTRACTOR_VAR = "MEMORY_LEGACY_EXTRACTOR"

DECLARATION = Declaration(
    name="legacy-conversation-memory",
    aliases=("legacy",),
    role="existing conversation memory (h5_* tables)",
    capabilities=("resolve", "write", "compact"),
    variables=(
        EnvVar(LEGACY_URL_VAR, "legacy tables URL", default="sqlite:///<workspace>/legacy.db"),
        EnvVar(EXTRACTOR_VAR, "package.module:function extractor"),
    ),
    database_url_var=LEGACY_URL_VAR,
    mapping=(
        ("memories", "the user's active h5_user_memory_items, newest first (limit)"),
        ("profile", "{attributes, statements} from the user's profile items (null when none)"),
        ("activeGoals", "the user's active goal items"),
        ("write", "saves the messages (h5_conversation_messages) and extracts items from pending ones"),
        ("compact", "analyzes pending messages, archives superseded items, merges near-duplicates"),
    ),
)


def default_legacy_url() -> str:
    """The embedded default legacy store: a SQLite file in the memwork workspace."""
    return f"sqlite:///{workspace_dir() / 'legacy.db'}"


def legacy_url_from_env(env: Mapping[str, str]) -> str:
    """``MEMORY_LEGACY_DATABASE_URL`` or the workspace SQLite file (never the app's ``DATABASE_URL``)."""
    return (env.get(LEGACY_URL_VAR) or "").strip() or default_legacy_url()


class LegacyConversationMemoryBackend(BaseBackend):
    """resolve = active memories; write = saveAndAnalyze; compact = analyzeUser."""

    ranking = RANKING_RECENCY

    declaration: ClassVar[Declaration | None] = DECLARATION
    #: its writes ask the commit gate of :mod:`memwork.deadline` before committing, so a write cut off at
    #: its deadline is known not to be stored (the facade answers ``failed``, never ``pending``)
    commit_gate: ClassVar[bool] = True

    def __init__(self, store: LegacyMemoryStore, *, problem: str | None = None) -> None:
        self.store = store
        self.problem = problem

    def availability(self) -> Availability:
        """Configured and a supported URL; no connection is opened (a dead server fails per call)."""
        if self.problem:
            return Availability.no(self.problem)
        try:
            parse_url(self.store.database_url)
        except UsageError as exc:
            return Availability.no(f"{LEGACY_URL_VAR}: {exc.problem}")
        return Availability.ok()

    def deadline_inline(self, request: Mapping[str, Any]) -> bool:
        """True when every wait of this resolve is bounded by the call's deadline, so the facade may
        run it on the caller's thread: MariaDB/MySQL with a connection of the read path ready (its
        statement bounded by ``max_statement_time`` and the watchdog's socket shutdown, see
        :mod:`memwork.legacy.reader`). The first call, and SQLite, take the worker pool."""
        reader = self.store.reader if not self.problem else None
        return reader is not None and reader.has_idle()

    def close(self) -> None:
        self.store.close()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        clean = validate("resolve", request)
        return self.store.resolve(clean["userId"], clean["limit"])

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        clean = validate("write", request)
        return self.store.save_and_analyze(clean["userId"], clean["sessionId"], clean["messages"])

    def compact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        clean = validate("compact", request)
        return self.store.analyze_user(clean["userId"], clean["sessionId"])

    def purge_user(self, user_id: str) -> dict[str, int]:
        return self.store.purge_user(user_id)


def load_extractor(spec: str) -> Extractor:
    """``package.module:function`` -> the callable (the env way to plug in e.g. an LLM extractor)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(EXTRACTOR_VAR, spec, "expected package.module:function")
    target = getattr(importlib.import_module(module_name), attr, None)
    if not callable(target):
        raise UsageError(EXTRACTOR_VAR, spec, "does not name a callable")
    return target


def from_env(env: Mapping[str, str], extractor: Extractor | None = None) -> LegacyConversationMemoryBackend:
    """The registry factory: ``MEMORY_LEGACY_DATABASE_URL`` or the workspace's ``legacy.db``.

    A broken ``MEMORY_LEGACY_EXTRACTOR`` makes the backend unavailable with the reason, not a crash.
    """
    explicit = bool((env.get(LEGACY_URL_VAR) or "").strip())
    problem = None
    spec = (env.get(EXTRACTOR_VAR) or "").strip()
    if extractor is None and spec:
        try:
            extractor = load_extractor(spec)
        except Exception as exc:
            problem = f"{EXTRACTOR_VAR}: {describe_error(exc)}"
    store = LegacyMemoryStore(legacy_url_from_env(env), extractor=extractor, auto_create=not explicit)
    return LegacyConversationMemoryBackend(store, problem=problem)
