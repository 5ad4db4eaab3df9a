"""The rollout gate judges what matters: metric roles by rollout kind, safety metrics in every kind,
the latency budget, the migration certificate, warm-up apart, the noise floor, the sequential judge."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memwork.contracts import RANKINGS, BaseBackend
from memwork.errors import UsageError
from memwork.plugins import Registry
from memwork.rollout import sequential
from memwork.rollout.judge import FAIL, GO, INCONCLUSIVE, NO_GO, NODATA, OFF, PASS, Thresholds
from memwork.rollout.roles import DIFFERENT, SHOWN, declared_ranking, rollout_kind
from memwork.rollout.run import judge_log

LEGACY, PGVECTOR, QDRANT = "legacy-conversation-memory", "pgvector", "qdrant"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def rec(
    i: int,
    *,
    primary: str = LEGACY,
    shadow: str = PGVECTOR,
    p_ms: float = 2.0,
    s_ms: float = 8.0,
    agree: float = 0.3,
    s_ok: bool = True,
    s_count: int = 10,
    started: datetime | None = None,
    at: datetime | None = None,
) -> dict:
    """A comparison as ``memwork serve`` writes it: k = 10, the baseline answers 10 items."""
    ts = at or T0 + timedelta(seconds=i)
    out = {
        "ts": ts.isoformat(),
        "requestId": f"r{i}",
        "user": f"u{i % 20}",
        "k": 10,
        "primary": {"backend": primary, "latencyMs": p_ms, "ok": True, "error": None,
                    "ids": [f"p{j}" for j in range(10)], "count": 10, "crossUser": 0},
        "shadow": {"backend": shadow, "latencyMs": s_ms, "ok": s_ok, "error": None if s_ok else "timeout",
                   "ids": [f"s{j}" for j in range(s_count if s_ok else 0)], "count": s_count if s_ok else 0,
                   "crossUser": 0},
        "overlapAtK": agree if s_ok else 0.0,
        "rbo": agree if s_ok else 0.0,
        "top1Agree": bool(agree >= 0.5) if s_ok else False,
        "fewerThanK": {"primary": False, "shadow": s_count < 10},
        "dimensionMismatch": None,
    }  # fmt: skip
    if started is not None:
        out["startedAt"] = started.isoformat()
    return out


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def jitter(n: int, seed: int, median: float) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(math.log(median), 0.3, n))


def realistic(n: int = 400, **kwargs) -> list[dict]:
    """legacy (newest first, ~2 ms) -> pgvector (nearest first, ~8 ms): low agreement by design."""
    p, s = jitter(n, 1, 2.0), jitter(n, 2, 8.0)
    return [rec(i, p_ms=p[i], s_ms=s[i], **kwargs) for i in range(n)]


def certificate(
    tmp_path: Path, verdict: str = "PASS", reasons: tuple[str, ...] = (), source: str = "legacy-mysql"
) -> Path:
    """A migration certificate's summary.json as ``memwork verify`` writes it (the fields the judge
    reads), its digest the SHA-256 of its canonical JSON."""
    path = tmp_path / "cert" / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"run_id": "20261201T100000Z-cert", "verdict": verdict, "reasons": list(reasons), "source": source,
            "table": "memory_embeddings", "gates": [], "rows": {"source": 40, "dest": 40},
            "input_fingerprint": {"source": source, "source_rows": 40}}  # fmt: skip
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    body["digest"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps(body, indent=2, sort_keys=True))
    return path


# ---- roles -----------------------------------------------------------------------------------------


def test_every_registered_backend_declares_how_it_ranks():
    registry = Registry({})
    try:
        backends = registry.backends()
        assert backends
        for backend in backends:
            assert isinstance(backend, BaseBackend) and type(backend).ranking in RANKINGS, backend
    finally:
        registry.close()
    assert declared_ranking("legacy") == "recency" and declared_ranking(PGVECTOR) == "semantic"
    assert rollout_kind(LEGACY, PGVECTOR).kind == DIFFERENT
    assert rollout_kind(QDRANT, PGVECTOR).agreement_decides


def test_legacy_to_pgvector_low_agreement_is_shown_and_the_certificate_decides(tmp_path):
    log = write(tmp_path / "c.jsonl", realistic())
    cert = certificate(tmp_path)
    result = judge_log(log, certificate=str(cert))
    assert result.verdict == GO, result.reasons
    for name in ("overlapAtK", "rbo", "top1Agree"):
        metric = result.metric(name)
        assert metric.classification == FAIL and metric.role == SHOWN  # low, shown, never decides
        assert "ranks by recency" in metric.detail
    assert result.metric("certificate").classification == PASS
    assert "20261201T100000Z-cert" in result.metric("certificate").detail
    assert result.signoff["certificate"]["digest"] == json.loads(cert.read_text())["digest"]
    assert result.signoff["certificate"]["source"] == "legacy-mysql"
    assert result.pairs[0].kind is not None and result.pairs[0].kind.kind == DIFFERENT
    # pgvector is 4x slower than legacy by design: the relative band is shown, the SLO decides
    assert result.metric("latencyMs").role == SHOWN and result.metric("sloP95").classification == PASS
    assert result.signoff["time_range_judged"]["first"] == T0.isoformat()
    assert result.signoff["time_range_judged"]["comparisons"] == 400


def _health(tmp_path: Path, score: int, verdict: str = "PASS") -> Path:
    path = tmp_path / f"health-{score}" / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {"verdict": verdict, "run": {"run_id": f"h{score}"}, "health": {"score": score}}
    path.write_text(json.dumps(summary))
    return path


def test_the_shadow_signoff_needs_its_input_reports_unless_waived_and_gates_the_health_score(tmp_path):
    """The sign-off of shadow reads (the runbook's): a missing input report is a NO-GO naming it
    unless ``waive`` names it with a reason (on the strip); the health score meets
    ``min_health_score`` (default 60, shown default or set) as in the in-process canary."""
    from memwork.rollout.run import run_signoff
    from memwork.rollout.signoff import SignoffParameters

    log, cert = str(write(tmp_path / "c.jsonl", realistic())), str(certificate(tmp_path))

    def signoff(**given):
        # the leak probes are waived throughout: this test is about the input reports
        waive = "; ".join(w for w in (given.pop("waive", ""), "leak_probes: a judged log, no service") if w)
        result = run_signoff(SignoffParameters(comparison_log=log, waive=waive, **given))
        return result, {g["name"]: g for g in result.gates}

    missing, strip = signoff()
    assert missing.verdict == NO_GO
    assert any(r.startswith("health_summary: health_summary report missing") for r in missing.reasons)
    assert strip["health_summary"]["state"] == strip["verification_summary"]["state"] == "fail"
    waived, strip = signoff(certificate=cert, waive="health_summary: first rollout, no entry store yet")
    assert waived.verdict == GO, waived.reasons
    assert (strip["health_summary"]["state"], strip["health_summary"]["why"]) == (
        "off", "waived: first rollout, no entry store yet")  # fmt: skip
    assert strip["verification_summary"]["state"] == "pass"  # the certificate stands in for it
    low, strip = signoff(certificate=cert, health_summary=str(_health(tmp_path, 40)))
    assert low.verdict == NO_GO and any(r.startswith("health score: 40 below 60") for r in low.reasons)
    gate = strip["health score"]
    assert (gate["state"], gate["observed"], gate["threshold"], gate["origin"]) == ("fail", 40, 60, "default")
    good, strip = signoff(certificate=cert, health_summary=str(_health(tmp_path, 80)))
    assert good.verdict == GO and strip["health score"]["state"] == "pass", good.reasons
    strict, strip = signoff(certificate=cert, health_summary=str(_health(tmp_path, 80)), min_health_score=90)
    assert strict.verdict == NO_GO and strip["health score"]["origin"] == "set"
    # memwork canary judge judges a log: the inputs it is given are gated, a missing one shows no gate
    judged = judge_log(log, certificate=cert)
    assert judged.verdict == GO and "health_summary" not in {g["name"] for g in judged.gates}
    judged = judge_log(log, certificate=cert, health_summary=str(_health(tmp_path, 40)))
    assert judged.verdict == NO_GO and {g["name"]: g["state"] for g in judged.gates}["health score"] == "fail"
    with pytest.raises(UsageError, match=r"^waive='health_summary': needs a reason"):
        signoff(waive="health_summary")


def test_the_certificate_is_required_unless_waived_with_a_reason(tmp_path):
    log = write(tmp_path / "c.jsonl", realistic())
    missing = judge_log(log)
    assert missing.verdict == NO_GO and missing.reasons[0].startswith("certificate: no migration certificate")
    waived = judge_log(log, certificate_waiver="read-only pilot, no user data migrated")
    assert waived.verdict == GO and waived.metric("certificate").classification == OFF
    assert waived.signoff["certificate_waiver"] == "waived: read-only pilot, no user data migrated"
    bad = certificate(tmp_path, "FAIL", ("recall@10 0.41 in bucket tail",))
    failed = judge_log(log, certificate=str(bad))
    assert failed.verdict == NO_GO
    assert "recall@10 0.41 in bucket tail" in failed.reasons[0]


def test_between_alike_backends_agreement_is_required(tmp_path):
    log = write(tmp_path / "c.jsonl", realistic(primary=QDRANT))
    result = judge_log(log)
    assert result.verdict == NO_GO and result.metric("overlapAtK").role != SHOWN
    assert result.metric("certificate").classification == OFF  # not needed between alike backends
    assert any(r.startswith("overlapAtK: mean 0.300") for r in result.reasons)


def test_a_shadow_answering_empty_one_time_in_five_is_no_go(tmp_path):
    records = realistic()
    for r in records[::5]:
        r["shadow"].update(ids=[], count=0)
    result = judge_log(write(tmp_path / "c.jsonl", records), certificate=str(certificate(tmp_path)))
    assert result.verdict == NO_GO
    assert result.metric("underfill").classification == FAIL
    assert any(r.startswith("underfill: 80 of 400 shadow answers had fewer items") for r in result.reasons)


def test_latency_against_a_stated_budget(tmp_path):
    cert = str(certificate(tmp_path))
    pairs = zip(jitter(400, 1, 2.0), jitter(400, 2, 400.0), strict=True)
    slow = [rec(i, p_ms=p, s_ms=s) for i, (p, s) in enumerate(pairs)]
    log = write(tmp_path / "slow.jsonl", slow)
    result = judge_log(log, certificate=cert)
    assert result.verdict == NO_GO and result.metric("sloP95").classification == FAIL
    assert result.metric("sloP95").unit == "ms"
    relaxed = judge_log(log, Thresholds(max_p95_ms=2000.0, max_p99_ms=3000.0), certificate=cert)
    assert relaxed.verdict == GO, relaxed.reasons
    budget = Thresholds(max_p95_ms=2000.0, max_p99_ms=3000.0, latency_band=1.0)
    banded = judge_log(log, budget, certificate=cert)
    assert banded.verdict == NO_GO and banded.metric("latencyMs").classification == FAIL  # 200x > +100 %
    off = judge_log(log, Thresholds(max_p95_ms=0, max_p99_ms=0), certificate=cert)
    assert off.metric("sloP95").classification == OFF
    with pytest.raises(UsageError, match="max_p95_ms=-1"):
        judge_log(log, Thresholds(max_p95_ms=-1))


def test_a_four_percent_error_tail_at_300_is_not_go(tmp_path):
    records = realistic(300)
    for r in records[-12:]:
        r["shadow"].update(ok=False, error="timeout", ids=[], count=0)
    result = judge_log(write(tmp_path / "c.jsonl", records), certificate=str(certificate(tmp_path)))
    assert result.verdict == NO_GO and result.metric("shadowErrors").classification == FAIL
    assert result.signoff["time_range_judged"] == {
        "first": T0.isoformat(),
        "last": (T0 + timedelta(seconds=299)).isoformat(),
        "comparisons": 300,
    }


def test_warm_up_errors_are_reported_apart_from_the_steady_state(tmp_path):
    started = T0
    records = realistic(400, started=started)
    records[0]["shadow"].update(ok=False, error="timeout after 2000 ms", ids=[], count=0, latencyMs=2004.0)
    records[1]["shadow"].update(latencyMs=1500.0)
    cert = str(certificate(tmp_path))
    result = judge_log(write(tmp_path / "c.jsonl", records), certificate=cert)
    warm = result.metric("warmUp")
    assert warm.role == SHOWN and warm.n_baseline == 10 and warm.estimate == 1.0  # first 10 calls of 30 s
    assert "1 shadow errors" in warm.detail
    assert result.metric("shadowErrors").n_baseline == 390  # the steady state only
    burst = realistic(400, started=T0 - timedelta(seconds=5))  # a burst right after a start
    assert judge_log(write(tmp_path / "b.jsonl", burst), certificate=cert).metric("warmUp").n_baseline == 10
    assert result.verdict == GO, result.reasons
    apart = judge_log(write(tmp_path / "d.jsonl", records), Thresholds(warmup_s=0), certificate=cert)
    assert apart.metric("shadowErrors").n_baseline == 400


def test_the_noise_floor_is_measured_and_moves_the_ideal(tmp_path):
    aa = [rec(i, primary=QDRANT, shadow=QDRANT, agree=0.8, p_ms=p, s_ms=p * 1.1)
          for i, p in enumerate(jitter(200, 3, 5.0))]  # fmt: skip
    aa_log = write(tmp_path / "aa.jsonl", aa)
    target = [rec(i, primary=QDRANT, agree=0.65, p_ms=p, s_ms=p) for i, p in enumerate(jitter(400, 4, 5.0))]
    log = write(tmp_path / "c.jsonl", target)
    without = judge_log(log)
    assert without.metric("overlapAtK").classification == FAIL  # 0.65 against the ideal 1.0 - 25 %
    with_floor = judge_log(log, aa_log=str(aa_log))
    assert with_floor.noise_floor.measured and with_floor.noise_floor.agreement[
        "overlapAtK"
    ] == pytest.approx(0.8)
    assert (
        with_floor.metric("overlapAtK").classification == PASS
        and with_floor.metric("overlapAtK").baseline == 0.8
    )
    assert with_floor.signoff["noise_floor"]["records"] == 200
    assert "not measured" in without.signoff["noise_floor"]["detail"]


# ---- the sequential judge --------------------------------------------------------------------------


def test_confidence_sequences_hold_the_true_rate_at_every_look():
    rng = np.random.default_rng(5)
    misses = 0
    for _ in range(200):
        hits = rng.random(500) < 0.02
        s = np.cumsum(hits)
        n = np.arange(1, 501)
        outside = sequential.log_mixture(s, n, 0.02, sequential.prior_for(0.01)) >= math.log(20)
        misses += bool(outside.any())
    assert misses / 200 <= 0.05  # anytime-valid: the true rate leaves the sequence at no look


def test_sequential_decisions():
    aa = [sequential.RateTrace("errors", 0.01, [False] * 1000)]
    found = sequential.judge_sequence(aa, 0.05, 20)
    assert found.decision == GO and 300 < (found.decided_at or 0) < 500
    bad = [sequential.RateTrace("errors", 0.01, [i % 5 == 0 for i in range(1000)])]
    broke = sequential.judge_sequence(bad, 0.05, 20)
    assert broke.decision == NO_GO and (broke.decided_at or 10**6) < 60
    late = [sequential.RateTrace("errors", 0.01, [False] * 600 + [True] * 60)]
    overturned = sequential.judge_sequence(late, 0.05, 20)
    assert overturned.decision == NO_GO and "overturned" in overturned.reasons[-1]
    few = sequential.judge_sequence([sequential.RateTrace("errors", 0.01, [False] * 50)], 0.05, 20)
    assert few.decision == sequential.CONTINUE and "not decided after 50" in few.reasons[0]


def test_the_judge_carries_the_sequential_row(tmp_path):
    result = judge_log(write(tmp_path / "c.jsonl", realistic(600)), certificate=str(certificate(tmp_path)))
    assert result.metric("sequential").classification == PASS and result.verdict == GO
    short = judge_log(write(tmp_path / "s.jsonl", realistic(100)), certificate=str(certificate(tmp_path)))
    assert short.metric("sequential").classification == NODATA and short.metric("sequential").role == SHOWN
    assert short.verdict in (GO, INCONCLUSIVE)


def test_the_judge_reports_its_metrics_as_gates(tmp_path):
    from memwork.reports.gates import passed_sentence

    log = write(tmp_path / "c.jsonl", realistic())
    result = judge_log(log, Thresholds(max_p95_ms=300.0), certificate=str(certificate(tmp_path)),
                       given_explicitly={"max_p95_ms": 300.0})  # fmt: skip
    gates = {g["name"]: g for g in result.to_dict()["gates"]}
    assert gates["overlapAtK"]["state"] == "off" and gates["overlapAtK"]["why"].startswith(
        "shown, not deciding"
    )
    assert gates["sloP95"] | {"observed": None} == gates["sloP95"] | {
        "state": "pass",
        "threshold": 300.0,
        "origin": "set",
        "unit": "ms",
        "comparison": "<=",
        "observed": None,
    }
    assert gates["shadowErrors"]["origin"] == "default" and gates["certificate"]["state"] == "pass"
    assert passed_sentence(result.to_dict()["gates"]).split(" gates")[0].split(" of ")[0].isdigit()


def test_the_cli_judge_takes_the_budget_and_the_certificate(tmp_path):
    from click.testing import CliRunner

    from memwork.cli import main

    log = str(write(tmp_path / "c.jsonl", realistic()))
    runner = CliRunner()
    missing = runner.invoke(main, ["canary", "judge", "--log", log, "--json"])
    assert missing.exit_code == 1 and "certificate: no migration certificate" in missing.output
    waived = runner.invoke(main, ["canary", "judge", "--log", log, "--certificate-waiver", "pilot", "--json"])
    assert waived.exit_code == 0, waived.output
    assert json.loads(waived.output)["signoff"]["certificate_waiver"] == "waived: pilot"
    tight = ["canary", "judge", "--log", log, "--certificate-waiver", "pilot", "--max-p95-ms", "5", "--json"]
    assert runner.invoke(main, tight).exit_code == 1
    bad = runner.invoke(main, ["canary", "judge", "--log", log, "--primary-ranking", "alphabetic"])
    assert bad.exit_code == 2 and "primary_ranking='alphabetic'" in bad.output
