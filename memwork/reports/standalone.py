"""A report notebook run by plain papermill (a scheduler) behaves as under ``memwork report``.

``memwork report`` checks the parameters before a kernel starts and writes the run folder itself.
A scheduler calling ``papermill NOTEBOOK OUT -p ...`` has neither, so the notebook does it from the
inside:

* :func:`begin` (the validation cell; :func:`~memwork.reports.call_with_parameters` calls it) refuses a
  parameter name the ``parameters`` cell does not declare -- papermill only warns "Passed unknown
  parameter" and the gate that name meant would silently stay at its default -- with a
  :class:`~memwork.errors.UsageError` naming it, so papermill exits non-zero;
* it chooses where the run's artifacts go: ``$MEMWORK_REPORT_DIR`` when set (the runner sets it),
  else a new folder ``<reports>/<UTC stamp>-<report>/`` under ``$MEMWORK_REPORTS_DIR`` or
  ``./reports`` -- the folder ``memwork report`` writes to (see :data:`DEFAULT_LOCATION`);
* :func:`finish` (the last cell, through :func:`~memwork.reports.gate_on_verdict`) writes the HTML,
  the manifest and the reports index there. The HTML holds the figures when papermill's output
  notebook can be found (``--inject-output-path``, or the papermill command line of the kernel's
  parent process); else it is the verdict header with its gates and a pointer to that notebook.

Nothing is written for a notebook opened in JupyterLab (the kernel of a Jupyter server) or with
``MEMWORK_REPORT_DIR=off`` (nbval in ``make test``).
"""

from __future__ import annotations

import ast
import os
import shlex
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwork.errors import UsageError

#: documented in README (Reports) and docs/reports.md
DEFAULT_LOCATION = "$MEMWORK_REPORT_DIR, else <$MEMWORK_REPORTS_DIR or ./reports>/<UTC stamp>-<report>/"
OFF_VALUES = ("off", "none", "-")
#: what papermill's Python translator writes as the first line of the cell it injects
INJECTED_HEADER = "# Parameters"
#: names papermill may inject on its own (``--inject-paths``)
PAPERMILL_NAMES = ("PAPERMILL_INPUT_PATH", "PAPERMILL_OUTPUT_PATH")
STANDALONE_ENV = "MEMWORK_REPORT_STANDALONE"


@dataclass
class StandaloneRun:
    """A run this kernel writes itself (no runner around it)."""

    name: str
    run_dir: Path
    started: datetime
    parameters: dict[str, Any] = field(default_factory=dict)
    output_notebook: str | None = None


_current: StandaloneRun | None = None


def _history(namespace: dict[str, Any]) -> list[str]:
    history = namespace.get("In")
    return [str(s) for s in history] if isinstance(history, list) else []


def _names(source: str, *, annotated_only: bool) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign) and not annotated_only:
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def cells_run(namespace: dict[str, Any]) -> tuple[list[str], list[str] | None]:
    """(names the ``parameters`` cell declares, names papermill injected -- None when it injected
    nothing), read from the kernel's input history (``In``)."""
    history = _history(namespace)
    injected_at = next(
        (i for i in range(len(history) - 1, -1, -1) if history[i].lstrip().startswith(INJECTED_HEADER)), None
    )
    before = history[:injected_at] if injected_at is not None else history
    declared = next((n for n in (_names(s, annotated_only=True) for s in before) if n), [])
    injected = None if injected_at is None else _names(history[injected_at], annotated_only=False)
    return declared, injected


def refuse_unknown(namespace: dict[str, Any]) -> None:
    """:class:`UsageError` for the first injected name the parameters cell does not declare."""
    declared, injected = cells_run(namespace)
    if not injected or not declared:
        return
    unknown = [n for n in injected if n not in declared and n not in PAPERMILL_NAMES]
    if unknown:
        raise UsageError(
            "parameter", unknown[0], f"not a parameter of this report (known: {', '.join(declared)})"
        )


def report_name(declared: list[str]) -> str:
    """The report whose ``parameters`` cell declares exactly ``declared`` (else ``report``)."""
    from memwork.reports.params import read_parameters
    from memwork.reports.runner import list_reports, notebooks_dir

    for name in list_reports():
        try:
            if list(read_parameters(notebooks_dir() / f"{name}.ipynb")) == declared:
                return name
        except (OSError, ValueError, SyntaxError):
            continue
    return "report"


def writes_nothing() -> bool:
    """True for a notebook opened by hand in JupyterLab, or with ``MEMWORK_REPORT_DIR=off``."""
    from memwork.reports.summary import REPORT_DIR_ENV

    target = os.environ.get(REPORT_DIR_ENV, "")
    if target.strip().lower() in OFF_VALUES:
        return True
    return not target and bool(os.environ.get("JPY_SESSION_NAME"))


def begin(namespace: dict[str, Any]) -> StandaloneRun | None:
    """Refuse unknown parameter names; outside the runner, open this run's default folder.

    Idempotent: the second call in a kernel returns the same run.
    """
    global _current
    from memwork.reports.summary import REPORT_DIR_ENV

    refuse_unknown(namespace)
    if _current is not None or os.environ.get(REPORT_DIR_ENV) or writes_nothing():
        return _current
    from memwork.reports.runner import _new_run_dir, reports_dir
    from memwork.reports.secrets import split_secrets

    declared, _ = cells_run(namespace)
    name = report_name(declared)
    start = datetime.now(UTC)
    _, run_dir = _new_run_dir(reports_dir(), name, start)
    shown, _secrets = split_secrets({n: namespace[n] for n in declared if n in namespace})
    output = namespace.get("PAPERMILL_OUTPUT_PATH")
    _current = StandaloneRun(name, run_dir, start, shown, str(output) if output else papermill_output())
    os.environ[REPORT_DIR_ENV] = str(run_dir)
    os.environ[STANDALONE_ENV] = str(run_dir)
    return _current


def papermill_output(pid: int | None = None) -> str | None:
    """The output notebook of the papermill command that started this kernel (Linux ``/proc``), or
    None when the parent is not a papermill command line."""
    pid = os.getppid() if pid is None else pid
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return None
    at = next((i for i, a in enumerate(args) if Path(a).name.startswith("papermill")), None)
    if at is None:
        return None
    notebooks = [a for a in args[at + 1 :] if a.endswith(".ipynb") and not a.startswith("-")]
    if len(notebooks) < 2:
        return None
    cwd = Path(f"/proc/{pid}/cwd")
    out = Path(notebooks[1])
    try:
        return str(out if out.is_absolute() else cwd.resolve() / out)
    except OSError:
        return str(out)


def current() -> StandaloneRun | None:
    return _current


def finish(summary: dict[str, Any]) -> Path | None:
    """Outside the runner: the HTML, manifest and reports index for this run; the run folder."""
    run = _current
    if run is None:
        return None
    import nbformat

    from memwork.provenance import folder_commit, memwork_version
    from memwork.reports.html import render_html
    from memwork.reports.index import build_index
    from memwork.reports.runner import ReportRun, git_commit, package_versions, write_manifest

    finished = datetime.now(UTC)
    report = ReportRun(
        run.name, run.run_dir.name, run.run_dir, run.parameters, run.started.isoformat(timespec="seconds")
    )
    report.finished_at = finished.isoformat(timespec="seconds")
    report.duration_s = (finished - run.started).total_seconds()
    report.summary = summary
    nb = None
    if run.output_notebook and Path(run.output_notebook).is_file():
        try:
            nb = nbformat.read(run.output_notebook, as_version=4)
        except (OSError, ValueError):
            nb = None
    if nb is None:
        note = (
            "Plain papermill run: the figures and tables are in the notebook papermill wrote"
            + (f" (`{run.output_notebook}`)" if run.output_notebook else "")
            + ". Run papermill with `--inject-output-path` to have them in this page too."
        )
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(note)])
    workdir = Path.cwd()
    meta = {
        **report.to_dict(),
        "reasons": summary.get("reasons") or [],
        "gates": summary.get("gates"),
        "summary": summary,
        "versions": package_versions(),
        "memwork_version": memwork_version(),
        "git_commit": git_commit(),
        "working_folder_commit": folder_commit(workdir),
        "python_executable": sys.executable,
        "runner": "papermill " + shlex.quote(run.output_notebook or "?"),
        "cell_timings": [],
    }
    from memwork.reports.history import attach_comparison

    attach_comparison(report, meta)
    report.html_path.write_text(render_html(nb, meta), encoding="utf-8")
    write_manifest(report, meta)
    build_index(run.run_dir.parent)
    return run.run_dir


def given_names(namespace: dict[str, Any]) -> tuple[str, ...]:
    """The parameter names this run set explicitly (papermill's injected cell; empty by hand)."""
    _, injected = cells_run(namespace)
    return tuple(injected or ())
