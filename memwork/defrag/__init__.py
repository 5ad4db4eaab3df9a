"""The defrag engine: ten actions that find and fix duplicates, stale entries and weak metadata, safely.

Each action is declared once in :mod:`memwork.defrag.table` (:data:`ACTIONS`); ``run_action`` and
``memwork defrag`` are generated from it.

Library first: :func:`run_action` runs an action against a store; the pure functions below work on
plain lists of :class:`~memwork.entry.Entry` (benchmarks, notebooks). Every modifying action builds a
:class:`Plan` first; a dry run returns it, ``apply=True`` executes exactly it and journals every
change so :func:`undo` can restore the store.
"""

from __future__ import annotations

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
