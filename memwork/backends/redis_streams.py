"""The Redis Streams event-tracking backend: ``write`` appends one stream entry per message.

Dormant unless ``MEMORY_REDIS_STREAMS_ENABLED=1`` and ``MEMORY_REDIS_STREAMS_URL`` are set. Write
only: it can never affect ``resolve`` (it does not implement it, so the facade keeps resolve on
legacy even with ``MEMORY_BACKEND=redis-streams``). redis-py is imported on first use.

Each write is one MULTI/EXEC pipeline of ``XADD <stream> MAXLEN ~ <maxlen> * field value ...``, one
entry per message, so the messages of one write land together and in order. The approximate
(``~``) trim keeps the stream near ``MEMORY_REDIS_STREAMS_MAXLEN`` entries (default 100000) at
little cost: Redis drops only whole internal nodes, so the stream may hold up to about one node
(``stream-node-max-entries``, 100 by default) more than the limit. Writes are never retried (a
retry after a lost reply could append the messages twice): the client is built with zero retries.

Entry fields (all text; :data:`ENTRY_FIELDS`):

``v`` (schema, ``1``), ``type`` (``message``), ``eventId`` (uuid4 hex, one per entry), ``writeId``
(uuid4 hex, shared by the entries of one write), ``userId``, ``sessionId``, ``role``, ``content``,
``position`` (0-based index in the write), ``count`` (messages in the write), ``ts`` (ISO 8601 UTC,
milliseconds).

As a migration source (:class:`RedisStreamsSource`) the stream is read with ``XRANGE`` from an
exclusive cursor (``(<last entry id>``) with ``COUNT``, to the end. A record's ``id`` is the
**stream entry id** (unique within the stream by Redis' own guarantee, and what the cursor is made
of); the producer's ``eventId`` is kept as ``message_id``. ``user_id`` is ``userId``,
``created_at`` is ``ts`` (or, without it, the entry id's milliseconds). An entry without
``userId`` or ``content`` is not a memory: it is skipped and logged by entry id. Streams hold no
vectors. A trimmed stream has lost its oldest entries; the source reads what is still there.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.requests import validate
from memwork.contracts import (
    RANKING_RECENCY,
    Availability,
    BaseBackend,
    Declaration,
    EnvVar,
    Page,
    SourceRecord,
    flag_var,
    record_page,
    require,
)
from memwork.errors import BackendError, UsageError
from memwork.http import settings_from_env
from memwork.redaction import REDACTED, describe_error, redact_text, redact_url, url_secrets

if TYPE_CHECKING:
    import redis

log = logging.getLogger("memwork.backends")

FLAG_VAR = "MEMORY_REDIS_STREAMS_ENABLED"
URL_VAR = "MEMORY_REDIS_STREAMS_URL"
STREAM_VAR = "MEMORY_REDIS_STREAMS_STREAM"
MAXLEN_VAR = "MEMORY_REDIS_STREAMS_MAXLEN"
DEFAULT_STREAM = "memind:memory-events"
DEFAULT_MAXLEN = 100_000
SCHEMA_VERSION = "1"
EVENT_TYPE = "message"
URL_SCHEMES = ("redis://", "rediss://", "unix://")
ENTRY_FIELDS = (
    "v",
    "type",
    "eventId",
    "writeId",
    "userId",
    "sessionId",
    "role",
    "content",
    "position",
    "count",
    "ts",
)
ENTRY_ID_RE = re.compile(r"^\d+-\d+\Z")
PURGE_PAGE = 1000
#: memory types a stream entry's ``type`` may carry through an import; anything else is an ``event``
MEMORY_TYPES = ("fact", "preference", "goal", "profile", "event", "skill", "note")

DECLARATION = Declaration(
    name="redis-streams",
    category="behavior",
    role="event tracking",
    capabilities=("write",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(URL_VAR, "Redis URL (redis://, rediss:// or unix://)", required=True),
        EnvVar(STREAM_VAR, "stream key", default=DEFAULT_STREAM),
        EnvVar(MAXLEN_VAR, "approximate stream length cap (XADD MAXLEN ~)", default=str(DEFAULT_MAXLEN)),
    ),
    mapping=(
        (
            "write",
            "one XADD <stream> MAXLEN ~ <maxlen> per message, in one MULTI/EXEC: fields v, type=message, "
            "eventId, writeId, userId, sessionId, role, content, position, count, ts",
        ),
        ("result", "{events: n, entryIds: [...], eventIds: [...], writeId, stream}"),
        ("resolve", "never: write-only, resolve stays on legacy"),
    ),
)


def _client(url: str, timeout_s: float, *, retries: int) -> redis.Redis:
    """A redis-py client with socket timeouts inside the deadline and exactly ``retries`` retries."""
    import redis
    from redis.backoff import ExponentialBackoff, NoBackoff
    from redis.retry import Retry

    backoff = NoBackoff() if retries == 0 else ExponentialBackoff(cap=0.2, base=0.02)
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=min(1.0, timeout_s),
        socket_timeout=timeout_s,
        retry=Retry(backoff, retries),
        retry_on_timeout=False,
        health_check_interval=0,
        decode_responses=False,
    )


def _xrange(client: redis.Redis, stream: str, start: str, count: int) -> list[tuple[str, dict[Any, Any]]]:
    """``XRANGE stream start + COUNT count`` as ``(entry id, fields)`` pairs (no None)."""
    entries = client.xrange(stream, min=start, max="+", count=count) or []
    return [(_text(entry_id), dict(fields or {})) for entry_id, fields in entries if entry_id is not None]


class _Scrubber:
    """Hides the URL's password (raw and decoded) in any text that might carry it."""

    def __init__(self, url: str) -> None:
        self._secrets = url_secrets(url)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact_text(text)


class RedisStreamsBackend(BaseBackend):
    """Event tracking in a Redis stream; ``write`` only."""

    ranking = RANKING_RECENCY

    declaration = DECLARATION

    def __init__(
        self,
        url: str | None,
        *,
        stream: str = DEFAULT_STREAM,
        maxlen: int = DEFAULT_MAXLEN,
        timeout_s: float = 1.8,
        unavailable: list[tuple[str, str]] | None = None,
    ) -> None:
        self.url = url
        self.stream = stream
        self.maxlen = maxlen
        self.timeout_s = timeout_s
        self._problems = list(unavailable or [])
        self._scrub = _Scrubber(url or "")
        self._redis: redis.Redis | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the password
        return (
            f"RedisStreamsBackend(url={redact_url(self.url)!r}, stream={self.stream!r}, maxlen={self.maxlen})"
        )

    # ---- contract -------------------------------------------------------------------------------
    def availability(self) -> Availability:
        reason = reason_of(self._problems)
        return Availability.ok() if reason is None else Availability.no(reason)

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Append one entry per message (one MULTI/EXEC, approximate MAXLEN trim); never retried."""
        self._require_available()
        clean = validate("write", request)
        entries = entry_fields(clean["userId"], clean["sessionId"], clean["messages"])
        try:
            pipe = self._client().pipeline(transaction=True)
            for fields in entries:
                values: dict[Any, Any] = dict(fields)
                pipe.xadd(self.stream, values, id="*", maxlen=self.maxlen, approximate=True)
            entry_ids = [_text(x) for x in pipe.execute()]
        except Exception as exc:
            raise self._error("XADD", exc) from None
        return {
            "events": len(entries),
            "entryIds": entry_ids,
            "eventIds": [f["eventId"] for f in entries],
            "writeId": entries[0]["writeId"] if entries else None,
            "stream": self.stream,
        }

    def purge_user(self, user_id: str) -> dict[str, int]:
        """Delete the user's entries from the stream (the self-check's and smoke's cleanup)."""
        self._require_available()
        if not isinstance(user_id, str) or not user_id:
            raise BackendError("redis-streams purge_user needs a non-empty user id")
        wanted, deleted, start = user_id.encode(), 0, "-"
        try:
            client = self._client()
            while True:
                entries = _xrange(client, self.stream, start, PURGE_PAGE)
                mine = [entry_id for entry_id, fields in entries if fields.get(b"userId") == wanted]
                if mine:
                    deleted += int(client.xdel(self.stream, *mine))
                if len(entries) < PURGE_PAGE:
                    return {"entries": deleted}
                start = "(" + entries[-1][0]
        except Exception as exc:
            raise self._error("XRANGE/XDEL", exc) from None

    def close(self) -> None:
        with self._lock:
            client, self._redis = self._redis, None
        if client is not None:
            client.close()

    # ---- internals ------------------------------------------------------------------------------
    def _require_available(self) -> None:
        if self._problems:
            raise BackendError(f"redis-streams unavailable: {reason_of(self._problems)}")

    def _client(self) -> redis.Redis:
        """The client, built on first use (redis-py connects lazily, on the first command)."""
        with self._lock:
            if self._redis is None:
                self._redis = _client(self.url or "", self.timeout_s, retries=0)
            return self._redis

    def _error(self, command: str, exc: Exception) -> BackendError:
        where = f"{redact_url(self.url)} stream {self.stream!r}"
        return BackendError(self._scrub(f"redis-streams {command} on {where} failed: {describe_error(exc)}"))


def entry_fields(user_id: str, session_id: str, messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The XADD field maps of one write (the documented :data:`ENTRY_FIELDS`, in that order)."""
    write_id = uuid.uuid4().hex
    ts = datetime.now(UTC).isoformat(timespec="milliseconds")
    return [
        {
            "v": SCHEMA_VERSION,
            "type": EVENT_TYPE,
            "eventId": uuid.uuid4().hex,
            "writeId": write_id,
            "userId": user_id,
            "sessionId": session_id,
            "role": message["role"],
            "content": message["content"],
            "position": str(position),
            "count": str(len(messages)),
            "ts": ts,
        }
        for position, message in enumerate(messages)
    ]


# ---- configuration ------------------------------------------------------------------------------
def _maxlen(env: Mapping[str, str], problems: list[tuple[str, str]]) -> int:
    raw = (env.get(MAXLEN_VAR) or "").strip()
    if not raw:
        return DEFAULT_MAXLEN
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    problems.append(("maxlen_invalid", f"{MAXLEN_VAR}={raw!r} must be a positive whole number"))
    return DEFAULT_MAXLEN


def _url_problems(url: str) -> list[tuple[str, str]]:
    if url and not url.lower().startswith(URL_SCHEMES):
        shown = redact_url(url)
        return [("url_invalid", f"{URL_VAR}={shown!r} must start with redis://, rediss:// or unix://")]
    return []


def _stream(env: Mapping[str, str]) -> str:
    return (env.get(STREAM_VAR) or "").strip() or DEFAULT_STREAM


def from_env(env: Mapping[str, str]) -> RedisStreamsBackend:
    """The registry factory: never raises, never connects, never imports redis-py."""
    url = (env.get(URL_VAR) or "").strip()
    problems = configuration_problems(DECLARATION, env) + _url_problems(url)
    maxlen = _maxlen(env, problems)
    return RedisStreamsBackend(
        url or None,
        stream=_stream(env),
        maxlen=maxlen,
        timeout_s=settings_from_env(env).timeout_s,
        unavailable=problems,
    )


# ---- the migration source -----------------------------------------------------------------------
class RedisStreamsSource:
    """Every entry of the stream, oldest first, by ``XRANGE (<cursor> + COUNT <size>`` to the end."""

    name = "redis-streams"

    def __init__(self, url: str, stream: str = DEFAULT_STREAM, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self.stream = stream
        self.timeout_s = timeout_s
        self._scrub = _Scrubber(url)
        self._redis: redis.Redis | None = None
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        return f"redis-streams:{redact_url(self.url)}/{self.stream}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        """Up to ``size`` entries after entry id ``cursor`` (exclusive); next cursor: the last id read."""
        if cursor is not None and not ENTRY_ID_RE.match(cursor):
            raise UsageError("cursor", cursor, "must be a stream entry id such as 1700000000000-0")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError("page_size", size, "must be a positive integer")
        try:
            entries = _xrange(self._client(), self.stream, "-" if cursor is None else f"({cursor}", size)
        except Exception as exc:
            where = f"{redact_url(self.url)} stream {self.stream!r}"
            raise BackendError(
                self._scrub(f"redis-streams XRANGE on {where} failed: {describe_error(exc)}")
            ) from None
        fields, skipped = [], []
        for entry_id, raw_fields in entries:
            found = entry_record_fields(entry_id, raw_fields, self.stream)
            if found is None:
                skipped.append(entry_id)
            else:
                fields.append(found)
        if skipped:
            shown = ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else "")
            log.warning(
                "redis-streams: skipped %d entr(ies) without userId or content: %s", len(skipped), shown
            )
        next_cursor = entries[-1][0] if len(entries) == size else None
        return record_page(fields, next_cursor)

    def close(self) -> None:
        with self._lock:
            client, self._redis = self._redis, None
        if client is not None:
            client.close()

    def _client(self) -> redis.Redis:
        with self._lock:
            if self._redis is None:  # reads may be retried: XRANGE changes nothing
                self._redis = _client(self.url, self.timeout_s, retries=2)
            return self._redis


KNOWN_FIELDS = frozenset(ENTRY_FIELDS)


def entry_record(entry_id: str, raw_fields: Mapping[Any, Any], stream: str) -> SourceRecord | None:
    """One stream entry as a :class:`SourceRecord` (None: not a memory -- no userId or no content)."""
    found = entry_record_fields(entry_id, raw_fields, stream)
    return None if found is None else SourceRecord(**found)


def entry_record_fields(entry_id: str, raw_fields: Mapping[Any, Any], stream: str) -> dict[str, Any] | None:
    """One stream entry as the fields of its :class:`SourceRecord` (None: not a memory); a page
    builds its records from these in one call."""
    fields = {_text(k): _text(v) for k, v in raw_fields.items()}
    user_id, content = fields.get("userId") or "", fields.get("content") or ""
    if not user_id or not content.strip():
        return None
    event_type = fields.get("type") or ""
    position, problem = _position(fields.get("position"))
    metadata: dict[str, Any] = {
        "stream": stream,
        "entryId": entry_id,
        "eventType": event_type or None,
        "role": fields.get("role"),
        "writeId": fields.get("writeId"),
        "position": position,
        "schema": fields.get("v"),
    }
    metadata.update({k: v for k, v in fields.items() if k not in KNOWN_FIELDS})
    return {
        "id": entry_id,
        "user_id": user_id,
        "content": content,
        "type": event_type if event_type in MEMORY_TYPES else "event",
        "metadata": {k: v for k, v in metadata.items() if v is not None},
        "created_at": _timestamp(fields.get("ts"), entry_id),
        "session_id": fields.get("sessionId") or None,
        "message_id": fields.get("eventId") or None,
        "problem": problem,
    }


def _timestamp(ts: str | None, entry_id: str) -> datetime | None:
    """``ts`` as an aware datetime, else the entry id's milliseconds (when Redis appended it), else
    None (an id given by the producer may lie beyond the datetime range: the import's start time)."""
    if ts:
        try:
            value = datetime.fromisoformat(ts.replace("Z", "+00:00"))
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        except ValueError:
            pass
    try:
        return datetime.fromtimestamp(int(entry_id.split("-", 1)[0]) / 1000.0, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _position(value: str | None) -> tuple[int | None, str | None]:
    """``position`` as an int, and the problem when it is there but not a whole number.

    Only ASCII digits: ``str.isdigit()`` also accepts ``²`` or ``①``, which ``int()`` refuses. A
    position that is not a number makes the entry one the import quarantines (named, never fatal)."""
    if not value:
        return None, None
    if value.isascii() and value.isdigit():
        return int(value), None
    shown = value if len(value) <= 20 else value[:20] + "..."
    return None, f"position: {shown!r} is not a whole number"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def source_from_env(env: Mapping[str, str]) -> RedisStreamsSource:
    """The source over the backend's own variables (the feature flag is not needed to read)."""
    url = require(env, URL_VAR)
    if _url_problems(url):
        raise UsageError(URL_VAR, redact_url(url), "must start with redis://, rediss:// or unix://")
    return RedisStreamsSource(url, _stream(env))
