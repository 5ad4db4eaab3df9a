"""Quality score of one entry, health score of a set of entries, and the health bands.

A missing ``tags``/``related`` key counts as empty, and the coverage tiers are *either/or*
(``if … elif``), so the health score tops out at 100 (two independent ``if``s would give 50 points
for metadata coverage alone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memwork.coverage import MARK_KEYS, out_of_range
from memwork.entry import Entry

#: metadata keys the engine and stores use for bookkeeping; they are not "user metadata"
INTERNAL_KEYS = frozenset(
    {"stub", "redirect_to", "reason", "hits", "embedding_stale", *MARK_KEYS, "merged_from", "merged_values"}
)

#: (lowest score, name), best first: 80-100 excellent … 0-19 critical
HEALTH_BANDS: tuple[tuple[int, str], ...] = (
    (80, "excellent"),
    (60, "good"),
    (40, "fair"),
    (20, "poor"),
    (0, "critical"),
)

CONFIDENCE_LEVELS = ("high", "medium", "low")


def present(value: Any) -> bool:
    """Is a metadata value there? Truthiness minus its traps: None, False, "" and empty collections
    are absent."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | tuple | dict | set | frozenset):
        return len(value) > 0
    return True


def confidence_of(metadata: Mapping[str, Any]) -> str | None:
    """The lower-cased confidence label, or None."""
    value = metadata.get("confidence")
    return str(value).strip().lower() if present(value) else None


#: Points for each metadata field that is present (high confidence adds 10).
QUALITY_WEIGHTS = (
    ("type", 20),
    ("confidence", 20),
    ("tags", 15),
    ("related", 15),
    ("domain", 10),
    ("last_verified", 10),
)


def quality_score(metadata: Mapping[str, Any]) -> int:
    """The metadata quality score of one entry, 0-100."""
    score = sum(points for key, points in QUALITY_WEIGHTS if present(metadata.get(key)))
    if confidence_of(metadata) == "high":
        score += 10
    return score


def has_user_metadata(metadata: Mapping[str, Any]) -> bool:
    """True when the entry carries metadata beyond the engine's bookkeeping keys."""
    return any(present(v) for k, v in metadata.items() if k not in INTERNAL_KEYS)


#: the issue of an entry whose vector its model could not read (see :mod:`memwork.coverage`)
OUT_OF_RANGE_ISSUE = "embedded out of model range"


def quality_issues(entry: Entry) -> list[str]:
    """What lowers an entry's quality: no metadata, low confidence, no tags, no links, not embedded --
    and a vector out of its model's range (no use for semantic search, duplicates or links)."""
    meta = entry.metadata
    issues = []
    if not has_user_metadata(meta):
        issues.append("no metadata")
    if confidence_of(meta) == "low":
        issues.append("low confidence")
    if not present(meta.get("tags")):
        issues.append("no tags")
    if not present(meta.get("related")):
        issues.append("no links")
    if not entry.embedded:
        issues.append("not embedded")
    elif out_of_range(entry):
        issues.append(OUT_OF_RANGE_ISSUE)
    return issues


def health_band(score: float) -> str:
    """Name of the band a health score falls in."""
    for lowest, name in HEALTH_BANDS:
        if score >= lowest:
            return name
    return "critical"


@dataclass
class Health:
    """Coverage percentages (0-100) over the non-stub entries, and the health score they give."""

    entries: int
    stubs: int
    total_size: int
    metadata_pct: float
    tags_pct: float
    links_pct: float
    embedding_pct: float
    high_confidence_pct: float
    score: int
    by_type: dict[str, int] = field(default_factory=dict)
    by_confidence: dict[str, int] = field(default_factory=dict)
    average_quality: float = 0.0
    #: embedded entries whose vector is out of its model's range (counted in embedding_pct: they have a
    #: vector; never compared by cosine)
    out_of_range: int = 0
    embedded: int = 0

    @property
    def band(self) -> str:
        return health_band(self.score)

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "band": self.band,
            "entries": self.entries,
            "stubs": self.stubs,
            "total_size": self.total_size,
            "coverage": {
                "metadata_pct": round(self.metadata_pct, 2),
                "tags_pct": round(self.tags_pct, 2),
                "links_pct": round(self.links_pct, 2),
                "embedding_pct": round(self.embedding_pct, 2),
                "high_confidence_pct": round(self.high_confidence_pct, 2),
            },
            "average_quality": round(self.average_quality, 2),
            "embedded": self.embedded,
            "embedded_out_of_range": self.out_of_range,
            "by_type": self.by_type,
            "by_confidence": self.by_confidence,
        }


def health_points(
    metadata_pct: float, tags_pct: float, links_pct: float, embedding_pct: float, high_confidence_pct: float
) -> int:
    """The health score from coverage percentages (each tier either/or; max 100)."""
    score = 0
    score += 30 if metadata_pct > 80 else 20 if metadata_pct > 50 else 0
    score += 20 if tags_pct > 60 else 10 if tags_pct > 30 else 0
    score += 20 if links_pct > 40 else 10 if links_pct > 20 else 0
    score += 15 if embedding_pct > 80 else 8 if embedding_pct > 50 else 0
    score += 15 if high_confidence_pct > 50 else 8 if high_confidence_pct > 25 else 0
    return score


def health(entries: Iterable[Entry]) -> Health:
    """Health of a set of entries. Stubs are counted but never scored; no entries gives score 0."""
    total = stubs = size = 0
    with_meta = with_tags = with_links = with_emb = high = quality_sum = unreadable = 0
    by_type: Counter[str] = Counter()
    by_conf: Counter[str] = Counter()
    for entry in entries:
        size += entry.size
        if entry.is_stub:
            stubs += 1
            continue
        total += 1
        meta = entry.metadata
        with_meta += has_user_metadata(meta)
        with_tags += present(meta.get("tags"))
        with_links += present(meta.get("related"))
        with_emb += entry.embedded
        unreadable += out_of_range(entry)
        confidence = confidence_of(meta)
        high += confidence == "high"
        by_conf[confidence or "none"] += 1
        by_type[str(meta["type"]) if present(meta.get("type")) else "none"] += 1
        quality_sum += quality_score(meta)

    def pct(n: int) -> float:
        return 100.0 * n / total if total else 0.0

    pcts = (pct(with_meta), pct(with_tags), pct(with_links), pct(with_emb), pct(high))
    return Health(
        entries=total,
        stubs=stubs,
        total_size=size,
        metadata_pct=pcts[0],
        tags_pct=pcts[1],
        links_pct=pcts[2],
        embedding_pct=pcts[3],
        high_confidence_pct=pcts[4],
        score=health_points(*pcts),
        by_type=dict(sorted(by_type.items())),
        by_confidence=dict(sorted(by_conf.items())),
        average_quality=quality_sum / total if total else 0.0,
        out_of_range=unreadable,
        embedded=with_emb,
    )
