"""Tolerances of the migration certificate: a kind within its tolerance but above zero is a warning
shown in the certificate, ``summary.json`` and the CLI (the verdict PASS "with warnings"); a kind
the gates do not count is bad input; vector kinds can be tolerated; a user change never."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from memwork.certify import CertifyOptions, certify
from memwork.errors import UsageError
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration


@pytest.fixture
def migration(pg_url, sqlite_url):
    rows = generate_legacy_items(4, 12, seed=5, now=datetime(2026, 6, 1))
    return build_migration(sqlite_url, pg_url, rows=rows, dimensions=16)


def _options(m, **kw) -> CertifyOptions:
    return CertifyOptions(m.source_url, m.dest_url, table=m.table, retrieval=False, **kw)


def _pg(m, sql, params=()):
    from memwork.db import pg_connect

    with pg_connect(m.dest_url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else None


def _first_key(m) -> str:
    return _pg(m, "SELECT min(source_memory_id) FROM memory_embeddings")[0][0]


def _cli(m, *extra):
    from memwork.cli import main

    args = ["verify", "--source-url", m.source_url, "--database-url", m.dest_url, "--no-retrieval"]
    return CliRunner().invoke(main, [*args, *extra])


def test_a_tolerated_missing_row_is_a_warning_everywhere(migration, tmp_path):
    key = _first_key(migration)
    _pg(migration, "DELETE FROM memory_embeddings WHERE source_memory_id = %s", (key,))
    cert = certify(_options(migration, tolerances={"missing": 1}, output_dir=tmp_path))
    assert cert.verdict == "PASS" and cert.verdict_text == "PASS with warnings"
    assert cert.gates["rows"] == []
    [warning] = cert.warnings["rows"]
    assert warning.startswith("missing: 1 row(s) (allowed 1)") and key in warning
    assert cert.claim().startswith("Certified with warnings: 1 problem(s)")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["verdict_text"] == "PASS with warnings"
    assert summary["warnings"] == [f"rows: {warning}"]
    rows_gate = next(g for g in summary["gates"] if g["name"] == "rows")
    assert rows_gate["state"] == "pass" and rows_gate["warnings"] == [warning]
    result = _cli(migration, "--max", "missing=1")
    assert result.exit_code == 0, result.output
    assert "verdict: PASS with warnings" in result.output
    assert "rows: PASS with warnings" in result.output
    assert f"  warning: missing: 1 row(s) (allowed 1), e.g. {key}" in result.output


def test_a_clean_copy_has_no_warnings(migration, tmp_path):
    cert = certify(_options(migration, tolerances={"missing": 3}, output_dir=tmp_path))
    assert cert.verdict_text == "PASS" and cert.warnings == {}
    assert json.loads((tmp_path / "summary.json").read_text())["warnings"] == []


def test_over_the_tolerance_is_still_a_failure(migration):
    keys = [r[0] for r in _pg(migration, "SELECT source_memory_id FROM memory_embeddings ORDER BY 1 LIMIT 2")]
    _pg(migration, "DELETE FROM memory_embeddings WHERE source_memory_id = ANY(%s)", (keys,))
    cert = certify(_options(migration, tolerances={"missing": 1}))
    assert cert.verdict == "FAIL" and cert.gates["rows"][0].startswith("missing: 2 row(s) (allowed 1)")


def test_a_vector_kind_can_be_tolerated_with_the_views_of_the_same_rows(migration):
    """One row labelled with another model: other-model (the row), models (the table) and
    mixed-models (its user) are one problem; ``max_other-model`` tolerates all three, as warnings."""
    key = _first_key(migration)
    _pg(
        migration,
        "UPDATE memory_embeddings SET embedding_model = 'other-model-v2' WHERE source_memory_id = %s",
        (key,),
    )
    failed = certify(_options(migration))
    assert failed.verdict == "FAIL"
    assert any(r.startswith("other-model: 1 vector(s) (allowed 0)") for r in failed.gates["vectors"])
    cert = certify(_options(migration, tolerances={"other-model": 1}))
    assert cert.verdict_text == "PASS with warnings", cert.reasons()
    warned = cert.warnings["vectors"]
    assert [w.split(":")[0] for w in warned] == ["other-model", "models", "mixed-models"]
    assert key in warned[0]
    result = _cli(migration, "--max", "other-model=1")
    assert result.exit_code == 0 and "vectors: PASS with warnings" in result.output


@pytest.mark.parametrize("kind", ["stale", "wrong-dimension", "swapped", "null-vector", "mixed-models"])
def test_every_kind_the_vectors_gate_names_is_tolerable(kind):
    from memwork.certify.certificate import TOLERABLE_KINDS

    assert kind in TOLERABLE_KINDS
    CertifyOptions(tolerances={kind: 2}).check()


def test_an_unknown_kind_is_bad_input_and_nothing_is_written(migration, tmp_path):
    with pytest.raises(UsageError, match=r"^max='missin': is not a kind"):
        certify(_options(migration, tolerances={"missin": 1}))
    out = tmp_path / "out"
    result = _cli(migration, "--max", "missin=1", "--output", str(out))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "max='missin=1'" in lines[0], result.output
    assert not out.exists()
    found = _pg(migration, "SELECT to_regclass('memwork_certify_failures')")
    assert found == [(None,)]


def test_a_user_change_is_never_tolerated(migration):
    with pytest.raises(UsageError, match="max_user-changed"):
        CertifyOptions(tolerances={"user-changed": 1}).check()
    assert _cli(migration, "--max", "user-changed=1").exit_code == 2
