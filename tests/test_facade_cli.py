"""``memwork status``, ``check config``, ``check health`` -- exit codes and output, real DBs."""

import json

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.legacy.schema import init_schema


@pytest.fixture(params=["sqlite", "mysql"])
def legacy_url(request):
    url = request.getfixturevalue(f"{request.param}_url")
    init_schema(url, apply=True)
    return url


def run(args, **env):
    return CliRunner().invoke(main, args, env=env)


def test_status_json_and_text_without_secrets():
    env = {
        "MEMORY_MEM0_API_KEY": "mem0-secret",
        "MEMORY_LEGACY_DATABASE_URL": "mysql://a:pw123@127.0.0.1:1/x",
    }
    result = run(["status", "--json"], **env, MEMORY_BACKEND="mem0", MEMORY_FAIL_OPEN="bogus")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["backend"] == "mem0" and payload["selectedBackend"] == "legacy-conversation-memory"
    assert payload["configErrors"][0]["field"] == "MEMORY_FAIL_OPEN"
    text = run(["status"], **env, MEMORY_FAIL_OPEN="bogus")
    assert "selectedBackend: legacy-conversation-memory" in text.output
    assert "config error: MEMORY_FAIL_OPEN='bogus'" in text.output
    for output in (result.output, text.output):
        assert "mem0-secret" not in output and "pw123" not in output


def test_check_config_json_reports_missing_and_hides_secrets():
    result = run(["check", "config", "--backend", "letta"], MEMORY_LETTA_API_KEY="letta-secret")
    assert result.exit_code == 1
    payload = json.loads(result.output[: result.output.rindex("}") + 1])
    assert payload["ready"] is False
    assert payload["missing"] == ["MEMORY_LETTA_ENABLED", "MEMORY_LETTA_AGENT_ID"]
    assert "letta-secret" not in result.output
    key = next(v for v in payload["variables"] if v["name"] == "MEMORY_LETTA_API_KEY")
    assert key == {**key, "secret": True, "set": True, "value": "***"}


def test_check_config_of_a_configured_adapter_is_ready_and_its_shell_template_hides_the_secret():
    env = {
        "MEMORY_NEO4J_ENABLED": "1",
        "MEMORY_NEO4J_HTTP_URL": "http://localhost:7474",
        "MEMORY_NEO4J_USER": "neo4j",
    }
    as_json = run(["check", "config", "--backend", "neo4j"], **env, MEMORY_NEO4J_PASSWORD="pw-9")
    payload = json.loads(as_json.output[: as_json.output.rindex("}") + 1])
    assert payload["configured"] is True and payload["missing"] == [] and payload["invalid"] == []
    # every variable is set: the adapter is available (building it connects nowhere) and ready
    assert payload["available"] is True and payload["ready"] is True and as_json.exit_code == 0
    assert "pw-9" not in as_json.output
    shell = run(
        ["check", "config", "--backend", "neo4j", "--format", "shell"], **env, MEMORY_NEO4J_PASSWORD="pw-9"
    )
    assert shell.exit_code == 0, shell.output
    assert "pw-9" not in shell.output
    assert "export MEMORY_BACKEND=neo4j" in shell.output
    assert "export MEMORY_NEO4J_PASSWORD='<secret>'  # set; value hidden" in shell.output
    assert "# export MEMORY_NEO4J_DATABASE=neo4j  # optional" in shell.output
    assert "pw-9" not in shell.output
    missing = run(["check", "config", "--backend", "redis-streams", "--format", "shell"])
    assert missing.exit_code == 1 and "export MEMORY_REDIS_STREAMS_URL=''  # required" in missing.output


@pytest.mark.parametrize(
    "name",
    ["qdrant", "weaviate", "mem0", "letta", "neo4j", "redis-streams", "langgraph", "pgvector", "legacy"],
)
def test_check_config_knows_every_backend(name):
    result = run(["check", "config", "--backend", name])
    assert result.exit_code in (0, 1) and '"backend"' in result.output


def test_check_config_unknown_backend_exit_2():
    result = run(["check", "config", "--backend", "nope"])
    assert result.exit_code == 2 and "backend='nope'" in result.output


def test_check_health_round_trip_and_cleanup(legacy_url):
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url}
    args = [
        "check",
        "health",
        "--json",
        "--require-enabled",
        "--expect-backend",
        "legacy",
        "--expect-selected-backend",
        "legacy-conversation-memory",
    ]
    result = run(args, **env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and [c["name"] for c in report["checks"]][-1] == "roundTrip"
    assert report["cleanup"]["legacy-conversation-memory"]["items"] >= 1
    from memwork.facade.facade import facade_from_env

    assert facade_from_env(env).resolve({"userId": report["userId"]})["memories"] == []


def test_check_health_failed_expectations_exit_1(legacy_url):
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url, "MEMORY_BACKEND": "pgvector"}
    result = run(
        ["check", "health", "--expect-backend", "pgvector", "--expect-selected-backend", "pgvector"], **env
    )
    assert result.exit_code == 1
    assert "ok   backend" in result.output and "FAIL selectedBackend" in result.output
    disabled = run(["check", "health", "--require-enabled"], **env, MEMORY_ENABLED="0")
    assert disabled.exit_code == 1 and "FAIL enabled" in disabled.output


def test_check_health_closed_port_exit_1():
    result = run(["check", "health"], MEMORY_LEGACY_DATABASE_URL="mysql://root@127.0.0.1:1/x")
    assert result.exit_code == 1 and "FAIL write" in result.output


def test_check_config_legacy_ready_exit_0(legacy_url):
    result = run(["check", "config", "--backend", "legacy"], MEMORY_LEGACY_DATABASE_URL=legacy_url)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ready"] and payload["configured"] and payload["available"]


def test_check_config_bad_flag_value_is_invalid():
    result = run(["check", "config", "--backend", "qdrant"], MEMORY_QDRANT_ENABLED="maybe")
    payload = json.loads(result.output[: result.output.rindex("}") + 1])
    assert result.exit_code == 1 and payload["invalid"] == ["MEMORY_QDRANT_ENABLED"]
    status = json.loads(run(["status", "--json"], MEMORY_QDRANT_ENABLED="maybe").output)
    assert status["configErrors"] == [
        {
            "field": "MEMORY_QDRANT_ENABLED",
            "value": "maybe",
            "problem": "expected 1/0/true/false/yes/no/on/off",
        }
    ]


def test_check_health_disabled_touches_no_backend():
    """MEMORY_ENABLED=0: skipped round trip and no cleanup query (the URL points at a closed port)."""
    env = {"MEMORY_ENABLED": "0", "MEMORY_LEGACY_DATABASE_URL": "mysql://root@127.0.0.1:1/x"}
    result = run(["check", "health", "--json"], **env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["cleanup"] == {}
    assert [c["detail"] for c in report["checks"]] == ["memory disabled (MEMORY_ENABLED=0)"] * 3
