"""The one canonical serialisation every certificate comparison uses, in Python and in SQL.

A row of ``h5_user_memory_items`` (source) and of ``memory_embeddings`` (destination) becomes one
*canonical row text*; its MD5 is the row's hash. The same text is produced by MariaDB, SQLite and
PostgreSQL in SQL (so checksums are computed where the data lives) and by :func:`canonical_row` in
Python (so a drilled-down row is compared field by field with exactly the same rules).

Rules (the same, with these constants, in ``docs/design.md`` -- "Canonical serialisation" -- which a
test keeps in step with this module):

* **fields**, in order: key (source id = ``source_memory_id``), user, content, type, source session
  pointer, source message pointer, created_at, updated_at, metadata. Each field is written as
  ``<length in characters>:<value>``; SQL NULL is the marker ``-``. Length-prefixing makes the text
  unambiguous whatever the values contain (no separator can be forged). Metadata, last and never
  NULL, is ``:<canonical JSON>`` (no length: nothing follows it, and the SQL computes it once).
* **type**: an empty type is ``fact`` (the writer stores ``type or 'fact'``).
* **timestamps**: UTC, microsecond precision, ``YYYY-MM-DD HH:MM:SS.ffffff`` (the source stores naive
  UTC ``DATETIME(6)``; the destination ``TIMESTAMPTZ``).
* **metadata**: canonical JSON in MariaDB's ``JSON_NORMALIZE`` form -- keys sorted by their UTF-8
  bytes, no whitespace, every number as ``d.dddE<exp>`` from its decimal digits (``1`` -> ``1.0E0``,
  ``0.25`` -> ``2.5E-1``, no binary rounding), strings as UTF-8 with only ``"``, ``\\`` and control
  characters escaped (PostgreSQL's ``to_json``; how memwork's MariaDB loader writes JSON). SQL NULL
  and JSON ``{}`` are the same (the writer stores ``coalesce(metadata, '{}')``); the destination's
  ownership marker ``_memworkSource`` is not part of the data. (MariaDB >= 10.7 has
  ``JSON_NORMALIZE``; MySQL 8 has none, so there the source side hashes its rows in Python with these
  same rules -- :class:`~memwork.certify.sides.SourceSide`, ``checksums="python"``.)
* **content**: byte-exact in the checksum (MariaDB has no Unicode normaliser in SQL). When a
  drilled-down row differs only under Unicode NFC, it is reported as a note (``encoding``), not
  as a changed row. The same holds for JSON a source wrote with ``\\uXXXX`` escapes (MariaDB's
  ``JSON_NORMALIZE`` keeps them): its bucket is drilled into and Python, which decodes both, decides --
  correct, at the cost of reading that bucket.
* **vectors** are never hashed: they are compared within :data:`VECTOR_ATOL` (element-wise) or by
  cosine (:mod:`memwork.certify.vectors`), never byte for byte.

A range's checksum is ``(count, sum of hash bits 0-31, sum of hash bits 32-63)`` -- order-free, exact
integer sums on every engine.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

NULL_MARKER = "-"
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"  #: UTC, microseconds
VECTOR_ATOL = 1e-6  #: element-wise tolerance of two vectors said to be equal (float32 round trips)
EXACT_COSINE = 0.999999  #: cosine at or above which a hash-embedder vector counts as its embedding
MODEL_COSINE = 0.999  #: the same for a real (non-deterministic across runtimes) model
OWNER_KEY = "_memworkSource"

#: the compared fields, in canonical order (the names the per-field diffs use)
FIELDS = (
    "key",
    "user",
    "content",
    "type",
    "source_session_id",
    "source_message_id",
    "created_at",
    "updated_at",
    "metadata",
)


# ---- Python ---------------------------------------------------------------------------------------
def field_text(value: str | None) -> str:
    """``<chars>:<value>``, or the NULL marker."""
    return NULL_MARKER if value is None else f"{len(value)}:{value}"


def canonical_timestamp(value: Any) -> str | None:
    """UTC at microsecond precision; naive datetimes and strings are taken as UTC already."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime(TIMESTAMP_FORMAT)
    raise TypeError(f"not a timestamp: {value!r}")


def canonical_number(value: Decimal | int | float | str) -> str:
    """``JSON_NORMALIZE``'s number form from the decimal digits: ``-1.25E2``, ``0.0E0``."""
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    if number == 0:
        return "0.0E0"
    digits = "".join(str(d) for d in number.as_tuple().digits).lstrip("0").rstrip("0") or "0"
    sign = "-" if number < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{number.adjusted()}"


def canonical_string(text: str) -> str:
    """JSON string, UTF-8 as is; only ``"``, ``\\`` and control characters escaped."""
    return json.dumps(text, ensure_ascii=False)


def _emit(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return canonical_string(value)
    if isinstance(value, Decimal | int | float):
        return canonical_number(value)
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: str(k).encode("utf-8"))
        return "{" + ",".join(f"{canonical_string(str(k))}:{_emit(value[k])}" for k in keys) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_emit(v) for v in value) + "]"
    raise TypeError(f"not JSON: {value!r}")


def parse_json(text: str) -> Any:
    """JSON with numbers kept as their decimal digits (never through binary floats)."""
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def canonical_json(value: Any, *, strip_owner: bool = True) -> str:
    """Canonical metadata: a JSON text or an already-parsed value; None and ``{}`` alike."""
    if value is None:
        return "{}"  # SQL NULL; a JSON ``null`` text stays ``null``
    if isinstance(value, str | bytes):
        value = parse_json(value.decode() if isinstance(value, bytes) else value)
    if strip_owner and isinstance(value, Mapping) and OWNER_KEY in value:
        value = {k: v for k, v in value.items() if k != OWNER_KEY}
    return _emit(value)


def canonical_type(value: str | None) -> str:
    return value or "fact"


def canonical_fields(row: Mapping[str, Any]) -> dict[str, str | None]:
    """The compared fields of one row (either side's column names) as canonical text."""
    return {
        "key": _text(row.get("key", row.get("id"))),
        "user": _text(row.get("user", row.get("user_id"))),
        "content": _text(row.get("content")),
        "type": canonical_type(_text(row.get("type"))),
        "source_session_id": _text(row.get("source_session_id")),
        "source_message_id": _text(row.get("source_message_id")),
        "created_at": canonical_timestamp(row.get("created_at")),
        "updated_at": canonical_timestamp(row.get("updated_at")),
        "metadata": canonical_json(row.get("metadata")),
    }


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def canonical_row(row: Mapping[str, Any]) -> str:
    """The canonical row text (what every engine's SQL also produces)."""
    fields = canonical_fields(row)
    return "".join(field_text(fields[name]) for name in FIELDS[:-1]) + ":" + str(fields["metadata"])


def row_hash(row: Mapping[str, Any]) -> str:
    return hashlib.md5(canonical_row(row).encode("utf-8")).hexdigest()


def hash_with_metadata(prefix: str, metadata: Any) -> str:
    """A row's MD5 from its canonical text up to metadata (written in SQL) and its raw metadata."""
    return hashlib.md5(f"{prefix}:{canonical_json(metadata)}".encode()).hexdigest()


def key_md5(key: str) -> str:
    """The hex MD5 of a key's UTF-8 bytes: what ``MD5(id)`` gives in SQL, so buckets split alike."""
    return hashlib.md5(key.encode("utf-8")).hexdigest()


def hash_parts(md5_hex: str) -> tuple[int, int]:
    """The two 32-bit integers a range checksum sums."""
    return int(md5_hex[:8], 16), int(md5_hex[8:16], 16)


def differing_fields(source: Mapping[str, Any], dest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Field -> {source, dest} for every canonical field that differs (content compared under NFC)."""
    a, b = canonical_fields(source), canonical_fields(dest)
    out: dict[str, dict[str, Any]] = {}
    for name in FIELDS:
        if a[name] == b[name]:
            continue
        x, y = a[name], b[name]
        nfc_equal = (
            x is not None
            and y is not None
            and unicodedata.normalize("NFC", x) == unicodedata.normalize("NFC", y)
        )
        if name == "content" and nfc_equal:
            continue
        out[name] = {"source": a[name], "dest": b[name]}
    return out


def nfc_only(source: Mapping[str, Any], dest: Mapping[str, Any]) -> bool:
    """True when the rows' canonical texts differ only by Unicode normalisation of the content."""
    return canonical_row(source) != canonical_row(dest) and not differing_fields(source, dest)


# ---- SQLite: the same functions, registered on the connection --------------------------------------
def register_sqlite(dbapi_connection: Any) -> None:
    """``mw_md5``, ``mw_hex``, ``mw_ts`` and ``mw_json`` on one sqlite3 connection (SQLite has no md5)."""

    def md5(text: str | None) -> str | None:
        return None if text is None else hashlib.md5(str(text).encode("utf-8")).hexdigest()

    def ts(value: str | None) -> str | None:
        return canonical_timestamp(value)

    def meta(value: str | None) -> str:
        return canonical_json(value, strip_owner=False)

    dbapi_connection.create_function("mw_md5", 1, md5, deterministic=True)
    dbapi_connection.create_function("mw_hex", 1, lambda s: int(s, 16), deterministic=True)
    dbapi_connection.create_function("mw_ts", 1, ts, deterministic=True)
    dbapi_connection.create_function("mw_json", 1, meta, deterministic=True)


# ---- PostgreSQL: the same rules as session-local functions (pg_temp: nothing persists) ------------
PG_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION pg_temp.mw_str(s text) RETURNS text LANGUAGE sql IMMUTABLE AS $f$
  SELECT to_json(s)::text
$f$;
CREATE OR REPLACE FUNCTION pg_temp.mw_num(x numeric) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$
DECLARE s text := abs(x)::text; i text; f text; d text; e int;
BEGIN
  IF x = 0 THEN RETURN '0.0E0'; END IF;
  i := split_part(s, '.', 1); f := split_part(s, '.', 2);
  IF i <> '0' THEN e := length(i) - 1; d := i || f;
  ELSE e := -(length(f) - length(ltrim(f, '0')) + 1); d := ltrim(f, '0');
  END IF;
  d := rtrim(d, '0');
  RETURN (CASE WHEN x < 0 THEN '-' ELSE '' END) || left(d, 1) || '.'
    || coalesce(nullif(substr(d, 2), ''), '0') || 'E' || e;
END $f$;
CREATE OR REPLACE FUNCTION pg_temp.mw_json(j jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
  CASE jsonb_typeof(j)
    WHEN 'object' THEN RETURN '{' || coalesce((SELECT string_agg(pg_temp.mw_str(key) || ':'
      || pg_temp.mw_json(value), ',' ORDER BY key COLLATE "C") FROM jsonb_each(j)), '') || '}';
    WHEN 'array' THEN RETURN '[' || coalesce((SELECT string_agg(pg_temp.mw_json(value), ',' ORDER BY n)
      FROM jsonb_array_elements(j) WITH ORDINALITY AS e(value, n)), '') || ']';
    WHEN 'string' THEN RETURN pg_temp.mw_str(j #>> '{}');
    WHEN 'number' THEN RETURN pg_temp.mw_num((j #>> '{}')::numeric);
    ELSE RETURN j::text;
  END CASE;
END $f$;
"""


def install_pg_functions(conn: Any) -> None:
    """Create the canonical functions in this session's ``pg_temp`` schema (gone when it closes)."""
    conn.execute(PG_FUNCTIONS)


STAMP_LENGTH = 26  #: ``YYYY-MM-DD HH:MM:SS.ffffff``


def _pg_field(expr: str, kind: str = "text") -> str:
    if kind == "stamp":  # fixed length: one evaluation, no CASE
        return f"coalesce('{STAMP_LENGTH}:' || {expr}, '-')"
    if kind == "last":
        return f"':' || {expr}"
    return f"CASE WHEN ({expr}) IS NULL THEN '-' ELSE char_length({expr})::text || ':' || ({expr}) END"


def _my_field(expr: str, kind: str = "text") -> str:
    if kind == "stamp":
        return f"COALESCE(CONCAT('{STAMP_LENGTH}:', {expr}), '-')"
    if kind == "last":
        return f"':', {expr}"
    return f"CASE WHEN ({expr}) IS NULL THEN '-' ELSE CONCAT(CHAR_LENGTH({expr}), ':', {expr}) END"


def _lite_field(expr: str, kind: str = "text") -> str:
    if kind == "stamp":
        return f"coalesce('{STAMP_LENGTH}:' || {expr}, '-')"
    if kind == "last":
        return f"':' || {expr}"
    return f"CASE WHEN ({expr}) IS NULL THEN '-' ELSE length({expr}) || ':' || ({expr}) END"


def _pg_scalar(v: str) -> str:
    """A JSON value below the top level: strings, booleans and null print canonically as jsonb text."""
    return (
        f"CASE jsonb_typeof({v}) WHEN 'number' THEN pg_temp.mw_num(({v} #>> '{{}}')::numeric) "
        f"WHEN 'object' THEN pg_temp.mw_json({v}) WHEN 'array' THEN pg_temp.mw_json({v}) ELSE {v}::text END"
    )


def pg_metadata(m: str) -> str:
    """Canonical metadata in plain SQL for objects of scalars and arrays of scalars (the usual shape;
    no PL/pgSQL call per row), :func:`PG_FUNCTIONS`' recursive ``mw_json`` for anything deeper."""
    element = _pg_scalar("e.v")
    level1 = (
        "CASE jsonb_typeof(o.value) WHEN 'array' THEN '[' || coalesce((SELECT string_agg("
        f"{element}, ',' ORDER BY e.n) FROM jsonb_array_elements(o.value) WITH ORDINALITY AS e(v, n)), '') "
        f"|| ']' ELSE {_pg_scalar('o.value')} END"
    )
    return (
        f"(CASE WHEN {m} = '{{}}'::jsonb THEN '{{}}' WHEN jsonb_typeof({m}) = 'object' THEN '{{' || "
        f"coalesce((SELECT string_agg(to_json(o.key)::text || ':' || {level1}, ',' "
        'ORDER BY o.key COLLATE "C") '
        f"FROM jsonb_each({m} - '{OWNER_KEY}') AS o), '') || '}}' ELSE pg_temp.mw_json({m}) END)"
    )


_KINDS = ("text",) * 6 + ("stamp", "stamp", "last")


def pg_row_text(alias: str = "") -> str:
    """The canonical row text of a ``memory_embeddings`` row as PostgreSQL SQL."""
    p = f"{alias}." if alias else ""
    exprs = [
        f"{p}source_memory_id",
        f"{p}user_id",
        f"{p}content",
        f"coalesce(nullif({p}type, ''), 'fact')",
        f"{p}source_session_id",
        f"{p}source_message_id",
        f"to_char({p}created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
        f"to_char({p}updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
        pg_metadata(f"{p}metadata"),
    ]
    return " || ".join(_pg_field(e, k) for e, k in zip(exprs, _KINDS, strict=True))


def source_row_text(dialect: str, *, metadata: bool = True) -> str:
    """The canonical row text of an ``h5_user_memory_items`` row (MariaDB or SQLite SQL).

    ``metadata=False`` stops before the metadata field: the part a MySQL without ``JSON_NORMALIZE``
    still writes in SQL, for Python to finish with :func:`hash_with_metadata`."""
    kinds = _KINDS if metadata else _KINDS[:-1]
    if dialect in ("mysql", "mariadb"):
        exprs = [
            "id",
            "user_id",
            "content",
            "COALESCE(NULLIF(type, ''), 'fact')",
            "source_session_id",
            "source_message_id",
            "DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f')",
            "DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f')",
            "COALESCE(JSON_NORMALIZE(metadata), '{}')",
        ]
        return "CONCAT(" + ", ".join(_my_field(e, k) for e, k in zip(exprs, kinds, strict=False)) + ")"
    if dialect == "sqlite":
        exprs = [
            "id",
            "user_id",
            "content",
            "COALESCE(NULLIF(type, ''), 'fact')",
            "source_session_id",
            "source_message_id",
            "mw_ts(created_at)",
            "mw_ts(updated_at)",
            "mw_json(metadata)",
        ]
        return " || ".join(_lite_field(e, k) for e, k in zip(exprs, kinds, strict=False))
    raise ValueError(f"no canonical row SQL for dialect {dialect}")
