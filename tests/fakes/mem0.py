"""A protocol-faithful fake of the Mem0 platform REST API (the endpoints memwork uses).

Shapes from Mem0's public API reference -- https://docs.mem0.ai/api-reference (pages "Add Memories",
"Get Memories", "Search Memories", "Get Users") and its OpenAPI document
(https://github.com/mem0ai/mem0/blob/main/docs/openapi.json, operations ``memories_create``,
``memories_list``, ``memories_search_v2``, ``entities_list``, ``memories_delete``):

* auth: header ``Authorization: Token <api key>``; otherwise 401 ``{"detail": "..."}``.
* ``POST /v1/memories/`` body ``MemoryInput``: ``messages`` (list of ``{role, content}``, required),
  at least one of ``user_id`` / ``agent_id`` / ``app_id`` / ``run_id``, ``metadata`` (object), ``infer``
  (default true), ``version``, ``project_id``, ``org_id``. Bad input: 400 ``{"error": "400 Bad Request",
  "details": {"message": ...}}``. Answer (queued, async): a bare list ``[{"message": "Memory processing
  has been queued for background execution", "status": "PENDING", "event_id": <uuid>}]``.
  ``infer: false`` stores every non-system message verbatim as one memory with ``metadata.role`` (as
  Mem0's own ``Memory.add(infer=False)`` does); ``infer: true`` runs "extraction" -- this fake's stand-in
  for the LLM stores each user message as ``Fact: <content>`` and skips one the user already has (NOOP).
* ``GET /v1/memories/`` query ``user_id``, ``agent_id``, ``app_id``, ``run_id``, ``page``, ``page_size``
  (default 100): with both ``page`` and ``page_size`` a Django-REST page ``{"count", "next", "previous",
  "results"}`` where ``next``/``previous`` are absolute URLs or null, a page past the end is 404
  ``{"detail": "Invalid page."}``; without them a bare list. Items: ``id``, ``memory``, ``user_id``,
  ``metadata``, ``categories``, ``created_at``, ``updated_at``, ``expiration_date`` (entity filters are
  exact, case-sensitive matches).
* ``POST /v2/memories/search/`` body ``{query, filters, top_k (10), threshold, version}``: ``filters``
  is ``{"user_id": ...}`` or ``{"AND"|"OR": [{field: value}, ...]}``; an entity id is required (400
  otherwise). Answer: a bare list of items as above plus ``score`` in [0, 1], best first.
* ``GET /v1/entities/``: ``{"count", "next", "previous", "results": [{"id", "name", "type": "user"|...,
  "created_at", "updated_at", "owner", "metadata", "total_memories"}]}``, paged by ``page`` (Django
  REST pagination, ``entity_page_size`` per page).
* ``DELETE /v1/memories/?user_id=``: ``{"message": "Memories deleted successfully!"}``.

``misbehave = True`` makes the listing and the search ignore the user filter (a broken or misconfigured
service), for the tenant-guard tests.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from fakes.server import FakeService, Request, Response

QUEUED = "Memory processing has been queued for background execution"
ENTITY_FIELDS = ("user_id", "agent_id", "app_id", "run_id")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _words(text: str) -> set[str]:
    return {w.strip(".,!?;:").lower() for w in text.split() if w.strip(".,!?;:")}


class FakeMem0(FakeService):
    """In-memory Mem0: memories, users, pagination, search, auth, and a misbehave switch."""

    def __init__(self, api_key: str = "m0-test-key", entity_page_size: int = 100) -> None:
        super().__init__()
        self.api_key = api_key
        self.entity_page_size = entity_page_size
        self.memories: list[dict[str, Any]] = []
        self.misbehave = False
        self.add_status: int | None = None  #: answer every add with this status (reads keep working)
        self._clock = 0
        self.route("POST", r"/v1/memories/", self.add)
        self.route("GET", r"/v1/memories/", self.list_memories)
        self.route("DELETE", r"/v1/memories/", self.delete_all)
        self.route("POST", r"/v2/memories/search/", self.search)
        self.route("GET", r"/v1/entities/", self.entities)

    # ---- seeding ----------------------------------------------------------------------------------
    def seed(self, users: int = 12, per_user: int = 90) -> FakeMem0:
        """``users * per_user`` memories (default 1,080 over 12 users), two sessions per user."""
        for u in range(users):
            for i in range(per_user):
                self.store(
                    f"user-{u:02d}",
                    f"user-{u:02d} fact {i}: likes topic {i % 7} and colour {u % 5}",
                    run_id=f"s-{u:02d}-{i % 2}",
                    metadata={"seq": i, "topic": i % 7},
                    categories=[f"topic-{i % 7}"],
                )
        return self

    def store(
        self,
        user_id: str | None,
        text: str,
        *,
        run_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        categories: list[str] | None = None,
    ) -> dict[str, Any]:
        with self.lock:
            self._clock += 1
            stamp = (EPOCH + timedelta(seconds=self._clock)).isoformat()
            memory = {
                "id": str(uuid.UUID(int=self._clock)),
                "memory": text,
                "user_id": user_id,
                "agent_id": agent_id,
                "run_id": run_id,
                "metadata": dict(metadata or {}),
                "categories": list(categories or []),
                "created_at": stamp,
                "updated_at": stamp,
                "expiration_date": None,
            }
            self.memories.append(memory)
            return memory

    def of_user(self, user_id: str) -> list[dict[str, Any]]:
        return [m for m in self.memories if m["user_id"] == user_id]

    # ---- helpers ----------------------------------------------------------------------------------
    def _denied(self, request: Request) -> Response | None:
        if request.headers.get("authorization") != f"Token {self.api_key}":
            return Response(401, {"detail": "Invalid API key."})
        return None

    @staticmethod
    def _bad(message: str) -> Response:
        return Response(400, {"error": "400 Bad Request", "details": {"message": message}})

    @staticmethod
    def _public(memory: dict[str, Any]) -> dict[str, Any]:
        """The documented item shape (run_id is not part of the v1 listing's items)."""
        return {k: v for k, v in memory.items() if k not in ("run_id", "agent_id")}

    def _matching(self, criteria: dict[str, str]) -> list[dict[str, Any]]:
        if self.misbehave:  # ignores the entity filters, as a broken service would
            return list(self.memories)
        return [m for m in self.memories if all(m.get(k) == v for k, v in criteria.items())]

    def _page_url(self, request: Request, page: int) -> str:
        query = {k: v[0] for k, v in request.query.items() if k != "page"}
        host = request.headers.get("host", "127.0.0.1")
        return f"http://{host}{request.path}?{urlencode({**query, 'page': page})}"

    def _paginate(self, request: Request, items: list[Any], page_size: int) -> Response:
        try:
            page = int(request.arg("page") or 1)
        except ValueError:
            return Response(404, {"detail": "Invalid page."})
        pages = max(1, math.ceil(len(items) / page_size))
        if page < 1 or page > pages:
            return Response(404, {"detail": "Invalid page."})
        chunk = items[(page - 1) * page_size : page * page_size]
        return Response(
            200,
            {
                "count": len(items),
                "next": self._page_url(request, page + 1) if page < pages else None,
                "previous": self._page_url(request, page - 1) if page > 1 else None,
                "results": chunk,
            },
        )

    # ---- endpoints --------------------------------------------------------------------------------
    def add(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied:
            return denied
        if self.add_status is not None:
            return Response(self.add_status, {"detail": f"injected {self.add_status}"})
        body = request.body if isinstance(request.body, dict) else None
        if body is None or not isinstance(body.get("messages"), list):
            return self._bad("messages must be a list")
        if not any(body.get(k) for k in ENTITY_FIELDS):
            return self._bad("At least one of user_id, agent_id, app_id or run_id is required.")
        metadata = body.get("metadata") or {}
        user_id, run_id = body.get("user_id"), body.get("run_id")
        for message in body["messages"]:
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                return self._bad("each message needs role and content")
        for message in body["messages"]:
            role, content = message["role"], message["content"]
            if body.get("infer", True) is False:
                if role == "system":
                    continue
                self.store(user_id, content, run_id=run_id, metadata={**metadata, "role": role})
            elif role == "user" and f"Fact: {content}" not in {m["memory"] for m in self.of_user(user_id)}:
                self.store(user_id, f"Fact: {content}", run_id=run_id, metadata=dict(metadata))
        return Response(200, [{"message": QUEUED, "status": "PENDING", "event_id": str(uuid.uuid4())}])

    def list_memories(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied:
            return denied
        criteria = {k: request.arg(k) for k in ENTITY_FIELDS if request.arg(k) is not None}
        items = [self._public(m) for m in self._matching(criteria)]  # type: ignore[arg-type]
        if request.arg("page") is None or request.arg("page_size") is None:
            return Response(200, items[:100])
        try:
            page_size = int(request.arg("page_size") or 100)
        except ValueError:
            return self._bad("page_size must be an integer")
        return self._paginate(request, items, max(1, page_size))

    def delete_all(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied:
            return denied
        criteria = {k: request.arg(k) for k in ENTITY_FIELDS if request.arg(k) is not None}
        if not criteria:
            return self._bad("At least one filter is required.")
        with self.lock:
            self.memories = [m for m in self.memories if not all(m.get(k) == v for k, v in criteria.items())]
        return Response(200, {"message": "Memories deleted successfully!"})

    def search(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied:
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        query, filters = body.get("query"), body.get("filters")
        if not isinstance(query, str) or not isinstance(filters, dict):
            return self._bad("query and filters are required")
        clauses = filters.get("AND") or filters.get("OR") or [filters]
        criteria: dict[str, str] = {}
        for clause in clauses:
            criteria.update({k: v for k, v in clause.items() if k in ENTITY_FIELDS and isinstance(v, str)})
        if not criteria:
            return self._bad("filters need at least one of user_id, agent_id, app_id, run_id")
        wanted = _words(query)
        scored = []
        for memory in self._matching(criteria):
            words = _words(memory["memory"])
            score = len(wanted & words) / max(1, len(wanted | words))
            scored.append({**self._public(memory), "score": round(score, 6)})
        scored.sort(key=lambda m: (-m["score"], m["created_at"]))
        return Response(200, scored[: int(body.get("top_k") or 10)])

    def entities(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied:
            return denied
        users = sorted({m["user_id"] for m in self.memories if m["user_id"] is not None})
        results = [
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"user:{name}")),
                "name": name,
                "type": "user",
                "created_at": EPOCH.isoformat(),
                "updated_at": EPOCH.isoformat(),
                "owner": "memwork-tests",
                "metadata": None,
                "total_memories": len(self.of_user(name)),
            }
            for name in users
        ]
        return self._paginate(request, results, self.entity_page_size)
