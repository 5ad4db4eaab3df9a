"""The defrag health report: score, coverage, low-quality and archival listings, stubs and the trend.

What the ``health_report`` notebook shows, computed in one call (:func:`health_report`) so the notebook
only displays and the figures are unit-tested. "Health" in memwork always means this score
(:func:`memwork.defrag.scores.health`); the facade's synthetic round trip is its self-check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

COVERAGE_KEYS = ("metadata_pct", "tags_pct", "links_pct", "embedding_pct", "high_confidence_pct")


def _human_bytes(n: float) -> str:
    from memwork.reports.display import human_bytes

    return human_bytes(n)


@dataclass
class HealthReport:
    """What the health notebook shows, computed once."""

    store: str
    scope: str | None
    analysis: dict[str, Any]
    low_quality: list[dict[str, Any]]
    archival: list[dict[str, Any]]
    stubs: list[dict[str, Any]]
    min_score: int
    previous: dict[str, Any] | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def health(self) -> dict[str, Any]:
        return self.analysis["health"]

    @property
    def verdict(self) -> str:
        return "FAIL" if self.reasons else "PASS"

    def coverage(self) -> dict[str, float]:
        cov = self.health.get("coverage", {})
        return {k.removesuffix("_pct").replace("_", " "): float(cov.get(k, 0.0)) for k in COVERAGE_KEYS}

    def trend(self) -> dict[str, Any] | None:
        """Score and coverage now vs the previous run's summary.json."""
        if not self.previous:
            return None
        before = self.previous.get("health", {})
        delta = {"score": self.health["score"] - before.get("score", 0)}
        for key in COVERAGE_KEYS:
            now = self.health.get("coverage", {}).get(key, 0.0)
            delta[key] = round(now - before.get("coverage", {}).get(key, 0.0), 2)
        return {"previous_score": before.get("score"), "score": self.health["score"], "delta": delta}

    @property
    def out_of_range(self) -> int:
        """Entries embedded out of their model's range (see :mod:`memwork.coverage`)."""
        return int(self.health.get("embedded_out_of_range", 0))

    def headline(self) -> str:
        """One line: score, band, entries, stubs, size and vectors out of their model's range."""
        h = self.health
        return (
            f"health score {h['score']} ({h['band']}) over {h['entries']:,} entries, "
            f"{h['stubs']:,} stubs, {_human_bytes(h.get('total_size', 0))}; "
            f"{self.out_of_range:,} embedded out of the model's range"
        )

    def embeddings(self) -> dict[str, Any]:
        """Embedded entries, and those whose vector their model could not read (never compared by cosine)."""
        embedded = int(self.health.get("embedded", 0))
        return {
            "embedded": embedded,
            "embedded out of the model's range": self.out_of_range,
            "out of range, % of embedded": round(100 * self.out_of_range / embedded, 2) if embedded else 0.0,
            "what it means": "text the model cannot read (e.g. Chinese for an English model): those vectors "
            "are never used for duplicates or links; the entries pair by text similarity only",
        }

    def size(self) -> dict[str, Any]:
        """Entries, stubs and bytes of the store (and the average entry)."""
        h = self.health
        entries, total = int(h.get("entries", 0)), int(h.get("total_size", 0))
        return {
            "entries": entries,
            "stubs": int(h.get("stubs", 0)),
            "total size": _human_bytes(total),
            "total bytes": total,
            "average entry": _human_bytes(total / entries) if entries else "",
        }

    def trend_rows(self) -> list[dict[str, Any]]:
        """Score and each coverage figure: previous run, now, change (empty without a previous run)."""
        if not self.previous:
            return []
        before = self.previous.get("health", {})
        rows = [
            {"measure": "health score", "previous": before.get("score"), "now": self.health["score"],
             "change": self.health["score"] - (before.get("score") or 0)}
        ]  # fmt: skip
        for key in COVERAGE_KEYS:
            now = self.health.get("coverage", {}).get(key, 0.0)
            prev = before.get("coverage", {}).get(key)
            rows.append(
                {"measure": key.removesuffix("_pct").replace("_", " ") + " %", "previous": prev, "now": now,
                 "change": None if prev is None else round(now - prev, 2)}
            )  # fmt: skip
        return rows

    def frames(self) -> dict[str, pd.DataFrame]:
        """pandas tables: by type, by confidence, scopes, low quality, archival, stubs."""
        import pandas as pd

        h = self.health
        scopes = pd.DataFrame(
            [
                {"scope": s, **{k: v for k, v in d.items() if k != "coverage"}}
                for s, d in self.analysis["scopes"].items()
            ]
        )
        return {
            "by_type": pd.Series(h.get("by_type", {}), name="entries")
            .sort_values(ascending=False)
            .to_frame(),
            "by_confidence": pd.Series(h.get("by_confidence", {}), name="entries").to_frame(),
            "scopes": scopes,
            "low_quality": pd.DataFrame(self.low_quality),
            "archival": pd.DataFrame(self.archival),
            "stubs": pd.DataFrame(self.stubs),
        }

    def summary(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "store": self.store,
            "scope": self.scope,
            "health": self.health,
            "band": self.health.get("band"),
            "low_quality": len(self.low_quality),
            "archival_candidates": len(self.archival),
            "stubs": len(self.stubs),
            "embedded_out_of_range": self.out_of_range,
            "trend": self.trend(),
        }


def health_report(
    store: str,
    scope: str | None = None,
    *,
    age_days: int = 90,
    min_score: int = 0,
    previous_summary: str = "",
) -> HealthReport:
    """Analyze, low-quality and archival listings, stubs and the optional trend, in one call."""
    from memwork.defrag import analyze, find_archival_candidates, find_low_quality
    from memwork.entry import utcnow
    from memwork.redaction import redact_url
    from memwork.reports.summary import load_summary
    from memwork.stores import open_store

    with open_store(store) as opened:
        entries = list(opened.all_entries(scope=scope))  # read once, analysed three ways
    now = utcnow()
    analysis = analyze(entries)
    low = [e.to_dict() for e in find_low_quality(entries, now=now)]
    archival = find_archival_candidates(entries, age_days, now=now)
    stubs = [
        {"scope": e.scope, "path": e.path, "redirect_to": e.metadata.get("redirect_to"), "hits": e.hits}
        for e in entries
        if e.is_stub
    ]
    report = HealthReport(
        redact_url(store) or store, scope, analysis, low, [e.to_dict() for e in archival], stubs, min_score,
        load_summary(previous_summary) if previous_summary else None,
    )  # fmt: skip
    if report.health["score"] < min_score:
        report.reasons.append(f"health: score {report.health['score']} below {min_score}")
    return report
