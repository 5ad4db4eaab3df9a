"""The defrag reports: what the ``health_report`` and ``duplicate_review`` notebooks show.

Each is computed in one call (:func:`health_report`, :func:`duplicate_review`) so the notebook only
displays and the figures are unit-tested. "Health" in memwork always means the score of
:func:`memwork.defrag.scores.health` (the facade's synthetic round trip is its self-check); the duplicate
review is the candidate pairs, their neighbourhood and the dry-run merge plan, with the review CSV
(:mod:`memwork.defrag.review`) a person fills in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from memwork.stores.base import Store

#: the health report's default threshold: the lowest score of the "good" band (60); a store below it
#: FAILs unless the run lowers ``min_score`` on purpose (0 switches the gate off, and the report says so)
DEFAULT_MIN_SCORE = 60
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
    #: parameters the run set explicitly (the others are at their documented defaults)
    set_parameters: tuple[str, ...] = ()

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

    def gates(self) -> list[Any]:
        """The gates the verdict stands on: the health score against ``min_score`` (0: off)."""
        from memwork.reports.gates import Origin, judged

        origin: Origin = "set" if "min_score" in self.set_parameters else "default"
        threshold = self.min_score if self.min_score > 0 else None
        why = "min_score 0 switches the gate off" if threshold is None else f"band {self.health.get('band')}"
        return [judged("health score", self.health["score"], threshold, ">=", origin=origin, why=why)]

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

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        """The notebook's tables as rows (no pandas: the report's kernel shows them without it):
        scopes, low quality, archival, stubs."""
        scopes = [
            {"scope": s, **{k: v for k, v in d.items() if k != "coverage"}}
            for s, d in self.analysis["scopes"].items()
        ]
        return {
            "scopes": scopes,
            "low_quality": self.low_quality,
            "archival": self.archival,
            "stubs": self.stubs,
        }

    def frames(self) -> dict[str, pd.DataFrame]:
        """pandas tables: by type, by confidence, and :meth:`tables` (scopes, low quality, archival,
        stubs)."""
        import pandas as pd

        h = self.health
        return {
            "by_type": pd.Series(h.get("by_type", {}), name="entries")
            .sort_values(ascending=False)
            .to_frame(),
            "by_confidence": pd.Series(h.get("by_confidence", {}), name="entries").to_frame(),
            **{name: pd.DataFrame(rows) for name, rows in self.tables().items()},
        }

    def summary(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "gates": [g.to_dict() for g in self.gates()],
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
    store: str | Store,
    scope: str | None = None,
    *,
    age_days: int = 90,
    min_score: int = DEFAULT_MIN_SCORE,
    previous_summary: str = "",
    set_parameters: tuple[str, ...] | list[str] = (),
) -> HealthReport:
    """Analyze, low-quality and archival listings, stubs and the optional trend, in one call.

    ``store`` is a spec (opened and closed here) or an open :class:`~memwork.stores.base.Store`."""
    from memwork.defrag import analyze, find_archival_candidates, find_low_quality
    from memwork.entry import utcnow
    from memwork.reports.summary import load_summary
    from memwork.stores import opened_store

    with opened_store(store) as opened:
        entries = list(opened.all_entries(scope=scope))  # read once, analysed three ways
        shown = _store_shown(store, opened)
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
        shown, scope, analysis, low, [e.to_dict() for e in archival], stubs, min_score,
        load_summary(previous_summary) if previous_summary else None, set_parameters=tuple(set_parameters),
    )  # fmt: skip
    if report.health["score"] < min_score:
        report.reasons.append(f"health: score {report.health['score']} below {min_score}")
    return report


def _store_shown(spec: str | Store, opened: Store) -> str:
    """How a report names its store: the spec with its password hidden, or the open store's description."""
    from memwork.redaction import redact_url

    return (redact_url(spec) or spec) if isinstance(spec, str) else opened.describe()


# ---- the duplicate_review notebook: computed in memwork.defrag.review_report (re-exported here, and
# imported when first asked for: the health report's kernel does not need the review queue) ----
if TYPE_CHECKING:
    from memwork.defrag.review_report import DuplicateReview, duplicate_review
else:

    def __getattr__(name: str) -> Any:
        if name in ("DuplicateReview", "duplicate_review"):
            from memwork.defrag import review_report

            return getattr(review_report, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DuplicateReview", "HealthReport", "duplicate_review", "health_report"]
