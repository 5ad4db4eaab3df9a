"""The eight disabled plugin slots of the seed's registry table.

A placeholder reports ``available=false`` with a reason, declares which operations its future adapter
will support, never opens a connection, never creates tables or queues and is never selected (the
facade only selects available backends). A real adapter replaces its slot in the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from memwork.backends.base import Availability, Backend
from memwork.errors import BackendError


@dataclass(frozen=True)
class Slot:
    name: str
    category: str
    role: str
    capabilities: tuple[str, ...]
    flag: str


SLOTS: tuple[Slot, ...] = (
    Slot("pgvector", "semantic", "primary vector store", ("resolve",), "MEMORY_VECTOR_ENABLED"),
    Slot("qdrant", "semantic", "scale-out vector store", ("resolve",), "MEMORY_QDRANT_ENABLED"),
    Slot("weaviate", "semantic", "knowledge graph fusion", ("resolve",), "MEMORY_WEAVIATE_ENABLED"),
    Slot("mem0", "extraction", "automatic memory generation", ("write", "compact"), "MEMORY_MEM0_ENABLED"),
    Slot(
        "letta",
        "lifecycle",
        "long/short-term memory OS",
        ("resolve", "write", "compact"),
        "MEMORY_LETTA_ENABLED",
    ),
    Slot("neo4j", "behavior", "behavior graph", ("resolve", "write"), "MEMORY_NEO4J_ENABLED"),
    Slot("redis-streams", "behavior", "event tracking", ("write",), "MEMORY_REDIS_STREAMS_ENABLED"),
    Slot("langgraph", "policy", "routing/reasoning policy", ("resolve",), "MEMORY_LANGGRAPH_ENABLED"),
)
SLOTS_BY_NAME = {slot.name: slot for slot in SLOTS}


class PlaceholderBackend(Backend):
    """Base of the generated slot classes; ``reason`` explains why the slot is empty."""

    placeholder = True

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason or "not_configured: placeholder slot, no adapter installed"

    def availability(self) -> Availability:
        return Availability.no(self.reason)


def _refuse(op: str):  # type: ignore[no-untyped-def]
    def method(self: PlaceholderBackend, request: Mapping[str, Any]) -> NoReturn:
        raise BackendError(f"{self.name}: placeholder slot cannot {op} ({self.reason})")

    method.__name__ = op
    return method


def _slot_class(slot: Slot) -> type[PlaceholderBackend]:
    attrs: dict[str, Any] = {
        "name": slot.name,
        "category": slot.category,
        "role": slot.role,
        "flag": slot.flag,
        "__doc__": f"Placeholder for the {slot.name} {slot.category} backend ({slot.role}).",
    }
    attrs.update({op: _refuse(op) for op in slot.capabilities})
    class_name = "".join(part.title() for part in slot.name.split("-")) + "Placeholder"
    return type(class_name, (PlaceholderBackend,), attrs)


PLACEHOLDER_CLASSES = {slot.name: _slot_class(slot) for slot in SLOTS}


def placeholder(name: str, reason: str | None = None) -> PlaceholderBackend:
    """A fresh placeholder for slot ``name`` (KeyError for names outside the table)."""
    return PLACEHOLDER_CLASSES[name](reason)


# Registry factories (``module:attr`` targets, the same shape a third-party entry point has).
def pgvector(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("pgvector")


def qdrant(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("qdrant")


def weaviate(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("weaviate")


def mem0(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("mem0")


def letta(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("letta")


def neo4j(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("neo4j")


def redis_streams(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("redis-streams")


def langgraph(env: Mapping[str, str]) -> PlaceholderBackend:
    return placeholder("langgraph")
