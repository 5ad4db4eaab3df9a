"""Report runner: parameterised notebooks executed with papermill into auditable artifacts.

``run_report(name, params)`` -> executed ``.ipynb``, self-contained HTML, ``summary.json`` and a
SHA-256 ``manifest.json`` in ``reports/<UTC stamp>-NAME/``; ``build_index()`` lists every run.
Notebooks hand their result over with :func:`record`.

Names are imported from their submodule when first asked for (PEP 562): a report's kernel asking for
:func:`record` or :func:`real_value` does not load the runner, nbformat and the index (issue 20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwork.lazy import lazy_exports

if TYPE_CHECKING:
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

#: every public name -> the submodule defining it (one line per name)
_EXPORTS = {
    "build_index": "index",
    "collect_runs": "index",
    "Parameter": "params",
    "read_parameters": "params",
    "ReportRun": "runner",
    "find_notebook": "runner",
    "list_reports": "runner",
    "notebooks_dir": "runner",
    "reports_dir": "runner",
    "run_report": "runner",
    "verify_manifest": "runner",
    "call_with_parameters": "secrets",
    "real_value": "secrets",
    "gate_on_verdict": "summary",
    "load_summary": "summary",
    "record": "summary",
}

#: the same names as ``_EXPORTS`` (tests/test_lazy_imports.py checks)
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

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
