"""One rollout sign-off: both ways to a verdict sign the same block, the judge reads the log the service
writes, and the judge stays statistics only."""

from __future__ import annotations

import json

from test_canary_judge import comparison, write_log
from test_import_graph import module_arrows

from memwork.rollout.gates import canary_env, run_gates
from memwork.rollout.run import judge_shadow_reads
from memwork.rollout.signoff import SignoffParameters, sha256_json, shown_parameters
from memwork.service.shadow import ComparisonLog, shadow_settings_from_env
from memwork.workspace import sha256_file

HEADER = {"verdict", "approver", "time_utc", "memwork_version", "git_commit", "parameters_sha256", "inputs"}


def test_the_gates_and_the_judge_sign_one_block_with_the_same_inputs(tmp_path):
    verification = tmp_path / "verification" / "summary.json"
    verification.parent.mkdir()
    verification.write_text(
        json.dumps({"verdict": "PASS", "report": "backfill_verification", "run": {"run_id": "r-7"}})
    )
    log = write_log(tmp_path / "log.jsonl", [comparison(i, 20.0, 20.5) for i in range(30)])
    judged = judge_shadow_reads(
        SignoffParameters(comparison_log=str(log), verification_summary=str(verification.parent))
    )
    legacy, target = f"sqlite:///{tmp_path / 'legacy.db'}", "postgresql://ops:S3cretPW@127.0.0.1:5/x"
    given = SignoffParameters(legacy_url=legacy, pgvector_url=target, verification_summary=str(verification))
    gated = run_gates(canary_env(legacy, target, "memwork.pgvector.local_hash"), given)
    assert gated.verdict == "NO-GO" and gated.reasons[0].startswith("target reachable: ")
    for block in (judged.signoff, gated.signoff):
        assert set(block) >= HEADER, block.keys()
        assert block["inputs"] == {
            "verification_summary": {
                "run_id": "r-7",
                "report": "backfill_verification",
                "verdict": "PASS",
                "summary_sha256": sha256_file(verification),
            },
            "health_summary": None,
        }
    # the parameters as given, the password hidden, fingerprinted the same way by both
    assert gated.signoff["parameters_sha256"] == sha256_json(shown_parameters(given.as_given()))
    assert "S3cretPW" not in json.dumps(gated.to_dict())


def test_the_judge_reads_by_default_the_log_the_service_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWORK_HOME", str(tmp_path / "home"))
    written = shadow_settings_from_env({}).log_path  # where `memwork serve` writes, unconfigured
    assert written is not None
    writer = ComparisonLog(written, max_records=1000)
    for i in range(25):
        writer.append(comparison(i, 20.0, 20.0))
    judged = judge_shadow_reads(SignoffParameters())  # neither a log nor a service named
    assert judged.signoff["comparison_log"] == str(written) and judged.records == 25


def test_the_judge_and_its_statistics_read_no_file_and_show_nothing():
    """The judge decides from a log already read; reading, signing and showing live elsewhere, so the
    judge can grow (roles, sequential tests, a noise floor) without touching I/O."""
    allowed = {"memwork.errors", "memwork.rollout.stats", "memwork.rollout.comparisons",
               "memwork.rollout.roles", "memwork.rollout.sequential", "memwork.contracts"}  # fmt: skip
    imported = {b for (a, b) in module_arrows() if a in ("memwork.rollout.judge", "memwork.rollout.stats")}
    assert imported <= allowed, imported - allowed
