"""The small value checks written once (memwork/checks.py) and the copies that now use them."""

from __future__ import annotations

import math

import pytest

from memwork.checks import MAX_DIMENSION, dimension, parse_bool, unit
from memwork.errors import UsageError


@pytest.mark.parametrize(
    ("word", "value"), [("1", True), (" Yes ", True), ("on", True), ("0", False), ("OFF", False)]
)
def test_parse_bool_words(word: str, value: bool) -> None:
    assert parse_bool("FLAG", word) is value


def test_parse_bool_default_and_errors() -> None:
    assert parse_bool("FLAG", None, default=True) is True
    assert parse_bool("FLAG", "  ", default=False) is False
    assert parse_bool("FLAG", False) is False
    with pytest.raises(UsageError, match="FLAG='maybe'"):
        parse_bool("FLAG", "maybe", default=True)
    with pytest.raises(UsageError):
        parse_bool("FLAG", None)


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, 1.0])
def test_unit_accepts_0_to_1(value: float) -> None:
    assert unit("threshold", value) == float(value)
    assert isinstance(unit("threshold", value), float)


@pytest.mark.parametrize("value", [-0.01, 1.01, math.nan, math.inf, True, "0.5", None])
def test_unit_refuses_the_rest(value: object) -> None:
    with pytest.raises(UsageError, match=r"threshold=.*must be a number from 0 to 1"):
        unit("threshold", value)


@pytest.mark.parametrize("value", [1, 3, 384, MAX_DIMENSION])
def test_dimension_accepts_1_to_16000(value: int) -> None:
    assert dimension("dimensions", value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_DIMENSION + 1, 3.0, True, "3", None])
def test_dimension_refuses_the_rest(value: object) -> None:
    with pytest.raises(UsageError, match="must be an integer from 1 to 16000"):
        dimension("dimensions", value)


def test_the_former_copies_agree() -> None:
    """Each place that used to carry its own copy now gives the same answer and the same message."""
    from memwork.embed import HashEmbedder
    from memwork.pgvector.schema import check_dimensions
    from memwork.reports.display import check_unit
    from memwork.similarity import find_duplicate_pairs
    from memwork.stores import SQLStore

    for refuse in (
        lambda: HashEmbedder(16001),
        lambda: check_dimensions(0),
        lambda: SQLStore("sqlite://", dimension=True),
    ):
        with pytest.raises(UsageError, match="must be an integer from 1 to 16000"):
            refuse()
    for refuse in (lambda: check_unit("threshold", 1.5), lambda: find_duplicate_pairs([], [], 2)):
        with pytest.raises(UsageError, match="must be a number from 0 to 1"):
            refuse()
