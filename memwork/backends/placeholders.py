"""The disabled plugin slots: one :class:`Declaration` per future backend, in one table.

A placeholder reports ``available=false`` with a reason, declares the variables and operations its
future adapter will use, never opens a connection, never creates tables or queues and is never
selected (the facade only selects available backends). A real adapter -- an entry point of group
``memwork.backends`` with the slot's name -- replaces its slot in the registry. ``pgvector`` is not a
slot here: memwork ships its adapter (:mod:`memwork.backends.pgvector`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NoReturn

from memwork.backends.base import Availability, BaseBackend, Declaration, EnvVar, flag_var
from memwork.errors import BackendError


def _slot(
    name: str, category: str, role: str, capabilities: tuple[str, ...], *variables: EnvVar
) -> Declaration:
    flag = flag_var(f"MEMORY_{name.replace('-', '_').upper()}_ENABLED")
    return Declaration(name, category, role, capabilities, (flag, *variables))


def _req(name: str, description: str, *, secret: bool = False) -> EnvVar:
    return EnvVar(name, description, required=True, secret=secret)


def _opt(name: str, default: str | None = None, description: str = "") -> EnvVar:
    return EnvVar(name, description, default=default)


EMBEDDING = "embedding module"

SLOTS: tuple[Declaration, ...] = (
    _slot("qdrant", "semantic", "scale-out vector store", ("resolve",),
          _req("MEMORY_QDRANT_URL", "Qdrant HTTP URL"),
          _req("MEMORY_QDRANT_EMBEDDING_MODULE", EMBEDDING),
          _opt("MEMORY_QDRANT_COLLECTION", "memind_memory")),
    _slot("weaviate", "semantic", "knowledge graph fusion", ("resolve",),
          _req("MEMORY_WEAVIATE_URL", "Weaviate URL"),
          _req("MEMORY_WEAVIATE_EMBEDDING_MODULE", EMBEDDING),
          _opt("MEMORY_WEAVIATE_COLLECTION", "MemindMemory")),
    _slot("mem0", "extraction", "automatic memory generation", ("write", "compact"),
          _req("MEMORY_MEM0_API_KEY", "Mem0 API key", secret=True),
          _opt("MEMORY_MEM0_PROJECT_ID", description="Mem0 project"),
          _opt("MEMORY_MEM0_BASE_URL", "https://api.mem0.ai"),
          _opt("MEMORY_MEM0_WRITE_PATH", description="HTTP path for write"),
          _opt("MEMORY_MEM0_COMPACT_PATH", description="HTTP path for compact")),
    _slot("letta", "lifecycle", "long/short-term memory OS", ("resolve", "write", "compact"),
          _req("MEMORY_LETTA_API_KEY", "Letta API key", secret=True),
          _req("MEMORY_LETTA_AGENT_ID", "Letta agent id"),
          _opt("MEMORY_LETTA_PROJECT_ID", description="Letta project"),
          _opt("MEMORY_LETTA_BASE_URL", "https://api.letta.com"),
          _opt("MEMORY_LETTA_RESOLVE_PATH", description="HTTP path for resolve"),
          _opt("MEMORY_LETTA_WRITE_PATH", description="HTTP path for write"),
          _opt("MEMORY_LETTA_COMPACT_PATH", description="HTTP path for compact")),
    _slot("neo4j", "behavior", "behavior graph", ("resolve", "write"),
          _req("MEMORY_NEO4J_HTTP_URL", "Neo4j HTTP endpoint"),
          _req("MEMORY_NEO4J_USER", "Neo4j user"),
          _req("MEMORY_NEO4J_PASSWORD", "Neo4j password", secret=True),
          _opt("MEMORY_NEO4J_DATABASE", "neo4j")),
    _slot("redis-streams", "behavior", "event tracking", ("write",),
          _req("MEMORY_REDIS_STREAMS_URL", "Redis URL"),
          _opt("MEMORY_REDIS_STREAMS_STREAM", "memind:memory-events")),
    _slot("langgraph", "policy", "routing/reasoning policy", ("resolve",),
          _req("MEMORY_LANGGRAPH_URL", "LangGraph URL"),
          _opt("MEMORY_LANGGRAPH_POLICY_ID", "memory_policy")),
)  # fmt: skip
SLOTS_BY_NAME = {slot.name: slot for slot in SLOTS}
DEFAULT_REASON = "not_configured: placeholder slot, no adapter installed"


class PlaceholderBackend(BaseBackend):
    """Base of the generated slot classes; ``reason`` explains why the slot is empty."""

    placeholder: ClassVar[bool] = True

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason or DEFAULT_REASON

    def availability(self) -> Availability:
        return Availability.no(self.reason)


def _refuse(op: str) -> Any:
    def method(self: PlaceholderBackend, request: Mapping[str, Any]) -> NoReturn:
        raise BackendError(f"{self.name}: placeholder slot cannot {op} ({self.reason})")

    method.__name__ = op
    return method


def _slot_class(slot: Declaration) -> type[PlaceholderBackend]:
    attrs: dict[str, Any] = {
        "declaration": slot,
        "__doc__": f"Placeholder for the {slot.name} {slot.category} backend ({slot.role}).",
    }
    attrs.update({op: _refuse(op) for op in slot.capabilities})
    class_name = "".join(part.title() for part in slot.name.split("-")) + "Placeholder"
    return type(class_name, (PlaceholderBackend,), attrs)


PLACEHOLDER_CLASSES = {slot.name: _slot_class(slot) for slot in SLOTS}


def placeholder(name: str, reason: str | None = None) -> PlaceholderBackend:
    """A fresh placeholder for slot ``name`` (KeyError for names outside the table)."""
    return PLACEHOLDER_CLASSES[name](reason)
