"""A protocol-faithful fake of Letta's archival-memory (passages) REST API.

Shapes from Letta's API reference -- https://docs.letta.com/api-reference/agents/passages/list,
.../passages/create, .../passages/search -- and the server that implements it
(https://github.com/letta-ai/letta, ``letta/server/rest_api/routers/v1/agents.py`` operations
``list_passages``, ``create_passage``, ``search_archival_memory``; ``letta/schemas/passage.py``,
``letta/schemas/memory.py``):

* auth: ``Authorization: Bearer <api key>`` (401 otherwise); optional ``X-Project`` header (recorded).
  Unknown agent: 404 ``{"detail": "Agent not found"}``.
* ``GET /v1/agents/{agent_id}/archival-memory`` query ``after``, ``before`` (passage ids), ``limit``
  (default 100), ``search``, ``ascending`` (default true: oldest first). Answer: a JSON list of
  ``Passage``: ``id`` (``passage-<uuid>``), ``text``, ``tags``, ``metadata``, ``embedding``,
  ``embedding_config`` (``embedding_model``, ``embedding_dim``, ``embedding_endpoint_type``, ...),
  ``created_at``, ``updated_at``, ``archive_id``, ``organization_id``, ``is_deleted``, ... Stored
  embeddings are zero-padded (Letta pads archival vectors to ``MAX_EMBEDDING_DIM``; here to ``pad_to``).
  An ``after`` id that does not exist: 404.
* ``POST /v1/agents/{agent_id}/archival-memory`` body ``CreateArchivalMemory`` ``{text (required),
  tags?, created_at?}`` -> a list with the created ``Passage``; no text: 422.
* ``DELETE /v1/agents/{agent_id}/archival-memory/{memory_id}`` -> 200 ``{"message": "Memory id=..
  successfully deleted"}``; an unknown id: 404.
* ``GET /v1/agents/{agent_id}/archival-memory/search`` query ``query`` (required, 422 without),
  ``tags`` (repeated), ``tag_match_mode`` (``any`` default | ``all``), ``top_k`` (default 5),
  ``start_datetime``, ``end_datetime``. Answer ``{"results": [{"id", "timestamp", "content", "tags"}],
  "count"}``, most relevant first. Tags match exactly. Letta embeds the query with the agent's
  ``embedding_config`` model and ranks by vector similarity (on its native Postgres/pgvector store,
  cosine distance; Letta Cloud's Turbopuffer store fuses it with full-text rank by RRF). This fake's
  rule: with an ``embedder`` (``FakeLetta(embedder=SeededEmbedder(32))`` or a ``HashEmbedder``:
  passages are stored with that model's embedding of their text and its model id), cosine
  similarity of the embedded query with each stored (unpadded) embedding, highest first, ties
  oldest then id; without one (the stored
  vectors are arbitrary), word overlap with the query, then oldest.

``misbehave = True`` makes the search ignore the tag filter (a broken service), for the tenant-guard test.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from fakes.server import FakeService, Request, Response
from memwork.embed import HashEmbedder

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
EMBEDDING_MODEL = "text-embedding-3-small"


def _words(text: str) -> set[str]:
    return {w.strip(".,!?;:-").lower() for w in text.split() if w.strip(".,!?;:-")}


class SeededEmbedder:
    """A stand-in embedding model without ties: each text's vector is drawn from N(0, 1) seeded by the
    SHA-256 of the text (the same text, the same vector). Word-hashing vectors are sums of +-1 and
    tie often among short texts, which would make two correct rankings differ at the k-th place."""

    def __init__(self, dimension: int = 32) -> None:
        self.dimension = dimension
        self.model_id = f"seeded-{dimension}"

    def embed_one(self, text: str) -> list[float]:
        import hashlib
        import random

        rng = random.Random(hashlib.sha256(text.encode("utf-8")).digest())
        return [rng.gauss(0.0, 1.0) for _ in range(self.dimension)]


class FakeLetta(FakeService):
    """One or more agents' archival memory with Letta's listing, insert and search."""

    def __init__(
        self,
        api_key: str = "letta-test-key",
        agent_id: str = "agent-memwork",
        dim: int = 8,
        pad_to: int = 16,
        *,
        embedder: HashEmbedder | SeededEmbedder | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.embedder = embedder
        if embedder is not None:
            dim = embedder.dimension
        self.dim = dim
        self.pad_to = pad_to
        self.agents: dict[str, list[dict[str, Any]]] = {agent_id: []}
        self.agent_id = agent_id
        self.misbehave = False
        self._clock = 0
        base = r"/v1/agents/(?P<agent_id>[^/]+)/archival-memory"
        self.route("GET", base, self.list_passages)
        self.route("POST", base, self.create_passage)
        self.route("GET", base + "/search", self.search)
        self.route("DELETE", base + r"/(?P<memory_id>[^/]+)", self.delete_passage)

    # ---- data -------------------------------------------------------------------------------------
    def seed(self, users: int = 12, per_user: int = 90) -> FakeLetta:
        """``users * per_user`` passages (default 1,080 over 12 users), interleaved in time."""
        for i in range(per_user):
            for u in range(users):
                self.insert(
                    f"user: user-{u:02d} note {i} about topic {i % 7}",
                    [f"memwork-user:user-{u:02d}", f"memwork-session:s-{u:02d}-{i % 2}", "memwork-kind:turn"],
                )
        return self

    def insert(
        self,
        text: str,
        tags: list[str] | None = None,
        agent_id: str | None = None,
        created_at: str | None = None,
    ) -> dict[str, Any]:
        with self.lock:
            self._clock += 1
            stamp = created_at or (EPOCH + timedelta(seconds=self._clock)).isoformat()
            # never all zeros (a real embedding has a direction; a zero vector is quarantined as hostile)
            vector = [round(((self._clock * (k + 3)) % 97 + 1) / 98.0, 6) for k in range(self.dim)]
            if self.embedder is not None:
                vector = [float(x) for x in self.embedder.embed_one(text)]
            passage = {
                "id": f"passage-{uuid.UUID(int=self._clock)}",
                "text": text,
                "tags": list(tags or []),
                "metadata": {},
                "embedding": vector + [0.0] * max(0, self.pad_to - self.dim),
                "embedding_config": {
                    "embedding_endpoint_type": "openai",
                    "embedding_model": self.embedder.model_id if self.embedder else EMBEDDING_MODEL,
                    "embedding_dim": self.dim,
                    "embedding_chunk_size": 300,
                },
                "created_at": stamp,
                "updated_at": stamp,
                "archive_id": "archive-memwork",
                "organization_id": "org-memwork",
                "is_deleted": False,
                "created_by_id": None,
                "last_updated_by_id": None,
                "source_id": None,
                "file_id": None,
                "file_name": None,
            }
            self.agents.setdefault(agent_id or self.agent_id, []).append(passage)
            return passage

    def of_user(self, user_id: str) -> list[dict[str, Any]]:
        tag = f"memwork-user:{user_id}"
        return [p for p in self.agents[self.agent_id] if tag in p["tags"]]

    # ---- helpers ----------------------------------------------------------------------------------
    def _guard(self, request: Request) -> tuple[Response | None, list[dict[str, Any]]]:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return Response(401, {"detail": "Unauthorized"}), []
        passages = self.agents.get(request.params["agent_id"])
        if passages is None:
            return Response(404, {"detail": "Agent not found"}), []
        return None, passages

    @staticmethod
    def _ordered(passages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(passages, key=lambda p: (p["created_at"], p["id"]))

    # ---- endpoints --------------------------------------------------------------------------------
    def list_passages(self, request: Request) -> Response:
        error, passages = self._guard(request)
        if error:
            return error
        ascending = (request.arg("ascending") or "true").lower() != "false"
        items = self._ordered(passages)
        if not ascending:
            items.reverse()
        ids = [p["id"] for p in items]
        after, before = request.arg("after"), request.arg("before")
        for cursor in (after, before):
            if cursor is not None and cursor not in ids:
                return Response(404, {"detail": f"Passage {cursor} not found"})
        if after is not None:
            items = items[ids.index(after) + 1 :]
        if before is not None:
            items = (
                items[: [p["id"] for p in items].index(before)] if before in [p["id"] for p in items] else []
            )
        if request.arg("search"):
            needle = (request.arg("search") or "").lower()
            items = [p for p in items if needle in p["text"].lower()]
        limit = int(request.arg("limit") or 100)
        return Response(200, items[:limit])

    def create_passage(self, request: Request) -> Response:
        error, _ = self._guard(request)
        if error:
            return error
        body = request.body if isinstance(request.body, dict) else {}
        text, tags = body.get("text"), body.get("tags")
        if not isinstance(text, str) or (tags is not None and not isinstance(tags, list)):
            return Response(422, {"detail": [{"loc": ["body", "text"], "msg": "Field required"}]})
        return Response(200, [self.insert(text, tags, request.params["agent_id"], body.get("created_at"))])

    def delete_passage(self, request: Request) -> Response:
        error, passages = self._guard(request)
        if error:
            return error
        memory_id = request.params["memory_id"]
        kept = [p for p in passages if p["id"] != memory_id]
        if len(kept) == len(passages):
            return Response(404, {"detail": f"Passage {memory_id} not found"})
        passages[:] = kept
        return Response(200, {"message": f"Memory id={memory_id} successfully deleted"})

    def search(self, request: Request) -> Response:
        error, passages = self._guard(request)
        if error:
            return error
        query = request.arg("query")
        if not query:
            return Response(422, {"detail": [{"loc": ["query", "query"], "msg": "Field required"}]})
        tags = request.query.get("tags", [])
        mode = request.arg("tag_match_mode") or "any"
        candidates = passages
        if tags and not self.misbehave:
            match = all if mode == "all" else any
            candidates = [p for p in passages if match(t in p["tags"] for t in tags)]
        if self.embedder is not None:
            near = self.embedder.embed_one(query)
            ranked = sorted(
                candidates,
                key=lambda p: (-_cosine(near, p["embedding"][: self.dim]), p["created_at"], p["id"]),
            )
        else:
            wanted = _words(query)
            ranked = sorted(
                candidates, key=lambda p: (-len(wanted & _words(p["text"])), p["created_at"], p["id"])
            )
        top_k = int(request.arg("top_k") or 5)
        results = [
            {"id": p["id"], "timestamp": p["created_at"], "content": p["text"], "tags": p["tags"]}
            for p in ranked[:top_k]
        ]
        return Response(200, {"results": results, "count": len(results)})


def _cosine(a: Any, b: list[float]) -> float:
    dot = sum(float(x) * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(float(x) ** 2 for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
