"""Issue 20: legacy resolve on MariaDB in one round trip (:mod:`memwork.legacy.reader`), run inline on
the caller's thread, still fail-open by the deadline -- a read blocked by a table lock is ended by the
server (``max_statement_time``) or, without it, by the watchdog's socket shutdown -- and a connection
the server dropped between calls is retried once and answered.

Deadlines are judged with :func:`deadlines.within_deadline` (derived from the configured deadline)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deadlines import within_deadline
from sqlalchemy import insert

from memwork.db import get_engine
from memwork.facade.facade import facade_from_env
from memwork.legacy.reader import PROFILE_LIMIT
from memwork.legacy.schema import init_schema, memory_items
from memwork.legacy.store import LegacyMemoryStore

TIMEOUT_MS = 500


def _rows() -> list[dict[str, Any]]:
    start = datetime(2025, 1, 1)
    kinds = ["fact", "preference", "profile", "goal"]
    rows = []
    for user in ("u1", "U1", "u1 ", "u2"):  # look-alike ids are other tenants
        for j in range(12):
            kind = kinds[j % len(kinds)]
            rows.append(
                {
                    "id": f"{user.strip()}-{user != user.strip()}-{user.isupper()}-{j}",
                    "user_id": user,
                    "content": f"{kind} {j} of {user!r}",
                    "type": kind,
                    "status": "archived" if j == 5 else "active",
                    "metadata": {"key": f"k{j % 3}", "value": j} if kind == "profile" else None,
                    "created_at": start + timedelta(minutes=j),
                    "updated_at": start + timedelta(minutes=j if j != 7 else 100),  # 7 is the newest
                }
            )
    return rows


@pytest.fixture
def loaded(mysql_url: str) -> str:
    init_schema(mysql_url, apply=True)
    with get_engine(mysql_url).begin() as conn:
        conn.execute(insert(memory_items), _rows())
    return mysql_url


def _facade(url: str, tmp_path: Path, timeout_ms: int = TIMEOUT_MS) -> Any:
    return facade_from_env(
        {
            "MEMORY_BACKEND": "legacy",
            "MEMORY_LEGACY_DATABASE_URL": url,
            "MEMORY_BACKEND_TIMEOUT_MS": str(timeout_ms),
            "MEMWORK_HOME": str(tmp_path / "home"),
        }
    )


def _admin() -> pymysql.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)


def test_one_statement_answers_as_the_three_selects_did(loaded: str) -> None:
    store = LegacyMemoryStore(loaded)
    assert store.reader is not None
    try:
        with store.engine.connect() as conn:
            expected = [
                store._active(conn, "u1", limit=5),
                store._active(conn, "u1", "profile", PROFILE_LIMIT),
                store._active(conn, "u1", "goal", PROFILE_LIMIT),
            ]
        got = store.reader.read("u1", 5)
        assert got == expected
        assert all(row["user_id"] == "u1" for part in got for row in part)  # never U1 or 'u1 '
        assert got[0][0]["id"].endswith("-7")  # newest first
        assert store.resolve("nobody", 5)["memories"] == []
    finally:
        store.close()


def test_resolve_runs_inline_after_the_first_call(loaded: str, tmp_path: Path) -> None:
    facade = _facade(loaded, tmp_path, timeout_ms=20_000)
    try:
        first = facade.resolve({"userId": "u1", "limit": 5})  # opens the read path: on a worker
        second = facade.resolve({"userId": "u1", "limit": 5})
        assert first == second and second["ok"] and len(second["memories"]) == 5
        workers = facade.status()["workers"]
        assert workers["submitted"] == 1 and workers["inline"] == {"calls": 1, "timedOut": 0}
    finally:
        facade.close()


def test_a_connection_dropped_between_calls_is_retried_once(loaded: str, tmp_path: Path) -> None:
    facade = _facade(loaded, tmp_path, timeout_ms=20_000)
    reader = facade.registry.find("legacy").store.reader
    try:
        assert facade.resolve({"userId": "u1", "limit": 3})["ok"]
        ((_, idle),) = reader._idle
        admin = _admin()
        with admin.cursor() as cur:
            cur.execute(f"KILL {idle.thread_id()}")  # the server drops the idle connection
        admin.close()
        answer = facade.resolve({"userId": "u1", "limit": 3})
        assert answer["ok"], answer
        assert len(answer["memories"]) == 3
        assert reader.counters["retried"] == 1 and reader.counters["connects"] == 2
    finally:
        facade.close()


@pytest.mark.parametrize("on_server", [True, False], ids=["max_statement_time", "watchdog-only"])
def test_a_read_blocked_by_a_table_lock_is_answered_fail_open_by_the_deadline(
    loaded: str, tmp_path: Path, on_server: bool
) -> None:
    """Another session holds a write lock on the items table: the read waits for it. The server's
    ``max_statement_time`` ends the wait, or -- without it -- the watchdog shuts the socket down."""
    facade = _facade(loaded, tmp_path)
    reader = facade.registry.find("legacy").store.reader
    budget = TIMEOUT_MS / 1000
    database = loaded.rsplit("/", 1)[1]
    try:
        assert facade.resolve({"userId": "u1"})["ok"]  # opens the read path (on a worker)
        reader.bound_on_server = on_server
        locker = _admin()
        with locker.cursor() as cur:
            cur.execute(f"LOCK TABLES `{database}`.h5_user_memory_items WRITE")
        try:
            started = time.monotonic()
            answer = facade.resolve({"userId": "u1"})
            took = time.monotonic() - started
        finally:
            with locker.cursor() as cur:
                cur.execute("UNLOCK TABLES")
            locker.close()
        assert answer["ok"] is False and answer["source"] == "legacy-conversation-memory"
        assert f"timed out after {TIMEOUT_MS} ms" in answer["reason"], answer
        assert within_deadline(took, budget)
        assert facade.status()["workers"]["inline"]["timedOut"] == 1
        for _ in range(50):  # the aborted connection was closed; a new one serves the next call
            if facade.resolve({"userId": "u1"})["ok"]:
                break
            time.sleep(budget / 5)
        else:
            pytest.fail("legacy resolve never recovered after the lock")
    finally:
        facade.close()


def test_more_concurrent_reads_than_connections_wait_for_one_without_a_deadline(loaded: str) -> None:
    """Outside a bounded call a read waits for a free connection slot (no deadline to bound it)."""
    from concurrent.futures import ThreadPoolExecutor

    from memwork.legacy.reader import MAX_OPEN

    store = LegacyMemoryStore(loaded)
    reader = store.reader
    assert reader is not None
    try:
        with ThreadPoolExecutor(2 * MAX_OPEN) as pool:
            answers = list(pool.map(lambda _: reader.read("u2", 4), range(4 * MAX_OPEN)))
        assert all(answer == answers[0] for answer in answers) and len(answers[0][0]) == 4
    finally:
        store.close()


def test_each_part_is_newest_first_whatever_order_the_union_arrives_in() -> None:
    """SQL promises no order for a UNION ALL's rows: the reader sorts each part by its keyset again,
    so a server that interleaves or reverses the parts still gives the three SELECTs' answers."""
    import random

    from memwork.legacy.reader import _COLUMNS, _split

    start = datetime(2025, 1, 1)
    rows = []
    for part in (0, 1, 2):
        for k in range(6):
            item = {name: None for name in _COLUMNS}
            # ties on updated_at are broken by id, as the (updated_at, id) keyset does
            item.update(id=part * 100 + k, updated_at=start + timedelta(minutes=k // 2), metadata="{}")
            rows.append((part, *(item[name] for name in _COLUMNS)))
    expected = _split(tuple(rows))
    for seed in range(5):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        assert _split(tuple(shuffled)) == expected
    for part in expected:
        keys = [(item["updated_at"], item["id"]) for item in part]
        assert keys == sorted(keys, reverse=True) and len(keys) == 6
