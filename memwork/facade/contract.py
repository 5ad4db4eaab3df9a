"""The backend contract gate, plus the tolerant helpers the facade uses to talk to any backend.

A backend need not inherit from :class:`memwork.backends.base.Backend`; these helpers accept the
seed's shapes too (``is_available()`` + ``unavailable_reason``, or nothing -> available).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memwork.backends.base import CATEGORIES, OPERATIONS, Availability

NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")
FLAG_RE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*\Z")


@dataclass(frozen=True)
class Violation:
    """One broken contract rule of one backend."""

    backend: str
    rule: str
    problem: str

    def __str__(self) -> str:
        return f"{self.backend}: {self.rule}: {self.problem}"


def backend_name(backend: Any) -> str:
    name = getattr(backend, "name", None)
    return name if isinstance(name, str) and name else f"<unnamed {type(backend).__name__}>"


def supports_of(backend: Any) -> dict[str, bool]:
    """Which operations the backend really implements (a callable attribute of that name)."""
    return {op: callable(getattr(backend, op, None)) for op in OPERATIONS}


def availability_of(backend: Any) -> Availability:
    """``availability()``, else ``is_available()`` + ``unavailable_reason``, else available.

    Raises whatever the backend raises; the facade wraps this in its fail-open call.
    """
    method = getattr(backend, "availability", None)
    if callable(method):
        result = method()
        if isinstance(result, Availability):
            return result
        return Availability(bool(result), getattr(backend, "unavailable_reason", None))
    method = getattr(backend, "is_available", None)
    if callable(method):
        available = bool(method())
        reason = getattr(backend, "unavailable_reason", None)
        return Availability(available, None if available else reason)
    return Availability.ok()


def validate_backend(backend: Any) -> list[Violation]:
    """Every rule of the seed's contract gate that ``backend`` breaks (empty list: it passes)."""
    label = backend_name(backend)
    found: list[Violation] = []
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not NAME_RE.match(name):
        found.append(Violation(label, "name", f"{name!r} is not stable lowercase kebab-case"))
    if not any(supports_of(backend).values()):
        found.append(Violation(label, "operations", "implements none of resolve, write, compact"))
    category = getattr(backend, "category", None)
    if category is not None and category not in CATEGORIES:
        found.append(Violation(label, "category", f"{category!r} is not one of {', '.join(CATEGORIES)}"))
    flag = getattr(backend, "flag", None)
    if flag is not None and (not isinstance(flag, str) or not FLAG_RE.match(flag)):
        found.append(Violation(label, "flag", f"{flag!r} is not SCREAMING_SNAKE_CASE"))
    found.extend(_availability_violations(label, backend))
    return found


def _availability_violations(label: str, backend: Any) -> list[Violation]:
    try:
        avail = availability_of(backend)
    except Exception as exc:
        return [Violation(label, "availability", f"availability check raised {type(exc).__name__}: {exc}")]
    if not avail.available and not (isinstance(avail.reason, str) and avail.reason.strip()):
        return [Violation(label, "availability", "unavailable without a reason")]
    return []


def check_registry(registry: Any) -> list[Violation]:
    """The gate over every backend in a registry, plus every plugin that failed to load."""
    found = [Violation(p.name, "plugin", p.problem) for p in registry.problems()]
    for backend in registry.backends():
        found.extend(validate_backend(backend))
    return found


def check_pgvector_adapter(env: dict[str, str] | None = None) -> list[Violation]:
    """The real pgvector adapter: importable, ``from_env`` works, passes the gate, dormant by default."""
    try:
        from memwork.backends import pgvector
    except Exception as exc:
        return [Violation("pgvector", "adapter", f"memwork.backends.pgvector not importable: {exc}")]
    factory = getattr(pgvector, "from_env", None)
    if not callable(factory):
        return [Violation("pgvector", "adapter", "memwork.backends.pgvector has no from_env(env)")]
    try:
        backend = factory(dict(env or {}))
    except Exception as exc:
        return [Violation("pgvector", "adapter", f"from_env raised {type(exc).__name__}: {exc}")]
    found = validate_backend(backend)
    if getattr(backend, "name", None) != "pgvector":
        found.append(Violation("pgvector", "adapter", f"name is {backend_name(backend)!r}, not 'pgvector'"))
    if env is None or not env:
        found.extend(_dormant_violations(backend))
    return found


def _dormant_violations(backend: Any) -> list[Violation]:
    try:
        avail = availability_of(backend)
    except Exception:
        return []  # already reported by validate_backend
    if avail.available:
        return [Violation("pgvector", "adapter", "available with an empty environment (must be dormant)")]
    return []
