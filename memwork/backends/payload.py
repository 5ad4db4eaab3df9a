"""The facade's payload items, built the same way by every backend, and the tenant guard on results.

Each resolving backend maps what its service returns into these shapes (its module documents the
mapping, and its :class:`~memwork.contracts.Declaration` lists it for docs/backends.md):

* ``semanticMemories`` / ``memories``: :func:`memory_item` dicts (``id``, ``userId``, ``content``,
  ``type``, ``score``, ``metadata``, ``createdAt``, ``updatedAt``, ``embeddingModel``, ``source``);
* ``behaviorSummary``: a short text or object; ``activeGoals``: a list; ``policy``: an object.

:func:`only_user` is the last line of tenant isolation: every adapter already scopes its request to
the user, and then drops any returned item whose user is not the caller's, so a misconfigured or
misbehaving service can never hand user A a memory of user B.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memwork.errors import UsageError

log = logging.getLogger("memwork.backends")


def iso(value: object) -> str | None:
    """A timestamp as ISO 8601 text (datetimes, epoch seconds or text as given; None stays None)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC).isoformat()
    return str(value)


def memory_item(
    *,
    id: object,
    user_id: str,
    content: str,
    source: str,
    score: float | None = None,
    type: str | None = "fact",
    metadata: Mapping[str, Any] | None = None,
    created_at: object = None,
    updated_at: object = None,
    embedding_model: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One memory in the API's JSON shape (camelCase keys, ISO timestamps, ``source`` = backend name)."""
    item: dict[str, Any] = {
        "id": str(id),
        "userId": user_id,
        "content": content,
        "type": type or "fact",
        "score": None if score is None else float(score),
        "metadata": dict(metadata or {}),
        "createdAt": iso(created_at),
        "updatedAt": iso(updated_at),
        "embeddingModel": embedding_model,
        "source": source,
    }
    item.update(extra)
    return item


def only_user(items: Iterable[Mapping[str, Any]], user_id: str, *, backend: str) -> list[dict[str, Any]]:
    """The items whose ``userId`` is exactly ``user_id``; any other is dropped and logged (never shown)."""
    kept, dropped = [], 0
    for item in items:
        if item.get("userId") == user_id:
            kept.append(dict(item))
        else:
            dropped += 1
    if dropped:
        log.warning("%s returned %d memory item(s) of another user; dropped", backend, dropped)
    return kept


def aware_time(value: object) -> datetime | None:
    """A service's timestamp as an aware datetime: a datetime or ISO 8601 text (``Z`` accepted; naive means
    UTC); anything else None (a source with no usable time gets the import run's start)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def user_id_of(request: Mapping[str, Any]) -> str:
    """The request's ``userId``, which every adapter scopes its call by (a UsageError when unusable)."""
    user_id = request.get("userId")
    if not isinstance(user_id, str) or not user_id:
        raise UsageError("userId", user_id, "must be a non-empty string")
    return user_id


def session_id_of(request: Mapping[str, Any]) -> str | None:
    """The request's ``sessionId``, None when absent or empty."""
    session_id = request.get("sessionId")
    if session_id is None or session_id == "":
        return None
    if not isinstance(session_id, str):
        raise UsageError("sessionId", session_id, "must be a string")
    return session_id
