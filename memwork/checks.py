"""Small value checks written once: booleans from text (and later 0..1 and vector dimensions).

Each check turns user-supplied text into a value or raises :class:`~memwork.errors.UsageError` naming
the field, so environment variables, notebook parameters and CLI options agree on what is valid.
"""

from __future__ import annotations

from memwork.errors import UsageError

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
BOOL_HINT = "expected 1/0/true/false/yes/no/on/off"


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
