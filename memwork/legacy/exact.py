"""Exact identifier comparison on every dialect, whatever collation an existing table has.

The legacy tables already exist in production, usually with the server default collation
(``utf8mb4_general_ci``), where ``user_id = 'tenantx'`` also matches ``TenantX``, ``TENANTX``,
``tenantẍ`` and ``tenantx `` -- another tenant's rows. Even ``utf8mb4_bin`` ignores trailing spaces.
:func:`exact_eq` compares bytes instead: ``col = CAST(:v AS BINARY)`` on MySQL/MariaDB, which still
uses the column's index (a ``ref`` lookup on the collation-equal rows, then an exact filter).
SQLite and PostgreSQL already compare text exactly, so there it is a plain ``col = :v``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class exact_text(FunctionElement):  # lower case: reads as SQL, like sqlalchemy.func.*
    """A text value that compares byte for byte: ``CAST(:v AS BINARY)`` on MySQL/MariaDB."""

    type = String()
    inherit_cache = True
    name = "exact_text"


def _only_argument(element: exact_text, compiler: Any, **kw: Any) -> str:
    (argument,) = element.clauses.clauses
    return compiler.process(argument, **kw)


@compiles(exact_text)
def _compile_plain(element: exact_text, compiler: Any, **kw: Any) -> str:
    return _only_argument(element, compiler, **kw)


@compiles(exact_text, "mysql")
@compiles(exact_text, "mariadb")
def _compile_binary(element: exact_text, compiler: Any, **kw: Any) -> str:
    return f"CAST({_only_argument(element, compiler, **kw)} AS BINARY)"


def exact_eq(column: ColumnElement[Any], value: str) -> ColumnElement[bool]:
    """``column = value`` compared exactly (case, accents and trailing spaces all count)."""
    return column == exact_text(value)
