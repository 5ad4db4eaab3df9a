"""The migration certificate the rollout judge takes: a real ``memwork verify`` summary passes; another
report's summary, an edited file and a certificate of another pair are refused, each naming why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_rollout_roles import LEGACY, PGVECTOR, QDRANT, realistic, rec, write

from memwork.certify import CertifyOptions, certify
from memwork.errors import UsageError
from memwork.rollout.certificate import REFUSED, read_certificate
from memwork.rollout.judge import FAIL, GO, NO_GO, PASS
from memwork.rollout.run import judge_log
from memwork.samples.migration import build_migration
from memwork.workspace import sha256_file


@pytest.fixture(scope="module")
def migrated(tmp_path_factory, pg_server):
    """``memwork verify`` of a small legacy -> pgvector migration: its summary.json."""
    import uuid

    import psycopg

    from memwork.db import dispose_all, embedded

    folder = tmp_path_factory.mktemp("cert")
    name = f"t_{uuid.uuid4().hex[:12]}"
    dest = embedded.server_url(name)
    migration = build_migration(f"sqlite:///{folder / 'legacy.db'}", dest, n_users=4, items_per_user=6,
                                dimensions=16)  # fmt: skip
    options = CertifyOptions(migration.source_url, migration.dest_url, table=migration.table,
                             users_per_bucket=2, queries_per_user=1, output_dir=folder / "run")  # fmt: skip
    assert certify(options).verdict == "PASS"
    yield migration, folder / "run" / "summary.json"
    dispose_all()
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def certified(migrated) -> Path:
    return migrated[1]


def copy(summary: Path, folder: Path, **changes) -> Path:
    """The certificate's summary.json copied into ``folder``, top-level fields changed."""
    data = json.loads(summary.read_text())
    data.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(data, indent=2))
    return folder / "summary.json"


def test_a_real_certificate_is_read_and_decides(certified, tmp_path):
    cert = read_certificate(str(certified))
    assert cert is not None and cert.passed and cert.source == "legacy-mysql" and cert.target == PGVECTOR
    assert cert.digest == json.loads(certified.read_text())["digest"]
    result = judge_log(write(tmp_path / "c.jsonl", realistic()), certificate=str(certified))
    assert result.verdict == GO, result.reasons
    signed = result.signoff["certificate"]
    assert signed["kind"] == "memwork verify" and (signed["source"], signed["target"]) == (
        "legacy-mysql",
        PGVECTOR,
    )
    # the same summary as the backfill_verification report records it: report and run added, a manifest
    data = json.loads(certified.read_text())
    run = {"run_id": "20261206T100000000Z-backfill_verification"}
    report = copy(certified, tmp_path / "report", report="backfill_verification", run=run)
    manifest = {"artifacts": [{"file": "summary.json", "sha256": sha256_file(report)}]}
    (report.parent / "manifest.json").write_text(json.dumps(manifest))
    from_report = read_certificate(str(report.parent))
    assert from_report is not None and from_report.passed and from_report.run_id == run["run_id"]
    assert from_report.digest == data["digest"] and from_report.kind == "backfill_verification"


def test_another_report_is_not_a_certificate(tmp_path):
    health = tmp_path / "health" / "summary.json"
    health.parent.mkdir()
    health.write_text(json.dumps({"verdict": "PASS", "report": "health_report", "run": {"run_id": "h-1"}}))
    with pytest.raises(
        UsageError, match=r"certificate=.*is a health_report report, not a migration certificate"
    ):
        read_certificate(str(health))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"verdict": "PASS", "digest": "sha256:abc"}))
    with pytest.raises(UsageError, match="not a migration certificate: no source, table, gates"):
        read_certificate(str(plain))
    # given as the verification summary (the default certificate), it fails the gate naming why
    log = write(tmp_path / "c.jsonl", realistic())
    result = judge_log(log, verification_summary=str(health))
    assert result.verdict == NO_GO
    assert result.metric("certificate").classification == FAIL
    assert "is a health_report report, not a migration certificate" in result.metric("certificate").detail
    # and the waiver with its reason is still the way without one
    waived = judge_log(log, certificate_waiver="read-only pilot")
    assert waived.verdict == GO and waived.signoff["certificate_waiver"] == "waived: read-only pilot"


def test_an_edited_certificate_is_refused_naming_the_mismatch(certified, tmp_path):
    data = json.loads(certified.read_text())
    rows = {**data["rows"], "dest": data["rows"]["dest"] - 1}  # a row gone, the numbers touched up
    edited = copy(certified, tmp_path / "edited", rows=rows)
    with pytest.raises(UsageError, match="digest mismatch: the certificate declares sha256:"):
        read_certificate(str(edited))
    fallback = read_certificate(str(edited), "verification_summary", strict=False)
    assert fallback is not None and fallback.verdict == REFUSED and "digest mismatch" in fallback.reasons[0]
    # a report run folder whose summary.json is not the file its manifest lists
    report = copy(certified, tmp_path / "report", report="backfill_verification", run={"run_id": "r"})
    (report.parent / "manifest.json").write_text(
        json.dumps({"artifacts": [{"file": "summary.json", "sha256": "0" * 64}]})
    )
    with pytest.raises(UsageError, match=r"summary\.json is not the file its manifest\.json lists"):
        read_certificate(str(report.parent))


def test_a_certificate_of_another_pair_does_not_count(certified, tmp_path):
    # legacy -> qdrant rank differently: the certificate is required, and legacy -> pgvector's is not it
    other = [rec(i, shadow=QDRANT, s_ms=8.0) for i in range(400)]
    result = judge_log(write(tmp_path / "q.jsonl", other), certificate=str(certified))
    gate = result.metric("certificate")
    assert result.verdict == NO_GO and gate.classification == FAIL
    assert (
        f"covers legacy-mysql -> pgvector (memory_embeddings), not the pair judged, {LEGACY} -> {QDRANT}"
        in (gate.detail)
    )
    # after the flip (pgvector serving, legacy shadowed for rollback) the same certificate covers the pair
    flipped = [rec(i, primary=PGVECTOR, shadow=LEGACY, p_ms=8.0, s_ms=2.0) for i in range(400)]
    assert (
        judge_log(write(tmp_path / "f.jsonl", flipped), certificate=str(certified))
        .metric("certificate")
        .classification
        == PASS
    )


def test_the_backfill_verification_report_is_a_certificate(migrated, tmp_path):
    """The report's run folder as the runner leaves it (report and run added, secrets scrubbed, the
    manifest written): its digest still verifies, and the judge takes it as the default certificate."""
    from memwork.reports import run_report

    migration, _ = migrated
    params = {"source_url": migration.source_url, "pgvector_url": migration.dest_url, "sample_size": 10,
              "k": 5, "users_per_bucket": 2}  # fmt: skip
    run = run_report("backfill_verification", params, tmp_path / "reports")
    assert run.verdict == "PASS", run.summary.get("reasons")
    cert = read_certificate(str(run.run_dir))
    assert cert is not None and cert.kind == "backfill_verification" and cert.run_id == run.run_id
    log = write(tmp_path / "c.jsonl", realistic())
    result = judge_log(log, verification_summary=str(run.run_dir))
    assert result.verdict == GO and result.metric("certificate").classification == PASS, result.reasons
