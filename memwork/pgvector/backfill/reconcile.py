"""After the copy: destination rows whose source is no longer active (pruned on request), orphans, models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from memwork.identifiers import quote_identifier
from memwork.legacy.schema import memory_items
from memwork.pgvector.backfill.reader import ID_CHUNK
from memwork.pgvector.schema import SMOKE_PREFIX

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection


def inactive_report(my: Connection, pg: psycopg.Connection[Any], table: str, prune: bool) -> dict[str, Any]:
    """Destination rows whose source is archived/deleted (pruned only when asked) and orphans.

    Orphans -- destination rows with no source row at all -- are counted only in a pruning run (it
    costs a pass over the destination) and never deleted: that needs a human decision (a backfill
    pointed at the wrong MySQL database would otherwise wipe the table).
    """
    target = quote_identifier(table)
    t = memory_items.c
    inactive_ids: list[str] = []
    last_id = ""
    while True:
        query = select(t.id).where(t.status != "active", t.id > last_id).order_by(t.id).limit(ID_CHUNK)
        ids = [row[0] for row in my.execute(query)]
        if not ids:
            break
        last_id = ids[-1]
        found = pg.execute(f"SELECT source_memory_id FROM {target} WHERE source_memory_id = ANY(%s)", (ids,))
        inactive_ids.extend(row[0] for row in found)
    pg.commit()
    orphans = _orphans(my, pg, target) if prune else None
    pruned = 0
    if prune and inactive_ids:
        with pg.transaction():
            pruned = pg.execute(
                f"DELETE FROM {target} WHERE source_memory_id = ANY(%s)", (inactive_ids,)
            ).rowcount
    return {
        "count": len(inactive_ids),
        "sample": sorted(inactive_ids)[:10],
        "pruned": pruned,
        "orphans": None if orphans is None else len(orphans),
        "orphanSample": None if orphans is None else sorted(orphans)[:10],
    }


def _orphans(my: Connection, pg: psycopg.Connection[Any], target: str) -> list[str]:
    """Destination ``source_memory_id``s missing from the source table (smoke rows excluded)."""
    orphans: list[str] = []
    last = ""
    while True:
        ids = [
            row[0]
            for row in pg.execute(
                f"SELECT source_memory_id FROM {target} WHERE source_memory_id > %s "
                "AND source_memory_id NOT LIKE %s ORDER BY source_memory_id LIMIT %s",
                (last, SMOKE_PREFIX + "%", ID_CHUNK),
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
