"""The checks the one verification (:mod:`memwork.migrate.verify`) is built from, none about a source:
row digests, key-range checksums and their drill-down (like pt-table-checksum compares a replica: a
mismatching range is drilled into row by row, so a *changed* row is named, not only a missing one), the
quarantined rows set apart, vector statistics (declared and actual dimensions, model ids, null, zero
and NaN vectors), ANN recall@k against exact search on sampled queries, and self-retrieval (each
sampled memory's own text, embedded again, finds it among the user's top k).

Destination queries take an ``owner`` (:func:`memwork.migrate.ownership.owner_sql`): one source's rows
of a table several sources share.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.embed import Embedder, load_embedder
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.ownership import owner_sql
from memwork.migrate.quarantine import printable

if TYPE_CHECKING:
    import psycopg

ROW_FIELDS = ("id", "user_id", "content", "type")
_SEP = "\x1f"
MAX_LISTED_IDS = 50
#: every check a FAIL reason can name: each reason starts with ``<check>: `` (the notebook asserts it)
CHECKS = (
    "count", "quarantined", "missing", "extra", "changed", "checksum",
    "dimensions", "models", "vectors", "recall", "self-retrieval", "retrieval",
)  # fmt: skip


@dataclass
class RangeChecksum:
    """One key range's digest on each side (ids compared as text, sorted in Python)."""

    index: int
    first_id: str
    last_id: str
    source_rows: int
    dest_rows: int
    source_digest: str
    dest_digest: str

    @property
    def ok(self) -> bool:
        return self.source_digest == self.dest_digest and self.source_rows == self.dest_rows


def row_digest(values: Iterable[Any]) -> str:
    """SHA-256 of one row's compared fields (None and '' kept distinct)."""
    text = _SEP.join("\x00" if v is None else str(v) for v in values)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def range_checksums(source: dict[str, str], dest: dict[str, str], range_size: int) -> list[RangeChecksum]:
    """Chunk the source's sorted ids into ranges and digest each range on both sides.

    Destination ids that fall outside every source range (extra rows) land in the nearest range,
    so they too make a range mismatch.
    """
    ids = sorted(source)
    bounds = [ids[i : i + range_size] for i in range(0, len(ids), range_size)] or [[]]
    lows = [chunk[0] if chunk else "" for chunk in bounds]
    dest_buckets: list[list[str]] = [[] for _ in bounds]
    for key in dest:
        dest_buckets[max(bisect.bisect_right(lows, key) - 1, 0)].append(key)
    out = []
    for index, chunk in enumerate(bounds):
        dkeys = sorted(dest_buckets[index])
        out.append(
            RangeChecksum(
                index=index,
                first_id=chunk[0] if chunk else "",
                last_id=chunk[-1] if chunk else "",
                source_rows=len(chunk),
                dest_rows=len(dkeys),
                source_digest=_digest_keys(chunk, source),
                dest_digest=_digest_keys(dkeys, dest),
            )
        )
    return out


def _digest_keys(keys: list[str], digests: dict[str, str]) -> str:
    h = hashlib.sha256()
    for key in keys:
        h.update(key.encode())
        h.update(digests[key].encode())
    return h.hexdigest()


def drill_down(
    ranges: list[RangeChecksum], source: dict[str, str], dest: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """Missing, extra and changed ids -- looked for only inside mismatching ranges."""
    missing: list[str] = []
    extra: list[str] = []
    changed: list[str] = []
    lows = [r.first_id for r in ranges]
    bad = {r.index for r in ranges if not r.ok}

    def range_of(key: str) -> int:
        return max(bisect.bisect_right(lows, key) - 1, 0)

    for key, digest in source.items():
        if range_of(key) not in bad:
            continue
        other = dest.get(key)
        if other is None:
            missing.append(key)
        elif other != digest:
            changed.append(key)
    extra = [key for key in dest if key not in source and range_of(key) in bad]
    return sorted(missing), sorted(extra), sorted(changed)


def vector_stats(conn: psycopg.Connection[Any], table: str, owner: str) -> dict[str, Any]:
    """Declared dimension, and of ``owner``'s rows: per-row dimensions, model ids, null/zero/NaN
    counts; the table's ANN index."""
    from memwork.pgvector.schema import table_dimensions

    t = f"{quote_identifier(table)} AS d"
    own = f"{owner_sql('d')} = %s"
    dims = dict(
        conn.execute(
            f"SELECT vector_dims(embedding)::text, count(*) FROM {t} "
            f"WHERE embedding IS NOT NULL AND {own} GROUP BY 1 ORDER BY 1",
            (owner,),
        ).fetchall()
    )
    models = dict(
        conn.execute(
            f"SELECT coalesce(embedding_model, '(none)'), count(*) FROM {t} WHERE {own} "
            "GROUP BY 1 ORDER BY 1",
            (owner,),
        ).fetchall()
    )
    counts = conn.execute(
        f"SELECT count(*) FILTER (WHERE embedding IS NULL), "
        f"count(*) FILTER (WHERE vector_norm(embedding) = 0), "
        f"count(*) FILTER (WHERE vector_norm(embedding) = 'NaN'::float8 "
        f"OR vector_norm(embedding) = 'Infinity'::float8) FROM {t} WHERE {own}",
        (owner,),
    ).fetchone()
    assert counts is not None  # an aggregate without GROUP BY returns one row
    null_count, zero_count, nan_count = counts
    index = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef ~* 'using (hnsw|ivfflat)'",
        (table,),
    ).fetchone()
    return {
        "declared_dimensions": table_dimensions(conn, table) or None,
        "dimensions": {str(k): int(v) for k, v in dims.items()},
        "models": {str(k): int(v) for k, v in models.items()},
        "null_vectors": int(null_count),
        "zero_vectors": int(zero_count),
        "nan_vectors": int(nan_count),
        "vector_index": index[0] if index else None,
    }


def distance_operator(index_def: str | None) -> str:
    """The pgvector operator the ANN index serves (cosine unless the index says otherwise)."""
    text = (index_def or "").lower()
    if "vector_l2_ops" in text:
        return "<->"
    if "vector_ip_ops" in text:
        return "<#>"
    return "<=>"


def sample_rows(
    conn: psycopg.Connection[Any], table: str, n: int, seed: int, dims: int | None, owner: str
) -> list[tuple]:
    """A reproducible sample of ``owner``'s rows (id, source id, user, content, embedding) with usable
    vectors."""
    if n <= 0:
        return []
    t = quote_identifier(table)
    where = f"embedding IS NOT NULL AND vector_norm(embedding) > 0 AND {owner_sql('d')} = %s"
    if dims:
        where += f" AND vector_dims(embedding) = {int(dims)}"
    ids = [r[0] for r in conn.execute(f"SELECT id FROM {t} AS d WHERE {where}", (owner,)).fetchall()]
    chosen = random.Random(seed).sample(ids, min(n, len(ids)))
    if not chosen:
        return []
    return conn.execute(
        f"SELECT id, source_memory_id, user_id, content, embedding FROM {t} WHERE id = ANY(%s) ORDER BY id",
        (chosen,),
    ).fetchall()


def dims_filter(dims: int | None, mixed: bool) -> str:
    """Only rows of the query's dimension when the table holds several (pgvector errors otherwise)."""
    return f" AND vector_dims(embedding) = {int(dims)}" if dims and mixed else ""


def ann_recall(
    conn: psycopg.Connection[Any], table: str, samples: list[tuple], k: int, op: str, dims_filter: str = ""
) -> float | None:
    """Mean overlap of the index's top k with exact (sequential-scan) top k over sampled queries."""
    if not samples:
        return None
    t = quote_identifier(table)
    sql = f"SELECT id FROM {t} WHERE embedding IS NOT NULL{dims_filter} ORDER BY embedding {op} %s LIMIT %s"
    hits = 0
    total = 0
    for sample in samples:
        query = sample[4]
        with conn.transaction():
            ann = {r[0] for r in conn.execute(sql, (query, k)).fetchall()}
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            exact = {r[0] for r in conn.execute(sql, (query, k)).fetchall()}
        hits += len(ann & exact)
        total += len(exact)
    return hits / total if total else None


def self_retrieval(
    conn: psycopg.Connection[Any],
    table: str,
    samples: list[tuple],
    k: int,
    op: str,
    embedder: Embedder,
    dims_filter: str = "",
) -> float:
    """Share of sampled memories whose own text, embedded again, finds them in the user's top k."""
    if not samples:
        return 0.0
    t = quote_identifier(table)
    sql = f"SELECT id FROM {t} WHERE user_id = %s{dims_filter} ORDER BY embedding {op} %s LIMIT %s"
    vectors = embedder.embed([s[3] for s in samples])
    found = 0
    for sample, vector in zip(samples, vectors, strict=True):
        ids = [r[0] for r in conn.execute(sql, (sample[2], np.asarray(vector, dtype=np.float32), k))]
        found += sample[0] in ids
    return found / len(samples)


def embedder_for(spec: Embedder | str | None, models: dict[str, int]) -> tuple[Embedder | None, str | None]:
    """The embedder for self-retrieval: given, or derived from a single ``hash-N`` model id."""
    if spec is not None and not isinstance(spec, str):
        return spec, None
    if isinstance(spec, str) and spec.strip():
        return load_embedder(spec), None
    real = [m for m in models if m != "(none)"]
    if len(real) == 1 and real[0].startswith("hash-") and real[0][5:].isdigit():
        return load_embedder(f"hash:{real[0][5:]}"), None
    if len(real) == 1:
        try:
            return load_embedder(real[0]), None
        except UsageError:
            pass
    return None, "self-retrieval skipped: no embedder given and none derivable from the model ids"


def quarantined_rows(
    source: dict[str, str], dest: dict[str, str], rejects: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rejects whose source row is active and not faithfully in the destination (id order).

    A reject for a row that is gone from the source, or that the destination now holds as it is,
    is stale and not listed."""
    if not rejects:
        return []
    out = []
    for key in sorted(source):
        reject = rejects.get(printable(key))
        if reject is None or dest.get(key) == source[key]:
            continue
        out.append({**reject, "sourceId": key, "inDestination": key in dest})
    return out


def counts_text(rows_by_key: dict[str, int], prefix: str = "") -> str:
    """{'3': 1, '16': 99} -> '3: 1 row, 16: 99 rows' (reasons are read by people, not parsed)."""
    return ", ".join(f"{prefix}{k}: {n} row{'s' if n != 1 else ''}" for k, n in rows_by_key.items())


def _ids(ids: list[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (" …" if len(ids) > n else "")
