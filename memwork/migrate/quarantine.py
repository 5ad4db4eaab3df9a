"""Poison rows: found before I/O, or by the embedder or PostgreSQL, recorded in ``memwork_backfill_rejects``.

A row that cannot be written is quarantined with its id, its source and the reason (like pgloader's reject
file, but queryable by the verification) and the run continues past it; once fixed at the source it is
read again, written, and its reject is cleared. The one rejects table of every migration: a reject is
keyed by (destination table, source key, source id), so two sources' rejects of one id are two rows
and a verification counts its own source's only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memwork.contracts import Row
from memwork.db import pg_connect, pg_value
from memwork.embed import Embedder, embed_memories, vector_problem, vector_problems
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.legacy_mysql import row_timestamp
from memwork.pgvector.schema import EMBEDDINGS_TABLE
from memwork.redaction import first_line

if TYPE_CHECKING:
    import psycopg

REJECTS_TABLE = "memwork_backfill_rejects"


MAX_LISTED_REJECTS = 50

_REJECTS = quote_identifier(REJECTS_TABLE)  # quoted once: every statement below names it


_REASON_CHARS = 300


# SQLSTATE classes that blame the row's values, not the server or the schema: data exception (22),
# integrity constraint violation (23), program limit exceeded (54: e.g. a value too large to index)
_ROW_ERROR_CLASSES = ("22", "23", "54")


_TEXT_FIELDS = (
    "id",
    "user_id",
    "content",
    "type",
    "source_session_id",
    "source_message_id",
    "metadata",
    "created_at",
    "updated_at",
)


def rejects_table_sql() -> str:
    """Quarantined source rows: one row per (destination table, source key, source id), cleared once
    written. ``source_key`` is empty for rejects recorded before rejects had their source."""
    return (
        f"CREATE TABLE IF NOT EXISTS {_REJECTS} (\n"
        "  target_table TEXT NOT NULL,\n"
        "  source_key TEXT NOT NULL DEFAULT '',\n"
        "  source_memory_id TEXT NOT NULL,\n"
        "  source_updated_at TEXT,\n"
        "  reason TEXT NOT NULL,\n"
        "  run_id TEXT NOT NULL,\n"
        "  first_seen TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  last_seen TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n"
        "  PRIMARY KEY (target_table, source_key, source_memory_id)\n"
        ")"
    )


def ensure_rejects_table(pg: psycopg.Connection[Any]) -> None:
    """Create the rejects table, or upgrade one made when its key was (table, id): ``source_key``
    added (empty for old rows) and made part of the key. Run inside the caller's DDL-locked
    transaction; the catalog is asked first (``ALTER TABLE`` locks the table even when nothing changes)."""
    pg.execute(rejects_table_sql())
    keyed = pg_value(
        pg,
        "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
        "AND a.attname = 'source_key'",
        (REJECTS_TABLE,),
    )
    if keyed:
        return
    table = _REJECTS
    primary = pg_value(
        pg,
        "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
        (REJECTS_TABLE,),
    )
    pg.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS source_key TEXT")
    pg.execute(f"UPDATE {table} SET source_key = '' WHERE source_key IS NULL")
    dropped = f"DROP CONSTRAINT {quote_identifier(str(primary))}, " if primary else ""
    pg.execute(
        f"ALTER TABLE {table} ALTER COLUMN source_key SET DEFAULT '', "
        f"ALTER COLUMN source_key SET NOT NULL, {dropped}"
        "ADD PRIMARY KEY (target_table, source_key, source_memory_id)"
    )


def printable(value: object) -> str:
    """``value`` as text PostgreSQL can store: NUL as ``\\x00``, lone surrogates as ``\\udXXX``.

    Reject ids and reasons pass through it (the id itself may be the poison); the verification
    compares source ids through it too."""
    text = str(value).replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Reject:
    """A source row that could not be written, and why (``id`` is :func:`printable`)."""

    id: str
    reason: str
    updated_at: str

    @classmethod
    def of(cls, row: Mapping[str, Any], reason: str) -> Reject:
        return cls(printable(row["id"]), printable(reason)[:_REASON_CHARS], printable(row["updated_at"]))

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "reason": self.reason}


def _value_problem(row: Mapping[str, Any]) -> str | None:
    """Why PostgreSQL cannot take one of the row's values, found before any I/O (or None)."""
    return _timestamp_problem(row) or _text_problem(row)


def _timestamp_problem(row: Mapping[str, Any]) -> str | None:
    """A timestamp text that is no date: MariaDB keeps zero and partial dates (``0000-00-00``)."""
    for name in ("created_at", "updated_at"):
        value = row.get(name)
        if isinstance(value, str):
            try:
                _from_iso(value)  # row_timestamp of a text, without the call around it
            except ValueError:
                shown = value if len(value) <= 40 else value[:40] + "..."
                return f"{name}: {shown!r} is not a valid date"
    return None


_from_iso = datetime.fromisoformat


def _text_problem(row: Mapping[str, Any]) -> str | None:
    """Why PostgreSQL text cannot hold one of the row's values (NUL, a lone surrogate) or None."""
    joined = "".join([v for v in map(row.get, _TEXT_FIELDS) if type(v) is str])
    if "\x00" not in joined:  # the common case, at a fraction of the cost of the per-field look below
        if joined.isascii():
            return None
        try:
            joined.encode("utf-8")  # fails only on a lone surrogate (two never pair up in a str)
            return None
        except UnicodeEncodeError:
            pass
    for name in _TEXT_FIELDS:
        value = row.get(name)
        if not isinstance(value, str):
            continue
        if "\x00" in value:
            return f"{name}: NUL byte at offset {value.index(chr(0))} (PostgreSQL text cannot hold it)"
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{name}: invalid text (lone surrogate at offset {exc.start})"
    return None


_Row = TypeVar("_Row", bound=Mapping[str, Any])


def precheck(rows: list[_Row]) -> tuple[list[_Row], list[Reject]]:
    """The rows worth embedding, and the rejects whose values can never be written."""
    good: list[_Row] = []
    rejects: list[Reject] = []
    for row in rows:
        problem = _value_problem(row)
        if problem is None:
            good.append(row)
        else:
            rejects.append(Reject.of(row, problem))
    return good, rejects


def reject_reason(exc: BaseException) -> str:
    """One line for a reject's reason: the error class, its first line, where PostgreSQL says."""
    first = first_line(exc)
    context = first_line(getattr(getattr(exc, "diag", None), "context", None))
    where = f" ({context})" if context else ""
    return f"{type(exc).__name__}: {first}{where}"


#: what every embedder is tried on before a run reads or writes anything (a memory row as the
#: backfill and the import hand it over): an embedder that fails here fails for everything
PROBE_ROW: Row = {
    "id": "memwork-embedder-probe",
    "user_id": "memwork-probe",
    "content": "memwork embedder probe: the user prefers short answers.",
    "type": "fact",
    "source_session_id": None,
    "source_message_id": None,
    "metadata": "{}",
    "created_at": "2025-01-01T00:00:00.000000",
    "updated_at": "2025-01-01T00:00:00.000000",
}


def probe_embedder(embedder: Embedder) -> None:
    """Embed :data:`PROBE_ROW` once: an embedder that cannot (raises, a non-finite vector, a vector of
    another length than its ``dimension``) is broken for every row -- a configuration error, exit 2,
    before anything is written. Per-row failures later are quarantined instead."""
    RowEmbedder(embedder, int(embedder.dimension)).check()


class RowEmbedder:
    """Embeds a batch; when a batch fails, retries it row by row and quarantines the rows that fail.

    A row counts as poison only while the embedder still embeds the last row it embedded well (at
    first :data:`PROBE_ROW`): a broken model or a dead embedding service stops the run instead of
    quarantining every row. A vector the embedder returns for one row that is non-finite (NaN,
    infinity, beyond float32) or of another length quarantines that row only."""

    def __init__(self, embedder: Embedder, dimensions: int) -> None:
        self.embedder, self.dimensions = embedder, dimensions
        self.last_good: Mapping[str, Any] = PROBE_ROW

    def check(self) -> None:
        """:func:`probe_embedder`: a UsageError naming the embedder when it fails on the probe."""
        model = getattr(self.embedder, "model_id", type(self.embedder).__name__)
        try:
            vectors = self._vectors([PROBE_ROW])
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError("embedder", model, f"fails on a probe text: {reject_reason(exc)}") from None
        problem = next((p for p in map(vector_problem, vectors) if p), None)
        if problem is not None:
            raise UsageError("embedder", model, f"returns a vector with {problem} for a probe text")

    def embed(self, rows: list[Row]) -> tuple[list[Row], np.ndarray, list[Reject]]:
        if not rows:
            return [], np.zeros((0, self.dimensions), dtype=np.float32), []
        try:
            vectors = self._vectors(rows)
        except Exception as exc:  # one row or all of them: row by row tells which
            return self._one_by_one(rows, exc)
        problems = vector_problems(vectors)
        usable = np.asarray([p is None for p in problems], dtype=bool)
        kept = [row for row, problem in zip(rows, problems, strict=True) if problem is None]
        if not kept and not self._still_works():
            raise UsageError("embedder", self.embedder.model_id, f"returned {problems[0]}")
        if kept:
            self.last_good = kept[-1]
        rejects = [
            Reject.of(row, f"embedder returned {problem}")
            for row, problem in zip(rows, problems, strict=True)
            if problem is not None
        ]
        return kept, vectors[usable], rejects

    def _one_by_one(
        self, rows: list[Row], batch_error: Exception
    ) -> tuple[list[Row], np.ndarray, list[Reject]]:
        kept: list[Row] = []
        vectors: list[np.ndarray] = []
        rejects: list[Reject] = []
        for row in rows:
            try:
                vector = self._vectors([row])
                problem = vector_problem(vector[0])
                if problem is not None:
                    raise ValueError(problem)
            except Exception as exc:
                if not self._still_works():
                    raise batch_error from None
                rejects.append(Reject.of(row, f"embedder: {reject_reason(exc)}"))
                continue
            self.last_good = row
            kept.append(row)
            vectors.append(vector[0])
        stacked = np.vstack(vectors) if vectors else np.zeros((0, self.dimensions), dtype=np.float32)
        return kept, stacked, rejects

    def _still_works(self) -> bool:
        """The probe: does the last row embedded well still embed (finite, right shape)?"""
        try:
            return vector_problem(self._vectors([self.last_good])[0]) is None
        except Exception:
            return False

    def _vectors(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        embedder = self.embedder
        if callable(getattr(embedder, "embed_memories", None)):
            rows = [_public_row(row) for row in rows]
        with np.errstate(over="ignore", invalid="ignore"):  # 1e39 -> inf: reported as non-finite
            vectors = np.asarray(embed_memories(embedder, rows), dtype=np.float32)
        if vectors.shape != (len(rows), self.dimensions):
            raise UsageError(
                "embedder",
                embedder.model_id,
                f"returned shape {vectors.shape}, not ({len(rows)}, {self.dimensions})",
            )
        return vectors


def blames_rows(exc: BaseException) -> bool:
    """True when a write error is about the values written (retry row by row), not the server."""
    import psycopg

    if isinstance(exc, UnicodeError | psycopg.DataError | psycopg.IntegrityError):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state[:2] in _ROW_ERROR_CLASSES


def store_rejects(
    cur: psycopg.Cursor[Any],
    table: str,
    rejects: Sequence[Reject],
    run_id: str,
    *,
    source_key: str,
) -> None:
    """Record (or refresh) ``rejects`` for ``table`` as ``source_key``'s (the source that could not
    write them), in the page's transaction."""
    cur.executemany(
        f"INSERT INTO {_REJECTS} AS r "
        "(target_table, source_key, source_memory_id, source_updated_at, reason, run_id) "
        "VALUES (%s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (target_table, source_key, source_memory_id) DO UPDATE SET "
        "source_updated_at = EXCLUDED.source_updated_at, reason = EXCLUDED.reason, "
        "run_id = EXCLUDED.run_id, last_seen = NOW()",
        [(table, source_key, r.id, r.updated_at, r.reason, run_id) for r in rejects],
    )


def clear_written_rejects(
    cur: psycopg.Cursor[Any], table: str, rows: Sequence[Mapping[str, Any]], *, source_key: str
) -> None:
    """Rows ``source_key`` wrote now are no longer its rejects (fixed at the source and read again).

    Another source's reject of the same id stays: that source still could not write it (the row is
    this one's). A reject recorded before rejects had a source (key empty) is cleared by any writer."""
    cur.execute(
        f"DELETE FROM {_REJECTS} "
        "WHERE target_table = %s AND source_memory_id = ANY(%s) AND source_key IN ('', %s)",
        (table, [printable(row["id"]) for row in rows], source_key),
    )


def count_rejects(
    pg: psycopg.Connection[Any], table: str, source_key: str | None = None, *, exists: bool = False
) -> int:
    """Rejects recorded for ``table`` (of ``source_key`` only, when given; 0 when the rejects table
    does not exist yet). ``exists``: the caller made sure of the table (no catalog look-up)."""
    if not exists and pg_value(pg, "SELECT to_regclass(%s)", (REJECTS_TABLE,)) is None:
        pg.commit()
        return 0
    where, params = _whose(table, source_key)
    count = pg_value(pg, f"SELECT count(*) FROM {_REJECTS} WHERE {where}", params)
    pg.commit()
    return int(count)


def _whose(table: str, source_key: str | None) -> tuple[str, tuple[str, ...]]:
    if source_key is None:
        return "target_table = %s", (table,)
    return "target_table = %s AND source_key = %s", (table, source_key)


def read_rejects(
    pg: psycopg.Connection[Any], table: str = EMBEDDINGS_TABLE, source_key: str | None = None
) -> list[dict[str, Any]]:
    """Every quarantined row recorded for ``table`` (of ``source_key`` only, when given), id order."""
    if pg_value(pg, "SELECT to_regclass(%s)", (REJECTS_TABLE,)) is None:
        return []
    where, params = _whose(table, source_key)
    rows = pg.execute(
        "SELECT source_memory_id, reason, source_updated_at, first_seen, last_seen, run_id, source_key "
        f"FROM {_REJECTS} WHERE {where} ORDER BY source_memory_id, source_key",
        params,
    ).fetchall()
    return [
        {
            "id": r[0],
            "reason": r[1],
            "sourceUpdatedAt": r[2],
            "firstSeen": r[3].isoformat(),
            "lastSeen": r[4].isoformat(),
            "runId": r[5],
            "sourceKey": r[6],
        }
        for r in rows
    ]


def load_rejects(
    database_url: str, table: str = EMBEDDINGS_TABLE, source_key: str | None = None
) -> list[dict[str, Any]]:
    """:func:`read_rejects` from a URL (``pg://embedded`` works too)."""
    check_identifier(table)
    with pg_connect(database_url) as pg:
        return read_rejects(pg, table, source_key)


def _public_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row a module's ``embed_memory(memory)`` sees: metadata decoded, timestamps ISO text."""
    public = dict(row)
    try:
        public["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
    except (ValueError, RecursionError):  # not JSON, or nested too deep to decode: PostgreSQL decides
        public["metadata"] = {}
    for stamp in ("created_at", "updated_at"):
        public[stamp] = row_timestamp(row[stamp]).isoformat()
    return public
