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

One embedding generation per answer (the mixed-model guard): a resolve never returns rows of two
``embedding_model`` ids. With ``MEMORY_PGVECTOR_MODEL`` set it answers from that model's rows only;
unset, from the model that holds most of the user's rows (ties: the smaller id), chosen in the same
statement (the exact path) or from the user's first :data:`PICK_SAMPLE` rows (the HNSW path) -- a
user half re-embedded gets one consistent surface, never a blend of two vector spaces whose
distances do not compare. Rows left out are counted (:meth:`PgvectorBackend.counters`), and
:meth:`PgvectorBackend.model_status` counts the table's rows of other models (``other_model_rows``).
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
import struct
import threading
from collections.abc import Mapping
from math import ceil
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.backends.base import Availability, BaseBackend, Declaration, EnvVar, flag_var
from memwork.checks import parse_bool
from memwork.contracts import RANKING_SEMANTIC
from memwork.db import ran_out_of_time
from memwork.deadline import ABANDONED, CallScope, current_scope
from memwork.embed import QueryModuleEmbedder
from memwork.errors import BackendError, CutOff, UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.pgvector.schema import EMBEDDINGS_TABLE
from memwork.pgvector.wire import PackedVector, register_packed_vector_dumper

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

DEFAULT_POOL_MAX = 5
DEFAULT_LIMIT = 40
MAX_LIMIT = 1000
DEFAULT_EXACT_MAX = 5000
DEFAULT_EF_SEARCH = 100
SEARCH_STRATEGIES = ("auto", "exact", "hnsw")
#: unconfigured model on the HNSW path: the user's model is the most common among this many rows
PICK_SAMPLE = 1000
#: pgvector's limit on a ``vector``'s dimensions (longer lists take the numpy path, which fails them)
MAX_DIMENSIONS = 16000
FLAG_VAR = "MEMORY_VECTOR_ENABLED"
URL_VAR = "MEMORY_PGVECTOR_DATABASE_URL"
MODULE_VAR = "MEMORY_PGVECTOR_EMBEDDING_MODULE"
MODEL_VAR = "MEMORY_PGVECTOR_MODEL"

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
        EnvVar(MODEL_VAR, "the embedding_model a resolve answers from (default: the user's main one)"),
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


def _iso(column: str) -> str:
    """SQL giving ``column`` (timestamptz) as Python's ``datetime.isoformat()`` text in the session's
    time zone -- what the API returns -- so the client neither parses nor formats timestamps. One
    ``to_char`` (``.000000`` can only be the fraction: ``isoformat`` leaves a zero fraction out); four
    calls per value cost ~35 us of server time per resolve of 10 rows."""
    return f"replace(to_char({column}, 'YYYY-MM-DD\"T\"HH24:MI:SS.USTZH:TZM'), '.000000', '')"


#: ``updated_at`` when it equals ``created_at`` (a row never updated): not formatted twice
SAME_AS_CREATED = ""


def _result_columns(prefix: str = "") -> str:
    """The result's columns as the API needs them: ``metadata`` as JSON text (``{}`` is not parsed),
    timestamps as ISO text (:func:`_iso`); not ``user_id``, which the caller gave (10 columns).
    ``updated_at`` equal to ``created_at`` comes as :data:`SAME_AS_CREATED` (never a formatted
    value): the mapping reuses the created text, which halves the ``to_char`` calls for rows never
    updated (~1.3 us of server time each)."""
    p = prefix
    updated = (
        f"CASE WHEN {p}updated_at = {p}created_at THEN '{SAME_AS_CREATED}' ELSE {_iso(p + 'updated_at')} END"
    )
    return (
        f"{p}id, {p}source_memory_id, {p}content, {p}type, {p}source_session_id, "
        f"{p}source_message_id, {p}metadata::text AS metadata, {p}embedding_model, "
        f"{_iso(p + 'created_at')} AS created_at, {updated} AS updated_at"
    )


_T_COLUMNS = _result_columns("t.")


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
        model: str | None = None,
    ) -> None:
        self.database_url = database_url
        self.model = model or None
        self.table = check_identifier(table)
        self._quoted = quote_identifier(self.table)
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
        self._guarded = {"resolves": 0, "guardedResolves": 0, "otherModelRowsLeftOut": 0}

    # ---- contract -------------------------------------------------------------------------------
    def availability(self) -> Availability:
        if self._unavailable:
            return Availability.no("; ".join(self._unavailable))
        return Availability.ok()

    def deadline_inline(self, request: Mapping[str, Any]) -> bool:
        """True when every wait of this resolve is bounded by the call's deadline, so the facade may
        run it on the caller's thread: the pool is open (opening it may start the embedded server),
        an ``embedding`` is given (a query embedder is user code), the pool wait is bounded by the time
        left, statements by ``statement_timeout``, and the socket is
        shut down when the caller gives up (:meth:`CallScope.on_abandon`)."""
        opened = self._pool is not None  # opening it may start the embedded server: not inline
        return opened and request.get("embedding") is not None and not self._unavailable

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
        return {"semanticMemories": _memories(rows, user_id)}

    def counters(self) -> dict[str, Any]:
        """The mixed-model guard since start: resolves, those that left rows of another model out,
        and how many rows they left out (exact path; the HNSW path counts answers only)."""
        with self._lock:
            return {"model": self.model, **self._guarded}

    def model_status(self) -> dict[str, Any]:
        """Rows per ``embedding_model`` and, against the configured model (else the table's main
        one), ``other_model_rows`` and the users holding rows of two models. One scan of the table:
        an operator's question, never on the resolve path."""
        if self._unavailable:
            raise BackendError(f"pgvector unavailable: {'; '.join(self._unavailable)}")
        table = quote_identifier(self.table)
        with self._get_pool().connection() as conn:
            _bound_session(conn, None)  # an operator's scan: no leftover timeout of a resolve
            models = {
                m: int(n)
                for m, n in conn.execute(f"SELECT embedding_model, count(*) FROM {table} GROUP BY 1")
            }
            mixed = conn.execute(
                f"SELECT count(*) FROM (SELECT user_id FROM {table} GROUP BY 1 "
                "HAVING count(DISTINCT coalesce(embedding_model, '')) > 1) AS u"
            ).fetchone()
        main = self.model or max(models, key=lambda m: (models[m], m is not None), default=None)
        return {
            "model": main,
            "configured": self.model is not None,
            "models": {str(m): n for m, n in models.items()},
            "other_model_rows": sum(n for m, n in models.items() if m != main),
            "mixed_model_users": int(mixed[0]) if mixed else 0,
        }

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # ---- internals ------------------------------------------------------------------------------
    def _query_vector(self, request: Mapping[str, Any]) -> np.ndarray | PackedVector:
        embedding = request.get("embedding")
        if embedding is not None:
            packed = packed_vector(embedding)  # a flat list of finite numbers: no numpy on the way
            if packed is not None:
                return packed
            try:
                vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError):
                raise UsageError("embedding", "<non-numeric>", "must be a list of numbers") from None
            if vector.size == 0 or not np.isfinite(vector).all():
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

    def _search(self, user_id: str, vector: np.ndarray | PackedVector, limit: int) -> list[tuple]:
        table = self._quoted
        scope = current_scope()
        wait = self.timeout if scope is None else min(self.timeout, scope.check())
        try:
            pool = self._pool or self._get_pool()  # the lock only while the pool is not open
            conn = pool.getconn(timeout=wait)  # not the context manager: this runs on every resolve
            try:
                if scope is not None and not scope.on_abandon(lambda: _abort(conn)):
                    scope.check()  # the caller gave up while we waited for the connection: CutOff
                try:
                    return self._search_on(conn, scope, table, user_id, vector, limit)
                finally:
                    if scope is not None:
                        scope.clear_abandon()  # before the connection goes back to the pool
            finally:
                pool.putconn(conn)  # a broken one (aborted at the deadline) is discarded there
        except Exception as exc:  # psycopg and pool errors become one backend error
            if isinstance(exc, UsageError | BackendError):
                raise
            if scope is not None and scope.state == ABANDONED:
                scope.timed_out = True
                raise CutOff(
                    f"{scope.label} timed out after {scope.deadline.budget_ms} ms "
                    "(connection closed at the deadline)"
                ) from exc
            if scope is not None and ran_out_of_time(exc, scope.deadline.statement_budget()):
                scope.timed_out = True
                raise CutOff(
                    f"{scope.label} timed out after {scope.deadline.budget_ms} ms (cancelled by PostgreSQL)"
                ) from exc
            raise BackendError(f"pgvector resolve failed: {type(exc).__name__}: {exc}") from exc

    def _search_on(
        self,
        conn: psycopg.Connection[Any],
        scope: CallScope | None,
        table: str,
        user_id: str,
        vector: np.ndarray | PackedVector,
        limit: int,
    ) -> list[tuple]:
        """The exact search is one statement in autocommit (the session's ``statement_timeout``
        bounds it, set only when the time left moved, see :func:`_bound_session`): one round trip
        in the steady state. The HNSW path takes a transaction for its local settings."""
        if self.search != "hnsw":
            _bound_session(conn, None if scope is None else scope.check())
            cap = None if self.search == "exact" else self.exact_max
            rows = _exact_search(conn, table, user_id, vector, limit, cap, self.model)
            if rows is not None:
                return self._guard(rows)
        with conn.transaction():  # the HNSW path (or auto with more than exact_max rows)
            if scope is not None:  # the server cancels the search when the caller's time is up
                budget_ms = ceil(scope.check() * 1000)
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{budget_ms}ms",))
            return self._guard(_hnsw_search(conn, table, user_id, vector, limit, self))

    def _guard(self, rows: list[tuple]) -> list[tuple]:
        """Count the resolve and the other-model rows its statement left out (column 12); the rows
        that answer (the exact statement's row of NULLs, counts only, is not one)."""
        left_out = int(rows[0][12] or 0) if rows and len(rows[0]) > 12 else 0
        with self._lock:
            self._guarded["resolves"] += 1
            self._guarded["guardedResolves"] += left_out > 0
            self._guarded["otherModelRowsLeftOut"] += left_out
        return [] if rows and rows[0][0] is None else rows


def _model_pick(rows: str, model_param: str) -> str:
    """SQL for the one model an answer comes from: the configured one, else the most common in ``rows``."""
    return (
        f"SELECT coalesce({model_param}::text, (SELECT embedding_model FROM {rows} "
        "GROUP BY 1 ORDER BY count(*) DESC, 1 NULLS LAST LIMIT 1))"
    )


#: a session's ``statement_timeout`` is kept while it cuts at most this share of a call's time left
SESSION_TIMEOUT_SLACK = 0.25
_TIMEOUT_ATTR = "_memwork_statement_timeout_ms"


def _bound_session(conn: psycopg.Connection[Any], budget_s: float | None) -> None:
    """Make the session's ``statement_timeout`` end a statement within ``budget_s`` (None: never).

    The setting stays on the connection, so it is sent only when the current one would run past the
    time left or cut more than :data:`SESSION_TIMEOUT_SLACK` of it: a steady stream of calls under one
    configured deadline pays no extra round trip. The setting in force is kept on the connection
    itself (one resolve uses a pooled connection at a time; no lock, no weak mapping), like
    :func:`_raw_cursor`; a new connection has none and sets it."""
    want = 0 if budget_s is None else max(1, ceil(budget_s * 1000))
    have = conn.__dict__.get(_TIMEOUT_ATTR)
    if have is not None and (
        have == want or (want and 0 < have <= want and have >= want * (1 - SESSION_TIMEOUT_SLACK))
    ):
        return
    if want:  # a little under the time left, so the next calls' budgets keep it
        want = max(1, math.floor(want * (1 - SESSION_TIMEOUT_SLACK / 2)))
    conn.__dict__.pop(_TIMEOUT_ATTR, None)  # unknown if the statement fails: set again next time
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{want}ms",))
    setattr(conn, _TIMEOUT_ATTR, want)


def _abort(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket down (from another thread): a statement blocked on a hung server
    returns at once with an error; the pool then discards the broken connection."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def _configure_connection(conn: psycopg.Connection[Any]) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    info = conn.adapters.types.get("vector")
    if info is None:  # register_vector raised already; for the type checker
        raise BackendError("the vector type is not installed in the pgvector database")
    register_packed_vector_dumper(conn, info.oid)


@functools.cache
def _vector_struct(dims: int) -> struct.Struct:
    return struct.Struct(f">HH{dims}f")


def packed_vector(embedding: object) -> PackedVector | None:
    """A flat list of finite numbers in pgvector's binary form, straight from the list (one
    ``struct`` call: ~9 us for 384 dimensions where numpy, then pgvector's dumper took ~23 us); None
    for anything else -- the numpy path then takes it and names what is wrong. The sum of float32
    values cannot overflow a double, so it is finite exactly when every value is."""
    if type(embedding) is not list or not embedding or len(embedding) > MAX_DIMENSIONS:
        return None
    try:
        data = _vector_struct(len(embedding)).pack(len(embedding), 0, *embedding)
        finite = math.isfinite(sum(embedding))
    except (struct.error, OverflowError, TypeError, ValueError):
        return None
    return PackedVector(data) if finite else None


def _exact_search(
    conn: psycopg.Connection[Any],
    table: str,
    user_id: str,
    vector: np.ndarray | PackedVector,
    limit: int,
    cap: int | None,
    model: str | None = None,
) -> list[tuple] | None:
    """Exact k-NN over the user's rows (btree on ``user_id``); the CTE keeps HNSW out of the plan.

    With ``cap`` (``auto``), one statement both searches and counts up to ``cap + 1`` rows; None
    means the user has more than ``cap`` rows and the caller should use the HNSW path instead.
    Only the rows of one model answer (``model``, else the user's most common one); column 12
    counts the user's rows of other models left out. A raw cursor (``$n`` parameters, no
    placeholder conversion), prepared on the server from the first call, kept on the connection
    (:func:`_raw_cursor`).
    """
    params = (vector, user_id, limit, None if cap is None else cap + 1, model)
    rows = _raw_cursor(conn).execute(_exact_sql(table), params, prepare=True, binary=True).fetchall()
    if cap is not None and rows and rows[0][11] > cap:
        return None
    return rows


_CURSOR_ATTR = "_memwork_raw_cursor"


def _raw_cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """The connection's own raw cursor, made once and reused by every exact search on it (a pooled
    connection serves one resolve at a time; ``execute`` discards the previous result). Kept as an
    attribute of the connection -- a cycle the garbage collector frees with it -- not in a weak
    mapping, whose value (the cursor refers to its connection) would keep the key alive."""
    cursor = conn.__dict__.get(_CURSOR_ATTR)
    if cursor is None or cursor.closed:
        import psycopg

        cursor = psycopg.RawCursor(conn)
        setattr(conn, _CURSOR_ATTR, cursor)
    return cursor


@functools.cache
def _exact_sql(table: str) -> str:
    """The exact search's statement (built once per table), parameters ``$1`` vector, ``$2`` user,
    ``$3`` limit, ``$4`` cap (NULL: no cap), ``$5`` configured model.

    One round trip answers the search and the mixed-model guard. ``mine`` holds only what ranking,
    counting and the model pick need (id, model, distance, each computed once); ``stats`` counts it
    in one pass -- rows, rows with a model, the least and greatest model (byte order) -- which settles
    the common one-model user without grouping: the per-model grouping and the other-model count
    run only for a user holding two models (PostgreSQL evaluates an uncorrelated subquery when first
    needed, so the branches not taken cost nothing). The result's columns are read and formatted for
    the top ``limit`` rows only, by primary key. With no row to answer, one row of NULLs still carries
    the counts (:meth:`PgvectorBackend._guard` counts it, then drops it)."""
    single = "(nn = 0 OR (nn = n AND lo = hi))"
    return (
        "WITH mine AS MATERIALIZED (SELECT id, embedding_model AS model, embedding <=> $1 AS distance "
        f"FROM {table} WHERE user_id = $2 LIMIT $4), "
        'stats AS MATERIALIZED (SELECT count(*) AS n, count(model) AS nn, min(model COLLATE "C") AS lo, '
        'max(model COLLATE "C") AS hi FROM mine), '
        f"pick AS MATERIALIZED (SELECT n, lo, {single} AS single, coalesce($5::text, "
        f"CASE WHEN {single} THEN lo ELSE ({_MODEL_OF_MOST_ROWS}) END) AS model FROM stats), "
        "top AS (SELECT id, distance FROM mine WHERE model IS NOT DISTINCT FROM (SELECT model FROM pick) "
        "ORDER BY distance, id LIMIT $3) "
        f"SELECT {_T_COLUMNS}, top.distance, pick.n, CASE WHEN NOT pick.single THEN "
        "(SELECT count(*) FROM mine WHERE model IS DISTINCT FROM (SELECT model FROM pick)) "
        "WHEN pick.lo IS NOT DISTINCT FROM pick.model THEN 0 ELSE pick.n END "
        f"FROM pick LEFT JOIN (top JOIN {table} t ON t.id = top.id) ON true ORDER BY top.distance, top.id"
    )


#: the model holding most of ``mine``'s rows (ties: the smaller id; a row without a model loses them)
_MODEL_OF_MOST_ROWS = "SELECT model FROM mine GROUP BY 1 ORDER BY count(*) DESC, 1 NULLS LAST LIMIT 1"


def _hnsw_search(
    conn: psycopg.Connection[Any],
    table: str,
    user_id: str,
    vector: np.ndarray | PackedVector,
    limit: int,
    backend: PgvectorBackend,
) -> list[tuple]:
    """HNSW with pgvector 0.8 iterative scans; relaxed order is re-sorted exactly outside.

    The model filter sits inside the iterative scan (it keeps scanning until ``limit`` rows of the
    model pass), chosen first: the configured model, else the most common of the user's first
    :data:`PICK_SAMPLE` rows."""
    conn.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        "set_config('hnsw.ef_search', %s, true)",
        (str(backend.ef_search),),
    )
    model = backend.model
    if model is None:
        sample = f"(SELECT embedding_model FROM {table} WHERE user_id = %s LIMIT {PICK_SAMPLE}) AS s"
        found = conn.execute(_model_pick(sample, "%s"), (None, user_id)).fetchone()
        model = found[0] if found else None
    sql = (
        f"WITH near AS MATERIALIZED (SELECT {_result_columns()}, embedding <=> %s AS distance FROM {table} "
        f"WHERE user_id = %s AND embedding_model IS NOT DISTINCT FROM %s ORDER BY embedding <=> %s LIMIT %s) "
        f"SELECT * FROM near ORDER BY distance, id"
    )
    return conn.execute(sql, (vector, user_id, model, vector, limit), binary=True).fetchall()


def _memories(rows: list[tuple], user_id: str) -> list[dict[str, Any]]:
    """The result rows in the API's JSON shape (camelCase, ISO timestamps, score = 1 - cosine
    distance), every row ``user_id``'s (the statements filter on it); built in one loop -- it runs
    for every row of every resolve (a function call per row was slower)."""
    loads, isfinite, same = json.loads, math.isfinite, SAME_AS_CREATED
    out = []
    for row in rows:
        row_id, source_id, content, type_, session, message, meta, model, created, updated, dist = row[:11]
        if dist is not None and not isfinite(dist):  # a stored vector without direction
            dist = None
        out.append(
            {
                "id": source_id or str(row_id),
                "userId": user_id,
                "content": content,
                "type": type_,
                "score": None if dist is None else 1.0 - dist,
                "distance": dist,
                "sourceMemoryId": source_id,
                "sourceSessionId": session,
                "sourceMessageId": message,
                "metadata": {} if not meta or meta == "{}" else loads(meta),
                "embeddingModel": model,
                "createdAt": created,
                "updatedAt": created if updated == same else updated,
            }
        )
    return out


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
    model = (env.get(MODEL_VAR) or "").strip() or None
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
        model=model,
    )


# ---- the migration source --------------------------------------------------------------------------
SOURCE_NAME = "pgvector"
SOURCE_URL_VAR = "MEMORY_PGVECTOR_SOURCE_URL"
SOURCE_TABLE_VAR = "MEMORY_PGVECTOR_SOURCE_TABLE"


class PgvectorSource:
    """Every row of a pgvector memory table (another database's, or another table: a re-embedding
    into a new model or dimension), by id order from the cursor to the end, and its production
    search (:class:`PgvectorBackend`'s ``resolve``) for the certificate's ``preserved`` gate.

    A record's id is the one that search answers with -- ``source_memory_id``, else the row id -- so
    both sides of the gate name a memory alike; the vector and its ``embedding_model`` are kept.
    """

    name = SOURCE_NAME

    def __init__(self, url: str, *, table: str = EMBEDDINGS_TABLE) -> None:
        self.url = url
        self.table = check_identifier(table, field=SOURCE_TABLE_VAR)
        self._backend: PgvectorBackend | None = None

    @property
    def key(self) -> str:
        from memwork.redaction import redact_url

        return f"{SOURCE_NAME}:{redact_url(self.url)}#{self.table}"

    def read_page(self, cursor: str | None, size: int) -> Any:
        from memwork.contracts import record_page
        from memwork.db import pg_connect

        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError("page_size", size, "must be a positive integer")
        if cursor is not None and not cursor.isdigit():
            raise UsageError("cursor", cursor, "is not a pgvector cursor (a row id)")
        t = quote_identifier(self.table)
        with pg_connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT id, coalesce(source_memory_id, id::text), user_id, content, type, "
                "source_session_id, source_message_id, metadata, created_at, updated_at, embedding::real[], "
                f"embedding_model FROM {t} WHERE id > %s ORDER BY id LIMIT %s",
                (int(cursor or 0), size),
            ).fetchall()
        fields = [
            {
                "id": key, "user_id": user, "content": content, "type": kind or "fact",
                "metadata": dict(meta or {}), "created_at": created, "updated_at": updated,
                "session_id": session, "message_id": message,
                "vector": None if vector is None else [float(x) for x in vector], "model": model,
            }
            for _, key, user, content, kind, session, message, meta, created, updated, vector, model in rows
        ]  # fmt: skip
        return record_page(fields, str(rows[-1][0]) if len(rows) >= size else None)

    def search(self, user_id: str, vector: Any, k: int) -> list[str]:
        """The ids of the user's ``k`` nearest rows by the table's production search path."""
        if self._backend is None:
            self._backend = PgvectorBackend(self.url, table=self.table)
        embedding = [float(x) for x in np.asarray(vector, dtype=float).ravel()]
        answer = self._backend.resolve({"userId": user_id, "embedding": embedding, "limit": int(k)})
        return [str(m["id"]) for m in answer["semanticMemories"]]

    def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()


def source_from_env(env: Mapping[str, str]) -> PgvectorSource:
    """``MEMORY_PGVECTOR_SOURCE_URL`` (required: the database read from, ``pg://embedded`` too) and
    ``MEMORY_PGVECTOR_SOURCE_TABLE`` (default ``memory_embeddings``)."""
    from memwork.contracts import require

    url = require(env, SOURCE_URL_VAR)
    table = (env.get(SOURCE_TABLE_VAR) or "").strip() or EMBEDDINGS_TABLE
    return PgvectorSource(url, table=table)
