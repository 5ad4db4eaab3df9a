"""Run-wide locks for modifying runs: flock files (filesystem, SQLite) and server locks (PostgreSQL
advisory locks, MySQL ``GET_LOCK``).

Every lock is two-level so runs on different scopes can go in parallel while a whole-store run
excludes all of them: a whole-store run (scope None) takes the store lock *exclusively*; a run on one
scope takes the store lock *shared* plus that scope's lock exclusively. Waiting polls with a short
back-off until a deadline and then raises :class:`~memwork.errors.StoreLocked`. A lock held by
a process that dies is released by the kernel (flock) or by the server when the session ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from memwork.errors import StoreLocked

_FIRST_DELAY, _MAX_DELAY = 0.005, 0.1


def poll_until(try_once: Callable[[], bool], deadline: float, on_timeout: Callable[[], Exception]) -> None:
    """Call ``try_once`` until it returns True; raise ``on_timeout()`` once ``deadline`` has passed."""
    delay = _FIRST_DELAY
    while not try_once():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise on_timeout()
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, _MAX_DELAY)


@contextlib.contextmanager
def flock_run_lock(stem: Path, scope: str | None, timeout: float, store: str) -> Iterator[None]:
    """Hold ``<stem>.lock`` (exclusive, or shared plus ``<stem>.<scope>.lock`` exclusive)."""
    deadline = time.monotonic() + max(timeout, 0.0)
    held: list[int] = []

    def acquire(path: Path, mode: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        held.append(fd)

        def try_once() -> bool:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        poll_until(try_once, deadline, lambda: StoreLocked(store, scope, timeout))

    try:
        if scope is None:
            acquire(stem.with_name(f"{stem.name}.lock"), fcntl.LOCK_EX)
        else:
            acquire(stem.with_name(f"{stem.name}.lock"), fcntl.LOCK_SH)
            acquire(stem.with_name(f"{stem.name}.{scope}.lock"), fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(held):
            os.close(fd)  # closing the descriptor releases its flock


def lock_key(*parts: str) -> int:
    """A signed 64-bit key for ``pg_advisory_lock`` from a few names."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_name(*parts: str) -> str:
    """A MySQL ``GET_LOCK`` name (at most 64 characters) from a few names."""
    return "memwork-run-" + hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=16).hexdigest()
