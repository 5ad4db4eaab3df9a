"""The backend contract: the :class:`Backend` Protocol the facade relies on, and each backend's declaration.

A backend is any object with a stable lowercase kebab-case ``name``, ``availability()`` (an
:class:`Availability`: ``available`` and, when False, a ``reason``), ``supports(operation)`` and any
non-empty subset of ``resolve(request)``, ``write(request)``, ``compact(request)``. Each operation takes
the JSON-shaped request (``userId``, ``sessionId``, ``query``, ``limit``, ``messages``, optional
``embedding``) and returns a JSON-shaped ``dict``; ``resolve`` returns any of ``profile``,
``semanticMemories``, ``behaviorSummary``, ``activeGoals``, ``memories`` and the facade fills in the rest.

Everything else the rest of memwork needs to know about a backend -- its environment variables (which
are required, which secret), its aliases (``legacy``), its capabilities, its feature flag and its
database-URL variable -- is its :class:`Declaration`, kept in the backend's own module. ``check
config``, ``status``, the contract gate and the canary read the declaration; none of them names a
backend. Subclass :class:`BaseBackend` and set ``declaration`` to get all of it from one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

OPERATIONS = ("resolve", "write", "compact")
CATEGORIES = ("semantic", "extraction", "lifecycle", "behavior", "policy")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")  #: backend names: lowercase kebab-case
FLAG_RE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*\Z")  #: environment variables: SCREAMING_SNAKE_CASE

#: one backend operation: a JSON-shaped request in, a JSON-shaped object out
Operation = Callable[[Mapping[str, Any]], dict[str, Any]]


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
    ``(payload field or operation, where it comes from)`` pairs, listed in README.
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
    :func:`declaration_of` derives its declaration from them.
    """

    declaration: ClassVar[Declaration | None] = None
    name: ClassVar[str] = ""
    category: ClassVar[str | None] = None
    role: ClassVar[str | None] = None
    flag: ClassVar[str | None] = None
    aliases: ClassVar[tuple[str, ...]] = ()

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


# ---- helpers the facade and the gates use on any backend ---------------------------------------
def backend_name(backend: object) -> str:
    """The backend's name, or a label naming its class when it has none (for error messages)."""
    name = getattr(backend, "name", None)
    return name if isinstance(name, str) and name else f"<unnamed {type(backend).__name__}>"


def supports_of(backend: object) -> dict[str, bool]:
    """Which operations the backend implements: its ``supports(op)``, else a callable attribute."""
    method = getattr(backend, "supports", None)
    found: dict[str, bool] = {}
    for op in OPERATIONS:
        implemented = callable(getattr(backend, op, None))
        found[op] = implemented and (bool(method(op)) if callable(method) else True)
    return found


def availability_of(backend: object) -> Availability:
    """``availability()`` when the backend has it, else available (the contract's default).

    Raises whatever the backend raises, or TypeError for a result that is not an Availability; the
    facade wraps this in its fail-open call.
    """
    method = getattr(backend, "availability", None)
    if not callable(method):
        return Availability.ok()
    result = method()
    if not isinstance(result, Availability):
        raise TypeError(f"availability() returned {type(result).__name__}, not Availability")
    return result


def operation_of(backend: object, operation: str) -> Operation:
    """The bound ``resolve``/``write``/``compact`` method (callers check :func:`supports_of` first)."""
    method = getattr(backend, operation, None)
    if not callable(method):
        raise TypeError(f"{backend_name(backend)} does not implement {operation}")
    return method


def declaration_of(backend: object) -> Declaration:
    """The backend's :class:`Declaration`, or one derived from its plain attributes."""
    decl = getattr(backend, "declaration", None)
    if isinstance(decl, Declaration) and decl.name == getattr(backend, "name", decl.name):
        return decl
    flag = getattr(backend, "flag", None)
    variables = decl.variables if isinstance(decl, Declaration) else ()
    if isinstance(flag, str) and flag and not any(v.name == flag for v in variables):
        variables = (flag_var(flag), *variables)
    aliases = getattr(backend, "aliases", ())
    return Declaration(
        name=backend_name(backend),
        category=getattr(backend, "category", None),
        role=getattr(backend, "role", None),
        capabilities=tuple(op for op, yes in supports_of(backend).items() if yes),
        variables=variables,
        aliases=tuple(aliases) if isinstance(aliases, tuple | list) else (),
        database_url_var=decl.database_url_var if isinstance(decl, Declaration) else None,
    )


# ---- configuration problems, as unavailable reasons ---------------------------------------------
#: the reason code of a missing required variable, by the end of its name (first match wins)
_MISSING_CODES = (
    ("_EMBEDDING_MODULE", "embedding_module_not_configured"),
    ("_API_KEY", "api_key_missing"),
    ("_AGENT_ID", "agent_id_missing"),
    ("_PASSWORD", "password_missing"),
    ("_USER", "user_missing"),
    ("_URL", "url_missing"),
)


def missing_code(var: EnvVar) -> str:
    """The reason code for ``var`` being unset (``url_missing``, ``api_key_missing``; flags ``disabled``)."""
    if var.flag:
        return "disabled"
    for suffix, code in _MISSING_CODES:
        if var.name.endswith(suffix):
            return code
    return f"{var.name.lower()}_missing"


def blank_secret_code(var: EnvVar) -> str:
    """The reason code for a secret that is set but blank (``api_key_blank``, ``password_blank``)."""
    return missing_code(var).removesuffix("_missing") + "_blank"


def configuration_problems(decl: Declaration, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(code, detail)`` for the flag being off and each required variable unset, in declaration order.

    A secret that is set but blank (an empty secret file, a template that rendered nothing) is a
    problem too, required or not: read as "no key", it would silently connect without credentials.
    Reading only ``env``: no connection, no import of user code. An adapter adds its own problems
    (an invalid value, an unloadable embedding module) after these.
    """
    from memwork.checks import parse_bool
    from memwork.errors import UsageError

    problems: list[tuple[str, str]] = []
    for var in decl.variables:
        value = (env.get(var.name) or "").strip()
        if var.flag:
            try:
                on = parse_bool(var.name, value, default=False)
            except UsageError:
                on = False
            if not on:
                problems.append(("disabled", f"{var.name} is not 1"))
        elif var.secret and var.name in env and not value:
            problems.append((blank_secret_code(var), f"{var.name} is set but blank; set it, or unset it"))
        elif var.required and not value:
            problems.append((missing_code(var), f"{var.name} is not set"))
    return problems


def reason_of(problems: list[tuple[str, str]]) -> str | None:
    """``code (detail); code (detail)``: the machine-readable code first, then what to set (None: none)."""
    return "; ".join(f"{code} ({detail})" for code, detail in problems) or None
