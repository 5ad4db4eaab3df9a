"""The certificate's self-test: plant every kind of damage it claims to catch in a scratch copy and
show each one named by id and kind, and the verdict FAIL. A verifier never seen to fail proves nothing.

The scratch copy is two new tables -- a few hundred of the destination's rows and their source rows,
copied inside each database -- so the real tables are only read. Planted, one key each:

``missing`` (row deleted), ``extra`` (a row with a new key), ``changed`` (content edited and
re-embedded, so only the row check can see it), ``user-changed`` (row moved to another user),
``swapped`` (the vectors of two rows exchanged), ``other-model`` (a vector of another model under the
row's model id), ``stale`` (content edited on both sides, the old vector kept), ``wrong-dimension``
(a vector one element short) and ``opclass`` (the ANN index rebuilt with ``vector_l2_ops`` while the
resolve query orders by cosine). The scratch tables are dropped afterwards.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memwork.certify.certificate import Certificate, CertifyOptions, certify
from memwork.certify.sides import SOURCE_TABLE
from memwork.certify.vectors import STALE_COSINE
from memwork.embed import Embedder, HashEmbedder
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.ownership import LEGACY_OWNER as BACKFILL_OWNER
from memwork.migrate.ownership import owner_sql
from memwork.pgvector.schema import EMBEDDINGS_TABLE

PLANTED_KINDS = (
    "missing",
    "extra",
    "changed",
    "user-changed",
    "swapped",
    "other-model",
    "stale",
    "wrong-dimension",
    "opclass",
)


@dataclass
class SelfTestResult:
    """What was planted, what the certificate named, and whether every plant was caught."""

    planted: list[tuple[str, str]] = field(default_factory=list)
    named: list[tuple[str, str]] = field(default_factory=list)
    verdict: str = ""
    certificate: Certificate | None = None

    @property
    def missed(self) -> list[tuple[str, str]]:
        return [p for p in self.planted if p not in set(self.named)]

    @property
    def unexpected(self) -> list[tuple[str, str]]:
        """Findings on keys nothing was planted on (false alarms)."""
        keys = {k for k, _ in self.planted}
        return [n for n in self.named if n[0] not in keys]

    @property
    def passed(self) -> bool:
        return self.verdict == "FAIL" and not self.missed and not self.unexpected

    def lines(self) -> list[str]:
        named = set(self.named)
        out = [f"{'caught' if p in named else 'MISSED'}: {p[1]} {p[0]}" for p in self.planted]
        out += [f"unexpected: {k} {key}" for key, k in self.unexpected]
        out.append(f"verdict {self.verdict}; self-test {'PASS' if self.passed else 'FAIL'}")
        return out


def self_test(
    source_url: str,
    dest_url: str,
    *,
    table: str = EMBEDDINGS_TABLE,
    source_table: str = SOURCE_TABLE,
    rows: int = 300,
    embedder: Embedder | None = None,
) -> SelfTestResult:
    """Copy up to ``rows`` rows of both sides into scratch tables, plant each damage kind, certify, drop."""
    from pgvector.psycopg import register_vector
    from sqlalchemy import text

    from memwork.certify.sides import SourceSide
    from memwork.db import pg_connect

    scratch = f"mw_certify_scratch_{uuid.uuid4().hex[:8]}"
    source = SourceSide(source_url, source_table)
    result = SelfTestResult()
    with pg_connect(dest_url, autocommit=True) as conn:
        register_vector(conn)
        t, s = quote_identifier(table), quote_identifier(scratch)
        keyed = conn.execute(
            f"SELECT source_memory_id, content, embedding_model FROM {t} "
            f"WHERE source_memory_id IS NOT NULL AND {owner_sql(t)} = %s ORDER BY 1 LIMIT %s",
            (BACKFILL_OWNER, rows),
        ).fetchall()
        if len(keyed) < 12:
            raise UsageError(
                "table", table, f"has {len(keyed)} rows to copy; the self-test needs at least 12"
            )
        model = str(keyed[0][2])
        if embedder is None:
            if not (model.startswith("hash-") and model[5:].isdigit()):
                raise UsageError(
                    "embedder", model, "the self-test needs the model's embedder for this model id"
                )
            embedder = HashEmbedder(int(model[5:]))
        keys = [str(r[0]) for r in keyed]
        try:
            _copy_source(source, scratch, keys)
            conn.execute(f"CREATE TABLE {s} (LIKE {t} INCLUDING DEFAULTS)")
            conn.execute(
                f"INSERT INTO {s} SELECT * FROM {t} WHERE source_memory_id = ANY(%s) AND {owner_sql(t)} = %s",
                (keys, BACKFILL_OWNER),
            )
            result.planted = _plant(conn, source, s, scratch, embedder)
            cert = certify(
                CertifyOptions(
                    source_url,
                    dest_url,
                    table=scratch,
                    source_table=scratch,
                    embedder=embedder,
                    vector_sample=None,
                    retrieval=False,
                    record_failures=False,
                    run_id=f"selftest-{scratch}",
                )
            )
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {s}")
            with source.connect() as sconn:
                sconn.execute(text(f"DROP TABLE IF EXISTS {scratch}"))
                sconn.commit()
    result.certificate = cert
    result.verdict = cert.verdict
    result.named = sorted({(str(f["key"]), str(f["kind"])) for f in cert.failures()})
    return result


def _copy_source(source: Any, scratch: str, keys: list[str]) -> None:
    from sqlalchemy import bindparam, text

    with source.connect() as conn:
        if source.dialect == "sqlite":
            conn.execute(text(f"CREATE TABLE {scratch} AS SELECT * FROM {source.table} WHERE 0"))
        else:
            conn.execute(text(f"CREATE TABLE {scratch} LIKE {source.table}"))
        insert = text(f"INSERT INTO {scratch} SELECT * FROM {source.table} WHERE id IN :keys").bindparams(
            bindparam("keys", expanding=True)
        )
        conn.execute(insert, {"keys": keys})
        conn.commit()
    source.table = scratch


def _plant(conn: Any, source: Any, s: str, scratch: str, embedder: Embedder) -> list[tuple[str, str]]:
    """Damage the scratch copy, one key per kind; returns (key, kind) of each plant."""
    from sqlalchemy import text

    rows = conn.execute(
        f"SELECT source_memory_id, user_id, content, embedding FROM {s} ORDER BY 1"
    ).fetchall()
    dims = embedder.dimension
    seen: dict[str, int] = {}
    for row in rows:
        seen[str(row[2])] = seen.get(str(row[2]), 0) + 1
    pool = [row for row in rows if seen[str(row[2])] == 1]  # unique contents: each embedding is its own
    users = sorted({str(r[1]) for r in rows})
    other_model = HashEmbedder(dims + 7)
    planted: list[tuple[str, str]] = []

    def take(predicate: Any = lambda r: True) -> tuple:
        for i, row in enumerate(pool):
            if predicate(row):
                return pool.pop(i)
        raise UsageError("table", scratch, "has too few distinct rows for the self-test")

    row = take()
    conn.execute(f"DELETE FROM {s} WHERE source_memory_id = %s", (row[0],))
    planted.append((str(row[0]), "missing"))

    row = take()
    extra = f"selftest-extra-{uuid.uuid4().hex[:8]}"
    conn.execute(
        f"INSERT INTO {s} (user_id, content, embedding, embedding_model, type, source_memory_id, metadata, "
        f"created_at, updated_at) SELECT user_id, content, embedding, embedding_model, type, %s, metadata, "
        f"created_at, updated_at FROM {s} WHERE source_memory_id = %s",
        (extra, row[0]),
    )
    planted.append((extra, "extra"))

    row = take()
    new = f"{row[2]} [planted change]"
    conn.execute(
        f"UPDATE {s} SET content = %s, embedding = %s WHERE source_memory_id = %s",
        (new, embedder.embed([new])[0], row[0]),
    )
    planted.append((str(row[0]), "changed"))

    row = take()
    other_user = next(u for u in users if u != str(row[1]))
    conn.execute(f"UPDATE {s} SET user_id = %s WHERE source_memory_id = %s", (other_user, row[0]))
    planted.append((str(row[0]), "user-changed"))

    a, b = take(), take()
    conn.execute(f"UPDATE {s} SET embedding = %s WHERE source_memory_id = %s", (b[3], a[0]))
    conn.execute(f"UPDATE {s} SET embedding = %s WHERE source_memory_id = %s", (a[3], b[0]))
    planted += [(str(a[0]), "swapped"), (str(b[0]), "swapped")]

    def foreign(r: tuple) -> bool:
        return _cos(_other(other_model, str(r[2]), dims), embedder.embed([str(r[2])])[0]) < STALE_COSINE

    row = take(foreign)
    conn.execute(
        f"UPDATE {s} SET embedding = %s WHERE source_memory_id = %s",
        (_other(other_model, str(row[2]), dims), row[0]),
    )
    planted.append((str(row[0]), "other-model"))

    def staleable(r: tuple) -> bool:
        old, new = embedder.embed([str(r[2]), f"{r[2]} edited"])
        return STALE_COSINE <= _cos(old, new) < 0.999

    row = take(staleable)
    new = f"{row[2]} edited"
    conn.execute(f"UPDATE {s} SET content = %s WHERE source_memory_id = %s", (new, row[0]))
    with source.connect() as sconn:
        sconn.execute(text(f"UPDATE {scratch} SET content = :c WHERE id = :k"), {"c": new, "k": row[0]})
        sconn.commit()
    planted.append((str(row[0]), "stale"))

    row = take()
    conn.execute(f"ALTER TABLE {s} ALTER COLUMN embedding TYPE vector")
    short = embedder.embed([str(row[2])])[0][: dims - 1]
    conn.execute(f"UPDATE {s} SET embedding = %s WHERE source_memory_id = %s", (short, row[0]))
    planted.append((str(row[0]), "wrong-dimension"))

    index = f"{scratch}_l2_idx"
    conn.execute(
        f"CREATE INDEX {quote_identifier(index, field='index')} ON {s} "
        f"USING hnsw ((embedding::vector({dims})) vector_l2_ops) WHERE vector_dims(embedding) = {dims}"
    )
    planted.append((index, "opclass"))
    return planted


def _other(model: HashEmbedder, content: str, dims: int) -> np.ndarray:
    vector = model.embed([content])[0][:dims]
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else np.eye(1, dims, dims - 1, dtype=np.float32)[0]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
