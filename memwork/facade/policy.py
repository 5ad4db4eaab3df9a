"""Environment -> an immutable, printable :class:`Policy`.

A wrong value never crashes the host application: it becomes a :class:`ConfigIssue` collected on the
policy (``status()`` reports it, the CLI prints it) and the documented default is used instead.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from memwork.backends.base import NAME_RE
from memwork.backends.legacy import LEGACY_URL_VAR, legacy_url_from_env
from memwork.checks import BOOL_HINT, parse_bool
from memwork.errors import UsageError
from memwork.http import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS
from memwork.redaction import redact_value

DEFAULT_BACKEND = "legacy"


@dataclass(frozen=True)
class ConfigIssue:
    """One environment variable that could not be understood; ``value`` is already redacted."""

    field: str
    value: str | None
    problem: str

    def __str__(self) -> str:
        return f"{self.field}={self.value!r}: {self.problem}"


@dataclass(frozen=True)
class Policy:
    """What the facade may do. Immutable; ``str()`` and ``to_dict()`` never show a secret."""

    enabled: bool = True
    profile_enabled: bool = True
    event_log_enabled: bool = True
    vector_enabled: bool = False
    backend: str = DEFAULT_BACKEND
    fail_open: bool = True
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    legacy_database_url: str = field(default="", repr=False)
    errors: tuple[ConfigIssue, ...] = ()

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["legacy_database_url"] = redact_value(LEGACY_URL_VAR, self.legacy_database_url)
        data["errors"] = [asdict(e) for e in self.errors]
        return data

    def __str__(self) -> str:
        lines = [f"{key}: {value}" for key, value in self.to_dict().items() if key != "errors"]
        lines += [f"config error: {issue}" for issue in self.errors]
        return "\n".join(lines)


def _bool(env: Mapping[str, str], name: str, default: bool, errors: list[ConfigIssue]) -> bool:
    """:func:`memwork.checks.parse_bool`, but a bad value becomes an issue and ``default`` is used."""
    raw = env.get(name)
    try:
        return parse_bool(name, raw, default=default)
    except UsageError:
        errors.append(ConfigIssue(name, redact_value(name, raw or ""), BOOL_HINT))
        return default


def _enabled(env: Mapping[str, str], errors: list[ConfigIssue]) -> bool:
    """``MEMORY_ENABLED``; unset -> follows ``USER_CONVERSATION_MEMORY_ENABLED`` (itself default on)."""
    legacy_default = _bool(env, "USER_CONVERSATION_MEMORY_ENABLED", True, errors)
    if (env.get("MEMORY_ENABLED") or "").strip() == "":
        return legacy_default
    return _bool(env, "MEMORY_ENABLED", legacy_default, errors)


def _backend(env: Mapping[str, str], errors: list[ConfigIssue]) -> str:
    raw = (env.get("MEMORY_BACKEND") or "").strip()
    if not raw:
        return DEFAULT_BACKEND
    name = raw.lower()
    if not NAME_RE.match(name):
        errors.append(ConfigIssue("MEMORY_BACKEND", raw, "not a kebab-case backend name; using legacy"))
        return DEFAULT_BACKEND
    return name


def _timeout_ms(env: Mapping[str, str], errors: list[ConfigIssue]) -> int:
    raw = (env.get("MEMORY_BACKEND_TIMEOUT_MS") or "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_MS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 1 <= value <= MAX_TIMEOUT_MS:
        problem = f"expected whole milliseconds 1..{MAX_TIMEOUT_MS}; using {DEFAULT_TIMEOUT_MS}"
        errors.append(ConfigIssue("MEMORY_BACKEND_TIMEOUT_MS", raw, problem))
        return DEFAULT_TIMEOUT_MS
    return value


_CORE_FLAGS = frozenset(
    {
        "MEMORY_ENABLED",
        "USER_CONVERSATION_MEMORY_ENABLED",
        "MEMORY_PROFILE_ENABLED",
        "MEMORY_EVENT_LOG_ENABLED",
        "MEMORY_VECTOR_ENABLED",
    }
)
_BACKEND_FLAG_RE = re.compile(r"^MEMORY_[A-Z0-9_]+_ENABLED\Z")


def _backend_flags(env: Mapping[str, str], errors: list[ConfigIssue]) -> None:
    """Each backend's own ``MEMORY_<NAME>_ENABLED`` switch is a boolean too: report a bad value."""
    for name in sorted(k for k in env if _BACKEND_FLAG_RE.match(k) and k not in _CORE_FLAGS):
        _bool(env, name, False, errors)


def policy_from_env(env: Mapping[str, str] | None = None) -> Policy:
    """Read the Memory V2 flags; every problem is collected on ``Policy.errors``, none is raised."""
    env = os.environ if env is None else env
    errors: list[ConfigIssue] = []
    policy = Policy(
        enabled=_enabled(env, errors),
        profile_enabled=_bool(env, "MEMORY_PROFILE_ENABLED", True, errors),
        event_log_enabled=_bool(env, "MEMORY_EVENT_LOG_ENABLED", True, errors),
        vector_enabled=_bool(env, "MEMORY_VECTOR_ENABLED", False, errors),
        backend=_backend(env, errors),
        fail_open=_bool(env, "MEMORY_FAIL_OPEN", True, errors),
        timeout_ms=_timeout_ms(env, errors),
        legacy_database_url=legacy_url_from_env(env),
    )
    _backend_flags(env, errors)
    return dataclasses.replace(policy, errors=tuple(errors))
