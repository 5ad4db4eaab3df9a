"""The one migration run: every page of a source -> pgvector, checkpointed and idempotent.

Every source goes through it -- the legacy table ``h5_user_memory_items`` (source ``legacy-mysql``,
what ``memwork backfill`` runs) exactly like Qdrant, Letta or a plugin's.

Dry run by default: the source is read to the end (never a silent first page) and counted -- rows per
user, per model and vector dimension, pages, a sample -- and nothing is written anywhere (PostgreSQL
is not even opened, except a read of the checkpoint when ``resume`` asks where a resume would start).
A source that can count (``count(cursor)``, the legacy table) is counted instead of read: the plan,
the first page's sample and where the run would stop.

``apply=True`` hands each page to the writer thread (:class:`memwork.migrate.writer.BatchWriter`:
binary COPY into a staging table, one ``INSERT ... ON CONFLICT (source_memory_id)``, poison rows
quarantined in ``memwork_backfill_rejects``) which commits it with the checkpoint -- the source's
opaque cursor, keyed by (destination table, source key) in ``memwork_import_checkpoints`` -- in the
same transaction, while the next page is read and embedded. A process killed at any moment committed
a page with its checkpoint or neither; ``resume`` continues from the last committed cursor. One
advisory lock per (table, source key) keeps two runs of one migration apart.

Two paths into the writer: a source's records are converted field by field (:mod:`memwork.migrate.rows`);
a source with a fast row path (``read_rows``, the legacy table) hands the writer's text rows as they
are, so a large legacy table never costs a Python object per value.

What a row keeps: the source id (``source_memory_id``), ``user_id`` exactly as given (no case or
whitespace folding: ``TenantX`` and ``tenantx`` stay two users), ``session_id`` ->
``source_session_id``, ``message_id`` -> ``source_message_id``, the agent id in
``metadata._memworkAgentId``, the source's metadata plus ``metadata._memworkSource`` = the source key
(verification selects one source's rows by it; the legacy table's rows carry none), type, and
timestamps (a missing ``created_at`` or ``updated_at`` becomes the run's start time; ``updated_at``
defaults to ``created_at`` when only that is given).

Vectors: ``keep`` stores the source's vectors with their model id (``<source>:unknown`` when the
source does not name it); the first page's dimension must be the table's (refused before anything is
written), a single odd row (other dimension, no vector, NaN) is quarantined. ``reembed`` embeds
``content`` with the given embedder. ``auto`` keeps when the first page carries vectors, else needs an
embedder.

A source id already in the table from *another* source is quarantined, never overwritten: the writer
checks the owner in the upsert itself (:mod:`memwork.migrate.ownership`), so a run racing another
source's cannot take its rows. The report counts them in ``owned_elsewhere`` (the CLI then exits 3).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from memwork.contracts import Row, Source, SourceRecord
from memwork.embed import Embedder, load_embedder, load_module
from memwork.errors import UsageError
from memwork.identifiers import check_identifier
from memwork.migrate.checkpoint import (
    ImportCheckpoint,
    ensure_import_checkpoint_table,
    read_import_checkpoint,
    read_legacy_checkpoint,
    store_import_checkpoint,
    upgraded_checkpoint,
)
from memwork.migrate.legacy_mysql import SOURCE_NAME as LEGACY_SOURCE
from memwork.migrate.legacy_mysql import Cursor
from memwork.migrate.lock import import_lock
from memwork.migrate.ownership import check_source_key, owned_elsewhere_count, owner_of
from memwork.migrate.quarantine import (
    MAX_LISTED_REJECTS,
    REJECTS_TABLE,
    Reject,
    RowEmbedder,
    count_rejects,
    precheck,
    probe_embedder,
)
from memwork.migrate.rows import (
    convert_page,
    kept_vectors,
    model_of,
    unscoped,
    vector_length,
)
from memwork.migrate.source import iter_pages
from memwork.migrate.writer import Batch, BatchWriter, PageMark
from memwork.pgvector.schema import EMBEDDINGS_TABLE, schema_sql, table_dimensions
from memwork.plugins import open_source
from memwork.progress import Progress
from memwork.redaction import redact_text, redact_url

if TYPE_CHECKING:
    import numpy as np
    import psycopg

    from memwork.db import DatabaseURL

PG_URL_ENV = "MEMORY_PGVECTOR_DATABASE_URL"
DEFAULT_DESTINATION = "pg://embedded"
DEFAULT_PAGE_SIZE = 200
#: the most rows one page may hold (one COPY and one upsert per page)
MAX_PAGE_SIZE = 50_000
VECTOR_MODES = ("auto", "keep", "reembed")


@dataclass
class ImportOptions:
    """What one migration does. ``source`` is a registry name (``legacy-mysql``, ``qdrant``, ...),
    ``module:PATH`` (a module or ``.py`` file exporting ``source_from_env(env)``), or a :class:`Source`
    instance; ``env`` holds the source's variables (``MEMORY_BACKFILL_MYSQL_URL``, ``MEMORY_QDRANT_URL``,
    ...). ``database_url`` None: ``MEMORY_PGVECTOR_DATABASE_URL`` from ``env``, else the embedded
    PostgreSQL. ``cursor``: start after this opaque cursor instead of the beginning (not with
    ``resume``). ``prune_inactive``: delete this source's rows it holds as archived or deleted (a source
    with ``inactive_ids``: the legacy table)."""

    source: str | Source
    env: Mapping[str, str] = field(default_factory=dict)
    database_url: str | None = None
    table: str = EMBEDDINGS_TABLE
    apply: bool = False
    resume: bool = False
    page_size: int = DEFAULT_PAGE_SIZE
    limit: int | None = None
    vectors: str = "auto"
    embedder: Embedder | str | None = None
    create_schema: bool = False
    sample_size: int = 5
    cursor: str | None = None
    prune_inactive: bool = False
    #: the run id to record (the partitions of one parallel run share their coordinator's); None: new
    run_id: str | None = None

    def validate(self) -> None:
        """Every input problem as one usage error naming the field and value, before any I/O."""
        check_identifier(self.table)
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int):
            raise UsageError("page_size", self.page_size, "must be an integer")
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise UsageError("page_size", self.page_size, f"must be from 1 to {MAX_PAGE_SIZE}")
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
        if self.resume and self.cursor is not None:
            raise UsageError("resume", True, "cannot be combined with a start cursor (--cursor-*)")
        if self.apply or self.resume:
            destination(self)  # a malformed or non-PostgreSQL URL is bad input, found now


@dataclass
class MigrationReport:
    """What a run did (or, dry, would do); ``to_dict`` is the ``--json`` output (camelCase keys).

    ``users``, ``models`` and ``vector_dimensions`` count the records *read* in this run (the
    source's own model ids); ``model``/``dimensions`` are what was written (the source's model when
    vectors are kept, the embedder's when re-embedded); ``checkpoint`` holds the running totals.
    ``planned``, ``source_counts``, ``inactive``: from a source that can count and list what it no
    longer holds as active (the legacy table), else None. ``first_checkpoint``/``last_checkpoint``: the
    cursors after the first and last page committed (a dry run: where they would be), shown as JSON
    when the cursor is JSON text (the legacy table's ``{updatedAt, id}``)."""

    mode: str
    source: str
    source_key: str
    table: str
    destination: str | None = None
    vectors: str | None = None
    model: str | None = None
    dimensions: int | None = None
    planned: int | None = None
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
    first_checkpoint: Any = None
    last_checkpoint: Any = None
    checkpoint: dict[str, Any] | None = None
    quarantined: list[dict[str, str]] = field(default_factory=list)
    rejects_table: str | None = None
    rejects_total: int | None = None  # rejects of this source recorded for the table, this run's and earlier
    source_counts: dict[str, int] | None = None
    inactive: dict[str, Any] | None = None
    models_in_table: dict[str, int] | None = None
    run_id: str | None = None
    #: a parallel run's key ranges, one entry each (bounds, counts, checkpoint); None: one process
    partitions: list[dict[str, Any]] | None = None
    elapsed_seconds: float = 0.0
    rows_per_second: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


def shown_cursor_value(cursor: str | None) -> Any:
    """A cursor for a report: the JSON value when the opaque text is a JSON object, else the text."""
    if cursor is None:
        return None
    try:
        value = json.loads(cursor)
    except ValueError:
        return cursor
    return value if isinstance(value, dict) else cursor


def run_import(options: ImportOptions, progress: Progress | None = None) -> MigrationReport:
    """Dry run (source only) or apply (source -> PostgreSQL), per ``options.apply``."""
    options.validate()
    source = resolve_source(options.source, options.env)
    try:
        key = check_source_key(stored_key(source))  # what the run stores (checkpoint, rows, lock)
        if options.prune_inactive and not hasattr(source, "inactive_ids"):
            raise UsageError("prune_inactive", True, f"source {source.name} cannot list inactive records")
        if options.apply:
            return _apply(options, source, key, progress)
        if hasattr(source, "count"):
            return _dry_run_counted(options, source, key)
        return _dry_run(options, source, key, progress)
    finally:
        source.close()


def _new_report(mode: str, options: ImportOptions, source: Source, key: str) -> MigrationReport:
    return MigrationReport(mode=mode, source=source.name, source_key=key, table=options.table)


def _resume_base(
    pg: psycopg.Connection[Any], table: str, source: Source, key: str
) -> ImportCheckpoint | None:
    """The committed checkpoint of this source (stored key ``key``) into ``table``; for the legacy
    table with none, the checkpoint an earlier version kept (read once: the first page committed
    writes this one)."""
    found = read_import_checkpoint(pg, table, key)
    if found is None and source.name == LEGACY_SOURCE and not getattr(source, "partial", False):
        legacy = read_legacy_checkpoint(pg, table)
        if legacy is not None:
            cursor = Cursor.from_json(legacy["cursor"]).encode()
            found = upgraded_checkpoint(table, key, source.name, legacy, cursor)
    pg.commit()
    return found


def _start(options: ImportOptions, source: Source, key: str) -> tuple[str | None, bool]:
    """Where a run starts (and whether it resumes): the committed checkpoint, the given cursor, or
    the beginning."""
    if not options.resume:
        return options.cursor, False
    from memwork.db import pg_connect

    with pg_connect(destination(options), autocommit=True) as pg:
        found = _resume_base(pg, options.table, source, key)
    return (found.resume_cursor if found else None), found is not None


def _dry_run(options: ImportOptions, source: Source, key: str, progress: Progress | None) -> MigrationReport:
    report = _new_report("dry-run", options, source, key)
    embedder = checked_embedder(options.embedder)  # a bad --embedder is bad input in a dry run too
    started = time.perf_counter()
    if options.resume:
        report.destination = destination(options).redacted
    start, report.resumed = _start(options, source, key)
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
        _note_written(report, 0, _screened(options, source.name, key, records, now, kept_dimensions))
        if progress is not None:
            progress.advance(len(records))
        if options.limit is not None and report.rows_read >= options.limit:
            break
    report.planned = report.rows_read
    report.vectors = _planned_vectors(options, first_vectors, report)
    if report.vectors == "reembed" and embedder is not None:
        report.notes.append(
            "the dry run does not embed: a row the embedder fails on is quarantined by --apply only"
        )
    _finish_timing(report, started, report.rows_read)
    return report


def _dry_run_counted(options: ImportOptions, source: Any, key: str) -> MigrationReport:
    """The dry run of a source that can count (the legacy table): the plan from counts, the first
    page's sample and where the run would stop -- without reading every row, loading the embedder
    or opening PostgreSQL (unless ``resume`` asks where to start)."""
    report = _new_report("dry-run", options, source, key)
    started = time.perf_counter()
    if options.resume:
        report.destination = destination(options).redacted
    start, report.resumed = _start(options, source, key)
    report.start_cursor = start
    report.source_counts = source.status_counts() if hasattr(source, "status_counts") else None
    remaining = int(source.count(start))
    report.planned = remaining if options.limit is None else min(remaining, options.limit)
    first = (
        source.read_page(start, max(min(options.sample_size, report.planned), 1)) if report.planned else None
    )
    if first is not None and first.records:
        sampled = first.records[: options.sample_size]
        report.sample = [_sample(record) for record in sampled]
        if callable(getattr(source, "read_rows", None)):  # the position of the first row
            report.first_checkpoint = shown_cursor_value(source.read_rows(start, 1).next_cursor)
        report.last_checkpoint = shown_cursor_value(source.last_cursor(start, options.limit))
    report.rows_read = report.planned
    report.vectors = _planned_vectors(options, False, report)
    _finish_timing(report, started, report.rows_read)
    return report


# ---- apply ----------------------------------------------------------------------------------------


def _apply(options: ImportOptions, source: Source, key: str, progress: Progress | None) -> MigrationReport:
    from memwork.db import pg_connect

    url = destination(options)  # parsed once (validate did it): resolved and checked once, here
    owner = owner_of(source.name, key)
    report = _new_report("apply", options, source, key)
    report.destination = url.redacted
    report.run_id, report.rejects_table = options.run_id or new_run_id(), REJECTS_TABLE
    embedder = checked_embedder(options.embedder)
    now = datetime.now(UTC)
    started = time.perf_counter()
    rows_path = callable(getattr(source, "read_rows", None))
    with pg_connect(url, autocommit=True) as pg, import_lock(pg, options.table, key), ExitStack() as stack:
        base = _resume_base(pg, options.table, source, key) if options.resume else None
        report.resumed = base is not None
        start = base.resume_cursor if base else options.cursor
        report.start_cursor = start
        checkpoint = ImportCheckpoint.starting(options.table, key, source.name, base)
        checkpoint = replace(checkpoint, run_id=report.run_id)
        if hasattr(source, "count"):
            remaining = int(source.count(start))
            report.planned = remaining if options.limit is None else min(remaining, options.limit)
        if progress is not None:
            progress.start(
                f"import {source.name}", report.planned if report.planned is not None else options.limit
            )
        target: _Target | None = None
        writer: BatchWriter | None = None
        for page, read_cursor in iter_pages(
            source, start, options.page_size, rows=rows_path, limit=options.limit
        ):
            whole: Sequence[Any] = page.rows if rows_path else page.records
            items = list(whole[: max(options.limit - report.rows_read, 0)]) if options.limit else list(whole)
            cut = len(items) < len(whole)
            finished = page.next_cursor is None and not cut
            if cut and base is not None and base.finished and read_cursor == base.last_cursor:
                finished = True  # a limit inside the page a finished migration reads again: still finished
            mark = PageMark(read_cursor, read_cursor if cut else page.next_cursor, finished, len(items))
            if items and target is None:
                target = _decide(pg, options, source, items, embedder, report)
                has_rejects = count_rejects(pg, options.table, owner, exists=True) > 0
                checkpoint = replace(
                    checkpoint, vectors=target.vectors, model=target.model, dimensions=target.dimensions
                )
                committed = _on_commit(report, progress)
                writer = stack.enter_context(
                    BatchWriter(
                        pg,
                        options.table,
                        owner=owner,
                        model_id=target.model,
                        checkpoint=checkpoint,
                        has_rejects=has_rejects,
                        committed=committed,
                    )
                )
            if rows_path:
                _count_rows(report, items, options.sample_size)
            else:
                _count_page(report, items, options.sample_size)
            if (
                writer is None or target is None
            ):  # nothing to write yet (empty pages): only the bookkeeping moves
                checkpoint = checkpoint.after_page(
                    read_cursor=mark.read_cursor,
                    next_cursor=mark.next_cursor,
                    finished=mark.finished,
                    rows_read=mark.rows_read,
                    run_id=report.run_id,
                )
                _store_checkpoint_only(pg, checkpoint)
            elif rows_path:
                writer.submit(_row_batch(items, target, mark))
            else:
                writer.submit(_record_batch(options, source.name, key, items, target, now, mark))
            if cut or (options.limit is not None and report.rows_read >= options.limit):
                break
        stack.close()  # the writer commits its last page and stops
        if writer is not None:
            checkpoint = writer.checkpoint
        report.checkpoint = checkpoint.to_json()
        if hasattr(source, "inactive_ids") and not getattr(source, "partial", False):
            # one key range of a parallel run: its coordinator reconciles the whole table once
            from memwork.migrate.reconcile import inactive_report

            report.inactive = inactive_report(
                source,  # type: ignore[arg-type]
                pg,
                options.table,
                options.prune_inactive,
                report.run_id,
                owner=owner,
            )
            if options.prune_inactive:
                _note_prune_quarantine(report)
        if target is not None:
            from memwork.migrate.reconcile import models_in_table

            report.models_in_table = models_in_table(pg, options.table)
        report.rejects_total = count_rejects(pg, options.table, owner, exists=target is not None)
    _finish_timing(report, started, report.rows_written)
    return report


def _on_commit(report: MigrationReport, progress: Progress | None) -> Any:
    """What the writer thread does after each committed page: the report's counts and the bar."""

    def committed(batch: Batch, written: int, rejects: list[Reject], checkpoint: ImportCheckpoint) -> None:
        moved = batch.mark.next_cursor
        if moved is not None:
            report.first_checkpoint = report.first_checkpoint or shown_cursor_value(moved)
            report.last_checkpoint = shown_cursor_value(moved)
        _note_written(report, written, rejects)
        if progress is not None and batch.mark.rows_read:
            progress.advance(batch.mark.rows_read)

    return committed


def _note_prune_quarantine(report: MigrationReport) -> None:
    """The rows a prune left because another source owns them (each quarantined) count as this
    run's quarantine."""
    assert report.inactive is not None
    left = int(report.inactive["ownedElsewhere"])
    report.owned_elsewhere += left
    report.rows_quarantined += left
    room = MAX_LISTED_REJECTS - len(report.quarantined)
    report.quarantined.extend(report.inactive["quarantined"][: max(room, 0)])


def _row_batch(rows: list[Row], target: _Target, mark: PageMark) -> Batch:
    """The fast path: the source's rows as they are, screened (owner, values) and embedded."""
    good, rejects = unscoped(rows)
    good, more = precheck(good)
    rejects += more
    assert target.embedder is not None  # rows carry no vectors: _decide chose reembed
    good, vectors, failed = target.embedder.embed(good)
    return Batch(good, vectors, rejects + failed, mark)


def _record_batch(
    options: ImportOptions,
    source_name: str,
    key: str,
    records: list[SourceRecord],
    target: _Target,
    now: datetime,
    mark: PageMark,
) -> Batch:
    """A page of records converted field by field, their vectors kept or embedded."""
    pairs, rejects = convert_page(records, key, now)
    good = [row for row, _ in pairs]  # ownership is the writer's check, inside its upsert
    by_id = {row["id"]: record for row, record in pairs}
    vectors: np.ndarray
    if target.vectors == "keep":
        good, vectors, odd = kept_vectors(good, by_id, target.dimensions, source_name, options.table)
    else:
        assert target.embedder is not None
        good, vectors, odd = target.embedder.embed(good)
    return Batch(good, vectors, rejects + odd, mark)


def _count_rows(report: MigrationReport, rows: list[Row], sample_size: int) -> None:
    """The fast path's counts: pages, rows and users read, a sample (rows carry no vectors)."""
    report.pages += 1
    report.rows_read += len(rows)
    for user, n in Counter(row["user_id"] for row in rows).items():
        report.users[user] = report.users.get(user, 0) + n
    room = sample_size - len(report.sample)
    for row in rows[: max(room, 0)]:
        content = str(row["content"] or "")
        report.sample.append(
            {
                "id": row["id"],
                "userId": row["user_id"],
                "content": content[:80] + ("…" if len(content) > 80 else ""),
                "model": None,
                "dimensions": None,
            }
        )


def _spec_of(embedder: Embedder | str) -> str:
    return embedder if isinstance(embedder, str) else embedder.model_id


def destination_url(options: ImportOptions) -> str:
    """``--to``, else ``MEMORY_PGVECTOR_DATABASE_URL``, else ``pg://embedded``; PostgreSQL only."""
    return destination(options).text


def destination(options: ImportOptions) -> DatabaseURL:
    """:func:`destination_url` parsed: a run parses its destination once (validation, then the
    connection and the report's redacted text all take this value)."""
    url = (options.database_url or options.env.get(PG_URL_ENV) or "").strip() or DEFAULT_DESTINATION
    return _parsed_destination(url)


@lru_cache(maxsize=8)
def _parsed_destination(url: str) -> DatabaseURL:
    """``url`` parsed and required to be PostgreSQL (pure, so one parse serves every caller)."""
    from memwork.db import parse_url

    try:
        parsed = parse_url(url)
    except UsageError as exc:
        raise UsageError("to", redact_url(url), str(exc)) from None
    if parsed.dialect != "postgresql":
        raise UsageError(
            "to", parsed.redacted, "must be a PostgreSQL URL (postgresql://... or pg://embedded)"
        )
    return parsed


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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _screened(
    options: ImportOptions,
    source_name: str,
    key: str,
    records: list[SourceRecord],
    now: datetime,
    kept_dimensions: int | None,
) -> list[Reject]:
    """What the apply would quarantine of this page before any PostgreSQL or embedder is involved:
    the same :func:`convert_page` and, when vectors are kept, the same vector checks."""
    pairs, rejects = convert_page(records, key, now)
    if kept_dimensions is not None:
        by_id = {row["id"]: record for row, record in pairs}
        _, _, odd = kept_vectors(
            [row for row, _ in pairs], by_id, kept_dimensions, source_name, options.table
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


def _planned_vectors(options: ImportOptions, has_vectors: bool | None, report: MigrationReport) -> str:
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


def _count_page(report: MigrationReport, records: list[SourceRecord], sample_size: int) -> None:
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


def _finish_timing(report: MigrationReport, started: float, rows: int) -> None:
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    if report.elapsed_seconds > 0:
        report.rows_per_second = round(rows / report.elapsed_seconds, 1)


def checked_embedder(embedder: Embedder | str | None) -> Embedder | None:
    """The embedder loaded and tried on a probe text: a spec that names none, or an embedder that
    fails for everything, is a usage error before anything is read or written -- a dry run too."""
    loaded = load_embedder(embedder) if isinstance(embedder, str) else embedder
    if loaded is not None:
        probe_embedder(loaded)
    return loaded


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _decide(
    pg: psycopg.Connection[Any],
    options: ImportOptions,
    source: Source,
    records: list[SourceRecord],
    embedder: Embedder | None,
    report: MigrationReport,
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
    register_vector(pg)
    register_packed_vectors(pg)
    prepare_session(pg)


def _store_checkpoint_only(pg: psycopg.Connection[Any], checkpoint: ImportCheckpoint) -> None:
    ensure_import_checkpoint_table(pg)
    with pg.transaction(), pg.cursor() as cur:
        store_import_checkpoint(cur, checkpoint)


def _note_written(report: MigrationReport, written: int, rejects: list[Reject]) -> None:
    report.rows_written += written
    report.rows_quarantined += len(rejects)
    report.owned_elsewhere += owned_elsewhere_count(rejects)
    room = MAX_LISTED_REJECTS - len(report.quarantined)
    report.quarantined.extend(reject.to_json() for reject in rejects[: max(room, 0)])


def environment(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment with ``--set VAR=VALUE`` overrides on top (the source's variables)."""
    return {**os.environ, **(overrides or {})}


@dataclass
class _Target:
    """What the first non-empty page decided: vectors mode, model, the table's dimension."""

    vectors: str
    model: str
    dimensions: int
    embedder: RowEmbedder | None
