"""The duplicate review: the notebook writes candidate pairs, a person marks each ``approve`` or
``reject``, and ``merge_duplicates(approved=PATH)`` merges only the approved ones.

A rejection is honoured even when approved pairs would connect the two entries (A-B and B-C approved,
A-C rejected): the planner never puts a rejected pair into one merge group (see
:func:`memwork.defrag.planners.plan_merge_duplicates`). A pair both approved and rejected is rejected.
This module is the CSV (written, read back, checked); :func:`memwork.defrag.report.duplicate_review`
computes what the ``duplicate_review`` notebook shows and writes the CSV through it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path

from memwork.defrag.findings import Pair
from memwork.entry import Entry, normalize_path
from memwork.errors import InvalidPath, UsageError

COLUMNS = ("scope", "path_a", "path_b", "similarity", "decision")
#: what the review file also shows per pair, for the reviewer (not read back)
SIGNAL_COLUMNS = ("text_similarity", "semantic_similarity", "matched_by", "kind")
DECISIONS = ("approve", "reject", "")
#: a labelled review queue (:mod:`memwork.defrag.review_queue`) also counts: its labels, mapped
LABEL_DECISIONS = {"duplicate": "approve", "distinct": "reject", "unsure": ""}

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
    similarity, the latter "out of model range" when a vector could not be compared), which of
    them reached the threshold and the pair's kind (``exact``, ``normalised``: the same after case and
    whitespace folding, or ``similar``: a reviewer skims a copy and reads a near duplicate). Returns
    the path."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS[:-1] + SIGNAL_COLUMNS + COLUMNS[-1:])
        for pair in pairs:
            writer.writerow(
                [pair.scope, pair.path_a, pair.path_b, f"{pair.similarity:.6f}",
                 f"{pair.text_similarity:.6f}", pair.semantic_text(6), "+".join(pair.matched_by), pair.kind,
                 ""]
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
            decision = LABEL_DECISIONS.get(decision, decision)
            if decision not in DECISIONS:
                raise UsageError(
                    f"approved row {rowno} decision",
                    row.get("decision"),
                    "use approve, reject or empty (or duplicate, distinct, unsure)",
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


def read_review_csv(path: str) -> list[dict[str, str]]:
    """The review file's rows (for checks and tests)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
