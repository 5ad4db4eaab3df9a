"""Fail-open plumbing: run a backend call in a worker thread with a deadline.

Each call gets its own daemon thread rather than a ``ThreadPoolExecutor`` worker: the executor joins
its workers at interpreter exit, so one hung backend would hang the host's shutdown. A timed-out call
keeps running in its abandoned daemon thread; its result is discarded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from memwork.errors import BackendTimeout

__all__ = ["call_with_timeout"]

T = TypeVar("T")


def call_with_timeout(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """``fn()`` in a daemon thread: its exception re-raised, :class:`BackendTimeout` after the deadline."""
    results: list[T] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            results.append(fn())
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name=f"memwork-{what}", daemon=True).start()
    if not done.wait(timeout_s):
        raise BackendTimeout(f"{what} timed out after {round(timeout_s * 1000)} ms")
    if errors:
        raise errors[0]
    return results[0]
