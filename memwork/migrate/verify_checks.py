"""Backfill verification: is ``memory_embeddings`` a faithful, searchable copy of the legacy items?

Checks, each a reason for FAIL when it does not hold:

* counts -- source active items vs destination distinct ``source_memory_id``; missing and extra ids;
* quarantine -- rows the backfill could not write (``memwork_backfill_rejects``) are listed with
  their reason, never counted as "missing" or "changed"; they make the verdict FAIL unless
  ``allow_quarantined`` accepts them;
* content -- per key-range checksums of (id, user_id, content, type) on both sides, compared range
  by range like pt-table-checksum compares a replica; a mismatching range is drilled into row by row,
  so a *changed* row is named, not only a missing one;
* vectors -- declared and actual dimensions, model ids (mixed models flagged), null, zero and NaN;
* retrieval -- ANN recall@k against exact search on sampled queries, and self-retrieval: each sampled
  memory's own text, embedded again, finds it among the user's top k.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.checks import both_or_neither, dimension, unit
from memwork.embed import Embedder, load_embedder
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.backfill import REJECTS_TABLE, printable, read_rejects

if TYPE_CHECKING:
    import pandas as pd
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
class VerifyOptions:
    """What to verify and how strictly."""

    source_url: str
    dest_url: str
    table: str = "memory_embeddings"
    expected_dimensions: int | None = None
    expected_model: str | None = None
    embedder: Embedder | str | None = None  # for self-retrieval; default: derived from the model id
    sample_size: int = 50
    k: int = 10
    range_size: int = 1000
    min_recall: float = 0.9
    min_self_retrieval: float = 0.9
    seed: int = 0
    allow_quarantined: bool = False  # quarantined rows are listed either way; True: not a FAIL

    def check(self) -> None:
        """Reject impossible settings up front (:func:`run_from_parameters`, so the notebook, calls this)."""
        if not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise UsageError("k", self.k, "must be an integer from 1 to 1000")
        if not isinstance(self.sample_size, int) or not 0 <= self.sample_size <= 100_000:
            raise UsageError("sample_size", self.sample_size, "must be an integer from 0 to 100000")
        if not isinstance(self.range_size, int) or self.range_size < 1:
            raise UsageError("range_size", self.range_size, "must be a positive integer")
        if self.expected_dimensions is not None:
            dimension("expected_dimensions", self.expected_dimensions)
        for name in ("min_recall", "min_self_retrieval"):
            unit(name, getattr(self, name))
        quote_identifier(self.table)


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


@dataclass
class VerificationResult:
    """Everything measured, the verdict and every reason for it."""

    source_active: int = 0
    dest_rows: int = 0
    dest_distinct: int = 0
    missing_ids: list[str] = field(default_factory=list)
    extra_ids: list[str] = field(default_factory=list)
    changed_ids: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    changed_count: int = 0
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # id, reason, ... (first 50)
    quarantined_count: int = 0
    quarantined_missing: int = 0  # quarantined and absent from the destination (not "missing")
    ranges: list[RangeChecksum] = field(default_factory=list)
    declared_dimensions: int | None = None
    dimensions: dict[str, int] = field(default_factory=dict)  # "384" -> rows
    models: dict[str, int] = field(default_factory=dict)
    null_vectors: int = 0
    zero_vectors: int = 0
    nan_vectors: int = 0
    vector_index: str | None = None
    recall_at_k: float | None = None
    self_retrieval: float | None = None
    retrieval_queries: int = 0
    k: int = 10
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "FAIL" if self.reasons else "PASS"

    @property
    def mismatched_ranges(self) -> list[RangeChecksum]:
        return [r for r in self.ranges if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ranges"] = {
            "total": len(self.ranges),
            "mismatched": [asdict(r) for r in self.mismatched_ranges][:MAX_LISTED_IDS],
        }
        data["verdict"] = self.verdict
        return data

    def ranges_frame(self) -> pd.DataFrame:
        """The range checksums as a pandas DataFrame (for the notebook)."""
        import pandas as pd

        rows = [{**asdict(r), "ok": r.ok} for r in self.ranges]
        return pd.DataFrame(rows, columns=[*RangeChecksum.__dataclass_fields__, "ok"])


def row_digest(values: Iterable[Any]) -> str:
    """SHA-256 of one row's compared fields (None and '' kept distinct)."""
    text = _SEP.join("\x00" if v is None else str(v) for v in values)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_source_digests(url: str) -> dict[str, str]:
    """id -> row digest of every *active* legacy item, streamed."""
    from sqlalchemy import select

    from memwork.db import get_engine
    from memwork.legacy.schema import memory_items as t

    query = select(t.c.id, t.c.user_id, t.c.content, t.c.type).where(t.c.status == "active")
    digests: dict[str, str] = {}
    with get_engine(url).connect() as conn:
        for row in conn.execution_options(yield_per=5000).execute(query):
            digests[str(row[0])] = row_digest(row)
    return digests


def read_dest_digests(conn: psycopg.Connection[Any], table: str) -> tuple[dict[str, str], int]:
    """source_memory_id -> row digest in the destination, and its total row count."""
    digests: dict[str, str] = {}
    total = 0
    sql = f"SELECT source_memory_id, user_id, content, type FROM {quote_identifier(table)}"
    with conn.cursor(name="mw_verify_digests") as cur:
        cur.itersize = 5000
        cur.execute(sql)
        for row in cur:
            total += 1
            if row[0] is not None:
                digests[str(row[0])] = row_digest(row)
    return digests, total


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


def vector_stats(conn: psycopg.Connection[Any], table: str) -> dict[str, Any]:
    """Declared dimension, per-row dimensions, model ids, null/zero/NaN counts, ANN index."""
    from memwork.pgvector.schema import table_dimensions

    t = quote_identifier(table)
    dims = dict(
        conn.execute(
            f"SELECT vector_dims(embedding)::text, count(*) FROM {t} "
            "WHERE embedding IS NOT NULL GROUP BY 1 ORDER BY 1"
        ).fetchall()
    )
    models = dict(
        conn.execute(
            f"SELECT coalesce(embedding_model, '(none)'), count(*) FROM {t} GROUP BY 1 ORDER BY 1"
        ).fetchall()
    )
    counts = conn.execute(
        f"SELECT count(*) FILTER (WHERE embedding IS NULL), "
        f"count(*) FILTER (WHERE vector_norm(embedding) = 0), "
        f"count(*) FILTER (WHERE vector_norm(embedding) = 'NaN'::float8 "
        f"OR vector_norm(embedding) = 'Infinity'::float8) FROM {t}"
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


def _sample_rows(
    conn: psycopg.Connection[Any], table: str, n: int, seed: int, dims: int | None
) -> list[tuple]:
    """A reproducible sample of rows (id, source id, user, content, embedding) with usable vectors."""
    if n <= 0:
        return []
    t = quote_identifier(table)
    where = "embedding IS NOT NULL AND vector_norm(embedding) > 0"
    if dims:
        where += f" AND vector_dims(embedding) = {int(dims)}"
    ids = [r[0] for r in conn.execute(f"SELECT id FROM {t} WHERE {where}").fetchall()]
    chosen = random.Random(seed).sample(ids, min(n, len(ids)))
    if not chosen:
        return []
    return conn.execute(
        f"SELECT id, source_memory_id, user_id, content, embedding FROM {t} WHERE id = ANY(%s) ORDER BY id",
        (chosen,),
    ).fetchall()


def _dims_filter(dims: int | None, mixed: bool) -> str:
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


def verify_backfill(options: VerifyOptions) -> VerificationResult:
    """Run every check and collect every reason for FAIL (never stops at the first)."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect

    options.check()
    result = VerificationResult(k=options.k)
    with _timed(result, "source"):
        source = read_source_digests(options.source_url)
    with pg_connect(options.dest_url, autocommit=True) as conn:
        register_vector(conn)
        with _timed(result, "destination"), conn.transaction():
            dest, result.dest_rows = read_dest_digests(conn, options.table)
            rejects = {r["id"]: r for r in read_rejects(conn, options.table)}
        with _timed(result, "checksums"):
            source, dest = _set_quarantined_apart(result, source, dest, rejects, options.allow_quarantined)
            _compare_content(result, source, dest, options.range_size)
        with _timed(result, "vectors"):
            _check_vectors(result, conn, options)
        with _timed(result, "retrieval"):
            _check_retrieval(result, conn, options)
    return result


class _timed:
    """Context manager that adds a phase's wall time to ``result.timings``."""

    def __init__(self, result: VerificationResult, phase: str) -> None:
        self.result, self.phase = result, phase

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.result.timings[self.phase] = round(time.perf_counter() - self.start, 3)


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


def _set_quarantined_apart(
    result: VerificationResult,
    source: dict[str, str],
    dest: dict[str, str],
    rejects: dict[str, dict[str, Any]],
    allow: bool,
) -> tuple[dict[str, str], dict[str, str]]:
    """List the quarantined rows and return source and destination without them for the checks."""
    result.source_active, result.dest_distinct = len(source), len(dest)
    rows = quarantined_rows(source, dest, rejects)
    if not rows:
        return source, dest
    result.quarantined_count = len(rows)
    result.quarantined_missing = sum(not row["inDestination"] for row in rows)
    result.quarantined = [{k: v for k, v in row.items() if k != "sourceId"} for row in rows[:MAX_LISTED_IDS]]
    examples = ", ".join(f"{row['id']} ({row['reason']})" for row in rows[:2])
    line = (
        f"quarantined: {len(rows)} row(s) the backfill could not write (in {REJECTS_TABLE}), "
        f"e.g. {examples}{' …' if len(rows) > 2 else ''}"
    )
    (result.notes if allow else result.reasons).append(line)
    apart = {row["sourceId"] for row in rows}
    return (
        {k: v for k, v in source.items() if k not in apart},
        {k: v for k, v in dest.items() if k not in apart},
    )


def _compare_content(result: VerificationResult, source: dict, dest: dict, range_size: int) -> None:
    """Counts, checksums and drill-down on ``source``/``dest`` (quarantined rows already set apart:
    ``result.source_active``/``dest_distinct`` keep the full counts)."""
    result.ranges = range_checksums(source, dest, range_size)
    missing, extra, changed = drill_down(result.ranges, source, dest)
    result.missing_count, result.extra_count, result.changed_count = len(missing), len(extra), len(changed)
    result.missing_ids = missing[:MAX_LISTED_IDS]
    result.extra_ids = extra[:MAX_LISTED_IDS]
    result.changed_ids = changed[:MAX_LISTED_IDS]
    if len(source) != len(dest):
        quarantined = f" ({result.quarantined_count} quarantined)" if result.quarantined_count else ""
        result.reasons.append(
            f"count: {result.source_active} active source items{quarantined} but {result.dest_distinct} "
            "distinct source_memory_id in the destination"
        )
    if result.dest_rows != result.dest_distinct:
        result.reasons.append(
            f"count: {result.dest_rows - result.dest_distinct} destination rows lack a source id"
        )
    if missing:
        result.reasons.append(f"missing: {len(missing)} id(s) not in the destination, e.g. {_ids(missing)}")
    if extra:
        result.reasons.append(
            f"extra: {len(extra)} destination id(s) not active in the source, e.g. {_ids(extra)}"
        )
    if changed:
        result.reasons.append(f"changed: {len(changed)} row(s) differ from the source, e.g. {_ids(changed)}")
    bad = len(result.mismatched_ranges)
    if bad:
        result.reasons.append(f"checksum: {bad} of {len(result.ranges)} key range(s) differ")


def _counts(rows_by_key: dict[str, int], prefix: str = "") -> str:
    """{'3': 1, '16': 99} -> '3: 1 row, 16: 99 rows' (reasons are read by people, not parsed)."""
    return ", ".join(f"{prefix}{k}: {n} row{'s' if n != 1 else ''}" for k, n in rows_by_key.items())


def _ids(ids: list[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (" …" if len(ids) > n else "")


def _check_vectors(result: VerificationResult, conn: psycopg.Connection[Any], options: VerifyOptions) -> None:
    stats = vector_stats(conn, options.table)
    for key, value in stats.items():
        setattr(result, key, value)
    expected = options.expected_dimensions or result.declared_dimensions
    if options.expected_dimensions and result.declared_dimensions not in (None, options.expected_dimensions):
        result.reasons.append(
            f"dimensions: column is vector({result.declared_dimensions}), "
            f"expected {options.expected_dimensions}"
        )
    wrong = {d: n for d, n in result.dimensions.items() if expected and int(d) != int(expected)}
    if wrong:
        result.reasons.append(
            f"dimensions: {sum(wrong.values())} vector(s) not of dimension {expected} "
            f"({_counts(wrong, 'dimension ')})"
        )
    real_models = [m for m in result.models if m != "(none)"]
    if len(result.models) > 1:
        result.reasons.append(f"models: mixed embedding models ({_counts(result.models)})")
    if options.expected_model and real_models and real_models != [options.expected_model]:
        result.reasons.append(
            f"models: expected only {options.expected_model}, found {', '.join(real_models)}"
        )
    for name in ("null_vectors", "zero_vectors", "nan_vectors"):
        if getattr(result, name):
            result.reasons.append(f"vectors: {getattr(result, name)} {name.replace('_', ' ')}")


def _check_retrieval(
    result: VerificationResult, conn: psycopg.Connection[Any], options: VerifyOptions
) -> None:
    expected = options.expected_dimensions or result.declared_dimensions
    if not expected and len(result.dimensions) == 1:
        expected = int(next(iter(result.dimensions)))
    samples = _sample_rows(conn, options.table, options.sample_size, options.seed, expected)
    result.retrieval_queries = len(samples)
    if not samples:
        result.notes.append("retrieval: no usable vectors to sample")
        return
    op = distance_operator(result.vector_index)
    if result.vector_index is None:
        result.notes.append(
            "recall: no ANN index on the table; searches are exact, recall is 1 by definition"
        )
    dims_filter = _dims_filter(expected, len(result.dimensions) > 1)
    result.recall_at_k = ann_recall(conn, options.table, samples, options.k, op, dims_filter)
    if result.recall_at_k is not None and result.recall_at_k < options.min_recall:
        result.reasons.append(
            f"recall: ANN recall@{options.k} {result.recall_at_k:.3f} below {options.min_recall}"
        )
    embedder, note = embedder_for(options.embedder, result.models)
    if embedder is None:
        result.notes.append(note or "self-retrieval skipped")
        return
    if expected and embedder.dimension != int(expected):
        result.reasons.append(
            f"self-retrieval: embedder {embedder.model_id} makes {embedder.dimension}-dim vectors, "
            f"table has {expected}"
        )
        return
    result.self_retrieval = self_retrieval(conn, options.table, samples, options.k, op, embedder, dims_filter)
    if result.self_retrieval < options.min_self_retrieval:
        result.reasons.append(
            f"self-retrieval: {result.self_retrieval:.3f} of sampled memories found in their "
            f"top {options.k}, "
            f"below {options.min_self_retrieval}"
        )


def run_from_parameters(
    *,
    source_url: str = "",
    pgvector_url: str = "",
    table: str = "memory_embeddings",
    expected_dimensions: int = 0,
    expected_model: str = "",
    embedder: str = "",
    sample_size: int = 50,
    k: int = 10,
    range_size: int = 1000,
    min_recall: float = 0.9,
    min_self_retrieval: float = 0.9,
    allow_quarantined: bool = False,
) -> VerificationResult:
    """The backfill_verification notebook's one call: its parameters as declared (empty text and 0
    mean "not given"), checked by :meth:`VerifyOptions.check` (:class:`UsageError` before any
    database is touched), then :func:`verify_backfill`.

    With neither URL a small sample migration is built first (so the notebook runs standalone);
    the result's notes say so. Giving only one of the two URLs is a usage error.
    """
    both_or_neither("source_url", source_url, "pgvector_url", pgvector_url)
    options = VerifyOptions(
        source_url,
        pgvector_url,
        table=table,
        expected_dimensions=expected_dimensions or None,
        expected_model=expected_model or None,
        embedder=embedder or None,
        sample_size=sample_size,
        k=k,
        range_size=range_size,
        min_recall=min_recall,
        min_self_retrieval=min_self_retrieval,
        allow_quarantined=allow_quarantined,
    )
    options.check()
    built = None
    if not source_url:
        from memwork.samples.migration import build_migration  # the standalone default only

        built = build_migration()
        options.source_url, options.dest_url, options.table = built.source_url, built.dest_url, built.table
    result = verify_backfill(options)
    if built is not None:
        result.notes.insert(0, f"built a sample migration: {built.active} active items -> {built.dest_url}")
    return result
