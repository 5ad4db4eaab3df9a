"""Validation of the seed's JSON-shaped inputs, before any backend is touched.

Every problem is a :class:`memwork.errors.UsageError` naming the field (``messages[2].content``), so
nothing is written for a bad request. The limits are stated in README.md ("Input limits").
"""

from __future__ import annotations

from collections.abc import Mapping
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
    return value.strip()


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
    return {"role": role, "content": content}


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
        "userId": _text(request, "userId", MAX_USER_ID_CHARS, required=True),
        "sessionId": _text(request, "sessionId", MAX_SESSION_ID_CHARS, required=operation == "write"),
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
