"""SQL identifier checks and quoting, written once for every store, backend and schema command."""

from __future__ import annotations

import re

from memwork.errors import InvalidIdentifier

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # used with fullmatch: no trailing newline


def check_identifier(name: str, *, field: str = "table") -> str:
    """Return ``name`` when it is a plain SQL identifier (letters, digits, _; max 63), else raise.

    memwork never interpolates user text into SQL except through this check.
    """
    if not isinstance(name, str) or not _IDENT_RE.fullmatch(name):
        raise InvalidIdentifier(
            field, name, "must be a plain identifier: a letter or _, then letters, digits, _"
        )
    return name


def quote_identifier(name: str, *, field: str = "table") -> str:
    """Double-quote a checked identifier for PostgreSQL."""
    return f'"{check_identifier(name, field=field)}"'
