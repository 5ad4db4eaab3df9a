"""A defrag parameter, declared once: default, check, CLI type, help (a usage error, never a silent default).

The actions in :mod:`memwork.defrag.table` are built from the parameters below; the library
(``run_action``) validates with their checks and the CLI generates each action's options from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memwork.checks import unit
from memwork.defrag.merge import STRATEGIES
from memwork.defrag.scores import CONFIDENCE_LEVELS
from memwork.errors import UsageError

#: ``check(name, value)`` returns the value to use or raises :class:`UsageError` naming ``name``
Check = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Param:
    """One parameter of an action; the action's mapping gives its name (``similarity_threshold``)."""

    default: Any
    check: Check
    cli_type: type = str
    help: str = ""
    #: other names the library accepts for it (``merge_strategy`` for ``strategy``)
    aliases: tuple[str, ...] = ()
    #: how many values its CLI option takes (``--pair A B`` takes 2)
    nargs: int = 1

    @staticmethod
    def option(name: str) -> str:
        """The CLI option of parameter ``name``: ``similarity_threshold`` -> ``--similarity-threshold``."""
        return "--" + name.replace("_", "-")

    def but(self, **changes: Any) -> Param:
        """This parameter with another default or help (``max_hits`` is 10 for stubs, 0 for compact)."""
        return replace(self, **changes)


def non_negative(*, integer: bool = False, upper: float | None = None) -> Check:
    """A finite number >= 0 (a whole one with ``integer``), at most ``upper`` when given."""
    kinds: tuple[type[int], ...] | tuple[type[int], type[float]] = (int,) if integer else (int, float)

    def check(name: str, value: Any) -> float | int:
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            raise UsageError(name, value, "must be a whole number" if integer else "must be a number")
        if value < 0:
            raise UsageError(name, value, "must not be negative")
        if upper is not None and value > upper:
            raise UsageError(name, value, f"must be at most {upper:g}")
        return value

    return check


def strategy(name: str, value: Any) -> str:
    """One of the merge strategies."""
    if value not in STRATEGIES:
        raise UsageError(name, value, f"unknown strategy; known: {', '.join(STRATEGIES)}")
    return str(value)


def confidence(name: str, value: Any) -> str | None:
    """None (every confidence) or one confidence level, case and spaces ignored."""
    if value is None:
        return None
    label = str(value).strip().lower()
    if label not in CONFIDENCE_LEVELS:
        raise UsageError(name, value, f"must be one of {', '.join(CONFIDENCE_LEVELS)}")
    return label


def review_csv(name: str, value: Any) -> str | None:
    """None or the path of an existing file (a reviewer's CSV)."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise UsageError(name, str(value), "no such file")
    return str(path)


def policy_file(name: str, value: Any) -> str | None:
    """None or the path of a calibrated policy (``defrag calibrate``), read and checked now."""
    if value is None:
        return None
    from memwork.defrag.calibrate import load_policy

    load_policy(value)
    return str(value)


def path_pair(name: str, value: Any) -> tuple[str, str] | None:
    """None or two entry paths (normalised)."""
    if value is None:
        return None
    from memwork.entry import normalize_path
    from memwork.errors import InvalidPath

    if isinstance(value, str) or not isinstance(value, list | tuple) or len(value) != 2:
        raise UsageError(name, value, "must be two entry paths")
    try:
        a, b = (normalize_path(v) for v in value)
    except InvalidPath as exc:
        raise UsageError(name, " ".join(map(str, value)), str(exc.problem)) from None
    return a, b


def ordered(low: str, high: str) -> Callable[[dict[str, Any]], None]:
    """A check across parameters: ``low`` must not exceed ``high``."""

    def check(params: dict[str, Any]) -> None:
        if params[low] > params[high]:
            raise UsageError(low, params[low], f"must not exceed {high} ({params[high]})")

    return check


# ---- the parameters the actions share (their defaults) ------------------------------------------
SIMILARITY_THRESHOLD = Param(0.85, unit, float, "Duplicate threshold, 0..1.")
MIN_SIMILARITY = Param(0.60, unit, float, "Related: lowest cosine, 0..1.")
MAX_SIMILARITY = Param(0.85, unit, float, "Related: cosine below this, 0..1.")
AGE_DAYS = Param(90, non_negative(), float, "Minimum age in days (archival, stubs).")
MAX_HITS = Param(10, non_negative(integer=True), int, "Most hits a deleted stub/entry may have.")
MIN_QUALITY_SCORE = Param(20, non_negative(upper=100), float, "Compact below this quality.")
MIN_AGE_DAYS = Param(30, non_negative(), float, "Compact: minimum age in days.")
STRATEGY = Param(
    "keep_newer",
    strategy,
    str,
    "keep_newer (default), keep_larger or combine.",
    aliases=("merge_strategy",),
)
CONFIDENCE_FILTER = Param(None, confidence, str, "Only this confidence: high, medium, low.")
MIN_CLUSTER_DENSITY = Param(
    0.7,
    unit,
    float,
    "A cluster of 3+ with fewer of its pairs found than this share is chained: listed, not merged.",
)
APPROVED = Param(None, review_csv, str, "Review CSV: merge only its approved pairs.")
POLICY = Param(
    None,
    policy_file,
    str,
    "Calibrated policy JSON (defrag calibrate): pairs scored by it, replacing --similarity-threshold; "
    "merges only at or above its auto_merge.",
)
CONTRADICTION_FLOOR = Param(
    0.60,
    unit,
    float,
    "Supersede: lowest max(Jaccard, cosine) of a candidate pair (the related band's floor), 0..1.",
)
PAIR = Param(
    None,
    path_pair,
    str,
    "Supersede only this pair (PATH_A PATH_B, one scope): the older one by the newer, rule or not.",
    nargs=2,
)


def since_value(name: str, value: Any) -> str | None:
    """None, or a ``--since`` value that resolves (:mod:`memwork.defrag.since`), as given."""
    from memwork.defrag.since import check_since

    return check_since(name, value)


SINCE = Param(
    None,
    since_value,
    str,
    "Only pairs holding an entry created or changed since RUN_ID (its start) or TIMESTAMP "
    "(ISO-8601 with timezone): exactly those of a full run, comparing only the changed entries.",
)


def candidates(name: str, value: Any) -> str:
    """How pairs are found: ``exact`` or ``hnsw`` (:mod:`memwork.defrag.approximate`)."""
    label = str(value).strip().lower()
    if label not in ("exact", "hnsw"):
        raise UsageError(name, value, "must be exact or hnsw")
    return label


def optional_whole(low: int, high: int | None = None) -> Check:
    """None (the default) or a whole number from ``low`` (to ``high`` when given)."""

    def check(name: str, value: Any) -> int | None:
        if value is None:
            return None
        too_high = high is not None and isinstance(value, int) and value > high
        if isinstance(value, bool) or not isinstance(value, int) or value < low or too_high:
            bound = f"from {low} to {high}" if high is not None else f">= {low}"
            raise UsageError(name, value, f"must be a whole number {bound}")
        return value

    return check


CANDIDATES = Param(
    "exact",
    candidates,
    str,
    "exact (default: every pair) or hnsw (PostgreSQL + pgvector: candidates from the store's HNSW "
    "index, verified exactly, with a recall estimate).",
)
#: the knobs of ``--candidates hnsw`` (None: its default; refused with ``exact``)
APPROXIMATE = {
    "k": Param(None, optional_whole(1, 1000), int, "hnsw: neighbours asked per entry (default 50)."),
    "ef_search": Param(None, optional_whole(1, 1000), int, "hnsw: hnsw.ef_search (default 2k, >= 40)."),
    "recall_sample": Param(
        None, optional_whole(1), int, "hnsw: random rows whose exact pairs check the recall (default 1000)."
    ),
    "exact_upto": Param(
        None, optional_whole(0), int, "hnsw: scopes of at most this many entries are joined exactly (10000)."
    ),
}
