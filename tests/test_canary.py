"""Canary gates as a library: status, fallback, latency, errors, inputs, sign-off digests."""

from __future__ import annotations

import json

import pytest

from memwork.errors import UsageError
from memwork.percentiles import percentiles
from memwork.pgvector.local_hash import write_module
from memwork.reports.gates import gates_of, passed_sentence
from memwork.rollout.gates import canary_env, p95_ratio_gate, run_gates
from memwork.rollout.signoff import SignoffParameters, sha256_json, shown_parameters
from memwork.samples.migration import build_migration


@pytest.fixture
def env(pg_url, mysql_url):
    m = build_migration(mysql_url, pg_url, n_users=4, items_per_user=15, dimensions=16, seed=2)
    return canary_env(m.source_url, m.dest_url, write_module(m.dimensions))


def test_go_with_every_gate_passing_and_a_signoff(env, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"verdict": "PASS"}))
    options = SignoffParameters(
        sample_size=8,
        verification_summary=str(summary),
        approver="ana",
        waive="health_summary: new store; leak_probes: probed in test_canary_app",
    )
    result = run_gates(env, options)
    assert result.verdict == "GO", result.reasons
    gates = {g.name: g.status for g in result.gates}
    assert gates["fallback"] == gates["selected backend"] == gates["backfill verification"] == "PASS"
    assert gates["health"] == gates["isolation"] == "OFF"  # waived on purpose: the reason is on the strip
    assert gates["p95 vs legacy"] == "OFF"  # off by default, yet a row with its ratio
    strip = {g["name"]: g for g in gates_of(result.to_dict())}
    ratio = strip["p95 vs legacy"]
    assert ratio["state"] == "off" and ratio["threshold"] is None and ratio["origin"] == "default"
    assert isinstance(ratio["observed"], float) and ratio["observed"] > 0
    assert strip["target p95 latency"]["threshold"] == 250.0 and strip["target p95 latency"]["unit"] == "ms"
    assert result.latency_table()["target"]["count"] == 8 and result.errors == {"target": 0, "legacy": 0}
    assert result.signoff["parameters_sha256"] == sha256_json(shown_parameters(options.as_given()))
    assert result.signoff["approver"] == "ana"
    assert result.signoff["inputs"]["verification_summary"]["verdict"] == "PASS"
    assert result.signoff["inputs"]["health_summary"] is None
    assert len(result.signoff["git_commit"]) >= 7


def test_no_go_reasons(env, tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"verdict": "FAIL", "health": {"score": 10}}))
    result = run_gates(
        {**env, "MEMORY_BACKEND": "legacy"},
        SignoffParameters(sample_size=5, verification_summary=str(bad), health_summary=str(bad)),
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
    result = run_gates(broken, SignoffParameters(sample_size=5))
    gates = {g.name: g for g in result.gates}
    assert gates["selected backend"].status == "FAIL" and gates["fallback"].status == "PASS"


def test_options_and_percentiles():
    with pytest.raises(UsageError, match="verification_summary"):
        SignoffParameters(verification_summary="/no/such/file.json").check()
    assert percentiles([1, 2, 3, 4])["p50"] == 2.5 and percentiles([])["count"] == 0


def test_unreachable_target_or_legacy_is_no_go_with_the_reason_and_nothing_timed(env, tmp_path):
    from memwork.rollout.gates import default_embedding_module

    down = "postgresql://u:S3cretPW@127.0.0.1:5/x"
    assert default_embedding_module(down) == ""  # no cell error before the gates run
    params = SignoffParameters(legacy_url=env["MEMORY_LEGACY_DATABASE_URL"], pgvector_url=down, sample_size=5)
    result = run_gates({**env, "MEMORY_PGVECTOR_DATABASE_URL": down}, params)
    assert result.verdict == "NO-GO" and result.latency_ms == {}
    gates = {g.name: g for g in result.gates}
    assert gates["target reachable"].status == "FAIL" and "unreachable" in gates["target reachable"].detail
    assert "u:***@127.0.0.1:5/x" in result.reasons[0] and "S3cretPW" not in json.dumps(result.to_dict())
    assert gates["legacy reachable"].status == "PASS" and gates["latency and fallback"].status == "SKIP"
    # the sign-off fingerprints the parameters with the password hidden
    given = params.as_given()
    assert result.signoff["parameters_sha256"] == sha256_json(shown_parameters(given)) != sha256_json(given)
    legacy_down = {**env, "MEMORY_LEGACY_DATABASE_URL": "mysql://root@127.0.0.1:3306/no_such_db_x"}
    result = run_gates(legacy_down, SignoffParameters(sample_size=5))
    assert result.verdict == "NO-GO" and result.reasons[0].startswith("legacy reachable: ")


def test_run_signoff_defaults_and_checks(tmp_path):
    """The notebook's defaulting (the sample migration it passes, a hash query module) and checks are
    the library's; the library never builds the sample itself."""
    from memwork.rollout.run import run_signoff

    def run_from_parameters(**given):
        return run_signoff(SignoffParameters(**given), sample_migration=build_migration)

    # a missing input report is a NO-GO naming it, unless waived on purpose with a reason (on the strip)
    missing = run_from_parameters(sample_size=5, approver="ops")
    assert missing.verdict == "NO-GO"
    named = [r.split(": ", 1)[0] for r in missing.reasons]
    assert named == ["backfill verification", "health", "isolation"], missing.reasons
    assert "waive 'health_summary: <reason>'" in missing.reasons[1]
    waive = (
        "health_summary: sample migration, no entry store; verification_summary: sample data; "
        "leak_probes: no service in process"
    )
    result = run_from_parameters(sample_size=5, approver="ops", waive=waive)
    assert result.verdict == "GO", result.reasons
    waived = {g.name: (g.status, g.detail) for g in result.gates if g.status == "OFF"}
    assert waived["health"] == ("OFF", "waived: sample migration, no entry store"), waived
    assert result.signoff["approver"] == "ops" and len(result.signoff["parameters_sha256"]) == 64
    for bad, field in (({"max_errors": -1}, "max_errors"), ({"max_p95_ratio": -2.0}, "max_p95_ratio"),
                       ({"health_summary": str(tmp_path / "none.json")}, "health_summary"),
                       ({"pgvector_url": "pg://embedded"}, "legacy_url"),
                       ({"waive": "health_summary"}, "waive"), ({"waive": "store: x"}, "waive")):  # fmt: skip
        with pytest.raises(UsageError, match=f"^{field}="):
            run_from_parameters(**bad)
    with pytest.raises(UsageError, match=r"^legacy_url="):  # no URLs and no sample given: nothing built
        run_signoff(SignoffParameters(sample_size=5))


def test_the_latency_ratio_gate_shows_its_numbers_and_origin_and_is_off_at_zero():
    off = p95_ratio_gate(40.0, 10.0, SignoffParameters())
    assert (off.status, off.observed, off.threshold, off.origin) == ("OFF", 4.0, None, "default")
    slow = p95_ratio_gate(40.0, 10.0, SignoffParameters(max_p95_ratio=3.0))
    assert (slow.status, slow.observed, slow.threshold, slow.origin) == ("FAIL", 4.0, 3.0, "set")
    assert p95_ratio_gate(25.0, 10.0, SignoffParameters(max_p95_ratio=3.0)).status == "PASS"
    assert (
        p95_ratio_gate(25.0, None, SignoffParameters(max_p95_ratio=3.0)).status == "FAIL"
    )  # nothing to compare
    strip = gates_of({"gates": [off.to_dict(), slow.to_dict()]})
    assert [(g["state"], g["observed"], g["threshold"], g["origin"]) for g in strip] == [
        ("off", 4.0, None, "default"),
        ("fail", 4.0, 3.0, "set"),
    ]
    assert passed_sentence(strip) == "0 of 1 gates passed (1 fail, 1 off)"
