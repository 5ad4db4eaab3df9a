"""The gate record a verdict stands on: states, comparisons and the sentence a PASS prints."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwork.errors import UsageError
from memwork.reports.gates import Gate, judged, origin_of, passed_sentence, tally


def test_a_gate_without_threshold_is_off_and_says_so() -> None:
    gate = judged("health score", 0.42, None)
    assert gate.state == "off" and gate.why


@pytest.mark.parametrize("observed", [None, math.nan, math.inf])
def test_nothing_to_judge_is_nodata_never_pass(observed: float | None) -> None:
    assert judged("recall", observed, 0.9).state == "nodata"


@pytest.mark.parametrize(
    ("observed", "threshold", "comparison", "state"),
    [(0.9, 0.9, ">=", "pass"), (0.89, 0.9, ">=", "fail"), (120, 100, "<=", "fail"), (0, 0, "==", "pass")],
)
def test_comparisons(observed: float, threshold: float, comparison: str, state: str) -> None:
    assert judged("g", observed, threshold, comparison).state == state


def test_bad_fields_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        Gate("g", "green")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Gate("g", "pass", comparison="~")


def test_the_sentence_counts_what_was_on() -> None:
    gates = [judged("a", 1, 0), judged("b", 1, 0), judged("c", 1, None)]
    assert passed_sentence(gates) == "2 of 2 gates passed (1 off)"
    assert tally([g.to_dict() for g in gates])["on"] == 2


def test_origin_is_set_only_when_named() -> None:
    assert origin_of("min_score", {"min_score": 70}) == "set"
    assert origin_of("min_score", {}) == "default"


@given(st.lists(st.sampled_from(["pass", "fail", "nodata", "off"]), max_size=30))
def test_tally_adds_up(states: list[str]) -> None:
    counts = tally([{"state": s} for s in states])
    assert counts["on"] + counts["off"] == len(states)
