"""How memwork reads any backend: the helpers the facade, the registry and the gates use on a backend.

The contract itself -- the :class:`~memwork.contracts.Backend` protocol, :class:`Availability`,
:class:`Declaration`, :class:`EnvVar` and :class:`BaseBackend` -- lives in :mod:`memwork.contracts`
(re-exported here, where backend modules written before it import them from). This module reads a
backend through that contract: its name, what it supports, its availability, its declaration
(derived from plain attributes when it has none) and its configuration problems as unavailable
reasons. ``check config``, ``status``, the contract gate and the canary use these; none of them
names a backend.
"""

from __future__ import annotations

from collections.abc import Mapping

from memwork.contracts import (
    CATEGORIES,
    FLAG_RE,
    NAME_RE,
    OPERATIONS,
    Availability,
    Backend,
    BaseBackend,
    Declaration,
    EnvVar,
    Operation,
    flag_var,
)

__all__ = [  # the contract's names, re-exported for backend modules that import them from here
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
    "availability_of",
    "backend_name",
    "blank_secret_code",
    "configuration_problems",
    "declaration_of",
    "flag_var",
    "missing_code",
    "operation_of",
    "reason_of",
    "supports_of",
]


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
