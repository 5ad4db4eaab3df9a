"""Thin data shaping for the report notebooks: tables, chart data, figures, trends, word diffs.

The notebooks only display; what they display is computed here, where it is unit-tested. Figures are
shown with :func:`show`, which embeds a PNG whatever matplotlib backend the kernel uses.
"""

from __future__ import annotations

import difflib
import html
import io
import json
import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memwork.reports.summary import REPORT_DIR_ENV

HISTOGRAM_SAMPLE = 3000
COVERAGE_KEYS = ("metadata_pct", "tags_pct", "links_pct", "embedding_pct", "high_confidence_pct")


# ---- parameter checks (the notebooks' validation cells) -----------------------------------------
def check_unit(name: str, value: float) -> None:
    """ValueError naming the parameter unless 0 <= value <= 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name}={value!r}: must be a number from 0 to 1")


def check_range(name: str, value: float, low: float, high: float) -> None:
    """ValueError naming the parameter unless low <= value <= high."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name}={value!r}: must be from {low} to {high}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """ValueError naming the parameter unless value is one of choices."""
    if value not in choices:
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(choices)}")


def check_file(name: str, value: str) -> None:
    """ValueError unless value is empty or an existing file (or a run folder with summary.json)."""
    if value and not (Path(value).is_file() or (Path(value) / "summary.json").is_file()):
        raise ValueError(f"{name}={value!r}: no such file")


# ---- where a notebook writes side files -----------------------------------------------------------
def output_dir() -> Path:
    """The run folder under the report runner; a temp folder otherwise (never the repository)."""
    import os

    target = os.environ.get(REPORT_DIR_ENV)
    return Path(target) if target else Path(tempfile.mkdtemp(prefix="memwork-nb-"))


def sample_store(
    n: int = 400,
    *,
    seed: int = 11,
    scopes: tuple[str, ...] = ("alice", "bob", "ops"),
    embedder: str = "minilm",
) -> str:
    """A small generated SQLite entry store in a temp dir (defaults when a notebook gets no store).

    Embedded with the real model by default, so the duplicate review shows semantic similarity.
    """
    from memwork.embed import load_embedder
    from memwork.stores import open_store
    from memwork.synth import generate_entries

    path = Path(tempfile.mkdtemp(prefix="memwork-store-")) / "store.db"
    spec = f"sqlite:///{path}"
    entries = generate_entries(n, scopes=scopes, seed=seed, embedder=load_embedder(embedder))
    with _closing(open_store(spec, create=True)) as store:
        store.put_many(entries)
    return spec


class _closing:
    def __init__(self, store: Any) -> None:
        self.store = store

    def __enter__(self) -> Any:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


# ---- tables --------------------------------------------------------------------------------------
def cell_text(value: Any) -> str:
    """A value as an approver should read it: blank for None/NaN, lists joined, dicts as ``k: v``."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            return ""
        if float(value).is_integer() and abs(value) < 1e15:
            return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
        return f"{float(value):.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int | np.integer):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, dict):
        return "; ".join(f"{k}: {cell_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell_text(v) for v in value)
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return ""
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return str(value)


_SEPARATORS_RE = re.compile(r"([/_-])(?=\S)")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


class Table:
    """A table shown for reading, not for pandas: every value whole (no ``...`` truncation), blanks
    instead of NaN, lists and dicts spelled out, text left-aligned and numbers right-aligned (inline
    styles, so the HTML report and JupyterLab agree), no row index, and a sentence when empty."""

    def __init__(
        self,
        rows: Any,
        *,
        empty: str = "none",
        html_columns: tuple[str, ...] = (),
        limit: int | None = None,
        align_numbers: bool = True,
    ) -> None:
        import pandas as pd

        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        self.total = len(frame)
        self.frame = frame.head(limit) if limit is not None else frame
        self.empty = empty
        self.html_columns = set(html_columns)
        self.align_numbers = align_numbers

    def _cell(self, column: str, value: Any) -> str:
        if column in self.html_columns:
            text, wrap = str(value), "white-space:normal"
        else:
            plain = cell_text(value)
            text = html.escape(plain)
            if len(plain) <= 24:  # short values (bands, scopes, yes/no) never wrap
                wrap = "white-space:nowrap"
            elif _SEPARATORS_RE.search(plain):  # paths and ids break after / - _ , not mid-word
                text = _SEPARATORS_RE.sub(r"\1<wbr>", text)
                wrap = "white-space:normal;overflow-wrap:break-word"
            else:  # digests and other long unbroken tokens may break anywhere
                wrap = "white-space:normal;overflow-wrap:anywhere"
        align = "right" if self.align_numbers and _is_number(value) else "left"
        return f"<td style='text-align:{align};vertical-align:top;{wrap}'>{text}</td>"

    def _repr_html_(self) -> str:
        if self.frame.empty:
            return f"<p><em>{html.escape(self.empty)}</em></p>"
        head = "".join(
            f"<th style='text-align:left;vertical-align:bottom'>{html.escape(str(c))}</th>"
            for c in self.frame.columns
        )
        body = "".join(
            "<tr>" + "".join(self._cell(c, v) for c, v in zip(self.frame.columns, row, strict=True)) + "</tr>"
            for row in self.frame.itertuples(index=False, name=None)
        )
        more = (
            f"<p><em>first {len(self.frame)} of {self.total} rows</em></p>"
            if self.total > len(self.frame)
            else ""
        )
        return (
            f"<table class='dataframe mw-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{more}"
        )

    def __repr__(self) -> str:
        if self.frame.empty:
            return self.empty
        return self.frame.map(cell_text).to_string(index=False)


def table(
    rows: Any, *, empty: str = "none", html_columns: tuple[str, ...] = (), limit: int | None = None
) -> Table:
    """``rows`` (DataFrame, list of dicts) as a readable :class:`Table` for a notebook cell."""
    return Table(rows, empty=empty, html_columns=html_columns, limit=limit)


def fields(mapping: dict[str, Any], *, name: str = "value", empty: str = "none") -> Table:
    """A dict as a two-column table (label, value): counts, vector checks, the sign-off block."""
    return Table([{"": k, name: v} for k, v in mapping.items()], empty=empty, align_numbers=False)


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB'."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover


# ---- figures --------------------------------------------------------------------------------------
def show(fig: Any) -> None:
    """Display a matplotlib figure as an inline PNG and close it (works under any backend)."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))


def bar_figure(values: dict[str, float], title: str, *, xlabel: str = "", limit: float | None = None):  # type: ignore[no-untyped-def]
    """Horizontal bars, largest at top (coverage, distributions)."""
    import matplotlib.pyplot as plt

    labels = list(values)
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(labels), 2) + 1))
    ax.barh(labels[::-1], [values[k] for k in labels][::-1], color="tab:blue")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if limit is not None:
        ax.set_xlim(0, limit)
    fig.tight_layout()
    return fig


def histogram_data(
    values: list[float], bins: int = 20, low: float = 0.0, high: float = 1.0
) -> dict[str, list]:
    """Counts and bin edges (what a histogram draws), for summary.json and tests."""
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins, range=(low, high))
    return {"counts": counts.tolist(), "edges": [round(float(e), 4) for e in edges]}


def histograms_figure(series: dict[str, list[float]], threshold: float, *, title: str):  # type: ignore[no-untyped-def]
    """One histogram per similarity kind, the threshold marked in each."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items(), strict=True):
        ax.hist([v for v in values if v is not None], bins=20, range=(0, 1), color="tab:blue")
        ax.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold}")
        ax.set_title(name)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---- health report -------------------------------------------------------------------------------
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

    def headline(self) -> str:
        """One line: score, band, entries, stubs and size."""
        h = self.health
        return (
            f"health score {h['score']} ({h['band']}) over {h['entries']:,} entries, "
            f"{h['stubs']:,} stubs, {human_bytes(h.get('total_size', 0))}"
        )

    def size(self) -> dict[str, Any]:
        """Entries, stubs and bytes of the store (and the average entry)."""
        h = self.health
        entries, total = int(h.get("entries", 0)), int(h.get("total_size", 0))
        return {
            "entries": entries,
            "stubs": int(h.get("stubs", 0)),
            "total size": human_bytes(total),
            "total bytes": total,
            "average entry": human_bytes(total / entries) if entries else "",
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

    def frames(self) -> dict[str, Any]:
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
    from memwork.reports.summary import load_summary
    from memwork.stores import open_store

    with _closing(open_store(store)) as opened:
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
        _redacted(store), scope, analysis, low, [e.to_dict() for e in archival], stubs, min_score,
        load_summary(previous_summary) if previous_summary else None,
    )  # fmt: skip
    if report.health["score"] < min_score:
        report.reasons.append(f"health: score {report.health['score']} below {min_score}")
    return report


def _redacted(spec: str) -> str:
    from memwork.redaction import redact_url

    return redact_url(spec) or spec


# ---- duplicate review -----------------------------------------------------------------------------
def word_diff_html(a: str, b: str) -> str:
    """Word-level diff of two texts as HTML (<del> removed from a, <ins> added in b)."""
    wa, wb = a.split(), b.split()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape(" ".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(f"<del style='background:#ffebe9'>{html.escape(' '.join(wa[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins style='background:#dafbe1'>{html.escape(' '.join(wb[j1:j2]))}</ins>")
    return " ".join(out)


@dataclass
class DuplicateReview:
    """Candidate pairs (with the lower-similarity neighbourhood for the histograms) and the merge plan."""

    threshold: float
    strategy: str
    pairs: list[dict[str, Any]]  # >= threshold
    neighbourhood: list[dict[str, Any]]  # >= floor, for the histograms
    operations: list[dict[str, Any]]
    contents: dict[tuple[str, str], str]
    review_file: str = ""

    def series(self) -> dict[str, list[float]]:
        return {
            "text (Jaccard)": [p["text_similarity"] for p in self.neighbourhood],
            "semantic (cosine)": [
                p["semantic_similarity"] for p in self.neighbourhood if p["semantic_similarity"] is not None
            ],
            "combined (max)": [p["similarity"] for p in self.neighbourhood],
        }

    def side_by_side(self, limit: int = 25):  # type: ignore[no-untyped-def]
        """The top pairs as an HTML table with a word diff of their contents."""
        import pandas as pd

        rows = []
        # near duplicates first: identical pairs need no reading, changed ones do
        ordered = sorted(self.pairs, key=lambda p: (p["text_similarity"] >= 0.9999, -p["similarity"]))
        for p in ordered[:limit]:
            a = self.contents.get((p["scope"], p["path_a"]), "")
            b = self.contents.get((p["scope"], p["path_b"]), "")
            rows.append(
                {"scope": p["scope"], "a": p["path_a"], "b": p["path_b"],
                 "similarity": round(p["similarity"], 3), "word diff (a → b)": word_diff_html(a, b)}
            )  # fmt: skip
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        return {
            "verdict": "INFO",
            "threshold": self.threshold,
            "strategy": self.strategy,
            "pairs": len(self.pairs),
            "scopes": sorted({p["scope"] for p in self.pairs}),
            "operations": len(self.operations),
            "review_file": self.review_file,
            "histograms": {k: histogram_data(v) for k, v in self.series().items()},
            "reasons": [],
        }


def duplicate_review(
    store: str, scope: str | None = None, *, threshold: float = 0.85, strategy: str = "keep_newer",
    review_file: str = "", floor: float = 0.5,
) -> DuplicateReview:  # fmt: skip
    """Pairs at or above ``threshold``, neighbours down to ``floor``, the dry-run merge plan and a
    review CSV (decision column for the reviewer) -- ``memwork defrag merge-duplicates --apply
    --approved FILE`` then merges only the approved pairs."""
    from memwork.defrag import find_duplicates, run_action, write_review_csv
    from memwork.stores import open_store

    with _closing(open_store(store)) as opened:
        plan = run_action(
            opened, "merge_duplicates", scope=scope, similarity_threshold=threshold, strategy=strategy
        )
        entries = [e for e in opened.all_entries(scope=scope) if not e.is_stub]
    pairs = [p.to_dict() for p in plan.pairs]
    ops = plan.to_dict().get("operations") or []
    # the histograms need the neighbourhood below the threshold: a sample keeps that cheap at 100k
    sample = (
        entries if len(entries) <= HISTOGRAM_SAMPLE else random.Random(0).sample(entries, HISTOGRAM_SAMPLE)
    )
    near = [p.to_dict() for p in find_duplicates(sample, min(floor, threshold))]
    path = Path(review_file) if review_file else output_dir() / "duplicate_review.csv"
    write_review_csv(plan.pairs, path)
    contents = {(e.scope, e.path): e.content for e in entries}
    return DuplicateReview(threshold, strategy, pairs, near, list(ops), contents, str(path))


def read_review_csv(path: str) -> list[dict[str, str]]:
    """The review file's rows (for checks and tests)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def verdict_text(summary: dict[str, Any]) -> str:
    """``PASS`` / ``FAIL`` and every reason, one per line, for a notebook's result cell."""
    reasons = summary.get("reasons") or []
    lines = [f"verdict: {summary.get('verdict')}"]
    lines += [f"  - {r}" for r in reasons] if reasons else []
    return "\n".join(lines)


def as_json(data: Any) -> str:
    """Pretty JSON for a notebook cell."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def latency_figure(latency_ms: dict[str, list[float]], limit_ms: float | None = None):  # type: ignore[no-untyped-def]
    """Box plots of resolve latency per backend, the p95 limit marked."""
    import matplotlib.pyplot as plt

    names = [n for n, v in latency_ms.items() if v]
    fig, ax = plt.subplots(figsize=(7, 3))
    if names:
        ax.boxplot([latency_ms[n] for n in names], vert=False, whis=(5, 95))
        ax.set_yticks(range(1, len(names) + 1), names)
    if limit_ms is not None:
        ax.axvline(limit_ms, color="tab:red", linestyle="--", label=f"p95 limit {limit_ms} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("ms")
    ax.set_title("resolve latency (whiskers: p5-p95)")
    fig.tight_layout()
    return fig
