"""What the ``duplicate_review`` report shows of a :class:`~memwork.defrag.review_report.DuplicateReview`:
the per-signal histograms with the decision bands, the text-against-semantic plot with the thresholds,
the threshold-selection chart from labels, the pair cards, and the tables cut at "first N of M" with
the whole table as CSV beside the HTML. Presentation only: nothing here decides.

Every figure carries alt text with its numbers (:data:`memwork.reports.display.ALT_ATTRIBUTE`), so a
reader without the picture -- or a diff of two runs -- sees what it shows.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.reports.display import ALT_ATTRIBUTE, Table, cell_text, word_diff_html, write_full_csv

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from memwork.defrag.review_report import DuplicateReview

#: half-width of the "near the threshold" band (the review queue's uncertain stratum)
NEAR = 0.05
BINS = 20
EDGE = 1e-9
#: pair cards shown in the report; every pair is in duplicate_pairs.csv
CARDS = 12
#: band colours: near the threshold / review band, and the duplicate (merge) band
REVIEW_COLOUR, MERGE_COLOUR = "#fff3b0", "#ffd6d6"


def _shade(ax: Axes, bands: list[tuple[float, float, str, str]]) -> None:
    for low, high, colour, label in bands:
        if high > low:
            ax.axvspan(low, high, color=colour, zorder=0, label=label)


def _weighted_hist(values: list[float], weights: list[float]) -> np.ndarray:
    # a hair up: a pair exactly at a bin edge (0.85) belongs above it, as the rule's ">=" says, whatever
    # float linspace makes of the edge
    data = np.clip(np.asarray(values, dtype=float) + EDGE, 0.0, 1.0)
    counts, _ = np.histogram(data, bins=BINS, range=(0, 1), weights=np.asarray(weights, dtype=float))
    return counts


def _band_totals(
    values: list[float], weights: list[float], cuts: tuple[float, float]
) -> tuple[int, int, int]:
    v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    low, high = cuts
    return (
        round(float(w[v < low].sum())),
        round(float(w[(v >= low) & (v < high)].sum())),
        round(float(w[v >= high].sum())),
    )


def histograms_figure(review: DuplicateReview) -> Figure:
    """One histogram per signal (text, semantic, their max; with a policy, its score too): estimated
    pairs of the whole store on a log axis, the decision bands shaded -- near the threshold (the
    uncertain band a person should look at) and the duplicate band; for the policy score its review and
    auto-merge bands. Alt text: per panel, the estimated pairs in each band and every bin's count."""
    import matplotlib.pyplot as plt

    t = review.threshold
    panels: list[
        tuple[str, list[float], list[float], list[tuple[float, float, str, str]], tuple[float, float]]
    ]
    bands = [
        (max(0.0, t - NEAR), t, REVIEW_COLOUR, f"near threshold ±{NEAR}"),
        (t, 1.0, MERGE_COLOUR, f"duplicate ≥ {t}"),
    ]
    panels = [
        (name, values, weights, bands, (max(0.0, t - NEAR), t))
        for name, (values, weights) in review.series().items()
    ]
    if review.policy is not None:
        pol = review.policy
        auto = pol.auto_merge if pol.auto_merge is not None else 1.0
        values, weights = review.policy_series()
        panels.append(
            ("policy score", values, weights,
             [(pol.review, auto, REVIEW_COLOUR, f"review {pol.review:g}"),
              (auto, 1.0, MERGE_COLOUR, f"auto-merge {auto:g}")], (pol.review, auto))
        )  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.3), squeeze=False)
    alt = []
    edges = np.linspace(0, 1, BINS + 1)
    for ax, (name, values, weights, bands, cuts) in zip(axes[0], panels, strict=True):
        counts = _weighted_hist(values, weights)
        _shade(ax, bands)
        ax.bar(edges[:-1], np.maximum(counts, 0), width=1 / BINS, align="edge", color="tab:blue", zorder=2)
        if (counts > 0).any():
            ax.set_yscale("log")
        below, near, top = _band_totals(values, weights, cuts)
        ax.set_title(f"{name}: {top:,} pairs in the top band", fontsize=9)
        ax.set_xlabel(f"{name} (0-1)")
        ax.set_ylabel("pairs (log scale)")
        ax.set_xlim(0, 1)
        ax.legend(loc="upper right", fontsize=7)
        bins_text = ", ".join(
            f"{edges[k]:.2f}-{edges[k + 1]:.2f}: {round(float(c)):,}" for k, c in enumerate(counts) if c > 0
        )
        alt.append(
            f"{name}: below {cuts[0]:g} {below:,}, {cuts[0]:g}-{cuts[1]:g} {near:,}, at or above {cuts[1]:g} "
            f"{top:,} pairs (bins {bins_text or 'none'})"
        )
    title = f"Pairs by similarity (below the top band: {review.sample.describe()})"
    fig.suptitle(_wrap(title), fontsize=9)
    fig.tight_layout()
    setattr(fig, ALT_ATTRIBUTE, f"{title}. " + "; ".join(alt))
    return fig


def _wrap(text: str, width: int = 120) -> str:
    import textwrap

    return "\n".join(part for line in text.split("\n") for part in textwrap.wrap(line, width))


def scatter_figure(review: DuplicateReview) -> Figure:
    """Text against semantic similarity of every pair plotted (sampled ones below the band, all pairs of
    the band), the guide's threshold as two lines (a pair right of or above them is a duplicate), with a
    policy its review and auto-merge boundaries, with labels the labelled pairs marked.

    A policy weighing the character similarity too (version 2, what ``defrag calibrate`` writes) has no
    single boundary in this plane: its lines are drawn at one stated character similarity
    (:meth:`~memwork.defrag.review_report.DuplicateReview.policy_char_level`, the median of its pairs),
    and the title and alt text say so and how far a line moves per 0.1 of character similarity. The
    policy's own decisions are exact whatever the character similarity: its pairs (score >= review) are
    marked by decision, every other pair plotted scores below review."""
    import matplotlib.pyplot as plt

    t = review.threshold
    fig, ax = plt.subplots(figsize=(6, 5.2))
    points = review.scatter()
    styles = {
        "sampled pairs below the band": ("0.6", 4, 0.35),
        "pairs at or above the threshold": ("tab:blue", 9, 0.8),
    }
    alt = []
    for name, pts in points.items():
        colour, size, alpha = styles[name]
        if pts:
            x, y = zip(*pts, strict=True)
            ax.scatter(x, y, s=size, c=colour, alpha=alpha, label=f"{name} ({len(pts):,})", linewidths=0)
        alt.append(f"{len(pts):,} {name}")
    ax.axvline(t, color="tab:red", linestyle="--", linewidth=1, label=f"threshold {t:g} (either signal)")
    ax.axhline(t, color="tab:red", linestyle="--", linewidth=1)
    title = "Text against semantic similarity"
    if review.policy is not None:
        pol = review.policy
        xs = np.linspace(0, 1, 50)
        a, b = pol.coef[:2]
        # a policy weighing the character similarity has a boundary per character similarity: drawn
        # at one stated level, the shift per 0.1 of it said
        level_of_char = review.policy_char_level()
        c, char = (pol.coef[2], level_of_char[0]) if level_of_char is not None else (0.0, 0.0)
        at = f" at character similarity {char:.2f}" if level_of_char is not None else ""
        if level_of_char is not None:
            title += (
                f"\npolicy lines{at} ({level_of_char[1]}); a pair's own character similarity moves its "
                "boundary: the policy's decisions are the marked pairs"
            )
            shift = f"{abs(0.1 * c / b):.2f} {'down' if c * b > 0 else 'up'}" if b else "nowhere"
            alt.append(
                f"the policy also weighs the character similarity ({c:.2f}·char), so its boundaries are "
                f"drawn{at}, {level_of_char[1]}; a pair 0.1 higher in character similarity has its "
                f"boundary {shift} in semantic similarity"
            )
        for level, style, label in (
            (pol.review, ":", "policy review"),
            (pol.auto_merge, "-", "policy auto-merge"),
        ):
            if level is None or not 0 < level < 1 or b == 0:
                continue
            constant = math.log(level / (1 - level)) - pol.intercept - c * char
            ys = (constant - a * xs) / b
            ax.plot(
                xs, ys, color="tab:purple", linestyle=style, linewidth=1.2, label=f"{label} {level:g}{at}"
            )
            alt.append(f"{label} boundary{at}: {a:.2f}·text + {b:.2f}·semantic = {constant:.2f}")
        # the policy's own decisions, exact whatever the character similarity: its pairs from review up
        marks = (("merge", "s", "policy: auto-merge"), ("review", "D", "policy: review"))
        for decision, marker, label in marks:
            pts = [
                (p["text_similarity"], p["semantic_similarity"])
                for p in review.policy_pairs
                if p.get("decision") == decision and p["semantic_similarity"] is not None
            ]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(
                    x, y, marker=marker, s=40, facecolors="none", edgecolors="tab:purple", linewidths=0.9,
                    label=f"{label} ({len(pts):,})",
                )  # fmt: skip
            alt.append(f"{len(pts):,} pairs the policy decides {decision} (marked)")
    if review.calibration is not None:
        labelled = review.labelled_points()
        for name, (marker, colour) in {
            "duplicate": ("o", "tab:green"),
            "distinct": ("x", "tab:orange"),
        }.items():
            pts = labelled.get(name, [])
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, marker=marker, s=22, c=colour, label=f"labelled {name} ({len(pts)})")
            alt.append(f"{len(pts)} labelled {name}")
    ax.set_xlim(0, 1)
    ax.set_ylim(min(0.0, _lowest(points)), 1)
    ax.set_xlabel("text similarity (Jaccard of words)")
    ax.set_ylabel("semantic similarity (cosine of embeddings)")
    ax.set_title(_wrap(title, 90), fontsize=10 if "\n" not in title else 8)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    setattr(fig, ALT_ATTRIBUTE, f"Text against semantic similarity, threshold {t:g}: " + "; ".join(alt))
    return fig


def _lowest(points: dict[str, list[tuple[float, float]]]) -> float:
    ys = [y for pts in points.values() for _, y in pts]
    return float(min(ys)) if ys else 0.0


def threshold_figure(review: DuplicateReview) -> Figure | None:
    """With labels: weighted precision, recall and F1 against threshold for the guide's rule (the max
    of both signals) and for the calibrated combination, the operating points marked (the current
    threshold; the policy's auto-merge and review). None without labels."""
    import matplotlib.pyplot as plt

    cal = review.calibration
    if cal is None:
        return None
    grid = np.array(cal.curves["threshold"]["grid"], dtype=float)
    pol = cal.policy
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    alt = []
    marks_of: list[tuple[float | None, str]] = [(pol.review, "review"), (pol.auto_merge, "auto-merge")]
    if pol.auto_merge == pol.review:  # one line, one label
        marks_of = [(pol.review, "review = auto-merge")]
    panels: tuple[tuple[str, str, list[tuple[float | None, str]]], ...] = (
        ("similarity", "guide's rule: max(Jaccard, cosine)", [(review.threshold, "current threshold")]),
        ("combined", "calibrated score (logistic)", marks_of),
    )
    for ax, (key, title, marks) in zip(axes[0], panels, strict=True):
        curves = cal.curves[key]
        for name, colour in (("precision", "tab:blue"), ("recall", "tab:orange"), ("f1", "tab:green")):
            ys = np.array([math.nan if v is None else v for v in curves[name]], dtype=float)
            ax.plot(grid, ys, color=colour, label=name)
        parts = []
        for point, label in marks:
            if point is None:
                parts.append(f"{label}: none (target precision not reached)")
                continue
            k = int(np.argmin(np.abs(grid - point)))
            p, r, f = (curves[n][k] for n in ("precision", "recall", "f1"))
            ax.axvline(point, color="tab:red", linestyle="--", linewidth=1)
            ax.annotate(f"{label} {point:g}\nP {cell_text(p)} R {cell_text(r)} F1 {cell_text(f)}",
                        (point, 0.05), fontsize=7, rotation=90, ha="right", va="bottom")  # fmt: skip
            parts.append(
                f"{label} {point:g}: precision {cell_text(p)}, recall {cell_text(r)}, F1 {cell_text(f)}"
            )
        f1 = np.array([math.nan if v is None else v for v in curves["f1"]], dtype=float)
        if np.isfinite(f1).any():
            best = int(np.nanargmax(f1))
            parts.append(f"best F1 {f1[best]:.3f} at {grid[best]:g}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("threshold")
        ax.set_ylabel("weighted estimate (whole store)")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower left", fontsize=7)
        alt.append(f"{title}: " + "; ".join(parts))
    n = cal.counts
    suptitle = (
        f"Threshold selection from {n['duplicate'] + n['distinct']} labels "
        f"({n['duplicate']} duplicate, {n['distinct']} distinct)"
    )
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    setattr(fig, ALT_ATTRIBUTE, f"{suptitle}. " + " | ".join(alt))
    return fig


# ---- pair cards and tables -----------------------------------------------------------------------------
#: how a card names a pair's kind (:attr:`memwork.defrag.findings.Pair.kind`): a copy is skimmed, a
#: near duplicate read
KIND_TEXT = {
    "exact": "exact copy",
    "normalised": "normalised copy (the same after case and whitespace folding)",
    "similar": "similar (the similarity join)",
}
#: the pair table's first columns (duplicate_pairs.csv); the pairs' other fields follow
PAIR_TABLE_FIRST = (
    "scope",
    "path_a",
    "path_b",
    "kind",
    "similarity",
    "text_similarity",
    "semantic_similarity",
)


def pair_table(pairs: list[dict[str, Any]]) -> pd.DataFrame:
    """The pairs as the table written whole beside the cards: kind right after the two paths, a
    possible contradiction as its reason."""
    import pandas as pd

    rows = [p | {"contradiction": _reason(p.get("contradiction"))} for p in pairs]
    frame = pd.DataFrame(rows)
    first = [c for c in PAIR_TABLE_FIRST if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def _reason(contradiction: dict[str, Any] | None) -> str:
    return str(contradiction.get("reason", "")) if contradiction else ""


class PairCards:
    """The first pairs as cards: the pair's kind (exact, normalised or similar), which signal fired
    (or the policy's score and decision), both scores and a word diff; "first N of M" with every
    pair in ``duplicate_pairs.csv`` (:func:`pair_table`) beside the HTML."""

    def __init__(self, review: DuplicateReview, limit: int = CARDS) -> None:
        self.review = review
        self.pairs = review.shown_pairs()
        self.limit = limit
        cut = len(self.pairs) > limit
        self.csv_path = write_full_csv(pair_table(self.pairs), "duplicate_pairs") if cut else None

    def _card(self, p: dict[str, Any]) -> str:
        t = self.review.threshold
        a = self.review.contents.get((p["scope"], p["path_a"]), "")
        b = self.review.contents.get((p["scope"], p["path_b"]), "")
        fired = set(p.get("matched_by") or ())
        sem = p.get("semantic_similarity")

        def score(name: str, key: str, value: float | None) -> str:
            mark = " ✔ fired" if key in fired else ""
            shown = (
                "out of model range" if value is None and p.get("out_of_range") else cell_text(value) or "-"
            )
            weight = "bold" if mark else "normal"
            return f"<span style='font-weight:{weight}'>{name} {html.escape(shown)}{mark}</span>"

        head = f"{html.escape(p['scope'])} · {html.escape(p['path_a'])} ↔ {html.escape(p['path_b'])}"
        kind = str(p.get("kind") or "similar")
        line = " &nbsp;|&nbsp; ".join(
            [
                f"<span class='mw-kind' data-kind='{html.escape(kind)}'><b>"
                f"{html.escape(KIND_TEXT.get(kind, kind))}</b></span>",
                score("text (Jaccard)", "text", p["text_similarity"]),
                score("semantic (cosine)", "semantic", sem),
            ]
        )
        if p.get("policy_score") is not None:
            decision = html.escape(str(p["decision"]))
            line += f" &nbsp;|&nbsp; policy score {p['policy_score']:.3f}: <b>{decision}</b>"
        elif fired:
            line += f" &nbsp;|&nbsp; duplicate at threshold {t:g}"
        if p.get("contradiction"):
            why = html.escape(str(p["contradiction"].get("reason", "")))
            line += f" &nbsp;|&nbsp; <b>possible contradiction</b> ({why}): never merged"
        if p.get("decision") == "review" and p.get("policy_score") is None:
            line += " &nbsp;|&nbsp; <b>held for review</b> (chained cluster)"
        return (
            "<div class='mw-card' "
            "style='border:1px solid #ccc;border-radius:4px;padding:6px 8px;margin:6px 0'>"
            f"<div style='font-size:90%;color:#444'>{head}</div><div>{line}</div>"
            f"<div style='margin-top:4px'>{word_diff_html(a, b)}</div></div>"
        )

    def _repr_html_(self) -> str:
        if not self.pairs:
            return "<p><em>no candidate pairs</em></p>"
        body = "".join(self._card(p) for p in self.pairs[: self.limit])
        more = ""
        if len(self.pairs) > self.limit:
            link = (
                f" -- all {len(self.pairs)} rows: <a href='{html.escape(self.csv_path.name)}'>"
                f"{html.escape(self.csv_path.name)}</a>"
                if self.csv_path is not None
                else ""
            )
            more = f"<p><em>first {self.limit} of {len(self.pairs)} rows</em>{link}</p>"
        return body + more

    def __repr__(self) -> str:
        shown = min(self.limit, len(self.pairs))
        return f"{shown} of {len(self.pairs)} pair cards"


def cluster_table(review: DuplicateReview, limit: int = 25) -> Table:
    """The merge plan's clusters (size, density, chained, contradiction), biggest first."""
    return Table(review.clusters(), limit=limit, csv="clusters", empty="no clusters: nothing to merge")


def queue_link(review: DuplicateReview) -> Any:
    """The next review file as a link (it lies beside the HTML) with how to use it."""
    from pathlib import Path

    from IPython.display import HTML

    name = html.escape(Path(review.queue_file).name)
    approve = html.escape(Path(review.review_file).name)
    return HTML(
        f"<p>Next review file: <a href='{name}'>{name}</a> -- label each row's <code>decision</code> "
        "<code>duplicate</code>, <code>distinct</code> or <code>unsure</code>, then "
        f"<code>memwork defrag calibrate --labels {name} -o policy.json</code> "
        f"(or re-run this report with <code>-p labels {name}</code>). "
        f"The band's pairs to approve or reject: <a href='{approve}'>{approve}</a> "
        "(<code>memwork defrag merge-duplicates --apply --approved FILE</code>).</p>"
    )


def merge_commands(review: DuplicateReview, *, sample_store: bool = False) -> Any:
    """How to apply the plan shown: the report only reads the store, the CLI applies (journaled, under
    the store's lock, undoable). The dry-run command (the same plan again), the apply command and the
    undo command, each on its own line to copy; said when the store is the report's own sample (gone
    when the report ends) and when the plan covers sampled scopes only."""
    from IPython.display import HTML

    notes = []
    if sample_store:
        notes.append(
            "The store is a generated sample that is deleted when this report ends: run the commands "
            "on a store of your own (re-run the report with <code>-p store SPEC</code>)."
        )
    if review.sampled_scopes:
        notes.append(
            "This review planned the sampled scopes only; the command plans every scope of the store "
            "(its dry run lists them all)."
        )
    if not review.store_spec:
        notes.append("Replace <code>STORE</code> by the store's spec.")
    elif "***" in review.merge_command():
        notes.append("Put the store's password where it shows <code>***</code>.")
    rule = f"threshold {review.threshold:g}"
    if review.policy_file:
        rule = f"the policy {html.escape(review.policy_file)}"
    lines = [
        ("the same plan again (dry run, writes nothing)", review.merge_command(apply=False)),
        ("apply it (journaled; prints the run id)", review.merge_command()),
        ("undo it", review.undo_command()),
    ]
    rows = "".join(
        f"<li>{what}:<br><code class='mw-command'>{html.escape(command)}</code></li>"
        for what, command in lines
    )
    return HTML(
        f"<p>This report only reads the store. To merge what the plan above shows ({rule}), run:</p>"
        f"<ul>{rows}</ul>" + "".join(f"<p>{n}</p>" for n in notes)
    )
