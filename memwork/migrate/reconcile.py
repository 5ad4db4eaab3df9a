"""After the copy: the backfill's rows whose source is no longer active (pruned on request), orphans,
models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from memwork.identifiers import quote_identifier
from memwork.legacy.schema import memory_items
from memwork.migrate.ownership import BACKFILL_OWNER, OwnedElsewhere, delete_owned, owner_sql
from memwork.migrate.quarantine import MAX_LISTED_REJECTS, store_rejects
from memwork.migrate.legacy_mysql import ID_CHUNK
from memwork.pgvector.schema import SMOKE_PREFIX
from memwork.redaction import redact_text

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection


def inactive_report(
    my: Connection, pg: psycopg.Connection[Any], table: str, prune: bool, run_id: str = ""
) -> dict[str, Any]:
    """Destination rows whose source is archived/deleted (pruned only when asked) and orphans.

    Only the backfill's own rows (:data:`~memwork.migrate.ownership.BACKFILL_OWNER`, i.e.
    rows without an owner marker) are counted or pruned: an id another source (an import) owns is
    that source's row, whatever its status in MySQL. Those are counted as ``ownedElsewhere``; a
    pruning run quarantines them (reason naming the owner) and never deletes them -- the owner is
    checked in the DELETE itself.

    Orphans -- backfill rows with no source row at all -- are counted only in a pruning run (it
    costs a pass over the destination) and never deleted: that needs a human decision (a backfill
    pointed at the wrong MySQL database would otherwise wipe the table).
    """
    inactive = _inactive_in_destination(my, pg, table)
    own = sorted(key for key, (owner, _) in inactive.items() if owner == BACKFILL_OWNER)
    elsewhere = {key: owner for key, (owner, _) in inactive.items() if owner != BACKFILL_OWNER}
    orphans = _orphans(my, pg, quote_identifier(table)) if prune else None
    pruned: list[str] = []
    quarantined: list[OwnedElsewhere] = []
    if prune and inactive:
        with pg.transaction(), pg.cursor() as cur:
            pruned, elsewhere = delete_owned(cur, table, BACKFILL_OWNER, sorted(inactive))
            quarantined = [
                OwnedElsewhere.taken(_source_row(key, inactive), table, owner, action="deleted")
                for key, owner in sorted(elsewhere.items())
            ]
            if quarantined:
                store_rejects(cur, table, quarantined, run_id, source_key=BACKFILL_OWNER)
    return {
        "count": len(own),
        "sample": own[:10],
        "pruned": len(pruned),
        "ownedElsewhere": len(elsewhere),
        "ownedElsewhereSample": [
            {"id": key, "owner": redact_text(owner)} for key, owner in sorted(elsewhere.items())[:10]
        ],
        "quarantined": [reject.to_json() for reject in quarantined[:MAX_LISTED_REJECTS]],
        "orphans": None if orphans is None else len(orphans),
        "orphanSample": None if orphans is None else sorted(orphans)[:10],
    }


def _source_row(key: str, inactive: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    return {"id": key, "updated_at": inactive[key][1]}


def _inactive_in_destination(
    my: Connection, pg: psycopg.Connection[Any], table: str
) -> dict[str, tuple[str, Any]]:
    """``{id: (owner, source updated_at)}`` of the destination rows whose source row is not active."""
    target = quote_identifier(table)
    t = memory_items.c
    found: dict[str, tuple[str, Any]] = {}
    last_id = ""
    while True:
        query = select(t.id, t.updated_at).where(t.status != "active", t.id > last_id)
        query = query.order_by(t.id).limit(ID_CHUNK)
        chunk = {row[0]: row[1] for row in my.execute(query)}
        if not chunk:
            break
        last_id = max(chunk)
        rows = pg.execute(
            f"SELECT source_memory_id, {owner_sql('d')} FROM {target} AS d WHERE source_memory_id = ANY(%s)",
            (list(chunk),),
        )
        found.update({key: (owner, chunk[key]) for key, owner in rows})
    pg.commit()
    return found


def _orphans(my: Connection, pg: psycopg.Connection[Any], target: str) -> list[str]:
    """The backfill's destination ``source_memory_id``s missing from the source table (smoke rows and
    other sources' rows excluded: they never came from MySQL)."""
    orphans: list[str] = []
    last = ""
    while True:
        ids = [
            row[0]
            for row in pg.execute(
                f"SELECT source_memory_id FROM {target} AS d WHERE source_memory_id > %s "
                f"AND source_memory_id NOT LIKE %s AND {owner_sql('d')} = %s "
                "ORDER BY source_memory_id LIMIT %s",
                (last, SMOKE_PREFIX + "%", BACKFILL_OWNER, ID_CHUNK),
            )
        ]
        if not ids:
            break
        last = ids[-1]
        present = {row[0] for row in my.execute(select(memory_items.c.id).where(memory_items.c.id.in_(ids)))}
        orphans.extend(i for i in ids if i not in present)
    pg.commit()
    return orphans


def models_in_table(pg: psycopg.Connection[Any], table: str) -> dict[str, int]:
    """Rows per ``embedding_model`` -- more than one key means mixed vectors."""
    rows = pg.execute(
        f"SELECT coalesce(embedding_model, 'unknown'), count(*) FROM {quote_identifier(table)} GROUP BY 1"
    ).fetchall()
    pg.commit()
    return {str(model): int(n) for model, n in rows}
