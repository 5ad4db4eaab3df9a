"""Vectors: the right model, the right text, the right index.

* :func:`check_labels` (one owner's rows, in SQL) -- every vector's dimension is the model's
  (``wrong-dimension``), every row's ``embedding_model`` is the configured one (``other-model``), no
  vector is NULL, all zero or NaN (``null-vector``, ``zero-vector``, ``nan-vector``); users whose
  rows come from two model ids are listed (``mixed-models``).
* :func:`check_source_vectors` (when the migration kept the source's vectors) -- each stored vector
  and model id is the source record's (``source-vector``, ``other-model``).
* :func:`check_embeddings` (a sample plus the keys the row comparison flagged, or every row) -- each
  stored vector equals the recorded model's embedding of the stored content: exact within
  :data:`~memwork.certify.canonical.VECTOR_ATOL` for the hash embedder, cosine >= 0.999 for a real
  model. A vector that is not is named ``swapped`` (another row of the table holds this row's
  embedding: the pair is named), ``stale`` (close to the embedding of the content, cosine >=
  :data:`STALE_COSINE`, but not it: the same model on an earlier version of the text), or
  ``other-model`` (not close: another model's vector under this row's model id).
* :func:`check_index` -- pgvector's version, the ANN index's type and operator class against the
  distance the resolve query orders by (``<=>``, cosine: an L2 or inner-product index is a failure),
  and the HNSW settings (``m``, ``ef_construction``, ``hnsw.ef_search`` >= k).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.certify.canonical import EXACT_COSINE, MODEL_COSINE, VECTOR_ATOL
from memwork.embed import Embedder
from memwork.identifiers import quote_identifier

if TYPE_CHECKING:
    import psycopg

STALE_COSINE = 0.5
RESOLVE_OPERATOR = "<=>"  #: memwork.backends.pgvector orders by cosine distance
COSINE_OPCLASSES = ("vector_cosine_ops", "halfvec_cosine_ops")
MIN_ITERATIVE_SCAN = (0, 8, 0)  #: the hnsw search path sets hnsw.iterative_scan (pgvector 0.8)
MAX_LISTED = 1000
#: every kind a bad vector can have, and ``mixed-models`` (users with two model ids): the names a
#: tolerance (``max_<kind>``) may use for the vectors gate
VECTOR_KINDS = (
    "wrong-dimension",
    "other-model",
    "null-vector",
    "zero-vector",
    "nan-vector",
    "source-vector",
    "swapped",
    "stale",
    "mixed-models",
)


@dataclass
class VectorFinding:
    """One bad vector: key, kind, and what was measured."""

    key: str
    kind: str
    user: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VectorReport:
    findings: list[VectorFinding] = field(default_factory=list)
    models: dict[str, int] = field(default_factory=dict)
    dimensions: dict[str, int] = field(default_factory=dict)
    mixed_model_users: list[str] = field(default_factory=list)
    checked: int = 0
    index: dict[str, Any] = field(default_factory=dict)
    index_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _exact(embedder: Embedder) -> bool:
    return embedder.model_id.startswith("hash-")


def _owned(owner: str | None, alias: str = "d") -> tuple[str, list[Any]]:
    """``AND <the row is owner's>`` (nothing for the whole table) and its parameters."""
    from memwork.migrate.ownership import owner_sql

    return ("", []) if owner is None else (f" AND {owner_sql(alias)} = %s", [owner])


def check_labels(
    conn: psycopg.Connection[Any],
    table: str,
    model_id: str | None,
    dimensions: int,
    report: VectorReport,
    *,
    owner: str | None = None,
) -> None:
    """``owner``'s rows (None: the whole table), in SQL: dimensions, model ids (``model_id`` None: each
    row's model is checked against its source's instead), null/zero/NaN vectors, users with two model
    ids."""
    t = f"{quote_identifier(table)} AS d"
    own, params = _owned(owner)
    where = "WHERE TRUE" + own
    report.dimensions = {
        str(d): int(n)
        for d, n in conn.execute(
            f"SELECT vector_dims(embedding), count(*) FROM {t} {where} GROUP BY 1 ORDER BY 1", params
        )
    }
    report.models = {
        str(m): int(n)
        for m, n in conn.execute(
            f"SELECT coalesce(embedding_model, '(none)'), count(*) FROM {t} {where} GROUP BY 1 ORDER BY 1",
            params,
        )
    }
    for key, user, dims in conn.execute(
        f"SELECT source_memory_id, user_id, vector_dims(embedding) FROM {t} "
        f"WHERE vector_dims(embedding) <> %s{own} ORDER BY 1 LIMIT {MAX_LISTED}",
        (dimensions, *params),
    ):
        report.findings.append(
            VectorFinding(
                str(key), "wrong-dimension", user, {"dimensions": {"expected": dimensions, "dest": dims}}
            )
        )
    if model_id is not None:
        for key, user, model in conn.execute(
            f"SELECT source_memory_id, user_id, embedding_model FROM {t} "
            f"WHERE embedding_model IS DISTINCT FROM %s{own} ORDER BY 1 LIMIT {MAX_LISTED}",
            (model_id, *params),
        ):
            report.findings.append(
                VectorFinding(
                    str(key), "other-model", user, {"embedding_model": {"expected": model_id, "dest": model}}
                )
            )
    unusable = (
        "CASE WHEN embedding IS NULL THEN 'null-vector' WHEN vector_norm(embedding) = 0 THEN 'zero-vector' "
        "WHEN vector_norm(embedding) IN ('NaN'::float8, 'Infinity'::float8) THEN 'nan-vector' END"
    )
    for key, user, kind in conn.execute(
        f"SELECT source_memory_id, user_id, k FROM (SELECT source_memory_id, user_id, {unusable} AS k "
        f"FROM {t} {where}) x WHERE k IS NOT NULL ORDER BY 1 LIMIT {MAX_LISTED}",
        params,
    ):
        report.findings.append(VectorFinding(str(key), str(kind), user, {"vector": {"dest": kind}}))
    report.mixed_model_users = [
        str(u)
        for (u,) in conn.execute(
            f"SELECT user_id FROM {t} {where} GROUP BY user_id "
            "HAVING count(DISTINCT coalesce(embedding_model, '')) > 1 ORDER BY 1",
            params,
        )
    ]


def check_source_vectors(
    conn: psycopg.Connection[Any],
    table: str,
    pages: Iterable[list[Any]],
    source_name: str,
    keys: set[str] | None,
    report: VectorReport,
    *,
    owner: str | None = None,
) -> None:
    """Vectors the migration kept from the source: each stored vector is the source record's (within
    :data:`~memwork.certify.canonical.VECTOR_ATOL`, else ``source-vector``) under the model id the
    source names (else ``other-model``). Streamed a page of records at a time against the same keys'
    destination rows; ``keys`` limits it to a sample (None: every record)."""
    from memwork.migrate.rows import model_of

    t = f"{quote_identifier(table)} AS d"
    own, params = _owned(owner)
    for records in pages:
        wanted = {
            str(r.id): r
            for r in records
            if getattr(r, "vector", None) is not None and (keys is None or str(r.id) in keys)
        }
        if not wanted:
            continue
        rows = conn.execute(
            f"SELECT source_memory_id, user_id, embedding_model, embedding FROM {t} "
            f"WHERE source_memory_id = ANY(%s){own}",
            (sorted(wanted), *params),
        ).fetchall()
        for key, user, model, embedding in rows:
            record = wanted[str(key)]
            report.checked += 1
            expected_model = model_of(record, source_name)
            if model != expected_model:
                fields = {"embedding_model": {"source": expected_model, "dest": model}}
                report.findings.append(VectorFinding(str(key), "other-model", user, fields))
                continue
            try:
                want = np.asarray(record.vector, dtype=np.float32)
            except (TypeError, ValueError):
                continue  # the importer quarantined it; the rows gate names it
            got = as_array(embedding) if embedding is not None else None
            if got is None or got.shape != want.shape:
                continue  # named by check_labels
            if not np.allclose(got, want, atol=VECTOR_ATOL):
                fields = {"vector": {"cosine_to_source_vector": _cosine(got, want)}}
                report.findings.append(VectorFinding(str(key), "source-vector", user, fields))


def check_embeddings(
    conn: psycopg.Connection[Any],
    table: str,
    embedder: Embedder,
    keys: list[str] | None,
    report: VectorReport,
    *,
    batch: int = 512,
    owner: str | None = None,
) -> None:
    """Each listed key's (``None``: every row's of ``owner``) stored vector against the model's
    embedding of its content.

    Only rows with the model's dimension and model id and a usable vector are compared (the others --
    another dimension or model, NULL or all zero -- are already named, once)."""
    t = quote_identifier(table)
    own, owned = _owned(owner, t)
    where = (
        "embedding IS NOT NULL AND vector_norm(embedding) > 0 AND vector_dims(embedding) = %s "
        "AND embedding_model = %s" + own
    )
    params: list[Any] = [embedder.dimension, embedder.model_id, *owned]
    if keys is not None:
        where += " AND source_memory_id = ANY(%s)"
        params.append(sorted(set(keys)))
    threshold = EXACT_COSINE if _exact(embedder) else MODEL_COSINE
    bad: list[tuple[str, str, str, np.ndarray, float]] = []
    with conn.transaction(), conn.cursor(name="mw_certify_vectors") as cur:
        cur.itersize = batch
        cur.execute(
            f"SELECT source_memory_id, user_id, content, embedding FROM {t} WHERE {where} ORDER BY 1",
            params,
        )
        while rows := cur.fetchmany(batch):
            stored = [as_array(r[3]) for r in rows]
            expected = embedder.embed([str(r[2]) for r in rows])
            report.checked += len(rows)
            for row, got, want in zip(rows, stored, expected, strict=True):
                cosine = _cosine(got, want)
                if got.shape != want.shape:
                    continue  # named by check_labels
                exact = bool(np.allclose(got, want, atol=VECTOR_ATOL))
                same = exact if _exact(embedder) else cosine >= threshold
                if not same:
                    bad.append((str(row[0]), str(row[1]), str(row[2]), want, cosine))
    for key, user, content, want, cosine in bad:
        partner = _holder_of(conn, t, want, key, content, threshold)
        if partner is not None:
            kind, fields = "swapped", {"vector": {"holder_of_this_rows_embedding": partner, "cosine": cosine}}
        elif cosine >= STALE_COSINE:
            kind, fields = "stale", {"vector": {"cosine_to_content_embedding": cosine}}
        else:
            kind, fields = "other-model", {"vector": {"cosine_to_content_embedding": cosine}}
        report.findings.append(VectorFinding(key, kind, user, fields))


def as_array(value: Any) -> np.ndarray:
    """A stored vector (pgvector's ``Vector`` in binary mode, an array in text mode) as float32."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return round(float(np.dot(a, b)) / denom, 6) if denom else 0.0


def _holder_of(
    conn: psycopg.Connection[Any], t: str, vector: np.ndarray, key: str, content: str, threshold: float
) -> str | None:
    """Another row, of other content, whose stored vector is ``vector`` (exact scan), if any."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        row = conn.execute(
            f"SELECT source_memory_id, embedding <=> %s FROM {t} WHERE vector_dims(embedding) = %s "
            "AND source_memory_id <> %s AND content <> %s ORDER BY embedding <=> %s LIMIT 1",
            (vector, len(vector), key, content, vector),
        ).fetchone()
    if row is None or row[1] is None or 1.0 - float(row[1]) < threshold:
        return None
    return str(row[0])


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_index(
    conn: psycopg.Connection[Any], table: str, k: int, ef_search: int, report: VectorReport
) -> None:
    """Extension version, ANN index type/opclass vs the resolve query's distance, HNSW settings."""
    version, indexes = read_index_catalog(conn, table)
    report.index = judge_index(version, indexes, k, ef_search, report)


def read_index_catalog(conn: psycopg.Connection[Any], table: str) -> tuple[str | None, list[tuple[Any, ...]]]:
    """pgvector's installed version and ``table``'s ANN indexes (name, method, opclass, options) as
    the catalog holds them -- read apart from :func:`judge_index` so a recorded catalog (another
    server's, an older pgvector's) can be judged the same way."""
    version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    indexes = conn.execute(
        "SELECT i.relname, am.amname, opc.opcname, coalesce(i.reloptions, '{}') FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am am ON am.oid = i.relam "
        "JOIN pg_opclass opc ON opc.oid = x.indclass[0] "
        "WHERE x.indrelid = to_regclass(%s) AND am.amname IN ('hnsw', 'ivfflat') ORDER BY 1",
        (quote_identifier(table),),
    ).fetchall()
    return (None if version is None else str(version[0])), [tuple(i) for i in indexes]


def judge_index(
    version: str | None, indexes: list[tuple[Any, ...]], k: int, ef_search: int, report: VectorReport
) -> dict[str, Any]:
    """The index problems of a catalog (:func:`read_index_catalog`) into ``report``; returns what
    was read, for the certificate."""
    info: dict[str, Any] = {
        "pgvector": version,
        "resolve_operator": RESOLVE_OPERATOR,
        "ef_search": ef_search,
        "indexes": [],
    }
    for name, method, opclass, options in indexes:
        settings = dict(o.split("=", 1) for o in options)
        entry = {"name": name, "type": method, "opclass": opclass, "settings": settings}
        if method == "hnsw":
            entry["settings"] = {
                "m": int(settings.get("m", 16)),
                "ef_construction": int(settings.get("ef_construction", 64)),
            }
        info["indexes"].append(entry)
        if opclass not in COSINE_OPCLASSES:
            report.index_problems.append(
                f"opclass: index {name} ({method}, {opclass}) does not serve the resolve query's cosine "
                f"distance ({RESOLVE_OPERATOR}): searches by cosine never use it"
            )
        if method == "hnsw":
            if ef_search < k:
                report.index_problems.append(f"hnsw: ef_search {ef_search} below k {k}: answers underfill")
            if version and _version(version) < MIN_ITERATIVE_SCAN:
                report.index_problems.append(
                    f"pgvector: version {version} has no iterative scan (the hnsw search path needs 0.8)"
                )
    if version is None:
        report.index_problems.append("pgvector: the vector extension is not installed")
    if not indexes:
        report.notes.append("index: no ANN index; every search is exact")
    return info
