"""The synthetic round trip the rollout's checks share: one step type, one synthetic exchange.

The self-check (``memwork check health``, through the facade), the app canary (``memwork canary
app``, over HTTP) and the external smoke (``memwork smoke external``, straight to one backend) each
write the same short exchange for a throw-away user, read it back with the same query and record
what happened as :class:`Step` rows. Each names its own synthetic users (the service forgets only
``memory-v2-canary-*`` ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the exchange every synthetic user writes; :data:`SYNTHETIC_QUERY` finds the memory it leaves
SYNTHETIC_MESSAGES: tuple[Mapping[str, str], ...] = (
    {"role": "user", "content": "My name is Canary Check. I like synthetic round trips through the service."},
    {"role": "assistant", "content": "Noted."},
)
SYNTHETIC_QUERY = "canary check synthetic round trips"
#: the memories a resolve answer may hold
MEMORY_KEYS = ("semanticMemories", "memories")
#: what each operation of the round trip sends of the synthetic request
OPERATION_KEYS = {
    "write": ("userId", "sessionId", "messages"),
    "compact": ("userId", "sessionId"),
    "resolve": ("userId", "sessionId", "query", "limit"),
}


@dataclass(frozen=True)
class Step:
    """One named expectation or operation of a check and how it went."""

    name: str
    ok: bool
    detail: str


def synthetic_request(user_id: str, operation: str, *, limit: int = 5) -> dict[str, Any]:
    """What ``operation`` (write, compact or resolve) sends for a throw-away user: its session, the
    exchange to write, the query that finds it."""
    request = {
        "userId": user_id,
        "sessionId": f"{user_id}-session",
        "messages": [dict(message) for message in SYNTHETIC_MESSAGES],
        "query": SYNTHETIC_QUERY,
        "limit": limit,
    }
    return {key: request[key] for key in OPERATION_KEYS[operation]}


def answer_items(answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The memories of a resolve answer (``semanticMemories`` then ``memories``), objects only."""
    found = [item for key in MEMORY_KEYS for item in answer.get(key) or []]
    return [item for item in found if isinstance(item, Mapping)]
