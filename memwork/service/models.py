"""Pydantic request models of the service: the OpenAPI schema, and the first line of validation.

They mirror :mod:`memwork.backends.requests` (same limits, same names), strictly typed so ``"5"`` is
not a limit and ``true`` is not a number; what JSON Schema cannot say (no NUL, no lone surrogate, ids
without surrounding whitespace) is then checked by :func:`memwork.backends.requests.validate`, so
every bad request is a 422 naming its field before any backend is touched. Unknown fields are
ignored (callers may send more than memwork reads).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from memwork.backends.requests import (
    MAX_LIMIT,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES,
    MAX_QUERY_CHARS,
    MAX_SESSION_ID_CHARS,
    MAX_TIME_CHARS,
    MAX_USER_ID_CHARS,
)

MAX_EMBEDDING_DIMENSIONS = 8192
CANARY_USER_PREFIX = "memory-v2-canary-"  #: the only users ``/forget`` may purge

FLOAT32_MAX = 3.4028234663852886e38  #: embeddings are stored as float32: anything larger overflows
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-FLOAT32_MAX, le=FLOAT32_MAX)]
Role = Literal["user", "assistant", "system", "tool"]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    userId: str = Field(min_length=1, max_length=MAX_USER_ID_CHARS, description="exact user id")
    sessionId: str | None = Field(None, min_length=1, max_length=MAX_SESSION_ID_CHARS)


class ResolveRequest(_Request):
    """Memory for the current request."""

    query: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    limit: int | None = Field(None, ge=1, le=MAX_LIMIT, description="k: how many memories at most")
    embedding: list[Finite] | None = Field(
        None, min_length=1, max_length=MAX_EMBEDDING_DIMENSIONS, description="query embedding"
    )


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Role
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    createdAt: str | None = Field(
        None,
        max_length=MAX_TIME_CHARS,
        description="when the client sent it (ISO 8601 with an offset); with it, the same text sent "
        "twice is two messages, and a retried write is still recognised",
    )


class RememberRequest(_Request):
    """Recent messages to record (the facade's write)."""

    sessionId: str = Field(min_length=1, max_length=MAX_SESSION_ID_CHARS)
    messages: list[Message] = Field(max_length=MAX_MESSAGES)


class SyncRequest(_Request):
    """Analyze / compact pending memory (the facade's compact)."""


class ForgetRequest(BaseModel):
    """Remove a synthetic canary user's data from every backend that can purge."""

    model_config = ConfigDict(strict=True, extra="ignore")

    userId: str = Field(
        min_length=1,
        max_length=MAX_USER_ID_CHARS,
        description=f"a synthetic canary user id (prefix {CANARY_USER_PREFIX}); any other is refused (403)",
    )
