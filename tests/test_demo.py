"""``memwork demo`` end to end on a small dataset: all four reports, index, and a safe re-run."""

from __future__ import annotations

import json

from click.testing import CliRunner

from memwork import demo
from memwork.cli import main
from memwork.reports import verify_manifest


def test_demo_runs_every_report_and_rerunning_is_safe(tmp_path, monkeypatch, pg_server):
    monkeypatch.setattr(demo, "DEMO_USERS", 20)
    monkeypatch.setattr(demo, "DEMO_ENTRIES", 200)
    monkeypatch.setattr(demo, "DEMO_DIMENSIONS", 64)
    monkeypatch.setenv("MEMWORK_REPORTS_DIR", str(tmp_path / "reports"))
    first = demo.run_demo(tmp_path / "ws")
    verdicts = {r["name"]: r["verdict"] for r in first.runs}
    assert verdicts == {
        "health_report": "PASS",
        "duplicate_review": "INFO",
        "backfill_verification": "PASS",
        "canary_signoff": "GO",
    }, [r["reasons"] for r in first.runs]
    assert first.exit_code == 0 and first.data["users"] == 20 and first.data["sessions"] == 40
    assert first.data["backfilled"] == first.data["active_items"]
    for run in first.runs:
        assert verify_manifest(run["run_dir"]) == []
    described = first.describe()
    assert "{" not in described and "20 users, 40 sessions" in described  # a sentence, not a dict repr
    result = CliRunner().invoke(main, ["demo", "--workspace", str(tmp_path / "ws"), "--json"])
    assert result.exit_code == 0, result.output
    second = json.loads(result.stdout)
    assert [r["verdict"] for r in second["runs"]] == [r["verdict"] for r in first.runs]
    assert second["data"]["active_items"] == first.data["active_items"]
    index = (tmp_path / "reports" / "index.html").read_text()
    assert index.count("canary_signoff</a>") == 2
