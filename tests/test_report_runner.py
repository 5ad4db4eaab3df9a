"""The report runner on a tiny notebook: artifacts, parameters, failures, manifest, index, CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import ReportExecutionError, ReportInputRefused, UsageError
from memwork.reports import build_index, collect_runs, read_parameters, run_report, verify_manifest
from memwork.reports.html import external_references, strip_external
from memwork.reports.kernel import ensure_kernelspec
from memwork.reports.params import parse_parameters

TINY = str(Path(__file__).parent / "data" / "tiny_report.ipynb")


def test_parameters_cell_is_parsed_with_types_defaults_and_help():
    params = parse_parameters("a: int = 3  # how many\nb: str | None = None  # optional\nc: float = 0.5\n")
    assert params["a"].annotation == "int" and params["a"].default == 3 and params["a"].help == "how many"
    assert params["b"].annotation == "str | None" and params["c"].help == ""
    assert list(read_parameters(TINY)) == ["n", "verdict", "boom", "ratio"]


def test_run_writes_every_artifact_and_a_manifest_that_matches(tmp_path):
    run = run_report(TINY, {"n": "4", "ratio": "0.25"}, tmp_path)
    assert run.verdict == "PASS" and run.exit_code == 0
    assert run.parameters == {"n": 4, "ratio": 0.25}  # coerced from the annotations
    assert run.run_dir.parent == tmp_path and run.run_dir.name.endswith("-tiny_report")
    summary = json.loads(run.summary_path.read_text())
    assert summary["n"] == 4 and summary["verdict"] == "PASS"
    manifest = json.loads(run.manifest_path.read_text())
    assert {a["file"] for a in manifest["artifacts"]} == {
        "tiny_report.ipynb",
        "tiny_report.html",
        "summary.json",
    }
    assert all(len(a["sha256"]) == 64 for a in manifest["artifacts"])
    assert verify_manifest(run.run_dir) == []
    run.summary_path.write_text("{}")
    assert verify_manifest(run.run_dir) == ["summary.json"]


def test_html_is_self_contained_with_inline_figures_hidden_code_and_provenance(tmp_path):
    run = run_report(TINY, {"n": 2}, tmp_path)
    page = run.html_path.read_text()
    assert external_references(page) == []
    assert "<script" not in page.lower()
    assert re.search(r"<img[^>]+src=\"data:image/png;base64,", page)
    assert "ax.bar(" not in page  # code hidden by default
    for text in ("git commit", "papermill", "python", "Parameters", "PASS", "duration"):
        assert text in page


def test_strip_external_removes_cdn_scripts_links_and_fonts():
    page = (
        '<html><head><script src="https://cdn.example/require.js"></script>'
        '<link rel="stylesheet" href="https://fonts.example/x.css"><style>@import url("https://x/y.css");'
        " .a{background:url(https://x/i.png)}</style></head>"
        '<body><img src="//cdn.example/a.png"></body></html>'
    )
    assert external_references(page)
    assert external_references(strip_external(page)) == []


def test_unknown_parameter_is_rejected_before_running(tmp_path):
    with pytest.raises(UsageError, match="nope"):
        run_report(TINY, {"nope": 1}, tmp_path)
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written
    with pytest.raises(UsageError, match="expected int"):
        run_report(TINY, {"n": "many"}, tmp_path)


def test_bad_value_refused_in_the_validation_cell_is_one_line_and_writes_nothing(tmp_path):
    """Bad input is not a run: the notebook's own check refuses it, and the run folder (and the
    reports folder this run created) is removed again -- exit 2, nothing written, no index."""
    out = tmp_path / "new" / "reports"
    with pytest.raises(ReportInputRefused) as info:
        run_report(TINY, {"n": -1}, out)
    error = info.value
    message = str(error)
    assert "UsageError: n=-1: must be >= 0" in message and "\n" not in message
    assert error.exit_code == 2 and isinstance(error, UsageError)
    assert (error.report, error.ename, error.evalue) == ("tiny_report", "UsageError", "n=-1: must be >= 0")
    assert list(tmp_path.iterdir()) == []  # neither the run folder nor the folders made for it
    # an existing reports folder stays, with its other runs, and its index is not rebuilt
    kept = run_report(TINY, {}, tmp_path / "reports")
    index = (tmp_path / "reports" / "index.html").read_bytes()
    with pytest.raises(ReportInputRefused):
        run_report(TINY, {"n": -1}, tmp_path / "reports")
    assert [p.name for p in (tmp_path / "reports").iterdir() if p.is_dir()] == [kept.run_id]
    assert (tmp_path / "reports" / "index.html").read_bytes() == index


def test_a_failed_check_keeps_every_artifact(tmp_path):
    """Artifacts are for a run that started: a failing cell (not bad input) leaves them all."""
    with pytest.raises(ReportExecutionError) as info:
        run_report(TINY, {"boom": "yes"}, tmp_path)
    error = info.value
    assert error.exec_count and error.cell == f"cell {error.exec_count}"
    run = error.run
    assert run is not None and error.run_dir == run.run_dir and run.failure is not None
    cell = run.failure
    assert (cell.cell_index, cell.exec_count) == (error.cell_index, error.exec_count)
    assert run.error == f"cell {error.exec_count}: RuntimeError: boom requested second line"
    # papermill's numbering: cell_index counts the executed notebook's cells before papermill adds
    # its error banners to the saved copy; exec_count is the [n] a reader sees beside the cell
    saved = nbformat.read(str(run.notebook_path), as_version=4).cells
    executed = [c for c in saved if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    assert "raise RuntimeError" in executed[error.cell_index].source
    assert [c.source for c in saved if c.get("execution_count") == error.exec_count] == [
        executed[error.cell_index].source
    ]
    for path in (run.notebook_path, run.html_path, run.summary_path, run.manifest_path):
        assert path.exists()
    assert json.loads(run.summary_path.read_text())["verdict"] == "ERROR"
    # the runner rebuilt the folder's index on the failure path too
    assert run.index_path == tmp_path.resolve() / "index.html" and run.run_id in run.index_path.read_text()


def test_failing_cell_error_is_one_line_and_not_bad_input(tmp_path):
    with pytest.raises(ReportExecutionError) as info:
        run_report(TINY, {"boom": "yes"}, tmp_path)
    assert "RuntimeError: boom requested second line" in str(info.value)
    assert info.value.ename == "RuntimeError" and info.value.evalue == "boom requested second line"
    assert info.value.exit_code == 1 and info.value.run.exit_code == 1  # a broken cell is not bad input


def test_index_lists_every_run_with_its_verdict(tmp_path):
    run_report(TINY, {"verdict": "FAIL"}, tmp_path)
    run_report(TINY, {}, tmp_path)
    path = build_index(tmp_path)
    rows = collect_runs(tmp_path)
    assert sorted(r["verdict"] for r in rows) == ["FAIL", "PASS"]
    page = path.read_text()
    assert page.count("-tiny_report</a>") == 2 and external_references(page) == []


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(main, ["report", TINY, "-p", "n", "2", "--out", str(tmp_path), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["summary"]["verdict"] == "PASS"
    failed = runner.invoke(main, ["report", TINY, "-p", "verdict", "FAIL", "--out", str(tmp_path)])
    assert failed.exit_code == 1
    unknown = runner.invoke(main, ["report", TINY, "-p", "bogus", "1", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "bogus" in unknown.stderr
    bad = runner.invoke(main, ["report", TINY, "-p", "n", "-5", "--out", str(tmp_path), "--json"])
    assert bad.exit_code == 2
    assert "UsageError: n=-5: must be >= 0" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stdout == ""  # bad input: no run, so no run record either
    broken = runner.invoke(main, ["report", TINY, "-p", "boom", "true", "--out", str(tmp_path)])
    assert broken.exit_code == 1 and "RuntimeError: boom requested" in broken.stderr
    index = runner.invoke(main, ["report", "index", "--out", str(tmp_path), "--json"])
    assert index.exit_code == 0 and len(json.loads(index.stdout)["runs"]) == 3  # not the refused one
    missing = runner.invoke(main, ["report", "no_such_report", "--out", str(tmp_path)])
    assert missing.exit_code == 2


def test_cli_list_shows_every_report_with_its_parameters():
    result = CliRunner().invoke(main, ["report", "list", "--json"])
    assert result.exit_code == 0
    reports = json.loads(result.stdout)
    assert {"health_report", "duplicate_review", "backfill_verification", "canary_signoff"} <= set(reports)
    assert all(p["help"] for p in reports["canary_signoff"])


def test_cli_run_leaves_stderr_clean(tmp_path):
    """No kernel chatter (TCP warnings, KeyboardInterrupt at shutdown) on a successful run's stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "memwork", "report", TINY, "-p", "n", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # the SIGINT jupyter_client sends every kernel it shuts down is logged at ERROR, sometimes
    spec = json.loads((ensure_kernelspec(tmp_path / "jupyter") / "kernels/python3/kernel.json").read_text())
    assert "--IPKernelApp.log_level=CRITICAL" in spec["argv"] and spec["argv"][0] == sys.executable


def _dying_notebook(path: Path) -> str:
    """A report whose kernel process exits in the middle of a cell (as a kill -9 or an OOM kill would)."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n: int = 1  # how many")
    params.metadata["tags"] = ["parameters"]
    body = "import os, sys\nsys.__stderr__.write('dying now\\n')\nsys.__stderr__.flush()\nos._exit(3)\n"
    nb.cells = [params, nbformat.v4.new_code_cell(body), nbformat.v4.new_code_cell("print('never')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return str(path)


def test_a_kernel_that_dies_leaves_an_error_run_with_every_artifact(tmp_path):
    """Not an empty run folder: the approver finds an ERROR verdict saying the kernel died."""
    notebook = _dying_notebook(tmp_path / "dying.ipynb")
    with pytest.raises(ReportExecutionError) as caught:
        run_report(notebook, {"n": 2}, tmp_path / "out")
    error = caught.value
    assert error.cell == "the kernel" and error.ename == "DeadKernelError" and error.exit_code == 1
    run = error.run
    assert run is not None and run.verdict == "ERROR" and run.exit_code == 1
    summary = json.loads(run.summary_path.read_text())
    assert summary["verdict"] == "ERROR" and "the kernel died" in summary["error"]
    assert run.html_path.exists() and verify_manifest(run.run_dir) == []
    assert [r["verdict"] for r in collect_runs(tmp_path / "out")] == ["ERROR"]


def test_the_kernels_own_stderr_goes_to_its_log_not_to_the_callers(tmp_path):
    """ipykernel's and tornado's logging (a closed ZMQ socket at shutdown once broke the one-line
    refusal in CI) reaches the kernel's log file, never the caller's stderr."""
    log = tmp_path / "kernel-stderr.log"
    env = {**os.environ, "MEMWORK_KERNEL_LOG": str(log)}
    # a kernel at log level WARN says "running over TCP without encryption" as it starts
    command = [sys.executable, "-m", "memwork.reports.kernel", "--IPKernelApp.log_level=WARN"]
    command += ["-f", str(tmp_path / "connection.json")]
    kernel = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while "without encryption" not in (log.read_text() if log.exists() else ""):
            assert kernel.poll() is None, kernel.stderr.read() if kernel.stderr else ""
            time.sleep(0.05)
    finally:
        kernel.kill()
        _, stderr = kernel.communicate(timeout=60)
    assert stderr == ""
    spec = json.loads((ensure_kernelspec(tmp_path / "jupyter") / "kernels/python3/kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "memwork.reports.kernel"]
