"""Import verification: is the destination a faithful copy of *one source*? (the backfill's checks,
generalised from MySQL to any :class:`~memwork.contracts.Source`).

The source is read to the end again; the destination is restricted to the rows that source wrote
(``metadata._memworkSource = source.key``), so other sources and the MySQL backfill sharing the table
never count as "extra". Checks, each a reason for FAIL naming the first few ids or users:

* count and users -- rows on both sides, and every user whose count differs;
* missing / extra / changed -- key-range checksums of (id, user_id, content, type) with the backfill's
  :func:`~memwork.migrate.verify_checks.range_checksums` and :func:`~memwork.migrate.verify_checks.drill_down`;
* quarantined -- rows the import could not write (``memwork_backfill_rejects``), listed with their
  reason, FAIL unless ``allow_quarantined``;
* vectors -- when the import kept the source's vectors: every stored vector's dimension and model
  are the source's, and its values are (a changed vector is named); when it re-embedded: one model
  and the table's dimension throughout.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.contracts import Source
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.checkpoint import read_import_checkpoint
from memwork.migrate.rows import SOURCE_MARKER
from memwork.migrate.run import (
    DEFAULT_PAGE_SIZE,
    ImportOptions,
    destination_url,
    resolve_source,
    stored_key,
)
from memwork.migrate.source import iter_pages
from memwork.migrate.backfill_options import MAX_BATCH_SIZE
from memwork.migrate.quarantine import REJECTS_TABLE, read_rejects
from memwork.pgvector.schema import DEFAULT_TABLE, table_dimensions
from memwork.migrate.verify_checks import MAX_LISTED_IDS, drill_down, quarantined_rows, range_checksums, row_digest
from memwork.redaction import redact_url

if TYPE_CHECKING:
    import psycopg


@dataclass
class ImportVerifyOptions:
    """What to verify: the same ``source``/``env``/``database_url``/``table`` the import was given."""

    source: str | Source
    env: Mapping[str, str] = field(default_factory=dict)
    database_url: str | None = None
    table: str = DEFAULT_TABLE
    page_size: int = DEFAULT_PAGE_SIZE
    range_size: int = 1000
    allow_quarantined: bool = False

    def check(self) -> None:
        check_identifier(self.table)
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int):
            raise UsageError("page_size", self.page_size, "must be an integer")
        if not 1 <= self.page_size <= MAX_BATCH_SIZE:
            raise UsageError("page_size", self.page_size, f"must be from 1 to {MAX_BATCH_SIZE}")
        if isinstance(self.range_size, bool) or not isinstance(self.range_size, int) or self.range_size < 1:
            raise UsageError("range_size", self.range_size, "must be a positive integer")


@dataclass
class ImportVerification:
    """Everything measured, the verdict and every reason for it."""

    source: str = ""
    source_key: str = ""
    table: str = DEFAULT_TABLE
    source_rows: int = 0
    dest_rows: int = 0
    source_users: int = 0
    dest_users: int = 0
    users_differing: list[dict[str, Any]] = field(default_factory=list)  # user, source, destination
    missing_ids: list[str] = field(default_factory=list)
    extra_ids: list[str] = field(default_factory=list)
    changed_ids: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    changed_count: int = 0
    ranges_total: int = 0
    ranges_mismatched: int = 0
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    quarantined_count: int = 0
    vectors: str | None = None  # keep / reembed, as the import did
    declared_dimensions: int | None = None
    dimensions: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)
    changed_vector_ids: list[str] = field(default_factory=list)
    changed_vector_count: int = 0
    wrong_model_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "FAIL" if self.reasons else "PASS"

    def to_dict(self) -> dict[str, Any]:
        data = {_camel(k): v for k, v in asdict(self).items()}
        data["verdict"] = self.verdict
        return data


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


def verify_import(options: ImportVerifyOptions) -> ImportVerification:
    """Read the source to the end and this source's destination rows; collect every reason for FAIL."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect

    options.check()
    url = destination_url(ImportOptions(source="-", env=options.env, database_url=options.database_url))
    source = resolve_source(options.source, options.env)
    key = stored_key(source)
    result = ImportVerification(source=source.name, source_key=key, table=options.table)
    try:
        src = read_source_side(source, options.page_size)
    finally:
        source.close()
    with pg_connect(url, autocommit=True) as pg:
        declared = table_dimensions(pg, options.table)
        if declared is None:
            raise UsageError("table", options.table, f"does not exist in {redact_url(url)}")
        register_vector(pg)
        checkpoint = read_import_checkpoint(pg, options.table, key)
        with pg.transaction():
            dest = read_dest_side(pg, options.table, key)
            rejects = {r["id"]: r for r in read_rejects(pg, options.table)}
    result.declared_dimensions = declared or None
    result.vectors = checkpoint.vectors if checkpoint and checkpoint.vectors else _guess_mode(src)
    if checkpoint is None:
        result.notes.append("no import checkpoint for this source in this table")
    _compare(result, src, dest, rejects, options)
    _check_vectors(result, src, dest, checkpoint.model if checkpoint else None)
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
    """Every record of the source (the last one wins for a repeated id, as in the import)."""
    side = _Side()
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
    return side


def read_dest_side(pg: psycopg.Connection[Any], table: str, source_key: str) -> _Side:
    """The destination rows this source wrote (by ``metadata._memworkSource``), streamed."""
    side = _Side()
    sql = (
        "SELECT source_memory_id, user_id, content, type, embedding_model, embedding "
        f"FROM {quote_identifier(table)} WHERE metadata->>%s = %s"
    )
    with pg.cursor(name="mw_import_verify") as cur:
        cur.itersize = 2000
        cur.execute(sql, (SOURCE_MARKER, source_key))
        for key, user, content, kind, model, embedding in cur:
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
    result: ImportVerification,
    src: _Side,
    dest: _Side,
    rejects: dict[str, dict[str, Any]],
    options: ImportVerifyOptions,
) -> None:
    result.source_rows, result.dest_rows = len(src.digests), len(dest.digests)
    source, target = src.digests, dest.digests
    rows = quarantined_rows(source, target, rejects)
    apart = {row["sourceId"] for row in rows}
    if rows:
        result.quarantined_count = len(rows)
        result.quarantined = [{k: v for k, v in r.items() if k != "sourceId"} for r in rows[:MAX_LISTED_IDS]]
        examples = ", ".join(f"{row['id']} ({row['reason']})" for row in rows[:2])
        line = (
            f"quarantined: {len(rows)} row(s) the import could not write (in {REJECTS_TABLE}), "
            f"e.g. {examples}{' …' if len(rows) > 2 else ''}"
        )
        (result.notes if options.allow_quarantined else result.reasons).append(line)
        source = {k: v for k, v in source.items() if k not in apart}
        target = {k: v for k, v in target.items() if k not in apart}
    _compare_users(result, src, dest, apart)
    ranges = range_checksums(source, target, options.range_size)
    missing, extra, changed = drill_down(ranges, source, target)
    result.ranges_total = len(ranges)
    result.ranges_mismatched = sum(not r.ok for r in ranges)
    result.missing_count, result.extra_count, result.changed_count = len(missing), len(extra), len(changed)
    result.missing_ids = missing[:MAX_LISTED_IDS]
    result.extra_ids = extra[:MAX_LISTED_IDS]
    result.changed_ids = changed[:MAX_LISTED_IDS]
    if len(source) != len(target):
        result.reasons.append(
            f"count: {result.source_rows} source records but {result.dest_rows} destination rows "
            f"of this source{f' ({len(apart)} quarantined)' if apart else ''}"
        )
    if missing:
        result.reasons.append(f"missing: {len(missing)} id(s) not in the destination, e.g. {_ids(missing)}")
    if extra:
        result.reasons.append(f"extra: {len(extra)} destination id(s) not in the source, e.g. {_ids(extra)}")
    if changed:
        result.reasons.append(f"changed: {len(changed)} row(s) differ from the source, e.g. {_ids(changed)}")
    if result.ranges_mismatched:
        result.reasons.append(f"checksum: {result.ranges_mismatched} of {len(ranges)} key range(s) differ")


def _compare_users(result: ImportVerification, src: _Side, dest: _Side, apart: set[str]) -> None:
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


def _check_vectors(result: ImportVerification, src: _Side, dest: _Side, import_model: str | None) -> None:
    result.dimensions = {str(k): n for k, n in sorted(Counter(dest.dims.values()).items())}
    result.models = dict(sorted(Counter(dest.models.values()).items()))
    declared = result.declared_dimensions
    wrong_dims = sorted(k for k, d in dest.dims.items() if declared and d != declared)
    if wrong_dims:
        result.reasons.append(
            f"dimensions: {len(wrong_dims)} vector(s) not of dimension {declared}, e.g. {_ids(wrong_dims)}"
        )
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
        wrong_model = [k for k in shared if expected is None or dest.models.get(k) != expected]
        changed = []
        result.notes.append(f"vectors re-embedded by {expected or '(unknown model)'}: values not compared")
    result.wrong_model_ids = wrong_model[:MAX_LISTED_IDS]
    result.changed_vector_count = len(changed)
    result.changed_vector_ids = changed[:MAX_LISTED_IDS]
    if wrong_model:
        result.reasons.append(
            f"models: {len(wrong_model)} row(s) whose embedding model is not the "
            f"{'source' if result.vectors == 'keep' else 'import'}'s, e.g. {_ids(wrong_model)}"
        )
    if changed:
        result.reasons.append(
            f"vectors: {len(changed)} vector(s) differ from the source's, e.g. {_ids(changed)}"
        )


def _ids(ids: list[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (" …" if len(ids) > n else "")
