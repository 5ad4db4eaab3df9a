"""The canary judge on synthetic comparison logs with known distributions (the service's log schema)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.rollout.judge import (
    FAIL,
    GO,
    INCONCLUSIVE,
    MARGINAL,
    NO_GO,
    NODATA,
    OFF,
    PASS,
    Thresholds,
)
from memwork.rollout.run import judge_log, judge_shadow_reads
from memwork.rollout.signoff import SignoffParameters
from memwork.rollout.stats import hodges_lehmann


def comparison(
    i: int,
    primary_ms: float,
    shadow_ms: float,
    *,
    overlap: float = 1.0,
    rbo: float = 1.0,
    top1: bool = True,
    primary_count: int = 5,
    shadow_count: int = 5,
    shadow_ok: bool = True,
    cross_user: bool = False,
    mismatch: bool = False,
) -> dict:
    """One record as ``memwork serve`` writes it to ``shadow/comparisons.jsonl``; qdrant and pgvector
    both rank by semantic similarity, so agreement and the relative latency band decide."""
    ids = [f"m{j}" for j in range(primary_count)]
    return {
        "ts": f"2026-12-01T12:00:{i % 60:02d}Z",
        "requestId": f"req-{i}",
        "user": f"user-{i % 17}",
        "k": 5,
        "primary": {
            "backend": "qdrant",
            "latencyMs": primary_ms,
            "ok": True,
            "error": None,
            "ids": ids,
            "count": primary_count,
            "crossUser": 0,
        },
        "shadow": {
            "backend": "pgvector",
            "latencyMs": shadow_ms,
            "ok": shadow_ok,
            "error": None if shadow_ok else "pgvector timed out",
            "ids": ids[:shadow_count],
            "count": shadow_count,
            "crossUser": int(cross_user),
        },
        "overlapAtK": overlap,
        "rbo": rbo,
        "top1Agree": top1,
        "fewerThanK": {"primary": primary_count < 5, "shadow": shadow_count < 5},
        "dimensionMismatch": {"side": "shadow", "dimensions": [384, 768]} if mismatch else None,
    }


def write_log(path: Path, records: list[dict], junk: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + junk, encoding="utf-8")
    return path


def latencies(n: int, seed: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    """Log-normal resolve latencies around 20 ms (a realistic right-skewed shape)."""
    rng = np.random.default_rng(seed)
    return rng.lognormal(mean=np.log(20.0), sigma=0.3, size=n) * scale + shift


def log_of(tmp_path: Path, primary: np.ndarray, shadow: np.ndarray, **kwargs) -> Path:
    records = [
        comparison(i, float(p), float(s), **kwargs)
        for i, (p, s) in enumerate(zip(primary, shadow, strict=True))
    ]
    return write_log(tmp_path / "comparisons.jsonl", records)


def test_equal_distributions_pass_and_go(tmp_path):
    # 400: 0 errors in n proves a 1 % budget at any look from about n = 374 (shadowErrors, underfill)
    log = log_of(tmp_path, latencies(400, 1), latencies(400, 2))
    result = judge_log(log)
    assert result.verdict == GO and result.exit_code == 0 and result.reasons == []
    assert {m.metric: m.classification for m in result.metrics} == {
        **dict.fromkeys(
            [
                "logQuality",
                "crossUser",
                "dimensionMismatch",
                "shadowErrors",
                "latencyMs",
                "latencyP95",
                "resultCount",
                "overlapAtK",
                "rbo",
                "top1Agree",
                "underfill",
                "sloP95",
                "sloP99",
                "latencyP99",  # 400 answers bound p99 at 95 % (368 can)
                "sequential",  # every rate proven within its budget at some look up to 400
            ],
            PASS,
        ),
        "certificate": OFF,  # qdrant -> pgvector rank alike: agreement decides, no certificate needed
        "warmUp": NODATA,  # the records carry no startedAt: warm-up not separated (shown)
    }
    assert not result.metric("latencyP99").required
    latency = result.metric("latencyMs")
    assert latency.n_baseline == latency.n_target == 400
    assert latency.ci_low < 0 < latency.ci_high  # no shift: the CI holds zero
    assert result.backends == {"primary": "qdrant", "shadow": "pgvector"}


def test_shadow_latency_doubled_fails(tmp_path):
    log = log_of(tmp_path, latencies(200, 1), latencies(200, 2, scale=2.0))
    result = judge_log(log)
    latency = result.metric("latencyMs")
    assert latency.classification == FAIL and latency.p_value < 0.001
    assert 0.7 < latency.relative < 1.3  # about +100 % of the baseline median
    assert result.verdict == NO_GO and result.exit_code == 1
    assert any(r.startswith("latencyMs: significant increase") for r in result.reasons)


def test_faster_shadow_is_never_a_failure(tmp_path):
    # direction: only an increase of latency is bad; a halved latency is a pass (400: enough for a GO)
    result = judge_log(log_of(tmp_path, latencies(400, 1), latencies(400, 2, scale=0.5)))
    assert result.metric("latencyMs").classification == PASS and result.verdict == GO


def test_ten_percent_slower_is_significant_but_inside_the_band(tmp_path):
    log = log_of(tmp_path, latencies(2000, 1), latencies(2000, 2, scale=1.10))
    latency = judge_log(log).metric("latencyMs")
    assert latency.p_value < 0.05  # statistically significant ...
    assert latency.classification == PASS  # ... but inside +/-25 %: still a pass
    assert "inside the 25% band" in latency.detail
    # a narrower band makes the same data a failure
    assert judge_log(log, Thresholds(band=0.05)).metric("latencyMs").classification == FAIL


def test_marginal_when_the_ci_reaches_past_the_band(tmp_path):
    # +3 ms (~15 % of the 20 ms median) with few, noisy samples: significant, inside 25 %, CI past it
    primary = latencies(60, 11)
    shadow = latencies(60, 12) + 3.0
    result = judge_log(log_of(tmp_path, primary, shadow))
    latency = result.metric("latencyMs")
    assert latency.classification == MARGINAL, latency
    assert latency.relative < 0.25 < latency.ci_high / latency.baseline
    assert result.verdict == INCONCLUSIVE and result.exit_code == 3
    assert result.reasons[-1] == "neither GO nor NO-GO: a person must decide"


def test_the_confidence_interval_contains_the_true_shift(tmp_path):
    true_shift = 3.0  # ms added to every shadow answer
    primary, shadow = latencies(150, 100), latencies(150, 201) + true_shift
    latency = judge_log(log_of(tmp_path, primary, shadow)).metric("latencyMs")
    assert latency.ci_low <= true_shift <= latency.ci_high, latency
    assert abs(latency.estimate - true_shift) < 1.5
    # and it is a 95 % interval: over 300 replications it covers the true shift about 95 % of the time
    covered = 0
    for seed in range(300):
        _, low, high = hodges_lehmann(
            list(latencies(100, 1000 + seed)), list(latencies(100, 5000 + seed) + 3.0), 0.95
        )
        covered += low <= true_shift <= high
    assert 0.91 <= covered / 300 <= 0.99


def test_cross_user_fails_the_run_whatever_the_rest(tmp_path):
    primary = latencies(300, 1)
    records = [comparison(i, float(p), float(p)) for i, p in enumerate(primary)]
    records[123]["shadow"]["crossUser"] = 1  # one memory of another user, once
    result = judge_log(write_log(tmp_path / "log.jsonl", records))
    assert result.metric("crossUser").classification == FAIL
    assert result.metric("latencyMs").classification == PASS
    assert result.verdict == NO_GO
    assert result.reasons == ["crossUser: 1 of 300 comparisons with a memory of another user"]


def test_cross_user_in_the_primary_answer_also_fails(tmp_path):
    records = [comparison(i, 20.0, 20.0) for i in range(50)]
    records[0]["primary"]["crossUser"] = 2
    assert judge_log(write_log(tmp_path / "log.jsonl", records)).metric("crossUser").classification == FAIL


def test_a_cross_user_flag_that_is_not_a_count_is_damage_never_clean(tmp_path):
    records = [comparison(i, 20.0, 20.0) for i in range(50)]
    records[0]["primary"]["crossUser"] = ["m9-of-TenantX"]  # not what memwork writes: unreadable
    result = judge_log(write_log(tmp_path / "log.jsonl", records))
    assert result.log["damaged"] == 1 and result.verdict != GO


def test_dimension_mismatch_and_error_budget_are_critical(tmp_path):
    records = [comparison(i, 20.0 + i % 3, 20.0 + i % 3, mismatch=(i == 7)) for i in range(100)]
    for i in range(8):  # 8 % shadow errors against a 1 % budget: proven above it at any look
        records[i]["shadow"].update(ok=False, latencyMs=2000.0)
    result = judge_log(write_log(tmp_path / "log.jsonl", records))
    errors = result.metric("shadowErrors")
    assert errors.classification == FAIL and errors.estimate == pytest.approx(0.08)
    assert 0.01 < errors.ci_low < 0.08 < errors.ci_high  # the confidence sequence, above the budget
    assert result.metric("dimensionMismatch").classification == FAIL
    assert result.metric("latencyMs").n_target == 92  # the failed shadow calls are not timed
    assert result.verdict == NO_GO
    # 8 of 100 proven within a 25 % budget, the errors pass; the mismatch still fails on its own
    relaxed = judge_log(tmp_path / "log.jsonl", Thresholds(max_error_rate=0.25))
    assert relaxed.metric("shadowErrors").classification == PASS and relaxed.verdict == NO_GO
    # 2 of 100 against 1 %: past the budget, not proven either way -- not a GO, not yet a NO-GO
    for r in records[2:8]:
        r["shadow"].update(ok=True, latencyMs=20.0)
    few = judge_log(write_log(tmp_path / "two.jsonl", records)).metric("shadowErrors")
    assert few.classification == MARGINAL and "not enough data yet (n=100" in few.detail


def test_too_few_comparisons_is_inconclusive(tmp_path):
    log = log_of(tmp_path, latencies(8, 1), latencies(8, 2, scale=3.0))
    result = judge_log(log)
    assert result.metric("latencyMs").classification == NODATA
    assert result.verdict == INCONCLUSIVE and result.exit_code == 3
    assert any(r.startswith("latencyMs: NODATA") for r in result.reasons)
    empty = judge_log(write_log(tmp_path / "empty.jsonl", []))
    assert empty.verdict == INCONCLUSIVE
    assert all(m.classification == NODATA for m in empty.metrics if m.metric != "logQuality")


def test_agreement_metrics_against_the_threshold(tmp_path):
    rng = np.random.default_rng(5)
    base = latencies(200, 1)
    good = [
        comparison(i, float(b), float(b), overlap=float(rng.uniform(0.8, 1.0))) for i, b in enumerate(base)
    ]
    bad = [
        comparison(i, float(b), float(b), overlap=0.4, rbo=0.5, top1=i % 2 == 0) for i, b in enumerate(base)
    ]
    edge = [comparison(i, float(b), float(b), overlap=[1.0, 0.5][i % 2]) for i, b in enumerate(base)]
    assert judge_log(write_log(tmp_path / "g.jsonl", good)).metric("overlapAtK").classification == PASS
    result = judge_log(write_log(tmp_path / "b.jsonl", bad))
    assert [result.metric(n).classification for n in ("overlapAtK", "rbo", "top1Agree")] == [FAIL] * 3
    assert result.metric("top1Agree").estimate == pytest.approx(0.5)
    assert result.verdict == NO_GO
    # mean 0.75 exactly at the threshold: the CI straddles it
    assert judge_log(write_log(tmp_path / "e.jsonl", edge)).metric("overlapAtK").classification == MARGINAL


def test_fewer_results_from_the_shadow_fail_result_count(tmp_path):
    base = latencies(100, 1)
    records = [comparison(i, float(b), float(b), shadow_count=2) for i, b in enumerate(base)]
    result = judge_log(write_log(tmp_path / "log.jsonl", records))
    assert result.metric("resultCount").classification == FAIL and result.verdict == NO_GO


def test_signoff_records_thresholds_digest_inputs_and_damaged_lines(tmp_path):
    log = write_log(
        tmp_path / "log.jsonl",
        [comparison(i, 20.0 + i % 5, 20.0 + i % 4) for i in range(40)],
        junk='{"ts": "2026-12-01T12:01:00Z", "requestId": "trunc',
    )
    health = tmp_path / "health"
    health.mkdir()
    (health / "summary.json").write_text(
        json.dumps(
            {
                "verdict": "PASS",
                "report": "health_report",
                "run": {"run_id": "20261201T120000000Z-health_report"},
            }
        )
    )
    verification = tmp_path / "verification.json"
    verification.write_text(
        json.dumps({"verdict": "FAIL", "run": {"run_id": "20261201T110000000Z-backfill"}})
    )
    result = judge_log(
        log,
        Thresholds(min_samples=30),
        approver="Ada Lovelace",
        health_summary=str(health),
        verification_summary=str(verification),
    )
    block = result.signoff
    assert result.skipped_lines == 1 and result.records == 40 and result.log["incomplete_last_line"]
    assert block["comparison_log_sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert block["approver"] == "Ada Lovelace"
    assert block["thresholds"] == {
        "band": 0.25,
        "confidence": 0.95,
        "min_samples": 30,
        "max_error_rate": 0.01,
        "max_damaged_share": 0.01,
        "max_underfill_rate": 0.01,
        "max_p95_ms": 250.0,
        "max_p99_ms": 1000.0,
        "latency_band": 0.0,
        "warmup_s": 30.0,
        "primary_ranking": "",
        "shadow_ranking": "",
    }
    assert block["inputs"]["health_summary"]["run_id"] == "20261201T120000000Z-health_report"
    assert block["inputs"]["verification_summary"]["run_id"] == "20261201T110000000Z-backfill"
    assert block["samples"]["latencyMs"] == {"baseline": 40, "target": 40}
    assert set(block["classification"]["latencyMs"]) == {"class", "estimate", "ci"}
    # a failing verification report the verdict relies on is a NO-GO reason
    assert result.verdict == NO_GO and any("verification_summary" in r for r in result.reasons)


def test_bad_thresholds_and_missing_log_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="band"):
        judge_log(tmp_path / "x.jsonl", Thresholds(band=1.5))
    with pytest.raises(UsageError, match="log"):
        judge_log(tmp_path / "missing.jsonl")
    result = CliRunner().invoke(main, ["canary", "judge", "--log", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "no such comparison log" in result.output


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    go = log_of(tmp_path, latencies(400, 1), latencies(400, 2))
    out = runner.invoke(main, ["canary", "judge", "--log", str(go), "--json", "--approver", "ops"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["verdict"] == GO and data["signoff"]["approver"] == "ops"
    slow = write_log(tmp_path / "slow.jsonl", [comparison(i, 20.0 + i % 7, 60.0 + i % 7) for i in range(100)])
    out = runner.invoke(main, ["canary", "judge", "--log", str(slow)])
    assert out.exit_code == 1 and "NO-GO" in out.output and "latencyMs" in out.output
    few = write_log(tmp_path / "few.jsonl", [comparison(i, 20.0, 20.0) for i in range(5)])
    out = runner.invoke(main, ["canary", "judge", "--log", str(few), "--min-samples", "10"])
    assert out.exit_code == 3 and "INCONCLUSIVE" in out.output


def test_unreachable_base_url_is_a_no_go_reason_without_the_token(tmp_path):
    from fakes.server import refused_url

    log = log_of(tmp_path, latencies(100, 1), latencies(100, 2))
    given = SignoffParameters(comparison_log=str(log), base_url=refused_url(), token="s3cret-token-value")
    result = judge_shadow_reads(given)
    assert result.verdict == NO_GO
    assert any(r.startswith("service:") for r in result.reasons)
    assert "s3cret-token-value" not in json.dumps(result.to_dict())


def test_a_rotated_log_written_by_the_service_is_read_whole(tmp_path):
    from memwork.service.shadow import ComparisonLog

    path = tmp_path / "shadow" / "comparisons.jsonl"
    log = ComparisonLog(path, max_records=50)
    primary = latencies(80, 1)
    for i, p in enumerate(primary):
        log.append(comparison(i, float(p), float(p) * 1.01))
    assert path.with_name(path.name + ".1").is_file()  # rotated once: 50 + 30
    result = judge_log(path)
    assert result.records == 80 and result.metric("latencyMs").n_baseline == 80
    rotated, current = path.with_name(path.name + ".1").read_bytes(), path.read_bytes()
    assert result.signoff["comparison_log_sha256"] == hashlib.sha256(rotated + current).hexdigest()
    assert result.signoff["comparison_log_files"] == [str(path.with_name(path.name + ".1")), str(path)]
