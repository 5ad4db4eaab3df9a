"""The Letta lifecycle backend (archival memory of one agent, scoped per user by tag) and migration source.

Dormant unless ``MEMORY_LETTA_ENABLED=1``, ``MEMORY_LETTA_API_KEY`` and ``MEMORY_LETTA_AGENT_ID`` are set
(``disabled``, ``api_key_missing``, ``agent_id_missing``); an invalid base URL or path is its own reason.
No Letta SDK: the REST API through :class:`memwork.http.JsonHttpClient` (``Authorization: Bearer <key>``,
``X-Project: <project>`` when ``MEMORY_LETTA_PROJECT_ID`` is set), built lazily: ``from_env`` and
``availability()`` never touch the network.

**Tenancy.** One agent serves many users, and Letta's archival memory belongs to the agent, so every
passage memwork writes carries the exact tag ``memwork-user:<userId>`` (plus ``memwork-session:<id>`` and
``memwork-kind:turn|summary``), every search filters on that tag (``tag_match_mode=all``), and every
result goes through :func:`~memwork.backends.payload.only_user`: a passage whose user tag is not exactly
the caller's (``TenantX`` vs ``tenantx``) is dropped.

Calls (https://docs.letta.com/api-reference/agents/passages; shapes written down in ``tests/fakes/letta.py``),
paths are templates with ``{agent_id}``:

* **resolve** -> ``memories``: ``GET MEMORY_LETTA_RESOLVE_PATH`` (default
  ``/v1/agents/{agent_id}/archival-memory/search``) with ``query``, ``tags=[memwork-user:<userId>]``,
  ``tag_match_mode=all``, ``top_k=limit``. ``memories`` rather than ``semanticMemories``: they are the
  agent's long-term (archival) memory of the user in Letta's own hybrid ranking, without a similarity
  score (``score`` is Letta's ``relevance.rrf_score`` when it sends one, else None). No query: nothing to
  search, ``memories`` is empty.
* **write**: one passage per write, ``POST MEMORY_LETTA_WRITE_PATH`` (default
  ``/v1/agents/{agent_id}/archival-memory``) ``{text: "role: content" lines, tags}``: one call per write
  fits the deadline and cannot half-succeed; never retried.
* **compact**: the session's passages (the resolve search with the user and session tags, at most 200),
  summarised *extractively* (no LLM: the user's own lines, de-duplicated, oldest first, at most 4,000
  characters) into one ``memwork-kind:summary`` passage, ``POST MEMORY_LETTA_COMPACT_PATH`` (default the write
  path). Re-running with nothing new adds nothing (an identical summary exists). Letta's own
  ``/summarize`` is not used: it summarises the agent's shared message buffer, i.e. every user at once.

The source lists the agent's passages (``GET /v1/agents/{agent_id}/archival-memory``, ``ascending=true``,
``limit``, cursor ``after`` = the last passage id) to the end: user from the ``memwork-user:`` tag (a
passage without one belongs to the agent: userId = agent id), tags and Letta's metadata -> metadata,
``embedding`` (Letta pads stored vectors to 4,096 with zeros; cut back to
``embedding_config.embedding_dim``) with ``embedding_config.embedding_model`` as its model. Its
``search`` (for the certificate's ``preserved`` gate) is the resolve search (``MEMORY_LETTA_RESOLVE_PATH``,
the same user tag and guard) and takes the query's *text*: Letta embeds it with the agent's model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.payload import aware_time, memory_item, only_user, session_id_of, user_id_of
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

NAME = "letta"
FLAG_VAR = "MEMORY_LETTA_ENABLED"
API_KEY_VAR = "MEMORY_LETTA_API_KEY"
AGENT_VAR = "MEMORY_LETTA_AGENT_ID"
PROJECT_VAR = "MEMORY_LETTA_PROJECT_ID"
BASE_URL_VAR = "MEMORY_LETTA_BASE_URL"
RESOLVE_PATH_VAR = "MEMORY_LETTA_RESOLVE_PATH"
WRITE_PATH_VAR = "MEMORY_LETTA_WRITE_PATH"
COMPACT_PATH_VAR = "MEMORY_LETTA_COMPACT_PATH"

DEFAULT_BASE_URL = "https://api.letta.com"
PASSAGES_PATH = "/v1/agents/{agent_id}/archival-memory"
DEFAULT_RESOLVE_PATH = PASSAGES_PATH + "/search"
DEFAULT_WRITE_PATH = PASSAGES_PATH
DEFAULT_COMPACT_PATH = PASSAGES_PATH
USER_TAG = "memwork-user:"
SESSION_TAG = "memwork-session:"
KIND_TAG = "memwork-kind:"
KIND_TURN = "turn"
KIND_SUMMARY = "summary"
DEFAULT_LIMIT = 40
MAX_LIMIT = 200
COMPACT_TOP_K = 200  #: passages of one session read for its summary
MAX_SUMMARY_CHARS = 4000
PURGE_ROUNDS = 20  #: searches of up to COMPACT_TOP_K passages each while purging one user
SOURCE_TIMEOUT_S = 30.0  #: a migration read is not under the facade's deadline

DECLARATION = Declaration(
    name=NAME,
    category="lifecycle",
    role="long/short-term memory OS",
    capabilities=("resolve", "write", "compact"),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(API_KEY_VAR, "Letta API key (Authorization: Bearer <key>)", required=True, secret=True),
        EnvVar(AGENT_VAR, "Letta agent whose archival memory holds every user's passages", required=True),
        EnvVar(PROJECT_VAR, "Letta project (sent as the X-Project header)"),
        EnvVar(BASE_URL_VAR, "Letta API base URL", default=DEFAULT_BASE_URL),
        EnvVar(RESOLVE_PATH_VAR, "HTTP path for resolve (archival search)", default=DEFAULT_RESOLVE_PATH),
        EnvVar(WRITE_PATH_VAR, "HTTP path for write (insert passage)", default=DEFAULT_WRITE_PATH),
        EnvVar(COMPACT_PATH_VAR, "HTTP path for compact (insert summary)", default=DEFAULT_COMPACT_PATH),
    ),
    mapping=(
        (
            "memories",
            "Letta archival passages of the user (GET .../archival-memory/search, tags=[memwork-user:"
            "<userId>], tag_match_mode=all, top_k=limit), Letta's order: id -> id, the memwork-user tag -> "
            "userId, content -> content, memwork-kind tag -> type (turn -> conversation, summary -> "
            "summary), relevance.rrf_score -> score (else None), timestamp -> createdAt, tags and the "
            "session -> metadata",
        ),
        (
            "write",
            "POST .../archival-memory {text: the messages as 'role: content' lines, tags: [memwork-user:"
            "<userId>, memwork-session:<sessionId>, memwork-kind:turn]}: one passage, never retried",
        ),
        (
            "compact",
            "the session's passages -> one extractive summary passage (the user's lines, de-duplicated) "
            "tagged memwork-kind:summary; skipped when an identical summary exists; never retried",
        ),
    ),
)


# ---- small helpers -------------------------------------------------------------------------------
def user_tag(user_id: str) -> str:
    return f"{USER_TAG}{user_id}"


def session_tag(session_id: str) -> str:
    return f"{SESSION_TAG}{session_id}"


def _tag_value(tags: Sequence[Any], prefix: str) -> str | None:
    """The value of the one tag with ``prefix``; None when there is none or more than one (ambiguous)."""
    values = [t[len(prefix) :] for t in tags if isinstance(t, str) and t.startswith(prefix)]
    return values[0] if len(values) == 1 else None


def _base_url(env: Mapping[str, str], problems: list[tuple[str, str]]) -> str:
    raw = (env.get(BASE_URL_VAR) or "").strip() or DEFAULT_BASE_URL
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        problems.append(("invalid_url", f"{BASE_URL_VAR}={redact_url(raw)!r} must be an http(s) URL"))
        return DEFAULT_BASE_URL
    return raw.rstrip("/")


def _path(env: Mapping[str, str], name: str, default: str, problems: list[tuple[str, str]]) -> str:
    raw = (env.get(name) or "").strip() or default
    rest = raw.replace("{agent_id}", "")
    if not raw.startswith("/") or "://" in raw or any(c in rest for c in "?#{} \t"):
        problems.append(
            (
                "invalid_path",
                f"{name}={raw!r} must be an absolute path (placeholder {{agent_id}}) like {default}",
            )
        )
        return default
    return raw


def _limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError("limit", value, "must be a non-negative integer")
    return min(value, MAX_LIMIT)


def _search_results(response: Any) -> list[Mapping[str, Any]]:
    if not isinstance(response, Mapping) or not isinstance(response.get("results"), list):
        raise BackendError("letta archival search: expected {results, count}")
    return [r for r in response["results"] if isinstance(r, Mapping)]


def archival_search(
    client: JsonHttpClient, path: str, query: str, tags: list[str], top_k: int
) -> list[Mapping[str, Any]]:
    """``GET path`` (the archival search of one agent) for ``query``, restricted to the passages
    carrying every tag in ``tags``, most relevant first in Letta's own ranking: the one search of the
    backend (resolve, compact, purge) and the source's ``search``."""
    params = {"query": query, "tags": tags, "tag_match_mode": "all", "top_k": top_k}
    return _search_results(client.get_json(path, params))


def _passage_ids(response: Any) -> list[str]:
    """Ids of the passages an insert created (Letta answers with a list of passages)."""
    if not isinstance(response, list):
        raise BackendError(f"letta insert passage answered {type(response).__name__}, not a list")
    return [str(p["id"]) for p in response if isinstance(p, Mapping) and p.get("id")]


_TYPES = {KIND_TURN: "conversation", KIND_SUMMARY: "summary"}


def _item(result: Mapping[str, Any]) -> dict[str, Any]:
    """One search result as a payload item; userId only from exactly one memwork-user tag."""
    tags = [t for t in result.get("tags") or [] if isinstance(t, str)]
    relevance = result.get("relevance") if isinstance(result.get("relevance"), Mapping) else {}
    score = relevance.get("rrf_score") if isinstance(relevance, Mapping) else None
    return memory_item(
        id=result.get("id"),
        user_id=_tag_value(tags, USER_TAG) or "",
        content=str(result.get("content") or ""),
        source=NAME,
        score=score if isinstance(score, int | float) and not isinstance(score, bool) else None,
        type=_TYPES.get(_tag_value(tags, KIND_TAG) or "", "fact"),
        metadata={"tags": tags, "sessionId": _tag_value(tags, SESSION_TAG)},
        created_at=result.get("timestamp"),
    )


def _has_tag(result: Mapping[str, Any], tag: str) -> bool:
    tags = result.get("tags")
    return isinstance(tags, list) and tag in tags


def _oldest_first(results: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """By Letta's timestamp (an unparseable one first), then id: the order the turns were written."""
    oldest = datetime.min.replace(tzinfo=UTC)
    return sorted(results, key=lambda r: (aware_time(r.get("timestamp")) or oldest, str(r.get("id"))))


def summarise(session_id: str, texts: Sequence[str]) -> str:
    """The extractive summary of a session: the user's own lines, de-duplicated, oldest first."""
    lines: list[str] = []
    for text in texts:
        for line in text.splitlines():
            said = line[len("user: ") :].strip() if line.startswith("user: ") else ""
            if said and said not in lines:
                lines.append(said)
    body = "\n".join(f"- {line}" for line in lines)
    return f"Session {session_id} summary ({len(lines)} user statements):\n{body}"[:MAX_SUMMARY_CHARS]


# ---- the backend ---------------------------------------------------------------------------------
class LettaBackend(BaseBackend):
    """One Letta agent's archival memory, shared by many users, each scoped by an exact tag."""

    ranking = RANKING_POLICY

    declaration = DECLARATION

    def __init__(
        self,
        client: JsonHttpClient | None,
        agent_id: str | None,
        *,
        resolve_path: str = DEFAULT_RESOLVE_PATH,
        write_path: str = DEFAULT_WRITE_PATH,
        compact_path: str = DEFAULT_COMPACT_PATH,
        unavailable: str | None = None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.resolve_path = resolve_path
        self.write_path = write_path
        self.compact_path = compact_path
        self._unavailable = unavailable or (None if client is not None and agent_id else "not_configured")

    def availability(self) -> Availability:
        return Availability.no(self._unavailable) if self._unavailable else Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The user's archival passages matching ``query`` (``memories``), only the user's own."""
        client = self._client()
        user_id = user_id_of(request)
        limit = _limit(request.get("limit"))
        query = request.get("query")
        if limit == 0 or not isinstance(query, str) or not query.strip():
            return {"memories": []}
        results = self.search(client, query, [user_tag(user_id)], limit)
        return {"memories": only_user([_item(r) for r in results], user_id, backend=NAME)}

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One passage holding the messages, tagged with the user and session; sent once."""
        client = self._client()
        user_id, session_id = user_id_of(request), session_id_of(request)
        messages = list(request.get("messages") or [])
        if not messages:
            raise UsageError("messages", messages, "write needs at least one message")
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        tags = [user_tag(user_id), f"{KIND_TAG}{KIND_TURN}"]
        if session_id:
            tags.insert(1, session_tag(session_id))
        ids = _passage_ids(client.post_json(self._at(self.write_path), {"text": text, "tags": tags}))
        return {"written": len(messages), "passageIds": ids}

    def compact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Summarise the session's turn passages into one summary passage (unless an identical exists)."""
        client = self._client()
        user_id, session_id = user_id_of(request), session_id_of(request)
        if session_id is None:
            return {"compacted": 0, "note": "letta summarises one session: no sessionId given"}
        passages = self._session_passages(client, user_id, session_id)
        turns = _oldest_first([r for r in passages if _has_tag(r, f"{KIND_TAG}{KIND_TURN}")])
        if not turns:
            return {"compacted": 0}
        text = summarise(session_id, [str(r.get("content") or "") for r in turns])
        for r in passages:
            if _has_tag(r, f"{KIND_TAG}{KIND_SUMMARY}") and r.get("content") == text:
                return {"compacted": len(turns), "summaryId": str(r.get("id")), "unchanged": True}
        tags = [user_tag(user_id), session_tag(session_id), f"{KIND_TAG}{KIND_SUMMARY}"]
        ids = _passage_ids(client.post_json(self._at(self.compact_path), {"text": text, "tags": tags}))
        return {"compacted": len(turns), "summaryId": ids[0] if ids else None, "unchanged": False}

    def _session_passages(
        self, client: JsonHttpClient, user_id: str, session_id: str
    ) -> list[Mapping[str, Any]]:
        """Up to COMPACT_TOP_K passages carrying both the user's and the session's tag (others dropped)."""
        found = self.search(
            client, f"session {session_id}", [user_tag(user_id), session_tag(session_id)], COMPACT_TOP_K
        )
        mine = [r for r in found if _item(r)["userId"] == user_id and _has_tag(r, session_tag(session_id))]
        if len(mine) < len(found):
            log.warning(
                "letta returned %d passage(s) of another user or session; dropped", len(found) - len(mine)
            )
        return mine

    def search(
        self, client: JsonHttpClient, query: str, tags: list[str], top_k: int
    ) -> list[Mapping[str, Any]]:
        """Letta's archival search restricted to passages carrying every tag in ``tags`` (a read)."""
        return archival_search(client, self._at(self.resolve_path), query, tags, top_k)

    def purge_user(self, user_id: str) -> dict[str, int]:
        """Delete the user's passages (found by the exact user tag, deleted one by one: ``DELETE
        .../archival-memory/{id}``); for the smoke's and the self-check's synthetic users."""
        client = self._client()
        if not isinstance(user_id, str) or not user_id:
            raise UsageError("userId", user_id, "purge needs one exact user id")
        deleted = 0
        for _ in range(PURGE_ROUNDS):
            found = self.search(client, "memwork purge", [user_tag(user_id)], COMPACT_TOP_K)
            mine = [str(r["id"]) for r in found if r.get("id") and _item(r)["userId"] == user_id]
            if not mine:
                break
            for passage_id in mine:
                path = f"{self._at(PASSAGES_PATH)}/{quote(passage_id, safe='')}"
                client.request_json("DELETE", path, idempotent=True)
                deleted += 1
        return {"passages": deleted}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _client(self) -> JsonHttpClient:
        if self._unavailable or self.client is None:
            raise BackendError(f"letta unavailable: {self._unavailable}")
        return self.client

    def _at(self, template: str) -> str:
        return template.replace("{agent_id}", quote(self.agent_id or "", safe=""))


def _client_from_env(env: Mapping[str, str], base_url: str, api_key: str, **overrides: Any) -> JsonHttpClient:
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
    project = (env.get(PROJECT_VAR) or "").strip()
    if project:
        headers["X-Project"] = project
    return JsonHttpClient(
        NAME, base_url, headers=headers, settings=settings_from_env(env, **overrides), secrets=[api_key]
    )


def from_env(env: Mapping[str, str]) -> LettaBackend:
    """The backend from environment variables; never raises, never connects."""
    problems = configuration_problems(DECLARATION, env)
    base_url = _base_url(env, problems)
    paths = {
        name: _path(env, name, default, problems)
        for name, default in (
            (RESOLVE_PATH_VAR, DEFAULT_RESOLVE_PATH),
            (WRITE_PATH_VAR, DEFAULT_WRITE_PATH),
            (COMPACT_PATH_VAR, DEFAULT_COMPACT_PATH),
        )
    }
    agent_id = (env.get(AGENT_VAR) or "").strip() or None
    client = None
    if not problems:
        client = _client_from_env(env, base_url, (env.get(API_KEY_VAR) or "").strip())
    return LettaBackend(
        client,
        agent_id,
        resolve_path=paths[RESOLVE_PATH_VAR],
        write_path=paths[WRITE_PATH_VAR],
        compact_path=paths[COMPACT_PATH_VAR],
        unavailable=reason_of(problems),
    )


# ---- the migration source ------------------------------------------------------------------------
class LettaSource:
    """Every archival passage of one agent, oldest first, paged by Letta's ``after`` cursor."""

    name = NAME
    #: Letta's archival search takes the query's text (Letta embeds it with the agent's own model)
    search_input = "text"

    def __init__(
        self,
        client: JsonHttpClient,
        base_url: str,
        agent_id: str,
        *,
        resolve_path: str = DEFAULT_RESOLVE_PATH,
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.agent_id = agent_id
        self.resolve_path = resolve_path

    @property
    def key(self) -> str:
        return f"letta:{redact_url(self.base_url)}/agents/{self.agent_id}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        params: dict[str, Any] = {"limit": size, "ascending": "true"}
        if cursor is not None:
            params["after"] = cursor
        path = PASSAGES_PATH.replace("{agent_id}", quote(self.agent_id, safe=""))
        response = self.client.get_json(path, params)
        if not isinstance(response, list):
            raise BackendError(f"letta list passages answered {type(response).__name__}, not a list")
        passages = [p for p in response if isinstance(p, Mapping) and p.get("id")]
        more = len(response) >= size and bool(passages)
        return record_page([self._fields(p) for p in passages], str(passages[-1]["id"]) if more else None)

    def search(self, user_id: str, text: str, k: int) -> list[str] | None:
        """The ids of the user's ``k`` most relevant passages for the query ``text``, in Letta's own
        ranking: the backend's archival search filtered by the exact ``memwork-user:<id>`` tag, then
        only the passages whose user tag is exactly ``user_id``. None for the agent's own passages
        (those without a user tag, listed as the agent id's): no tag filter selects them apart from
        every user's, so they cannot be searched on their own."""
        if user_id == self.agent_id:
            return None
        path = self.resolve_path.replace("{agent_id}", quote(self.agent_id, safe=""))
        found = archival_search(self.client, path, text, [user_tag(user_id)], int(k))
        mine = only_user([_item(r) for r in found], user_id, backend=NAME)
        return [str(item["id"]) for item in mine[:k]]

    def close(self) -> None:
        self.client.close()

    def _fields(self, passage: Mapping[str, Any]) -> dict[str, Any]:
        """A passage as the fields of its :class:`SourceRecord` (the page is built in one call)."""
        tags = [t for t in passage.get("tags") or [] if isinstance(t, str)]
        metadata = dict(passage["metadata"]) if isinstance(passage.get("metadata"), Mapping) else {}
        metadata["tags"] = tags
        for extra in ("archive_id", "file_id", "file_name"):
            if passage.get(extra):
                metadata.setdefault(f"letta_{extra}", passage[extra])
        vector, model = _vector(passage)
        return {
            "id": str(passage["id"]),
            "user_id": _tag_value(tags, USER_TAG) or self.agent_id,
            "content": str(passage.get("text") or ""),
            "type": _TYPES.get(_tag_value(tags, KIND_TAG) or "", "fact"),
            "metadata": metadata,
            "created_at": aware_time(passage.get("created_at")),
            "updated_at": aware_time(passage.get("updated_at")),
            "session_id": _tag_value(tags, SESSION_TAG),
            "agent_id": self.agent_id,
            "vector": vector,
            "model": model,
        }


def _vector(passage: Mapping[str, Any]) -> tuple[list[float] | None, str | None]:
    """The stored embedding without Letta's zero padding, and its model (None, None: none stored)."""
    embedding = passage.get("embedding")
    if not isinstance(embedding, list) or not embedding:
        return None, None
    vector = [float(x) for x in embedding]
    config = passage.get("embedding_config") if isinstance(passage.get("embedding_config"), Mapping) else {}
    dim = config.get("embedding_dim") if isinstance(config, Mapping) else None
    if isinstance(dim, int) and 0 < dim < len(vector) and not any(vector[dim:]):
        vector = vector[:dim]
    model = config.get("embedding_model") if isinstance(config, Mapping) else None
    return vector, str(model) if model else None


def source_from_env(env: Mapping[str, str]) -> LettaSource:
    """The source from the backend's own variables (the flag is not needed to read)."""
    api_key = require(env, API_KEY_VAR)
    agent_id = require(env, AGENT_VAR)
    problems: list[tuple[str, str]] = []
    base_url = _base_url(env, problems)
    if problems:
        raise UsageError(BASE_URL_VAR, redact_url(env.get(BASE_URL_VAR)), "must be an http(s) URL")
    resolve_path = _path(env, RESOLVE_PATH_VAR, DEFAULT_RESOLVE_PATH, problems)
    if problems:
        raise UsageError(RESOLVE_PATH_VAR, env.get(RESOLVE_PATH_VAR), "must be an absolute path")
    client = _client_from_env(env, base_url, api_key, timeout_s=SOURCE_TIMEOUT_S, connect_timeout_s=5.0)
    return LettaSource(client, base_url, agent_id, resolve_path=resolve_path)
