"""The LangGraph policy backend: one stateless run of the policy graph per resolve, and a Store source.

Dormant unless ``MEMORY_LANGGRAPH_ENABLED=1`` and ``MEMORY_LANGGRAPH_URL`` are set. ``resolve`` runs the
assistant (or graph) ``MEMORY_LANGGRAPH_POLICY_ID`` (default ``memory_policy``) on the LangGraph
Server / Platform HTTP API::

    POST /runs/wait  {"assistant_id": "memory_policy",
                      "input": {"userId", "sessionId", "query", "limit", "messages"},
                      "on_disconnect": "cancel"}

and maps the final state it answers: ``policy`` (an object) -> ``policy``; if present, the state's
``memories`` (of that user only) -> ``memories`` and ``activeGoals`` -> ``activeGoals``. A run is not
a pure read (a graph may write to its store, call tools, cost tokens), so it is sent once and never
retried; ``on_disconnect: cancel`` stops the run when memwork gives up at its deadline. A run that
fails answers HTTP 200 with ``{"__error__": {"error", "message"}}`` -- a failure here.

Tenant scoping: the user id is the run's input, and whatever the graph hands back is checked -- a
memory or goal of another user is dropped (:func:`~memwork.backends.payload.only_user`), and a
policy naming another user is dropped too.

The source (:class:`LangGraphSource`) lists the Store API, ``POST /store/items/search`` with
``namespace_prefix`` ``[MEMORY_LANGGRAPH_NAMESPACE]`` (default ``memories``), ``limit`` and ``offset``,
until a short page; memories live in namespaces ``[<prefix>..., <userId>, ...]``, so the user comes
from the namespace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.payload import memory_item, only_user, user_id_of
from memwork.contracts import (
    RANKING_POLICY,
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
from memwork.redaction import redact_url

log = logging.getLogger("memwork.backends")

NAME = "langgraph"
FLAG_VAR = "MEMORY_LANGGRAPH_ENABLED"
URL_VAR = "MEMORY_LANGGRAPH_URL"
POLICY_VAR = "MEMORY_LANGGRAPH_POLICY_ID"
API_KEY_VAR = "MEMORY_LANGGRAPH_API_KEY"
NAMESPACE_VAR = "MEMORY_LANGGRAPH_NAMESPACE"
DEFAULT_POLICY = "memory_policy"
DEFAULT_NAMESPACE = "memories"
INPUT_KEYS = ("userId", "sessionId", "query", "limit", "messages")

DECLARATION = Declaration(
    name=NAME,
    category="policy",
    role="routing/reasoning policy (a stateless run of the policy graph)",
    capabilities=("resolve",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(URL_VAR, "LangGraph Server / Platform URL", required=True),
        EnvVar(POLICY_VAR, "assistant id or graph id of the policy graph", default=DEFAULT_POLICY),
        EnvVar(API_KEY_VAR, "API key, sent as x-api-key", secret=True),
        EnvVar(
            NAMESPACE_VAR,
            "Store namespace prefix of the memories (source), labels joined by '.'",
            default=DEFAULT_NAMESPACE,
        ),
    ),
    mapping=(
        ("policy", "POST /runs/wait final state: state.policy (an object) -> policy"),
        (
            "memories",
            "state.memories, of the caller only: id|key -> id, userId -> userId, content -> content, "
            "type -> type, metadata -> metadata",
        ),
        ("activeGoals", "state.activeGoals (goals naming another userId dropped)"),
        (
            "source",
            "POST /store/items/search namespace_prefix/limit/offset: namespace[<prefix>, userId], key, value",
        ),
    ),
)


def _namespace_prefix(env: Mapping[str, str]) -> list[str]:
    raw = (env.get(NAMESPACE_VAR) or "").strip() or DEFAULT_NAMESPACE
    labels = raw.split(".")
    if not all(label.strip() and label == label.strip() for label in labels):
        raise UsageError(NAMESPACE_VAR, raw, "must be non-empty namespace labels joined by '.'")
    return labels


def _client(env: Mapping[str, str], url: str, api_key: str | None) -> JsonHttpClient:
    headers = {"x-api-key": api_key} if api_key else {}
    return JsonHttpClient(
        NAME, url, headers=headers, settings=settings_from_env(env), secrets=[api_key or ""]
    )


class LangGraphBackend(BaseBackend):
    """The policy graph as a backend: ``resolve`` returns its ``policy`` (and the user's memories/goals)."""

    ranking = RANKING_POLICY

    declaration = DECLARATION

    def __init__(
        self,
        client: JsonHttpClient | None,
        *,
        policy_id: str = DEFAULT_POLICY,
        unavailable: str | None = None,
    ) -> None:
        self.client = client
        self.policy_id = policy_id
        self._unavailable = (
            unavailable if unavailable or client is not None else f"url_missing ({URL_VAR} is not set)"
        )

    def availability(self) -> Availability:
        return Availability.no(self._unavailable) if self._unavailable else Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One stateless run of the policy graph for this user and request, mapped into the payload."""
        if self._unavailable or self.client is None:
            raise BackendError(f"langgraph unavailable: {self._unavailable}")
        user_id = user_id_of(request)
        body = {
            "assistant_id": self.policy_id,
            "input": {k: request[k] for k in INPUT_KEYS if request.get(k) is not None},
            "on_disconnect": "cancel",
        }
        state = self.client.post_json("/runs/wait", body, idempotent=False)  # a run: never retried
        try:
            return map_final_state(state, user_id)
        except BackendError as exc:  # a graph's error message may echo a secret back
            raise BackendError(self.client.scrub(str(exc))) from None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def map_final_state(state: object, user_id: str) -> dict[str, Any]:
    """The payload fields of a run's final state; another user's policy, memories or goals are dropped."""
    if not isinstance(state, Mapping):
        raise BackendError(
            f"langgraph /runs/wait: expected the final state object, got {type(state).__name__}"
        )
    failure = state.get("__error__")
    if failure is not None:
        if isinstance(failure, Mapping):
            detail = f"{failure.get('error') or 'Error'}: {failure.get('message') or ''}".strip()
        else:
            detail = str(failure)
        raise BackendError(f"langgraph run failed: {detail[:200]}")
    result: dict[str, Any] = {}
    policy = state.get("policy")
    if policy is not None:
        if not isinstance(policy, Mapping):
            raise BackendError(f"langgraph final state: policy is {type(policy).__name__}, not an object")
        owner = policy.get("userId")
        if owner is not None and owner != user_id:
            log.warning("%s returned a policy of another user; dropped", NAME)
        else:
            result["policy"] = dict(policy)
    memories = state.get("memories")
    if memories is not None:
        if not isinstance(memories, list):
            raise BackendError("langgraph final state: memories is not a list")
        items = [_memory(m) for m in memories if isinstance(m, Mapping)]
        result["memories"] = only_user(items, user_id, backend=NAME)
    goals = state.get("activeGoals")
    if goals is not None:
        if not isinstance(goals, list):
            raise BackendError("langgraph final state: activeGoals is not a list")
        result["activeGoals"] = _own_goals(goals, user_id)
    return result


def _memory(m: Mapping[str, Any]) -> dict[str, Any]:
    user = m.get("userId", m.get("user_id"))
    content = m.get("content")
    metadata = m.get("metadata")
    return memory_item(
        id=m.get("id") or m.get("key") or "",
        user_id=user if isinstance(user, str) else "",
        content=content if isinstance(content, str) else json.dumps(content),
        source=NAME,
        score=m.get("score") if isinstance(m.get("score"), int | float) else None,
        type=m.get("type") if isinstance(m.get("type"), str) else None,
        metadata=metadata if isinstance(metadata, Mapping) else None,
        created_at=m.get("createdAt", m.get("created_at")),
        updated_at=m.get("updatedAt", m.get("updated_at")),
    )


def _own_goals(goals: Sequence[Any], user_id: str) -> list[Any]:
    """Goals as the graph gave them, minus any that name another user."""
    kept = [g for g in goals if not (isinstance(g, Mapping) and "userId" in g and g["userId"] != user_id)]
    if len(kept) != len(goals):
        log.warning("%s returned %d goal(s) of another user; dropped", NAME, len(goals) - len(kept))
    return kept


def from_env(env: Mapping[str, str]) -> LangGraphBackend:
    """Build the backend from the environment; never raises, never connects."""
    problems = configuration_problems(DECLARATION, env)
    policy_id = (env.get(POLICY_VAR) or "").strip() or DEFAULT_POLICY
    url = (env.get(URL_VAR) or "").strip()
    if url and not _http_url(url):
        problems.append(("url_invalid", f"{URL_VAR}={redact_url(url)!r} must be an http(s) URL"))
        url = ""
    api_key = (env.get(API_KEY_VAR) or "").strip() or None
    return LangGraphBackend(
        _client(env, url, api_key) if url else None, policy_id=policy_id, unavailable=reason_of(problems)
    )


# ---- the migration source ---------------------------------------------------------------------
class LangGraphSource:
    """Every Store item under the namespace prefix, by ``limit``/``offset`` paging to a short page.

    The Store lists items by last update; a store written during the import may shift offsets (the
    verification then names the ids that differ) -- import from a quiet store.
    """

    name = NAME

    def __init__(
        self, client: JsonHttpClient, url: str, *, prefix: Sequence[str] = (DEFAULT_NAMESPACE,)
    ) -> None:
        self.client = client
        self.url = url
        self.prefix = list(prefix)

    @property
    def key(self) -> str:
        return f"langgraph:{redact_url(self.url.rstrip('/'))}/store/{'.'.join(self.prefix)}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        offset = _offset(cursor)
        body = {"namespace_prefix": self.prefix, "limit": int(size), "offset": offset}
        answer = self.client.post_json("/store/items/search", body, idempotent=True)  # a read
        items = answer.get("items") if isinstance(answer, Mapping) else None
        if not isinstance(items, list):
            raise BackendError("langgraph POST /store/items/search: the answer has no 'items' list")
        next_cursor = str(offset + len(items)) if len(items) >= size else None
        return record_page([self._fields(item) for item in items], next_cursor)

    def close(self) -> None:
        self.client.close()

    def _fields(self, item: object) -> dict[str, Any]:
        """An item as the fields of its :class:`SourceRecord` (the page is built in one call)."""
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise BackendError("langgraph store: an item without a key")
        namespace = item.get("namespace")
        depth = len(self.prefix)
        if (
            not isinstance(namespace, list)
            or len(namespace) <= depth
            or namespace[:depth] != self.prefix
            or not isinstance(namespace[depth], str)
            or not namespace[depth]
        ):
            raise BackendError(f"langgraph store item {item['key']!r}: namespace {namespace!r} names no user")
        user = namespace[depth]
        value = _mapping(item.get("value"))
        content = value.get("content", value.get("text"))
        if content is None:
            content = value
        kind = value.get("type", value.get("kind"))
        session = value.get("sessionId")
        metadata = {k: v for k, v in value.items() if k not in ("content", "text", "type", "sessionId")}
        metadata["namespace"] = list(namespace)
        metadata["key"] = item["key"]
        return {
            "id": "/".join([*namespace[depth:], item["key"]]),  # keys are unique per namespace only
            "user_id": user,
            "content": content if isinstance(content, str) else json.dumps(content, sort_keys=True),
            "type": kind if isinstance(kind, str) and kind else "fact",
            "metadata": metadata,
            "created_at": _timestamp(item.get("created_at")),
            "updated_at": _timestamp(item.get("updated_at")),
            "session_id": session if isinstance(session, str) else None,
        }  # the Store API returns no embeddings: vector and model stay None


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit():
        raise UsageError("cursor", cursor, "a langgraph cursor is an item offset (a whole number)")
    return int(cursor)


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BackendError(f"langgraph store: timestamp {value!r} is not ISO 8601") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def source_from_env(env: Mapping[str, str]) -> LangGraphSource:
    """The Store source from the backend's own variables (the feature flag is not needed to read)."""
    url = require(env, URL_VAR)
    api_key = (env.get(API_KEY_VAR) or "").strip() or None
    return LangGraphSource(_client(env, url, api_key), url, prefix=_namespace_prefix(env))


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
