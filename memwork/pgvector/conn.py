"""Connections for the pgvector commands, with unreachable servers turned into one clear error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memwork.errors import ServiceUnavailable
from memwork.redaction import redact_url


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def pg_connection(url: str, *, autocommit: bool = False) -> Iterator[Any]:
    """``psycopg.connect`` on ``url`` (``pg://embedded`` resolved); connection failures and a lost
    server become :class:`ServiceUnavailable` (exit 1, one line, password redacted)."""
    import psycopg

    from memwork.db import libpq_url

    real = libpq_url(url)
    try:
        conn = psycopg.connect(real, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(f"PostgreSQL at {redact_url(url)} unreachable: {_first_line(exc)}") from None
    try:
        with conn:
            yield conn
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise ServiceUnavailable(f"PostgreSQL at {redact_url(url)} failed: {_first_line(exc)}") from exc


@contextmanager
def mysql_errors(url: str) -> Iterator[None]:
    """SQLAlchemy/PyMySQL connection failures as :class:`ServiceUnavailable`."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise ServiceUnavailable(f"MySQL at {redact_url(url)} unreachable: {detail}") from None
