"""Small value checks written once: booleans from text, numbers from 0 to 1, vector dimensions.

Each check turns user-supplied text into a value or raises :class:`~memwork.errors.UsageError` naming
the field, so environment variables, notebook parameters and CLI options agree on what is valid.
"""

from __future__ import annotations

import math
import numbers

from memwork.errors import UsageError

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
BOOL_HINT = "expected 1/0/true/false/yes/no/on/off"
MAX_DIMENSION = 16000  #: pgvector's limit for the vector type, and every store's
UNIT_HINT = "must be a number from 0 to 1"
DIMENSION_HINT = f"must be an integer from 1 to {MAX_DIMENSION}"


def parse_bool(name: str, value: object, default: bool | None = None) -> bool:
    """``1/0/true/false/yes/no/on/off`` (any case, surrounding spaces ignored) -> bool.

    A real ``bool`` passes through. Unset (None) or blank text gives ``default``; when there is no
    default, or the word is not one of the eight, raises UsageError naming ``name``.
    """
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    if text == "" and default is not None:
        return default
    raise UsageError(name, value, BOOL_HINT)


def unit(name: str, value: object) -> float:
    """A finite number from 0 to 1 (a similarity, a threshold, a recall) as float; UsageError naming
    ``name`` otherwise -- never silently clamped. A ``bool`` is not a number here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(name, value, UNIT_HINT)
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise UsageError(name, value, UNIT_HINT)
    return number


def dimension(name: str, value: object) -> int:
    """A vector dimension: an integer from 1 to 16000 (pgvector's limit); UsageError naming ``name``
    otherwise. Every embedder, store and schema agrees on this range."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 1 <= int(value) <= MAX_DIMENSION
    ):
        raise UsageError(name, value, DIMENSION_HINT)
    return int(value)


def both_or_neither(first: str, first_value: str, second: str, second_value: str) -> None:
    """Two settings that only work together (a source and a target URL): a UsageError naming the
    missing one when exactly one of them is given."""
    if bool(first_value) != bool(second_value):
        given, missing = (first, second) if first_value else (second, first)
        raise UsageError(missing, "", f"give both {first} and {second}, or neither ({given} is set)")
