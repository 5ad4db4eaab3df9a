"""Synthetic ``h5_user_memory_items`` rows for backfill tests and benchmarks, and a fast MySQL loader.

Deterministic for a seed. Timestamps are deliberately coarse (many rows share an ``updated_at``) so
the ``(updated_at, id)`` keyset is exercised on ties. Prefers ``memwork.synth.generate_legacy_items``
when it exists, so the whole project shares one data generator.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from memwork.legacy.schema import ITEM_TYPES, memory_items

_SUBJECTS = ["the user", "my manager", "our team", "the backend", "the deploy job", "the test suite"]
_VERBS = ["prefers", "needs", "avoids", "uses", "migrates", "documents", "caches", "retries"]
_OBJECTS = [
    "postgres indexes",
    "python type hints",
    "vector search",
    "dark mode",
    "weekly reports",
    "green tea",
    "rust async runtimes",
    "kubernetes jobs",
    "mysql replication",
    "offline embeddings",
    "数据库索引",
    "向量检索",
]
_REASONS = ["because it is faster", "after the outage", "for reproducibility", "to keep costs down", ""]


def legacy_items(
    n_users: int, items_per_user: int, seed: int = 0, *, start: datetime | None = None
) -> list[dict[str, Any]]:
    """``n_users * items_per_user`` active item rows as dicts with the legacy columns."""
    rng = random.Random(seed)
    base = start or datetime(2024, 1, 1)
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        for i in range(items_per_user):
            created = base + timedelta(seconds=rng.randint(0, 86_400 * 30))
            updated = created + timedelta(seconds=rng.randint(0, 3600) // 600 * 600)  # coarse: ties
            content = (
                f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
                f"{rng.choice(_REASONS)} (note {u}-{i})"
            ).replace("  ", " ")
            rows.append(
                {
                    "id": f"mem-{seed}-{u:05d}-{i:05d}-{rng.getrandbits(32):08x}",
                    "user_id": f"user-{u:05d}",
                    "content": content,
                    "type": rng.choice(ITEM_TYPES),
                    "status": "active",
                    "confidence": round(rng.random(), 3),
                    "metadata": {"tags": [rng.choice(["work", "home", "tools"])], "n": i} if i % 3 else None,
                    "source_session_id": f"sess-{u}-{i // 10}",
                    "source_message_id": str(rng.getrandbits(40)),
                    "created_at": created,
                    "updated_at": updated,
                }
            )
    return rows


def load_legacy_items(mysql_url: str, rows: Iterable[Mapping[str, Any]], chunk: int = 5000) -> int:
    """Create ``h5_user_memory_items`` when missing and bulk-insert ``rows``; returns rows inserted."""
    from memwork.db import get_engine

    engine = get_engine(mysql_url)
    memory_items.create(engine, checkfirst=True)
    columns = [c.name for c in memory_items.columns]
    placeholders = ", ".join(["%s"] * len(columns))
    sql = f"INSERT INTO {memory_items.name} ({', '.join(columns)}) VALUES ({placeholders})"
    total = 0
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append([_mysql_value(row.get(c)) for c in columns])
            if len(batch) >= chunk:
                total += _flush(cur, sql, batch)
        total += _flush(cur, sql, batch)
        raw.commit()
    finally:
        raw.close()
    return total


def _flush(cur: Any, sql: str, batch: list[Sequence[Any]]) -> int:
    if batch:
        cur.executemany(sql, batch)
    n = len(batch)
    batch.clear()
    return n


def _mysql_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value
