"""The rollout page: the stages of a staged rollout read from the artifacts the runbook names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.reports.index import build_index
from memwork.reports.rollout_page import NOT_JUDGED, build_rollout_page, read_rollout


def _log(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"requestId": f"r{i}"}) + "\n" for i in range(n)), encoding="utf-8")


def _report(ops: Path, name: str, verdict: str, reasons: list[str]) -> Path:
    """The run folder a report run leaves (summary.json and its HTML)."""
    run_dir = ops / "reports" / f"20260101T000000000Z-{name}"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"verdict": verdict, "reasons": reasons}))
    (run_dir / f"{name}.html").write_text("<html></html>")
    return run_dir


def _rehearsal(ops: Path, final: str = "GO") -> None:
    """The files runbooks/pgvector_rollout.md leaves by step 8."""
    ops.mkdir(parents=True, exist_ok=True)
    verify = _report(ops, "backfill_verification", "PASS", [])
    (ops / "verification.json").write_text(
        json.dumps(
            {"run_dir": str(verify), "html": str(verify / "backfill_verification.html"), "verdict": "PASS"}
        )
    )
    _log(ops / "shadow-1pct.jsonl", 3)
    _log(ops / "shadow-10pct.jsonl", 8)
    _log(ops / "shadow-100pct.jsonl", 80)
    (ops / "judge-10pct.json").write_text(
        json.dumps(
            {
                "verdict": "INCONCLUSIVE",
                "reasons": ["latencyMs: 8 paired answers, fewer than 20"],
                "records": 8,
            }
        )
    )
    reasons = [] if final == "GO" else ["crossUser: 1 memory of another user"]
    (ops / "judge-100pct.json").write_text(json.dumps({"verdict": final, "reasons": reasons, "records": 80}))
    signoff = _report(ops, "canary_signoff", final, reasons)
    (ops / "signoff.json").write_text(
        json.dumps(
            {
                "run_dir": str(signoff),
                "html": str(signoff / "canary_signoff.html"),
                "verdict": final,
                "parameters": {"comparison_log": "shadow-100pct.jsonl"},
            }
        )
    )


def test_the_stages_in_order_with_rate_verdict_reasons_and_artifacts(tmp_path: Path):
    ops = tmp_path / "ops"
    _rehearsal(ops)
    page, rollout = build_rollout_page(ops, ops / "reports")
    assert page == ops / "reports" / "rollout.html"
    names = [s.name for s in rollout.stages]
    assert names == ["verification", "1 %", "10 %", "100 %"]  # 10 after 1, not after 100 (by rate)
    stages = {s.name: s for s in rollout.stages}
    assert [stages[n].sample_rate for n in ("1 %", "10 %", "100 %")] == [0.01, 0.1, 1.0]
    assert stages["1 %"].verdict == NOT_JUDGED and stages["1 %"].records == 3
    assert "judge-1pct.json" in stages["1 %"].reasons[0]
    assert stages["10 %"].verdict == "INCONCLUSIVE" and "fewer than 20" in stages["10 %"].reasons[0]
    assert stages["100 %"].verdict == "GO" and stages["100 %"].records == 80
    labels = [a.label for a in stages["100 %"].artifacts]
    assert labels[:2] == ["shadow log", "judge JSON"] and "sign-off report HTML" in labels
    assert stages["verification"].verdict == "PASS"
    assert rollout.verdict == "GO"

    text = page.read_text(encoding="utf-8")
    for needle in ("1%", "10%", "100%", "INCONCLUSIVE", "fewer than 20", NOT_JUDGED):
        assert needle in text
    # every link resolves from the page's own folder (the artifacts live beside the runbook's commands)
    hrefs = re.findall(r"href='([^']+)'", text)
    assert "../shadow-10pct.jsonl" in hrefs and "../judge-100pct.json" in hrefs
    missing = [h for h in hrefs if h != "index.html" and not (page.parent / h).exists()]
    assert missing == []
    assert json.loads((page.parent / "rollout.json").read_text())["verdict"] == "GO"
    # the index links the page once it exists
    assert "href='rollout.html'" in build_index(ops / "reports").read_text(encoding="utf-8")


def test_a_no_go_stage_stops_the_rollout_and_names_why(tmp_path: Path):
    _rehearsal(tmp_path, final="NO-GO")
    rollout = read_rollout(tmp_path)
    assert rollout.verdict == "NO-GO" and rollout.reasons == ["100 %: crossUser: 1 memory of another user"]


def test_without_a_sign_off_the_last_judged_stage_stands(tmp_path: Path):
    _rehearsal(tmp_path)
    (tmp_path / "signoff.json").unlink()
    (tmp_path / "judge-100pct.json").unlink()
    rollout = read_rollout(tmp_path)
    assert rollout.verdict == "INCONCLUSIVE" and rollout.reasons[0].startswith("10 %: ")


def test_a_folder_without_shadow_logs_is_bad_input(tmp_path: Path):
    with pytest.raises(UsageError, match=r"shadow-<N>pct\.jsonl"):
        read_rollout(tmp_path)
    result = CliRunner().invoke(
        main, ["report", "rollout", "--from", str(tmp_path), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2 and not (tmp_path / "r").exists()


def test_cli_prints_the_stages_as_json(tmp_path: Path):
    _rehearsal(tmp_path)
    out = tmp_path / "pages"
    result = CliRunner().invoke(
        main, ["report", "rollout", "--from", str(tmp_path), "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert [s["verdict"] for s in payload["stages"]] == ["PASS", NOT_JUDGED, "INCONCLUSIVE", "GO"]
    assert Path(payload["page"]) == out.resolve() / "rollout.html"
