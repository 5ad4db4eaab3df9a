"""A Qdrant collection's points, shared by the backend (:mod:`memwork.backends.qdrant`) and the migration
source, which lives here: where the collection is (``MEMORY_QDRANT_URL``: a server or ``local:/path``), the
lazily opened client, a point's payload as memory fields, and :class:`QdrantSource`, which lists every
point page by page.

The source needs nothing of the facade backend (its declaration, its query embedder): ``memwork import
--from qdrant`` imports this module only. The payload fields and the URL forms are described in
:mod:`memwork.backends.qdrant`.
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

from memwork.contracts import (
    Page,
    SourceRecord,
    record_page,
    require,
    source_records,
)
from memwork.errors import BackendError, UsageError
from memwork.http import RETRY_STATUSES
from memwork.redaction import REDACTED, describe_error, redact_text, redact_url

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

NAME = "qdrant"
URL_VAR = "MEMORY_QDRANT_URL"
COLLECTION_VAR = "MEMORY_QDRANT_COLLECTION"
API_KEY_VAR = "MEMORY_QDRANT_API_KEY"
USER_FIELD_VAR = "MEMORY_QDRANT_USER_FIELD"
CONTENT_FIELD_VAR = "MEMORY_QDRANT_CONTENT_FIELD"
VECTOR_NAME_VAR = "MEMORY_QDRANT_VECTOR_NAME"
MODEL_VAR = "MEMORY_QDRANT_EMBEDDING_MODEL"
DEFAULT_COLLECTION = "memind_memory"
DEFAULT_USER_FIELD = "user_id"
DEFAULT_CONTENT_FIELD = "content"
LOCAL_PREFIX = "local:"
SOURCE_TIMEOUT_S = 30.0  #: a migration scroll is not under the facade's deadline
LOCAL_META_FILE = "meta.json"  #: what qdrant-client's local mode keeps at the root of a storage

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


#: ids per ``retrieve`` call of :meth:`QdrantSource.records_by_id`
RETRIEVE_CHUNK = 500


def _point_key(text: str) -> int | str | None:
    """A point id as Qdrant takes it: a whole number or a UUID; None for anything else (no point
    can have that id: it is not asked for, and counts as absent)."""
    if text.isdigit():
        return int(text)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


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

    def records_by_id(self, ids: list[str]) -> dict[str, SourceRecord]:
        """The records of ``ids`` the collection holds (``retrieve``; an absent id is simply left
        out): a repair re-copies exactly the keys a certificate named without listing everything."""
        wanted = [key for key in map(_point_key, ids) if key is not None]
        with_vectors: bool | list[str] = [self.vector_name] if self.vector_name else True
        found: dict[str, SourceRecord] = {}
        for start in range(0, len(wanted), RETRIEVE_CHUNK):
            chunk = wanted[start : start + RETRIEVE_CHUNK]
            points = self._retrieve(chunk, with_vectors)
            for record in source_records([self._fields(point) for point in points]):
                found[record.id] = record
        return found

    def _retrieve(self, ids: list[int | str], with_vectors: bool | list[str]) -> list[Any]:
        found: list[Any] = self._connection.call(
            "retrieve",
            lambda c: c.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=with_vectors),
            retries=2,
        )
        return found

    def search(self, user_id: str, vector: Sequence[float], k: int) -> list[str]:
        """The ids of the user's ``k`` nearest points (the collection's own metric): what a
        certificate compares the destination's answers with."""
        from qdrant_client import models

        user_only = models.Filter(
            must=[models.FieldCondition(key=self.fields.user, match=models.MatchValue(value=user_id))]
        )
        query = [float(x) for x in vector]
        response = self._connection.call(
            "query_points",
            lambda c: c.query_points(
                self.collection,
                query=query,
                using=self.vector_name,
                query_filter=user_only,
                limit=k,
                with_payload=False,
                with_vectors=False,
            ),
            retries=2,
        )
        return [str(point.id) for point in response.points]

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
