"""The pgvector semantic-memory backend: read-only nearest-neighbour lookup per user.

Dormant unless ``MEMORY_VECTOR_ENABLED=1``, ``MEMORY_PGVECTOR_DATABASE_URL`` and
``MEMORY_PGVECTOR_EMBEDDING_MODULE`` are all configured; each missing piece is reported as the
unavailable reason and the facade falls back to legacy. It only implements ``resolve`` -- writes and
compaction stay on the legacy backend. It never reads ``DATABASE_URL``.

Search strategy (``MEMORY_PGVECTOR_SEARCH``): a per-user filter defeats a global HNSW graph -- with
1,000 users a plain HNSW scan returns ``ef_search`` candidates of which ~0.1 % belong to the user.
``exact`` reads the user's rows through the ``user_id`` index and sorts them by distance (exact,
fast while a user has thousands of rows); ``hnsw`` uses the HNSW index with pgvector 0.8's
iterative scan (``hnsw.iterative_scan = relaxed_order``) and re-sorts; ``auto`` (default) runs the
exact search capped at ``MEMORY_PGVECTOR_EXACT_MAX + 1`` rows (default 5000) in one statement that
also counts them, and only for a user above the cap falls back to hnsw.

Under a call's deadline (:mod:`memwork.deadline`) the wait for a pooled connection is bounded by the
time left, and the search by ``statement_timeout`` (set for its transaction only), so a search the
caller gave up on is cancelled by the server instead of holding a connection and a worker.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from math import ceil
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.backends.base import Availability, BaseBackend, Declaration, EnvVar, flag_var
from memwork.checks import parse_bool
from memwork.contracts import RANKING_SEMANTIC
from memwork.db import ran_out_of_time
from memwork.deadline import current_scope
from memwork.embed import QueryModuleEmbedder
from memwork.errors import BackendError, CutOff, UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.pgvector.schema import EMBEDDINGS_TABLE

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

DEFAULT_POOL_MAX = 5
DEFAULT_LIMIT = 40
MAX_LIMIT = 1000
DEFAULT_EXACT_MAX = 5000
DEFAULT_EF_SEARCH = 100
SEARCH_STRATEGIES = ("auto", "exact", "hnsw")
FLAG_VAR = "MEMORY_VECTOR_ENABLED"
URL_VAR = "MEMORY_PGVECTOR_DATABASE_URL"
MODULE_VAR = "MEMORY_PGVECTOR_EMBEDDING_MODULE"

DECLARATION = Declaration(
    name="pgvector",
    category="semantic",
    role="primary vector store (read-only semantic lookup)",
    capabilities=("resolve",),
    variables=(
        flag_var(FLAG_VAR),
        EnvVar(URL_VAR, "dedicated PostgreSQL URL", required=True),
        EnvVar(MODULE_VAR, "embedding module", required=True),
        EnvVar("MEMORY_PGVECTOR_TABLE", default=EMBEDDINGS_TABLE),
        EnvVar("MEMORY_PGVECTOR_POOL_MAX", default=str(DEFAULT_POOL_MAX)),
    ),
    database_url_var=URL_VAR,
    mapping=(
        (
            "semanticMemories",
            "the user's memory_embeddings rows nearest first: source_memory_id -> id, score = 1 - cosine "
            "distance, content, type, source pointers, metadata, embedding_model -> embeddingModel",
        ),
    ),
)
_COLUMNS = (
    "id, source_memory_id, user_id, content, type, source_session_id, source_message_id, "
    "metadata, embedding_model, created_at, updated_at"
)


class PgvectorBackend(BaseBackend):
    """Semantic memory in PostgreSQL + pgvector; ``resolve`` returns ``semanticMemories`` nearest first."""

    ranking = RANKING_SEMANTIC

    declaration = DECLARATION

    def __init__(
        self,
        database_url: str | None,
        *,
        table: str = EMBEDDINGS_TABLE,
        pool_max: int = DEFAULT_POOL_MAX,
        query_embedder: QueryModuleEmbedder | None = None,
        search: str = "auto",
        exact_max: int = DEFAULT_EXACT_MAX,
        ef_search: int = DEFAULT_EF_SEARCH,
        unavailable: list[str] | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.database_url = database_url
        self.table = check_identifier(table)
        self.pool_max = pool_max
        self.query_embedder = query_embedder
        self.search = search
        self.exact_max = exact_max
        self.ef_search = ef_search
        self.timeout = timeout
        self._unavailable = list(unavailable or [])
        if not database_url and not self._unavailable:
            self._unavailable.append(f"{URL_VAR} is not set")
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._lock = threading.Lock()

    # ---- contract -------------------------------------------------------------------------------
    def availability(self) -> Availability:
        if self._unavailable:
            return Availability.no("; ".join(self._unavailable))
        return Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The user's nearest memories to ``embedding`` (or the embedded ``query``), nearest first."""
        if self._unavailable:
            raise BackendError(f"pgvector unavailable: {'; '.join(self._unavailable)}")
        user_id = request.get("userId")
        if not isinstance(user_id, str) or not user_id:
            raise UsageError("userId", user_id, "must be a non-empty string")
        limit = _limit(request.get("limit"))
        if limit == 0:
            return {"semanticMemories": []}
        vector = self._query_vector(request)
        rows = self._search(user_id, vector, limit)
        return {"semanticMemories": [_memory(row) for row in rows]}

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # ---- internals ------------------------------------------------------------------------------
    def _query_vector(self, request: Mapping[str, Any]) -> np.ndarray:
        embedding = request.get("embedding")
        if embedding is not None:
            try:
                vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError):
                raise UsageError("embedding", "<non-numeric>", "must be a list of numbers") from None
            if vector.size == 0 or not np.all(np.isfinite(vector)):
                raise UsageError("embedding", "<vector>", "must be a non-empty list of finite numbers")
            return vector
        query = request.get("query")
        if not isinstance(query, str) or not query.strip():
            raise UsageError("query", query, "resolve needs a non-empty query or an embedding")
        if self.query_embedder is None:
            raise BackendError("pgvector resolve needs an embedding or MEMORY_PGVECTOR_EMBEDDING_MODULE")
        return self.query_embedder.embed_query(query, request)

    def _get_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The connection pool, opened on first use so configuring the backend never connects."""
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                from memwork.db.embedded import ensure

                self._pool = ConnectionPool(
                    ensure(self.database_url or "", create=True).libpq or "",
                    min_size=1,
                    max_size=self.pool_max,
                    kwargs={"autocommit": True},
                    configure=_configure_connection,
                    timeout=self.timeout,
                    name=f"memwork-pgvector-{self.table}",
                    open=True,
                )
            return self._pool

    def _search(self, user_id: str, vector: np.ndarray, limit: int) -> list[tuple]:
        table = quote_identifier(self.table)
        scope = current_scope()
        wait = self.timeout if scope is None else min(self.timeout, scope.check())
        try:
            with self._get_pool().connection(timeout=wait) as conn, conn.transaction():
                if scope is not None:  # the server cancels the search when the caller's time is up
                    budget_ms = ceil(scope.check() * 1000)
                    conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{budget_ms}ms",))
                if self.search == "hnsw":
                    return _hnsw_search(conn, table, user_id, vector, limit, self.ef_search)
                cap = None if self.search == "exact" else self.exact_max
                rows = _exact_search(conn, table, user_id, vector, limit, cap)
                if rows is None:  # auto: the user has more than exact_max rows
                    return _hnsw_search(conn, table, user_id, vector, limit, self.ef_search)
                return rows
        except Exception as exc:  # psycopg and pool errors become one backend error
            if isinstance(exc, UsageError | BackendError):
                raise
            if scope is not None and ran_out_of_time(exc, scope.deadline.statement_budget()):
                scope.timed_out = True
                raise CutOff(
                    f"{scope.label} timed out after {scope.deadline.budget_ms} ms (cancelled by PostgreSQL)"
                ) from exc
            raise BackendError(f"pgvector resolve failed: {type(exc).__name__}: {exc}") from exc


def _configure_connection(conn: psycopg.Connection[Any]) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)


def _exact_search(
    conn: psycopg.Connection[Any], table: str, user_id: str, vector: np.ndarray, limit: int, cap: int | None
) -> list[tuple] | None:
    """Exact k-NN over the user's rows (btree on ``user_id``); the CTE keeps HNSW out of the plan.

    With ``cap`` (``auto``), one statement both searches and counts up to ``cap + 1`` rows; None
    means the user has more than ``cap`` rows and the caller should use the HNSW path instead.
    """
    capped = "" if cap is None else "LIMIT %(cap)s"
    sql = (
        f"WITH mine AS MATERIALIZED (SELECT {_COLUMNS}, embedding FROM {table} "
        f"WHERE user_id = %(user)s {capped}) "
        f"SELECT {_COLUMNS}, embedding <=> %(vector)s AS distance, (SELECT count(*) FROM mine) AS n "
        f"FROM mine ORDER BY distance, id LIMIT %(limit)s"
    )
    params = {"user": user_id, "vector": vector, "limit": limit, "cap": None if cap is None else cap + 1}
    rows = conn.execute(sql, params).fetchall()
    if cap is not None and rows and rows[0][12] > cap:
        return None
    return rows


def _hnsw_search(
    conn: psycopg.Connection[Any], table: str, user_id: str, vector: np.ndarray, limit: int, ef_search: int
) -> list[tuple]:
    """HNSW with pgvector 0.8 iterative scans; relaxed order is re-sorted exactly outside."""
    conn.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        "set_config('hnsw.ef_search', %s, true)",
        (str(ef_search),),
    )
    sql = (
        f"WITH near AS MATERIALIZED (SELECT {_COLUMNS}, embedding <=> %s AS distance FROM {table} "
        f"WHERE user_id = %s ORDER BY embedding <=> %s LIMIT %s) "
        f"SELECT * FROM near ORDER BY distance, id"
    )
    return conn.execute(sql, (vector, user_id, vector, limit)).fetchall()


def _memory(row: tuple) -> dict[str, Any]:
    """One result row in the API's JSON shape (camelCase, ISO timestamps, score = 1 - cosine distance)."""
    (
        row_id,
        source_id,
        user_id,
        content,
        type_,
        session_id,
        message_id,
        metadata,
        model,
        created,
        updated,
    ) = row[:11]
    distance: float | None = float(row[11])
    if distance is not None and not math.isfinite(distance):  # a stored vector without direction
        distance = None
    return {
        "id": source_id or str(row_id),
        "userId": user_id,
        "content": content,
        "type": type_,
        "score": None if distance is None else 1.0 - distance,
        "distance": distance,
        "sourceMemoryId": source_id,
        "sourceSessionId": session_id,
        "sourceMessageId": message_id,
        "metadata": metadata or {},
        "embeddingModel": model,
        "createdAt": created.isoformat() if created else None,
        "updatedAt": updated.isoformat() if updated else None,
    }


def _limit(value: object) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError("limit", value, "must be a non-negative integer")
    return min(value, MAX_LIMIT)


def _int_setting(env: Mapping[str, str], name: str, default: int, problems: list[str]) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        problems.append(f"{name}={raw!r} must be a positive integer")
        return default
    return value


def from_env(env: Mapping[str, str]) -> PgvectorBackend:
    """Build the backend from environment variables; never raises, never connects, never reads DATABASE_URL.

    Every missing or invalid piece becomes part of the unavailable reason, so ``getStatus()`` says
    exactly what to set.
    """
    problems: list[str] = []
    try:
        enabled = parse_bool(FLAG_VAR, env.get(FLAG_VAR), default=False)
    except UsageError:
        enabled = False
    if not enabled:
        problems.append(f"{FLAG_VAR} is not 1")
    database_url = (env.get(URL_VAR) or "").strip() or None
    if database_url is None:
        problems.append(f"{URL_VAR} is not set")
    module_spec = (env.get(MODULE_VAR) or "").strip()
    table = (env.get("MEMORY_PGVECTOR_TABLE") or "").strip() or EMBEDDINGS_TABLE
    try:
        check_identifier(table, field="MEMORY_PGVECTOR_TABLE")
    except UsageError as exc:
        problems.append(str(exc))
        table = EMBEDDINGS_TABLE
    pool_max = _int_setting(env, "MEMORY_PGVECTOR_POOL_MAX", DEFAULT_POOL_MAX, problems)
    exact_max = _int_setting(env, "MEMORY_PGVECTOR_EXACT_MAX", DEFAULT_EXACT_MAX, problems)
    ef_search = _int_setting(env, "MEMORY_PGVECTOR_EF_SEARCH", DEFAULT_EF_SEARCH, problems)
    search = (env.get("MEMORY_PGVECTOR_SEARCH") or "auto").strip().lower()
    if search not in SEARCH_STRATEGIES:
        problems.append(f"MEMORY_PGVECTOR_SEARCH={search!r} must be one of {', '.join(SEARCH_STRATEGIES)}")
        search = "auto"
    embedder = None
    if not module_spec:
        problems.append(f"{MODULE_VAR} is not set")
    elif not problems:  # import user code only once everything else is configured
        try:
            embedder = QueryModuleEmbedder(module_spec)
        except UsageError as exc:
            problems.append(str(exc))
    return PgvectorBackend(
        database_url,
        table=table,
        pool_max=pool_max,
        query_embedder=embedder,
        search=search,
        exact_max=exact_max,
        ef_search=ef_search,
        unavailable=problems,
    )
