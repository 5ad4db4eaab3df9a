"""One import of one source into one table at a time: a PostgreSQL advisory lock per (table, source key).

Two runs of the same import would race on one checkpoint row (each overwriting the other's cursor).
The lock is the session's, so a killed process loses it when its server session ends -- which can
take a moment after a SIGKILL, hence the short wait before giving up.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memwork.db import pg_value
from memwork.errors import ImportRunning
from memwork.redaction import redact_text

if TYPE_CHECKING:
    import psycopg


def import_lock_key(table: str, source_key: str) -> int:
    """The advisory lock id of one (table, source) import: 64 bits of a SHA-256, signed."""
    digest = hashlib.sha256(f"memwork-import\x1f{table}\x1f{source_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


LOCK_WAIT_S = 3.0  # a killed run's server session may take a moment to end and drop its lock


@contextmanager
def import_lock(pg: psycopg.Connection[Any], table: str, source_key: str) -> Iterator[None]:
    """Hold this import's advisory lock for the block, or raise :class:`ImportRunning` (after a
    short wait): two runs of one import would race on one checkpoint. The lock is the session's,
    so a killed process loses it when its connection ends."""
    key = import_lock_key(table, source_key)
    deadline = time.monotonic() + LOCK_WAIT_S
    while not pg_value(pg, "SELECT pg_try_advisory_lock(%s)", (key,)):
        if time.monotonic() >= deadline:
            raise ImportRunning(table, redact_text(source_key))
        time.sleep(0.05)
    try:
        yield
    finally:
        if not pg.closed and not pg.broken:
            pg.execute("SELECT pg_advisory_unlock(%s)", (key,))
