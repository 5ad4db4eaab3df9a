"""The one verification of a migration: is the destination a faithful, searchable copy of *one source*?

Every source goes through it -- the legacy table (``legacy-mysql``, what ``memwork backfill`` wrote)
like Qdrant or a plugin's. The source is read to the end again, through the source (its fast row path
when it has one); the destination is restricted to the rows that source owns
(:func:`memwork.migrate.ownership.owner_of`), so other sources sharing the table never count as
"extra", and only this source's rejects count as its quarantine. Checks, each a reason for FAIL naming
the first few ids or users (every reason starts with one of :data:`CHECKS`):

* count and users -- rows on both sides, and every user whose count differs;
* missing / extra / changed / checksum -- key-range checksums of (id, user_id, content, type) and
  their drill-down (:mod:`memwork.migrate.verify_checks`);
* quarantined -- rows the migration could not write (``memwork_backfill_rejects``), listed with their
  reason, FAIL unless ``allow_quarantined``;
* dimensions, models, vectors -- the destination's: declared and actual dimensions, model ids, null,
  zero and NaN vectors; when the migration kept the source's vectors, every stored vector's model and
  values are the source's; when it re-embedded, one model throughout;
* recall, self-retrieval -- ANN recall@k against exact search on sampled rows of this source, and
  each sampled memory's own text, embedded again, found among its user's top k.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.checks import both_or_neither, dimension, unit
from memwork.contracts import Source
from memwork.embed import Embedder
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.checkpoint import read_import_checkpoint
from memwork.migrate.legacy_mysql import MYSQL_URL_ENV
from memwork.migrate.legacy_mysql import SOURCE_NAME as LEGACY_SOURCE
from memwork.migrate.ownership import owner_of, owner_sql
from memwork.migrate.quarantine import REJECTS_TABLE, read_rejects
from memwork.migrate.run import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ImportOptions,
    destination_url,
    environment,
    resolve_source,
    stored_key,
)
from memwork.migrate.source import iter_pages
from memwork.migrate.verify_checks import (
    MAX_LISTED_IDS,
    RangeChecksum,
    ann_recall,
    counts_text,
    dims_filter,
    distance_operator,
    drill_down,
    embedder_for,
    quarantined_rows,
    range_checksums,
    row_digest,
    sample_rows,
    self_retrieval,
    vector_stats,
)
from memwork.pgvector.schema import EMBEDDINGS_TABLE, table_dimensions
from memwork.redaction import redact_url

if TYPE_CHECKING:
    import pandas as pd
    import psycopg

#: every check a FAIL reason can name: each reason starts with ``<check>: `` (the notebook asserts it)
CHECKS = (
    "count", "users", "quarantined", "missing", "extra", "changed", "checksum",
    "dimensions", "models", "vectors", "recall", "self-retrieval", "retrieval",
)  # fmt: skip


@dataclass
class VerifyOptions:
    """What to verify and how strictly: the same ``source``/``env``/``database_url``/``table`` the
    migration was given, and the destination checks' settings."""

    source: str | Source
    env: Mapping[str, str] = field(default_factory=dict)
    database_url: str | None = None
    table: str = EMBEDDINGS_TABLE
    page_size: int = DEFAULT_PAGE_SIZE
    range_size: int = 1000
    allow_quarantined: bool = False  # quarantined rows are listed either way; True: not a FAIL
    expected_dimensions: int | None = None
    expected_model: str | None = None
    embedder: Embedder | str | None = None  # for self-retrieval; default: derived from the model id
    sample_size: int = 50
    k: int = 10
    min_recall: float = 0.9
    min_self_retrieval: float = 0.9
    seed: int = 0

    def check(self) -> None:
        """Every impossible setting as one usage error naming it, before any I/O."""
        check_identifier(self.table)
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int):
            raise UsageError("page_size", self.page_size, "must be an integer")
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise UsageError("page_size", self.page_size, f"must be from 1 to {MAX_PAGE_SIZE}")
        if isinstance(self.range_size, bool) or not isinstance(self.range_size, int) or self.range_size < 1:
            raise UsageError("range_size", self.range_size, "must be a positive integer")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise UsageError("k", self.k, "must be an integer from 1 to 1000")
        if not isinstance(self.sample_size, int) or not 0 <= self.sample_size <= 100_000:
            raise UsageError("sample_size", self.sample_size, "must be an integer from 0 to 100000")
        if self.expected_dimensions is not None:
            dimension("expected_dimensions", self.expected_dimensions)
        for name in ("min_recall", "min_self_retrieval"):
            unit(name, getattr(self, name))


@dataclass
class Verification:
    """Everything measured, the verdict and every reason for it; ``to_dict`` is the ``--json`` output."""

    source: str = ""
    source_key: str = ""
    table: str = EMBEDDINGS_TABLE
    source_rows: int = 0
    dest_rows: int = 0  # this source's destination rows
    dest_distinct: int = 0  # ... with distinct, non-null source ids
    source_users: int = 0
    dest_users: int = 0
    users_differing: list[dict[str, Any]] = field(default_factory=list)  # user, source, destination
    missing_ids: list[str] = field(default_factory=list)
    extra_ids: list[str] = field(default_factory=list)
    changed_ids: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    changed_count: int = 0
    ranges: list[RangeChecksum] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # id, reason, ... (first 50)
    quarantined_count: int = 0
    quarantined_missing: int = 0  # quarantined and absent from the destination (not "missing")
    vectors: str | None = None  # keep / reembed, as the migration did
    declared_dimensions: int | None = None
    dimensions: dict[str, int] = field(default_factory=dict)  # "384" -> rows
    models: dict[str, int] = field(default_factory=dict)
    null_vectors: int = 0
    zero_vectors: int = 0
    nan_vectors: int = 0
    changed_vector_ids: list[str] = field(default_factory=list)
    changed_vector_count: int = 0
    wrong_model_ids: list[str] = field(default_factory=list)
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

    @property
    def ranges_total(self) -> int:
        return len(self.ranges)

    @property
    def ranges_mismatched(self) -> int:
        return len(self.mismatched_ranges)

    def to_dict(self) -> dict[str, Any]:
        data = {_camel(k): v for k, v in asdict(self).items()}
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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass
class _Side:
    """One side's rows: id -> digest and user; with vectors, id -> vector digest, model, dimension."""

    digests: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    vector_digests: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    rows: int = 0


class _timed:
    """Context manager that adds a phase's wall time to ``result.timings``."""

    def __init__(self, result: Verification, phase: str) -> None:
        self.result, self.phase = result, phase

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.result.timings[self.phase] = round(time.perf_counter() - self.start, 3)


def verify(options: VerifyOptions) -> Verification:
    """Read the source to the end and this source's destination rows; collect every reason for FAIL
    (never stops at the first)."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect

    options.check()
    url = destination_url(ImportOptions(source="-", env=options.env, database_url=options.database_url))
    source = resolve_source(options.source, options.env)
    key = stored_key(source)
    owner = owner_of(source.name, key)
    result = Verification(source=source.name, source_key=key, table=options.table, k=options.k)
    try:
        with _timed(result, "source"):
            src = read_source_side(source, options.page_size)
    finally:
        source.close()
    with pg_connect(url, autocommit=True) as pg:
        declared = table_dimensions(pg, options.table)
        if declared is None:
            raise UsageError("table", options.table, f"does not exist in {redact_url(url)}")
        register_vector(pg)
        checkpoint = read_import_checkpoint(pg, options.table, key)
        with _timed(result, "destination"), pg.transaction():
            dest = read_dest_side(pg, options.table, owner)
            rejects = {r["id"]: r for r in read_rejects(pg, options.table, owner)}
        result.declared_dimensions = declared or None
        result.vectors = checkpoint.vectors if checkpoint and checkpoint.vectors else _guess_mode(src)
        if checkpoint is None:
            result.notes.append("no migration checkpoint for this source in this table")
        with _timed(result, "checksums"):
            _compare(result, src, dest, rejects, options)
        with _timed(result, "vectors"):
            _check_vector_stats(result, pg, options, owner)
            _check_kept_vectors(result, src, dest, checkpoint.model if checkpoint else None)
        with _timed(result, "retrieval"):
            _check_retrieval(result, pg, options, owner)
    return result


def _guess_mode(src: _Side) -> str:
    return "keep" if src.vector_digests else "reembed"


def vector_digest(vector: Any) -> str:
    """SHA-256 of the vector as float32 (pgvector stores float4, so a faithful copy digests the same)."""
    return hashlib.sha256(np.asarray(vector, dtype=np.float32).tobytes()).hexdigest()


def _as_array(embedding: Any) -> np.ndarray:
    """pgvector's value as numpy (text and binary transfers hand back different types)."""
    to_numpy = getattr(embedding, "to_numpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) else embedding, dtype=np.float32)


def read_source_side(source: Source, page_size: int) -> _Side:
    """Every record of the source (the last one wins for a repeated id, as in the migration); a
    source with a fast row path is read through it (its rows carry no vectors)."""
    side = _Side()
    if callable(getattr(source, "read_rows", None)):
        for page, _cursor in iter_pages(source, None, page_size, rows=True):
            for row in page.rows:
                key, user = str(row["id"]), str(row["user_id"])
                side.digests[key] = row_digest((key, user, row["content"], row["type"] or "fact"))
                side.users[key] = user
        side.rows = len(side.digests)
        return side
    for page, _cursor in iter_pages(source, None, page_size):
        for record in page.records:
            key, user = str(record.id), str(record.user_id)
            side.digests[key] = row_digest((key, user, record.content, record.type or "fact"))
            side.users[key] = user
            if record.vector is not None:
                side.vector_digests[key] = vector_digest(record.vector)
                side.models[key] = record.model or f"{source.name}:unknown"
                side.dims[key] = len(record.vector)
            else:
                for part in (side.vector_digests, side.models, side.dims):
                    part.pop(key, None)
    side.rows = len(side.digests)
    return side


def read_dest_side(pg: psycopg.Connection[Any], table: str, owner: str) -> _Side:
    """The destination rows ``owner`` owns, streamed (``rows`` counts those without a source id too)."""
    side = _Side()
    sql = (
        "SELECT source_memory_id, user_id, content, type, embedding_model, embedding "
        f"FROM {quote_identifier(table)} AS d WHERE {owner_sql('d')} = %s"
    )
    with pg.cursor(name="mw_verify") as cur:
        cur.itersize = 2000
        cur.execute(sql, (owner,))
        for key, user, content, kind, model, embedding in cur:
            side.rows += 1
            if key is None:
                continue
            key = str(key)
            side.digests[key] = row_digest((key, user, content, kind))
            side.users[key] = str(user)
            side.models[key] = model or "(none)"
            if embedding is not None:
                values = _as_array(embedding)
                side.vector_digests[key] = vector_digest(values)
                side.dims[key] = int(values.shape[0])
    return side


def _compare(
    result: Verification,
    src: _Side,
    dest: _Side,
    rejects: dict[str, dict[str, Any]],
    options: VerifyOptions,
) -> None:
    result.source_rows, result.dest_rows, result.dest_distinct = (
        len(src.digests),
        dest.rows,
        len(dest.digests),
    )
    source, target = src.digests, dest.digests
    rows = quarantined_rows(source, target, rejects)
    apart = {row["sourceId"] for row in rows}
    if rows:
        result.quarantined_count = len(rows)
        result.quarantined_missing = sum(not row["inDestination"] for row in rows)
        result.quarantined = [{k: v for k, v in r.items() if k != "sourceId"} for r in rows[:MAX_LISTED_IDS]]
        examples = ", ".join(f"{row['id']} ({row['reason']})" for row in rows[:2])
        line = (
            f"quarantined: {len(rows)} row(s) the migration could not write (in {REJECTS_TABLE}), "
            f"e.g. {examples}{' …' if len(rows) > 2 else ''}"
        )
        (result.notes if options.allow_quarantined else result.reasons).append(line)
        source = {k: v for k, v in source.items() if k not in apart}
        target = {k: v for k, v in target.items() if k not in apart}
    _compare_users(result, src, dest, apart)
    result.ranges = range_checksums(source, target, options.range_size)
    missing, extra, changed = drill_down(result.ranges, source, target)
    result.missing_count, result.extra_count, result.changed_count = len(missing), len(extra), len(changed)
    result.missing_ids = missing[:MAX_LISTED_IDS]
    result.extra_ids = extra[:MAX_LISTED_IDS]
    result.changed_ids = changed[:MAX_LISTED_IDS]
    if len(source) != len(target):
        result.reasons.append(
            f"count: {result.source_rows} source records but {result.dest_distinct} destination rows "
            f"of this source{f' ({len(apart)} quarantined)' if apart else ''}"
        )
    if result.dest_rows != result.dest_distinct:
        result.reasons.append(
            f"count: {result.dest_rows - result.dest_distinct} destination rows lack a source id"
        )
    if missing:
        result.reasons.append(f"missing: {len(missing)} id(s) not in the destination, e.g. {_ids(missing)}")
    if extra:
        result.reasons.append(f"extra: {len(extra)} destination id(s) not in the source, e.g. {_ids(extra)}")
    if changed:
        result.reasons.append(f"changed: {len(changed)} row(s) differ from the source, e.g. {_ids(changed)}")
    bad = len(result.mismatched_ranges)
    if bad:
        result.reasons.append(f"checksum: {bad} of {len(result.ranges)} key range(s) differ")


def _compare_users(result: Verification, src: _Side, dest: _Side, apart: set[str]) -> None:
    by_source = Counter(user for key, user in src.users.items() if key not in apart)
    by_dest = Counter(user for key, user in dest.users.items() if key not in apart)
    result.source_users, result.dest_users = len(by_source), len(by_dest)
    differing = sorted(u for u in set(by_source) | set(by_dest) if by_source[u] != by_dest[u])
    result.users_differing = [
        {"user": u, "source": by_source[u], "destination": by_dest[u]} for u in differing[:MAX_LISTED_IDS]
    ]
    if differing:
        shown = ", ".join(f"{u!r}: source {by_source[u]}, destination {by_dest[u]}" for u in differing[:3])
        more = " …" if len(differing) > 3 else ""
        result.reasons.append(f"users: {len(differing)} user(s) whose counts differ, e.g. {shown}{more}")


def _check_vector_stats(
    result: Verification, conn: psycopg.Connection[Any], options: VerifyOptions, owner: str
) -> None:
    """Dimensions, model ids and null/zero/NaN vectors of this source's rows."""
    stats = vector_stats(conn, options.table, owner)
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
            f"({counts_text(wrong, 'dimension ')})"
        )
    real_models = [m for m in result.models if m != "(none)"]
    if len(result.models) > 1 and result.vectors != "keep":  # kept vectors: each row's is the source's
        result.reasons.append(f"models: mixed embedding models ({counts_text(result.models)})")
    if options.expected_model and real_models and real_models != [options.expected_model]:
        result.reasons.append(
            f"models: expected only {options.expected_model}, found {', '.join(real_models)}"
        )
    for name in ("null_vectors", "zero_vectors", "nan_vectors"):
        if getattr(result, name):
            result.reasons.append(f"vectors: {getattr(result, name)} {name.replace('_', ' ')}")


def _check_kept_vectors(result: Verification, src: _Side, dest: _Side, import_model: str | None) -> None:
    """Kept vectors: each row's model and values are the source's; re-embedded: the migration's model."""
    shared = sorted(set(src.digests) & set(dest.digests))
    if result.vectors == "keep":
        wrong_model = [k for k in shared if k in src.models and dest.models.get(k) != src.models[k]]
        changed = [
            k
            for k in shared
            if k in src.vector_digests and dest.vector_digests.get(k) != src.vector_digests[k]
        ]
    else:
        expected = import_model or (next(iter(result.models)) if len(result.models) == 1 else None)
        wrong_model = [k for k in shared if expected is not None and dest.models.get(k) != expected]
        changed = []
        result.notes.append(f"vectors re-embedded by {expected or '(unknown model)'}: values not compared")
    result.wrong_model_ids = wrong_model[:MAX_LISTED_IDS]
    result.changed_vector_count = len(changed)
    result.changed_vector_ids = changed[:MAX_LISTED_IDS]
    if wrong_model:
        result.reasons.append(
            f"models: {len(wrong_model)} row(s) whose embedding model is not the "
            f"{'source' if result.vectors == 'keep' else 'migration'}'s, e.g. {_ids(wrong_model)}"
        )
    if changed:
        result.reasons.append(
            f"vectors: {len(changed)} vector(s) differ from the source's, e.g. {_ids(changed)}"
        )


def _check_retrieval(
    result: Verification, conn: psycopg.Connection[Any], options: VerifyOptions, owner: str
) -> None:
    """ANN recall@k and self-retrieval on a sample of this source's rows."""
    expected = options.expected_dimensions or result.declared_dimensions
    if not expected and len(result.dimensions) == 1:
        expected = int(next(iter(result.dimensions)))
    samples = sample_rows(conn, options.table, options.sample_size, options.seed, expected, owner)
    result.retrieval_queries = len(samples)
    if not samples:
        result.notes.append("retrieval: no usable vectors to sample")
        return
    op = distance_operator(result.vector_index)
    if result.vector_index is None:
        result.notes.append(
            "recall: no ANN index on the table; searches are exact, recall is 1 by definition"
        )
    only = dims_filter(expected, len(result.dimensions) > 1)
    result.recall_at_k = ann_recall(conn, options.table, samples, options.k, op, only)
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
    result.self_retrieval = self_retrieval(conn, options.table, samples, options.k, op, embedder, only)
    if result.self_retrieval < options.min_self_retrieval:
        result.reasons.append(
            f"self-retrieval: {result.self_retrieval:.3f} of sampled memories found in their "
            f"top {options.k}, below {options.min_self_retrieval}"
        )


def _ids(ids: list[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (" …" if len(ids) > n else "")


# ---- the backfill_verification notebook's one call -------------------------------------------------


@dataclass
class VerifyParameters:
    """The ``backfill_verification`` notebook's parameters as declared (empty text and 0 mean "not
    given"); :func:`verify_from_parameters` checks them before any database is touched."""

    source: str = LEGACY_SOURCE
    source_url: str = ""
    pgvector_url: str = ""
    table: str = "memory_embeddings"
    expected_dimensions: int = 0
    expected_model: str = ""
    embedder: str = ""
    sample_size: int = 50
    k: int = 10
    range_size: int = 1000
    min_recall: float = 0.9
    min_self_retrieval: float = 0.9
    allow_quarantined: bool = False


#: builds a sample legacy migration: ``() -> object`` with ``source_url``, ``dest_url``, ``table``, ``active``
SampleMigration = Callable[[], Any]


def verify_from_parameters(
    parameters: VerifyParameters, *, sample_migration: SampleMigration | None = None
) -> Verification:
    """:func:`verify` of the notebook's parameters. ``source_url`` is the legacy table's database
    (``MEMORY_BACKFILL_MYSQL_URL``) for ``legacy-mysql``; any other source reads its variables from
    the environment. With neither URL, ``sample_migration`` (the samples' builder, handed in by the
    notebook) builds one first, and the result's notes say so. Giving only one URL is a usage error."""
    p = parameters
    both_or_neither("source_url", p.source_url, "pgvector_url", p.pgvector_url)
    overrides = {MYSQL_URL_ENV: p.source_url} if p.source_url and p.source == LEGACY_SOURCE else {}
    options = VerifyOptions(
        source=p.source,
        env=environment(overrides),
        database_url=p.pgvector_url or None,
        table=p.table,
        expected_dimensions=p.expected_dimensions or None,
        expected_model=p.expected_model or None,
        embedder=p.embedder or None,
        sample_size=p.sample_size,
        k=p.k,
        range_size=p.range_size,
        min_recall=p.min_recall,
        min_self_retrieval=p.min_self_retrieval,
        allow_quarantined=p.allow_quarantined,
    )
    options.check()
    built = None
    if not p.source_url and sample_migration is not None and p.source == LEGACY_SOURCE:
        built = sample_migration()
        options.env = environment({MYSQL_URL_ENV: built.source_url})
        options.database_url, options.table = built.dest_url, built.table
    result = verify(options)
    if built is not None:
        result.notes.insert(0, f"built a sample migration: {built.active} active items -> {built.dest_url}")
    return result
