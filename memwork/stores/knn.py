"""Nearest neighbours inside PostgreSQL: batched k-NN queries over an SQL store's HNSW index.

For the approximate candidate stage of defrag (:mod:`memwork.defrag.approximate`): the store is never
read whole. Ids of one scope arrive in keyset batches; one statement per batch asks the HNSW index for
each id's ``k`` nearest live neighbours of the same scope (a ``LATERAL`` join, ``hnsw.ef_search`` and
pgvector 0.8's iterative scan set for that transaction only, so the scope filter does not starve the
answer); then the rows of the batch and of its neighbours are read by id, a bounded run of them at a
time, in pgvector's binary format.

"Live" is what defrag compares: not a stub and not superseded (the same JSON truth as
:attr:`Entry.superseded_by`); the caller checks every row again in Python.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from memwork.entry import SUPERSEDED_BY, Entry, validate_scope
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.stores.base import Store
from memwork.stores.sql import _COLUMNS, SQLStore, _vector_binary_loader, entry_from_row

#: JSON values a Python ``bool()`` calls false (``metadata.get(key)`` falsy)
_FALSY = "('null'::jsonb, 'false'::jsonb, '0'::jsonb, '\"\"'::jsonb, '[]'::jsonb, '{}'::jsonb)"
#: pgvector's limit for ``hnsw.ef_search`` (and so for ``k``)
MAX_EF_SEARCH = 1000


def live(alias: str) -> str:
    """SQL: the row of ``alias`` is neither a stub nor superseded."""
    md = f"{alias}.metadata"
    return (
        f"NOT ({md} @> '{{\"stub\": true}}'::jsonb) AND "
        f"NOT ({md} ? '{SUPERSEDED_BY}' AND {md} -> '{SUPERSEDED_BY}' NOT IN {_FALSY})"
    )


def pg_store(store: Store, field: str, value: object) -> SQLStore:
    """``store`` when it is PostgreSQL + pgvector; anything else is a usage error naming ``field``."""
    if not isinstance(store, SQLStore) or store.dialect != "postgresql":
        raise UsageError(field, value, f"needs a PostgreSQL + pgvector store, not {store.describe()}")
    return store


def hnsw_index(store: SQLStore) -> str | None:
    """The name of an HNSW ``vector_cosine_ops`` index on the store's ``embedding``, or None."""
    query = (
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_am am ON am.oid = i.relam JOIN pg_opclass o ON o.oid = x.indclass[0] "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
        "WHERE x.indrelid = to_regclass(%s) AND am.amname = 'hnsw' AND o.opcname = 'vector_cosine_ops' "
        "AND a.attname = 'embedding' AND x.indpred IS NULL ORDER BY 1 LIMIT 1"
    )
    with _cursor(store) as cur:
        cur.execute(query, (store.table.name,))
        row = cur.fetchone()
    return None if row is None else str(row[0])


def require_hnsw_index(store: SQLStore) -> str:
    """The HNSW index's name; its absence is a usage error: a reading action never builds one."""
    name = hnsw_index(store)
    if name is None:
        raise UsageError(
            "store",
            store.describe(),
            "has no HNSW (vector_cosine_ops) index on embedding; a reading command never builds one "
            "(minutes per 100k rows, blocks writes): any `memwork store load --apply` into it creates it",
        )
    return name


def scope_sizes(store: SQLStore, scope: str | None = None) -> dict[str, tuple[int, int]]:
    """``{scope: (live rows, live rows with a vector)}`` in scope order, counted in SQL."""
    where = f"WHERE {live('t')}" + (" AND t.scope = %s" if scope is not None else "")
    query = (
        f"SELECT t.scope, count(*), count(t.embedding) FROM {_table(store)} t {where} "
        "GROUP BY t.scope ORDER BY t.scope"
    )
    with _cursor(store) as cur:
        cur.execute(query, () if scope is None else (validate_scope(scope),))
        return {row[0]: (int(row[1]), int(row[2])) for row in cur}


def embedded_ids(store: SQLStore, scope: str, batch: int) -> Iterator[list[int]]:
    """The ids of the scope's live rows with a vector, ``batch`` at a time (keyset on id: no cursor
    held open between batches)."""
    query = (
        f"SELECT t.id FROM {_table(store)} t WHERE t.scope = %s AND t.id > %s AND t.embedding IS NOT NULL "
        f"AND {live('t')} ORDER BY t.id LIMIT %s"
    )
    last = -1
    while True:
        with _cursor(store) as cur:
            cur.execute(query, (scope, last, batch))
            ids = [int(row[0]) for row in cur]
        if not ids:
            return
        yield ids
        last = ids[-1]


def _nearest_sql(store: SQLStore) -> str:
    table = _table(store)
    return (
        f"SELECT q.id, n.id FROM {table} q CROSS JOIN LATERAL ("
        f"SELECT c.id FROM {table} c WHERE c.scope = %(scope)s AND c.id <> q.id "
        f"AND c.embedding IS NOT NULL AND {live('c')} "
        "ORDER BY c.embedding <=> q.embedding LIMIT %(k)s) n WHERE q.id = ANY(%(ids)s)"
    )


def _search_settings(cur: Any, ef_search: int) -> None:
    """For this transaction: ``ef_search``, iterative scan (the scope filter would otherwise leave
    fewer than ``k`` of the ``ef_search`` found), and no Sort node -- without that the planner reads a
    small-looking scope through the ``(scope, path)`` btree and sorts it: exact, and O(scope) per id."""
    cur.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), "
        "set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('enable_sort', 'off', true)",
        (str(ef_search),),
    )


def nearest(store: SQLStore, scope: str, ids: Sequence[int], k: int, ef_search: int) -> list[tuple[int, int]]:
    """``(id, neighbour id)`` for each of ``ids`` and its ``k`` nearest live neighbours (cosine) of
    ``scope`` by the HNSW index, in one statement; relaxed order (candidates: verified anyway)."""
    with _cursor(store) as cur:
        _search_settings(cur, ef_search)
        cur.execute(_nearest_sql(store), {"scope": scope, "k": k, "ids": list(ids)})
        return [(int(a), int(b)) for a, b in cur]


def plan(store: SQLStore, scope: str, k: int, ef_search: int = 40) -> str:
    """The query plan of one :func:`nearest` statement (to show that the HNSW index serves it)."""
    with _cursor(store) as cur:
        _search_settings(cur, ef_search)
        cur.execute("EXPLAIN " + _nearest_sql(store), {"scope": scope, "k": k, "ids": [1, 2]})
        return "\n".join(str(row[0]) for row in cur)


def rows_by_id(store: SQLStore, ids: Sequence[int]) -> dict[int, Entry]:
    """The entries of ``ids`` (vectors in binary: one ``np.frombuffer`` each)."""
    query = (
        f"SELECT t.id, {', '.join('t.' + c for c in _COLUMNS)} FROM {_table(store)} t WHERE t.id = ANY(%s)"
    )
    with _cursor(store, binary=True) as cur:
        cur.execute(query, (list(ids),))
        return {int(row[0]): entry_from_row(row[1:]) for row in cur}


def sample_ids(store: SQLStore, scopes: Sequence[str], size: int, seed: int) -> list[tuple[int, str]]:
    """``size`` live rows of ``scopes`` drawn uniformly at random (repeatable for a ``seed``), as
    ``(id, scope)``: the rows whose exact pairs an approximate run is checked against."""
    query = (
        f"SELECT t.id, t.scope FROM {_table(store)} t WHERE t.scope = ANY(%s) AND {live('t')} "
        "ORDER BY md5(%s || ':' || t.id::text) LIMIT %s"
    )
    with _cursor(store) as cur:
        cur.execute(query, (list(scopes), str(seed), size))
        return [(int(a), str(b)) for a, b in cur]


def count_out_of_range(store: SQLStore, mark_key: str, scope: str | None = None) -> int:
    """Live non-stub rows whose vector carries the out-of-range mark (``mark_key`` truthy)."""
    where = (
        f"t.embedding IS NOT NULL AND {live('t')} AND t.metadata ? %s AND t.metadata -> %s NOT IN {_FALSY}"
    )
    params: tuple[Any, ...] = (mark_key, mark_key)
    if scope is not None:
        where += " AND t.scope = %s"
        params += (validate_scope(scope),)
    with _cursor(store) as cur:
        cur.execute(f"SELECT count(*) FROM {_table(store)} t WHERE {where}", params)
        row = cur.fetchone()
    return int(row[0]) if row else 0


def _table(store: SQLStore) -> str:
    return quote_identifier(store.table.name)


class _cursor:
    """A psycopg cursor on a pooled connection, in one transaction (so ``set_config(..., true)``
    holds for the statement after it); binary results load vectors as float32 arrays."""

    def __init__(self, store: SQLStore, *, binary: bool = False) -> None:
        self.store, self.binary = store, binary

    def __enter__(self) -> Any:
        self.conn = self.store.engine.connect()
        raw = self.raw = self.conn.connection.driver_connection
        assert raw is not None  # an open pooled connection has its psycopg connection
        self.cur = raw.cursor(binary=self.binary)
        if self.binary:
            self.cur.adapters.register_loader(self.store._vector_oid(raw), _vector_binary_loader())
        return self.cur

    def __exit__(self, *exc: object) -> None:
        self.cur.close()
        if self.raw is not None:
            self.raw.rollback()  # only reads: nothing to keep, and the settings end with it
        self.conn.close()
