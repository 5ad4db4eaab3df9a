"""Both sides of a certificate as SQL that computes checksums where the data lives.

:class:`SourceSide` is the legacy table (MariaDB or SQLite), :class:`DestSide` the pgvector table.
Each answers the same four questions with the canonical row text of :mod:`memwork.certify.canonical`:

* :meth:`checksums` -- per user, or per MD5-of-key prefix inside one user: ``(count, sum1, sum2)``;
* :meth:`row_hashes` -- key -> row MD5 of one small bucket (only where checksums disagree);
* :meth:`rows` -- the full rows of a few keys (for per-field diffs);
* the source's high-water mark (``max(updated_at)``) for the consistency boundary.

Where the engine cannot write canonical metadata in SQL (MySQL 8 has no ``JSON_NORMALIZE``), the source
side streams, per row, the canonical text up to metadata (still written in SQL) and the raw metadata,
and Python finishes the hash with the same rules (:func:`~memwork.certify.canonical.hash_with_metadata`):
still streamed with only per-bucket sums kept, at the cost of reading each row's canonical text once per
pass (``checksums="python"`` forces it on any engine).

Partitioning by user first, then by hex prefixes of ``md5(key)``, keeps every predicate an exact
equality (no key *ranges* whose order would depend on each engine's collation) and splits any bucket
16 ways, so k bad rows cost O(k log16 n) round trips after the one clean pass. A verification split
into partitions (:mod:`memwork.certify.partitioned`) gives each a :class:`HashRange` of ``md5(user_id)``:
hex text, ordered alike by every engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from memwork.certify.canonical import (
    hash_parts,
    hash_with_metadata,
    install_pg_functions,
    key_md5,
    pg_row_text,
    register_sqlite,
    source_row_text,
)
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.ownership import LEGACY_OWNER as BACKFILL_OWNER
from memwork.migrate.ownership import owner_sql

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection

Checksum = tuple[int, int, int]  #: (rows, sum of hash bits 0-31, sum of hash bits 32-63)
SOURCE_TABLE = "h5_user_memory_items"
_ROW_COLUMNS = (
    "user_id",
    "content",
    "type",
    "source_session_id",
    "source_message_id",
    "created_at",
    "updated_at",
    "metadata",
)


@dataclass(frozen=True)
class HashRange:
    """Users whose ``md5(user_id)`` (lowercase hex) lies strictly after ``lower`` and at or before
    ``upper`` (None: the start / end of the hash space). Hex digits compare alike in every engine and
    collation, so both sides select the same users -- a range of the ids themselves would not."""

    lower: str | None = None
    upper: str | None = None

    def __contains__(self, user: object) -> bool:
        digest = key_md5(str(user))
        return (self.lower is None or digest > self.lower) and (self.upper is None or digest <= self.upper)

    def to_json(self) -> dict[str, str | None]:
        return {"lower": self.lower, "upper": self.upper}


@dataclass(frozen=True)
class Bucket:
    """Where a checksum is taken: all users (``user`` None; only those in ``users`` when given), one
    user, or a key-hash prefix in it."""

    user: str | None = None
    prefix: str = ""
    users: HashRange | None = None


class RowSource(Protocol):
    """What the row comparison needs of a source: :class:`SourceSide` (SQL) or a listing
    (:class:`~memwork.certify.listing.ListingSide`)."""

    round_trips: int
    checksums_in: str  #: where the source's checksums are computed: ``sql``, ``python`` or ``listing``

    def checksums(self, bucket: Bucket) -> dict[str, Checksum]: ...

    def row_hashes(self, bucket: Bucket) -> dict[str, str]: ...

    def rows(self, keys: Iterable[str], *, any_status: bool = False) -> dict[str, dict[str, Any]]: ...

    def high_water_mark(self) -> str | None: ...

    def changed_after(self, mark: str | None) -> int: ...


def _unstorable(text: str | None) -> bool:
    """A key or user PostgreSQL text cannot hold (a NUL): no destination row has it."""
    return text is not None and "\x00" in text


def _chunks(keys: Sequence[str], size: int = 1000) -> Iterator[Sequence[str]]:
    for i in range(0, len(keys), size):
        yield keys[i : i + size]


CHECKSUM_MODES = ("auto", "sql", "python")


class SourceSide:
    """The legacy items table on MariaDB, MySQL or SQLite: active rows, keyed by ``id``.

    ``checksums``: ``sql`` computes row hashes in the source's database, ``python`` streams the rows
    and hashes them here, ``auto`` (default) takes SQL wherever the engine can canonicalise metadata
    (SQLite; MariaDB >= 10.7) and Python elsewhere (MySQL 8)."""

    def __init__(self, url: str, table: str = SOURCE_TABLE, checksums: str = "auto") -> None:
        from memwork.db import get_engine
        from memwork.identifiers import check_identifier

        if checksums not in CHECKSUM_MODES:
            raise UsageError("source_checksums", checksums, f"must be one of {', '.join(CHECKSUM_MODES)}")
        self.url, self.table = url, check_identifier(table)
        self.engine = get_engine(url)
        self.dialect = self.engine.dialect.name
        self.round_trips = 0
        self.checksums_in = self._checksum_place(checksums)

    def _checksum_place(self, wanted: str) -> str:
        """``sql`` or ``python``: SQL needs ``JSON_NORMALIZE`` on a MySQL-family server."""
        if wanted == "python" or self.dialect == "sqlite":
            return wanted if wanted == "python" else "sql"
        if self._has_json_normalize():
            return "sql"
        if wanted == "sql":
            raise UsageError(
                "source_checksums", "sql", "this server has no JSON_NORMALIZE (MySQL 8): use auto or python"
            )
        return "python"

    def _has_json_normalize(self) -> bool:
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        try:
            with self.connect() as conn:
                conn.execute(text("SELECT JSON_NORMALIZE('{}')")).all()
        except DBAPIError:
            return False
        return True

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                register_sqlite(conn.connection.dbapi_connection)
            yield conn

    def _md5(self, expr: str) -> str:
        return f"mw_md5({expr})" if self.dialect == "sqlite" else f"MD5({expr})"

    def _parts(self, m: str) -> tuple[str, str]:
        if self.dialect == "sqlite":
            return f"mw_hex(substr({m}, 1, 8))", f"mw_hex(substr({m}, 9, 8))"
        return (
            f"CAST(CONV(SUBSTRING({m}, 1, 8), 16, 10) AS UNSIGNED)",
            f"CAST(CONV(SUBSTRING({m}, 9, 8), 16, 10) AS UNSIGNED)",
        )

    def _where(self, bucket: Bucket) -> tuple[str, dict[str, Any]]:
        where, params = "status = 'active'", {}
        if bucket.user is not None:
            where += " AND user_id = :user"
            params["user"] = bucket.user
        elif bucket.users is not None:
            if bucket.users.lower is not None:
                where += f" AND {self._md5('user_id')} > :users_lower"
                params["users_lower"] = bucket.users.lower
            if bucket.users.upper is not None:
                where += f" AND {self._md5('user_id')} <= :users_upper"
                params["users_upper"] = bucket.users.upper
        if bucket.prefix:
            where += f" AND substr({self._md5('id')}, 1, {len(bucket.prefix)}) = :prefix"
            params["prefix"] = bucket.prefix
        return where, params

    def _run(self, sql: str, params: dict[str, Any]) -> list[Any]:
        from sqlalchemy import text

        self.round_trips += 1
        with self.connect() as conn:
            return list(conn.execute(text(sql), params).all())

    def _streamed(self, bucket: Bucket) -> Iterator[tuple[str, str, str]]:
        """The bucket's rows as (key, user, row MD5), read with a server-side cursor: SQL writes the
        canonical text up to metadata, Python canonicalises the metadata -- never all rows at once."""
        from sqlalchemy import text

        where, params = self._where(bucket)
        meta = "CAST(metadata AS CHAR)" if self.dialect != "sqlite" else "metadata"
        prefix = source_row_text(self.dialect, metadata=False)
        sql = f"SELECT id, user_id, {prefix}, {meta} FROM {self.table} WHERE {where}"
        self.round_trips += 1
        with self.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=5000).execute(text(sql), params)
            for key, user, head, metadata in result:
                yield str(key), str(user), hash_with_metadata(head, metadata)

    def _python_checksums(self, bucket: Bucket) -> dict[str, Checksum]:
        sums: dict[str, list[int]] = {}
        for key, user, md5 in self._streamed(bucket):
            group = user if bucket.user is None else key_md5(key)[: len(bucket.prefix) + 1]
            one, two = hash_parts(md5)
            total = sums.setdefault(group, [0, 0, 0])
            total[0], total[1], total[2] = total[0] + 1, total[1] + one, total[2] + two
        return {g: (n, a, b) for g, (n, a, b) in sums.items()}

    def checksums(self, bucket: Bucket) -> dict[str, Checksum]:
        """Group -> checksum: per user for the whole table, else per next hex digit of md5(key)."""
        if self.checksums_in == "python":
            return self._python_checksums(bucket)
        where, params = self._where(bucket)
        group = (
            "user_id" if bucket.user is None else f"substr({self._md5('id')}, 1, {len(bucket.prefix) + 1})"
        )
        one, two = self._parts("m")
        sql = (
            f"SELECT g, COUNT(*), SUM({one}), SUM({two}) FROM (SELECT {group} AS g, "
            f"{self._md5(source_row_text(self.dialect))} AS m FROM {self.table} WHERE {where}) x GROUP BY g"
        )
        return {str(g): (int(n), int(a), int(b)) for g, n, a, b in self._run(sql, params)}

    def total(self) -> Checksum:
        """The whole table's checksum in one row (the reference figure of the benchmark)."""
        if self.checksums_in == "python":
            n = a = b = 0
            for one_, two_, three_ in self._python_checksums(Bucket()).values():
                n, a, b = n + one_, a + two_, b + three_
            return n, a, b
        one, two = self._parts("m")
        sql = (
            f"SELECT COUNT(*), SUM({one}), SUM({two}) FROM "
            f"(SELECT {self._md5(source_row_text(self.dialect))} AS m FROM {self.table} "
            "WHERE status = 'active') x"
        )
        n, a, b = self._run(sql, {})[0]
        return int(n), int(a or 0), int(b or 0)

    def row_hashes(self, bucket: Bucket) -> dict[str, str]:
        if self.checksums_in == "python":
            return {key: md5 for key, _, md5 in self._streamed(bucket)}
        where, params = self._where(bucket)
        sql = f"SELECT id, {self._md5(source_row_text(self.dialect))} FROM {self.table} WHERE {where}"
        return {str(k): str(m) for k, m in self._run(sql, params)}

    def rows(self, keys: Iterable[str], *, any_status: bool = False) -> dict[str, dict[str, Any]]:
        """Full rows of ``keys`` (metadata and timestamps as text), active only unless ``any_status``."""
        from sqlalchemy import bindparam, text

        keys = sorted(set(keys))
        out: dict[str, dict[str, Any]] = {}
        meta = "CAST(metadata AS CHAR)" if self.dialect != "sqlite" else "metadata"
        columns = ", ".join(c if c != "metadata" else f"{meta} AS metadata" for c in _ROW_COLUMNS)
        status = "" if any_status else " AND status = 'active'"
        sql = text(f"SELECT id, status, {columns} FROM {self.table} WHERE id IN :keys{status}").bindparams(
            bindparam("keys", expanding=True)
        )
        with self.connect() as conn:
            for chunk in _chunks(keys):
                self.round_trips += 1
                for row in conn.execute(sql, {"keys": list(chunk)}).mappings():
                    out[str(row["id"])] = {"key": str(row["id"]), **dict(row)}
        return out

    def user_counts(self) -> dict[str, int]:
        """Active rows per user, from the ``(user_id, status)`` index alone: what key ranges are cut by."""
        sql = f"SELECT user_id, COUNT(*) FROM {self.table} WHERE status = 'active' GROUP BY user_id"
        return {str(u): int(n) for u, n in self._run(sql, {})}

    def high_water_mark(self) -> str | None:
        """``max(updated_at)`` of every row (any status), canonical text: the run's boundary."""
        from memwork.certify.canonical import canonical_timestamp

        rows = self._run(f"SELECT MAX(updated_at) FROM {self.table}", {})
        return canonical_timestamp(rows[0][0]) if rows and rows[0][0] is not None else None

    def changed_after(self, mark: str | None) -> int:
        """Rows (any status) updated after the boundary: changed while the run was verifying."""
        if mark is None:
            return 0
        return int(self._run(f"SELECT COUNT(*) FROM {self.table} WHERE updated_at > :m", {"m": mark})[0][0])


class DestSide:
    """The pgvector table: one owner's rows (default: the MySQL backfill's), keyed by source_memory_id."""

    def __init__(self, conn: psycopg.Connection[Any], table: str, owner: str = BACKFILL_OWNER) -> None:
        self.conn, self.table, self.owner = conn, table, owner
        self.quoted = quote_identifier(table)
        self.round_trips = 0
        install_pg_functions(conn)

    def _where(self, bucket: Bucket) -> tuple[str, list[Any]]:
        where = f"source_memory_id IS NOT NULL AND {owner_sql(self.quoted)} = %s"
        params: list[Any] = [self.owner]
        if bucket.user is not None:
            where += " AND user_id = %s"
            params.append(bucket.user)
        elif bucket.users is not None:  # "C": byte order, as the other engines compare hex
            if bucket.users.lower is not None:
                where += ' AND md5(user_id) COLLATE "C" > %s'
                params.append(bucket.users.lower)
            if bucket.users.upper is not None:
                where += ' AND md5(user_id) COLLATE "C" <= %s'
                params.append(bucket.users.upper)
        if bucket.prefix:
            where += f" AND left(md5(source_memory_id), {len(bucket.prefix)}) = %s"
            params.append(bucket.prefix)
        return where, params

    def _run(self, sql: str, params: Sequence[Any]) -> list[Any]:
        self.round_trips += 1
        return self.conn.execute(sql, params).fetchall()

    def checksums(self, bucket: Bucket) -> dict[str, Checksum]:
        if _unstorable(bucket.user):
            return {}
        where, params = self._where(bucket)
        group = "user_id" if bucket.user is None else f"left(md5(source_memory_id), {len(bucket.prefix) + 1})"
        sql = (
            "SELECT g, count(*), sum(('x' || lpad(substr(m, 1, 8), 16, '0'))::bit(64)::bigint), "
            "sum(('x' || lpad(substr(m, 9, 8), 16, '0'))::bit(64)::bigint) "
            f"FROM (SELECT {group} AS g, md5({pg_row_text()}) AS m FROM {self.quoted} WHERE {where}) x "
            "GROUP BY g"
        )
        return {str(g): (int(n), int(a), int(b)) for g, n, a, b in self._run(sql, params)}

    def total(self) -> Checksum:
        where, params = self._where(Bucket())
        sql = (
            "SELECT count(*), coalesce(sum(('x' || lpad(substr(m, 1, 8), 16, '0'))::bit(64)::bigint), 0), "
            "coalesce(sum(('x' || lpad(substr(m, 9, 8), 16, '0'))::bit(64)::bigint), 0) "
            f"FROM (SELECT md5({pg_row_text()}) AS m FROM {self.quoted} WHERE {where}) x"
        )
        n, a, b = self._run(sql, params)[0]
        return int(n), int(a), int(b)

    def row_hashes(self, bucket: Bucket) -> dict[str, str]:
        if _unstorable(bucket.user):
            return {}
        where, params = self._where(bucket)
        sql = f"SELECT source_memory_id, md5({pg_row_text()}) FROM {self.quoted} WHERE {where}"
        return {str(k): str(m) for k, m in self._run(sql, params)}

    def rows(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        keys = sorted(k for k in set(keys) if not _unstorable(k))
        columns = ", ".join(f"{c}::text AS {c}" if c == "metadata" else c for c in _ROW_COLUMNS)
        out: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(keys):
            self.round_trips += 1
            cur = self.conn.execute(
                f"SELECT source_memory_id, {columns} FROM {self.quoted} WHERE source_memory_id = ANY(%s)",
                (list(chunk),),
            )
            names = [d.name for d in cur.description or []]
            for row in cur.fetchall():
                record = dict(zip(names, row, strict=True))
                out[str(row[0])] = {"key": str(row[0]), **record}
        return out

    def unkeyed(self) -> int:
        """This owner's rows without a source id: they can match nothing in the source."""
        sql = (
            f"SELECT count(*) FROM {self.quoted} WHERE source_memory_id IS NULL "
            f"AND {owner_sql(self.quoted)} = %s"
        )
        return int(self._run(sql, [self.owner])[0][0])

    def stamps(self, keys: list[str]) -> dict[str, tuple[Any, Any]]:
        """``created_at``/``updated_at`` of this owner's rows ``keys`` (for records that gave none)."""
        out: dict[str, tuple[Any, Any]] = {}
        for chunk in _chunks(sorted(k for k in keys if not _unstorable(k))):
            sql = (
                f"SELECT source_memory_id, created_at, updated_at FROM {self.quoted} "
                f"WHERE source_memory_id = ANY(%s) AND {owner_sql(self.quoted)} = %s"
            )
            out.update({str(k): (c, u) for k, c, u in self._run(sql, [list(chunk), self.owner])})
        return out
