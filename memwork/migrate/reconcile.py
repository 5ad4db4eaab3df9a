"""After the copy: a source's rows whose record is no longer active (pruned on request), orphans, models.

For a source that can list what it no longer holds as active (the optional capabilities
``inactive_ids(after, size)`` and ``present_ids(ids)``; the legacy table has them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwork.identifiers import quote_identifier
from memwork.migrate.legacy_mysql import ID_CHUNK
from memwork.migrate.ownership import OwnedElsewhere, delete_owned, owner_sql
from memwork.migrate.quarantine import MAX_LISTED_REJECTS, store_rejects
from memwork.pgvector.schema import SMOKE_PREFIX
from memwork.redaction import redact_text

if TYPE_CHECKING:
    import psycopg

    from memwork.migrate.legacy_mysql import LegacyMySQLSource


def inactive_report(
    source: LegacyMySQLSource,
    pg: psycopg.Connection[Any],
    table: str,
    prune: bool,
    run_id: str,
    *,
    owner: str,
) -> dict[str, Any]:
    """Destination rows whose source is archived/deleted (pruned only when asked) and orphans.

    Only ``owner``'s rows (the legacy table's: :data:`~memwork.migrate.ownership.LEGACY_OWNER`, rows
    without an owner marker) are counted or pruned: an id another source owns is that source's row,
    whatever its status in the legacy table. Those are counted as ``ownedElsewhere``; a
    pruning run quarantines them (reason naming the owner) and never deletes them -- the owner is
    checked in the DELETE itself.

    Orphans -- backfill rows with no source row at all -- are counted only in a pruning run (it
    costs a pass over the destination) and never deleted: that needs a human decision (a backfill
    pointed at the wrong MySQL database would otherwise wipe the table).
    """
    inactive = _inactive_in_destination(source, pg, table)
    own = sorted(key for key, (who, _) in inactive.items() if who == owner)
    elsewhere = {key: who for key, (who, _) in inactive.items() if who != owner}
    orphans = _orphans(source, pg, quote_identifier(table), owner) if prune else None
    pruned: list[str] = []
    quarantined: list[OwnedElsewhere] = []
    if prune and inactive:
        with pg.transaction(), pg.cursor() as cur:
            pruned, elsewhere = delete_owned(cur, table, owner, sorted(inactive))
            quarantined = [
                OwnedElsewhere.taken(_source_row(key, inactive), table, who, action="deleted")
                for key, who in sorted(elsewhere.items())
            ]
            if quarantined:
                store_rejects(cur, table, quarantined, run_id, source_key=owner)
    return {
        "count": len(own),
        "sample": own[:10],
        "pruned": len(pruned),
        "ownedElsewhere": len(elsewhere),
        "ownedElsewhereSample": [
            {"id": key, "owner": redact_text(who)} for key, who in sorted(elsewhere.items())[:10]
        ],
        "quarantined": [reject.to_json() for reject in quarantined[:MAX_LISTED_REJECTS]],
        "orphans": None if orphans is None else len(orphans),
        "orphanSample": None if orphans is None else sorted(orphans)[:10],
    }


def _source_row(key: str, inactive: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    return {"id": key, "updated_at": inactive[key][1]}


def _inactive_in_destination(
    source: LegacyMySQLSource, pg: psycopg.Connection[Any], table: str
) -> dict[str, tuple[str, Any]]:
    """``{id: (owner, source updated_at)}`` of the destination rows whose source record is not active."""
    target = quote_identifier(table)
    found: dict[str, tuple[str, Any]] = {}
    last_id = ""
    while True:
        chunk = source.inactive_ids(last_id, ID_CHUNK)
        if not chunk:
            break
        last_id = max(chunk)
        rows = pg.execute(
            f"SELECT source_memory_id, {owner_sql('d')} FROM {target} AS d WHERE source_memory_id = ANY(%s)",
            (list(chunk),),
        )
        found.update({key: (who, chunk[key]) for key, who in rows})
    pg.commit()
    return found


def _orphans(source: LegacyMySQLSource, pg: psycopg.Connection[Any], target: str, owner: str) -> list[str]:
    """The source's destination ``source_memory_id``s it does not hold at all (smoke rows and other
    sources' rows excluded: they never came from it)."""
    orphans: list[str] = []
    last = ""
    while True:
        ids = [
            row[0]
            for row in pg.execute(
                f"SELECT source_memory_id FROM {target} AS d WHERE source_memory_id > %s "
                f"AND source_memory_id NOT LIKE %s AND {owner_sql('d')} = %s "
                "ORDER BY source_memory_id LIMIT %s",
                (last, SMOKE_PREFIX + "%", owner, ID_CHUNK),
            )
        ]
        if not ids:
            break
        last = ids[-1]
        present = source.present_ids(ids)
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
