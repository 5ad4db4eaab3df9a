"""``memwork smoke external``: not_configured (exit 0), failed (exit 1, reason), ok; bad operation exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.rollout.smoke import SMOKE_USER_PREFIX, run_external_smoke


def _cli(env: dict[str, str], *args: str):
    return CliRunner().invoke(main, ["smoke", "external", *args, "--json"], env=env)


def test_unconfigured_backend_is_not_configured_and_exit_0() -> None:
    result = _cli({"MEMORY_VECTOR_ENABLED": "0"}, "--backend", "pgvector", "--operation", "resolve")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "not_configured" and payload["ok"] is True
    assert "disabled (MEMORY_VECTOR_ENABLED is not 1)" in payload["reason"]
    assert "url_missing (MEMORY_PGVECTOR_DATABASE_URL is not set)" in payload["reason"]


def test_configured_backend_whose_call_fails_is_exit_1_with_the_reason_and_no_password(tmp_path) -> None:
    module = tmp_path / "embed.py"
    module.write_text("def embed_query(query, request):\n    return [1.0, 0.0, 0.0]\n")
    env = {
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_PGVECTOR_DATABASE_URL": "postgresql://smoke:s3cret-pass@127.0.0.1:1/nowhere",
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": str(module),
        "MEMORY_BACKEND_TIMEOUT_MS": "3000",
    }
    result = _cli(env, "--backend", "pgvector", "--operation", "resolve")
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "failed" and payload["ok"] is False
    assert "pgvector resolve failed" in payload["reason"] or "timed out" in payload["reason"]
    assert "s3cret-pass" not in result.output


def test_a_configured_backend_that_answers_is_ok_and_its_synthetic_user_is_purged() -> None:
    report = run_external_smoke("legacy", "write", {})  # the workspace's SQLite legacy store
    assert report.status == "ok", report.reason
    assert report.user_id.startswith(SMOKE_USER_PREFIX)
    assert report.returned["messageIds"] == 2 and report.cleanup == "purged"
    from sqlalchemy import text

    from memwork.db import get_engine
    from memwork.facade.policy import policy_from_env

    with get_engine(policy_from_env({}).legacy_database_url).connect() as conn:
        left = conn.execute(
            text("SELECT count(*) FROM h5_conversation_messages WHERE user_id = :u"), {"u": report.user_id}
        ).scalar_one()
    assert left == 0  # the synthetic user's messages were purged


def test_an_operation_the_backend_does_not_implement_is_bad_input() -> None:
    result = CliRunner().invoke(main, ["smoke", "external", "--backend", "pgvector", "--operation", "write"])
    assert result.exit_code == 2
    assert "operation='write': pgvector does not support it (it supports resolve)" in result.output


def test_an_unknown_backend_is_bad_input_naming_it() -> None:
    result = CliRunner().invoke(main, ["smoke", "external", "--backend", "nosuch"])
    assert result.exit_code == 2 and "backend='nosuch'" in result.output


@pytest.mark.parametrize("operation", ["resolve", "write", "compact"])
def test_every_unconfigured_external_backend_reports_not_configured(operation: str) -> None:
    from memwork.backends.base import supports_of
    from memwork.plugins import Registry

    registry = Registry({})
    for backend in registry.backends():
        name = backend.name
        if name in ("legacy-conversation-memory",) or not supports_of(backend)[operation]:
            continue
        report = run_external_smoke(name, operation, {}, registry=registry)
        assert report.status == "not_configured", (name, report.reason)
        assert report.reason and report.reason.startswith("disabled ("), (name, report.reason)
