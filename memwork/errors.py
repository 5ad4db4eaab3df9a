"""Small domain exceptions. The CLI maps them to exit codes once, in ``memwork.cli``.

Exit codes: 0 ok, 1 a check or verdict failed (:class:`CheckFailed`), 2 usage or input error
(:class:`UsageError` and its subclasses).
"""

from __future__ import annotations


class MemworkError(Exception):
    """Base of every error memwork raises on purpose."""

    exit_code = 2


class UsageError(MemworkError):
    """Bad input: names the field and the value. Exit code 2, nothing written."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}={value!r}: {problem}")


class InvalidPath(UsageError):
    """An entry path that is absolute, empty, escapes with ``..`` or holds a forbidden character."""

    def __init__(self, value: object, problem: str) -> None:
        super().__init__("path", value, problem)


class ContentTooLarge(UsageError):
    """Entry content over the store's size limit."""


class InvalidIdentifier(UsageError):
    """A SQL identifier (table, index, column) that is not a plain name."""


class ConfigError(UsageError):
    """A configuration value (usually an environment variable) that cannot be understood."""


class UnknownBackend(UsageError):
    """A backend name the registry does not know."""


class EntryNotFound(MemworkError):
    """No entry at this path in this scope."""

    def __init__(self, path: str, scope: str = "default") -> None:
        self.path = path
        self.scope = scope
        super().__init__(f"path={path!r}: no entry in scope {scope!r}")


class StubChainError(MemworkError):
    """Following stub redirects hit a cycle or went deeper than the hop limit."""

    def __init__(self, chain: list[str], problem: str) -> None:
        self.chain = chain
        super().__init__(f"path={chain[0]!r}: {problem}: {' -> '.join(chain)}")


class ServiceUnavailable(MemworkError):
    """A server memwork needs (PostgreSQL, MySQL, Redis, ...) cannot be reached."""

    exit_code = 1


class CheckFailed(MemworkError):
    """A check, gate or verdict failed. Exit code 1."""

    exit_code = 1


class BackendError(MemworkError):
    """A memory backend failed (raised only when fail-open is off)."""

    exit_code = 1


class BackendTimeout(BackendError):
    """A memory backend did not answer within its per-call timeout."""


class ReportExecutionError(MemworkError):
    """A report notebook failed in a cell; carries the cell's error in one line."""

    exit_code = 2
