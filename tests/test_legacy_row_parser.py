"""The legacy source's rows as PyMySQL's own DictCursor returns them: every length prefix (1, 3 and 4
bytes), NULL, multi-byte text, a NUL character and a zero date must come back through the migration's
read path (memwork/migrate/legacy_mysql.py ``_fetch_rows``) as the driver's cursor gives them."""

from __future__ import annotations

from urllib.parse import urlsplit

import pymysql
from sqlalchemy import text

from memwork.db import get_engine
from memwork.migrate.legacy_mysql import LegacyMySQLSource
from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

#: content lengths around each of the protocol's length prefixes (bytes: "é" is two in UTF-8)
LENGTHS = (0, 1, 125, 126, 250, 251, 252, 32767, 32768, 40000)


def _cursor_rows(mysql_url: str) -> list[dict]:
    """The same columns, in the same order, through PyMySQL's DictCursor (the reference)."""
    parts = urlsplit(mysql_url)
    conn = pymysql.connect(
        host=parts.hostname, port=parts.port, user=parts.username, password="", database=parts.path[1:]
    )
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(
                f"SELECT id, user_id, content, type, metadata, source_session_id, source_message_id, "
                f"CAST(created_at AS CHAR) AS created_at, CAST(updated_at AS CHAR) AS updated_at "
                f"FROM {ITEMS} WHERE status = 'active' ORDER BY updated_at, id"
            )
            return list(cur.fetchall())
    finally:
        conn.close()


def test_rows_read_are_the_drivers_own_at_every_length_prefix(mysql_url: str) -> None:
    rows = generate_legacy_items(1, len(LENGTHS) + 4, seed=7, active_only=True)
    for row, length in zip(rows, LENGTHS, strict=False):
        row["content"] = ("é" * length)[:length]
    rows[-4]["content"] = "a NUL \x00 inside, emoji 😀, CJK 東京"
    rows[-3]["metadata"] = None
    rows[-3]["source_session_id"] = None
    rows[-3]["source_message_id"] = None
    load_legacy_rows(mysql_url, ITEMS, rows)
    with get_engine(mysql_url).begin() as conn:
        conn.execute(text("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'"))
        conn.execute(
            text(f"UPDATE {ITEMS} SET updated_at = '0000-00-00 00:00:00' WHERE id = :id"),
            {"id": rows[-2]["id"]},
        )
    source = LegacyMySQLSource(mysql_url)
    try:
        read, cursor = [], None
        while True:
            page = source.read_rows(cursor, 3)
            if not page.rows:
                break
            read += page.rows
            cursor = page.next_cursor
        by_id = source.rows_by_id([row["id"] for row in rows])
    finally:
        source.close()
    expected = _cursor_rows(mysql_url)
    assert len(expected) == len(rows)
    assert read == expected
    assert {key: row for key, (_, row) in by_id.items()} == {row["id"]: row for row in expected}
    lengths = {len(row["content"].encode()) for row in read}
    assert {0, 250, 252, 65534, 80000} <= lengths  # 1-byte, 3-byte (0xfc) and 4-byte (0xfd) prefixes
