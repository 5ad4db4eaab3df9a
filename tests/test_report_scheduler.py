"""Report notebooks run as a scheduler runs them -- ``papermill IN OUT -p ...`` in a subprocess, no
``memwork report``, no ``MEMWORK_REPORT_DIR`` -- behave as under ``memwork report``: an unknown
parameter is refused, INCONCLUSIVE has its own exception name, and the run folder (summary.json,
HTML, manifest) is written to the documented default location."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from memwork.reports import notebooks_dir, verify_manifest

pytestmark = pytest.mark.slow

PAPERMILL = [sys.executable, "-m", "papermill", "--no-progress-bar"]


def _papermill(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MEMWORK_REPORT_DIR", "JPY_SESSION_NAME")}
    environ.update(env)
    return subprocess.run(
        [*PAPERMILL, *args], capture_output=True, text=True, cwd=cwd, timeout=300, env=environ
    )


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def test_a_misspelt_parameter_fails_the_scheduled_run_and_names_it(tmp_path):
    notebook = str(notebooks_dir() / "health_report.ipynb")
    done = _papermill([notebook, str(tmp_path / "out.ipynb"), "-p", "minscore", "90"], tmp_path)
    assert done.returncode != 0
    assert "UsageError: parameter='minscore': not a parameter of this report" in done.stdout + done.stderr
    assert _runs(tmp_path / "reports") == []  # refused before anything was written


def test_a_scheduled_run_writes_summary_html_and_manifest_to_the_default_location(tmp_path):
    notebook = str(notebooks_dir() / "health_report.ipynb")
    first = _papermill([notebook, str(tmp_path / "a.ipynb"), "-p", "age_days", "30"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    second = _papermill([notebook, str(tmp_path / "b.ipynb"), "-p", "age_days", "30"], tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    runs = _runs(tmp_path / "reports")
    assert [p.name.endswith("-health_report") for p in runs] == [True, True]
    latest = runs[-1]
    summary = json.loads((latest / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["gates"][0]["threshold"] == 60
    assert summary["fingerprint"]["parameters"]["age_days"] == 30
    # the second scheduled run is compared with the first, and says so first
    assert summary["comparison"]["comparable"] is True and summary["comparison"]["previous"] == runs[0].name
    page = (latest / "health_report.html").read_text()
    assert "PASS: 1 of 1 gates passed" in page and "comparable" in page
    assert "Coverage (% of entries): metadata" in page  # the figures came from papermill's notebook
    assert "low_quality.csv" in {p.name for p in latest.iterdir()}
    manifest = json.loads((latest / "manifest.json").read_text())
    assert {"summary.json", "health_report.html"} <= {a["file"] for a in manifest["artifacts"]}
    assert verify_manifest(latest) == []
    assert (tmp_path / "reports" / "index.html").is_file()


def test_inconclusive_has_its_own_exception_name_a_scheduler_can_map(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata = nbformat.read(str(notebooks_dir() / "health_report.ipynb"), as_version=4).metadata
    params = nbformat.v4.new_code_cell('verdict: str = "PASS"  # the verdict to record')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell("from memwork.reports.standalone import begin\nbegin(globals())"),
        nbformat.v4.new_code_cell(
            "from memwork.reports import gate_on_verdict, record\n"
            "summary = record({'verdict': verdict, 'reasons': ['rbo: 12 of 20 samples']})\n"
            "gate_on_verdict(summary)"
        ),
    ]
    path = tmp_path / "undecided.ipynb"
    nbformat.write(nb, str(path))
    done = _papermill([str(path), str(tmp_path / "o.ipynb"), "-p", "verdict", "INCONCLUSIVE"], tmp_path)
    assert done.returncode != 0
    assert "VerdictInconclusive: verdict INCONCLUSIVE: rbo: 12 of 20 samples" in done.stdout + done.stderr
    [run] = _runs(tmp_path / "reports")
    assert json.loads((run / "summary.json").read_text())["verdict"] == "INCONCLUSIVE"
    nogo = _papermill([str(path), str(tmp_path / "n.ipynb"), "-p", "verdict", "NO-GO"], tmp_path)
    assert "VerdictError: verdict NO-GO" in nogo.stdout + nogo.stderr


def test_the_real_canary_signoff_inconclusive_under_plain_papermill(tmp_path):
    """The shipped canary_signoff notebook, run by papermill as a scheduler runs it, on too few shadow
    reads: papermill exits 1 (as for NO-GO), the error cell's ``ename`` is ``VerdictInconclusive`` --
    what docs/reports.md tells a scheduler to map to exit 3, the code ``memwork report`` exits with."""
    from test_canary_judge import comparison, write_log

    from memwork.errors import VerdictInconclusive

    few = write_log(tmp_path / "few.jsonl", [comparison(i, 20.0 + i % 3, 21.0 + i % 4) for i in range(12)])
    waive = (
        "health_summary: a synthetic log; verification_summary: a synthetic log; "
        "leak_probes: a synthetic log, no service"
    )
    notebook = str(notebooks_dir() / "canary_signoff.ipynb")
    out = tmp_path / "out.ipynb"
    done = _papermill(
        [notebook, str(out), "-p", "comparison_log", str(few), "-p", "waive", waive], tmp_path
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    code = [c for c in nbformat.read(str(out), as_version=4).cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert [e["ename"] for e in errors] == ["VerdictInconclusive"], errors
    assert "gate_on_verdict" in code[-1].source and code[-1].outputs[-1]["ename"] == "VerdictInconclusive"
    assert VerdictInconclusive.exit_code == 3  # the documented mapping of that ename
    docs = (Path(__file__).parents[1] / "docs" / "reports.md").read_text(encoding="utf-8")
    assert "| `VerdictInconclusive` | INCONCLUSIVE | 3 |" in docs
    [run] = _runs(tmp_path / "reports")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == "INCONCLUSIVE" and summary["exit_code"] == 3, summary["reasons"]


def test_off_writes_nothing(tmp_path):
    notebook = str(notebooks_dir() / "health_report.ipynb")
    done = _papermill([notebook, str(tmp_path / "o.ipynb")], tmp_path, MEMWORK_REPORT_DIR="off")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "reports").exists()
