"""The Mem0 extraction backend (write raw turns, compact = Mem0's extraction) and migration source.

Dormant unless ``MEMORY_MEM0_ENABLED=1`` and ``MEMORY_MEM0_API_KEY`` are set (``disabled (...)``,
``api_key_missing (...)``); an invalid base URL or path is its own reason. ``resolve`` is not
implemented: ``MEMORY_BACKEND=mem0`` leaves resolve on legacy (Mem0 extracts; it is not where the
application reads). No Mem0 SDK: the platform REST API through :class:`memwork.http.JsonHttpClient`
(``Authorization: Token <key>``), built lazily, so ``from_env`` and ``availability()`` never touch
the network.

Calls (https://docs.mem0.ai/api-reference, shapes written down in ``tests/fakes/mem0.py``):

* **write** -- ``POST MEMORY_MEM0_WRITE_PATH`` (default ``/v1/memories/``) with the request's messages,
  ``user_id`` = userId, ``run_id`` = sessionId, ``metadata`` = ``{memwork_kind: "turn",
  memwork_session_id}`` and ``infer: false``: Mem0 stores each (non-system) message verbatim as one
  memory, no LLM call on the hot path, so the evidence is kept exactly and the call is fast. Sent once,
  never retried (a retried add would store the turns twice).
* **compact** -- reads the session's turns back (``GET /v1/memories/?user_id=&run_id=&page=&page_size=``,
  paged to the end, idempotent), keeps only the caller's own turns of that session (exact ``user_id``,
  ``metadata.memwork_session_id``; anything else is dropped and logged), then ``POST
  MEMORY_MEM0_COMPACT_PATH`` (default ``/v1/memories/``) with those turns, ``user_id`` and ``infer:
  true``: Mem0's own extraction (ADD / UPDATE / DELETE against the user's existing memories) turns the
  session into long-term user memories. No ``run_id`` on purpose: extracted memories belong to the user,
  not to one session. Mem0 processes adds asynchronously and answers with event ids, which are returned.
  Without a ``sessionId`` nothing is extracted (Mem0 extracts per conversation).

The source lists every user (``GET /v1/entities/``, ``type == "user"``, following ``next``), then each
user's memories (``GET /v1/memories/?user_id=&page=&page_size=``, ``{count, next, previous, results}``) to
the end. Mem0's API returns no vectors, so records carry none (the import re-embeds).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.payload import aware_time, session_id_of, user_id_of
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
from memwork.errors import BackendError, UsageError
from memwork.http import HttpError, JsonHttpClient, settings_from_env
from memwork.redaction import redact_url

log = logging.getLogger("memwork.backends")

NAME = "mem0"
FLAG_VAR = "MEMORY_MEM0_ENABLED"
API_KEY_VAR = "MEMORY_MEM0_API_KEY"
PROJECT_VAR = "MEMORY_MEM0_PROJECT_ID"
BASE_URL_VAR = "MEMORY_MEM0_BASE_URL"
WRITE_PATH_VAR = "MEMORY_MEM0_WRITE_PATH"
COMPACT_PATH_VAR = "MEMORY_MEM0_COMPACT_PATH"

DEFAULT_BASE_URL = "https://api.mem0.ai"
DEFAULT_WRITE_PATH = "/v1/memories/"
DEFAULT_COMPACT_PATH = "/v1/memories/"
LIST_PATH = "/v1/memories/"  #: the paginated listing (compact's read, the source)
ENTITIES_PATH = "/v1/entities/"
LIST_PAGE_SIZE = 100  #: Mem0's default page size
MAX_COMPACT_MESSAGES = 100  #: the newest turns of a session handed to one extraction (the write limit)
MAX_PAGES = 1000  #: a listing that never ends is an error, not a hang
SOURCE_TIMEOUT_S = 30.0  #: a migration read is not under the facade's deadline
KIND_TURN = "turn"
KIND_EXTRACTED = "extracted"

DECLARATION = Declaration(
    name=NAME,
    category="extraction",
    role="automatic memory generation",
    capabilities=("write", "compact"),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(API_KEY_VAR, "Mem0 API key (Authorization: Token <key>)", required=True, secret=True),
        EnvVar(PROJECT_VAR, "Mem0 project (sent as project_id)"),
        EnvVar(BASE_URL_VAR, "Mem0 API base URL", default=DEFAULT_BASE_URL),
        EnvVar(WRITE_PATH_VAR, "HTTP path for write (raw turns, infer: false)", default=DEFAULT_WRITE_PATH),
        EnvVar(
            COMPACT_PATH_VAR, "HTTP path for compact (extraction, infer: true)", default=DEFAULT_COMPACT_PATH
        ),
    ),
    mapping=(
        ("resolve", "not supported: resolve stays on legacy (MEMORY_BACKEND=mem0 does not affect it)"),
        (
            "write",
            "POST MEMORY_MEM0_WRITE_PATH {messages, user_id: userId, run_id: sessionId, infer: false, "
            "metadata: {memwork_kind: turn, memwork_session_id}}: one Mem0 memory per non-system message, "
            "verbatim; never retried; returns {written, eventIds}",
        ),
        (
            "compact",
            "the session's turns (GET /v1/memories/?user_id&run_id, paged, the caller's own only) -> "
            "POST MEMORY_MEM0_COMPACT_PATH {messages, user_id, infer: true}: Mem0 extracts long-term user "
            "memories; never retried; returns {compacted, eventIds}",
        ),
    ),
)


# ---- small helpers -------------------------------------------------------------------------------
def _base_url(env: Mapping[str, str], problems: list[tuple[str, str]]) -> str:
    raw = (env.get(BASE_URL_VAR) or "").strip() or DEFAULT_BASE_URL
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        problems.append(("invalid_url", f"{BASE_URL_VAR}={redact_url(raw)!r} must be an http(s) URL"))
        return DEFAULT_BASE_URL
    return raw.rstrip("/")


def _path(env: Mapping[str, str], name: str, default: str, problems: list[tuple[str, str]]) -> str:
    raw = (env.get(name) or "").strip() or default
    if not raw.startswith("/") or "://" in raw or any(c in raw for c in "?# \t"):
        problems.append(("invalid_path", f"{name}={raw!r} must be an absolute path such as {default}"))
        return default
    return raw


def _event_ids(response: Any) -> list[str]:
    """Event ids of Mem0's queued-add answer: a bare list, or ``{"results": [...]}`` (v1.1)."""
    items = response.get("results") if isinstance(response, Mapping) else response
    if not isinstance(items, list):
        raise BackendError(f"mem0 add answered {type(response).__name__}, not a list of events")
    return [str(item["event_id"]) for item in items if isinstance(item, Mapping) and item.get("event_id")]


def _results(response: Any, what: str) -> tuple[list[Mapping[str, Any]], bool]:
    """``(results, has_next)`` of a paginated Mem0 answer (or a bare list: one page, the last)."""
    if isinstance(response, list):
        return [r for r in response if isinstance(r, Mapping)], False
    if not isinstance(response, Mapping) or not isinstance(response.get("results"), list):
        raise BackendError(f"mem0 {what}: expected {{count, next, previous, results}}")
    return [r for r in response["results"] if isinstance(r, Mapping)], bool(response.get("next"))


# ---- the backend ---------------------------------------------------------------------------------
class Mem0Backend(BaseBackend):
    """Mem0 as the extraction backend: write stores raw turns, compact runs Mem0's extraction."""

    ranking = RANKING_SEMANTIC

    declaration = DECLARATION

    def __init__(
        self,
        client: JsonHttpClient | None,
        *,
        project_id: str | None = None,
        write_path: str = DEFAULT_WRITE_PATH,
        compact_path: str = DEFAULT_COMPACT_PATH,
        unavailable: str | None = None,
    ) -> None:
        self.client = client
        self.project_id = project_id
        self.write_path = write_path
        self.compact_path = compact_path
        self._unavailable = unavailable or (None if client is not None else "not_configured")

    def availability(self) -> Availability:
        return Availability.no(self._unavailable) if self._unavailable else Availability.ok()

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Store the messages verbatim (``infer: false``) for the user and session; sent once."""
        client = self._client()
        user_id, session_id = user_id_of(request), session_id_of(request)
        messages = [
            {"role": str(m["role"]), "content": str(m["content"])} for m in request.get("messages") or []
        ]
        if not messages:
            raise UsageError("messages", messages, "write needs at least one message")
        metadata: dict[str, Any] = {"memwork_kind": KIND_TURN, "source": "memwork"}
        body: dict[str, Any] = {"messages": messages, "user_id": user_id, "infer": False, "version": "v2"}
        if session_id:
            body["run_id"] = session_id
            metadata["memwork_session_id"] = session_id
        body["metadata"] = metadata
        self._scope(body)
        events = _event_ids(client.post_json(self.write_path, body))
        return {"written": len(messages), "eventIds": events}

    def compact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Hand the session's own turns to Mem0's extraction (``infer: true``); sent once."""
        client = self._client()
        user_id, session_id = user_id_of(request), session_id_of(request)
        if session_id is None:
            return {"compacted": 0, "eventIds": [], "note": "mem0 extracts per session: no sessionId given"}
        turns = self.session_turns(user_id, session_id)[-MAX_COMPACT_MESSAGES:]
        if not turns:
            return {"compacted": 0, "eventIds": []}
        body: dict[str, Any] = {
            "messages": turns,
            "user_id": user_id,
            "infer": True,
            "version": "v2",
            "metadata": {"memwork_kind": KIND_EXTRACTED, "memwork_compacted_session": session_id},
        }
        self._scope(body)
        events = _event_ids(client.post_json(self.compact_path, body))
        return {"compacted": len(turns), "eventIds": events}

    def session_turns(self, user_id: str, session_id: str) -> list[dict[str, str]]:
        """The session's raw turns of this user, oldest first, as ``{role, content}`` messages."""
        client = self._client()
        params: dict[str, Any] = {"user_id": user_id, "run_id": session_id, "page_size": LIST_PAGE_SIZE}
        self._scope(params)
        kept: list[Mapping[str, Any]] = []
        dropped = 0
        for items in _pages(client, LIST_PATH, params, "list memories"):
            for item in items:
                raw_meta = item.get("metadata")
                meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
                mine = item.get("user_id") == user_id and meta.get("memwork_session_id") == session_id
                if mine and meta.get("memwork_kind") == KIND_TURN and isinstance(item.get("memory"), str):
                    kept.append(item)
                elif item.get("user_id") != user_id:
                    dropped += 1
        if dropped:
            log.warning("mem0 returned %d memory item(s) of another user; dropped", dropped)
        kept.sort(key=lambda i: (str(i.get("created_at") or ""), str(i.get("id"))))
        return [
            {"role": str((i.get("metadata") or {}).get("role") or "user"), "content": str(i["memory"])}
            for i in kept
        ]

    def purge_user(self, user_id: str) -> dict[str, int]:
        """Delete every memory of ``user_id`` (``DELETE /v1/memories/?user_id=``; the smoke's and the
        self-check's synthetic users). Never ``*``: the id must be a real, exact user id."""
        client = self._client()
        if not isinstance(user_id, str) or not user_id or user_id.strip() in ("", "*"):
            raise UsageError("userId", user_id, "purge needs one exact user id")
        params: dict[str, Any] = {"user_id": user_id}
        self._scope(params)
        client.request_json("DELETE", LIST_PATH, params=params, idempotent=True)
        return {"users": 1}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _client(self) -> JsonHttpClient:
        if self._unavailable or self.client is None:
            raise BackendError(f"mem0 unavailable: {self._unavailable}")
        return self.client

    def _scope(self, body: dict[str, Any]) -> None:
        if self.project_id:
            body["project_id"] = self.project_id


def _pages(
    client: JsonHttpClient, path: str, params: Mapping[str, Any], what: str
) -> Iterator[list[Mapping[str, Any]]]:
    """Every page of a Mem0 page/page_size listing, following ``next`` until it is null."""
    page = 1
    while True:
        results, has_next = _results(client.get_json(path, {**params, "page": page}), what)
        yield results
        if not has_next:
            return
        page += 1
        if page > MAX_PAGES:
            raise BackendError(f"mem0 {what}: more than {MAX_PAGES} pages")


def _client_from_env(env: Mapping[str, str], base_url: str, api_key: str, **overrides: Any) -> JsonHttpClient:
    return JsonHttpClient(
        NAME,
        base_url,
        headers={"Authorization": f"Token {api_key}", "Accept": "application/json"},
        settings=settings_from_env(env, **overrides),
        secrets=[api_key],
    )


def from_env(env: Mapping[str, str]) -> Mem0Backend:
    """The backend from environment variables; never raises, never connects."""
    problems = configuration_problems(DECLARATION, env)
    base_url = _base_url(env, problems)
    write_path = _path(env, WRITE_PATH_VAR, DEFAULT_WRITE_PATH, problems)
    compact_path = _path(env, COMPACT_PATH_VAR, DEFAULT_COMPACT_PATH, problems)
    project_id = (env.get(PROJECT_VAR) or "").strip() or None
    if problems:
        return Mem0Backend(
            None, write_path=write_path, compact_path=compact_path, unavailable=reason_of(problems)
        )
    api_key = (env.get(API_KEY_VAR) or "").strip()
    return Mem0Backend(
        _client_from_env(env, base_url, api_key),
        project_id=project_id,
        write_path=write_path,
        compact_path=compact_path,
    )


# ---- the migration source ------------------------------------------------------------------------
class Mem0Source:
    """Every memory of every Mem0 user: users from ``/v1/entities/``, then each user's pages.

    The cursor is JSON ``{"user": id, "page": n, "size": page_size}``: the user whose listing to read
    and its page; a resumed run keeps the page size the cursor was made with (page numbers depend on
    it). Users are read in sorted order, so a user added later is still reached.
    """

    name = NAME

    def __init__(self, client: JsonHttpClient, base_url: str, project_id: str | None = None) -> None:
        self.client = client
        self.base_url = base_url
        self.project_id = project_id
        self._users: list[str] | None = None

    @property
    def key(self) -> str:
        suffix = f"/{self.project_id}" if self.project_id else ""
        return f"mem0:{redact_url(self.base_url)}{suffix}"

    def users(self) -> list[str]:
        """Every user id with memories (entities of type ``user``), sorted; read once."""
        if self._users is None:
            params: dict[str, Any] = {"project_id": self.project_id} if self.project_id else {}
            found: set[str] = set()
            for _ in range(MAX_PAGES):
                response = self.client.get_json(ENTITIES_PATH, params)
                results, _more = _results(response, "list entities")
                found.update(
                    str(r["name"])
                    for r in results
                    if r.get("type") == "user" and isinstance(r.get("name"), str)
                )
                nxt = response.get("next") if isinstance(response, Mapping) else None
                if not nxt:
                    break
                params = dict(parse_qsl(urlsplit(str(nxt)).query))  # same path on our base URL only
            else:
                raise BackendError(f"mem0 list entities: more than {MAX_PAGES} pages")
            self._users = sorted(found)
        return self._users

    def read_page(self, cursor: str | None, size: int) -> Page:
        state = self._start(cursor, size)
        while state is not None:
            user, page, page_size = state
            try:
                response = self.client.get_json(LIST_PATH, self._params(user, page, page_size))
            except HttpError as exc:
                if exc.status == 404 and page > 1:  # the user's listing shrank since the cursor was made
                    state = self._next_user(user, page_size)
                    continue
                raise
            results, has_next = _results(response, "list memories")
            owned = [item for item in results if _owned(item, user)]
            if len(owned) < len(results):
                log.warning(
                    "mem0 listing of one user returned %d foreign or empty item(s); skipped",
                    len(results) - len(owned),
                )
            nxt = (user, page + 1, page_size) if has_next else self._next_user(user, page_size)
            if owned or nxt is None:
                return record_page([_fields(item, user) for item in owned], _cursor(nxt))
            state = nxt
        return Page([], None)

    def close(self) -> None:
        self.client.close()

    def _params(self, user: str, page: int, page_size: int) -> dict[str, Any]:
        params: dict[str, Any] = {"user_id": user, "page": page, "page_size": page_size}
        if self.project_id:
            params["project_id"] = self.project_id
        return params

    def _start(self, cursor: str | None, size: int) -> tuple[str, int, int] | None:
        if cursor is None:
            users = self.users()
            return (users[0], 1, size) if users else None
        try:
            state = json.loads(cursor)
            user, page, page_size = str(state["user"]), int(state["page"]), int(state["size"])
        except (ValueError, KeyError, TypeError):
            raise UsageError("cursor", cursor, "is not a mem0 source cursor") from None
        if user not in self.users():  # the user is gone: continue with the next one
            return self._next_user(user, page_size)
        return user, page, page_size

    def _next_user(self, user: str, page_size: int) -> tuple[str, int, int] | None:
        later = [u for u in self.users() if u > user]
        return (later[0], 1, page_size) if later else None


def _is_user(entity: Mapping[str, Any]) -> bool:
    return entity.get("type") == "user" and isinstance(entity.get("name"), str) and bool(entity["name"])


def _cursor(state: tuple[str, int, int] | None) -> str | None:
    if state is None:
        return None
    user, page, size = state
    return json.dumps({"user": user, "page": page, "size": size}, sort_keys=True)


def _owned(item: Mapping[str, Any], user: str) -> bool:
    """Tenant guard of the source: a listing for ``user`` keeps only ``user``'s memories."""
    return item.get("user_id") == user and isinstance(item.get("memory"), str) and bool(item.get("id"))


def _fields(item: Mapping[str, Any], user: str) -> dict[str, Any]:
    """A listed memory as the fields of its :class:`SourceRecord` (the page is built in one call)."""
    metadata = dict(item["metadata"]) if isinstance(item.get("metadata"), Mapping) else {}
    for extra in ("categories", "expiration_date"):
        if item.get(extra) is not None and extra not in metadata:
            metadata[extra] = item[extra]
    session = metadata.get("memwork_session_id") or item.get("run_id") or item.get("session_id")
    return {
        "id": str(item["id"]),
        "user_id": user,
        "content": str(item["memory"]),
        "metadata": metadata,
        "created_at": aware_time(item.get("created_at")),
        "updated_at": aware_time(item.get("updated_at")),
        "session_id": str(session) if session else None,
        "agent_id": str(item["agent_id"]) if item.get("agent_id") else None,
    }


def source_from_env(env: Mapping[str, str]) -> Mem0Source:
    """The source from the backend's own variables (the flag is not needed to read)."""
    api_key = require(env, API_KEY_VAR)
    problems: list[tuple[str, str]] = []
    base_url = _base_url(env, problems)
    if problems:
        raise UsageError(BASE_URL_VAR, redact_url(env.get(BASE_URL_VAR)), "must be an http(s) URL")
    client = _client_from_env(env, base_url, api_key, timeout_s=SOURCE_TIMEOUT_S, connect_timeout_s=5.0)
    return Mem0Source(client, base_url, (env.get(PROJECT_VAR) or "").strip() or None)
