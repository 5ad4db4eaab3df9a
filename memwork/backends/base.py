"""The backend contract of the Memory V2 facade (see ``../shared/seeds/memory-v2-facade.md``).

A backend is an object with:

* ``name`` -- stable lowercase kebab-case name (what ``MEMORY_BACKEND`` selects);
* ``category`` -- optional: semantic | extraction | lifecycle | behavior | policy;
* ``flag`` -- optional SCREAMING_SNAKE_CASE feature flag (e.g. ``MEMORY_QDRANT_ENABLED``);
* ``role`` -- optional human description ("primary vector store");
* ``availability()`` -- returns :class:`Availability` (``available`` and, when False, a ``reason``);
* any non-empty subset of ``resolve(request)``, ``write(request)``, ``compact(request)``, each taking
  the seed's JSON-shaped ``dict`` input (``userId``, ``sessionId``, ``query``, ``limit``,
  ``messages``, optional ``embedding``) and returning a JSON-shaped ``dict``.

``resolve`` returns any of the seed's payload keys (``profile``, ``semanticMemories``,
``behaviorSummary``, ``activeGoals``, ``memories``); the facade fills in the rest.
Subclass :class:`Backend` for convenience: it derives ``supports`` from the methods a subclass
actually defines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

OPERATIONS = ("resolve", "write", "compact")
CATEGORIES = ("semantic", "extraction", "lifecycle", "behavior", "policy")


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str | None = None

    @classmethod
    def ok(cls) -> Availability:
        return cls(True, None)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


class Backend:
    """Convenience base class; a backend need not inherit from it to pass the contract gate."""

    name: ClassVar[str] = ""
    category: ClassVar[str | None] = None
    flag: ClassVar[str | None] = None
    role: ClassVar[str | None] = None

    def availability(self) -> Availability:
        return Availability.ok()

    def supports(self) -> dict[str, bool]:
        """Which of resolve / write / compact this backend implements."""
        return {op: callable(getattr(type(self), op, None)) for op in OPERATIONS}

    def close(self) -> None:
        """Release pools or clients (optional)."""

    def describe(self) -> dict[str, Any]:
        avail = self.availability()
        return {
            "name": self.name,
            "category": self.category,
            "role": self.role,
            "flag": self.flag,
            "available": avail.available,
            "reason": avail.reason,
            "supports": self.supports(),
        }
