"""A third-party memory backend with a tenant bug, registered as a plugin is (``memwork.backends``
entry point ``shared-index = "fakes.leaky:from_env"``): it keeps every user's memories in one index
and, every ``MEMORY_SHARED_INDEX_LEAK_EVERY``-th resolve (0: never), searches that index without the
user filter -- the nearest memory of *anyone* comes back. Its items carry no ``userId`` (as the legacy
store's do not), so only their content can show whose they are.

It implements the backend contract (:mod:`memwork.contracts`), not a mock of memwork's code.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from memwork.contracts import BaseBackend

LEAK_EVERY_VAR = "MEMORY_SHARED_INDEX_LEAK_EVERY"


def _words(text: str) -> set[str]:
    return {w.strip(".,;:").lower() for w in text.split() if w.strip(".,;:")}


class SharedIndexBackend(BaseBackend):
    name = "shared-index"
    category = "semantic"
    role = "one index for every user (test plugin)"
    ranking = "semantic"

    def __init__(self, leak_every: int = 0) -> None:
        self.leak_every = leak_every
        self.rows: list[dict[str, str]] = []
        self.calls = itertools.count(1)
        self.lock = threading.Lock()
        self.asked: list[tuple[str, str]] = []  #: (user, query) of every resolve

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        user = str(request["userId"])
        with self.lock:
            for message in request.get("messages") or []:
                if message.get("role") == "user" and message.get("content"):
                    self.rows.append(
                        {"id": uuid.uuid4().hex, "user": user, "content": str(message["content"])}
                    )
        return {"written": len(request.get("messages") or [])}

    def compact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"compacted": 0}

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        user, query = str(request["userId"]), _words(str(request.get("query") or ""))
        leak = self.leak_every > 0 and next(self.calls) % self.leak_every == 0
        with self.lock:
            self.asked.append((user, str(request.get("query") or "")))
            rows = [r for r in self.rows if leak or r["user"] == user]
        rows.sort(key=lambda r: -len(query & _words(r["content"])))
        limit = int(request.get("limit") or 10)
        return {"memories": [{"id": r["id"], "content": r["content"], "type": "fact"} for r in rows[:limit]]}

    def purge_user(self, user_id: str) -> dict[str, int]:
        with self.lock:
            before = len(self.rows)
            self.rows = [r for r in self.rows if r["user"] != user_id]
            return {"items": before - len(self.rows)}


def from_env(env: Mapping[str, str]) -> SharedIndexBackend:
    return SharedIndexBackend(int(env.get(LEAK_EVERY_VAR) or 0))
