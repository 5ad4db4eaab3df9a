"""Deterministic synthetic data: agent memories, legacy memory items and conversations.

The demo, the tests and the benchmarks need stores that look like real ones -- uneven metadata, exact
and near duplicates, paraphrases, junk, stale entries, stubs, some Chinese -- without shipping data.
Everything is drawn from one seeded generator, so the same seed and ``now`` give the same output.
Texts are templates x vocabulary, so finding the planted duplicates is not trivial.
"""

from __future__ import annotations

import bisect
import itertools
import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from memwork.embed import Embedder, HashEmbedder
from memwork.entry import Entry, utcnow, validate_scope

# ---- vocabulary -----------------------------------------------------------------------------------
DOMAINS: dict[str, list[str]] = {
    "programming/python": [
        "asyncio",
        "dataclasses",
        "type hints",
        "generators",
        "context managers",
        "pytest",
    ],
    "programming/ruby": ["blocks", "modules", "mixins", "refinements", "bundler", "rspec"],
    "databases/postgresql": ["vacuum", "hnsw indexes", "jsonb", "connection pooling", "partitioning", "wal"],
    "databases/mysql": ["innodb", "replication lag", "utf8mb4", "online ddl", "binlog", "deadlocks"],
    "devops/kubernetes": ["liveness probes", "helm charts", "resource limits", "ingress", "node pools"],
    "ml/embeddings": ["cosine similarity", "vector normalisation", "batch encoding", "model drift"],
    "project/memwork": ["the defrag engine", "the backfill job", "the facade", "the report runner"],
    "user/preferences": ["code review style", "commit messages", "meeting times", "editor theme"],
}
QUALITIES = [
    "fast",
    "reliable",
    "simple",
    "strict",
    "lazy",
    "thread-safe",
    "idempotent",
    "expensive",
    "fragile",
]
VERBS = ["uses", "needs", "avoids", "prefers", "caches", "validates", "retries", "logs", "locks", "batches"]
OBJECTS = [
    "the connection pool",
    "every request",
    "a background worker",
    "the primary key",
    "large payloads",
    "stale entries",
    "the audit journal",
    "cold caches",
    "the migration script",
    "user sessions",
    "nightly jobs",
    "the staging cluster",
]
REASONS = [
    "otherwise timeouts pile up",
    "the vendor docs recommend it",
    "it halves the memory use",
    "we were bitten by it in production",
    "tests become deterministic",
    "the latency budget is tight",
    "it keeps the schema portable",
    "on-call asked for it",
]
SYNONYMS = {
    "uses": "relies on",
    "needs": "requires",
    "avoids": "steers clear of",
    "prefers": "favours",
    "fast": "quick",
    "simple": "straightforward",
    "reliable": "dependable",
    "large": "big",
    "every": "each",
    "otherwise": "or else",
    "important": "crucial",
    "always": "consistently",
}
ZH_SUBJECTS = ["数据库索引", "向量检索", "缓存策略", "代码评审", "部署流程", "日志系统", "用户偏好"]
ZH_FACTS = [
    "需要定期维护",
    "可以显著提升性能",
    "在高并发下容易出错",
    "必须保持幂等",
    "由运维团队负责",
    "依赖配置中心",
]
ZH_REASONS = ["否则会超时", "这是官方推荐的做法", "上次线上事故就是因为它", "这样测试更稳定"]
LOW_QUALITY = [
    "todo",
    "see above",
    "misc notes",
    "fix later",
    "tmp",
    "asdf",
    "???",
    "ok",
    "note to self: check",
]
TAGS = ["performance", "gotcha", "howto", "decision", "incident", "config", "testing", "security", "api"]
ENTRY_TYPES = ("concept", "fact", "skill", "experience")
CONFIDENCE = ("high", "medium", "low")

_TEMPLATES = {
    "concept": [
        "{S} is {q} by design. It {v} {o}, because {r}.",
        "In {d}, {s} means a {q} way to handle {o}; it {v} them because {r}.",
    ],
    "fact": [
        "Our setup for {s} {v} {o}. This is {q} and {r}.",
        "Fact: {s} {v} {o} in {d}; {r}.",
    ],
    "skill": [
        "To tune {s}, first check {o}, then make it {q}. Remember it {v} {o2} because {r}.",
        "How to handle {s}: start from {o}, keep it {q}, and note that it {v} {o2}.",
    ],
    "experience": [
        "Last {m} the team changed {s} so that it {v} {o}. Result: it became {q}, {r}.",
        "During an incident in {m}, {s} {v} {o}; we learned it must stay {q} because {r}.",
    ],
}
_PARAPHRASES = [
    "Note on {s}: because {r}, it {v} {o} and stays {q}.",
    "{S}: {q}. Reason: {r}. It {v} {o}.",
    "Remember that {o} is what {s} {v}; keeping it {q} matters since {r}.",
]
_MONTHS = ["January", "March", "May", "July", "September", "November"]


def _pick(rng: random.Random, items: Sequence[Any]) -> Any:
    """``rng.choice`` at a third of the cost (one C call); 100k items must take seconds."""
    return items[int(rng.random() * len(items))]


def generate_entries(
    n: int,
    *,
    scopes: Sequence[str] = ("default",),
    seed: int = 0,
    embedder: Embedder | None = None,
    now: datetime | None = None,
) -> list[Entry]:
    """``n`` realistic agent memories spread over ``scopes``, with planted problems for defrag:
    ~4% exact duplicates, ~5% near duplicates (a word or two changed), ~3% paraphrases, ~5% junk,
    ~10% stale (months old, no hits), ~2% stubs, ~5% Chinese. Embeddings come from ``embedder``
    (default ``HashEmbedder(384)``); stubs and ~2% of entries have none.

    Pass ``now`` for byte-identical output; it defaults to the current time so ages look real.
    """
    rng = random.Random(seed)
    now = (now or utcnow()).astimezone(UTC)
    scopes = [validate_scope(s) for s in scopes] or ["default"]
    by_scope: dict[str, list[Entry]] = {s: [] for s in scopes}
    paraphrases: dict[tuple[str, str], str] = {}
    entries: list[Entry] = []
    for i in range(n):
        scope = scopes[i % len(scopes)]
        entry = _make_entry(rng, i, scope, by_scope[scope], paraphrases, now)
        by_scope[scope].append(entry)
        entries.append(entry)
    _link_related(rng, by_scope)
    _embed(entries, embedder or HashEmbedder(384), rng)
    return entries


def _make_entry(
    rng: random.Random,
    i: int,
    scope: str,
    earlier: list[Entry],
    paraphrases: dict[tuple[str, str], str],
    now: datetime,
) -> Entry:
    """One entry: a stub, an exact/near duplicate or paraphrase of a recent one, junk, or fresh."""
    roll = rng.random()
    candidates = (
        [e for e in (_pick(rng, earlier[-200:]) for _ in range(3)) if not e.is_stub and e.size > 40]
        if earlier
        else []
    )
    if candidates and roll < 0.02:
        return _stub(rng, i, scope, _pick(rng, candidates), now)
    if candidates and roll < 0.06:
        source = _pick(rng, candidates)
        return _variant(rng, i, scope, source, source.content, now)
    if candidates and roll < 0.11:
        source = _pick(rng, candidates)
        return _variant(rng, i, scope, source, _near_duplicate(rng, source.content), now)
    if candidates and roll < 0.14:
        source = _pick(rng, candidates)
        if source.key in paraphrases:
            return _variant(rng, i, scope, source, paraphrases.pop(source.key), now)
    if roll < 0.19:
        return _junk(rng, i, scope, now)
    entry, paraphrase = _fresh(rng, i, scope, now, chinese=roll > 0.95)
    paraphrases[entry.key] = paraphrase
    return entry


class _Slots(dict):
    """Template values for one memory, drawn only when a template uses them."""

    def __init__(self, rng: random.Random, domain: str) -> None:
        super().__init__(d=domain)
        self.rng = rng
        self.domain = domain

    def __missing__(self, key: str) -> str:
        if key == "S":
            subject = self["s"]
            value = subject[0].upper() + subject[1:]
        else:
            pool = DOMAINS[self.domain] if key == "s" else _SLOT_POOLS[key]
            value = _pick(self.rng, pool)
        self[key] = value
        return value


_SLOT_POOLS = {"q": QUALITIES, "v": VERBS, "o": OBJECTS, "o2": OBJECTS, "r": REASONS, "m": _MONTHS}


def _slots(rng: random.Random, domain: str) -> _Slots:
    return _Slots(rng, domain)


def _fresh(rng: random.Random, i: int, scope: str, now: datetime, *, chinese: bool) -> tuple[Entry, str]:
    """A new memory and a paraphrase of it (same facts, other words) for later planting."""
    etype = _pick(rng, ENTRY_TYPES)
    domain = _pick(rng, list(DOMAINS))
    slots = _slots(rng, domain)
    if chinese:
        subject = _pick(rng, ZH_SUBJECTS)
        content = f"{subject}{_pick(rng, ZH_FACTS)}，{_pick(rng, ZH_REASONS)}。{_pick(rng, ZH_FACTS)}。"
        title, para = f"{subject}笔记", f"关于{subject}：{_pick(rng, ZH_FACTS)}，{_pick(rng, ZH_REASONS)}。"
    else:
        content = _pick(rng, _TEMPLATES[etype]).format_map(slots)
        extra = rng.randint(0, 4)
        for _ in range(extra):
            content += " " + _pick(rng, _TEMPLATES[_pick(rng, ENTRY_TYPES)]).format_map(_slots(rng, domain))
        title = f"{slots['S']} ({slots['q']})"
        para = _pick(rng, _PARAPHRASES).format_map(slots)
    path = f"{etype}/{domain.split('/')[-1]}/{_slug(slots['s'])}-{i:06d}.md"
    created, updated, hits = _times(rng, now)
    entry = Entry(
        path=path,
        scope=scope,
        title=title,
        content=content,
        metadata=_metadata(rng, etype, domain, now),
        created_at=created,
        updated_at=updated,
        hits=hits,
    )
    return entry, para


def _variant(rng: random.Random, i: int, scope: str, source: Entry, content: str, now: datetime) -> Entry:
    """A copy of ``source`` under a new path, with its own (possibly thinner) metadata and times."""
    created, updated, hits = _times(rng, now)
    metadata = {k: v for k, v in source.metadata.items() if rng.random() < 0.7}
    base = source.path.rsplit("-", 1)[0]
    return Entry(
        path=f"{base}-{i:06d}.md",
        scope=scope,
        title=source.title if rng.random() < 0.6 else "",
        content=content,
        metadata=metadata,
        created_at=created,
        updated_at=updated,
        hits=hits,
    )


def _near_duplicate(rng: random.Random, content: str) -> str:
    """Change one or two words (a synonym, or a dropped/added word)."""
    words = content.split(" ")
    for _ in range(rng.randint(1, 2)):
        spots = [k for k, w in enumerate(words) if w.lower().strip(".,;:") in SYNONYMS]
        if spots and rng.random() < 0.7:
            k = _pick(rng, spots)
            bare = words[k].strip(".,;:")
            words[k] = words[k].replace(bare, SYNONYMS[bare.lower()])
        elif len(words) > 6:
            k = rng.randrange(1, len(words) - 1)
            if rng.random() < 0.5:
                del words[k]
            else:
                words.insert(k, _pick(rng, ["really", "also", "usually", "still"]))
        else:
            words.append(_pick(rng, ["(again)", "indeed.", "for now."]))
    return " ".join(words)


def _junk(rng: random.Random, i: int, scope: str, now: datetime) -> Entry:
    created, updated, hits = _times(rng, now, stale_bias=0.5)
    metadata: dict[str, Any] = {} if rng.random() < 0.7 else {"type": _pick(rng, ENTRY_TYPES)}
    return Entry(
        path=f"scratch/note-{i:06d}.md",
        scope=scope,
        title="",
        content=_pick(rng, LOW_QUALITY),
        metadata=metadata,
        created_at=created,
        updated_at=updated,
        hits=hits,
    )


def _stub(rng: random.Random, i: int, scope: str, target: Entry, now: datetime) -> Entry:
    created, updated, _ = _times(rng, now, stale_bias=0.5)
    return Entry(
        path=f"{target.path.rsplit('-', 1)[0]}-{i:06d}.md",
        scope=scope,
        title=target.title,
        content=f"Merged into memory://{target.path}",
        metadata={
            "stub": True,
            "redirect_to": target.path,
            "reason": _pick(rng, ["merged", "moved", "renamed"]),
        },
        created_at=created,
        updated_at=updated,
        hits=_pick(rng, [0, 0, 1, 3, 12, 40]),
    )


def _times(rng: random.Random, now: datetime, stale_bias: float = 0.1) -> tuple[datetime, datetime, int]:
    if rng.random() < stale_bias:  # stale: months old, never read
        updated = now - timedelta(days=rng.uniform(95, 420))
        hits = 0
    else:
        updated = now - timedelta(days=rng.expovariate(1 / 20))
        hits = int(rng.expovariate(1 / 6))
    created = updated - timedelta(days=rng.uniform(0, 60))
    return created.replace(microsecond=0), updated.replace(microsecond=0), hits


def _metadata(rng: random.Random, etype: str, domain: str, now: datetime) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.15:
        return {}
    if roll < 0.40:
        meta: dict[str, Any] = {"type": etype}
        if rng.random() < 0.5:
            meta["tags"] = rng.sample(TAGS, rng.randint(1, 2))
        return meta
    verified = (now - timedelta(days=rng.randint(0, 200))).date().isoformat()
    return {
        "type": etype,
        "confidence": _weighted(rng, CONFIDENCE, _CONFIDENCE_CUM),
        "tags": rng.sample(TAGS, rng.randint(2, 4)),
        "domain": domain,
        "related": [],
        "last_verified": verified,
    }


def _link_related(rng: random.Random, by_scope: dict[str, list[Entry]]) -> None:
    """Fill ``related`` with paths of the same scope (links never cross scopes)."""
    for entries in by_scope.values():
        real = [e.path for e in entries if not e.is_stub]
        for entry in entries:
            if "related" in entry.metadata and real and rng.random() < 0.6:
                picks = {_pick(rng, real) for _ in range(rng.randint(1, 3))} - {entry.path}
                entry.metadata["related"] = [f"memory://{p}" for p in sorted(picks)]


def _embed(entries: list[Entry], embedder: Embedder, rng: random.Random) -> None:
    todo = [e for e in entries if not e.is_stub and rng.random() >= 0.02]
    if not todo:
        return
    vectors = np.asarray(embedder.embed([e.content for e in todo]), dtype=np.float32)
    for entry, vector in zip(todo, vectors, strict=True):
        entry.embedding = vector


def _slug(text: str) -> str:
    return "-".join(text.lower().split())


# ---- legacy memory items (memwork.legacy.schema.memory_items) ------------------------------------
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
_CONFIDENCE_CUM = [5, 8, 10]


def _weighted(rng: random.Random, population: Sequence[str], cum: list[int]) -> str:
    """``rng.choices(population, cum_weights=cum)[0]`` without its per-call set-up."""
    return population[bisect.bisect(cum, rng.random() * cum[-1])]


class _Fill(dict):
    """Template values drawn only for the placeholders a template uses."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, key: str) -> str:
        value = self[key] = _pick(self.rng, _FILL[key])
        return value


def _legacy_text(rng: random.Random, itype: str, chinese: bool) -> str:
    fill = _Fill(rng)
    if chinese and itype in LEGACY_ZH:
        return "用户" + _pick(rng, LEGACY_ZH[itype]).format_map(fill)
    return f"{_pick(rng, _LEGACY_PREFIX)} {_pick(rng, LEGACY_FACTS[itype]).format_map(fill)}."


def _legacy_near(rng: random.Random, text: str) -> str:
    if text.startswith("用户"):
        return text + _pick(rng, ["。", "！", "（确认过）"])
    for old, new in _LEGACY_PARA.items():
        if old in text and rng.random() < 0.6:
            return text.replace(old, new, 1)
    return text.rstrip(".") + _pick(rng, [" (confirmed).", " again.", ", apparently."])


def generate_legacy_items(
    n_users: int, items_per_user: int, *, seed: int = 0, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Rows for ``h5_user_memory_items``: string ids, mostly active (some archived/deleted), with
    per-user exact duplicates, near duplicates, paraphrases and ~5% Chinese. Timestamps are naive
    UTC datetimes (the column type); pass ``now`` for byte-identical output."""
    rng = random.Random(seed)
    now = (now or utcnow()).astimezone(UTC).replace(tzinfo=None)
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        user_id = f"user-{u:06d}"
        mine: list[dict[str, Any]] = []
        for k in range(items_per_user):
            roll = rng.random()
            if mine and roll < 0.05:
                source = _pick(rng, mine)
                content, itype = source["content"], source["type"]
            elif mine and roll < 0.12:
                source = _pick(rng, mine)
                content, itype = _legacy_near(rng, source["content"]), source["type"]
            else:
                itype = _weighted(rng, _ITEM_TYPES, _ITEM_CUM)
                content = _legacy_text(rng, itype, chinese=roll > 0.95)
            row = _legacy_row(rng, user_id, k, content, itype, now)
            mine.append(row)
            rows.append(row)
    return rows


def _legacy_row(
    rng: random.Random, user_id: str, k: int, content: str, itype: str, now: datetime
) -> dict[str, Any]:
    updated = now - timedelta(seconds=rng.randint(0, 400 * 86400), microseconds=rng.randint(0, 999_999))
    created = updated - timedelta(seconds=rng.randint(0, 30 * 86400))
    status = _weighted(rng, _STATUSES, _STATUS_CUM)
    roll = rng.random()
    if roll < 0.2:
        metadata: dict[str, Any] | None = None
    elif roll < 0.4:
        metadata = {}
    else:
        metadata = {"source": _pick(rng, ["chat", "import", "profile_form"]), "tags": rng.sample(TAGS, 2)}
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


# ---- conversations (h5_conversation_messages) --------------------------------------------------------
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
                for role, text in (("user", _pick(rng, pool)), ("assistant", _pick(rng, _REPLIES))):
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
