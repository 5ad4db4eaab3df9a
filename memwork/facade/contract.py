"""The backend contract gate: every rule a backend must keep, over one backend, a registry or all of them.

The rules (name, operations, category, flag, availability with a reason) are checked on any object;
a backend's declaration is checked too (variables in SCREAMING_SNAKE_CASE, declared capabilities
implemented, a database-URL variable that is one of its variables). :func:`check_all` is the whole
gate ``memwork check contracts`` runs: the registry, every adapter with a feature flag built again
from an empty environment (it must then be dormant) and adapter files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from pathlib import Path

from memwork.backends.base import availability_of, backend_name, declaration_of, supports_of
from memwork.contracts import CATEGORIES, FLAG_RE, NAME_RE
from memwork.facade.registry import Registry

__all__ = ["NAME_RE", "ContractReport", "Violation", "check_all", "check_registry", "validate_backend"]


@dataclass(frozen=True)
class Violation:
    """One broken contract rule of one backend."""

    backend: str
    rule: str
    problem: str

    def __str__(self) -> str:
        return f"{self.backend}: {self.rule}: {self.problem}"


@dataclass
class ContractReport:
    """What :func:`check_all` checked and every violation it found."""

    checked: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "checked": self.checked, "violations": [str(v) for v in self.violations]}


def validate_backend(backend: object) -> list[Violation]:
    """Every rule of the contract gate that ``backend`` breaks (empty list: it passes)."""
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
    else:
        found.extend(_declaration_violations(label, backend))
    found.extend(_availability_violations(label, backend))
    return found


def _declaration_violations(label: str, backend: object) -> list[Violation]:
    decl = declaration_of(backend)
    found = [
        Violation(label, "variables", f"{var.name!r} is not SCREAMING_SNAKE_CASE")
        for var in decl.variables
        if not FLAG_RE.match(var.name)
    ]
    bad_aliases = [a for a in decl.aliases if not NAME_RE.match(a)]
    if bad_aliases:
        found.append(Violation(label, "aliases", f"{bad_aliases!r} are not lowercase kebab-case"))
    supports = supports_of(backend)
    missing = [op for op in decl.capabilities if not supports.get(op, False)]
    if missing:
        found.append(
            Violation(label, "capabilities", f"declares {', '.join(missing)} but does not implement it")
        )
    if decl.database_url_var and decl.variable(decl.database_url_var) is None:
        found.append(Violation(label, "variables", f"{decl.database_url_var} is not one of its variables"))
    return found


def _availability_violations(label: str, backend: object) -> list[Violation]:
    try:
        avail = availability_of(backend)
    except Exception as exc:
        return [Violation(label, "availability", f"availability check raised {type(exc).__name__}: {exc}")]
    if not avail.available and not (isinstance(avail.reason, str) and avail.reason.strip()):
        return [Violation(label, "availability", "unavailable without a reason")]
    return []


def check_registry(registry: Registry) -> list[Violation]:
    """The gate over every backend in a registry, plus every plugin that failed to load."""
    found = [Violation(p.name, "plugin", p.problem) for p in registry.problems()]
    for backend in registry.backends():
        found.extend(validate_backend(backend))
    return found


def _dormant_violations(registry: Registry) -> tuple[list[str], list[Violation]]:
    """Every adapter with a feature flag, built from an empty environment, is off."""
    checked, found = [], []
    for backend in registry.backends():
        if declaration_of(backend).flag is None:
            continue
        label = backend_name(backend)
        checked.append(f"{label} adapter")
        found.extend(validate_backend(backend))
        try:
            avail = availability_of(backend)
        except Exception:
            continue  # already reported by validate_backend
        if avail.available:
            found.append(Violation(label, "adapter", "available with an empty environment (must be dormant)"))
    return checked, found


def check_all(
    env: Mapping[str, str] | None = None,
    *,
    adapters: bool = False,
    files: Iterable[str | Path] = (),
    plugins: Iterable[EntryPoint] | None = None,
) -> ContractReport:
    """The whole gate: the registry ``env`` describes (``os.environ`` by default); with ``adapters``
    every adapter again built from an empty environment (dormant by default); each adapter file.

    ``plugins`` replaces entry-point discovery (tests).
    """
    from memwork.facade.scaffold import load_adapter_file

    plugin_list = None if plugins is None else list(plugins)
    registry = Registry(env, plugins=plugin_list)
    report = ContractReport(registry.names(), check_registry(registry))
    if adapters:
        empty = Registry({}, plugins=plugin_list)
        try:
            checked, found = _dormant_violations(empty)
        finally:
            empty.close()
        report.checked += checked
        report.violations += found
    for path in files:
        report.checked.append(str(path))
        report.violations += validate_backend(load_adapter_file(path))
    registry.close()
    return report
