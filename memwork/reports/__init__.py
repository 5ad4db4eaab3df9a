"""Report runner: parameterised notebooks executed with papermill into auditable artifacts.

``run_report(name, params)`` -> executed ``.ipynb``, self-contained HTML, ``summary.json`` and a
SHA-256 ``manifest.json`` in ``reports/<UTC stamp>-NAME/``; ``build_index()`` lists every run.
Notebooks hand their result over with :func:`record`.
"""

from __future__ import annotations

from memwork.reports.index import build_index, collect_runs
from memwork.reports.params import Parameter, read_parameters
from memwork.reports.runner import (
    ReportRun,
    find_notebook,
    list_reports,
    notebooks_dir,
    reports_dir,
    run_report,
    verify_manifest,
)
from memwork.reports.secrets import call_with_parameters, real_value
from memwork.reports.summary import gate_on_verdict, load_summary, record

__all__ = [
    "Parameter",
    "ReportRun",
    "build_index",
    "call_with_parameters",
    "collect_runs",
    "find_notebook",
    "gate_on_verdict",
    "list_reports",
    "load_summary",
    "notebooks_dir",
    "read_parameters",
    "real_value",
    "record",
    "reports_dir",
    "run_report",
    "verify_manifest",
]
