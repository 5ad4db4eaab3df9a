"""The Qdrant semantic-memory backend (read-only nearest-neighbour lookup per user) and migration source.

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

import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

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
from memwork.embed import QueryModuleEmbedder
from memwork.errors import BackendError, UsageError
from memwork.http import RETRY_STATUSES, HttpSettings, settings_from_env
from memwork.redaction import REDACTED, describe_error, redact_text, redact_url

if TYPE_CHECKING:
    from qdrant_client import QdrantClient
    from qdrant_client.http.models import CollectionInfo

NAME = "qdrant"
FLAG_VAR = "MEMORY_QDRANT_ENABLED"
URL_VAR = "MEMORY_QDRANT_URL"
MODULE_VAR = "MEMORY_QDRANT_EMBEDDING_MODULE"
COLLECTION_VAR = "MEMORY_QDRANT_COLLECTION"
API_KEY_VAR = "MEMORY_QDRANT_API_KEY"
USER_FIELD_VAR = "MEMORY_QDRANT_USER_FIELD"
CONTENT_FIELD_VAR = "MEMORY_QDRANT_CONTENT_FIELD"
VECTOR_NAME_VAR = "MEMORY_QDRANT_VECTOR_NAME"
MODEL_VAR = "MEMORY_QDRANT_EMBEDDING_MODEL"

DEFAULT_COLLECTION = "memind_memory"
DEFAULT_USER_FIELD = "user_id"
DEFAULT_CONTENT_FIELD = "content"
DEFAULT_LIMIT = 40
MAX_LIMIT = 1000
LOCAL_PREFIX = "local:"
SOURCE_TIMEOUT_S = 30.0  #: a migration scroll is not under the facade's deadline
LOCAL_META_FILE = "meta.json"  #: what qdrant-client's local mode keeps at the root of a storage

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

#: payload fields with a meaning of their own; everything else is metadata
_KNOWN_FIELDS = (
    "type",
    "created_at",
    "createdAt",
    "updated_at",
    "updatedAt",
    "embedding_model",
    "session_id",
    "message_id",
    "agent_id",
    "metadata",
)
#: distances where Qdrant's score is a distance (smaller is nearer); Cosine and Dot are similarities
_DISTANCE_METRICS = ("euclid", "manhattan")
T = TypeVar("T")


# ---- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """Where the collection lives: a server ``url`` or a local storage ``path`` (exactly one is set)."""

    url: str | None = None
    path: str | None = None

    def describe(self) -> str:
        """Printable, secret-free: the redacted URL or ``local:/abs/path``."""
        if self.path is not None:
            return f"{LOCAL_PREFIX}{self.path}"
        return redact_url(self.url) or ""


def parse_location(raw: str, *, field: str = URL_VAR) -> Location:
    """``http(s)://host[:port][/prefix]`` or ``local:/path``; else a UsageError naming ``field``."""
    value = raw.strip()
    if value.startswith(LOCAL_PREFIX):
        path = value[len(LOCAL_PREFIX) :].strip()
        if not path or path == ":memory:":
            raise UsageError(field, value, "local: needs the path of an existing on-disk Qdrant storage")
        return Location(path=str(Path(path).expanduser().resolve()))
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
        raise UsageError(field, redact_url(value), "must be http(s)://host:6333 or local:/path/to/storage")
    return Location(url=value.rstrip("/"))


@dataclass(frozen=True)
class PayloadFields:
    """The payload fields that carry the owner and the text, and the model when a payload has none."""

    user: str = DEFAULT_USER_FIELD
    content: str = DEFAULT_CONTENT_FIELD
    default_model: str | None = None


def _setting(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    return (env.get(name) or "").strip() or default


def _fields_from_env(env: Mapping[str, str]) -> PayloadFields:
    return PayloadFields(
        user=_setting(env, USER_FIELD_VAR, DEFAULT_USER_FIELD) or DEFAULT_USER_FIELD,
        content=_setting(env, CONTENT_FIELD_VAR, DEFAULT_CONTENT_FIELD) or DEFAULT_CONTENT_FIELD,
        default_model=_setting(env, MODEL_VAR),
    )


# ---- the client: lazily opened, one per backend or source ----------------------------------------
class _Connection:
    """One ``QdrantClient`` opened on first use (building a backend connects to nothing), and its errors.

    ``client``: an injected client (tests); it is used as is and never closed here.
    """

    def __init__(
        self,
        location: Location | None,
        collection: str,
        *,
        api_key: str | None,
        timeout_s: float,
        connect_timeout_s: float,
        client: QdrantClient | None = None,
    ) -> None:
        self.location = location
        self.collection = collection
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._client = client
        self._owned = client is None
        self._lock = threading.Lock()

    def where(self) -> str:
        place = self.location.describe() if self.location is not None else "<injected client>"
        return f"collection {self.collection!r} at {place}"

    def client(self) -> QdrantClient:
        with self._lock:
            if self._client is None:
                if self.location is None:
                    raise BackendError(f"{NAME}: {URL_VAR} is not set")
                self._client = self._open(self.location)
            return self._client

    def _open(self, location: Location) -> QdrantClient:
        from qdrant_client import QdrantClient

        if location.path is not None:
            if not (Path(location.path) / LOCAL_META_FILE).is_file():
                raise BackendError(
                    f"{NAME}: no Qdrant storage at {location.describe()} ({LOCAL_META_FILE} missing); "
                    "the adapter is read-only and never creates one"
                )
            try:
                return QdrantClient(path=location.path)
            except Exception as exc:  # the storage's file lock is held by another process
                raise BackendError(self.scrub(f"{NAME}: cannot open {location.describe()}: {exc}")) from None
        client = QdrantClient(
            url=location.url,
            api_key=self.api_key or None,
            timeout=max(1, math.ceil(self.timeout_s)),  # qdrant-client takes whole seconds ...
            check_compatibility=False,  # ... and would otherwise probe the server's version at once
        )
        _tighten_timeout(client, self.timeout_s, self.connect_timeout_s)
        return client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._owned:
            client.close()

    def scrub(self, text: str) -> str:
        """``text`` without the API key and URL passwords."""
        if self.api_key:
            text = text.replace(self.api_key, REDACTED)
        return redact_text(text)

    def call(
        self, what: str, fn: Callable[[QdrantClient], T], *, retries: int = 0, backoff_s: float = 0.05
    ) -> T:
        """``fn(client)``, retried on 429/502/503/504 (reads only), errors as one redacted BackendError."""
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                return fn(self.client())
            except (BackendError, UsageError):
                raise
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                pause = backoff_s * (2**attempt)
                if status in RETRY_STATUSES and attempt < retries and time.monotonic() + pause < deadline:
                    attempt += 1
                    time.sleep(pause)
                    continue
                raise self.error(what, exc) from None

    def error(self, what: str, exc: BaseException) -> BackendError:
        if _is_missing_collection(exc):
            problem = "the collection does not exist (the adapter is read-only and never creates it)"
        else:
            problem = _describe_qdrant_error(exc)
        return BackendError(self.scrub(f"{NAME} {what} failed on {self.where()}: {problem}"))


def _tighten_timeout(client: QdrantClient, timeout_s: float, connect_timeout_s: float) -> None:
    """qdrant-client rounds its timeout up to whole seconds; set the REST httpx client's to the real budget.

    Reaches into the client's REST transport (``openapi_client.client._client``, an ``httpx.Client``);
    when a future qdrant-client moves it, the rounded-up timeout stays and the facade's deadline still
    bounds every call."""
    import httpx

    remote = getattr(client, "_client", None)
    api = getattr(getattr(remote, "openapi_client", None), "client", None)
    http = getattr(api, "_client", None)
    if isinstance(http, httpx.Client):
        http.timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))


def _is_missing_collection(exc: BaseException) -> bool:
    if getattr(exc, "status_code", None) == 404:
        return True
    return isinstance(exc, ValueError) and "not found" in str(exc).lower()  # local mode


def _describe_qdrant_error(exc: BaseException) -> str:
    """One line: the HTTP status and the start of the body, or the transport error under the wrapper."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        content = getattr(exc, "content", b"") or b""
        body = content[:200].decode("utf-8", "replace") if isinstance(content, bytes) else str(content)[:200]
        return f"HTTP {status}: {' '.join(body.split())}"
    source = getattr(exc, "source", None)  # ResponseHandlingException wraps httpx / parsing errors
    if isinstance(source, BaseException):
        exc = source
    return " ".join(describe_error(exc).split())[:300]


# ---- payload -> memory ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PointFields:
    """What one point's payload says, split into the known fields and the metadata."""

    user_id: object
    content: object
    type: str
    created_at: datetime | None
    updated_at: datetime | None
    model: str | None
    session_id: str | None
    message_id: str | None
    agent_id: str | None
    metadata: dict[str, Any]


def split_payload(payload: Mapping[str, Any] | None, fields: PayloadFields) -> PointFields:
    """The point's known fields and its metadata (``payload.metadata`` merged with every other field)."""
    rest = dict(payload or {})
    user_id = rest.pop(fields.user, None)
    content = rest.pop(fields.content, None)
    kind = rest.get("type")
    if isinstance(kind, str) and kind:
        rest.pop("type")
    else:
        kind = "fact"
    created = _pop_timestamp(rest, "created_at", "createdAt")
    updated = _pop_timestamp(rest, "updated_at", "updatedAt")
    model = rest.get("embedding_model")
    if isinstance(model, str) and model:
        rest.pop("embedding_model")
    else:
        model = fields.default_model
    ids = {key: _pop_text(rest, key) for key in ("session_id", "message_id", "agent_id")}
    nested = rest.get("metadata")
    metadata: dict[str, Any] = {}
    if isinstance(nested, Mapping):
        rest.pop("metadata")
        metadata.update(nested)
    metadata.update(rest)
    return PointFields(
        user_id, content, kind, created, updated, model, ids["session_id"], ids["message_id"],
        ids["agent_id"], metadata,
    )  # fmt: skip


def _pop_text(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if (isinstance(value, str) and value) or (isinstance(value, int) and not isinstance(value, bool)):
        payload.pop(key)
        return str(value)
    return None


def _pop_timestamp(payload: dict[str, Any], *keys: str) -> datetime | None:
    """The first parseable timestamp among ``keys`` (removed from the payload); unparseable ones stay."""
    for key in keys:
        if key in payload:
            parsed = parse_timestamp(payload[key])
            if parsed is not None:
                payload.pop(key)
                return parsed
    return None


def parse_timestamp(value: object) -> datetime | None:
    """ISO 8601 text or epoch seconds (milliseconds above 1e11) as an aware UTC datetime; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        seconds = value / 1000.0 if abs(value) > 1e11 else float(value)
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


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


# ---- the migration source ------------------------------------------------------------------------
def encode_cursor(point_id: object) -> str:
    """A point id as cursor text: ``int:42`` or ``uuid:<canonical uuid>`` (unambiguous both ways)."""
    if isinstance(point_id, int) and not isinstance(point_id, bool):
        return f"int:{point_id}"
    if isinstance(point_id, str | uuid.UUID):
        try:
            return f"uuid:{uuid.UUID(str(point_id))}"
        except ValueError:
            pass
    raise BackendError(f"{NAME}: unexpected point id {point_id!r} (neither an integer nor a UUID)")


def decode_cursor(cursor: str) -> int | str:
    """The point id a cursor of :func:`encode_cursor` names; a UsageError for anything else."""
    kind, sep, value = cursor.partition(":")
    if sep and kind == "int" and value.isdigit():
        return int(value)
    if sep and kind == "uuid":
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise UsageError("cursor", cursor, "is not a qdrant cursor (int:<id> or uuid:<id>)")


class QdrantSource:
    """Every point of the collection, by ``scroll`` (point id order) from the cursor to the end.

    Records keep the point id (``id``), the owner, the timestamps, the metadata, the stored vector
    (``MEMORY_QDRANT_VECTOR_NAME`` picks a named one) and its model. A point without a text owner or
    content is an error naming it, never silently skipped.
    """

    name = NAME

    def __init__(
        self,
        location: Location | None,
        *,
        collection: str = DEFAULT_COLLECTION,
        api_key: str | None = None,
        fields: PayloadFields | None = None,
        vector_name: str | None = None,
        timeout_s: float = SOURCE_TIMEOUT_S,
        client: QdrantClient | None = None,
    ) -> None:
        self.location = location
        self.collection = collection
        self.fields = fields or PayloadFields()
        self.vector_name = vector_name
        self._connection = _Connection(
            location, collection, api_key=api_key, timeout_s=timeout_s,
            connect_timeout_s=min(5.0, timeout_s), client=client,
        )  # fmt: skip

    @property
    def key(self) -> str:
        place = self.location.describe() if self.location is not None else "injected"
        return f"{NAME}:{place}/{self.collection}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError("page_size", size, "must be a positive integer")
        offset = None if cursor is None else decode_cursor(cursor)
        with_vectors: bool | list[str] = [self.vector_name] if self.vector_name else True
        points, next_offset = self._connection.call(
            "scroll",
            lambda c: c.scroll(
                self.collection, limit=size, offset=offset, with_payload=True, with_vectors=with_vectors
            ),
            retries=2,
        )
        following = None if next_offset is None else encode_cursor(next_offset)
        return record_page([self._fields(point) for point in points], following)

    def close(self) -> None:
        self._connection.close()

    def _fields(self, point: Any) -> dict[str, Any]:
        """A point as the fields of its :class:`SourceRecord`."""
        found = split_payload(point.payload, self.fields)
        where = f"{NAME} point {point.id!r} of {self._connection.where()}"
        if not isinstance(found.user_id, str) or not found.user_id:
            raise BackendError(f"{where}: payload.{self.fields.user} is missing or not text")
        if not isinstance(found.content, str):
            raise BackendError(f"{where}: payload.{self.fields.content} is missing or not text")
        vector = self._vector(point.vector, where)
        return {
            "id": str(point.id),
            "user_id": found.user_id,
            "content": found.content,
            "type": found.type,
            "metadata": found.metadata,
            "created_at": found.created_at,
            "updated_at": found.updated_at,
            "session_id": found.session_id,
            "message_id": found.message_id,
            "agent_id": found.agent_id,
            "vector": vector,
            "model": found.model if vector is not None else None,
        }

    def _vector(self, stored: object, where: str) -> list[float] | None:
        """The dense vector of a point (the named one when configured); None when it has none."""
        if stored is None:
            return None
        if isinstance(stored, Mapping):
            if self.vector_name is not None:
                stored = stored.get(self.vector_name)
            elif len(stored) == 1:
                stored = next(iter(stored.values()))
            elif not stored:
                return None
            else:
                names = ", ".join(sorted(stored))
                raise BackendError(f"{where}: named vectors ({names}); set {VECTOR_NAME_VAR}")
            if stored is None:
                return None
        if isinstance(stored, Sequence) and stored and all(isinstance(x, int | float) for x in stored):
            return [float(x) for x in stored]
        raise BackendError(f"{where}: the vector is not a dense list of numbers (sparse or multi-vector)")


def source_from_env(env: Mapping[str, str]) -> QdrantSource:
    """The source the backend's own variables describe (the feature flag is not needed to read).

    ``MEMORY_QDRANT_URL`` is required (UsageError naming it); the collection, API key, payload fields,
    named vector and model come from the same variables as the backend's."""
    location = parse_location(require(env, URL_VAR))
    return QdrantSource(
        location,
        collection=_setting(env, COLLECTION_VAR, DEFAULT_COLLECTION) or DEFAULT_COLLECTION,
        api_key=_setting(env, API_KEY_VAR),
        fields=_fields_from_env(env),
        vector_name=_setting(env, VECTOR_NAME_VAR),
    )
