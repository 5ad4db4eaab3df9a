"""A source record as a destination row: what is kept, where it goes, and which rows may not be written.

Kept: the id (``source_memory_id``), ``user_id`` exactly as given, ``session_id`` ->
``source_session_id``, ``message_id`` -> ``source_message_id``, type, the source's metadata plus
``_memworkSource`` (the source key, so verification can select one source's rows) and
``_memworkAgentId``; timestamps as naive-UTC text (a missing one: the run's start time).
Not written (quarantined with a reason naming the field): a record any field of which cannot be
converted -- a timestamp that leaves the datetime range in UTC, metadata that is not a mapping, nested
deeper than :data:`MAX_METADATA_DEPTH` or not JSON, a container where text belongs -- a second row for
one id in one page (the last wins), a vector of the wrong shape. An id another source already wrote
into the table is not written either, but that is the writer's check, in the upsert itself
(:mod:`memwork.migrate.ownership`), not a read made before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from memwork.contracts import Row, SourceRecord
from memwork.embed import vector_problems
from memwork.migrate.ownership import SOURCE_MARKER as SOURCE_MARKER
from memwork.migrate.quarantine import Reject, precheck
from memwork.redaction import first_line

AGENT_MARKER = "_memworkAgentId"


def model_of(record: SourceRecord, source_name: str) -> str:
    """The model id a source names for a record's vector, as text (``<source>:unknown`` without one)."""
    return _readable(getattr(record, "model", None), "") or f"{source_name}:unknown"


#: deeper metadata is refused (MySQL's own JSON limit): no memory's metadata needs more, and an
#: unbounded depth would overflow the JSON encoder's recursion
MAX_METADATA_DEPTH = 100

#: more values than this in one record's metadata are refused (a shared sub-object listed many times
#: would expand exponentially when encoded)
MAX_METADATA_VALUES = 1_000_000


class FieldProblem(ValueError):
    """One field of one record cannot become a destination value: the record is quarantined."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


def record_row(record: SourceRecord, source_key: str, now: datetime) -> Row:
    """A source record as the writer's row (text columns; timestamps naive-UTC ISO text).

    Raises :class:`FieldProblem` naming the field for any value that cannot be converted; use
    :func:`convert_record`, which never raises, to turn that into a quarantine."""
    if not isinstance(record, SourceRecord):
        raise FieldProblem("record", f"a {type(record).__name__}, not a SourceRecord")
    if record.problem:
        raise FieldProblem("source", _readable(record.problem, "the source could not interpret it"))
    metadata = _field("metadata", _metadata, record.metadata)
    metadata[SOURCE_MARKER] = source_key
    agent = _field("agent_id", _optional_text, record.agent_id)
    if agent:
        metadata[AGENT_MARKER] = agent
    updated = None if record.updated_at is None else _field("updated_at", _naive_utc, record.updated_at)
    if record.created_at is not None:
        created = _field("created_at", _naive_utc, record.created_at)
    else:
        created = updated or _naive_utc(now)
    return {
        "id": _field("id", _text, record.id),
        "user_id": _field("user_id", _text, record.user_id),
        "content": _field("content", _content, record.content),
        "type": _field("type", _text, record.type) or "fact",
        "source_session_id": _field("session_id", _optional_text, record.session_id),
        "source_message_id": _field("message_id", _optional_text, record.message_id),
        "metadata": _field("metadata", _metadata_json, metadata),
        "created_at": created,
        "updated_at": updated or created,
    }


def convert_record(record: object, source_key: str, now: datetime) -> Row | Reject:
    """:func:`record_row`, total: the row, or the record's :class:`Reject` naming the field.

    Whatever a hostile source hands over (a timestamp at the end of the range, metadata nested
    thousands deep or not a mapping, lone surrogates, an object that is not a record), one record
    costs only itself -- the import goes on."""
    try:
        return record_row(record, source_key, now)  # type: ignore[arg-type]
    except FieldProblem as exc:
        return Reject.of(_reject_key(record), str(exc))
    except Exception as exc:  # a conversion step that named no field: still this record's problem
        return Reject.of(_reject_key(record), f"record: {type(exc).__name__}: {first_line(exc)}")


def convert_page(
    records: list[SourceRecord], source_key: str, now: datetime
) -> tuple[list[tuple[Row, SourceRecord]], list[Reject]]:
    """One page as (row, record) pairs worth writing, and the rejects: every record is converted
    (:func:`convert_record`), one row per id is kept (the last), and rows without an id or owner or
    with a value PostgreSQL text cannot hold are quarantined. The dry run and the apply both screen
    their pages here, so a preview names the same rejects the run quarantines."""
    converted = last_of_each_id([(convert_record(record, source_key, now), record) for record in records])
    rejects = [row for row, _ in converted if isinstance(row, Reject)]
    pairs = [(row, rec) for row, rec in converted if not isinstance(row, Reject)]
    good, more = unscoped([row for row, _ in pairs])
    rejects += more
    good, more = precheck(good)
    rejects += more
    kept = {id(row) for row in good}
    return [(row, rec) for row, rec in pairs if id(row) in kept], rejects


class _Unfit(ValueError):
    """A converter's own refusal: its message is the problem as it stands (no exception type)."""


def _field(name: str, convert: Callable[[Any], Any], value: Any) -> Any:
    """``convert(value)``; any error becomes a :class:`FieldProblem` naming ``name``."""
    try:
        return convert(value)
    except FieldProblem:
        raise
    except _Unfit as exc:
        raise FieldProblem(name, str(exc)) from None
    except Exception as exc:
        raise FieldProblem(name, f"{type(exc).__name__}: {first_line(exc)}") from None


def _text(value: object) -> str:
    """Text as it is; numbers and other scalars as their text (None: empty); never a container."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")  # not UTF-8: a UnicodeDecodeError, named by _field
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        raise _Unfit(f"a {type(value).__name__}, not text")
    return str(value)


def _content(value: object) -> str:
    """The memory's text: a record without any (None) is refused, never written as an empty memory."""
    if value is None:
        raise _Unfit("none given (a memory without text would be an empty memory)")
    return _text(value)


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _naive_utc(moment: object) -> str:
    if not isinstance(moment, datetime):
        raise _Unfit(f"a {type(moment).__name__}, not a datetime")
    try:
        aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise _Unfit(f"{moment.isoformat()} is outside the datetime range in UTC") from None
    return aware.replace(tzinfo=None).isoformat(timespec="microseconds")


def _metadata(value: object) -> dict[str, Any]:
    """The source's metadata as a new dict (None: empty); anything but a mapping is refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Unfit(f"a {type(value).__name__}, not a mapping (SourceRecord.metadata is a JSON object)")
    return dict(value)


def _metadata_json(metadata: dict[str, Any]) -> str:
    _check_shape(metadata)
    try:
        return json.dumps(metadata, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" in str(exc):
            raise _Unfit("NaN or infinity is not JSON") from None
        raise


def _check_shape(metadata: Mapping[str, Any]) -> None:
    """Refuse metadata nested deeper than :data:`MAX_METADATA_DEPTH`, holding more than
    :data:`MAX_METADATA_VALUES` values, or a NUL in a key or text value (JSON can write it, jsonb
    refuses it) -- walked without recursion, so a cycle stops it too."""
    stack: list[tuple[Any, int]] = [(metadata, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_METADATA_VALUES:
            raise _Unfit(f"more than {MAX_METADATA_VALUES:,} values")
        if isinstance(value, str):
            if "\x00" in value:
                raise _Unfit("a NUL character (PostgreSQL's jsonb cannot hold \\u0000)")
            continue
        if isinstance(value, Mapping):
            children: Iterable[Any] = [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > MAX_METADATA_DEPTH:
            raise _Unfit(f"nested deeper than {MAX_METADATA_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def _reject_key(record: object) -> dict[str, Any]:
    """The id and ``updated_at`` a reject of ``record`` is filed under, as far as they are readable."""
    moment = getattr(record, "updated_at", None) or getattr(record, "created_at", None)
    try:
        stamp = _naive_utc(moment)  # as a written row would carry it
    except Exception:
        stamp = _readable(moment, "")
    return {"id": _readable(getattr(record, "id", None), "(no id)"), "updated_at": stamp}


def _readable(value: object, default: str) -> str:
    if value is None:
        return default
    try:
        return value if isinstance(value, str) else str(value)
    except Exception:
        return default


def unscoped(rows: list[Row]) -> tuple[list[Row], list[Reject]]:
    """Rows without an id or a user id are quarantined: a memory without its owner would be
    nobody's (or, worse, land in a user called "None"), one without an id cannot be upserted."""
    good: list[Row] = []
    rejects: list[Reject] = []
    for row in rows:
        if not row["id"].strip():
            rejects.append(Reject.of(row, "id: empty (the upsert key)"))
        elif not row["user_id"].strip():
            rejects.append(Reject.of(row, "user_id: empty (every memory needs its owner)"))
        else:
            good.append(row)
    return good, rejects


_Converted = TypeVar("_Converted", bound="Row | Reject")


def last_of_each_id(
    pairs: list[tuple[_Converted, SourceRecord]],
) -> list[tuple[_Converted, SourceRecord]]:
    """One row (or reject) per id in a page -- the last wins, as it would across pages, also when the
    last copy is the one that cannot be written: a second row for the same key in one
    ``INSERT ... ON CONFLICT`` is an error, not an update."""
    last = {_id_of(item): k for k, (item, _) in enumerate(pairs)}
    return [pair for k, pair in enumerate(pairs) if last[_id_of(pair[0])] == k]


def _id_of(item: Row | Reject) -> str:
    return item.id if isinstance(item, Reject) else item["id"]


def kept_vectors(
    rows: list[Row],
    by_id: Mapping[str, SourceRecord],
    dimensions: int,
    source_name: str,
    table: str,
) -> tuple[list[Row], np.ndarray, list[Reject]]:
    """The source's own vectors for ``rows``; a row without one, of another dimension or not finite
    is quarantined (the table takes only ``dimensions``). The values are checked a page at a time."""
    shaped: list[tuple[Row, SourceRecord, np.ndarray]] = []
    rejects: list[Reject] = []
    for row in rows:
        record = by_id[row["id"]]
        problem, vector = _vector_shape(record.vector, dimensions, table)
        if problem is not None or vector is None:
            rejects.append(Reject.of(row, f"vector: {problem}"))
        else:
            shaped.append((row, record, vector))
    stacked = np.vstack([v for _, _, v in shaped]) if shaped else np.zeros((0, dimensions), dtype=np.float32)
    problems = vector_problems(stacked)
    kept: list[Row] = []
    for (row, record, _), problem in zip(shaped, problems, strict=True):
        if problem is not None:
            rejects.append(Reject.of(row, f"vector: {problem}"))
            continue
        kept.append({**row, "embedding_model": model_of(record, source_name)})
    usable = np.asarray([p is None for p in problems], dtype=bool)
    return kept, stacked[usable] if len(problems) else stacked, rejects


def _vector_shape(value: Any, dimensions: int, table: str) -> tuple[str | None, np.ndarray | None]:
    """Why ``value`` is not a vector of ``dimensions`` numbers (None: it is, here as float32)."""
    if value is None:
        return "the source gave none for this row (use --vectors reembed)", None
    if isinstance(value, str | bytes | Mapping):
        return f"a {type(value).__name__}, not a list of numbers", None
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # 1e39 -> inf is reported by the value check
            vector = np.asarray(value, dtype=np.float32)
    except Exception as exc:
        return f"not a list of numbers ({type(exc).__name__})", None
    if vector.ndim != 1:
        return f"not a flat list of numbers (shape {vector.shape})", None
    if vector.shape[0] != dimensions:
        return f"{vector.shape[0]} dimensions, {table}.embedding is vector({dimensions})", None
    return None, vector


def vector_length(value: object) -> int | None:
    """How many numbers a source's vector holds, if it is a flat sequence (else None): the dry
    run's counts and the apply's choice of dimension must not fail on an odd vector."""
    if value is None or isinstance(value, str | bytes | Mapping):
        return None
    try:
        length = len(value)  # type: ignore[arg-type]
    except Exception:
        return None
    return length if isinstance(length, int) else None
