"""The duplicate review says what kind each pair is (issue 19): an exact copy, a normalised copy (the
same after case and whitespace folding) or a similar pair -- on the cards, in the side-by-side table,
in the approve/reject file and in the whole pair table written beside the report."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import pytest

from memwork.defrag.review import read_approved_pairs, read_review_csv
from memwork.defrag.review_report import duplicate_review
from memwork.entry import Entry
from memwork.reports.duplicate_view import KIND_TEXT, PairCards

T0 = datetime(2025, 3, 1, tzinfo=UTC)
SENTENCE = "the deploy runs on friday after the weekly review meeting with the whole platform team"
ENTRIES = {
    "x.md": SENTENCE,
    "y.md": SENTENCE,  # x/y: exact
    "z.md": "  The Deploy runs on FRIDAY after the weekly review meeting with the whole platform team\n",
    "s.md": SENTENCE + " today",  # similar to x, y and z (Jaccard 14/15), not the same text
    "far.md": "an unrelated note about the garden and its tomatoes",
}
EXPECTED = {
    ("x.md", "y.md"): "exact",
    ("x.md", "z.md"): "normalised",
    ("y.md", "z.md"): "normalised",
    ("s.md", "x.md"): "similar",
    ("s.md", "y.md"): "similar",
    ("s.md", "z.md"): "similar",
}


@pytest.fixture
def review(any_store, tmp_path, monkeypatch):
    for path, content in ENTRIES.items():
        any_store.put(Entry(path=path, content=content, updated_at=T0, created_at=T0))
    monkeypatch.setenv("MEMWORK_REPORT_DIR", str(tmp_path))  # as under the report runner
    return duplicate_review(any_store, threshold=0.85, out_dir=tmp_path)


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def test_cards_name_each_pairs_kind(review):
    cards = PairCards(review, limit=len(EXPECTED))
    assert {_key(p["path_a"], p["path_b"]): p["kind"] for p in cards.pairs} == EXPECTED
    page = cards._repr_html_()
    for pair in cards.pairs:
        card = cards._card(pair)
        assert f"data-kind='{pair['kind']}'" in card and KIND_TEXT[pair["kind"]] in card
    assert page.count("class='mw-kind'") == len(EXPECTED)
    table = review.side_by_side()
    assert {_key(a, b): k for a, b, k in zip(table["a"], table["b"], table["kind"], strict=True)} == EXPECTED


def test_the_pair_tables_carry_the_kind(review, any_store, tmp_path):
    rows = read_review_csv(review.review_file)
    assert {_key(r["path_a"], r["path_b"]): r["kind"] for r in rows} == EXPECTED
    assert read_approved_pairs(review.review_file, any_store.all_entries()) == []  # still reads back
    cards = PairCards(review, limit=2)  # cut: the whole table is written beside the HTML
    assert cards.csv_path is not None and cards.csv_path.parent == tmp_path
    with cards.csv_path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        assert (reader.fieldnames or [])[:4] == ["scope", "path_a", "path_b", "kind"]
        whole = list(reader)
    assert {_key(r["path_a"], r["path_b"]): r["kind"] for r in whole} == EXPECTED
    assert "first 2 of 6 rows" in cards._repr_html_()
