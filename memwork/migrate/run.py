"""The import run: every page of a source -> the pgvector backfill's checkpointed, idempotent writer.

Dry run by default: the source is read to the end (never a silent first page) and counted -- rows per
user, per model and vector dimension, pages, a sample -- and nothing is written anywhere (PostgreSQL
is not even opened, except a read of the checkpoint when ``resume`` asks where a resume would start).

``apply=True`` writes each page through :func:`memwork.migrate.writer.write_batch` (binary
COPY into a staging table, one ``INSERT ... ON CONFLICT (source_memory_id)``, poison rows quarantined
in ``memwork_backfill_rejects``) with the import's own checkpoint -- the source's opaque cursor,
keyed by (destination table, the source key) in ``memwork_import_checkpoints`` -- committed in the
same transaction as the page. A process killed at any moment committed a page with its checkpoint or
neither; ``resume`` continues from the last committed cursor.

What a row keeps: the source id (``source_memory_id``), ``user_id`` exactly as given (no case or
whitespace folding: ``TenantX`` and ``tenantx`` stay two users), ``session_id`` ->
``source_session_id``, ``message_id`` -> ``source_message_id``, the agent id in
``metadata._memworkAgentId``, the source's metadata plus ``metadata._memworkSource`` = the source key
(verification selects one source's rows by it), type, and timestamps (a missing ``created_at`` or
``updated_at`` becomes the run's start time; ``updated_at`` defaults to ``created_at`` when only that
is given).

Vectors: ``keep`` stores the source's vectors with their model id (``<source>:unknown`` when the
source does not name it); the first page's dimension must be the table's (refused before anything is
written), a single odd row (other dimension, no vector, NaN) is quarantined. ``reembed`` embeds
``content`` with the given embedder. ``auto`` keeps when the first page carries vectors, else needs an
embedder.

A source id already in the table from *another* source (or from the MySQL backfill) is quarantined,
never overwritten: the writer checks the owner in the upsert itself
(:mod:`memwork.migrate.ownership`), so a run racing another source's cannot take its rows.
The report counts them in ``owned_elsewhere`` (the CLI then exits 3).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwork.contracts import Source, SourceRecord
from memwork.embed import Embedder, load_embedder, load_module
from memwork.errors import UsageError
from memwork.identifiers import check_identifier
from memwork.migrate.checkpoint import (
    ImportCheckpoint,
    ensure_import_checkpoint_table,
    read_import_checkpoint,
    store_import_checkpoint,
)
from memwork.migrate.lock import import_lock
from memwork.migrate.rows import (
    convert_page,
    kept_vectors,
    model_of,
    vector_length,
)
from memwork.migrate.source import iter_pages
from memwork.migrate.backfill_options import MAX_BATCH_SIZE
from memwork.migrate.ownership import check_source_key, owned_elsewhere_count
from memwork.migrate.quarantine import (
    MAX_LISTED_REJECTS,
    REJECTS_TABLE,
    Reject,
    RowEmbedder,
    count_rejects,
    probe_embedder,
)
from memwork.pgvector.schema import DEFAULT_TABLE, schema_sql, table_dimensions
from memwork.plugins import open_source
from memwork.progress import Progress
from memwork.redaction import redact_text, redact_url

if TYPE_CHECKING:
    import psycopg

PG_URL_ENV = "MEMORY_PGVECTOR_DATABASE_URL"
DEFAULT_DESTINATION = "pg://embedded"
DEFAULT_PAGE_SIZE = 200
VECTOR_MODES = ("auto", "keep", "reembed")


@dataclass
class ImportOptions:
    """What one import does. ``source`` is a registry name, ``module:PATH`` (a module or ``.py`` file
    exporting ``source_from_env(env)``), or a :class:`Source` instance; ``env`` holds the source's
    variables (``MEMORY_QDRANT_URL``, ...). ``database_url`` None: ``MEMORY_PGVECTOR_DATABASE_URL``
    from ``env``, else the embedded PostgreSQL."""

    source: str | Source
    env: Mapping[str, str] = field(default_factory=dict)
    database_url: str | None = None
    table: str = DEFAULT_TABLE
    apply: bool = False
    resume: bool = False
    page_size: int = DEFAULT_PAGE_SIZE
    limit: int | None = None
    vectors: str = "auto"
    embedder: Embedder | str | None = None
    create_schema: bool = False
    sample_size: int = 5

    def validate(self) -> None:
        """Every input problem as one usage error naming the field and value, before any I/O."""
        check_identifier(self.table)
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int):
            raise UsageError("page_size", self.page_size, "must be an integer")
        if not 1 <= self.page_size <= MAX_BATCH_SIZE:
            raise UsageError("page_size", self.page_size, f"must be from 1 to {MAX_BATCH_SIZE}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise UsageError("limit", self.limit, "must be a positive integer")
        if self.vectors not in VECTOR_MODES:
            raise UsageError("vectors", self.vectors, f"must be one of {', '.join(VECTOR_MODES)}")
        if self.vectors == "reembed" and self.embedder is None:
            raise UsageError(
                "embedder", None, "--vectors reembed needs --embedder SPEC (hash:DIM, minilm, ...)"
            )
        if self.vectors == "keep" and self.embedder is not None:
            raise UsageError(
                "embedder", _spec_of(self.embedder), "--vectors keep stores the source's vectors; drop it"
            )
        if isinstance(self.source, str) and not self.source.strip():
            raise UsageError("from", self.source, "must name a source")
        if self.apply or self.resume:
            destination_url(self)  # a malformed or non-PostgreSQL URL is bad input, found now


def _spec_of(embedder: Embedder | str) -> str:
    return embedder if isinstance(embedder, str) else embedder.model_id


def destination_url(options: ImportOptions) -> str:
    """``--to``, else ``MEMORY_PGVECTOR_DATABASE_URL``, else ``pg://embedded``; PostgreSQL only."""
    from memwork.db import parse_url

    url = (options.database_url or options.env.get(PG_URL_ENV) or "").strip() or DEFAULT_DESTINATION
    try:
        dialect = parse_url(url).dialect
    except UsageError as exc:
        raise UsageError("to", redact_url(url), str(exc)) from None
    if dialect != "postgresql":
        raise UsageError(
            "to", redact_url(url), "must be a PostgreSQL URL (postgresql://... or pg://embedded)"
        )
    return url


def stored_key(source: Source) -> str:
    """The source's key as stored (checkpoint, row marker, lock): URL passwords redacted, in case a
    source puts a URL with credentials into it -- a key never needs the secret to be unique."""
    return redact_text(source.key)


def resolve_source(spec: str | Source, env: Mapping[str, str]) -> Source:
    """A Source instance as it is; ``module:PATH`` loaded and its ``source_from_env(env)`` called;
    else the registry's source of that name (:func:`memwork.plugins.open_source`)."""
    if not isinstance(spec, str):
        return spec
    name = spec.strip()
    if name.startswith("module:"):
        module = load_module(name[len("module:") :], field="from")
        factory = getattr(module, "source_from_env", None)
        if not callable(factory):
            raise UsageError("from", name, "the module has no source_from_env(env)")
        source: Source = factory(env)
        return source
    return open_source(name, env)


@dataclass
class ImportReport:
    """What a run did (or, dry, would do); ``to_dict`` is the ``--json`` output (camelCase keys).

    ``users``, ``models`` and ``vector_dimensions`` count the records *read* in this run (the
    source's own model ids); ``model``/``dimensions`` are what was written (the source's model when
    vectors are kept, the embedder's when re-embedded); ``checkpoint`` holds the running totals."""

    mode: str
    source: str
    source_key: str
    table: str
    destination: str | None = None
    vectors: str | None = None
    model: str | None = None
    dimensions: int | None = None
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    owned_elsewhere: int = 0  # of rows_quarantined: ids another source owns in the table (not overwritten)
    duplicates: int = 0
    pages: int = 0
    users: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)
    vector_dimensions: dict[str, int] = field(default_factory=dict)
    sample: list[dict[str, Any]] = field(default_factory=list)
    resumed: bool = False
    start_cursor: str | None = None
    checkpoint: dict[str, Any] | None = None
    quarantined: list[dict[str, str]] = field(default_factory=list)
    rejects_table: str | None = None
    run_id: str | None = None
    elapsed_seconds: float = 0.0
    rows_per_second: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def run_import(options: ImportOptions, progress: Progress | None = None) -> ImportReport:
    """Dry run (source only) or apply (source -> PostgreSQL), per ``options.apply``."""
    options.validate()
    source = resolve_source(options.source, options.env)
    try:
        check_source_key(stored_key(source))
        if options.apply:
            return _apply(options, source, progress)
        return _dry_run(options, source, progress)
    finally:
        source.close()


def _new_report(mode: str, options: ImportOptions, source: Source) -> ImportReport:
    return ImportReport(mode=mode, source=source.name, source_key=stored_key(source), table=options.table)


def _dry_run(options: ImportOptions, source: Source, progress: Progress | None) -> ImportReport:
    report = _new_report("dry-run", options, source)
    embedder = _checked(options.embedder)  # a bad --embedder is bad input in a dry run too
    started = time.perf_counter()
    start: str | None = None
    if options.resume:
        from memwork.db import pg_connect

        url = destination_url(options)
        report.destination = redact_url(url)
        with pg_connect(url, autocommit=True) as pg:
            found = read_import_checkpoint(pg, options.table, stored_key(source))
        start = found.resume_cursor if found else None
        report.resumed = found is not None
    report.start_cursor = start
    if progress is not None:
        progress.start("import (dry run)", options.limit)
    first_vectors: bool | None = None
    kept_dimensions: int | None = None
    now = datetime.now(UTC)
    for page, _read_cursor in iter_pages(source, start, options.page_size):
        records = _within_limit(page.records, options.limit, report.rows_read)
        if records and first_vectors is None:
            first_vectors = any(_vector_of(r) is not None for r in records)
            if _planned_mode(options, first_vectors) == "keep":
                kept_dimensions = _common_dimension(records)
        _count_page(report, records, options.sample_size)
        _note_written(report, 0, _screened(options, source, records, now, kept_dimensions))
        if progress is not None:
            progress.advance(len(records))
        if options.limit is not None and report.rows_read >= options.limit:
            break
    report.vectors = _planned_vectors(options, first_vectors, report)
    if report.vectors == "reembed" and embedder is not None:
        report.notes.append(
            "the dry run does not embed: a row the embedder fails on is quarantined by --apply only"
        )
    _finish_timing(report, started, report.rows_read)
    return report


def _screened(
    options: ImportOptions,
    source: Source,
    records: list[SourceRecord],
    now: datetime,
    kept_dimensions: int | None,
) -> list[Reject]:
    """What the apply would quarantine of this page before any PostgreSQL or embedder is involved:
    the same :func:`convert_page` and, when vectors are kept, the same vector checks."""
    pairs, rejects = convert_page(records, stored_key(source), now)
    if kept_dimensions is not None:
        by_id = {row["id"]: record for row, record in pairs}
        _, _, odd = kept_vectors(
            [row for row, _ in pairs], by_id, kept_dimensions, source.name, options.table
        )
        rejects += odd
    return rejects


def _planned_mode(options: ImportOptions, has_vectors: bool) -> str:
    return options.vectors if options.vectors != "auto" else ("keep" if has_vectors else "reembed")


def _vector_of(record: object) -> object:
    return getattr(record, "vector", None)


def _common_dimension(records: list[SourceRecord]) -> int | None:
    """The most common vector length of a page (the table's dimension when vectors are kept)."""
    dims = Counter(n for n in (vector_length(_vector_of(r)) for r in records) if n is not None)
    return dims.most_common(1)[0][0] if dims else None


def _planned_vectors(options: ImportOptions, has_vectors: bool | None, report: ImportReport) -> str:
    if options.vectors != "auto":
        return options.vectors
    if has_vectors or has_vectors is None:
        return "keep"
    if options.embedder is None:
        report.notes.append("the source gives no vectors: --apply will need --embedder SPEC")
    return "reembed"


def _within_limit(records: list[SourceRecord], limit: int | None, done: int) -> list[SourceRecord]:
    if limit is None:
        return records
    return records[: max(limit - done, 0)]


def _count_page(report: ImportReport, records: list[SourceRecord], sample_size: int) -> None:
    """Counts of the records *read* (as the source gave them; a hostile value is counted, not fatal)."""
    report.pages += 1
    report.rows_read += len(records)
    ids = [_shown(getattr(r, "id", None)) for r in records]
    report.duplicates += len(ids) - len(set(ids))  # in one page; the last wins
    users = Counter(_shown(getattr(r, "user_id", None)) for r in records)
    models: Counter[str] = Counter()
    dims: Counter[str] = Counter()
    for record in records:
        if _vector_of(record) is not None:
            models[model_of(record, report.source)] += 1
            dims[str(vector_length(_vector_of(record)))] += 1
    for into, counts in ((report.users, users), (report.models, models), (report.vector_dimensions, dims)):
        for key, n in counts.items():
            into[key] = into.get(key, 0) + n
    room = sample_size - len(report.sample)
    report.sample.extend(_sample(record) for record in records[: max(room, 0)])


def _sample(record: SourceRecord) -> dict[str, Any]:
    content = _shown(getattr(record, "content", None))
    length = vector_length(_vector_of(record))
    return {
        "id": _shown(getattr(record, "id", None)),
        "userId": _shown(getattr(record, "user_id", None)),
        "content": content[:80] + ("…" if len(content) > 80 else ""),
        "model": _shown(getattr(record, "model", None)) if getattr(record, "model", None) else None,
        "dimensions": length,
    }


def _shown(value: object) -> str:
    """A source value as report text ("" for None); a value whose ``str`` fails is shown by type."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _finish_timing(report: ImportReport, started: float, rows: int) -> None:
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    if report.elapsed_seconds > 0:
        report.rows_per_second = round(rows / report.elapsed_seconds, 1)


# ---- apply ----------------------------------------------------------------------------------------


@dataclass
class _Target:
    """What the first non-empty page decided: vectors mode, model, the table's dimension."""

    vectors: str
    model: str
    dimensions: int
    embedder: RowEmbedder | None


def _apply(options: ImportOptions, source: Source, progress: Progress | None) -> ImportReport:
    from memwork.db import pg_connect

    url = destination_url(options)
    report = _new_report("apply", options, source)
    report.destination = redact_url(url)
    report.run_id, report.rejects_table = _new_run_id(), REJECTS_TABLE
    embedder = _checked(options.embedder)
    now = datetime.now(UTC)
    started = time.perf_counter()
    with pg_connect(url, autocommit=True) as pg, import_lock(pg, options.table, stored_key(source)):
        found = read_import_checkpoint(pg, options.table, stored_key(source))
        base = found if options.resume and found is not None else None
        report.resumed = base is not None
        start = base.resume_cursor if base else None
        report.start_cursor = start
        checkpoint = ImportCheckpoint.starting(options.table, stored_key(source), source.name, base)
        if progress is not None:
            progress.start("import", options.limit)
        target: _Target | None = None
        has_rejects = False
        for page, read_cursor in iter_pages(source, start, options.page_size):
            records = _within_limit(page.records, options.limit, report.rows_read)
            cut = len(records) < len(page.records)
            if records and target is None:
                target = _decide(pg, options, source, records, embedder, report)
                has_rejects = count_rejects(pg, options.table) > 0
            _count_page(report, records, options.sample_size)
            checkpoint = checkpoint.after_page(
                read_cursor=read_cursor,
                next_cursor=read_cursor if cut else page.next_cursor,
                finished=page.next_cursor is None and not cut,
                rows_read=len(records),
                run_id=report.run_id,
            )
            if target is None:  # nothing to write yet (empty pages): only the bookkeeping moves
                _store_checkpoint_only(pg, checkpoint)
            else:
                checkpoint = replace(
                    checkpoint, vectors=target.vectors, model=target.model, dimensions=target.dimensions
                )
                written, rejects = _write_page(
                    pg, options, source, records, target, checkpoint, now, has_rejects
                )
                has_rejects = has_rejects or bool(rejects)
                checkpoint = checkpoint.with_written(written)
                _note_written(report, written, rejects)
            if progress is not None:
                progress.advance(len(records))
            if cut or (options.limit is not None and report.rows_read >= options.limit):
                break
        report.checkpoint = checkpoint.to_json()
    _finish_timing(report, started, report.rows_written)
    return report


def _checked(embedder: Embedder | str | None) -> Embedder | None:
    """The embedder loaded and tried on a probe text: a spec that names none, or an embedder that
    fails for everything, is a usage error before anything is read or written -- a dry run too."""
    loaded = load_embedder(embedder) if isinstance(embedder, str) else embedder
    if loaded is not None:
        probe_embedder(loaded)
    return loaded


def _new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _decide(
    pg: psycopg.Connection[Any],
    options: ImportOptions,
    source: Source,
    records: list[SourceRecord],
    embedder: Embedder | None,
    report: ImportReport,
) -> _Target:
    """From the first non-empty page: the vectors mode, the model and a destination that fits --
    every refusal here comes before anything is written."""
    has_vectors = any(_vector_of(r) is not None for r in records)
    mode = _planned_mode(options, has_vectors)
    if mode == "reembed" and embedder is None:
        raise UsageError(
            "embedder", None, f"source {source.name} gives no vectors: --apply needs --embedder SPEC"
        )
    if mode == "keep" and options.vectors == "auto" and embedder is not None:
        report.notes.append("the source has vectors: kept; --embedder unused (--vectors reembed re-embeds)")
    if mode == "keep":
        common = _common_dimension(records)
        if common is None:
            raise UsageError("vectors", "keep", f"the first page of {source.name} carries no vectors")
        wanted = common
        model = model_of(next(r for r in records if vector_length(_vector_of(r)) == common), source.name)
    else:
        assert embedder is not None
        wanted, model = int(embedder.dimension), embedder.model_id
    existing = table_dimensions(pg, options.table)
    pg.commit()
    if existing is None and not options.create_schema:
        raise UsageError(
            "table",
            options.table,
            f"does not exist; run `memwork pgvector schema --apply --dimensions {wanted}` "
            "or pass --create-schema",
        )
    if existing is not None and existing != wanted:
        what = (
            f"the source's vectors are {wanted}-dim"
            if mode == "keep"
            else f"{model} makes {wanted}-dim vectors"
        )
        field_name = "vectors" if mode == "keep" else "embedder"
        raise UsageError(
            field_name, f"{wanted}-dim", f"{what} but {options.table}.embedding is vector({existing})"
        )
    _prepare(pg, options.table, wanted, create=existing is None)
    report.vectors, report.model, report.dimensions = mode, model, wanted
    return _Target(
        mode, model, wanted, RowEmbedder(embedder, wanted) if mode == "reembed" and embedder else None
    )


def _prepare(pg: psycopg.Connection[Any], table: str, dimensions: int, *, create: bool) -> None:
    from pgvector.psycopg import register_vector

    from memwork.migrate.writer import prepare_session, register_packed_vectors

    if create:
        with pg.transaction():
            for statement in schema_sql(table, dimensions, create_extension=True):
                pg.execute(statement)
    ensure_import_checkpoint_table(pg)
    register_vector(pg)
    register_packed_vectors(pg)
    prepare_session(pg)


def _store_checkpoint_only(pg: psycopg.Connection[Any], checkpoint: ImportCheckpoint) -> None:
    ensure_import_checkpoint_table(pg)
    with pg.transaction(), pg.cursor() as cur:
        store_import_checkpoint(cur, checkpoint)


def _write_page(
    pg: psycopg.Connection[Any],
    options: ImportOptions,
    source: Source,
    records: list[SourceRecord],
    target: _Target,
    checkpoint: ImportCheckpoint,
    now: datetime,
    has_rejects: bool,
) -> tuple[int, list[Reject]]:
    from memwork.migrate.writer import Batch, write_batch

    key = stored_key(source)
    pairs, rejects = convert_page(records, key, now)
    rows = [row for row, _ in pairs]
    good = rows  # ownership is the writer's check, inside its upsert
    by_id = {row["id"]: record for row, record in pairs}
    if target.vectors == "keep":
        good, vectors, odd = kept_vectors(good, by_id, target.dimensions, source.name, options.table)
    else:
        assert target.embedder is not None
        good, vectors, odd = target.embedder.embed(good)
    rejects += odd
    batch = Batch(rows, good, vectors, rejects, None)

    def save(cur: psycopg.Cursor[Any], rows_total: int) -> None:
        store_import_checkpoint(cur, checkpoint.with_written(rows_total - checkpoint.rows_written))

    return write_batch(
        pg,
        options.table,
        batch,
        target.model,
        target.dimensions,
        checkpoint.rows_written,
        checkpoint.run_id or "",
        owner=key,
        clear_rejects=has_rejects,
        save_checkpoint=save,
    )


def _note_written(report: ImportReport, written: int, rejects: list[Reject]) -> None:
    report.rows_written += written
    report.rows_quarantined += len(rejects)
    report.owned_elsewhere += owned_elsewhere_count(rejects)
    room = MAX_LISTED_REJECTS - len(report.quarantined)
    report.quarantined.extend(reject.to_json() for reject in rejects[: max(room, 0)])


def environment(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment with ``--set VAR=VALUE`` overrides on top (the source's variables)."""
    return {**os.environ, **(overrides or {})}
