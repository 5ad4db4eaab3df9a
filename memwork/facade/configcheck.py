"""Per-backend configuration check: which variables a backend still needs, and whether it is ready.

The variables are the backend's own declaration (:class:`memwork.contracts.Declaration`), so a
new backend is checked with no change here. Values of secrets (declared secret, or named like
``*_API_KEY``, ``*_PASSWORD``) are never printed; URLs lose their passwords.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from memwork.backends.base import availability_of, declaration_of
from memwork.checks import parse_bool
from memwork.contracts import EnvVar
from memwork.errors import UsageError
from memwork.plugins import Registry
from memwork.redaction import REDACTED, is_secret_name, redact_text, redact_value


def _secret(var: EnvVar) -> bool:
    return var.secret or is_secret_name(var.name)


def _on(var: EnvVar, value: str) -> bool:
    try:
        return parse_bool(var.name, value, default=False)
    except UsageError:
        return False


def _shown(var: EnvVar, value: str | None) -> str | None:
    if value is None or value == "":
        return None
    return REDACTED if _secret(var) else redact_value(var.name, value)


def check_config(registry: Registry, backend_name: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``{backend, available, reason, configured, ready, missing, invalid, variables[]}``.

    ``configured``: every required variable is set and every flag on. ``ready``: configured *and* the
    backend reports itself available (e.g. its embedding module loads). Raises
    UnknownBackend for a bad name.
    """
    backend = registry.get(backend_name)
    decl = declaration_of(backend)
    name = decl.name
    rows, missing, invalid = [], [], []
    for var in decl.variables:
        value = (env.get(var.name) or "").strip()
        if var.required and not value:
            missing.append(var.name)
        elif var.flag and not _on(var, value):
            invalid.append(var.name)
        rows.append(
            {
                "name": var.name,
                "required": var.required,
                "secret": _secret(var),
                "set": bool(value),
                "value": _shown(var, value),
                "default": var.default,
                "description": var.description,
            }
        )
    avail = availability_of(backend)
    configured = not missing and not invalid
    return {
        "backend": name,
        "available": avail.available,
        "reason": None if avail.reason is None else redact_text(avail.reason),
        "select": f"MEMORY_BACKEND={decl.selector}",
        "configured": configured,
        "ready": configured and avail.available,
        "missing": missing,
        "invalid": invalid,
        "variables": rows,
    }


def shell_template(result: Mapping[str, Any]) -> str:
    """A copy-paste ``export`` template; secrets are placeholders, never their values."""
    state = "ready" if result["ready"] else "not ready"
    lines = [f"# memwork check config --backend {result['backend']}: {state}"]
    if result["missing"]:
        lines.append(f"# missing: {', '.join(result['missing'])}")
    if result["invalid"]:
        lines.append(f"# must be 1: {', '.join(result['invalid'])}")
    if not result["available"]:
        lines.append(f"# unavailable: {result['reason']}")
    lines += ["export MEMORY_ENABLED=1", f"export {result['select']}"]
    for row in result["variables"]:
        lines.append(_export_line(row))
    return "\n".join(lines)


def _export_line(row: Mapping[str, Any]) -> str:
    name = row["name"]
    if row["secret"]:
        note = "set; value hidden" if row["set"] else "required secret" if row["required"] else "secret"
        return f"export {name}='<secret>'  # {note}"
    if row["description"].startswith("feature flag"):
        return f"export {name}=1"
    if row["set"]:
        return f"export {name}={shlex.quote(row['value'])}"
    if row["required"]:
        return f"export {name}=''  # required: {row['description']}"
    default = row["default"] or ""
    return f"# export {name}={shlex.quote(default)}  # optional"
