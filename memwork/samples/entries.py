"""Deterministic synthetic agent memories (entries) for the demo, the tests and the benchmarks.

They need stores that look like real ones -- uneven metadata, exact and near duplicates, paraphrases, junk,
stale entries, stubs, some Chinese -- without shipping data. Everything is drawn from one seeded generator,
so the same seed and ``now`` give the same output. Texts are templates x vocabulary, so finding the planted
duplicates is not trivial. The legacy-table rows are in :mod:`memwork.samples.legacy`.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from memwork.coverage import attach_vectors
from memwork.embed import Embedder, HashEmbedder
from memwork.entry import Entry, utcnow, validate_scope
from memwork.samples.cache import embed_cached

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


def pick(rng: random.Random, items: Sequence[Any]) -> Any:
    """``rng.choice`` at a third of the cost (one C call); 100k items must take seconds."""
    return items[int(rng.random() * len(items))]


def weighted(rng: random.Random, population: Sequence[str], cum: list[int]) -> str:
    """``rng.choices(population, cum_weights=cum)[0]`` without its per-call set-up."""
    return population[bisect.bisect(cum, rng.random() * cum[-1])]


_CONFIDENCE_CUM = [5, 8, 10]


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
        [e for e in (pick(rng, earlier[-200:]) for _ in range(3)) if not e.is_stub and e.size > 40]
        if earlier
        else []
    )
    if candidates and roll < 0.02:
        return _stub(rng, i, scope, pick(rng, candidates), now)
    if candidates and roll < 0.06:
        source = pick(rng, candidates)
        return _variant(rng, i, scope, source, source.content, now)
    if candidates and roll < 0.11:
        source = pick(rng, candidates)
        return _variant(rng, i, scope, source, _near_duplicate(rng, source.content), now)
    if candidates and roll < 0.14:
        source = pick(rng, candidates)
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
            value = pick(self.rng, pool)
        self[key] = value
        return value


_SLOT_POOLS = {"q": QUALITIES, "v": VERBS, "o": OBJECTS, "o2": OBJECTS, "r": REASONS, "m": _MONTHS}


def _slots(rng: random.Random, domain: str) -> _Slots:
    return _Slots(rng, domain)


def _fresh(rng: random.Random, i: int, scope: str, now: datetime, *, chinese: bool) -> tuple[Entry, str]:
    """A new memory and a paraphrase of it (same facts, other words) for later planting."""
    etype = pick(rng, ENTRY_TYPES)
    domain = pick(rng, list(DOMAINS))
    slots = _slots(rng, domain)
    if chinese:
        subject = pick(rng, ZH_SUBJECTS)
        content = f"{subject}{pick(rng, ZH_FACTS)}，{pick(rng, ZH_REASONS)}。{pick(rng, ZH_FACTS)}。"
        title, para = f"{subject}笔记", f"关于{subject}：{pick(rng, ZH_FACTS)}，{pick(rng, ZH_REASONS)}。"
    else:
        content = pick(rng, _TEMPLATES[etype]).format_map(slots)
        extra = rng.randint(0, 4)
        for _ in range(extra):
            content += " " + pick(rng, _TEMPLATES[pick(rng, ENTRY_TYPES)]).format_map(_slots(rng, domain))
        title = f"{slots['S']} ({slots['q']})"
        para = pick(rng, _PARAPHRASES).format_map(slots)
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
            k = pick(rng, spots)
            bare = words[k].strip(".,;:")
            words[k] = words[k].replace(bare, SYNONYMS[bare.lower()])
        elif len(words) > 6:
            k = rng.randrange(1, len(words) - 1)
            if rng.random() < 0.5:
                del words[k]
            else:
                words.insert(k, pick(rng, ["really", "also", "usually", "still"]))
        else:
            words.append(pick(rng, ["(again)", "indeed.", "for now."]))
    return " ".join(words)


def _junk(rng: random.Random, i: int, scope: str, now: datetime) -> Entry:
    created, updated, hits = _times(rng, now, stale_bias=0.5)
    metadata: dict[str, Any] = {} if rng.random() < 0.7 else {"type": pick(rng, ENTRY_TYPES)}
    return Entry(
        path=f"scratch/note-{i:06d}.md",
        scope=scope,
        title="",
        content=pick(rng, LOW_QUALITY),
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
            "reason": pick(rng, ["merged", "moved", "renamed"]),
        },
        created_at=created,
        updated_at=updated,
        hits=pick(rng, [0, 0, 1, 3, 12, 40]),
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
        "confidence": weighted(rng, CONFIDENCE, _CONFIDENCE_CUM),
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
                picks = {pick(rng, real) for _ in range(rng.randint(1, 3))} - {entry.path}
                entry.metadata["related"] = [f"memory://{p}" for p in sorted(picks)]


def _embed(entries: list[Entry], embedder: Embedder, rng: random.Random) -> None:
    """Embed ~98% of the non-stub entries, each vector marked when out of the model's range."""
    chosen = [e for e in entries if not e.is_stub and rng.random() >= 0.02]
    if not chosen:
        return
    vectors, scores = embed_cached(embedder, [e.content for e in chosen])
    attach_vectors(embedder.model_id, chosen, vectors, scores)


def _slug(text: str) -> str:
    return "-".join(text.lower().split())
