"""The ``memory_embeddings`` table: SQL generation (pure, for dry runs) and idempotent apply.

The shape a safe migration needs: a unique index on ``source_memory_id`` (the migration's idempotency
key), an index on ``user_id`` (every lookup is per user), the ``embedding_model`` that made each vector
(so mixed models can be detected) and an optional HNSW index. The migration's own bookkeeping
(checkpoints, rejects) is :mod:`memwork.migrate`'s. Every statement uses ``IF NOT EXISTS``, so
applying twice is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwork.checks import MAX_DIMENSION, dimension
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier

if TYPE_CHECKING:
    import psycopg

EMBEDDINGS_TABLE = "memory_embeddings"
DEFAULT_DIMENSIONS = 1536
MAX_DIMENSIONS = MAX_DIMENSION  # pgvector's limit for the vector type
MAX_HNSW_DIMENSIONS = 2000  # pgvector's HNSW/IVFFlat limit for the vector type
SMOKE_PREFIX = "memory-v2-smoke-"  # ids of the smoke check's rows: a migration's orphan count skips them


@dataclass(frozen=True)
class IndexNames:
    """Index names derived from the table name, kept within PostgreSQL's 63-byte limit."""

    source: str
    user: str
    vector: str


def index_names(table: str) -> IndexNames:
    """``<table>_source_memory_id_key`` etc.; long table names are cut so names never get truncated
    silently by the server (which would make a second run miss the existing index)."""
    return _index_names(check_identifier(table))


def _index_names(table: str) -> IndexNames:
    """:func:`index_names` of a table name already checked."""

    def name(suffix: str) -> str:  # a checked table's prefix + a fixed suffix: an identifier too
        return table[: 63 - len(suffix)] + suffix

    return IndexNames(name("_source_memory_id_key"), name("_user_id_idx"), name("_embedding_hnsw_idx"))


def check_dimensions(dimensions: object) -> int:
    """An integer from 1 to 16000 (pgvector's limit), or a usage error naming the value."""
    return dimension("dimensions", dimensions)


#: transaction-level advisory lock around memwork's ``CREATE ... IF NOT EXISTS``: two runs starting at
#: once would otherwise race in the catalog (``duplicate key value violates ... pg_type_typname_nsp_index``)
DDL_LOCK_KEY = 0x6D656D776F726B  # "memwork"


def lock_ddl(conn: psycopg.Connection[Any]) -> None:
    """Serialise memwork's schema statements with other runs' until this transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK_KEY,))


def schema_sql(
    table: str = EMBEDDINGS_TABLE,
    dimensions: int = DEFAULT_DIMENSIONS,
    create_extension: bool = False,
    create_vector_index: bool = False,
) -> list[str]:
    """The statements that create the table and its indexes, in execution order (no side effects)."""
    quoted = quote_identifier(table)  # checks the name
    dims = check_dimensions(dimensions)
    names = _index_names(table)
    if create_vector_index and dims > MAX_HNSW_DIMENSIONS:
        raise UsageError("dimensions", dims, f"an HNSW index on vector takes at most {MAX_HNSW_DIMENSIONS}")
    statements: list[str] = []
    if create_extension:
        statements.append("CREATE EXTENSION IF NOT EXISTS vector")
    statements.append(
        f"CREATE TABLE IF NOT EXISTS {quoted} (\n"
        "  id BIGSERIAL PRIMARY KEY,\n"
        "  user_id TEXT NOT NULL,\n"
        "  content TEXT NOT NULL,\n"
        f"  embedding VECTOR({dims}) NOT NULL,\n"
        "  embedding_model TEXT,\n"
        "  type TEXT NOT NULL DEFAULT 'fact',\n"
        "  source_memory_id TEXT,\n"
        "  source_session_id TEXT,\n"
        "  source_message_id TEXT,\n"
        "  metadata JSONB NOT NULL DEFAULT '{}'::jsonb,\n"
        "  created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW()\n"
        ")"
    )
    statements.append(
        f"CREATE UNIQUE INDEX IF NOT EXISTS {quote_identifier(names.source, field='index')} "
        f"ON {quoted} (source_memory_id)"
    )
    statements.append(
        f"CREATE INDEX IF NOT EXISTS {quote_identifier(names.user, field='index')} ON {quoted} (user_id)"
    )
    if create_vector_index:
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {quote_identifier(names.vector, field='index')} "
            f"ON {quoted} USING hnsw (embedding vector_cosine_ops)"
        )
    return statements


def ensure_schema(
    url: str,
    table: str = EMBEDDINGS_TABLE,
    dimensions: int = DEFAULT_DIMENSIONS,
    create_extension: bool = False,
    create_vector_index: bool = False,
) -> list[str]:
    """Run :func:`schema_sql` in one transaction against ``url``; returns the statements run.

    Refuses (usage error) when the table already exists with another vector dimension, because
    ``CREATE TABLE IF NOT EXISTS`` would otherwise report success on a table that cannot take the
    vectors the caller means to store.
    """
    from memwork.db import pg_connect

    statements = schema_sql(table, dimensions, create_extension, create_vector_index)
    with pg_connect(url) as conn:
        lock_ddl(conn)
        existing = table_dimensions(conn, table)
        if existing is not None and existing != dimensions:
            raise UsageError("dimensions", dimensions, f"table {table} already has vector({existing})")
        for statement in statements:
            conn.execute(statement)
    return statements


def table_dimensions(conn: psycopg.Connection[Any], table: str) -> int | None:
    """The ``embedding`` column's declared dimension, or None when the table does not exist."""
    row = conn.execute(  # quote_identifier checks the name
        "SELECT a.atttypmod FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attname = 'embedding' AND NOT a.attisdropped",
        (quote_identifier(table),),
    ).fetchone()
    if row is None:
        return None
    return int(row[0]) if row[0] and row[0] > 0 else 0
