"""A memory store in one SQL table, through SQLAlchemy Core: SQLite, PostgreSQL + pgvector, MySQL.

The table is ``agent_memories`` (path, title, content, metadata, embedding, timestamps) plus ``scope``
and ``hits``, unique on ``(scope, file_path)``. On PostgreSQL metadata is JSONB (GIN index, expression
indexes on ``type`` and ``stub``) and the embedding a ``vector(dimension)`` with an HNSW
``vector_cosine_ops`` index; on SQLite and MySQL metadata is JSON text and the embedding a
little-endian float32 blob. Timestamps are
stored as naive UTC (a plain ``TIMESTAMP``). Paths compare by code point everywhere (``C`` /
``utf8mb4_bin`` collation), so every store lists entries in the same order.

Modifying runs hold :meth:`SQLStore.run_lock`: flock files next to a SQLite file, a PostgreSQL
advisory lock on a hash of (table, scope) held on a dedicated connection, or a MySQL ``GET_LOCK``
(store-wide: MySQL has no shared locks). :meth:`SQLStore.put_if_unchanged` compares and writes in one
transaction that locks the row first (``SELECT ... FOR UPDATE``; ``BEGIN IMMEDIATE`` on SQLite).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

from memwork.checks import dimension as check_dimension
from memwork.db import DatabaseURL, embedded, get_engine, parse_url
from memwork.entry import (
    DEFAULT_SCOPE,
    SUPERSEDED_BY,
    Entry,
    check_limits,
    normalize_path,
    validate_scope,
)
from memwork.errors import (
    EntryNotFound,
    MissingStore,
    ServiceUnavailable,
    StoreLocked,
    UsageError,
    WriteConflict,
)
from memwork.identifiers import check_identifier, quote_identifier
from memwork.progress import Progress
from memwork.redaction import first_line, redact_url
from memwork.stores.base import (
    DEFAULT_RUN_LOCK_TIMEOUT,
    CasWrite,
    EntryInfo,
    Store,
)
from memwork.stores.runlock import flock_run_lock, lock_key, lock_name, poll_until

#: the table of the defrag entry store (an SQL store); the pgvector destination's is
#: :data:`memwork.pgvector.schema.EMBEDDINGS_TABLE`
ENTRIES_TABLE = "agent_memories"
DEFAULT_DIMENSION = 384
_BATCH = 500
_STREAM = 2000
_BULK_REBUILD = 10_000


def _pg_vector_type(dimension: int) -> Any:
    """pgvector's SQLAlchemy type, reading straight into a float32 array (no list of floats)."""
    from pgvector.sqlalchemy import VECTOR

    class FastVector(VECTOR):
        cache_ok = True

        def result_processor(self, dialect: Any, coltype: Any) -> Any:
            def process(value: Any) -> np.ndarray | None:
                if value is None:
                    return None
                return np.array(value[1:-1].split(","), dtype=np.float32)

            return process

    return FastVector(dimension)


def build_table(name: str, dialect: str, dimension: int) -> Table:
    """The store's table for one dialect (indexes that only PostgreSQL has are added only there)."""
    check_identifier(name, field="table")
    meta = MetaData()
    path_type: Any = String(500)
    scope_type: Any = String(128)
    json_type: Any = JSON()
    emb_type: Any = LargeBinary()
    stamp: Any = DateTime(timezone=False)
    content_type: Any = Text()
    # each dialect module on first use: a SQLite store (a report's kernel) need not load the others
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        path_type, scope_type = postgresql.VARCHAR(500, collation="C"), postgresql.VARCHAR(128, collation="C")
        json_type, emb_type = postgresql.JSONB(), _pg_vector_type(dimension)
    elif dialect == "mysql":
        from sqlalchemy.dialects import mysql

        content_type = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
        path_type = mysql.VARCHAR(500, charset="utf8mb4", collation="utf8mb4_bin")
        scope_type = mysql.VARCHAR(128, charset="utf8mb4", collation="utf8mb4_bin")
        emb_type, stamp = mysql.LONGBLOB(), mysql.DATETIME(fsp=6)
    table = Table(
        name,
        meta,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        Column("scope", scope_type, nullable=False, server_default=DEFAULT_SCOPE),
        Column("file_path", path_type, nullable=False),
        Column("content", content_type, nullable=False),
        Column("title", String(200), nullable=False, server_default=""),
        Column("embedding", emb_type, nullable=True),
        Column("metadata", json_type, nullable=False),
        Column("size", Integer, nullable=False),
        Column("hits", Integer, nullable=False, server_default="0"),
        Column("updated_at", stamp, nullable=False),
        Column("created_at", stamp, nullable=False),
        UniqueConstraint("scope", "file_path", name=f"uq_{name}_scope_path"[:63]),
        Index(f"ix_{name}_updated_at"[:63], "updated_at"),
    )
    if dialect == "postgresql":
        md = table.c.metadata
        Index(f"ix_{name}_metadata"[:63], md, postgresql_using="gin")
        Index(f"ix_{name}_meta_type"[:63], md["type"].astext)
        Index(f"ix_{name}_meta_stub"[:63], md["stub"].astext)
        Index(
            f"ix_{name}_embedding"[:63],
            table.c.embedding,
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )
    return table


class SQLStore(Store):
    """Entries as rows of one table; with ``create`` the table and its indexes are created on open
    (idempotent), without it a database that lacks the table is refused (a reading command never
    creates a store) and opening only reads: one question for the table (and, on PostgreSQL, one for
    its vector dimension) -- no DDL, no catalog walk over the indexes, and for ``pg://embedded/NAME``
    no database or extension created."""

    def __init__(
        self,
        url: str | DatabaseURL,
        *,
        dimension: int = DEFAULT_DIMENSION,
        table: str = ENTRIES_TABLE,
        create: bool = True,
    ) -> None:
        check_dimension("dimension", dimension)
        try:  # pg://embedded starts here, and only here
            self.database = embedded.ensure(parse_url(url), create=create)
        except MissingStore as exc:
            raise MissingStore(
                "store", exc.value, f"{exc.problem} (a reading command never creates a store)"
            ) from None
        self.url = self.database.text
        self.dialect = self.database.dialect
        self.kind = self.dialect
        self.dimension = dimension
        self.table = build_table(table, self.dialect, dimension)
        self.engine: Engine = get_engine(self.database)
        self._pg_vector_oid: int | None = None
        self._create(create)

    def describe(self) -> str:
        """The URL as given (``pg://embedded`` as the server URL it names), password hidden."""
        return f"{redact_url(self.url)} table={self.table.name}"

    def _create(self, create: bool = True) -> None:
        try:
            with self.engine.begin() as conn:
                if create:
                    self.table.metadata.create_all(conn, checkfirst=True)
                    for index in self.table.indexes:  # e.g. an HNSW index dropped by an interrupted bulk load
                        index.create(conn, checkfirst=True)
                elif not inspect(conn).has_table(self.table.name):
                    problem = f"has no table {self.table.name}: no such store"
                    raise MissingStore("store", redact_url(self.url), problem)
        except (OperationalError, InterfaceError) as exc:
            # one line for the CLI: a file that cannot be opened is bad input, a server that does
            # not answer is an unavailable service (exit 1); passwords never shown
            problem = first_line(getattr(exc, "orig", None) or exc)
            if self.dialect == "sqlite":
                raise UsageError("store", self.url, f"cannot open: {problem}") from None
            raise ServiceUnavailable(f"store={redact_url(self.url)!r}: unreachable: {problem}") from None
        if self.dialect == "postgresql":
            self._check_pg_dimension()

    def _check_pg_dimension(self) -> None:
        query = (
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attname = 'embedding'"
        )
        with self.engine.connect() as conn:
            found = conn.execute(text(query), {"t": self.table.name}).scalar()
        expected = f"vector({self.dimension})"
        if found and found != expected:
            raise UsageError("dimension", self.dimension, f"table {self.table.name} already holds {found}")

    # ---- conversions ----------------------------------------------------------------------------
    def _row_values(self, entry: Entry) -> dict[str, Any]:
        path, scope, size = check_limits(entry)
        return {
            "scope": scope,
            "file_path": path,
            "content": entry.content,
            "title": entry.title or "",
            "embedding": self._dump_embedding(entry.embedding),
            "metadata": entry.metadata,
            "size": size,
            "hits": int(entry.hits),
            "updated_at": _naive_utc(entry.updated_at),
            "created_at": _naive_utc(entry.created_at),
        }

    def _dump_embedding(self, embedding: np.ndarray | None) -> Any:
        if embedding is None:
            return None
        if embedding.shape[0] != self.dimension:
            raise UsageError(
                "embedding", f"<{embedding.shape[0]} floats>", f"must have {self.dimension} dimensions"
            )
        if self.dialect == "postgresql":
            return embedding
        return embedding.astype("<f4").tobytes()

    def _entry(self, row: Any) -> Entry:
        emb = row.embedding
        if emb is not None and not isinstance(emb, np.ndarray):
            emb = np.frombuffer(emb, dtype="<f4").astype(np.float32)
        return Entry(
            path=row.file_path,
            scope=row.scope,
            content=row.content,
            title=row.title or "",
            metadata=row.metadata or {},
            embedding=emb,
            size=row.size,
            created_at=row.created_at.replace(tzinfo=UTC),
            updated_at=row.updated_at.replace(tzinfo=UTC),
            hits=row.hits,
        )

    def _where(self, stmt: Any, scope: str | None, prefix: str | None) -> Any:
        c = self.table.c
        if scope is not None:
            stmt = stmt.where(c.scope == validate_scope(scope))
        if prefix:
            stmt = stmt.where(c.file_path.startswith(prefix, autoescape=True))
        return stmt

    # ---- primitives -----------------------------------------------------------------------------
    def get(self, path: str, *, scope: str = DEFAULT_SCOPE) -> Entry | None:
        c = self.table.c
        stmt = select(self.table).where(c.scope == validate_scope(scope), c.file_path == normalize_path(path))
        with self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else self._entry(row)

    def put(self, entry: Entry) -> Entry:
        self.put_many([entry])
        return entry

    def put_many(self, entries: Iterable[Entry], *, progress: Progress | None = None) -> int:
        """Upsert in batches of 500 rows, all in ONE transaction: when the database rejects any row
        nothing is committed (an import or an undo is all or nothing).

        On PostgreSQL a load of 10,000 or more entries drops the HNSW index and builds it once at the
        end: maintaining it row by row is about six times slower than one bulk build."""
        entries = entries if isinstance(entries, list) else list(entries)
        if self.dialect == "postgresql" and len(entries) >= _BULK_REBUILD:
            with self._without_hnsw_index():
                return self._put_batches(entries, progress)
        return self._put_batches(entries, progress)

    @contextmanager
    def _without_hnsw_index(self) -> Iterator[None]:
        index = next(i for i in self.table.indexes if str(i.name).endswith("_embedding"))
        with self.engine.begin() as conn:
            index.drop(conn, checkfirst=True)
        try:
            yield
        finally:
            with self.engine.begin() as conn:
                # the default 64MB makes pgvector build the graph on disk, several times slower
                conn.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
                index.create(conn, checkfirst=True)

    def _put_batches(self, entries: list[Entry], progress: Progress | None = None) -> int:
        rows = [self._row_values(entry) for entry in entries]  # every row checked before the first write
        if not rows:
            return 0
        with self.engine.begin() as conn:
            for start in range(0, len(rows), _BATCH):
                batch = rows[start : start + _BATCH]
                self._upsert(batch, conn)
                if progress is not None:
                    progress.advance(len(batch))
        return len(rows)

    def _upsert(self, rows: list[dict[str, Any]], conn: Connection) -> int:
        columns = [k for k in rows[0] if k not in ("scope", "file_path")]
        stmt: Any
        if self.dialect == "mysql":
            from sqlalchemy.dialects import mysql

            mysql_insert = mysql.insert(self.table)
            stmt = mysql_insert.on_duplicate_key_update({k: mysql_insert.inserted[k] for k in columns})
        else:
            from sqlalchemy.dialects import postgresql, sqlite

            insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
            upsert: Any = insert(self.table)
            stmt = upsert.on_conflict_do_update(
                index_elements=["scope", "file_path"], set_={k: upsert.excluded[k] for k in columns}
            )
        conn.execute(stmt, rows)
        return len(rows)

    def first_refused(self, entries: list[Entry]) -> tuple[int, Exception] | None:
        """The index of the first entry the database refuses, and its error (None: all accepted).

        For naming the line after a failed import: every probe runs in a transaction that is rolled
        back, batch by batch and then row by row inside the failing batch, so nothing is written."""
        rows = [self._row_values(entry) for entry in entries]
        for start in range(0, len(rows), _BATCH):
            if self._refusal(rows[start : start + _BATCH]) is None:
                continue
            for offset, row in enumerate(rows[start : start + _BATCH]):
                error = self._refusal([row])
                if error is not None:
                    return start + offset, error
        return None

    def _refusal(self, rows: list[dict[str, Any]]) -> Exception | None:
        with self.engine.connect() as conn:
            transaction = conn.begin()
            try:
                self._upsert(rows, conn)
            except Exception as exc:  # the database's own refusal, whatever its class
                return exc
            finally:
                transaction.rollback()
        return None

    # ---- safe modifying runs -----------------------------------------------------------------
    def run_lock(
        self, scope: str | None, *, timeout: float = DEFAULT_RUN_LOCK_TIMEOUT
    ) -> AbstractContextManager[None]:
        """See :meth:`Store.run_lock`: a flock next to a SQLite file, else a server-side lock."""
        scope = validate_scope(scope) if scope is not None else None
        if self.dialect == "sqlite":
            database = self.engine.url.database
            if not database or database == ":memory:":
                return contextlib.nullcontext()  # only this process can see the database
            stem = Path(database).resolve()
            return flock_run_lock(stem.with_name(f"{stem.name}.memwork-run"), scope, timeout, self.describe())
        return self._server_run_lock(scope, timeout)

    @contextmanager
    def _server_run_lock(self, scope: str | None, timeout: float) -> Iterator[None]:
        """PostgreSQL advisory locks (shared store key + exclusive scope key) or one MySQL GET_LOCK,
        held on a dedicated autocommit connection; the server drops them if this process dies."""
        deadline = time.monotonic() + max(timeout, 0.0)
        table = self.table.name
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            releases: list[tuple[str, dict[str, Any]]] = []

            def take(try_sql: str, release_sql: str, params: dict[str, Any]) -> None:
                poll_until(
                    lambda: bool(conn.execute(text(try_sql), params).scalar()),
                    deadline,
                    lambda: StoreLocked(self.describe(), scope, timeout),
                )
                releases.append((release_sql, params))

            try:
                if self.dialect == "mysql":
                    name = {"n": lock_name(str(self.engine.url.database), table)}
                    take("SELECT GET_LOCK(:n, 0)", "SELECT RELEASE_LOCK(:n)", name)
                elif scope is None:
                    key = {"k": lock_key("memwork-run", table)}
                    take("SELECT pg_try_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)", key)
                else:
                    key = {"k": lock_key("memwork-run", table)}
                    take(
                        "SELECT pg_try_advisory_lock_shared(:k)", "SELECT pg_advisory_unlock_shared(:k)", key
                    )
                    key = {"k": lock_key("memwork-run", table, scope)}
                    take("SELECT pg_try_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)", key)
                yield
            finally:
                try:
                    for release_sql, params in reversed(releases):
                        conn.execute(text(release_sql), params)
                except Exception:  # a dead connection holds no lock; never reuse it
                    conn.invalidate()

    def _compare_and_write(self, write: CasWrite) -> None:
        """Compare and write in one transaction that locks the row (see :meth:`Store.put_if_unchanged`)."""
        scope, path = write.scope, write.path
        values = None if write.new is None else self._row_values(write.new)  # bad input fails first
        c = self.table.c
        match = (c.scope == scope, c.file_path == path)
        with self._write_transaction() as conn:
            stmt = select(self.table).where(*match)
            if self.dialect != "sqlite":
                stmt = stmt.with_for_update()
            row = conn.execute(stmt).first()
            write.check(None if row is None else self._entry(row))
            if values is None:
                conn.execute(self.table.delete().where(*match))
            elif row is not None:
                conn.execute(update(self.table).where(*match).values(values))
            else:
                try:
                    conn.execute(self.table.insert().values(values))
                except IntegrityError:
                    raise WriteConflict(path, scope, "was created by another writer meanwhile") from None

    @contextmanager
    def _write_transaction(self) -> Iterator[Connection]:
        """A transaction that holds the write lock from its first statement (SQLite: BEGIN IMMEDIATE,
        so the row read for a compare cannot change before the write)."""
        if self.dialect != "sqlite":
            with self.engine.begin() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
            conn.exec_driver_sql("COMMIT")

    def _delete(self, path: str, scope: str) -> bool:
        c = self.table.c
        stmt = self.table.delete().where(
            c.scope == validate_scope(scope), c.file_path == normalize_path(path)
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount > 0

    def iter_entries(self, *, scope: str | None = None, prefix: str | None = None) -> Iterator[Entry]:
        if self.dialect == "postgresql":
            yield from self._iter_pg_binary(scope, prefix)
            return
        c = self.table.c
        stmt = self._where(select(self.table), scope, prefix).order_by(c.scope, c.file_path)
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=_STREAM).execute(stmt)
            for row in result:
                yield self._entry(row)

    def _iter_pg_binary(self, scope: str | None, prefix: str | None) -> Iterator[Entry]:
        """Stream through a server-side psycopg cursor in binary format: vectors arrive as float32
        bytes (one ``np.frombuffer`` each) instead of text to parse -- about twice as fast."""
        where, params = [], []
        if scope is not None:
            where.append("scope = %s")
            params.append(validate_scope(scope))
        if prefix:
            where.append("starts_with(file_path, %s)")
            params.append(prefix)
        query = (
            f"SELECT {', '.join(_COLUMNS)} FROM {quote_identifier(self.table.name)}"
            f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY scope, file_path"
        )
        with self.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None  # an open pooled connection has its psycopg connection
            with raw.cursor(name=f"memwork_iter_{id(conn):x}", binary=True) as cur:
                cur.adapters.register_loader(self._vector_oid(raw), _vector_binary_loader())
                cur.itersize = _STREAM
                cur.execute(query, params)
                for row in cur:
                    yield entry_from_row(row)

    def _vector_oid(self, raw: Any) -> int:
        if self._pg_vector_oid is None:
            from psycopg.types import TypeInfo

            info = TypeInfo.fetch(raw, "vector")
            if info is None:
                raise UsageError("store", self.describe(), "the vector extension is not installed")
            self._pg_vector_oid = info.oid
        return self._pg_vector_oid

    def scopes(self) -> list[str]:
        c = self.table.c
        with self.engine.connect() as conn:
            return list(conn.execute(select(c.scope).distinct().order_by(c.scope)).scalars())

    def scope_counts(self) -> dict[str, int]:
        c = self.table.c
        stmt = select(c.scope, func.count()).group_by(c.scope)
        with self.engine.connect() as conn:
            return {str(scope): int(n) for scope, n in conn.execute(stmt)}

    def bump_hits(self, path: str, *, scope: str = DEFAULT_SCOPE, by: int = 1) -> None:
        c = self.table.c
        path, scope = normalize_path(path), validate_scope(scope)
        stmt = update(self.table).where(c.scope == scope, c.file_path == path).values(hits=c.hits + by)
        with self.engine.begin() as conn:
            if conn.execute(stmt).rowcount == 0:
                raise EntryNotFound(path, scope)

    # ---- faster versions of the defrag methods of Store ----------------------------------------
    def list(
        self, prefix: str | None = None, *, scope: str | None = None, history: bool = False
    ) -> list[EntryInfo]:
        """Like the base method, without loading content or embeddings (metadata only to leave out
        superseded entries, unless ``history``)."""
        c = self.table.c
        stmt = select(c.file_path, c.title, c.size, c.updated_at, c.scope, c.metadata)
        stmt = self._where(stmt, scope, prefix).order_by(c.scope, c.file_path)
        with self.engine.connect() as conn:
            return [
                EntryInfo(r.file_path, r.title or "", r.size, r.updated_at.replace(tzinfo=UTC), r.scope)
                for r in conn.execute(stmt)
                if history or not _superseded(r.metadata)
            ]

    def total_size(self, *, scope: str | None = None) -> int:
        stmt = self._where(select(func.coalesce(func.sum(self.table.c.size), 0)), scope, None)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def count(self, *, scope: str | None = None) -> int:
        """Number of entries (stubs included)."""
        stmt = self._where(select(func.count()).select_from(self.table), scope, None)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)


_COLUMNS = (
    "scope",
    "file_path",
    "content",
    "title",
    "embedding",
    "metadata",
    "size",
    "hits",
    "updated_at",
    "created_at",
)


@functools.cache
def _vector_binary_loader() -> type:
    """Made on first use: importing psycopg costs every store user ~50 ms (a report's kernel too)."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class VectorBinaryLoader(Loader):
        """pgvector's binary format: uint16 dim, uint16 unused, then big-endian float32s."""

        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)

    return VectorBinaryLoader


def _superseded(metadata: Any) -> bool:
    """Does a row's metadata (a dict, or JSON text on SQLite/MySQL) mark a superseded, non-stub entry?"""
    if isinstance(metadata, str | bytes):
        import json

        try:
            metadata = json.loads(metadata)
        except ValueError:
            return False
    if not isinstance(metadata, dict):
        return False
    return bool(metadata.get(SUPERSEDED_BY)) and metadata.get("stub") is not True


def _naive_utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def entry_from_row(row: Sequence[Any]) -> Entry:
    """An :class:`Entry` from a binary PostgreSQL row of the store's columns, in ``_COLUMNS`` order
    (timestamps stored naive UTC)."""
    return Entry(
        scope=row[0],
        path=row[1],
        content=row[2],
        title=row[3] or "",
        embedding=row[4],
        metadata=row[5] or {},
        size=row[6],
        hits=row[7],
        updated_at=row[8].replace(tzinfo=UTC),
        created_at=row[9].replace(tzinfo=UTC),
    )
