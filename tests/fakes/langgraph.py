"""A protocol-faithful fake of the LangGraph Server / Platform HTTP API endpoints memwork uses.

Shapes, from the public documentation:

* ``POST /runs/wait`` -- a stateless run, "Create Run, Wait for Output",
  https://docs.langchain.com/langsmith/agent-server-api/stateless-runs/create-run-wait-for-output
  Request ``{"assistant_id": "<assistant id or graph name>", "input": {...}, "config"?, "metadata"?,
  "on_disconnect"?: "cancel" | "continue", "on_completion"?: "delete" | "keep", ...}``; the answer is
  the run's **final state values** (a JSON object: here ``{"userId", "sessionId", "query", "policy",
  "memories", "activeGoals"}``). ``assistant_id`` missing -> HTTP 422 ``{"detail": ...}``; an unknown
  assistant -> HTTP 404 ``{"detail": "Assistant '<id>' not found"}``. A run whose graph raised still
  answers HTTP 200, with ``{"__error__": {"error": "<exception type>", "message": "..."}}`` (what the
  SDK's ``runs.wait(..., raise_error=True)`` turns into an exception).
* ``POST /store/items/search`` -- "Search or list items within a namespace prefix",
  https://docs.langchain.com/langsmith/agent-server-api/store/search-or-list-items-within-a-namespace-prefix
  Request ``{"namespace_prefix": ["memories"], "filter"?: {k: v}, "limit": 10, "offset": 0,
  "query"?: str}``; answer ``{"items": [{"namespace": ["memories", "<userId>"], "key": "...",
  "value": {...}, "created_at": "2024-..Z", "updated_at": "..Z"}]}``, items ordered by last update
  (newest first), ``limit`` (default 10) / ``offset`` (default 0) paging; ``filter`` is an exact match
  on value keys. A namespace is a list of labels (no label contains a period).
* Authentication: ``x-api-key: <key>`` (https://reference.langchain.com/python/platform/python_sdk ,
  ``get_client(api_key=...)``); without it, with a key configured, HTTP 403 ``{"detail": "Forbidden"}``.

The policy graph (assistant ``memory_policy``) is faked deterministically: its final state holds a
``policy`` for the input user, the user's store memories whose words meet the query (up to the input
``limit``, default 5) and two active goals. ``misbehave = True`` makes it also return a look-alike
user's memory and goal (a look-alike's when there is one); ``policy_user`` makes the policy name
another user; ``run_error`` makes the run fail (``__error__``). ``runs`` counts run requests
(a run must never be retried).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from fakes.server import FakeService, Request, Response

ASSISTANT = "memory_policy"
LOOKALIKES = ("TenantX", "tenantx", "tenantx ")
TOPICS = ("coffee", "tea", "hiking", "python", "jazz", "tennis", "sushi", "books", "paris", "chess")
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class FakeLangGraph(FakeService):
    """Store items in memory plus one policy graph, served the way LangGraph Server does."""

    def __init__(self, *, api_key: str | None = None, assistants: tuple[str, ...] = (ASSISTANT,)) -> None:
        super().__init__()
        self.api_key = api_key
        self.assistants = set(assistants)
        self.items: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
        self.misbehave = False
        self.run_error: tuple[str, str] | None = None
        self.policy_user: str | None = None
        self.runs = 0
        self.route("POST", r"/runs/wait", self.runs_wait)
        self.route("POST", r"/store/items/search", self.search_items)

    def reset(self) -> None:
        """No recorded requests, no fault, no misbehaviour (the data stays)."""
        self.requests.clear()
        self.fault = None
        self.misbehave = False
        self.run_error = None
        self.policy_user = None
        self.runs = 0

    # ---- data ---------------------------------------------------------------------------------
    def put(self, namespace: list[str], key: str, value: dict[str, Any]) -> None:
        n = len(self.items)
        created = EPOCH + timedelta(minutes=n)
        self.items[(tuple(namespace), key)] = {
            "namespace": list(namespace),
            "key": key,
            "value": value,
            "created_at": _iso(created),
            "updated_at": _iso(created + timedelta(seconds=30)),
        }

    def seed(self, users: int = 10, per_user: int = 90, *, prefix: str = "memories") -> list[str]:
        """``users`` ordinary users plus the look-alikes, ``per_user`` memories each."""
        names = [f"user-{n:02d}" for n in range(users)] + list(LOOKALIKES)
        for user in names:
            for n in range(per_user):
                topic = TOPICS[n % len(TOPICS)]
                self.put(
                    [prefix, user],
                    f"m-{n:03d}",  # the same keys in every user's namespace
                    {"content": f"{user} note {n}: likes {topic}", "type": "preference", "topic": topic,
                     "sessionId": f"s-{n % 4}"},
                )  # fmt: skip
        return names

    # ---- auth ---------------------------------------------------------------------------------
    def _forbidden(self, request: Request) -> Response | None:
        if self.api_key and request.headers.get("x-api-key") != self.api_key:
            return Response(403, {"detail": "Forbidden"})
        return None

    # ---- POST /runs/wait ----------------------------------------------------------------------
    def runs_wait(self, request: Request) -> Response:
        denied = self._forbidden(request)
        if denied:
            return denied
        with self.lock:
            self.runs += 1
        body = request.body if isinstance(request.body, dict) else None
        if body is None or not isinstance(body.get("assistant_id"), str):
            return Response(422, {"detail": "assistant_id: field required"})
        if body["assistant_id"] not in self.assistants:
            return Response(404, {"detail": f"Assistant '{body['assistant_id']}' not found"})
        state = body.get("input") if isinstance(body.get("input"), dict) else {}
        if self.run_error:
            kind, message = self.run_error
            return Response(200, {"__error__": {"error": kind, "message": message}})
        return Response(200, self._policy_graph(dict(state)))

    def _policy_graph(self, state: dict[str, Any]) -> dict[str, Any]:
        """What the fake graph computes: a policy, the user's matching memories and goals."""
        user = state.get("userId")
        query = str(state.get("query") or "")
        limit = state.get("limit") if isinstance(state.get("limit"), int) else 5
        words = set(re.findall(r"\w+", query.lower()))
        mine = [i for (ns, _), i in sorted(self.items.items()) if len(ns) >= 2 and ns[1] == user]
        hits = [
            i for i in mine if words & set(re.findall(r"\w+", str(i["value"].get("content", "")).lower()))
        ]
        memories = [_as_memory(i) for i in hits[:limit]]
        goals: list[Any] = [{"userId": user, "goal": "keep answers short"}, "learn the user's routine"]
        if self.misbehave:
            others = [i for (ns, _), i in sorted(self.items.items()) if len(ns) >= 2 and ns[1] != user]
            lookalike = [i for i in others if i["namespace"][1].strip().lower() == str(user).strip().lower()]
            other = (lookalike or others or [None])[0]
            if other is not None:
                memories.append(_as_memory(other))
                goals.append({"userId": other["namespace"][1], "goal": "another user's goal"})
        route = "semantic" if memories else "profile"
        policy = {
            "userId": self.policy_user or user,
            "route": route,
            "maxMemories": limit,
            "reason": f"{len(hits)} matching memories",
        }
        return {**state, "policy": policy, "memories": memories, "activeGoals": goals}

    # ---- POST /store/items/search -------------------------------------------------------------
    def search_items(self, request: Request) -> Response:
        denied = self._forbidden(request)
        if denied:
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        prefix = body.get("namespace_prefix") or []
        if not isinstance(prefix, list) or not all(isinstance(p, str) for p in prefix):
            return Response(422, {"detail": "namespace_prefix must be a list of strings"})
        limit, offset = body.get("limit", 10), body.get("offset", 0)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 1 or offset < 0:
            return Response(422, {"detail": "limit must be >= 1 and offset >= 0"})
        wanted = body.get("filter") or {}
        found = [
            item
            for (ns, _), item in self.items.items()
            if list(ns[: len(prefix)]) == prefix and all(item["value"].get(k) == v for k, v in wanted.items())
        ]
        found.sort(key=lambda i: (i["updated_at"], i["namespace"], i["key"]), reverse=True)
        return Response(200, {"items": [dict(i) for i in found[offset : offset + limit]]})


def _as_memory(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item["key"],
        "userId": item["namespace"][1],
        "content": item["value"].get("content"),
        "type": item["value"].get("type"),
        "metadata": {"namespace": item["namespace"]},
        "createdAt": item["created_at"],
        "updatedAt": item["updated_at"],
    }
