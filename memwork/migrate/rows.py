"""A source record as a destination row: what is kept, where it goes, and which rows may not be written.

Kept: the id (``source_memory_id``), ``user_id`` exactly as given, ``session_id`` ->
``source_session_id``, ``message_id`` -> ``source_message_id``, type, the source's metadata plus
``_memworkSource`` (the source key, so verification can select one source's rows) and
``_memworkAgentId``; timestamps as naive-UTC text (a missing one: the run's start time).
Not written: a second row for one id in one page (the last wins), a vector of the wrong shape. An id
another source already wrote into the table is not written either, but that is the writer's check, in
the upsert itself (:mod:`memwork.pgvector.backfill.ownership`), not a read made before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memwork.migrate.source import SourceRecord
from memwork.pgvector.backfill.ownership import SOURCE_MARKER as SOURCE_MARKER
from memwork.pgvector.backfill.quarantine import Reject

AGENT_MARKER = "_memworkAgentId"


def model_of(record: SourceRecord, source_name: str) -> str:
    return record.model or f"{source_name}:unknown"


def record_row(record: SourceRecord, source_key: str, now: datetime) -> dict[str, Any]:
    """A source record as the writer's row (text columns; timestamps naive-UTC ISO text)."""
    metadata = dict(record.metadata or {})
    metadata[SOURCE_MARKER] = source_key
    if record.agent_id:
        metadata[AGENT_MARKER] = record.agent_id
    created = record.created_at or record.updated_at or now
    updated = record.updated_at or created
    return {
        "id": _text(record.id),
        "user_id": _text(record.user_id),
        "content": record.content if isinstance(record.content, str) else str(record.content or ""),
        "type": record.type or "fact",
        "source_session_id": record.session_id,
        "source_message_id": record.message_id,
        "metadata": json.dumps(metadata, ensure_ascii=False, default=str),
        "created_at": _naive_utc(created),
        "updated_at": _naive_utc(updated),
    }


def _naive_utc(moment: datetime) -> str:
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.replace(tzinfo=None).isoformat(timespec="microseconds")


def _text(value: object) -> str:
    return "" if value is None else str(value)


def unscoped(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Reject]]:
    """Rows without an id or a user id are quarantined: a memory without its owner would be
    nobody's (or, worse, land in a user called "None"), one without an id cannot be upserted."""
    good: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for row in rows:
        if not row["id"].strip():
            rejects.append(Reject.of(row, "id: empty (the upsert key)"))
        elif not row["user_id"].strip():
            rejects.append(Reject.of(row, "user_id: empty (every memory needs its owner)"))
        else:
            good.append(row)
    return good, rejects


def last_of_each_id(
    pairs: list[tuple[dict[str, Any], SourceRecord]],
) -> list[tuple[dict[str, Any], SourceRecord]]:
    """One row per id in a page (the last wins, as it would across pages): a second row for the same
    key in one ``INSERT ... ON CONFLICT`` is an error, not an update."""
    last = {row["id"]: k for k, (row, _) in enumerate(pairs)}
    return [pair for k, pair in enumerate(pairs) if last[pair[0]["id"]] == k]


def kept_vectors(
    rows: list[dict[str, Any]],
    by_id: Mapping[str, SourceRecord],
    dimensions: int,
    source_name: str,
    table: str,
) -> tuple[list[dict[str, Any]], np.ndarray, list[Reject]]:
    """The source's own vectors for ``rows``; a row without one, of another dimension or not finite
    is quarantined (the table takes only ``dimensions``)."""
    kept: list[dict[str, Any]] = []
    vectors: list[np.ndarray] = []
    rejects: list[Reject] = []
    for row in rows:
        record = by_id[row["id"]]
        problem, vector = _vector_problem(record.vector, dimensions, table)
        if problem is not None or vector is None:
            rejects.append(Reject.of(row, f"vector: {problem}"))
            continue
        kept.append({**row, "embedding_model": model_of(record, source_name)})
        vectors.append(vector)
    stacked = np.vstack(vectors) if vectors else np.zeros((0, dimensions), dtype=np.float32)
    return kept, stacked, rejects


def _vector_problem(value: Any, dimensions: int, table: str) -> tuple[str | None, np.ndarray | None]:
    if value is None:
        return "the source gave none for this row (use --vectors reembed)", None
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        return f"not a list of numbers ({type(exc).__name__})", None
    if vector.ndim != 1 or vector.shape[0] != dimensions:
        return f"{vector.size} dimensions, {table}.embedding is vector({dimensions})", None
    if not np.isfinite(vector).all():
        return "non-finite values (NaN or infinity)", None
    return None, vector
