"""The contract gate: every rule a backend and a source must keep, over one of them, a registry or all.

Backends: the rules (name, operations, category, flag, availability with a reason) are checked on any
object; a backend's declaration is checked too (variables in SCREAMING_SNAKE_CASE, declared
capabilities implemented, a database-URL variable that is one of its variables).

Sources (:func:`validate_source`): the plugin loads and its factory is callable; built from the
environment, the source has a kebab-case name (the one it is registered under), a non-empty ``key``
without a secret in it (no URL password or token, no value of a secret variable) and
``read_page(None, 1)`` returns a :class:`~memwork.contracts.Page` of at most one
:class:`~memwork.contracts.SourceRecord` with a text or None cursor. A source its environment does not
configure (its factory raises a UsageError naming the variable), or whose service refuses the read (a
memwork error: unreachable, unauthorised), is listed as not checked -- that is configuration, not a
broken contract; any other exception is a violation.

:func:`check_all` is the whole gate ``memwork check contracts`` runs: both registries (a plugin of either
group that fails to load is a violation), every adapter with a feature flag built again from an empty
environment (it must then be dormant), adapter files and source files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from memwork.backends.base import availability_of, backend_name, declaration_of, supports_of
from memwork.contracts import CATEGORIES, FLAG_RE, NAME_RE, Page, SourceRecord
from memwork.errors import MemworkError, UsageError
from memwork.plugins import SOURCES, Plugins, Registry
from memwork.redaction import describe_error, first_line, is_secret_name, redact_text

__all__ = [
    "NAME_RE",
    "ContractReport",
    "Violation",
    "check_all",
    "check_registry",
    "check_sources",
    "validate_backend",
    "validate_source",
]

#: a secret variable's value shorter than this is not looked for in a source's key (too many false hits)
MIN_SECRET_CHARS = 6


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
    """What :func:`check_all` checked and every violation it found.

    ``checked``: the backends (and adapter files); ``sources``: the sources (and source files);
    ``unchecked``: a source whose instance rules could not run, and why (not configured, not readable).
    """

    checked: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    unchecked: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "sources": self.sources,
            "unchecked": self.unchecked,
            "violations": [str(v) for v in self.violations],
        }


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
    source_files: Iterable[str | Path] = (),
) -> ContractReport:
    """The whole gate: the backends and the sources ``env`` describes (``os.environ`` by default); with
    ``adapters`` every adapter again built from an empty environment (dormant by default); each adapter
    file (built from an empty environment) and each source file (built from ``env``).

    ``plugins`` replaces entry-point discovery of both groups (tests).
    """
    from memwork.facade.scaffold import load_adapter_file, load_source_factory

    env = dict(os.environ if env is None else env)
    plugin_list = None if plugins is None else list(plugins)
    registry = Registry(env, plugins=plugin_list)
    report = ContractReport(registry.names(), check_registry(registry))
    check_sources(Plugins(SOURCES, plugins=plugin_list), env, report)
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
    for path in source_files:
        label = str(path)
        report.sources.append(label)
        _check_source(label, label, load_source_factory(path), env, report, registered=False)
    registry.close()
    return report


# ---- sources -------------------------------------------------------------------------------------
def check_sources(plugins: Plugins, env: Mapping[str, str], report: ContractReport) -> None:
    """Every source of a registry into ``report``: each plugin that fails to load is a violation, each
    that loads is built from ``env`` and held to :func:`validate_source`."""
    loaded = plugins.load_all()
    report.violations += [Violation(_source_label(p.name), "plugin", p.problem) for p in plugins.problems()]
    for plugin, factory in loaded:
        report.sources.append(plugin.name)
        _check_source(plugin.name, _source_label(plugin.name), factory, env, report, registered=True)


def _source_label(name: str) -> str:
    return f"{name} source"


def _check_source(
    name: str,
    label: str,
    factory: Callable[[Mapping[str, str]], Any],
    env: Mapping[str, str],
    report: ContractReport,
    *,
    registered: bool,
) -> None:
    try:
        source = factory(env)
    except UsageError as exc:  # a variable it needs is not set (or not valid): configuration
        report.unchecked[label] = f"not configured: {redact_text(first_line(exc))}"
        return
    except Exception as exc:
        report.violations.append(Violation(label, "factory", f"raised {describe_error(exc)}"))
        return
    try:
        found, unread = validate_source(source, env, registered_as=name if registered else None)
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                report.violations.append(Violation(label, "close", f"raised {describe_error(exc)}"))
    report.violations += [Violation(label, v.rule, v.problem) for v in found]
    if unread is not None:
        report.unchecked[label] = unread


def validate_source(
    source: object, env: Mapping[str, str] | None = None, *, registered_as: str | None = None
) -> tuple[list[Violation], str | None]:
    """Every source rule ``source`` breaks (empty: it passes), and why its page was not read (None: read).

    Reads one page of one record: a source's read is a read, never a write. ``env``: the variables whose
    secret values must not appear in its key."""
    name = getattr(source, "name", None)
    label = name if isinstance(name, str) and name else f"<unnamed {type(source).__name__}>"
    found: list[Violation] = []
    if not isinstance(name, str) or not NAME_RE.match(name):
        found.append(Violation(label, "name", f"{name!r} is not stable lowercase kebab-case"))
    elif registered_as is not None and name != registered_as:
        found.append(Violation(label, "name", f"registered as {registered_as!r} but named {name!r}"))
    missing = [m for m in ("read_page", "close") if not callable(getattr(source, m, None))]
    if missing:
        found.append(Violation(label, "methods", f"has no {', '.join(missing)}()"))
    found += _key_violations(label, source, env or {})
    if missing:
        return found, None
    problems, unread = _page_violations(label, source)
    return found + problems, unread


def _key_violations(label: str, source: object, env: Mapping[str, str]) -> list[Violation]:
    try:
        key = getattr(source, "key", None)
    except Exception as exc:
        return [Violation(label, "key", f"raised {describe_error(exc)}")]
    if not isinstance(key, str) or not key.strip():
        return [Violation(label, "key", f"{type(key).__name__} {key!r:.40}, not a non-empty text")]
    if redact_text(key) != key:
        return [Violation(label, "key", f"holds a secret (shown redacted: {redact_text(key)!r})")]
    leaked = sorted(
        var
        for var, value in env.items()
        if is_secret_name(var) and len(value.strip()) >= MIN_SECRET_CHARS and value.strip() in key
    )
    if leaked:
        return [Violation(label, "key", f"holds the value of {', '.join(leaked)}")]
    return []


def _page_violations(label: str, source: Any) -> tuple[list[Violation], str | None]:
    try:
        page = source.read_page(None, 1)
    except MemworkError as exc:  # the service refused or is down: not a broken contract
        return [], f"not read: {describe_error(exc)}"
    except Exception as exc:
        return [Violation(label, "read_page", f"raised {describe_error(exc)}")], None
    if not isinstance(page, Page):
        return [Violation(label, "read_page", f"returned {type(page).__name__}, not a Page")], None
    found = []
    if not isinstance(page.records, list) or len(page.records) > 1:
        shown = len(page.records) if isinstance(page.records, list) else type(page.records).__name__
        found.append(Violation(label, "read_page", f"records must be a list of at most size (1): {shown}"))
    elif any(not isinstance(r, SourceRecord) for r in page.records):
        found.append(Violation(label, "read_page", "records must be SourceRecord"))
    if page.next_cursor is not None and not isinstance(page.next_cursor, str):
        kind = type(page.next_cursor).__name__
        found.append(Violation(label, "read_page", f"next_cursor is a {kind}, not text or None"))
    return found, None
