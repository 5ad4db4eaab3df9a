"""Validation of the Memory V2 API's JSON-shaped inputs, before any backend is touched.

Every problem is a :class:`memwork.errors.UsageError` naming the field (``messages[2].content``), so
nothing is written for a bad request. The limits are stated in docs/backends.md ("Input limits").

Text that some backend cannot store -- a NUL character (PostgreSQL refuses it, MySQL keeps it and the
backfill then fails on the row) or a lone surrogate (not encodable as UTF-8) -- is bad input here,
never a backend error later. Ids are compared exactly by every backend, so an id with surrounding
whitespace is refused rather than silently trimmed into another user's id.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memwork.errors import UsageError
from memwork.legacy.schema import MESSAGE_ROLES

DEFAULT_LIMIT = 40
MAX_LIMIT = 200
MAX_USER_ID_CHARS = 64
MAX_SESSION_ID_CHARS = 128
MAX_QUERY_CHARS = 16_000
MAX_MESSAGE_CHARS = 16_000  #: one message's content, in characters
MAX_MESSAGES = 100  #: messages per write
MAX_TIME_CHARS = 40  #: a message's ``createdAt`` (ISO 8601)
MIN_CLIENT_YEAR, MAX_CLIENT_YEAR = 1970, 9998  #: what every store's timestamp column holds, with room


PREVIEW_CHARS = 40  #: how much of a long bad value an error shows around the bad character


def _preview(value: str, position: int) -> str:
    """The value itself when short, else the characters around ``position``."""
    if len(value) <= PREVIEW_CHARS:
        return value
    start = max(position - PREVIEW_CHARS // 2, 0)
    return f"...{value[start : start + PREVIEW_CHARS]}..."


def check_storable(field: str, value: str) -> str:
    """``value`` unchanged, or a :class:`UsageError` if it holds NUL or a lone surrogate."""
    position = value.find("\x00")
    if position >= 0:
        raise UsageError(field, _preview(value, position), f"contains a NUL character at position {position}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        problem = f"contains a lone surrogate U+{code:04X} at position {exc.start} (not valid UTF-8)"
        raise UsageError(field, _preview(value, exc.start), problem) from None
    return value


def _text(request: Mapping[str, Any], key: str, max_chars: int, *, required: bool) -> str | None:
    value = request.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise UsageError(key, value, "required: a non-empty string")
        return None
    if not isinstance(value, str):
        raise UsageError(key, value, "must be a string")
    if len(value) > max_chars:
        raise UsageError(key, f"<{len(value)} characters>", f"longer than {max_chars} characters")
    return check_storable(key, value).strip()


def _identifier(request: Mapping[str, Any], key: str, max_chars: int, *, required: bool) -> str | None:
    """An id: text compared exactly by every backend, so never trimmed -- padding is refused."""
    value = _text(request, key, max_chars, required=required)
    if value is not None and value != request[key]:
        raise UsageError(key, request[key], "must not begin or end with whitespace (ids are exact)")
    return value


def _limit(request: Mapping[str, Any]) -> int:
    value = request.get("limit")
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError("limit", value, f"must be a whole number 1..{MAX_LIMIT}")
    if not 1 <= value <= MAX_LIMIT:
        raise UsageError("limit", value, f"must be between 1 and {MAX_LIMIT}")
    return value


def _message(index: int, message: Any) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise UsageError(where, message, "must be an object with role and content")
    role = message.get("role")
    if role not in MESSAGE_ROLES:
        raise UsageError(f"{where}.role", role, f"must be one of {', '.join(MESSAGE_ROLES)}")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise UsageError(f"{where}.content", content, "must be non-empty text")
    if len(content) > MAX_MESSAGE_CHARS:
        size = f"<{len(content)} characters>"
        raise UsageError(f"{where}.content", size, f"longer than {MAX_MESSAGE_CHARS} characters")
    clean = {"role": role, "content": check_storable(f"{where}.content", content)}
    if message.get("createdAt") is not None:
        clean["createdAt"] = client_time(f"{where}.createdAt", message["createdAt"])
    return clean


def client_time(field: str, value: Any) -> str:
    """A message's ``createdAt`` from the client: ISO 8601 with an offset -> UTC ISO text (microseconds).

    It is part of the message's identity (a retried write is recognised by it), so it is kept exact."""
    if not isinstance(value, str) or len(value) > MAX_TIME_CHARS:
        raise UsageError(field, value, "must be ISO 8601 text with an offset, e.g. 2025-06-01T10:00:00Z")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(field, value, "not an ISO 8601 time, e.g. 2025-06-01T10:00:00Z") from None
    if parsed.tzinfo is None:
        raise UsageError(field, value, "needs an offset (Z or +hh:mm): a time without one is ambiguous")
    try:
        utc = parsed.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_CLIENT_YEAR <= utc.year <= MAX_CLIENT_YEAR:
        raise UsageError(field, value, f"must be between {MIN_CLIENT_YEAR} and {MAX_CLIENT_YEAR}")
    return utc.isoformat(timespec="microseconds")


def _messages(request: Mapping[str, Any]) -> list[dict[str, str]]:
    value = request.get("messages")
    if not isinstance(value, list):
        raise UsageError("messages", value, "must be a list of {role, content} objects")
    if len(value) > MAX_MESSAGES:
        raise UsageError("messages", f"<{len(value)} messages>", f"more than {MAX_MESSAGES} per write")
    return [_message(i, m) for i, m in enumerate(value)]


def _mapping(request: Any) -> Mapping[str, Any]:
    if not isinstance(request, Mapping):
        raise UsageError("request", type(request).__name__, "must be a JSON object")
    return request


def validate(operation: str, request: Any) -> dict[str, Any]:
    """The normalised request for ``operation`` (defaults filled in) or a :class:`UsageError`."""
    request = _mapping(request)
    clean: dict[str, Any] = {
        "userId": _identifier(request, "userId", MAX_USER_ID_CHARS, required=True),
        "sessionId": _identifier(request, "sessionId", MAX_SESSION_ID_CHARS, required=operation == "write"),
    }
    if operation == "resolve":
        clean["query"] = _text(request, "query", MAX_QUERY_CHARS, required=False)
        clean["limit"] = _limit(request)
        if request.get("embedding") is not None:
            clean["embedding"] = request["embedding"]
    elif operation == "write":
        clean["messages"] = _messages(request)
    elif operation != "compact":
        raise UsageError("operation", operation, "must be resolve, write or compact")
    return clean
