"""A threshold whose pairs would not fit in memory is refused early, naming the threshold and the count
so far -- never a MemoryError after minutes (issue 8, D-17). Small n with a tiny budget."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.defrag.findings import find_duplicates
from memwork.entry import Entry
from memwork.errors import ConfigError, UsageError
from memwork.similarity import PairBudget, find_duplicate_pairs, find_related_pairs
from memwork.stores import open_store

TEXTS = [f"note {k} about topic {k % 7} with word w{k}" for k in range(50)]  # "note" in every text


def test_threshold_zero_is_refused_before_any_pair_is_built():
    with pytest.raises(UsageError) as err:
        find_duplicate_pairs(TEXTS, [None] * 50, 0.0, budget=PairBudget(100))
    assert (err.value.field, err.value.value) == ("similarity_threshold", 0.0)
    assert "matches more than 100 pairs (1,225 found so far)" in str(err.value)
    assert "MEMWORK_MAX_PAIRS" in str(err.value)


def test_a_low_threshold_is_stopped_while_the_text_join_runs():
    with pytest.raises(UsageError, match=r"similarity_threshold=0\.05: matches more than 20 pairs"):
        find_duplicate_pairs(TEXTS, [None] * 50, 0.05, budget=PairBudget(20))


def test_the_cosine_join_spends_the_budget_too_and_a_pair_counts_once():
    same = [np.ones(4)] * 6
    distinct = [f"alpha{k} beta{k}" for k in range(6)]  # Jaccard 0: only the cosine join finds pairs
    with pytest.raises(UsageError, match=r"more than 10 pairs \(15 found so far\)"):
        find_duplicate_pairs(distinct, same, 0.9, budget=PairBudget(10))
    # identical texts *and* vectors: both joins find all 15 pairs, the budget counts them once
    pairs = find_duplicate_pairs(["x y"] * 6, same, 0.9, budget=PairBudget(15))
    assert len(pairs) == 15


def test_within_budget_nothing_changes():
    emb = [np.array([1.0, k % 3, 0.5]) for k in range(50)]
    assert find_duplicate_pairs(TEXTS, emb, 0.3, budget=PairBudget(10**6)) == find_duplicate_pairs(
        TEXTS, emb, 0.3
    )


def test_related_pairs_have_a_budget():
    emb = [np.array([1.0, k / 10, 0.0]) for k in range(12)]
    with pytest.raises(UsageError, match=r"min_similarity=0\.0: matches more than 5 pairs"):
        find_related_pairs(emb, 0.0, 1.0, budget=PairBudget(5))


def test_one_budget_spans_every_scope_of_a_store(monkeypatch):
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", "10")
    entries = [Entry(path=f"e{k}.md", content="same words here", scope=s) for s in "ab" for k in range(4)]
    with pytest.raises(UsageError, match=r"more than 10 pairs \(12 found so far\)"):
        find_duplicates(entries, 0.85)  # 6 pairs per scope: each scope alone would fit


def test_the_budget_setting_is_checked(monkeypatch):
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", "lots")
    with pytest.raises(ConfigError, match="MEMWORK_MAX_PAIRS='lots'"):
        PairBudget()


def test_cli_threshold_zero_is_one_line_exit_2(tmp_path, monkeypatch):
    spec = str(tmp_path / "mem")
    with open_store(spec, create=True) as store:
        for k in range(20):
            store.put(Entry(path=f"n{k}.md", content=f"entry {k} text {k * 7}"))
    monkeypatch.setenv("MEMWORK_MAX_PAIRS", "50")
    result = CliRunner().invoke(
        main, ["defrag", "find-duplicates", "--store", spec, "--similarity-threshold", "0"]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "similarity_threshold=0.0" in lines[0]
    assert "more than 50 pairs (190 found so far)" in lines[0]
    merge = CliRunner().invoke(
        main, ["defrag", "merge-duplicates", "--store", spec, "--similarity-threshold", "0"]
    )
    assert merge.exit_code == 2 and "more than 50 pairs" in merge.output
