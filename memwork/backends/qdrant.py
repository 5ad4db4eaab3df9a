"""The Qdrant semantic-memory backend (read-only nearest-neighbour lookup per user); its migration source,
the client and the payload mapping it shares with it are in :mod:`memwork.backends.qdrant_points`.

Dormant unless ``MEMORY_QDRANT_ENABLED=1``, ``MEMORY_QDRANT_URL`` and ``MEMORY_QDRANT_EMBEDDING_MODULE``
are configured; each missing piece is part of the unavailable reason (``embedding_module_not_configured
(...)``, ``url_missing (...)``) and the facade falls back to legacy. The embedding module is imported
only once everything else is configured. It implements ``resolve`` only and is **read-only**: it never
creates a collection, never upserts, never deletes -- the only calls it makes are ``get_collection``,
``query_points`` (resolve) and ``scroll`` (the source). A missing collection is an error.

``MEMORY_QDRANT_URL`` is ``http(s)://host:6333`` (a Qdrant server, REST through the official
``qdrant_client``; its httpx timeout is set under the facade's deadline and the client's version probe
is off, so building the client sends nothing) or ``local:/path/to/storage`` (qdrant-client's in-process
mode on an existing on-disk storage; it takes a file lock, so one process at a time; a path without a
storage is refused, never created). ``qdrant_client`` is imported lazily: importing this module costs
nothing.

Payload fields of a point (the names of the first two are variables):

* ``user_id`` (``MEMORY_QDRANT_USER_FIELD``): the owner; resolve filters on it exactly (``must`` +
  ``match.value``) and :func:`~memwork.backends.payload.only_user` drops any other owner's point;
* ``content`` (``MEMORY_QDRANT_CONTENT_FIELD``): the memory text;
* ``type``; ``created_at`` / ``updated_at`` (also ``createdAt`` / ``updatedAt``): ISO 8601 text or epoch
  seconds (numbers above 1e11 are epoch milliseconds); an unparseable value is kept in metadata;
* ``embedding_model``: the model of the stored vector (else ``MEMORY_QDRANT_EMBEDDING_MODEL``, else None);
* ``session_id`` / ``message_id`` / ``agent_id``: kept on source records;
* ``metadata`` (an object) and every other field: the item's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.payload import memory_item, only_user, user_id_of
from memwork.backends.qdrant_points import (  # the points and the client, shared with the source
    API_KEY_VAR,
    COLLECTION_VAR,
    CONTENT_FIELD_VAR,
    DEFAULT_COLLECTION,
    DEFAULT_CONTENT_FIELD,
    DEFAULT_USER_FIELD,
    MODEL_VAR,
    NAME,
    URL_VAR,
    USER_FIELD_VAR,
    VECTOR_NAME_VAR,
    Location,
    PayloadFields,
    _Connection,
    _fields_from_env,
    _setting,
    parse_location,
    split_payload,
)
from memwork.contracts import (
    RANKING_SEMANTIC,
    Availability,
    BaseBackend,
    Declaration,
    EnvVar,
    flag_var,
)
from memwork.embed import QueryModuleEmbedder
from memwork.errors import BackendError, UsageError
from memwork.http import HttpSettings, settings_from_env
from memwork.redaction import describe_error

if TYPE_CHECKING:
    from qdrant_client import QdrantClient
    from qdrant_client.http.models import CollectionInfo

FLAG_VAR = "MEMORY_QDRANT_ENABLED"
MODULE_VAR = "MEMORY_QDRANT_EMBEDDING_MODULE"

DEFAULT_LIMIT = 40
MAX_LIMIT = 1000


DECLARATION = Declaration(
    name=NAME,
    category="semantic",
    role="scale-out vector store (read-only semantic lookup)",
    capabilities=("resolve",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(
            URL_VAR, "Qdrant URL: http(s)://host:6333, or local:/path (in-process storage)", required=True
        ),
        EnvVar(MODULE_VAR, "embedding module (query vectors)", required=True),
        EnvVar(COLLECTION_VAR, "collection to search (never created)", default=DEFAULT_COLLECTION),
        EnvVar(API_KEY_VAR, "Qdrant API key (sent as the api-key header)", secret=True),
        EnvVar(USER_FIELD_VAR, "payload field holding the user id", default=DEFAULT_USER_FIELD),
        EnvVar(CONTENT_FIELD_VAR, "payload field holding the memory text", default=DEFAULT_CONTENT_FIELD),
        EnvVar(VECTOR_NAME_VAR, "named vector to search (unset: the collection's unnamed vector)"),
        EnvVar(MODEL_VAR, "model id of the stored vectors when a point's payload has no embedding_model"),
    ),
    mapping=(
        (
            "semanticMemories",
            "the user's Qdrant points nearest first (query_points, filter must user field == userId): "
            "point id -> id, payload.<user field> -> userId, payload.<content field> -> content, "
            "payload.type -> type, Qdrant score -> score (distance = 1 - score for Cosine, = score for "
            "Euclid/Manhattan, none for Dot), payload.created_at/updated_at -> createdAt/updatedAt, "
            "payload.embedding_model or MEMORY_QDRANT_EMBEDDING_MODEL -> embeddingModel, "
            "payload.metadata and the remaining payload fields -> metadata",
        ),
        ("write", "not supported: read-only (legacy keeps writing)"),
        ("compact", "not supported: read-only (legacy keeps compacting)"),
    ),
)

#: distances where Qdrant's score is a distance (smaller is nearer); Cosine and Dot are similarities
_DISTANCE_METRICS = ("euclid", "manhattan")


def _distance(metric: str, score: float) -> float | None:
    """The distance the score stands for: 1 - cosine similarity, the score itself for Euclid/Manhattan."""
    if metric == "cosine":
        return 1.0 - score
    if metric in _DISTANCE_METRICS:
        return score
    return None


# ---- the backend ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class VectorSpace:
    """The searched vector of the collection: its distance metric (lowercase) and dimension."""

    metric: str
    size: int | None


class QdrantBackend(BaseBackend):
    """Semantic memory in a Qdrant collection; ``resolve`` returns ``semanticMemories`` nearest first."""

    ranking = RANKING_SEMANTIC

    declaration = DECLARATION

    def __init__(
        self,
        location: Location | None,
        *,
        collection: str = DEFAULT_COLLECTION,
        api_key: str | None = None,
        fields: PayloadFields | None = None,
        vector_name: str | None = None,
        query_embedder: QueryModuleEmbedder | None = None,
        settings: HttpSettings | None = None,
        unavailable: str | None = None,
        client: QdrantClient | None = None,
    ) -> None:
        """``client``: an already open client (tests); otherwise one is opened on the first resolve."""
        self.settings = settings or HttpSettings()
        self.collection = collection
        self.fields = fields or PayloadFields()
        self.vector_name = vector_name
        self.query_embedder = query_embedder
        self._unavailable = unavailable
        if location is None and client is None and not unavailable:
            self._unavailable = f"url_missing ({URL_VAR} is not set)"
        self._connection = _Connection(
            location,
            collection,
            api_key=api_key,
            timeout_s=self.settings.timeout_s,
            connect_timeout_s=self.settings.connect_timeout_s,
            client=client,
        )
        self._space: VectorSpace | None = None

    # ---- contract -------------------------------------------------------------------------------
    def availability(self) -> Availability:
        """From the configuration alone: never touches the network or the storage."""
        return Availability.no(self._unavailable) if self._unavailable else Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The user's nearest points to ``embedding`` (or the embedded ``query``), nearest first."""
        if self._unavailable:
            raise BackendError(f"{NAME} unavailable: {self._unavailable}")
        user_id = user_id_of(request)
        limit = _limit(request.get("limit"))
        if limit == 0:
            return {"semanticMemories": []}
        vector = self._query_vector(request)
        space = self._vector_space()
        if space.size is not None and len(vector) != space.size:
            raise BackendError(
                f"{NAME}: the query vector has {len(vector)} dimensions, {self._connection.where()} "
                f"holds {space.size}-dimensional vectors"
            )
        points = self._search(user_id, vector, limit)
        items = [self._item(point, space.metric) for point in points]
        items.sort(key=lambda item: _nearness(space.metric, item["score"]))
        return {"semanticMemories": only_user(items, user_id, backend=NAME)}

    def close(self) -> None:
        self._connection.close()

    # ---- internals ------------------------------------------------------------------------------
    def _query_vector(self, request: Mapping[str, Any]) -> list[float]:
        embedding = request.get("embedding")
        if embedding is not None:
            try:
                array = np.asarray(embedding, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise UsageError("embedding", "<non-numeric>", "must be a list of numbers") from None
            if array.size == 0 or not np.all(np.isfinite(array)):
                raise UsageError("embedding", "<vector>", "must be a non-empty list of finite numbers")
            return [float(x) for x in array]
        query = request.get("query")
        if not isinstance(query, str) or not query.strip():
            raise UsageError("query", query, "resolve needs a non-empty query or an embedding")
        if self.query_embedder is None:
            raise BackendError(f"{NAME} resolve needs an embedding or {MODULE_VAR}")
        return [float(x) for x in self.query_embedder.embed_query(query, request)]

    def _vector_space(self) -> VectorSpace:
        """The searched vector's metric and size, read once (``get_collection``: a missing collection
        is an error here, before any search)."""
        if self._space is None:
            info = self._connection.call(
                "get_collection",
                lambda c: c.get_collection(self.collection),
                retries=self.settings.retries,
                backoff_s=self.settings.backoff_s,
            )
            self._space = vector_space(info, self.vector_name, self._connection.where())
        return self._space

    def _search(self, user_id: str, vector: list[float], limit: int) -> list[Any]:
        from qdrant_client import models

        user_only = models.Filter(
            must=[models.FieldCondition(key=self.fields.user, match=models.MatchValue(value=user_id))]
        )
        response = self._connection.call(
            "query_points",
            lambda c: c.query_points(
                self.collection,
                query=vector,
                using=self.vector_name,
                query_filter=user_only,
                limit=limit,
                with_payload=True,
                with_vectors=False,
            ),
            retries=self.settings.retries,
            backoff_s=self.settings.backoff_s,
        )
        return list(response.points)

    def _item(self, point: Any, metric: str) -> dict[str, Any]:
        found = split_payload(point.payload, self.fields)
        score = float(point.score)
        extra: dict[str, Any] = {}
        distance = _distance(metric, score)
        if distance is not None:
            extra["distance"] = distance
        return memory_item(
            id=point.id,
            user_id=found.user_id if isinstance(found.user_id, str) else "",
            content=found.content if isinstance(found.content, str) else str(found.content or ""),
            source=NAME,
            score=score,
            type=found.type,
            metadata=found.metadata,
            created_at=found.created_at,
            updated_at=found.updated_at,
            embedding_model=found.model,
            **extra,
        )


def _nearness(metric: str, score: float | None) -> float:
    """Sort key, nearest first: ascending distance for Euclid/Manhattan, descending similarity else."""
    value = 0.0 if score is None else float(score)
    return value if metric in _DISTANCE_METRICS else -value


def vector_space(info: CollectionInfo, vector_name: str | None, where: str) -> VectorSpace:
    """The metric and size of the vector resolve searches, or a BackendError saying what to set."""
    vectors = info.config.params.vectors
    if isinstance(vectors, Mapping):
        if vector_name is None:
            names = ", ".join(sorted(vectors)) or "none"
            raise BackendError(f"{NAME}: {where} has named vectors ({names}); set {VECTOR_NAME_VAR}")
        params = vectors.get(vector_name)
        if params is None:
            names = ", ".join(sorted(vectors)) or "none"
            raise BackendError(f"{NAME}: {where} has no vector {vector_name!r} (it has: {names})")
    elif vectors is None:
        raise BackendError(f"{NAME}: {where} has no dense vectors")
    elif vector_name is not None:
        raise BackendError(f"{NAME}: {where} has one unnamed vector; unset {VECTOR_NAME_VAR}")
    else:
        params = vectors
    metric = str(getattr(params.distance, "value", params.distance)).lower()
    return VectorSpace(metric, int(params.size) if params.size is not None else None)


def _limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError("limit", value, "must be a non-negative integer")
    return min(value, MAX_LIMIT)


def from_env(env: Mapping[str, str]) -> QdrantBackend:
    """Build the backend from environment variables; never raises, never connects, never imports
    qdrant_client, and imports the embedding module only once everything else is configured."""
    problems = configuration_problems(DECLARATION, env)
    location = None
    raw_url = _setting(env, URL_VAR)
    if raw_url is not None:
        try:
            location = parse_location(raw_url)
        except UsageError as exc:
            problems.append(("url_invalid", str(exc)))
    embedder = None
    module_spec = _setting(env, MODULE_VAR)
    if module_spec is not None and not problems:
        try:
            embedder = QueryModuleEmbedder(module_spec, field=MODULE_VAR)
        except Exception as exc:  # a user module that fails to import must not break the host
            problems.append(("embedding_module_invalid", describe_error(exc)))
    return QdrantBackend(
        location,
        collection=_setting(env, COLLECTION_VAR, DEFAULT_COLLECTION) or DEFAULT_COLLECTION,
        api_key=_setting(env, API_KEY_VAR),
        fields=_fields_from_env(env),
        vector_name=_setting(env, VECTOR_NAME_VAR),
        query_embedder=embedder,
        settings=settings_from_env(env),
        unavailable=reason_of(problems),
    )
