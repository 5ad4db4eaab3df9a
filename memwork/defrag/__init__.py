"""The defrag engine: ten actions that find and fix duplicates, stale entries and weak metadata, safely.

Each action is declared once in :mod:`memwork.defrag.table` (:data:`ACTIONS`); ``run_action`` and
``memwork defrag`` are generated from it.

Library first: :func:`run_action` runs an action against a store; the pure functions below work on
plain lists of :class:`~memwork.entry.Entry` (benchmarks, notebooks). Every modifying action builds a
:class:`Plan` first; a dry run returns it, ``apply=True`` executes exactly it and journals every
change so :func:`undo` can restore the store.

The package imports nothing until a name is asked for (PEP 562): ``from memwork.defrag import X`` loads
only the submodule that defines ``X``, so a notebook that needs the health score does not pay for the
calibration, the label-free estimate or the review queue (issue 20).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memwork.lazy import lazy_exports

if TYPE_CHECKING:
    from memwork.defrag.actions import ActionResult, run_action
    from memwork.defrag.apply import Change, compute_changes, execute
    from memwork.defrag.calibrate import Calibration, Policy, calibrate, load_policy, write_policy
    from memwork.defrag.contradictions import Contradiction, detect
    from memwork.defrag.findings import (
        EntryReport,
        Pair,
        analyze,
        find_archival_candidates,
        find_duplicates,
        find_low_quality,
        find_related,
        flag_contradictions,
    )
    from memwork.defrag.journal import list_runs, read_run, undo
    from memwork.defrag.label_free import LabelFreeEstimate, estimate_without_labels
    from memwork.defrag.merge import STRATEGIES, merge_entries, union_metadata
    from memwork.defrag.params import Param
    from memwork.defrag.partitioned import PartitionedRun, PartitionsLost, run_partitioned
    from memwork.defrag.plan import Operation, Plan
    from memwork.defrag.planners import (
        Planned,
        plan_cleanup_stubs,
        plan_compact,
        plan_link_related,
        plan_merge_duplicates,
        plan_supersede,
    )
    from memwork.defrag.review import read_approved_pairs, write_review_csv
    from memwork.defrag.review_queue import ReviewQueue, build_review_queue
    from memwork.defrag.scores import HEALTH_BANDS, Health, health, health_band, quality_issues, quality_score
    from memwork.defrag.table import (
        ACTIONS,
        DEFAULTS,
        Action,
        lookup,
        normalize_action,
        register,
        validate_params,
    )

#: every public name -> the submodule defining it (one line per name: add yours in its place)
_EXPORTS = {
    "ActionResult": "actions",
    "run_action": "actions",
    "Change": "apply",
    "compute_changes": "apply",
    "execute": "apply",
    "Calibration": "calibrate",
    "Policy": "calibrate",
    "calibrate": "calibrate",
    "load_policy": "calibrate",
    "write_policy": "calibrate",
    "Contradiction": "contradictions",
    "detect": "contradictions",
    "EntryReport": "findings",
    "Pair": "findings",
    "analyze": "findings",
    "find_archival_candidates": "findings",
    "find_duplicates": "findings",
    "find_low_quality": "findings",
    "find_related": "findings",
    "flag_contradictions": "findings",
    "list_runs": "journal",
    "read_run": "journal",
    "undo": "journal",
    "LabelFreeEstimate": "label_free",
    "estimate_without_labels": "label_free",
    "STRATEGIES": "merge",
    "merge_entries": "merge",
    "union_metadata": "merge",
    "Param": "params",
    "Operation": "plan",
    "Plan": "plan",
    "Planned": "planners",
    "plan_cleanup_stubs": "planners",
    "plan_compact": "planners",
    "plan_link_related": "planners",
    "plan_merge_duplicates": "planners",
    "plan_supersede": "planners",
    "PartitionedRun": "partitioned",
    "PartitionsLost": "partitioned",
    "run_partitioned": "partitioned",
    "read_approved_pairs": "review",
    "write_review_csv": "review",
    "ReviewQueue": "review_queue",
    "build_review_queue": "review_queue",
    "HEALTH_BANDS": "scores",
    "Health": "scores",
    "health": "scores",
    "health_band": "scores",
    "quality_issues": "scores",
    "quality_score": "scores",
    "ACTIONS": "table",
    "Action": "table",
    "DEFAULTS": "table",
    "lookup": "table",
    "normalize_action": "table",
    "register": "table",
    "validate_params": "table",
}

#: the same names as ``_EXPORTS`` (tests/test_lazy_imports.py checks)
__all__ = [
    "ACTIONS",
    "DEFAULTS",
    "HEALTH_BANDS",
    "STRATEGIES",
    "Action",
    "ActionResult",
    "Calibration",
    "Change",
    "Contradiction",
    "EntryReport",
    "Health",
    "LabelFreeEstimate",
    "Operation",
    "Pair",
    "Param",
    "PartitionedRun",
    "PartitionsLost",
    "Plan",
    "Planned",
    "Policy",
    "ReviewQueue",
    "analyze",
    "build_review_queue",
    "calibrate",
    "compute_changes",
    "detect",
    "estimate_without_labels",
    "execute",
    "find_archival_candidates",
    "find_duplicates",
    "find_low_quality",
    "find_related",
    "flag_contradictions",
    "health",
    "health_band",
    "list_runs",
    "load_policy",
    "lookup",
    "merge_entries",
    "normalize_action",
    "plan_cleanup_stubs",
    "plan_compact",
    "plan_link_related",
    "plan_merge_duplicates",
    "plan_supersede",
    "quality_issues",
    "quality_score",
    "read_approved_pairs",
    "read_run",
    "register",
    "run_action",
    "run_partitioned",
    "undo",
    "union_metadata",
    "validate_params",
    "write_policy",
    "write_review_csv",
]


if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


class _Package(ModuleType):
    """Keeps a public name that is also a submodule's name (``calibrate``) the public object: importing
    the submodule binds the module to the package, which ``__init__`` importing every name eagerly
    used to overwrite with the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and value.__name__ == f"{__name__}.{_EXPORTS.get(name)}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
