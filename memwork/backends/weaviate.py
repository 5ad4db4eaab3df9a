"""The Weaviate semantic backend: a read-only near-vector GraphQL search per user, and a migration source.

Dormant unless ``MEMORY_WEAVIATE_ENABLED=1``, ``MEMORY_WEAVIATE_URL`` and
``MEMORY_WEAVIATE_EMBEDDING_MODULE`` are set (the module is imported only once everything else is
configured). ``resolve`` sends one GraphQL ``Get`` to ``POST /v1/graphql``::

    { Get { MemindMemory(nearVector: {vector: [...]},
                         where: {path: ["userId"], operator: Equal, valueText: "alice"},
                         limit: 40)
            { content userId _additional { id distance creationTimeUnix lastUpdateTimeUnix } } } }

Every value in it is JSON-encoded (a JSON string or number is a valid GraphQL literal), never
concatenated raw; the class and property names are checked as GraphQL names first. GraphQL reports
errors with HTTP 200 and an ``errors`` array: that is a failure here, never an empty result.

Tenant scoping is twofold: the ``where`` filter is part of every query, and the results go through
:func:`~memwork.backends.payload.only_user`. The second matters: a ``text`` property with Weaviate's
default ``word`` tokenization matches ``Equal`` case-insensitively per word, so ``TenantX``,
``tenantx`` and ``tenantx `` all pass the filter of ``tenantx``; only the exact guard keeps them
apart (or create the user property with ``tokenization: field``).

The source (:class:`WeaviateSource`) lists a class with the REST cursor API
``GET /v1/objects?class=C&limit=N&after=<uuid>&include=vector`` to the end, keeping each object's
uuid, properties, timestamps and vector; its ``search`` is the backend's near-vector query
(:func:`near_vector_search`, the same guard), for the certificate's ``preserved`` gate.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.payload import memory_item, only_user, user_id_of
from memwork.contracts import (
    RANKING_SEMANTIC,
    Availability,
    BaseBackend,
    Declaration,
    EnvVar,
    Page,
    flag_var,
    record_page,
    require,
)
from memwork.errors import BackendError, UsageError
from memwork.http import JsonHttpClient, settings_from_env
from memwork.loggable import SERVER_SAID
from memwork.redaction import redact_url

if TYPE_CHECKING:
    from memwork.embed import QueryModuleEmbedder

NAME = "weaviate"
FLAG_VAR = "MEMORY_WEAVIATE_ENABLED"
URL_VAR = "MEMORY_WEAVIATE_URL"
MODULE_VAR = "MEMORY_WEAVIATE_EMBEDDING_MODULE"
COLLECTION_VAR = "MEMORY_WEAVIATE_COLLECTION"
API_KEY_VAR = "MEMORY_WEAVIATE_API_KEY"
USER_PROPERTY_VAR = "MEMORY_WEAVIATE_USER_PROPERTY"
CONTENT_PROPERTY_VAR = "MEMORY_WEAVIATE_CONTENT_PROPERTY"
MODEL_PROPERTY_VAR = "MEMORY_WEAVIATE_MODEL_PROPERTY"
MODEL_VAR = "MEMORY_WEAVIATE_EMBEDDING_MODEL"
DISTANCE_VAR = "MEMORY_WEAVIATE_DISTANCE"

DEFAULT_COLLECTION = "MemindMemory"
DEFAULT_USER_PROPERTY = "userId"
DEFAULT_CONTENT_PROPERTY = "content"
DEFAULT_MODEL_PROPERTY = "embeddingModel"
DEFAULT_LIMIT = 40
MAX_LIMIT = 200
DISTANCES = ("cosine", "dot", "l2-squared", "manhattan", "hamming")

#: GraphQL names (https://spec.graphql.org/October2021/#Name); Weaviate classes start upper-case
_GRAPHQL_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_CLASS_NAME = re.compile(r"[A-Z][_0-9A-Za-z]*")
_ADDITIONAL = "id distance creationTimeUnix lastUpdateTimeUnix"

DECLARATION = Declaration(
    name=NAME,
    category="semantic",
    role="knowledge graph fusion (read-only near-vector GraphQL search)",
    capabilities=("resolve",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(URL_VAR, "Weaviate URL, e.g. http://weaviate:8080", required=True),
        EnvVar(MODULE_VAR, "embedding module (embed_query) for the query vector", required=True),
        EnvVar(
            COLLECTION_VAR, "Weaviate class (collection) holding the memories", default=DEFAULT_COLLECTION
        ),
        EnvVar(API_KEY_VAR, "API key, sent as Authorization: Bearer", secret=True),
        EnvVar(USER_PROPERTY_VAR, "property holding the user id", default=DEFAULT_USER_PROPERTY),
        EnvVar(CONTENT_PROPERTY_VAR, "property holding the memory text", default=DEFAULT_CONTENT_PROPERTY),
        EnvVar(
            MODEL_PROPERTY_VAR, "property naming the embedding model (source)", default=DEFAULT_MODEL_PROPERTY
        ),
        EnvVar(MODEL_VAR, "embedding model id when no object property names it"),
        EnvVar(DISTANCE_VAR, "the class's distance metric (for score)", default="cosine"),
    ),
    mapping=(
        (
            "semanticMemories",
            "GraphQL Get nearVector results of the user, nearest first: _additional.id -> id, "
            "<user property> -> userId, <content property> -> content, 1 - _additional.distance -> score "
            "(cosine; dot: -distance; other metrics: 1 / (1 + distance)), distance -> distance, "
            "_additional.creationTimeUnix/lastUpdateTimeUnix (ms) -> createdAt/updatedAt, "
            "MEMORY_WEAVIATE_EMBEDDING_MODEL -> embeddingModel",
        ),
        ("source", "GET /v1/objects cursor listing (after=<uuid>, include=vector): id, properties, vector"),
    ),
)


# ---- settings shared by the backend and the source ----------------------------------------------
def _name_setting(env: Mapping[str, str], var: str, default: str, pattern: re.Pattern[str]) -> str:
    """A class or property name from ``var``: a GraphQL name, or a UsageError naming the variable."""
    value = (env.get(var) or "").strip() or default
    if not pattern.fullmatch(value):
        kind = (
            "a Weaviate class name (A-Z, then letters, digits, _)"
            if pattern is _CLASS_NAME
            else "a GraphQL name"
        )
        raise UsageError(var, value, f"must be {kind}")
    return value


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _client(env: Mapping[str, str], url: str, api_key: str | None) -> JsonHttpClient:
    return JsonHttpClient(
        NAME, url, headers=_headers(api_key), settings=settings_from_env(env), secrets=[api_key or ""]
    )


# ---- the backend ------------------------------------------------------------------------------
class WeaviateBackend(BaseBackend):
    """Semantic memory in Weaviate; ``resolve`` returns the user's ``semanticMemories`` nearest first."""

    ranking = RANKING_SEMANTIC

    declaration = DECLARATION

    def __init__(
        self,
        client: JsonHttpClient | None,
        *,
        collection: str = DEFAULT_COLLECTION,
        user_property: str = DEFAULT_USER_PROPERTY,
        content_property: str = DEFAULT_CONTENT_PROPERTY,
        distance: str = "cosine",
        embedding_model: str | None = None,
        query_embedder: QueryModuleEmbedder | None = None,
        unavailable: str | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.user_property = user_property
        self.content_property = content_property
        self.distance = distance
        self.embedding_model = embedding_model
        self.query_embedder = query_embedder
        self._unavailable = (
            unavailable if unavailable or client is not None else f"url_missing ({URL_VAR} is not set)"
        )

    def availability(self) -> Availability:
        return Availability.no(self._unavailable) if self._unavailable else Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The user's nearest memories to ``embedding`` (or the embedded ``query``), nearest first."""
        if self._unavailable or self.client is None:
            raise BackendError(f"weaviate unavailable: {self._unavailable}")
        user_id = user_id_of(request)
        limit = _limit(request.get("limit"))
        vector = self._query_vector(request)
        hits = near_vector_search(
            self.client, self.collection, vector, user_id, limit, user_property=self.user_property,
            content_property=self.content_property,
        )  # fmt: skip
        items = [self._memory(hit) for hit in hits]
        return {"semanticMemories": only_user(items, user_id, backend=NAME)}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    # ---- internals ----------------------------------------------------------------------------
    def _query_vector(self, request: Mapping[str, Any]) -> list[float]:
        embedding = request.get("embedding")
        if embedding is not None:
            return _finite_vector(embedding, "embedding")
        query = request.get("query")
        if not isinstance(query, str) or not query.strip():
            raise UsageError("query", query, "resolve needs a non-empty query or an embedding")
        if self.query_embedder is None:
            raise BackendError(f"weaviate resolve needs an embedding or {MODULE_VAR}")
        return _finite_vector(self.query_embedder.embed_query(query, request).tolist(), MODULE_VAR)

    def _memory(self, hit: Mapping[str, Any]) -> dict[str, Any]:
        extra = _mapping(hit.get("_additional"))
        distance = _number(extra.get("distance"))
        user = hit.get(self.user_property)
        content = hit.get(self.content_property)
        return memory_item(
            id=extra.get("id"),
            user_id=user if isinstance(user, str) else "",
            content=content if isinstance(content, str) else "",
            source=NAME,
            score=None if distance is None else score_of(distance, self.distance),
            metadata={"class": self.collection},
            created_at=_epoch_ms(extra.get("creationTimeUnix")),
            updated_at=_epoch_ms(extra.get("lastUpdateTimeUnix")),
            embedding_model=self.embedding_model,
            distance=distance,
        )


def near_vector_query(
    collection: str,
    vector: Sequence[float],
    user_id: str,
    limit: int,
    *,
    user_property: str = DEFAULT_USER_PROPERTY,
    content_property: str = DEFAULT_CONTENT_PROPERTY,
) -> str:
    """The GraphQL ``Get`` of the user's nearest objects: names checked, every value JSON-encoded.

    A JSON string is a GraphQL string literal; ``ensure_ascii=False`` keeps non-ASCII characters as
    they are, because a ``\\uD83D\\uDE00`` surrogate-pair escape is not decoded into one character
    by every GraphQL parser.
    """
    if not _CLASS_NAME.fullmatch(collection):
        raise UsageError(COLLECTION_VAR, collection, "must be a Weaviate class name")
    for var, name in ((USER_PROPERTY_VAR, user_property), (CONTENT_PROPERTY_VAR, content_property)):
        if not _GRAPHQL_NAME.fullmatch(name):
            raise UsageError(var, name, "must be a GraphQL name")
    vector_literal = json.dumps([float(x) for x in vector], allow_nan=False)
    value = json.dumps(user_id, ensure_ascii=False)
    where = f"{{path: {json.dumps([user_property])}, operator: Equal, valueText: {value}}}"
    fields = " ".join(dict.fromkeys((content_property, user_property)))
    return (
        f"{{ Get {{ {collection}(nearVector: {{vector: {vector_literal}}}, where: {where}, "
        f"limit: {int(limit)}) {{ {fields} _additional {{ {_ADDITIONAL} }} }} }} }}"
    )


def near_vector_search(
    client: JsonHttpClient,
    collection: str,
    vector: Sequence[float],
    user_id: str,
    limit: int,
    *,
    user_property: str = DEFAULT_USER_PROPERTY,
    content_property: str = DEFAULT_CONTENT_PROPERTY,
) -> list[Mapping[str, Any]]:
    """The user's nearest objects, nearest first: :func:`near_vector_query` sent to ``POST
    /v1/graphql``, its hits read by :func:`graphql_hits` (an error message scrubbed of secrets).
    The one search of the backend's ``resolve`` and the source's ``search``; the caller still keeps
    only the user's own (the ``where`` filter follows the property's tokenization)."""
    query = near_vector_query(
        collection, vector, user_id, limit, user_property=user_property, content_property=content_property
    )
    answer = client.post_json("/v1/graphql", {"query": query}, idempotent=True)
    try:
        return graphql_hits(answer, collection)
    except BackendError as exc:  # a message from the server may echo a secret back
        raise BackendError(client.scrub(str(exc))) from None


def graphql_hits(answer: object, collection: str) -> list[Mapping[str, Any]]:
    """The objects of ``data.Get.<collection>``; a GraphQL ``errors`` array (HTTP 200) is a failure."""
    if not isinstance(answer, Mapping):
        raise BackendError(f"weaviate graphql: expected a JSON object, got {type(answer).__name__}")
    errors = answer.get("errors")
    if errors:
        first = errors[0] if isinstance(errors, list) and errors else errors
        message = first.get("message") if isinstance(first, Mapping) else first
        count = len(errors) if isinstance(errors, list) else 1
        raise BackendError(f"weaviate graphql error ({count}): {SERVER_SAID} {str(message)[:200]}")
    data = answer.get("data")
    get = data.get("Get") if isinstance(data, Mapping) else None
    hits = get.get(collection) if isinstance(get, Mapping) else None
    if hits is None:
        return []  # the class exists but nothing matched (Weaviate answers null or [])
    if not isinstance(hits, list) or not all(isinstance(h, Mapping) for h in hits):
        raise BackendError(f"weaviate graphql: data.Get.{collection} is not a list of objects")
    return hits


def score_of(distance: float, metric: str) -> float:
    """A higher-is-nearer score from Weaviate's distance: cosine 1 - d, dot -d, else 1 / (1 + d)."""
    if metric == "cosine":
        return 1.0 - distance
    if metric == "dot":
        return -distance
    return 1.0 / (1.0 + max(distance, 0.0))


def _finite_vector(value: object, field: str) -> list[float]:
    try:
        vector = [float(x) for x in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise UsageError(field, "<non-numeric>", "must be a list of numbers") from None
    if not vector or not all(math.isfinite(x) for x in vector):
        raise UsageError(field, "<vector>", "must be a non-empty list of finite numbers")
    return vector


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _epoch_ms(value: object) -> float | None:
    """Weaviate's millisecond timestamps (a number in REST, a string in GraphQL) as epoch seconds."""
    number = _number(value)
    return None if number is None or number <= 0 else number / 1000.0


def _limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError("limit", value, "must be a positive integer")
    return min(value, MAX_LIMIT)


def from_env(env: Mapping[str, str]) -> WeaviateBackend:
    """Build the backend from the environment; never raises, never connects.

    Every missing or invalid piece is part of the unavailable reason; the embedding module is
    imported only when everything else is configured.
    """
    problems = configuration_problems(DECLARATION, env)
    names = {}
    for var, default, pattern in (
        (COLLECTION_VAR, DEFAULT_COLLECTION, _CLASS_NAME),
        (USER_PROPERTY_VAR, DEFAULT_USER_PROPERTY, _GRAPHQL_NAME),
        (CONTENT_PROPERTY_VAR, DEFAULT_CONTENT_PROPERTY, _GRAPHQL_NAME),
    ):
        try:
            names[var] = _name_setting(env, var, default, pattern)
        except UsageError as exc:
            problems.append(("invalid_setting", str(exc)))
            names[var] = default
    distance = (env.get(DISTANCE_VAR) or "").strip().lower() or "cosine"
    if distance not in DISTANCES:
        problems.append(
            ("invalid_setting", f"{DISTANCE_VAR}={distance!r} must be one of {', '.join(DISTANCES)}")
        )
    url = (env.get(URL_VAR) or "").strip()
    if url and not _http_url(url):
        problems.append(("url_invalid", f"{URL_VAR}={redact_url(url)!r} must be an http(s) URL"))
        url = ""
    api_key = (env.get(API_KEY_VAR) or "").strip() or None
    embedder = None
    module_spec = (env.get(MODULE_VAR) or "").strip()
    if module_spec and not problems:
        from memwork.embed import QueryModuleEmbedder  # numpy and user code: only when configured

        try:
            embedder = QueryModuleEmbedder(module_spec, field=MODULE_VAR)
        except UsageError as exc:
            problems.append(("embedding_module_invalid", str(exc)))
    return WeaviateBackend(
        _client(env, url, api_key) if url else None,
        collection=names[COLLECTION_VAR],
        user_property=names[USER_PROPERTY_VAR],
        content_property=names[CONTENT_PROPERTY_VAR],
        distance=distance,
        embedding_model=(env.get(MODEL_VAR) or "").strip() or None,
        query_embedder=embedder,
        unavailable=reason_of(problems),
    )


# ---- the migration source ---------------------------------------------------------------------
class WeaviateSource:
    """Every object of one Weaviate class, by the REST cursor API (``after`` = the last uuid seen).

    Weaviate lists a class in uuid order when ``after`` is used, so the cursor is simply the last id
    of the previous page; a short page is the last one.
    """

    name = NAME

    def __init__(
        self,
        client: JsonHttpClient,
        url: str,
        *,
        collection: str = DEFAULT_COLLECTION,
        user_property: str = DEFAULT_USER_PROPERTY,
        content_property: str = DEFAULT_CONTENT_PROPERTY,
        model_property: str = DEFAULT_MODEL_PROPERTY,
        embedding_model: str | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.collection = collection
        self.user_property = user_property
        self.content_property = content_property
        self.model_property = model_property
        self.embedding_model = embedding_model

    @property
    def key(self) -> str:
        return f"weaviate:{redact_url(self.url.rstrip('/'))}/{self.collection}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        params: dict[str, Any] = {"class": self.collection, "limit": int(size), "include": "vector"}
        if cursor:
            params["after"] = cursor
        answer = self.client.get_json("/v1/objects", params)
        objects = answer.get("objects") if isinstance(answer, Mapping) else None
        if not isinstance(objects, list):
            raise BackendError("weaviate GET /v1/objects: the answer has no 'objects' list")
        fields = [self._fields(obj) for obj in objects]
        next_cursor = fields[-1]["id"] if fields and len(fields) >= size else None
        return record_page(fields, next_cursor)

    def search(self, user_id: str, vector: Sequence[float], k: int) -> list[str]:
        """The ids of the user's ``k`` nearest objects (the class's own metric), nearest first: the
        backend's near-vector GraphQL search, then only the objects whose user property is exactly
        ``user_id``. A ``word``-tokenized property lets look-alike users (``TenantX`` for
        ``tenantx``) through the ``where`` filter, so while the guard leaves fewer than ``k`` of a full
        answer the search asks again for four times as many (up to :data:`MAX_LIMIT`): the user's own
        top ``k``, what a certificate compares the destination's answers with."""
        limit = max(int(k), 1)
        while True:
            hits = near_vector_search(
                self.client, self.collection, _finite_vector(vector, "vector"), user_id, limit,
                user_property=self.user_property, content_property=self.content_property,
            )  # fmt: skip
            items = [
                {"id": str(_mapping(h.get("_additional")).get("id")), "userId": h.get(self.user_property)}
                for h in hits
            ]
            mine = only_user(items, user_id, backend=NAME)
            if len(mine) >= k or len(hits) < limit or limit >= MAX_LIMIT:
                return [item["id"] for item in mine[:k]]
            limit = min(limit * 4, MAX_LIMIT)

    def close(self) -> None:
        self.client.close()

    def _fields(self, obj: object) -> dict[str, Any]:
        """An object as the fields of its :class:`SourceRecord` (the page is built in one call)."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("id"), str):
            raise BackendError("weaviate GET /v1/objects: an object without an id")
        object_id = obj["id"]
        props = _mapping(obj.get("properties"))
        user = props.get(self.user_property)
        if not isinstance(user, str) or not user:
            raise BackendError(f"weaviate object {object_id} has no {self.user_property!r} property")
        content = props.get(self.content_property)
        model = props.get(self.model_property)
        known = {self.user_property, self.content_property, self.model_property, "type", "sessionId"}
        metadata = {k: v for k, v in props.items() if k not in known}
        metadata["weaviateClass"] = obj.get("class", self.collection)
        session = props.get("sessionId")
        type_ = props.get("type")
        return {
            "id": object_id,
            "user_id": user,
            "content": content if isinstance(content, str) else json.dumps(content),
            "type": type_ if isinstance(type_, str) and type_ else "fact",
            "metadata": metadata,
            "created_at": _datetime_ms(obj.get("creationTimeUnix")),
            "updated_at": _datetime_ms(obj.get("lastUpdateTimeUnix")),
            "session_id": session if isinstance(session, str) else None,
            "vector": _object_vector(obj),
            "model": model if isinstance(model, str) and model else self.embedding_model,
        }


def _datetime_ms(value: object) -> datetime | None:
    seconds = _epoch_ms(value)
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _object_vector(obj: Mapping[str, Any]) -> list[float] | None:
    """The object's vector: ``vector``, else the only one of its named ``vectors``."""
    vector = obj.get("vector")
    if not vector and isinstance(obj.get("vectors"), Mapping) and len(obj["vectors"]) == 1:
        vector = next(iter(obj["vectors"].values()))
    if not isinstance(vector, list) or not vector:
        return None
    return [float(x) for x in vector]


def source_from_env(env: Mapping[str, str]) -> WeaviateSource:
    """The Weaviate source from the backend's own variables (the feature flag is not needed to read)."""
    url = require(env, URL_VAR)
    api_key = (env.get(API_KEY_VAR) or "").strip() or None
    return WeaviateSource(
        _client(env, url, api_key),
        url,
        collection=_name_setting(env, COLLECTION_VAR, DEFAULT_COLLECTION, _CLASS_NAME),
        user_property=_name_setting(env, USER_PROPERTY_VAR, DEFAULT_USER_PROPERTY, _GRAPHQL_NAME),
        content_property=_name_setting(env, CONTENT_PROPERTY_VAR, DEFAULT_CONTENT_PROPERTY, _GRAPHQL_NAME),
        model_property=_name_setting(env, MODEL_PROPERTY_VAR, DEFAULT_MODEL_PROPERTY, _GRAPHQL_NAME),
        embedding_model=(env.get(MODEL_VAR) or "").strip() or None,
    )


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
