"""Canary gates as a library: status, fallback, latency, errors, inputs, sign-off digests."""

from __future__ import annotations

import json

import pytest

from memwork.errors import UsageError
from memwork.pgvector.canary import CanaryOptions, canary_env, digest, percentiles, run_canary
from memwork.pgvector.local_hash import write_module
from memwork.samples.migration import build_migration


@pytest.fixture
def env(pg_url, mysql_url):
    m = build_migration(mysql_url, pg_url, n_users=4, items_per_user=15, dimensions=16, seed=2)
    return canary_env(m.source_url, m.dest_url, write_module(m.dimensions))


def test_go_with_every_gate_passing_and_a_signoff(env, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"verdict": "PASS"}))
    result = run_canary(
        CanaryOptions(env, sample_size=8, verification_summary=str(summary), approver="ana"), {"p": 1}
    )
    assert result.verdict == "GO", result.reasons
    gates = {g.name: g.status for g in result.gates}
    assert gates["fallback"] == gates["selected backend"] == gates["backfill verification"] == "PASS"
    assert gates["health"] == "SKIP"
    assert result.latency_table()["target"]["count"] == 8 and result.errors == {"target": 0, "legacy": 0}
    assert result.signoff["parameters_sha256"] == digest({"p": 1}) and result.signoff["approver"] == "ana"
    assert len(result.signoff["git_commit"]) >= 7


def test_no_go_reasons(env, tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"verdict": "FAIL", "health": {"score": 10}}))
    result = run_canary(
        CanaryOptions(
            {**env, "MEMORY_BACKEND": "legacy"},
            sample_size=5,
            verification_summary=str(bad),
            health_summary=str(bad),
            require_inputs=True,
        )
    )
    assert result.verdict == "NO-GO"
    failed = {g.name for g in result.gates if g.status == "FAIL"}
    assert {
        "configured backend",
        "selected backend",
        "answered by target",
        "backfill verification",
        "health",
    } <= failed


def test_target_unavailable_fails_selection_but_fallback_holds(env):
    broken = {**env, "MEMORY_VECTOR_ENABLED": "0"}
    result = run_canary(CanaryOptions(broken, sample_size=5))
    gates = {g.name: g for g in result.gates}
    assert gates["selected backend"].status == "FAIL" and gates["fallback"].status == "PASS"


def test_options_and_percentiles():
    with pytest.raises(UsageError, match="verification_summary"):
        CanaryOptions({}, verification_summary="/no/such/file.json").check()
    assert percentiles([1, 2, 3, 4])["p50"] == 2.5 and percentiles([])["count"] == 0


def test_unreachable_target_or_legacy_is_no_go_with_the_reason_and_nothing_timed(env, tmp_path):
    from memwork.pgvector.canary import default_embedding_module, shown_parameters

    down = "postgresql://u:S3cretPW@127.0.0.1:5/x"
    assert default_embedding_module(down) == ""  # no cell error before the gates run
    params = {"pgvector_url": down, "sample_size": 5}
    result = run_canary(CanaryOptions({**env, "MEMORY_PGVECTOR_DATABASE_URL": down}, sample_size=5), params)
    assert result.verdict == "NO-GO" and result.latency_ms == {}
    gates = {g.name: g for g in result.gates}
    assert gates["target reachable"].status == "FAIL" and "unreachable" in gates["target reachable"].detail
    assert "u:***@127.0.0.1:5/x" in result.reasons[0] and "S3cretPW" not in json.dumps(result.to_dict())
    assert gates["legacy reachable"].status == "PASS" and gates["latency and fallback"].status == "SKIP"
    # the sign-off fingerprints the parameters with the password hidden
    assert result.signoff["parameters_sha256"] == digest(shown_parameters(params)) != digest(params)
    legacy_down = {**env, "MEMORY_LEGACY_DATABASE_URL": "mysql://root@127.0.0.1:3306/no_such_db_x"}
    result = run_canary(CanaryOptions(legacy_down, sample_size=5))
    assert result.verdict == "NO-GO" and result.reasons[0].startswith("legacy reachable: ")


def test_run_from_parameters_defaults_and_checks(tmp_path):
    """The notebook's defaulting (sample migration, hash query module) and checks are the library's."""
    from memwork.pgvector.canary import run_from_parameters

    result = run_from_parameters(sample_size=5, approver="ops")
    assert result.verdict == "GO", result.reasons
    assert result.signoff["approver"] == "ops" and len(result.signoff["parameters_sha256"]) == 64
    for bad, field in (({"max_errors": -1}, "max_errors"), ({"max_p95_ratio": -2.0}, "max_p95_ratio"),
                       ({"health_summary": str(tmp_path / "none.json")}, "health_summary"),
                       ({"pgvector_url": "pg://embedded"}, "legacy_url")):  # fmt: skip
        with pytest.raises(UsageError, match=f"^{field}="):
            run_from_parameters(**bad)
