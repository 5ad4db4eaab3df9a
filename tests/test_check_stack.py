"""``memwork check stack`` end to end: a real service, the local facade, contracts and backend smokes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.legacy.schema import init_schema

TOKEN = "stack-test-token-77b2e0"


def invoke(env: dict[str, str], *args: str):
    # the command reads the process environment, as in production: the facade's, the token
    return CliRunner().invoke(main, ["check", "stack", *args], env={"MEMWORK_API_TOKEN": TOKEN, **env})


def rows_of(output: str) -> dict[str, str]:
    return {row["check"]: row["status"] for row in json.loads(output)["rows"]}


@pytest.fixture
def legacy_env(sqlite_url):
    init_schema(sqlite_url, apply=True)
    return {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "legacy", "MEMORY_LEGACY_DATABASE_URL": sqlite_url}


def test_legacy_stack_passes_and_dormant_backends_are_not_configured(legacy_env):
    from memwork.service.app import create_app, running

    with running(create_app({**legacy_env, "MEMWORK_API_TOKEN": TOKEN})) as base_url:
        out = invoke(
            legacy_env, "--base-url", base_url, "--expect-backend", "legacy", "--require-enabled", "--json"
        )
    assert out.exit_code == 0, out.output
    rows = rows_of(out.output)
    assert rows["contracts"] == rows["facade health"] == rows["app canary"] == "ok"
    smokes = {k: v for k, v in rows.items() if k.startswith("smoke ")}
    assert "smoke legacy-conversation-memory" not in smokes  # legacy is not smoked
    assert smokes["smoke pgvector"] == "not_configured"
    assert set(smokes.values()) == {"not_configured"} and len(smokes) >= 5


def test_every_failing_gate_is_a_row_and_exit_1(legacy_env, tmp_path):
    from memwork.pgvector.local_hash import write_module
    from memwork.service.app import create_app, running

    broken = {
        **legacy_env,
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_PGVECTOR_DATABASE_URL": "postgresql://app:pg-pass-9xq@127.0.0.1:1/memwork",
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": write_module(16),
        "MEMORY_BACKEND_TIMEOUT_MS": "500",
    }
    with running(create_app({**legacy_env, "MEMWORK_API_TOKEN": TOKEN})) as base_url:
        out = invoke(broken, "--base-url", base_url, "--expect-backend", "pgvector")
        as_json = invoke(broken, "--base-url", base_url, "--expect-backend", "pgvector", "--json")
    assert out.exit_code == 1 and as_json.exit_code == 1
    rows = rows_of(as_json.stdout)
    assert rows["contracts"] == "ok"
    assert rows["facade health"] == rows["app canary"] == rows["smoke pgvector"] == "failed"
    table = out.output.splitlines()
    assert any(line.startswith("failed") and "smoke pgvector" in line for line in table)
    assert any(
        line.startswith("failed") and "app canary" in line and "expected 'pgvector'" in line for line in table
    )
    assert "pg-pass-9xq" not in out.output + as_json.output
    assert out.output.strip().splitlines()[-1].startswith("Error: stack check failed: facade health:")


def test_unreachable_service_fails_only_the_app_canary(legacy_env):
    from fakes.server import refused_url

    out = invoke(legacy_env, "--base-url", refused_url(), "--json")
    assert out.exit_code == 1
    rows = rows_of(out.stdout)
    assert rows["app canary"] == "failed" and rows["contracts"] == rows["facade health"] == "ok"
    assert "Traceback" not in out.output


def test_pgvector_stack_end_to_end(pg_url, mysql_url):
    from memwork.pgvector.local_hash import write_module
    from memwork.rollout.gates import canary_env
    from memwork.samples.migration import build_migration
    from memwork.service.app import create_app, running

    m = build_migration(mysql_url, pg_url, n_users=3, items_per_user=8, dimensions=16, seed=4)
    env = canary_env(m.source_url, m.dest_url, write_module(m.dimensions))
    with running(create_app({**env, "MEMWORK_API_TOKEN": TOKEN})) as base_url:
        out = invoke(
            env,
            "--base-url",
            base_url,
            "--expect-backend",
            "pgvector",
            "--expect-selected-backend",
            "pgvector",
            "--require-target-healthy",
            "--json",
        )
    assert out.exit_code == 0, out.output
    rows = rows_of(out.output)
    assert rows["smoke pgvector"] == "ok" and rows["app canary"] == rows["facade health"] == "ok"
    app = json.loads(out.output)["details"]["app"]
    assert {s["name"]: s["ok"] for s in app["steps"]}["targetHealthy"] is True


def test_a_failed_purge_is_named_in_the_app_canary_row(legacy_env):
    """F-17 through ``check stack``: the app canary row names the backend whose purge failed."""
    from fakes.server import refused_url

    from memwork.service.app import create_app, running

    mem0 = {
        "MEMORY_MEM0_ENABLED": "1",
        "MEMORY_MEM0_API_KEY": "m0-key-77",
        "MEMORY_MEM0_BASE_URL": refused_url(),
    }
    with running(create_app({**legacy_env, **mem0, "MEMWORK_API_TOKEN": TOKEN})) as base_url:
        out = invoke(legacy_env, "--base-url", base_url, "--json")
    row = next(r for r in json.loads(out.stdout)["rows"] if r["check"] == "app canary")
    assert row["status"] == "failed" and "forget: purge failed on mem0: " in row["detail"], row
    assert "forget: None" not in out.output
