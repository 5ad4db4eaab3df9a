"""Action names, their parameters and defaults, and validation (a usage error, never a silent default)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from memwork.defrag.merge import STRATEGIES
from memwork.defrag.scores import CONFIDENCE_LEVELS
from memwork.errors import UsageError

_RELATED = {"min_similarity": 0.60, "max_similarity": 0.85}

#: every action with its parameters and the guide's defaults
DEFAULTS: dict[str, dict[str, Any]] = {
    "analyze": {},
    "find_duplicates": {"similarity_threshold": 0.85},
    "find_low_quality": {"confidence_filter": None},
    "find_archival_candidates": {"age_days": 90},
    "find_related": dict(_RELATED),
    "link_related": dict(_RELATED),
    "merge_duplicates": {"similarity_threshold": 0.85, "strategy": "keep_newer", "approved": None},
    "cleanup_stubs": {"age_days": 90, "max_hits": 10},
    "compact": {"min_quality_score": 20, "min_age_days": 30, "max_hits": 0},
    # full: age_days/max_hits go to cleanup_stubs, compact_max_hits to compact
    "full": {
        "similarity_threshold": 0.85,
        "strategy": "keep_newer",
        "approved": None,
        "age_days": 90,
        "max_hits": 10,
        "min_quality_score": 20,
        "min_age_days": 30,
        "compact_max_hits": 0,
    },
}
ACTIONS = tuple(DEFAULTS)
READ_ONLY = frozenset(
    {"analyze", "find_duplicates", "find_low_quality", "find_archival_candidates", "find_related"}
)
ALIASES = {"merge_strategy": "strategy"}


def normalize_action(action: str) -> str:
    """``find-duplicates`` and ``find_duplicates`` are the same action; anything else is a usage error."""
    name = str(action).strip().lower().replace("-", "_")
    if name not in DEFAULTS:
        raise UsageError("action", action, f"unknown action; known: {', '.join(ACTIONS)}")
    return name


def _unit(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(field, value, "must be a number from 0 to 1")
    if not 0.0 <= value <= 1.0:
        raise UsageError(field, value, "must be from 0 to 1")
    return float(value)


def _non_negative(
    field: str, value: Any, *, integer: bool = False, upper: float | None = None
) -> float | int:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        raise UsageError(field, value, "must be a whole number" if integer else "must be a number")
    if value < 0:
        raise UsageError(field, value, "must not be negative")
    if upper is not None and value > upper:
        raise UsageError(field, value, f"must be at most {upper:g}")
    return value


def validate_params(action: str, params: dict[str, Any]) -> dict[str, Any]:
    """Defaults merged with ``params``, each checked; unknown parameters name the ones accepted."""
    defaults = DEFAULTS[action]
    out = dict(defaults)
    for raw_name, value in params.items():
        name = ALIASES.get(raw_name, raw_name)
        if name not in defaults:
            accepted = ", ".join(defaults) or "none"
            raise UsageError(name, value, f"not a parameter of {action} (accepts: {accepted})")
        if value is None and defaults[name] is not None:
            continue  # "not given" from the CLI: the default applies
        out[name] = value
    for name, value in out.items():
        out[name] = _check(name, value)
    if "min_similarity" in out and out["min_similarity"] > out["max_similarity"]:
        raise UsageError(
            "min_similarity",
            out["min_similarity"],
            f"must not exceed max_similarity ({out['max_similarity']})",
        )
    return out


def _check(name: str, value: Any) -> Any:
    if name in ("similarity_threshold", "min_similarity", "max_similarity"):
        return _unit(name, value)
    if name in ("age_days", "min_age_days"):
        return _non_negative(name, value)
    if name in ("max_hits", "compact_max_hits"):
        return _non_negative(name, value, integer=True)
    if name == "min_quality_score":
        return _non_negative(name, value, upper=100)
    if name == "strategy":
        if value not in STRATEGIES:
            raise UsageError("strategy", value, f"unknown strategy; known: {', '.join(STRATEGIES)}")
        return value
    if name == "confidence_filter":
        if value is None:
            return None
        label = str(value).strip().lower()
        if label not in CONFIDENCE_LEVELS:
            raise UsageError("confidence_filter", value, f"must be one of {', '.join(CONFIDENCE_LEVELS)}")
        return label
    if name == "approved":
        if value is None:
            return None
        path = Path(value)
        if not path.is_file():
            raise UsageError("approved", str(value), "no such file")
        return str(path)
    return value  # pragma: no cover - every parameter is listed above
