"""Scheduled papermill runs gate on the verdict; ``memwork report`` keeps 0/1/2; damaged run folders
never break ``report index`` or a later report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import CheckFailed, VerdictError
from memwork.reports import (
    build_index,
    gate_on_verdict,
    notebooks_dir,
    read_parameters,
    run_report,
)
from memwork.reports.index import scan_runs

REPORTS = ["backfill_verification", "canary_signoff", "duplicate_review", "health_report"]
TINY = str(Path(__file__).parent / "data" / "tiny_report.ipynb")
PAPERMILL = [sys.executable, "-m", "papermill", "--no-progress-bar"]


def test_every_notebook_declares_the_gate_and_calls_it_last():
    for name in REPORTS:
        path = notebooks_dir() / f"{name}.ipynb"
        assert read_parameters(path)["fail_on_verdict"].default is True, name
        last = [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"][-1]
        assert "gate_on_verdict(summary, fail_on_verdict)" in last.source, name


def test_gate_raises_a_clear_verdict_error_only_for_failing_verdicts():
    with pytest.raises(VerdictError, match=r"verdict NO-GO: target reachable: down; errors: 3") as caught:
        gate_on_verdict({"verdict": "NO-GO", "reasons": ["target reachable: down", "errors: 3"]})
    assert isinstance(caught.value, CheckFailed) and caught.value.exit_code == 1
    for verdict in ("PASS", "GO", "INFO"):
        gate_on_verdict({"verdict": verdict})  # no error
    gate_on_verdict({"verdict": "FAIL"}, fail_on_verdict=False)


def test_direct_papermill_run_exits_non_zero_on_fail_and_zero_on_pass(tmp_path):
    notebook = str(notebooks_dir() / "health_report.ipynb")
    failed = subprocess.run(
        [*PAPERMILL, notebook, str(tmp_path / "fail.ipynb"), "-p", "min_score", "100"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert failed.returncode != 0
    assert "VerdictError: verdict FAIL: health: score" in failed.stdout + failed.stderr
    # the artifacts came first: the gate is the last cell, every other cell ran
    nb = nbformat.read(str(tmp_path / "fail.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and code[-1].outputs[-1]["ename"] == "VerdictError"
    passed = subprocess.run(
        [*PAPERMILL, notebook, str(tmp_path / "pass.ipynb"), "-p", "min_score", "0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert passed.returncode == 0, passed.stderr[-2000:]


def test_memwork_report_keeps_its_exit_codes_whatever_fail_on_verdict_says(tmp_path):
    # the runner passes fail_on_verdict=false: exit 1 from the verdict, no error, no error cell
    default = run_report("health_report", {"min_score": 100}, tmp_path)
    assert default.verdict == "FAIL" and default.exit_code == 1 and default.error is None
    nb = nbformat.read(str(default.notebook_path), as_version=4)
    assert nb.metadata.papermill.parameters["fail_on_verdict"] is False
    assert "fail_on_verdict" not in default.parameters  # the provenance shows what the user gave
    # asked explicitly, the VerdictError is the verdict (exit 1), not a broken cell (exit 2)
    forced = run_report("health_report", {"min_score": 100, "fail_on_verdict": "true"}, tmp_path)
    assert forced.verdict == "FAIL" and forced.exit_code == 1 and forced.error is None
    assert forced.summary["reasons"] and "below 100" in forced.summary["reasons"][0]
    passing = run_report("health_report", {"fail_on_verdict": "true"}, tmp_path)
    assert passing.verdict == "PASS" and passing.exit_code == 0


@pytest.mark.parametrize(
    "bad", ["[1, 2]", '{"verdict": {"x": 1}}', '"text"', '{"verdict": "PASS", "reasons": 5}']
)
def test_a_wrong_shape_summary_is_skipped_and_named(tmp_path, bad):
    good = run_report(TINY, {"n": 2}, tmp_path)
    damaged = tmp_path / "20990101T000000000Z-damaged"
    damaged.mkdir()
    (damaged / "summary.json").write_text(bad)
    rows, skipped = scan_runs(tmp_path)
    if bad.endswith("5}"):  # readable: a lone reason is still listed
        assert {r["run_id"] for r in rows} == {good.run_id, damaged.name} and skipped == []
        assert damaged.name in build_index(tmp_path).read_text()
        return
    assert [r["run_id"] for r in rows] == [good.run_id]
    assert [s["run_id"] for s in skipped] == [damaged.name] and skipped[0]["problem"]
    page = build_index(tmp_path).read_text()
    assert damaged.name in page and "Skipped run folders (1)" in page
    # `report index` and every later report keep working
    result = CliRunner().invoke(main, ["report", "index", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["skipped"][0]["run_id"] == damaged.name and len(payload["runs"]) == 1
    later = CliRunner().invoke(main, ["report", TINY, "-p", "n", "1", "--out", str(tmp_path)])
    assert later.exit_code == 0, later.output
