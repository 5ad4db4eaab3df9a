"""The duplicate review: the notebook writes candidate pairs, a person marks each ``approve`` or
``reject``, and ``merge_duplicates(approved=PATH)`` merges only the approved ones.

A rejection is honoured even when approved pairs would connect the two entries (A-B and B-C approved,
A-C rejected): the planner never puts a rejected pair into one merge group (see
:func:`memwork.defrag.planners.plan_merge_duplicates`). A pair both approved and rejected is rejected.
:func:`duplicate_review` computes what the ``duplicate_review`` notebook shows and writes the CSV.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwork.coverage import count_out_of_range
from memwork.defrag.findings import Pair
from memwork.entry import Entry, normalize_path
from memwork.errors import InvalidPath, UsageError

if TYPE_CHECKING:
    import pandas as pd

HISTOGRAM_SAMPLE = 3000
COLUMNS = ("scope", "path_a", "path_b", "similarity", "decision")
#: what the review file also shows per pair, for the reviewer (not read back)
SIGNAL_COLUMNS = ("text_similarity", "semantic_similarity", "matched_by")
DECISIONS = ("approve", "reject", "")

Pair3 = tuple[str, str, str]


def pair_key(scope: str, a: str, b: str) -> Pair3:
    """One spelling per unordered pair: ``(scope, smaller path, larger path)``."""
    return (scope, a, b) if a <= b else (scope, b, a)


class ReviewedPairs(list[Pair3]):
    """The approved ``(scope, path_a, path_b)`` pairs, plus what the reviewer rejected.

    Still a plain list of the approved pairs (what callers always got); ``rejected`` holds the
    rejected pairs and ``similarity`` the CSV's similarity of each pair, both keyed by :func:`pair_key`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rejected: set[Pair3] = set()
        self.similarity: dict[Pair3, float] = {}


def write_review_csv(pairs: Iterable[Pair], path: str | Path) -> Path:
    """Write ``pairs`` for review, decision column empty, each with both signals (text and semantic
    similarity, the latter "out of model range" when a vector could not be compared) and which of
    them reached the threshold. Returns the path."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS[:-1] + SIGNAL_COLUMNS + COLUMNS[-1:])
        for pair in pairs:
            writer.writerow(
                [pair.scope, pair.path_a, pair.path_b, f"{pair.similarity:.6f}",
                 f"{pair.text_similarity:.6f}", pair.semantic_text(6), "+".join(pair.matched_by), ""]
            )  # fmt: skip
    return path


def _similarity(rowno: int, raw: str | None) -> float | None:
    text = (raw or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise UsageError(f"approved row {rowno} similarity", raw, "must be a number from 0 to 1 or empty")
    return value


def read_approved_pairs(
    path: str | Path, entries: Iterable[Entry], *, scope: str | None = None
) -> ReviewedPairs:
    """The approved ``(scope, path_a, path_b)`` pairs of a review CSV, with its rejections.

    Every row is checked (header, decision, similarity, both entries exist and are not stubs); the
    first bad one is a usage error naming its row number (the header is row 1) and field. Rows of other
    scopes than ``scope`` (when given) are ignored.
    """
    try:
        return _read_approved_pairs(path, entries, scope)
    except UnicodeDecodeError as exc:
        raise UsageError(
            "approved", str(path), f"not UTF-8 text (byte {exc.start}): not a review CSV"
        ) from None
    except csv.Error as exc:
        raise UsageError("approved", str(path), f"not a review CSV ({exc})") from None


def _read_approved_pairs(path: str | Path, entries: Iterable[Entry], scope: str | None) -> ReviewedPairs:
    live = {e.key for e in entries if not e.is_stub}
    stubs = {e.key for e in entries if e.is_stub}
    approved = ReviewedPairs()
    with Path(path).open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError("approved", str(path), f"missing column(s) {', '.join(missing)}")
        for rowno, row in enumerate(reader, start=2):
            decision = (row.get("decision") or "").strip().lower()
            if decision not in DECISIONS:
                raise UsageError(
                    f"approved row {rowno} decision", row.get("decision"), "use approve, reject or empty"
                )
            row_scope = (row.get("scope") or "").strip() or "default"
            if scope is not None and row_scope != scope:
                continue
            paths = []
            for field in ("path_a", "path_b"):
                raw = row.get(field) or ""
                try:
                    value = normalize_path(raw)
                except InvalidPath as exc:
                    raise UsageError(f"approved row {rowno} {field}", raw, exc.problem) from None
                if (row_scope, value) in stubs:
                    raise UsageError(f"approved row {rowno} {field}", raw, "is a stub, not an entry")
                if (row_scope, value) not in live:
                    raise UsageError(f"approved row {rowno} {field}", raw, f"no entry in scope {row_scope!r}")
                paths.append(value)
            if paths[0] == paths[1]:
                raise UsageError(f"approved row {rowno} path_b", row.get("path_b"), "same entry as path_a")
            similarity = _similarity(rowno, row.get("similarity"))
            key = pair_key(row_scope, paths[0], paths[1])
            if similarity is not None:
                approved.similarity[key] = similarity
            if decision == "approve":
                approved.append((row_scope, paths[0], paths[1]))
            elif decision == "reject":
                approved.rejected.add(key)
    return approved


# ---- the duplicate_review notebook: candidate pairs, their neighbourhood and the dry-run plan ----
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
    #: entries whose vector is out of its model's range: compared by text only
    out_of_range: int = 0

    def series(self) -> dict[str, list[float]]:
        return {
            "text (Jaccard)": [p["text_similarity"] for p in self.neighbourhood],
            "semantic (cosine)": [
                p["semantic_similarity"] for p in self.neighbourhood if p["semantic_similarity"] is not None
            ],
            "combined (max)": [p["similarity"] for p in self.neighbourhood],
        }

    def side_by_side(self, limit: int = 25) -> pd.DataFrame:
        """The top pairs as a pandas table with a word diff (HTML) of their contents."""
        import pandas as pd

        from memwork.reports.display import word_diff_html

        rows: list[dict[str, Any]] = []
        # near duplicates first: identical pairs need no reading, changed ones do
        ordered = sorted(self.pairs, key=lambda p: (p["text_similarity"] >= 0.9999, -p["similarity"]))
        for p in ordered[:limit]:
            a = self.contents.get((p["scope"], p["path_a"]), "")
            b = self.contents.get((p["scope"], p["path_b"]), "")
            rows.append(
                {"scope": p["scope"], "a": p["path_a"], "b": p["path_b"],
                 "text (Jaccard)": round(p["text_similarity"], 3), "semantic (cosine)": _semantic(p),
                 "matched by": " + ".join(p.get("matched_by") or ()),
                 "word diff (a → b)": word_diff_html(a, b)}
            )  # fmt: skip
        return pd.DataFrame(rows)

    def out_of_range_text(self) -> str:
        """One line for the report: how many entries were compared by text only, and why."""
        if not self.out_of_range:
            return "every embedded entry is inside its model's range: both signals apply to every pair"
        return (
            f"{self.out_of_range:,} entries are embedded out of the model's range (text it cannot read, "
            "e.g. Chinese for an English model): their vectors are never compared, so they pair by text "
            "similarity only"
        )

    def summary(self) -> dict[str, Any]:
        from memwork.reports.display import histogram_data

        return {
            "verdict": "INFO",
            "threshold": self.threshold,
            "strategy": self.strategy,
            "pairs": len(self.pairs),
            "scopes": sorted({p["scope"] for p in self.pairs}),
            "operations": len(self.operations),
            "review_file": self.review_file,
            "embedded_out_of_range": self.out_of_range,
            "matched_by": _signal_counts(self.pairs),
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
    from memwork.defrag.actions import run_action
    from memwork.defrag.findings import find_duplicates
    from memwork.reports.display import output_dir
    from memwork.stores import open_store

    with open_store(store) as opened:
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
    return DuplicateReview(
        threshold, strategy, pairs, near, list(ops), contents, str(path), count_out_of_range(entries)
    )


def _semantic(pair: dict[str, Any]) -> float | str:
    """The cosine (3 digits), or why there is none."""
    if pair.get("semantic_similarity") is not None:
        return round(float(pair["semantic_similarity"]), 3)
    return "out of model range" if pair.get("out_of_range") else "-"


def _signal_counts(pairs: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Pairs found by text only, by semantics only, and by both."""
    counts = {"text": 0, "semantic": 0, "both": 0}
    for pair in pairs:
        fired = tuple(pair.get("matched_by") or ())
        key = "both" if len(fired) == 2 else fired[0] if fired else None
        if key is not None:
            counts[key] += 1
    return counts


def read_review_csv(path: str) -> list[dict[str, str]]:
    """The review file's rows (for checks and tests)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
