"""Synthetic legacy MySQL rows (``h5_user_memory_items``, ``h5_conversation_messages``) and their loader.

One generator for legacy memory items (the backfill tests, the benchmarks, the notebooks' sample migration
and the demo all use it) and one loader, so every caller exercises the same shapes: string ids, mostly active
rows, per-user exact duplicates, near duplicates, paraphrases and ~5% Chinese.
"""

from __future__ import annotations

import itertools
import json
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memwork.entry import utcnow
from memwork.samples.entries import TAGS, pick, weighted

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine.interfaces import DBAPICursor

LEGACY_FACTS: dict[str, list[str]] = {
    "preference": ["prefers {a} over {b}", "likes {a}", "dislikes {b}", "would rather use {a} than {b}"],
    "profile": ["name is {name}", "lives in {city}", "works as a {job}", "is {age} years old"],
    "goal": ["wants to {goal}", "is planning to {goal}", "hopes to {goal} this year"],
    "fact": ["has a {pet} named {name}", "is allergic to {food}", "drives a {car}"],
    "event": ["travelled to {city} in {month}", "started a new job in {month}", "moved to {city}"],
    "skill": ["speaks {lang}", "is learning {lang}", "knows how to {goal}"],
    "note": ["mentioned {a} twice", "asked about {food} recipes", "was unhappy with {b}"],
}
LEGACY_ZH: dict[str, list[str]] = {
    "preference": ["喜欢{a_zh}", "不喜欢{b_zh}", "更喜欢{a_zh}而不是{b_zh}"],
    "profile": ["名字叫{name}", "住在{city_zh}"],
    "goal": ["想要学习{lang_zh}", "打算去{city_zh}旅行"],
}
_FILL = {
    "a": ["dark mode", "green tea", "window seats", "morning meetings", "vim", "short answers", "jazz"],
    "b": ["light mode", "coffee", "aisle seats", "late meetings", "emacs", "long answers", "techno"],
    "name": ["Alice", "Bo", "Chen Wei", "Dana", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jun"],
    "city": ["Berlin", "Shanghai", "Lagos", "Lima", "Osaka", "Toronto", "Porto", "Nairobi"],
    "job": ["nurse", "data engineer", "teacher", "chef", "pilot", "lawyer", "designer"],
    "age": [str(a) for a in range(19, 71)],
    "goal": ["run a marathon", "learn the piano", "save for a house", "write a novel", "get fit"],
    "pet": ["cat", "dog", "parrot", "rabbit"],
    "food": ["peanuts", "shellfish", "gluten", "lactose", "sesame"],
    "car": ["Tesla", "Volvo", "bicycle", "Toyota"],
    "month": ["January", "April", "June", "August", "October", "December"],
    "lang": ["Spanish", "Mandarin", "French", "German", "Japanese"],
    "a_zh": ["深色模式", "绿茶", "靠窗的座位", "爵士乐"],
    "b_zh": ["浅色模式", "咖啡", "靠过道的座位", "长篇回答"],
    "city_zh": ["上海", "北京", "成都", "杭州"],
    "lang_zh": ["西班牙语", "日语", "法语"],
}
_LEGACY_PREFIX = ["User", "The user", "This user", "Customer"]
_LEGACY_PARA = {
    "prefers": "would pick",
    "likes": "enjoys",
    "wants to": "would like to",
    "lives in": "is based in",
}
_ITEM_TYPES = list(LEGACY_FACTS)
_ITEM_CUM = list(itertools.accumulate([25, 15, 15, 20, 10, 8, 7]))
_STATUSES = ("active", "archived", "deleted")
_STATUS_CUM = [85, 95, 100]


class _Fill(dict):
    """Template values drawn only for the placeholders a template uses."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, key: str) -> str:
        value = self[key] = pick(self.rng, _FILL[key])
        return value


def _legacy_text(rng: random.Random, itype: str, chinese: bool) -> str:
    fill = _Fill(rng)
    if chinese and itype in LEGACY_ZH:
        return "用户" + pick(rng, LEGACY_ZH[itype]).format_map(fill)
    return f"{pick(rng, _LEGACY_PREFIX)} {pick(rng, LEGACY_FACTS[itype]).format_map(fill)}."


def _legacy_near(rng: random.Random, text: str) -> str:
    if text.startswith("用户"):
        return text + pick(rng, ["。", "！", "（确认过）"])
    for old, new in _LEGACY_PARA.items():
        if old in text and rng.random() < 0.6:
            return text.replace(old, new, 1)
    return text.rstrip(".") + pick(rng, [" (confirmed).", " again.", ", apparently."])


def generate_legacy_items(
    n_users: int,
    items_per_user: int,
    *,
    seed: int = 0,
    now: datetime | None = None,
    active_only: bool = False,
) -> list[dict[str, Any]]:
    """Rows for ``h5_user_memory_items``: string ids, mostly active (some archived/deleted), with
    per-user exact duplicates, near duplicates, paraphrases and ~5% Chinese. Timestamps are naive
    UTC datetimes (the column type); pass ``now`` for byte-identical output.

    ``active_only``: every row ``active`` (the backfill tests count what must arrive); the other
    values are drawn exactly as without it, so the two differ only in ``status``."""
    rng = random.Random(seed)
    now = (now or utcnow()).astimezone(UTC).replace(tzinfo=None)
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        user_id = f"user-{u:06d}"
        mine: list[dict[str, Any]] = []
        for k in range(items_per_user):
            roll = rng.random()
            if mine and roll < 0.05:
                source = pick(rng, mine)
                content, itype = source["content"], source["type"]
            elif mine and roll < 0.12:
                source = pick(rng, mine)
                content, itype = _legacy_near(rng, source["content"]), source["type"]
            else:
                itype = weighted(rng, _ITEM_TYPES, _ITEM_CUM)
                content = _legacy_text(rng, itype, chinese=roll > 0.95)
            row = legacy_row(rng, user_id, k, content, itype, now)
            if active_only:
                row["status"] = "active"
            mine.append(row)
            rows.append(row)
    return rows


def legacy_row(
    rng: random.Random, user_id: str, k: int, content: str, itype: str, now: datetime
) -> dict[str, Any]:
    """One legacy row around ``content``: id, timestamps, status, confidence, metadata and session drawn
    from ``rng`` (the real-text sample, :mod:`memwork.samples.real_text`, shares it)."""
    updated = now - timedelta(seconds=rng.randint(0, 400 * 86400), microseconds=rng.randint(0, 999_999))
    created = updated - timedelta(seconds=rng.randint(0, 30 * 86400))
    status = weighted(rng, _STATUSES, _STATUS_CUM)
    roll = rng.random()
    if roll < 0.2:
        metadata: dict[str, Any] | None = None
    elif roll < 0.4:
        metadata = {}
    else:
        metadata = {"source": pick(rng, ["chat", "import", "profile_form"]), "tags": rng.sample(TAGS, 2)}
        if content.startswith("用户"):
            metadata["language"] = "zh"
    session = f"{user_id}-s{rng.randint(0, 40):03d}"
    return {
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "user_id": user_id,
        "content": content,
        "type": itype,
        "status": status,
        "confidence": round(rng.uniform(0.3, 1.0), 2),
        "metadata": metadata,
        "source_session_id": session if rng.random() < 0.9 else None,
        "source_message_id": str(rng.getrandbits(40)) if rng.random() < 0.8 else None,
        "created_at": created,
        "updated_at": updated,
    }


_STATEMENTS = [
    "I prefer {a} over {b}.",
    "My name is {name}.",
    "I want to {goal}.",
    "I live in {city} these days.",
    "I work as a {job}.",
    "I'm allergic to {food}, please remember that.",
    "I have a {pet} called {name}.",
    "Honestly I really like {a}.",
    "我喜欢{a_zh}。",
    "我住在{city_zh}。",
]
_QUESTIONS = [
    "Can you suggest something for dinner?",
    "What's the weather like in {city}?",
    "How do I get started with {lang}?",
    "Any tips to {goal}?",
    "Remind me what we talked about last time.",
    "这个周末有什么推荐吗？",
]
_REPLIES = [
    "Got it, I'll keep that in mind.",
    "Thanks for telling me!",
    "Here are a few ideas you might like.",
    "Sure - let's take it step by step.",
    "明白了，我会记住的。",
]


def generate_conversations(
    n_users: int, sessions_per_user: int, *, seed: int = 0, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Rows for ``h5_conversation_messages`` (user_id, session_id, role, content, created_at), in
    order: alternating user/assistant turns where about half the user turns state something about
    themselves ("I prefer...", "My name is...", "我喜欢..."). Naive UTC timestamps."""
    rng = random.Random(seed)
    now = (now or utcnow()).astimezone(UTC).replace(tzinfo=None)
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        user_id = f"user-{u:06d}"
        for s in range(sessions_per_user):
            session_id = f"{user_id}-s{s:03d}"
            at = now - timedelta(days=rng.uniform(1, 180))
            for _ in range(rng.randint(2, 6)):
                fill = _Fill(rng)
                pool = _STATEMENTS if rng.random() < 0.5 else _QUESTIONS
                for role, text in (("user", pick(rng, pool)), ("assistant", pick(rng, _REPLIES))):
                    at += timedelta(seconds=rng.randint(5, 300), microseconds=rng.randint(0, 999_999))
                    rows.append(
                        {
                            "user_id": user_id,
                            "session_id": session_id,
                            "role": role,
                            "content": text.format_map(fill),
                            "created_at": at,
                        }
                    )
    return rows


ITEMS = "h5_user_memory_items"
"""The legacy memory-items table (:data:`memwork.legacy.schema.memory_items`)."""
MESSAGES = "h5_conversation_messages"
"""The legacy conversation-messages table (:data:`memwork.legacy.schema.messages`)."""


def load_legacy_rows(
    url: str,
    table: str,
    rows: Iterable[Mapping[str, Any]],
    *,
    replace: bool = False,
    chunk: int = 5000,
) -> int:
    """Create the legacy tables at ``url`` when missing and insert ``rows`` into ``table``; returns
    the rows inserted. ``replace`` empties ``table`` first (a rebuild is a clean copy).

    On MySQL/MariaDB the rows go through the DBAPI's ``executemany`` (JSON encoded here): benchmarks load
    millions of rows. Elsewhere (SQLite) through SQLAlchemy Core, whose JSON type encodes them."""
    from memwork.db import get_engine
    from memwork.legacy.schema import metadata

    engine = get_engine(url)
    metadata.create_all(engine)
    target = metadata.tables[table]
    if replace:
        with engine.begin() as conn:
            conn.execute(target.delete())
    if engine.dialect.name not in ("mysql", "mariadb"):
        total = 0
        with engine.begin() as conn:
            batch: list[Mapping[str, Any]] = []
            for row in rows:
                batch.append(row)
                if len(batch) >= chunk:
                    conn.execute(target.insert(), batch)
                    total, batch = total + len(batch), []
            if batch:
                conn.execute(target.insert(), batch)
                total += len(batch)
        return total
    # every column but an autoincrement key (the messages' id): the server numbers those
    columns = [c.name for c in target.columns if not (c.primary_key and c.autoincrement is True)]
    return _load_mysql(engine, target.name, columns, rows, chunk)


def _load_mysql(
    engine: Engine, name: str, columns: list[str], rows: Iterable[Mapping[str, Any]], chunk: int
) -> int:
    placeholders = ", ".join(["%s"] * len(columns))
    sql = f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({placeholders})"
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


def _flush(cur: DBAPICursor, sql: str, batch: list[Sequence[Any]]) -> int:
    if batch:
        cur.executemany(sql, batch)
    n = len(batch)
    batch.clear()
    return n


def _mysql_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value
