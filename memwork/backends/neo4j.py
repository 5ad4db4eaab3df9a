"""The Neo4j behaviour-graph backend: ``write`` records each conversation turn as a small graph.

Dormant unless ``MEMORY_NEO4J_ENABLED=1`` and ``MEMORY_NEO4J_HTTP_URL``, ``MEMORY_NEO4J_USER`` and
``MEMORY_NEO4J_PASSWORD`` are set (``MEMORY_NEO4J_DATABASE`` defaults to ``neo4j``). It only writes:
resolve and compact stay on legacy. It is not a migration source (a behaviour graph holds events,
not memories).

One write is one request to the transactional HTTP endpoint, ``POST /db/{database}/tx/commit``
(begin and commit in one request, so the whole write is one transaction and is rolled back as a
whole if any statement fails). The graph it builds::

    (:User {id})-[:HAD]->(:Session {userId, id, startedAt, lastEventAt})
    (:Session)-[:HAS_EVENT]->(:Event {id, userId, sessionId, writeId, role, content, position, ts})
    (:Event)-[:NEXT]->(:Event)            consecutive messages of one write, in order

A Session is keyed by ``(userId, id)``, so two users who happen to send the same session id never
share a node. Every value that comes from the request (ids, roles, contents) travels in the
statement's ``parameters``; the statement texts are constants of this module (:data:`STATEMENTS`),
so no input can change what the Cypher does. Writes are never retried (a retry could duplicate
events). Neo4j answers 200 even when a statement failed and lists the failure in ``errors``: a
non-empty ``errors`` is a failed write.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any
from urllib.parse import quote

from memwork.backends.base import configuration_problems, reason_of
from memwork.backends.requests import validate
from memwork.contracts import RANKING_POLICY, Availability, BaseBackend, Declaration, EnvVar, flag_var
from memwork.errors import BackendError
from memwork.http import JsonHttpClient, settings_from_env
from memwork.loggable import SERVER_SAID
from memwork.redaction import redact_url, url_secrets

FLAG_VAR = "MEMORY_NEO4J_ENABLED"
URL_VAR = "MEMORY_NEO4J_HTTP_URL"
USER_VAR = "MEMORY_NEO4J_USER"
PASSWORD_VAR = "MEMORY_NEO4J_PASSWORD"
DATABASE_VAR = "MEMORY_NEO4J_DATABASE"
DEFAULT_DATABASE = "neo4j"

#: Neo4j's database-name rule (3-63 characters, an ASCII letter first, then letters, digits, dots
#: and dashes); the name is a path segment of the endpoint, so nothing else may pass.
DATABASE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9.-]{2,62}\Z")
#: databases a behaviour graph must never be written into
RESERVED_DATABASES = frozenset({"system"})
MAX_ERROR_CHARS = 200

DECLARATION = Declaration(
    name="neo4j",
    category="behavior",
    role="behavior graph",
    capabilities=("write",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(URL_VAR, "Neo4j HTTP endpoint, e.g. http://localhost:7474", required=True),
        EnvVar(USER_VAR, "Neo4j user (basic auth)", required=True),
        EnvVar(PASSWORD_VAR, "Neo4j password (basic auth)", required=True, secret=True),
        EnvVar(DATABASE_VAR, "database name (a path segment of the endpoint)", default=DEFAULT_DATABASE),
    ),
    mapping=(
        (
            "write",
            "one POST /db/{database}/tx/commit (one transaction): MERGE (:User {id: $userId})-[:HAD]->"
            "(:Session {userId: $userId, id: $sessionId}); per message CREATE (:Session)-[:HAS_EVENT]->"
            "(:Event {id, userId, sessionId, writeId, role, content, position, ts}); consecutive events "
            "linked by [:NEXT]; every value a $parameter",
        ),
        ("result", "{events: n, eventIds: [...], writeId, database}"),
    ),
)

# ---- the statements: constants, one line each; request values only ever in parameters -------------
SESSION_STATEMENT = (
    "MERGE (u:User {id: $userId}) "
    "MERGE (s:Session {userId: $userId, id: $sessionId}) "
    "ON CREATE SET s.startedAt = datetime($ts) "
    "SET s.lastEventAt = datetime($ts) "
    "MERGE (u)-[:HAD]->(s)"
)
EVENTS_STATEMENT = (
    "MATCH (s:Session {userId: $userId, id: $sessionId}) "
    "UNWIND $events AS event "
    "CREATE (s)-[:HAS_EVENT]->(e:Event {id: event.id, userId: $userId, sessionId: $sessionId, "
    "writeId: $writeId, role: event.role, content: event.content, position: event.position, "
    "ts: datetime($ts)}) "
    "RETURN count(e) AS events"
)
NEXT_STATEMENT = (
    "UNWIND $pairs AS pair "
    "MATCH (a:Event {id: pair.before, userId: $userId}), (b:Event {id: pair.after, userId: $userId}) "
    "CREATE (a)-[:NEXT]->(b) "
    "RETURN count(*) AS links"
)
#: ``purge_user``: the user's events, sessions and user node (the self-check's and smoke's cleanup)
PURGE_STATEMENTS = (
    "MATCH (e:Event {userId: $userId}) DETACH DELETE e RETURN count(e) AS events",
    "MATCH (s:Session {userId: $userId}) DETACH DELETE s RETURN count(s) AS sessions",
    "MATCH (u:User {id: $userId}) DETACH DELETE u RETURN count(u) AS users",
)
STATEMENTS = (SESSION_STATEMENT, EVENTS_STATEMENT, NEXT_STATEMENT, *PURGE_STATEMENTS)


def commit_path(database: str) -> str:
    """``/db/{database}/tx/commit`` for a validated database name (percent-encoded all the same)."""
    return f"/db/{quote(check_database(database), safe='')}/tx/commit"


def check_database(name: str) -> str:
    """``name`` when it is a valid Neo4j database name, else a BackendError naming it."""
    if not DATABASE_RE.match(name) or name.lower() in RESERVED_DATABASES:
        raise BackendError(f"{DATABASE_VAR}={name!r} is not a writable Neo4j database name")
    return name


def write_statements(
    user_id: str, session_id: str, messages: list[dict[str, str]], *, write_id: str, ts: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The request's ``statements`` for one write, and the event ids it creates."""
    event_ids = [uuid.uuid4().hex for _ in messages]
    events = [
        {"id": event_id, "role": m["role"], "content": m["content"], "position": i}
        for i, (event_id, m) in enumerate(zip(event_ids, messages, strict=True))
    ]
    scope = {"userId": user_id, "sessionId": session_id}
    statements: list[dict[str, Any]] = [
        {"statement": SESSION_STATEMENT, "parameters": {**scope, "ts": ts}},
        {
            "statement": EVENTS_STATEMENT,
            "parameters": {**scope, "writeId": write_id, "ts": ts, "events": events},
        },
    ]
    if len(event_ids) > 1:
        pairs = [{"before": a, "after": b} for a, b in pairwise(event_ids)]
        statements.append({"statement": NEXT_STATEMENT, "parameters": {"userId": user_id, "pairs": pairs}})
    return statements, event_ids


class Neo4jBackend(BaseBackend):
    """Behaviour graph over Neo4j's HTTP transactional endpoint; ``write`` only."""

    ranking = RANKING_POLICY

    declaration = DECLARATION

    def __init__(
        self,
        url: str | None,
        user: str | None,
        password: str | None,
        *,
        database: str = DEFAULT_DATABASE,
        env: Mapping[str, str] | None = None,
        unavailable: list[tuple[str, str]] | None = None,
    ) -> None:
        self.url = url
        self.user = user
        self.database = database
        self._password = password
        self._settings = settings_from_env(env or {})
        self._problems = list(unavailable or [])
        self._client: JsonHttpClient | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the password
        return f"Neo4jBackend(url={redact_url(self.url)!r}, user={self.user!r}, database={self.database!r})"

    # ---- contract -------------------------------------------------------------------------------
    def availability(self) -> Availability:
        reason = reason_of(self._problems)
        return Availability.ok() if reason is None else Availability.no(reason)

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One transaction: the user, the session and one Event per message (never retried)."""
        if self._problems:
            raise BackendError(f"neo4j unavailable: {reason_of(self._problems)}")
        clean = validate("write", request)
        if not clean["messages"]:  # nothing happened: no request, no empty session node
            return {"events": 0, "eventIds": [], "writeId": None, "database": self.database}
        write_id = uuid.uuid4().hex
        ts = datetime.now(UTC).isoformat(timespec="milliseconds")
        statements, event_ids = write_statements(
            clean["userId"], clean["sessionId"], clean["messages"], write_id=write_id, ts=ts
        )
        body = self._http().post_json(
            commit_path(self.database), {"statements": statements}, idempotent=False
        )
        self._check_response(body, len(statements))
        return {
            "events": len(event_ids),
            "eventIds": event_ids,
            "writeId": write_id,
            "database": self.database,
        }

    def purge_user(self, user_id: str) -> dict[str, int]:
        """Delete the user's behaviour graph (one transaction); the counts Neo4j reports per label."""
        if self._problems:
            raise BackendError(f"neo4j unavailable: {reason_of(self._problems)}")
        if not isinstance(user_id, str) or not user_id:
            raise BackendError("neo4j purge_user needs a non-empty user id")
        statements = [{"statement": s, "parameters": {"userId": user_id}} for s in PURGE_STATEMENTS]
        body = self._http().post_json(
            commit_path(self.database), {"statements": statements}, idempotent=False
        )
        self._check_response(body, len(statements))
        return dict(_counts(body["results"]))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # ---- internals ------------------------------------------------------------------------------
    def _http(self) -> JsonHttpClient:
        """The HTTP client, built on first use (building it opens no connection either)."""
        with self._lock:
            if self._client is None:
                secrets = [self._password or "", *url_secrets(self.url or "")]
                self._client = JsonHttpClient(
                    "neo4j",
                    self.url or "",
                    headers={"Accept": "application/json;charset=UTF-8"},
                    auth=(self.user or "", self._password or ""),
                    settings=self._settings,
                    secrets=secrets,
                )
            return self._client

    def _check_response(self, body: Any, statements: int) -> None:
        """A documented commit answer: ``errors`` empty and one entry of ``results`` per statement."""
        if not isinstance(body, Mapping) or not isinstance(body.get("errors"), list):
            raise BackendError(
                "neo4j write failed: the response is not a transaction result (no errors list)"
            )
        if body["errors"]:
            raise BackendError(f"neo4j write failed (rolled back): {self._describe(body['errors'])}")
        results = body.get("results")
        if not isinstance(results, list) or len(results) != statements:
            got = len(results) if isinstance(results, list) else "no"
            raise BackendError(f"neo4j write failed: {got} results for {statements} statements")

    def _describe(self, errors: list[Any]) -> str:
        """``code: first line of message`` of the first error (scrubbed, cut), and how many there were."""
        first = errors[0] if isinstance(errors[0], Mapping) else {}
        code = str(first.get("code") or "unknown error")
        message = str(first.get("message") or "").strip().splitlines()
        text = code + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")
        if message:
            text += f": {SERVER_SAID} {message[0]}"
        return self._http().scrub(text)[:MAX_ERROR_CHARS]


def _counts(results: list[Any]) -> list[tuple[str, int]]:
    """``(column, value)`` of each result's first row where it is a whole number."""
    found = []
    for result in results:
        if not isinstance(result, Mapping):
            continue
        columns, data = result.get("columns") or [], result.get("data") or []
        row = data[0].get("row") if data and isinstance(data[0], Mapping) else None
        if isinstance(row, list) and columns and row and isinstance(row[0], int):
            found.append((str(columns[0]), row[0]))
    return found


def _own_problems(url: str, database: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if url and not re.match(r"^https?://[^/\s]+", url, re.I):
        problems.append(("url_invalid", f"{URL_VAR}={redact_url(url)!r} must be an http:// or https:// URL"))
    try:
        check_database(database)
    except BackendError:
        detail = (
            f"{DATABASE_VAR}={database!r} is not a valid Neo4j database name (3-63 letters, digits, . or -)"
        )
        problems.append(("database_invalid", detail))
    return problems


def from_env(env: Mapping[str, str]) -> Neo4jBackend:
    """The registry factory: never raises, never connects; every missing or bad piece is a reason."""
    url = (env.get(URL_VAR) or "").strip()
    user = (env.get(USER_VAR) or "").strip()
    password = env.get(PASSWORD_VAR) or ""
    database = (env.get(DATABASE_VAR) or "").strip() or DEFAULT_DATABASE
    problems = configuration_problems(DECLARATION, env) + _own_problems(url, database)
    return Neo4jBackend(
        url or None,
        user or None,
        password or None,
        database=database,
        env=env,
        unavailable=problems,
    )
