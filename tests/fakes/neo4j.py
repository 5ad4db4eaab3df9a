"""A fake Neo4j HTTP API: the transactional endpoint's begin-and-commit request, as documented.

Documentation the shapes come from:

* https://neo4j.com/docs/http-api/current/query  (POST /db/<databaseName>/tx/commit, Authorization)
* https://neo4j.com/docs/http-api/current/actions/begin-and-commit-a-transaction-in-one-request/
* https://neo4j.com/docs/http-api/current/transactions/  (request body, basic auth)
* https://neo4j.com/docs/http-api/4.3/actions/handling-errors  (errors in a 200)

Request::

    POST /db/{databaseName}/tx/commit
    Authorization: Basic base64(user:password)
    Accept: application/json;charset=UTF-8
    Content-Type: application/json
    {"statements": [{"statement": "MERGE (n:Person {name: $name}) RETURN n",
                     "parameters": {"name": "Patrick"}}, ...]}

``statements`` is a list; each item has ``statement`` (Cypher text) and optional ``parameters`` (an
object), ``resultDataContents`` and ``includeStats``. Response (one result per statement, in order)::

    200 {"results": [{"columns": ["n"], "data": [{"row": [...], "meta": [...]}]}], "errors": []}

The endpoint answers 200 even when a statement fails: the failure is in ``errors`` and the
transaction is rolled back (nothing of the request is kept)::

    200 {"results": [], "errors": [{"code": "Neo.ClientError.Statement.SyntaxError", "message": "..."}]}

Wrong credentials are ``401 {"errors": [{"code": "Neo.ClientError.Security.Unauthorized", ...}]}``.
An unknown database answers with ``Neo.ClientError.Database.DatabaseNotFound`` (a documented status
code); the pages above do not show its HTTP status, and this fake sends it as a 404 -- the adapter
treats a 4xx and an ``errors`` list in a 200 alike (a failed write), so either way is covered.

What this fake does: checks basic auth and the database name, validates the request shape exactly
(unknown keys, a non-string statement, non-object parameters -> ``Neo.ClientError.Request.InvalidFormat``),
refuses a statement that references a ``$parameter`` the request does not supply
(``Neo.ClientError.Statement.ParameterMissing``, as Neo4j does), records every statement with its
parameters (``fake.commits``: one list per committed transaction) and answers with one result per
statement whose ``columns`` are the statement's ``RETURN ... AS name`` aliases. It does not execute
Cypher, so ``data`` is empty. ``fake.statement_error = (code, message)`` makes the next requests
fail the documented way (200 with ``errors``), and nothing is committed.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from fakes.server import FakeService, Request, Response

PARAM_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
ALIAS_RE = re.compile(r"\bAS\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:,|$)")
STATEMENT_KEYS = {"statement", "parameters", "resultDataContents", "includeStats"}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"results": [], "errors": [{"code": code, "message": message}]}


class FakeNeo4j(FakeService):
    """``POST /db/{database}/tx/commit`` with basic auth; ``commits`` holds what was committed."""

    def __init__(
        self, user: str = "neo4j", password: str = "s3cret-pw", databases: tuple[str, ...] = ("neo4j",)
    ):
        super().__init__()
        self.user = user
        self.password = password
        self.databases = set(databases)
        self.commits: list[dict[str, Any]] = []  # {"database", "statements": [{"statement", "parameters"}]}
        self.statement_error: tuple[str, str] | None = None
        self.route("POST", r"/db/(?P<database>[^/]+)/tx/commit", self.commit)

    # ---- the endpoint --------------------------------------------------------------------------
    def commit(self, request: Request) -> Response:
        if not self._authorized(request.headers.get("authorization", "")):
            return Response(
                401, _error("Neo.ClientError.Security.Unauthorized", "Invalid username or password.")
            )
        database = request.params["database"]
        if database not in self.databases:
            message = f"The database requested does not exist. Requested database name: '{database}'."
            return Response(404, _error("Neo.ClientError.Database.DatabaseNotFound", message))
        problem = self._shape_problem(request.body)
        if problem is not None:
            return Response(200, _error(*problem))
        statements = request.body["statements"]
        for item in statements:
            missing = sorted(set(PARAM_RE.findall(item["statement"])) - set(item.get("parameters") or {}))
            if missing:
                message = f"Expected parameter(s): {', '.join(missing)}"
                return Response(200, _error("Neo.ClientError.Statement.ParameterMissing", message))
        if self.statement_error is not None:
            return Response(200, _error(*self.statement_error))
        kept = [
            {"statement": s["statement"], "parameters": dict(s.get("parameters") or {})} for s in statements
        ]
        with self.lock:
            self.commits.append({"database": database, "statements": kept})
        results = [
            {
                "columns": ALIAS_RE.findall(s["statement"].split("RETURN")[-1])
                if "RETURN" in s["statement"]
                else [],
                "data": [],
            }
            for s in statements
        ]
        return Response(200, {"results": results, "errors": []})

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(token, validate=True).decode("utf-8")
        except ValueError:
            return False
        return decoded == f"{self.user}:{self.password}"

    @staticmethod
    def _shape_problem(body: Any) -> tuple[str, str] | None:
        invalid = "Neo.ClientError.Request.InvalidFormat"
        if not isinstance(body, dict) or set(body) - {"statements"}:
            return invalid, "Unable to deserialize request: expected an object with 'statements'"
        statements = body.get("statements", [])
        if not isinstance(statements, list):
            return invalid, "Unable to deserialize request: 'statements' must be a list"
        for item in statements:
            if (
                not isinstance(item, dict)
                or set(item) - STATEMENT_KEYS
                or not isinstance(item.get("statement"), str)
            ):
                return invalid, f"Unable to deserialize request: bad statement object {item!r:.80}"
            if "parameters" in item and not isinstance(item["parameters"], dict):
                return invalid, "Unable to deserialize request: 'parameters' must be an object"
        return None

    def reset(self, password: str | None = None) -> None:
        """Forget every request and commit, clear the faults (one served fake for many tests)."""
        with self.lock:
            self.requests.clear()
            self.commits.clear()
        self.fault = None
        self.statement_error = None
        if password is not None:
            self.password = password

    # ---- helpers for assertions ----------------------------------------------------------------
    def statements(self) -> list[dict[str, Any]]:
        """Every committed statement with its parameters, in order."""
        return [s for commit in self.commits for s in commit["statements"]]

    def events(self) -> list[dict[str, Any]]:
        """The events the committed writes created: ``{userId, sessionId, role, content, position, id}``."""
        found = []
        for s in self.statements():
            params = s["parameters"]
            for event in params.get("events", []):
                found.append({"userId": params["userId"], "sessionId": params["sessionId"], **event})
        return found
