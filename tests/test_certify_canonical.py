"""The canonical serialisation: the documented rules, and the same text from Python and from SQL."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from memwork.certify.canonical import (
    canonical_json,
    canonical_number,
    canonical_row,
    canonical_timestamp,
    differing_fields,
    field_text,
    hash_parts,
    register_sqlite,
    row_hash,
)


@pytest.mark.parametrize(
    ("literal", "expected"),  # MariaDB 10.11's JSON_NORMALIZE output for the same literals
    [
        ("0.1", "1.0E-1"),
        ("123.456", "1.23456E2"),
        ("1e20", "1.0E20"),
        ("12345678901234567890", "1.234567890123456789E19"),
        ("-2.5", "-2.5E0"),
        ("1e-7", "1.0E-7"),
        ("0.30000000000000004", "3.0000000000000004E-1"),
        ("100", "1.0E2"),
        ("-0", "0.0E0"),
        ("7", "7.0E0"),
    ],
)
def test_numbers_keep_their_decimal_digits(literal, expected):
    assert canonical_number(Decimal(literal)) == expected


def test_json_sorted_compact_utf8_and_sql_null_is_empty_object():
    text = '{"b": 1.50, "a": [1, "é", null, true], "c": {"z": 0, "y": "x\\ny"}}'
    assert canonical_json(text) == '{"a":[1.0E0,"é",null,true],"b":1.5E0,"c":{"y":"x\\ny","z":0.0E0}}'
    assert canonical_json(None) == "{}"
    assert canonical_json("null") == "null"
    assert canonical_json('{"_memworkSource": "qdrant:x", "a": 1}') == '{"a":1.0E0}'


def test_timestamps_are_utc_microseconds():
    aware = datetime(2026, 1, 2, 5, 4, 5, 120, tzinfo=timezone(timedelta(hours=2)))
    assert canonical_timestamp(aware) == "2026-01-02 03:04:05.000120"
    assert canonical_timestamp("2026-01-02 03:04:05.5") == "2026-01-02 03:04:05.500000"
    assert canonical_timestamp(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02 00:00:00.000000"


def test_fields_are_length_prefixed_so_no_separator_can_be_forged():
    assert field_text(None) == "-"
    assert field_text("") == "0:"
    a = {"id": "k", "user_id": "u", "content": "1:x", "type": "fact"}
    b = {"id": "k", "user_id": "u", "content": "1", "type": ":xfact"}
    assert canonical_row(a) != canonical_row(b)


def test_empty_type_is_fact_and_content_nfc_differences_are_not_changes():
    base = {"id": "k", "user_id": "u", "content": "Cafe\u0301", "type": ""}
    nfc = {**base, "content": "Café", "type": "fact"}
    assert differing_fields(base, nfc) == {}
    assert differing_fields(base, {**nfc, "user_id": "v"}) == {"user": {"source": "u", "dest": "v"}}


def test_sqlite_functions_give_the_python_text():
    conn = sqlite3.connect(":memory:")
    register_sqlite(conn)
    from memwork.certify.canonical import source_row_text

    conn.execute(
        "CREATE TABLE h (id TEXT, user_id TEXT, content TEXT, type TEXT, source_session_id TEXT, "
        "source_message_id TEXT, created_at TEXT, updated_at TEXT, metadata TEXT)"
    )
    row = {
        "id": "k1",
        "user_id": "u",
        "content": "héllo 用户",
        "type": "goal",
        "source_session_id": None,
        "source_message_id": "9",
        "created_at": "2026-01-02 03:04:05.000001",
        "updated_at": "2026-01-02 03:04:06.000000",
        "metadata": '{"tags": ["a", 2.50], "x": {"b": 1, "a": null}}',
    }
    conn.execute(
        "INSERT INTO h VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        tuple(
            row[c]
            for c in (
                "id",
                "user_id",
                "content",
                "type",
                "source_session_id",
                "source_message_id",
                "created_at",
                "updated_at",
                "metadata",
            )
        ),
    )
    (got,) = conn.execute(f"SELECT mw_md5({source_row_text('sqlite')}) FROM h").fetchone()
    assert got == row_hash(row)
    assert hash_parts(got)[0] < 2**32


def test_the_design_doc_names_the_same_rules_and_constants_as_the_code():
    """docs/design.md's "Canonical serialisation" states each constant with the code's value and the
    fields in the code's order (a change to one without the other fails here)."""
    import re
    from pathlib import Path

    from memwork.certify import canonical
    from memwork.certify.vectors import STALE_COSINE

    doc = (Path(__file__).parents[1] / "docs" / "design.md").read_text()
    section = doc.split("### Canonical serialisation", 1)[1].split("\n### ", 1)[0]
    stated = dict(re.findall(r"`([A-Z_]+)` =\s+`([^`]+)`", section))
    assert stated["NULL_MARKER"] == canonical.NULL_MARKER
    assert stated["TIMESTAMP_FORMAT"] == canonical.TIMESTAMP_FORMAT
    assert stated["OWNER_KEY"] == canonical.OWNER_KEY
    for name, value in {
        "VECTOR_ATOL": canonical.VECTOR_ATOL,
        "EXACT_COSINE": canonical.EXACT_COSINE,
        "MODEL_COSINE": canonical.MODEL_COSINE,
        "STALE_COSINE": STALE_COSINE,
    }.items():
        assert float(stated[name]) == value, name
    fields = section.split("**Fields, in order**:", 1)[1].split("(`FIELDS`)", 1)[0]
    assert tuple(re.findall(r"`([a-z_]+)`", fields)) == canonical.FIELDS
    migration = (Path(__file__).parents[1] / "docs" / "migration.md").read_text()
    assert "(design.md#canonical-serialisation)" in migration  # linked from the verify section
