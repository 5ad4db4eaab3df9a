"""Repair what a certificate named: re-copy exactly the keys a certificate run recorded as failed.

The certificate (:func:`memwork.certify.certify`) keeps every bad row in ``memwork_certify_failures``
under its run id. :func:`plan_repair` reads those keys, fetches exactly them from the source by id
and decides, per key. Fetching by id is an optional capability of a source, tried in this order:
``rows_by_id(ids) -> {id: (status, row)}`` (the legacy table: the writer's rows, any status),
``records_by_id(ids) -> {id: SourceRecord}`` (Qdrant: ``retrieve``; a record held is active), else a
filtered listing (every page read once, the named ids kept). Records become rows exactly as an
import converts them, and a record whose vector is of the model the import wrote keeps it (an import
with ``--vectors keep``); the others are embedded. Per key:

* ``write`` -- the source row is active: re-upserted through the migration's own writer
  (:func:`memwork.migrate.writer.write_batch`), embedded by the same model as the table's rows, so a
  missing, changed, user-changed or stale-vector row comes back exactly as an import writes it;
* ``delete`` -- the source no longer holds the row as active (archived, deleted, never there): the
  destination row is deleted, the owner checked in the DELETE itself;
* ``quarantine`` -- another source owns the destination row: never overwritten or deleted
  (:mod:`memwork.migrate.ownership`); recorded in the rejects table, naming the owner;
* ``none`` -- nothing to do (the row is already gone, as the source says it should be).

Failures that are not rows (an index's operator class, HNSW settings) are listed as skipped: a
repair copies rows, it does not rebuild indexes.

Dry run unless ``apply``: the plan lists each key with its action, nothing is written.
:func:`apply_repair` writes under the import's own advisory lock, leaves the import's checkpoint as
it is, and records the repair (its own run id, the certificate run it repaired, what it did per key)
in ``memwork_repairs``. A second certificate then shows the keys cleared.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwork.embed import Embedder, HashEmbedder, load_embedder
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier
from memwork.migrate.ownership import (
    OwnedElsewhere,
    check_source_key,
    delete_owned,
    owned_elsewhere_count,
    owner_of,
    owner_sql,
)
from memwork.migrate.quarantine import (
    MAX_LISTED_REJECTS,
    Reject,
    RowEmbedder,
    ensure_rejects_table,
    precheck,
    probe_embedder,
    store_rejects,
)
from memwork.migrate.rows import convert_record, kept_vectors, model_of, unscoped
from memwork.migrate.run import ImportOptions, destination_url, resolve_source, stored_key
from memwork.redaction import redact_text, redact_url

if TYPE_CHECKING:
    import psycopg

    from memwork.contracts import Row, Source, SourceRecord

REPAIRS_TABLE = "memwork_repairs"

#: failure kinds that name one row by its source id (the rest name an index or a setting)
ROW_KINDS = frozenset(
    {
        "missing",
        "quarantined",
        "extra",
        "status",
        "changed",
        "user-changed",
        "wrong-dimension",
        "other-model",
        "swapped",
        "stale",
    }
)
ACTIONS = ("write", "delete", "quarantine", "none")


@dataclass
class RepairItem:
    """One failed key: what the certificate said, what the source holds, what the repair does."""

    key: str
    kinds: list[str]
    user: str | None
    action: str
    source_status: str | None  #: None: the source does not hold the id at all
    dest_owner: str | None  #: None: no destination row
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


@dataclass
class RepairPlan:
    """What a repair of one certificate run does (or did); ``to_dict`` is the ``--json`` output."""

    certificate_run_id: str
    table: str
    source: str
    source_key: str
    owner: str
    destination: str
    model: str | None
    items: list[RepairItem] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    options: ImportOptions | None = field(default=None, repr=False)
    rows: dict[str, Row] = field(default_factory=dict, repr=False)  #: the source rows to write
    #: the source records behind ``rows`` (a record source) and the keys whose vector is kept
    records: dict[str, SourceRecord] = field(default_factory=dict, repr=False)
    kept: set[str] = field(default_factory=set, repr=False)
    fetched_by: str = "rows_by_id"  #: how the source was asked: rows_by_id, records_by_id or listing

    def keys(self, action: str) -> list[str]:
        return [item.key for item in self.items if item.action == action]

    def counts(self) -> dict[str, int]:
        return {action: len(self.keys(action)) for action in ACTIONS}


@dataclass
class RepairReport:
    """A dry run's plan, or what the applied repair did (its own ``repair_run_id``)."""

    mode: str
    plan: RepairPlan
    repair_run_id: str | None = None
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)
    owned_elsewhere: int = 0
    elapsed_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "mode": self.mode,
            "certificateRunId": p.certificate_run_id,
            "repairRunId": self.repair_run_id,
            "table": p.table,
            "source": p.source,
            "sourceKey": p.source_key,
            "destination": p.destination,
            "model": p.model,
            "fetchedBy": p.fetched_by,
            "keptVectors": len(p.kept),
            "planned": p.counts(),
            "items": [item.to_dict() for item in p.items],
            "skipped": p.skipped,
            "written": self.written,
            "deleted": self.deleted,
            "quarantined": self.quarantined,
            "ownedElsewhere": self.owned_elsewhere,
            "elapsedSeconds": self.elapsed_seconds,
            "notes": self.notes,
        }


def repairs_table_sql() -> str:
    """The repairs' audit trail: one row per applied repair."""
    return (
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(REPAIRS_TABLE)} (\n"
        "  repair_run_id TEXT PRIMARY KEY,\n"
        "  certificate_run_id TEXT NOT NULL,\n"
        "  target_table TEXT NOT NULL,\n"
        "  source_key TEXT NOT NULL,\n"
        "  written INTEGER NOT NULL,\n"
        "  deleted INTEGER NOT NULL,\n"
        "  quarantined INTEGER NOT NULL,\n"
        "  actions JSONB NOT NULL,\n"
        "  applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW()\n"
        ")"
    )


def read_repairs(conn: psycopg.Connection[Any], certificate_run_id: str) -> list[dict[str, Any]]:
    """The applied repairs of one certificate run (oldest first); empty when none ran."""
    found = conn.execute("SELECT to_regclass(%s)", (REPAIRS_TABLE,)).fetchone()
    if not found or found[0] is None:
        return []
    cur = conn.execute(
        "SELECT repair_run_id, target_table, source_key, written, deleted, quarantined, actions "
        f"FROM {quote_identifier(REPAIRS_TABLE)} WHERE certificate_run_id = %s ORDER BY applied_at",
        (certificate_run_id,),
    )
    names = ("repairRunId", "table", "sourceKey", "written", "deleted", "quarantined", "actions")
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def plan_repair(run_id: str, options: ImportOptions) -> RepairPlan:
    """The keys certificate run ``run_id`` recorded as failed, each with its action; writes nothing.

    An unknown run id (no failures recorded under it) or a run that certified another table is a
    usage error."""
    from memwork.certify.failures import read_failures
    from memwork.db import pg_connect

    if not isinstance(run_id, str) or not run_id.strip():
        raise UsageError("repair", run_id, "must name a certificate run id")
    options.validate()
    url = destination_url(options)
    source = resolve_source(options.source, options.env)
    try:
        key = check_source_key(stored_key(source))
        owner = owner_of(source.name, key)
        with pg_connect(url, autocommit=True) as pg:
            failures = read_failures(pg, run_id)
            if not failures:
                raise UsageError(
                    "repair", run_id, "no failures recorded under this certificate run id (unknown run?)"
                )
            tables = sorted({str(f["table"]) for f in failures})
            if tables != [options.table]:
                raise UsageError("table", options.table, f"run {run_id} certified {', '.join(tables)}")
            plan = RepairPlan(
                run_id, options.table, source.name, key, owner, redact_url(url) or "", None, options=options
            )
            by_key = _group(failures, plan)
            _decide(plan, by_key, source, pg)
            plan.model = _table_model(pg, options.table, key)
            plan.kept = _kept(plan, source.name)
    finally:
        source.close()
    return plan


def apply_repair(plan: RepairPlan) -> RepairReport:
    """Write the plan: ``write`` keys upserted through the migration's writer, ``delete`` keys deleted
    when owned, rows owned elsewhere quarantined; the repair recorded in ``memwork_repairs``."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect
    from memwork.migrate.lock import import_lock
    from memwork.migrate.writer import prepare_session, register_packed_vectors
    from memwork.pgvector.schema import table_dimensions

    assert plan.options is not None, "a plan from plan_repair"
    options = plan.options
    report = RepairReport("apply", plan, repair_run_id=_new_repair_id())
    run_id = report.repair_run_id or ""
    started = time.perf_counter()
    embedder = _embedder(options.embedder, plan) if _to_embed(plan) else None
    with (
        pg_connect(destination_url(options), autocommit=True) as pg,
        import_lock(pg, plan.table, plan.source_key),
    ):
        rejects: list[Reject] = []
        with pg.transaction():
            from memwork.pgvector.schema import lock_ddl

            lock_ddl(pg)
            ensure_rejects_table(pg)
            pg.execute(repairs_table_sql())
        if plan.keys("write"):
            dimensions = table_dimensions(pg, plan.table)
            pg.commit()
            assert dimensions is not None  # certified, so it exists
            register_vector(pg)
            register_packed_vectors(pg)
            prepare_session(pg)
            rejects += _write(pg, plan, embedder, dimensions, options.page_size, run_id, report)
        rejects += _delete(pg, plan, run_id, report)
        rejects += _quarantine_planned(pg, plan, run_id)
        report.owned_elsewhere = owned_elsewhere_count(rejects)
        report.quarantined = [r.to_json() for r in rejects[:MAX_LISTED_REJECTS]]
        _record(pg, plan, report, len(rejects))
    report.elapsed_seconds = round(time.perf_counter() - started, 3)
    return report


def run_repair(run_id: str, options: ImportOptions) -> RepairReport:
    """The plan (dry run) or the plan applied, per ``options.apply``."""
    plan = plan_repair(run_id, options)
    if options.apply:
        return apply_repair(plan)
    if _to_embed(plan):
        _embedder(options.embedder, plan)  # a missing or mismatched embedder is bad input now, too
    report = RepairReport("dry-run", plan)
    if plan.keys("quarantine"):
        report.owned_elsewhere = len(plan.keys("quarantine"))
        report.notes.append("rows another source owns would be quarantined, never overwritten or deleted")
    return report


# ---- planning -------------------------------------------------------------------------------------


def _group(failures: list[dict[str, Any]], plan: RepairPlan) -> dict[str, dict[str, Any]]:
    """Failures per row key (kinds merged); the rest (index, settings) listed as skipped."""
    by_key: dict[str, dict[str, Any]] = {}
    for failure in failures:
        kind, key = str(failure["kind"]), str(failure["key"])
        if kind not in ROW_KINDS:
            plan.skipped.append({"key": key, "kind": kind, "reason": "not a row: a repair copies rows only"})
            continue
        entry = by_key.setdefault(key, {"kinds": [], "user": failure["user"]})
        entry["kinds"].append(kind)
    return by_key


def held_by_id(source: Source, keys: list[str], page_size: int = 1000) -> tuple[dict[str, Any], str]:
    """``{id: (status, row or SourceRecord)}`` of the ``keys`` the source holds, and how it was
    asked: ``rows_by_id``, ``records_by_id`` (each record active) or a filtered listing."""
    from memwork.migrate.source import iter_pages

    by_rows = getattr(source, "rows_by_id", None)
    if callable(by_rows):
        return dict(by_rows(keys)), "rows_by_id"
    by_records = getattr(source, "records_by_id", None)
    if callable(by_records):
        found = by_records(keys)
        return {str(k): ("active", r) for k, r in found.items() if str(k) in set(keys)}, "records_by_id"
    wanted, held = set(keys), {}
    for page, _ in iter_pages(source, None, page_size):
        for record in page.records:
            if str(record.id) in wanted:
                held[str(record.id)] = ("active", record)
    return held, "listing"


def _as_rows(plan: RepairPlan, held: dict[str, Any]) -> dict[str, tuple[str | None, Row | None]]:
    """Records converted as an import converts them (a record it cannot convert is not active: it
    was quarantined, so its destination row goes); the records kept for their vectors."""
    now = datetime.now(UTC)
    out: dict[str, tuple[str | None, Row | None]] = {}
    for key, (status, item) in held.items():
        if isinstance(item, dict):
            out[key] = (status, item)  # type: ignore[assignment]
            continue
        row = convert_record(item, plan.source_key, now)
        if isinstance(row, dict):
            out[key] = (status, row)
            plan.records[key] = item
        else:
            out[key] = ("unconvertible", None)
    return out


def _kept(plan: RepairPlan, source_name: str) -> set[str]:
    """The ``write`` keys whose source vector is of the model the import wrote: kept, not embedded."""
    return {
        key
        for key in plan.keys("write")
        if key in plan.records
        and plan.records[key].vector is not None
        and model_of(plan.records[key], source_name) == plan.model
    }


def _to_embed(plan: RepairPlan) -> bool:
    return any(key not in plan.kept for key in plan.keys("write"))


def _decide(plan: RepairPlan, by_key: dict[str, dict[str, Any]], source: Source, pg: Any) -> None:
    keys = sorted(by_key)
    found, plan.fetched_by = held_by_id(source, keys)
    held = _as_rows(plan, found)
    owners = _owners(pg, plan.table, keys)
    for key in keys:
        status, row = held.get(key, (None, None))
        who = owners.get(key)
        elsewhere = who is not None and who != plan.owner
        if status == "active":
            if elsewhere:
                action, reason = "quarantine", f"owned by {redact_text(str(who))}; not overwritten"
            else:
                action, reason = "write", "re-copied from the source"
                assert row is not None
                plan.rows[key] = row
        elif who is None:
            action, reason = "none", "absent from the destination, as the source says"
        elif elsewhere:
            action, reason = "quarantine", f"owned by {redact_text(str(who))}; not deleted"
        else:
            gone = "not in the source" if status is None else f"{status} at the source"
            action, reason = "delete", f"{gone}: the destination row is deleted"
        entry = by_key[key]
        plan.items.append(RepairItem(key, entry["kinds"], entry["user"], action, status, who, reason))


def _owners(pg: Any, table: str, keys: list[str]) -> dict[str, str]:
    """The owner of each key's destination row (read only, no lock: the writes check it again)."""
    rows = pg.execute(
        f"SELECT source_memory_id, {owner_sql('d')} FROM {quote_identifier(table)} AS d "
        "WHERE source_memory_id = ANY(%s)",
        (keys,),
    ).fetchall()
    return {str(k): str(o) for k, o in rows}


def _table_model(pg: Any, table: str, source_key: str) -> str | None:
    """The model this source's rows were written with: its import's checkpoint."""
    from memwork.migrate.checkpoint import read_import_checkpoint

    found = read_import_checkpoint(pg, table, source_key)
    return found.model if found is not None else None


def _embedder(spec: Embedder | str | None, plan: RepairPlan) -> Embedder:
    """The embedder the rows are re-written with: the one given, else the table's ``hash-N`` model;
    it must be the model the import wrote (two models in one user's surface is a failure)."""
    loaded = load_embedder(spec) if isinstance(spec, str) else spec
    if loaded is None and plan.model and plan.model.startswith("hash-") and plan.model[5:].isdigit():
        loaded = HashEmbedder(int(plan.model[5:]))
    if loaded is None:
        raise UsageError(
            "embedder", None, f"the rows to write need --embedder SPEC (the import wrote {plan.model})"
        )
    if plan.model is not None and loaded.model_id != plan.model:
        raise UsageError(
            "embedder", loaded.model_id, f"the import wrote {plan.table} with {plan.model}; use that model"
        )
    probe_embedder(loaded)
    return loaded


# ---- applying -------------------------------------------------------------------------------------


def _write(
    pg: Any,
    plan: RepairPlan,
    embedder: Embedder | None,
    dimensions: int,
    page_size: int,
    run_id: str,
    report: RepairReport,
) -> list[Reject]:
    """The ``write`` keys through the migration's writer, a page at a time (its checkpoint untouched)."""

    from memwork.migrate.writer import Batch, PageMark, write_batch

    rows = [plan.rows[key] for key in plan.keys("write")]
    row_embedder = RowEmbedder(embedder, dimensions) if embedder is not None else None
    rejects: list[Reject] = []
    for start in range(0, len(rows), page_size):
        good, screened = unscoped(rows[start : start + page_size])
        good, more = precheck(good)
        good, vectors, failed = _vectors(plan, good, row_embedder, dimensions)
        batch = Batch(good, vectors, screened + more + failed, PageMark(None, None, False, len(good)))
        _, page_rejects, _ = write_batch(
            pg,
            plan.table,
            batch,
            embedder.model_id if embedder is not None else plan.model or "",
            None,
            owner=plan.owner,
            clear_rejects=True,
            run_id=run_id,
        )
        refused = {r.id for r in page_rejects}
        report.written += [row["id"] for row in good if row["id"] not in refused]
        rejects += page_rejects
    return rejects


def _vectors(
    plan: RepairPlan, rows: list[Row], row_embedder: RowEmbedder | None, dimensions: int
) -> tuple[list[Row], Any, list[Reject]]:
    """The page's vectors: the source's own for the kept keys, the model's embedding for the rest
    (kept rows first; each row keeps its vector's model)."""
    import numpy as np

    kept = [row for row in rows if row["id"] in plan.kept]
    fresh = [row for row in rows if row["id"] not in plan.kept]
    good, vectors, rejects = kept_vectors(kept, plan.records, dimensions, plan.source, plan.table)
    if fresh:
        assert row_embedder is not None  # _to_embed(plan) made one
        more, embedded, failed = row_embedder.embed(fresh)
        good, rejects = good + more, rejects + failed
        vectors = np.vstack([vectors, embedded]) if len(vectors) else embedded
    return good, vectors, rejects


def _delete(pg: Any, plan: RepairPlan, run_id: str, report: RepairReport) -> list[Reject]:
    """The ``delete`` keys, owner checked in the DELETE; a row another source took meanwhile is
    quarantined instead."""
    keys = plan.keys("delete")
    if not keys:
        return []
    with pg.transaction(), pg.cursor() as cur:
        deleted, elsewhere = delete_owned(cur, plan.table, plan.owner, keys)
        quarantined: list[Reject] = [
            OwnedElsewhere.taken({"id": key, "updated_at": ""}, plan.table, who, action="deleted")
            for key, who in sorted(elsewhere.items())
        ]
        if quarantined:
            store_rejects(cur, plan.table, quarantined, run_id, source_key=plan.owner)
    report.deleted = deleted
    return quarantined


def _quarantine_planned(pg: Any, plan: RepairPlan, run_id: str) -> list[Reject]:
    """The keys another source owns: recorded as this source's rejects, naming the owner."""
    items = [item for item in plan.items if item.action == "quarantine"]
    if not items:
        return []
    rejects: list[Reject] = []
    for item in items:
        row = plan.rows.get(item.key) or {"id": item.key, "updated_at": ""}
        action = "overwritten" if item.source_status == "active" else "deleted"
        rejects.append(OwnedElsewhere.taken(row, plan.table, item.dest_owner or "", action=action))
    with pg.transaction(), pg.cursor() as cur:
        store_rejects(cur, plan.table, rejects, run_id, source_key=plan.owner)
    return rejects


def _record(pg: Any, plan: RepairPlan, report: RepairReport, quarantined: int) -> None:
    """The audit trail: this repair's run id, the certificate run it repaired, each key's action."""
    actions = {item.key: item.action for item in plan.items}
    with pg.transaction():
        pg.execute(
            f"INSERT INTO {quote_identifier(REPAIRS_TABLE)} (repair_run_id, certificate_run_id, "
            "target_table, source_key, written, deleted, quarantined, actions) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb)",
            (
                report.repair_run_id,
                plan.certificate_run_id,
                plan.table,
                plan.source_key,
                len(report.written),
                len(report.deleted),
                quarantined,
                json.dumps(actions, sort_keys=True),
            ),
        )


def _new_repair_id() -> str:
    return f"repair-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def shown_items(report: Mapping[str, Any]) -> list[str]:
    """The plan's lines for a terminal: one key a line, its kinds, action and reason."""
    return [
        f"  {item['action']:<10} {item['key']}  [{', '.join(item['kinds'])}]  user {item['user']}  "
        f"{item['reason']}"
        for item in report["items"]
    ]
