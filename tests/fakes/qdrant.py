"""Qdrant's REST API for the calls the adapter makes, served over qdrant-client's in-process engine.

The real client's requests, headers and error handling then run over a real socket (see
:class:`QdrantRest`)."""

from __future__ import annotations

from qdrant_client import QdrantClient, models

from fakes.server import FakeService, Request, Response


class QdrantRest(FakeService):
    """Qdrant's REST API for the calls the adapter makes, over qdrant-client's in-process engine.

    Shapes from Qdrant's API reference (https://api.qdrant.tech/api-reference/collections/get-collection,
    https://api.qdrant.tech/api-reference/search/query-points; auth: the ``api-key`` header):

    * ``GET /collections/{collection_name}`` -> ``{"result": CollectionInfo, "status": "ok", "time": s}``;
    * ``POST /collections/{collection_name}/points/query`` with a ``QueryRequest`` (``query``,
      ``using``, ``filter`` ``{"must": [{"key", "match": {"value"}}]}``, ``limit``, ``with_payload``,
      ``with_vector``) -> ``{"result": {"points": [ScoredPoint]}, "status": "ok", "time": s}``;
    * a missing collection -> 404 ``{"status": {"error": "Not found: Collection `x` doesn't exist!"}}``.

    ``misbehave``: answers every query with one extra point of another user (ignoring the filter).
    """

    def __init__(self, engine: QdrantClient, api_key: str | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.api_key = api_key
        self.misbehave = False
        self.route("GET", r"/collections/(?P<name>[^/]+)", self.get_collection)
        self.route("POST", r"/collections/(?P<name>[^/]+)/points/query", self.query_points)

    def _denied(self, request: Request) -> Response | None:
        if self.api_key is not None and request.headers.get("api-key") != self.api_key:
            return Response(
                401, {"status": {"error": "Must provide an API key or an Authorization bearer token"}}
            )
        return None

    def _missing(self, name: str) -> Response | None:
        if self.engine.collection_exists(name):
            return None
        return Response(
            404, {"status": {"error": f"Not found: Collection `{name}` doesn't exist!"}, "time": 0.0}
        )

    def get_collection(self, request: Request) -> Response:
        problem = self._denied(request) or self._missing(request.params["name"])
        if problem:
            return problem
        info = self.engine.get_collection(request.params["name"])
        return Response(200, {"result": info.model_dump(mode="json"), "status": "ok", "time": 0.001})

    def query_points(self, request: Request) -> Response:
        name = request.params["name"]
        problem = self._denied(request) or self._missing(name)
        if problem:
            return problem
        body = models.QueryRequest(**request.body)
        result = self.engine.query_points(
            name,
            query=body.query,
            using=body.using,
            query_filter=None if self.misbehave else body.filter,
            limit=body.limit or 10,
            with_payload=body.with_payload if body.with_payload is not None else True,
        )
        return Response(200, {"result": result.model_dump(mode="json"), "status": "ok", "time": 0.001})
