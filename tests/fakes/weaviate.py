"""A protocol-faithful fake of the two Weaviate endpoints memwork uses (a real HTTP server, not a mock).

Shapes, from the public documentation:

* ``POST /v1/graphql`` -- https://docs.weaviate.io/weaviate/api/graphql/search-operators#nearvector ,
  https://docs.weaviate.io/weaviate/api/graphql/filters , https://docs.weaviate.io/weaviate/api/graphql/additional-properties
  Request ``{"query": "{ Get { <Class>(nearVector: {vector: [..]}, where: {path: [\\"userId\\"],
  operator: Equal, valueText: \\"alice\\"}, limit: N) { content userId _additional { id distance
  creationTimeUnix lastUpdateTimeUnix } } } }"}``.
  Answer ``{"data": {"Get": {"<Class>": [{"content": .., "userId": .., "_additional": {"id": "<uuid>",
  "distance": 0.12, "creationTimeUnix": "1700000000000", ..}}]}}}`` nearest first (``distance`` is
  the cosine distance ``1 - cos``; GraphQL gives the unix-millisecond timestamps as strings).
  Errors -- a syntax error, an unknown class or property, a vector of the wrong length -- come with
  **HTTP 200** and ``{"data": {"Get": {"<Class>": null}}, "errors": [{"message": "..", "locations":
  [{"line": 1, "column": 3}], "path": ["Get", "<Class>"]}]}``. ``limit`` defaults to 10
  (QUERY_DEFAULTS_LIMIT).
* ``where`` ``Equal`` on a ``text`` property follows its tokenization
  (https://weaviate.io/developers/academy/py/tokenization/options): ``word`` (the default) splits on
  non-alphanumerics and lowercases, and a value matches when every token of the filter is one of
  its tokens -- so ``TenantX``, ``tenantx`` and ``tenantx `` all match ``tenantx``; ``field`` compares
  the whole value exactly. The fake's ``tokenization`` selects which.
* ``GET /v1/objects?class=C&limit=N&after=<uuid>&include=vector`` -- the cursor API,
  https://weaviate.io/developers/weaviate/manage-data/read-all-objects and
  https://weaviate.io/developers/weaviate/api/rest_legacy/objects : ``after`` needs ``class`` and
  excludes ``offset``/``sort`` (HTTP 422 ``{"error": [{"message": ..}]}`` otherwise); objects come in
  ascending uuid order after the given uuid (not inclusive); ``limit`` defaults to 25. Answer
  ``{"objects": [{"class", "id", "properties", "creationTimeUnix", "lastUpdateTimeUnix", "vector"
  (only with include=vector), "vectorWeights": null}], "totalResults": <objects in this answer>}``.
* Authentication: with an API key configured, ``Authorization: Bearer <key>`` is required, else
  HTTP 401 ``{"code": 401, "message": "anonymous access not enabled, please provide an auth scheme
  such as OIDC"}``.

``misbehave = True`` makes the search ignore ``where`` (another user's memories come back) for the
tenant-guard tests; ``returned_users`` records the users of the last search's answer.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

from fakes.server import FakeService, Request, Response
from memwork.embed import HashEmbedder

CLASS = "MemindMemory"
DEFAULT_GET_LIMIT = 10
DEFAULT_LIST_LIMIT = 25
LOOKALIKES = ("TenantX", "tenantx", "tenantx ")
NAMESPACE = uuid.UUID("6f1c2b0e-9d1a-4a57-8f3e-0a3c5d7e9b11")
TOPICS = ("coffee", "tea", "hiking", "python", "jazz", "tennis", "sushi", "books", "paris", "chess")


class GraphQLSyntaxError(ValueError):
    pass


# ---- a small GraphQL reader: enough of the language for a Get query ------------------------------
_TOKEN = re.compile(
    r"\s+|,|#[^\n]*|(?P<punct>[{}()\[\]:!$])|(?P<name>[_A-Za-z][_0-9A-Za-z]*)"
    r'|(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)|(?P<string>"(?:[^"\\\n]|\\.)*")'
)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise GraphQLSyntaxError(f"Syntax Error GraphQL request (1:{pos + 1}) Unexpected character")
        pos = match.end()
        kind = match.lastgroup
        if kind == "string":
            out.append(("string", json.loads(match.group(kind))))  # GraphQL escapes are JSON's
        elif kind == "number":
            out.append(("number", float(match.group(kind))))
        elif kind:
            out.append((kind, match.group(kind)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None, kind: str | None = None) -> Any:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            raise GraphQLSyntaxError(f"Syntax Error GraphQL request: expected {value or kind}, got {tok}")
        self.i += 1
        return tok[1]

    def document(self) -> list[dict[str, Any]]:
        tok = self.peek()
        if tok == ("name", "query"):
            self.take()
        fields = self.selection_set()
        if self.peek() is not None:
            raise GraphQLSyntaxError("Syntax Error GraphQL request: unexpected text after the query")
        return fields

    def selection_set(self) -> list[dict[str, Any]]:
        self.take("{")
        fields = []
        while self.peek() != ("punct", "}"):
            name = self.take(kind="name")
            args = self.arguments() if self.peek() == ("punct", "(") else {}
            sub = self.selection_set() if self.peek() == ("punct", "{") else None
            fields.append({"name": name, "args": args, "fields": sub})
        self.take("}")
        return fields

    def arguments(self) -> dict[str, Any]:
        self.take("(")
        args = {}
        while self.peek() != ("punct", ")"):
            name = self.take(kind="name")
            self.take(":")
            args[name] = self.value()
        self.take(")")
        return args

    def value(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise GraphQLSyntaxError("Syntax Error GraphQL request: unexpected end")
        kind, val = tok
        if val == "[":
            self.take("[")
            items = []
            while self.peek() != ("punct", "]"):
                items.append(self.value())
            self.take("]")
            return items
        if val == "{":
            self.take("{")
            obj = {}
            while self.peek() != ("punct", "}"):
                key = self.take(kind="name")
                self.take(":")
                obj[key] = self.value()
            self.take("}")
            return obj
        if kind in ("string", "number"):
            self.i += 1
            return val
        if kind == "name":
            self.i += 1
            return {"true": True, "false": False, "null": None}.get(val, ("enum", val))
        raise GraphQLSyntaxError(f"Syntax Error GraphQL request: unexpected {val!r}")


def word_tokens(text: str) -> list[str]:
    """Weaviate's ``word`` tokenization: split on non-alphanumerics, lowercase."""
    return [t.lower() for t in re.split(r"[^0-9A-Za-z]+", text) if t]


class FakeWeaviate(FakeService):
    """Objects of one class in memory, searched and listed the way Weaviate does."""

    def __init__(
        self,
        *,
        class_name: str = CLASS,
        dimension: int = 8,
        tokenization: str = "word",
        api_key: str | None = None,
        properties: tuple[str, ...] = ("content", "userId", "type", "embeddingModel", "sessionId"),
    ) -> None:
        super().__init__()
        self.class_name = class_name
        self.dimension = dimension
        self.tokenization = tokenization
        self.api_key = api_key
        self.properties = properties
        self.objects: dict[str, dict[str, Any]] = {}
        self.misbehave = False
        self.returned_users: set[str] = set()
        self.embedder = HashEmbedder(dimension)
        self.route("POST", r"/v1/graphql", self.graphql)
        self.route("GET", r"/v1/objects", self.list_objects)

    def reset(self, *, api_key: str | None = None, tokenization: str = "word") -> None:
        """No recorded requests, no fault, no misbehaviour (the objects stay)."""
        self.api_key, self.tokenization = api_key, tokenization
        self.requests.clear()
        self.fault = None
        self.misbehave = False
        self.returned_users = set()

    # ---- data ---------------------------------------------------------------------------------
    def add(self, user_id: str, content: str, *, vector: list[float] | None = None, **props: Any) -> str:
        object_id = str(uuid.uuid5(NAMESPACE, f"{user_id}|{content}|{len(self.objects)}"))
        millis = 1_700_000_000_000 + len(self.objects) * 60_000
        self.objects[object_id] = {
            "class": self.class_name,
            "id": object_id,
            "properties": {"userId": user_id, "content": content, **props},
            "vector": vector if vector is not None else self.embedder.embed_one(content).tolist(),
            "creationTimeUnix": millis,
            "lastUpdateTimeUnix": millis + 1000,
        }
        return object_id

    def seed(self, users: int = 10, per_user: int = 95, *, lookalikes: bool = True) -> list[str]:
        """``users`` ordinary users (plus the look-alikes) with ``per_user`` memories each."""
        names = [f"user-{n:02d}" for n in range(users)] + (list(LOOKALIKES) if lookalikes else [])
        for user in names:
            for n in range(per_user):
                topic = TOPICS[n % len(TOPICS)]
                self.add(
                    user,
                    f"{user} note {n}: likes {topic}",
                    type="preference" if n % 3 else "fact",
                    embeddingModel=f"hash-{self.dimension}",
                    sessionId=f"s-{n % 4}",
                    topic=topic,
                )
        return names

    # ---- auth ---------------------------------------------------------------------------------
    def _unauthorized(self, request: Request) -> Response | None:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            message = "anonymous access not enabled, please provide an auth scheme such as OIDC"
            return Response(401, {"code": 401, "message": message})
        return None

    # ---- POST /v1/graphql ---------------------------------------------------------------------
    def graphql(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied:
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        query = body.get("query")
        if not isinstance(query, str):
            return Response(422, {"error": [{"message": "query must be a string"}]})
        try:
            fields = _Parser(query).document()
        except GraphQLSyntaxError as exc:
            return Response(200, {"data": None, "errors": [{"message": str(exc), "locations": []}]})
        if len(fields) != 1 or fields[0]["name"] != "Get" or not fields[0]["fields"]:
            return _gql_error(None, 'Cannot query field on type "WeaviateObj"; only Get is faked')
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        for cls in fields[0]["fields"]:
            try:
                data[cls["name"]] = self._get(cls)
            except LookupError as exc:
                data[cls["name"]] = None
                errors.append(
                    {
                        "message": str(exc),
                        "locations": [{"line": 1, "column": 1}],
                        "path": ["Get", cls["name"]],
                    }
                )
        answer: dict[str, Any] = {"data": {"Get": data}}
        if errors:
            answer["errors"] = errors
        return Response(200, answer)

    def _get(self, cls: dict[str, Any]) -> list[dict[str, Any]]:
        if cls["name"] != self.class_name:
            raise LookupError(f'Cannot query field "{cls["name"]}" on type "GetObjectsObj".')
        args = cls["args"]
        candidates = list(self.objects.values())
        where = args.get("where")
        if where is not None and not self.misbehave:
            candidates = [o for o in candidates if self._matches(o, where)]
        near = args.get("nearVector")
        scored: list[tuple[float | None, dict[str, Any]]] = [(None, o) for o in candidates]
        if near is not None:
            vector = near.get("vector") if isinstance(near, dict) else None
            if not isinstance(vector, list) or not all(isinstance(x, float) for x in vector):
                raise LookupError("nearVector: vector must be a list of numbers")
            if len(vector) != self.dimension:
                raise LookupError(
                    f"explorer: get class: vector search: object vector search at index memindmemory: "
                    f"shard: vector lengths don't match: {self.dimension} vs {len(vector)}"
                )
            scored = sorted(
                ((_cosine_distance(vector, o["vector"]), o) for o in candidates), key=_by_distance
            )
        else:
            scored.sort(key=lambda pair: pair[1]["id"])
        limit = args.get("limit", DEFAULT_GET_LIMIT)
        if not isinstance(limit, float) or limit < 0:
            raise LookupError("limit must be a non-negative integer")
        selected = scored[: int(limit)]
        self.returned_users = {o["properties"].get("userId") for _, o in selected}
        return [self._project(o, distance, cls["fields"] or []) for distance, o in selected]

    def _matches(self, obj: dict[str, Any], where: Any) -> bool:
        if not isinstance(where, dict):
            raise LookupError("where must be an object")
        operator = where.get("operator")
        if operator in (("enum", "And"), ("enum", "Or")):
            parts = [self._matches(obj, w) for w in where.get("operands", [])]
            return all(parts) if operator == ("enum", "And") else any(parts)
        if operator != ("enum", "Equal"):
            raise LookupError(f"operator {operator!r} is not faked (only Equal, And, Or)")
        path = where.get("path")
        if not isinstance(path, list) or len(path) != 1 or path[0] not in self.properties:
            raise LookupError(f"where: no such prop with name '{path}' found in class '{self.class_name}'")
        if "valueText" not in where or not isinstance(where["valueText"], str):
            raise LookupError("where: Equal on a text property needs valueText")
        wanted, actual = where["valueText"], obj["properties"].get(path[0])
        if not isinstance(actual, str):
            return False
        if self.tokenization == "field":
            return actual == wanted
        tokens = set(word_tokens(actual))
        return all(t in tokens for t in word_tokens(wanted)) and bool(word_tokens(wanted))

    def _project(
        self, obj: dict[str, Any], distance: float | None, fields: list[dict[str, Any]]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in fields:
            name = field["name"]
            if name == "_additional":
                extra: dict[str, Any] = {}
                for sub in field["fields"] or []:
                    key = sub["name"]
                    if key == "id":
                        extra[key] = obj["id"]
                    elif key == "distance":
                        extra[key] = distance
                    elif key in ("creationTimeUnix", "lastUpdateTimeUnix"):
                        extra[key] = str(obj[key])
                    elif key == "vector":
                        extra[key] = obj["vector"]
                    else:
                        raise LookupError(
                            f'Cannot query field "{key}" on type "{self.class_name}AdditionalFields".'
                        )
                out[name] = extra
            elif name in self.properties:
                out[name] = obj["properties"].get(name)
            else:
                raise LookupError(f'Cannot query field "{name}" on type "{self.class_name}".')
        return out

    # ---- GET /v1/objects ----------------------------------------------------------------------
    def list_objects(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied:
            return denied
        cls, after = request.arg("class"), request.arg("after")
        if after is not None and not cls:
            return Response(422, {"error": [{"message": "'after' parameter requires 'class' to be set"}]})
        if after is not None and (request.arg("offset") or request.arg("sort")):
            return Response(
                422, {"error": [{"message": "'after' cannot be combined with 'offset' or 'sort'"}]}
            )
        try:
            limit = int(request.arg("limit") or DEFAULT_LIST_LIMIT)
        except ValueError:
            return Response(422, {"error": [{"message": "limit must be an integer"}]})
        if cls and cls != self.class_name:
            return Response(404, {"error": [{"message": f"class {cls!r} not found"}]})
        ordered = sorted(self.objects.values(), key=lambda o: o["id"])
        if after is not None:
            ordered = [o for o in ordered if o["id"] > after.lower()]
        page = ordered[:limit]
        with_vector = "vector" in (request.arg("include") or "").split(",")
        objects = []
        for obj in page:
            shown = {k: v for k, v in obj.items() if k != "vector"}
            shown["properties"] = dict(obj["properties"])
            shown["vectorWeights"] = None
            if with_vector:
                shown["vector"] = obj["vector"]
            objects.append(shown)
        return Response(200, {"objects": objects, "totalResults": len(objects)})


def _gql_error(cls: str | None, message: str) -> Response:
    return Response(
        200, {"data": None, "errors": [{"message": message, "path": ["Get", cls] if cls else ["Get"]}]}
    )


def _cosine_distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - (dot / norm if norm else 0.0)


def _by_distance(pair: tuple[float | None, dict[str, Any]]) -> tuple[float, str]:
    return (pair[0] if pair[0] is not None else math.inf, pair[1]["id"])
