"""The Letta lifecycle adapter against the protocol-faithful fake: dormant reasons (agent_id_missing),
per-user tags on every passage and search, look-alike users never crossing, writes never retried, the
extractive compaction, every failure mode through the fail-open facade, secrets, gates, CLI, and the
``after``-cursor source with de-padded vectors and their model."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from fakes.letta import EMBEDDING_MODEL, FakeLetta
from fakes.server import Fault, refused_url, serve

from memwork.backends.base import supports_of
from memwork.backends.letta import DECLARATION, from_env, source_from_env, summarise
from memwork.cli import main
from memwork.errors import UsageError
from memwork.facade import facade_from_env
from memwork.http import HttpError
from memwork.migrate.source import iter_pages

API_KEY = "letta-test-key"
AGENT = "agent-memwork"
LOOK_ALIKES = ["TenantX", "tenantx", "tenantx "]
MESSAGES = [
    {"role": "user", "content": "My cat is called Miso."},
    {"role": "assistant", "content": "Miso, noted."},
]
PASSAGES = "/v1/agents/agent-memwork/archival-memory"


def _env(url: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_LETTA_ENABLED": "1",
        "MEMORY_LETTA_API_KEY": API_KEY,
        "MEMORY_LETTA_AGENT_ID": AGENT,
        "MEMORY_LETTA_BASE_URL": url,
        **extra,
    }


def _facade_env(url: str, timeout_ms: str = "300", **extra: str) -> dict[str, str]:
    """The facade on letta; 300 ms for the failure tests, ``timeout_ms="5000"`` where a call must succeed
    on a loaded machine."""
    return _env(url, MEMORY_BACKEND="letta", MEMORY_BACKEND_TIMEOUT_MS=timeout_ms, **extra)


@pytest.fixture
def fake():
    service = FakeLetta().seed()
    with serve(service) as url:
        service.url = url  # type: ignore[attr-defined]
        yield service


def _inserts(fake: FakeLetta) -> list[Any]:
    return [r for r in fake.requests if r.method == "POST" and r.path == PASSAGES]


def _seed_look_alikes(fake: FakeLetta) -> None:
    for user in LOOK_ALIKES:
        fake.insert(
            f"user: the cat of {user!r} is called Miso", [f"memwork-user:{user}", "memwork-kind:turn"]
        )


# ---- configuration ---------------------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    reason = backend.availability().reason
    assert reason == (
        "disabled (MEMORY_LETTA_ENABLED is not 1); api_key_missing (MEMORY_LETTA_API_KEY is not set); "
        "agent_id_missing (MEMORY_LETTA_AGENT_ID is not set)"
    )
    assert supports_of(backend) == {"resolve": True, "write": True, "compact": True}


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("MEMORY_LETTA_ENABLED", "disabled"),
        ("MEMORY_LETTA_API_KEY", "api_key_missing"),
        ("MEMORY_LETTA_AGENT_ID", "agent_id_missing"),
    ],
)
def test_each_missing_piece_is_its_own_reason(missing, code):
    env = {k: v for k, v in _env("http://127.0.0.1:1").items() if k != missing}
    assert from_env(env).availability().reason == f"{code} ({missing} " + (
        "is not 1)" if code == "disabled" else "is not set)"
    )


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("MEMORY_LETTA_BASE_URL", "letta.local", "invalid_url"),
        ("MEMORY_LETTA_RESOLVE_PATH", "/v1/agents/{agent}/search", "invalid_path"),
        ("MEMORY_LETTA_WRITE_PATH", "http://evil/x", "invalid_path"),
        ("MEMORY_LETTA_COMPACT_PATH", "relative/path", "invalid_path"),
    ],
)
def test_bad_values_are_their_own_reason_naming_them(key, value, code):
    reason = from_env({**_env("http://127.0.0.1:1"), key: value}).availability().reason
    assert reason.startswith(f"{code} ({key}=")


def test_declaration_keeps_the_slot_variables_and_marks_the_key_secret():
    from seed_variables import SEED_VARIABLES

    assert [v.name for v in DECLARATION.variables] == SEED_VARIABLES["letta"]
    assert DECLARATION.variable("MEMORY_LETTA_API_KEY").secret
    assert DECLARATION.variable("MEMORY_LETTA_RESOLVE_PATH").default == (
        "/v1/agents/{agent_id}/archival-memory/search"
    )


def test_configured_is_available_without_connecting(fake):
    assert from_env(_env(fake.url)).availability().available and fake.requests == []
    assert from_env(_env(refused_url())).availability().available


# ---- resolve ---------------------------------------------------------------------------------------
def test_resolve_sends_the_documented_search_scoped_by_the_user_tag(fake):
    backend = from_env(_env(fake.url, MEMORY_LETTA_PROJECT_ID="memind_project"))
    result = backend.resolve({"userId": "user-03", "query": "note about topic 2", "limit": 4})
    (search,) = fake.requests
    assert search.path == PASSAGES + "/search"
    assert search.headers["authorization"] == f"Bearer {API_KEY}"
    assert search.headers["x-project"] == "memind_project"
    assert search.query == {
        "query": ["note about topic 2"],
        "tags": ["memwork-user:user-03"],
        "tag_match_mode": ["all"],
        "top_k": ["4"],
    }
    memories = result["memories"]
    assert len(memories) == 4 and {m["userId"] for m in memories} == {"user-03"}
    assert all("topic 2" in m["content"] for m in memories)
    first = memories[0]
    assert first["source"] == "letta" and first["type"] == "conversation" and first["score"] is None
    assert first["metadata"]["sessionId"].startswith("s-03-") and first["createdAt"].startswith("2026-01-01")


@pytest.mark.parametrize("user", LOOK_ALIKES[:2])
def test_look_alike_users_only_ever_get_their_own_passage(fake, user):
    _seed_look_alikes(fake)
    facade = facade_from_env(_facade_env(fake.url, "5000"))
    result = facade.resolve({"userId": user, "query": "cat called Miso", "limit": 10})
    facade.close()
    assert result["ok"] is True and result["source"] == "letta"
    assert [m["content"] for m in result["memories"]] == [f"user: the cat of {user!r} is called Miso"]


def test_a_misbehaving_search_never_hands_over_another_users_passage(fake, caplog):
    _seed_look_alikes(fake)
    fake.insert("user: two owners", ["memwork-user:tenantx", "memwork-user:TenantX"])  # ambiguous
    fake.misbehave = True  # the search ignores the tag filter
    with caplog.at_level(logging.WARNING, logger="memwork.backends"):
        result = from_env(_env(fake.url)).resolve(
            {"userId": "tenantx", "query": "cat Miso owners", "limit": 50}
        )
    assert [m["userId"] for m in result["memories"]] == ["tenantx"]
    assert "of another user; dropped" in caplog.text


def test_resolve_without_a_query_or_with_limit_zero_sends_nothing(fake):
    backend = from_env(_env(fake.url))
    assert backend.resolve({"userId": "user-01"}) == {"memories": []}
    assert backend.resolve({"userId": "user-01", "query": "x", "limit": 0}) == {"memories": []}
    assert fake.requests == []


def test_the_agent_id_is_one_path_segment(fake):
    backend = from_env(_env(fake.url, MEMORY_LETTA_AGENT_ID="../agents/other"))
    with pytest.raises(HttpError, match="HTTP 404"):
        backend.resolve({"userId": "u", "query": "q"})
    assert fake.requests[-1].path == "/v1/agents/..%2Fagents%2Fother/archival-memory/search"


# ---- write -----------------------------------------------------------------------------------------
def test_write_inserts_one_tagged_passage_once(fake):
    result = from_env(_env(fake.url)).write({"userId": "TenantX", "sessionId": "s-9", "messages": MESSAGES})
    (insert,) = _inserts(fake)
    assert insert.body == {
        "text": "user: My cat is called Miso.\nassistant: Miso, noted.",
        "tags": ["memwork-user:TenantX", "memwork-session:s-9", "memwork-kind:turn"],
    }
    assert result == {"written": 2, "passageIds": [fake.of_user("TenantX")[0]["id"]]}
    assert fake.of_user("tenantx") == []


def test_look_alike_writes_carry_their_exact_user_tag(fake):
    facade = facade_from_env(_facade_env(fake.url, "5000"))
    for user in LOOK_ALIKES[:2]:
        assert facade.write({"userId": user, "sessionId": "s", "messages": MESSAGES})["ok"] is True
    assert facade.write({"userId": "tenantx ", "sessionId": "s", "messages": MESSAGES})["ok"] is False
    facade.close()
    assert [i.body["tags"][0] for i in _inserts(fake)] == ["memwork-user:TenantX", "memwork-user:tenantx"]


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_write_is_never_retried(fake, status):
    fake.fault = Fault(status=status)
    facade = facade_from_env(_facade_env(fake.url, "5000"))  # the status, not a loaded machine, decides
    result = facade.write({"userId": "u", "sessionId": "s", "messages": MESSAGES})
    facade.close()
    assert result["ok"] is False and f"HTTP {status}" in result["reason"]
    assert len(_inserts(fake)) == 1


def test_a_search_is_a_read_and_is_retried_on_503(fake):
    fake.fault = Fault(status=503)
    with pytest.raises(HttpError):
        from_env(_env(fake.url)).resolve({"userId": "u", "query": "q"})
    assert len(fake.requests) > 1


# ---- compact ---------------------------------------------------------------------------------------
def test_compact_summarises_the_session_into_one_passage_once(fake):
    backend = from_env(_env(fake.url))
    backend.write({"userId": "alice", "sessionId": "s", "messages": MESSAGES})
    backend.write(
        {"userId": "alice", "sessionId": "s", "messages": [{"role": "user", "content": "I live in Oslo."}]}
    )
    backend.write(
        {"userId": "alice", "sessionId": "other", "messages": [{"role": "user", "content": "Not this"}]}
    )
    result = backend.compact({"userId": "alice", "sessionId": "s"})
    summary = _inserts(fake)[-1].body
    assert summary["tags"] == ["memwork-user:alice", "memwork-session:s", "memwork-kind:summary"]
    assert (
        summary["text"]
        == "Session s summary (2 user statements):\n- My cat is called Miso.\n- I live in Oslo."
    )
    assert result["compacted"] == 2 and result["unchanged"] is False
    search = [r for r in fake.requests if r.path.endswith("/search")][-1]
    assert search.query["tags"] == ["memwork-user:alice", "memwork-session:s"]
    assert search.query["tag_match_mode"] == ["all"]
    again = backend.compact({"userId": "alice", "sessionId": "s"})
    assert again == {"compacted": 2, "summaryId": result["summaryId"], "unchanged": True}
    assert len(_inserts(fake)) == 4  # three writes and one summary: the rerun added nothing


def test_compact_ignores_another_users_passages_from_a_misbehaving_search(fake):
    fake.agents[AGENT].clear()  # only the look-alikes' passages, so the broken search returns them all
    backend = from_env(_env(fake.url))
    for user in LOOK_ALIKES[:2]:
        backend.write(
            {"userId": user, "sessionId": "s", "messages": [{"role": "user", "content": f"I am {user}"}]}
        )
    fake.misbehave = True
    backend.compact({"userId": "tenantx", "sessionId": "s"})
    assert _inserts(fake)[-1].body["text"].endswith("\n- I am tenantx")


def test_compact_without_a_session_sends_nothing(fake):
    result = from_env(_env(fake.url)).compact({"userId": "alice"})
    assert result["compacted"] == 0 and "sessionId" in result["note"] and fake.requests == []


def test_summary_is_bounded_and_deduplicated():
    text = summarise("s", ["user: a\nassistant: b\nuser: a", "user: " + "x" * 5000])
    assert text.startswith("Session s summary (2 user statements):\n- a\n- x") and len(text) == 4000


def test_purge_user_deletes_only_that_users_passages_even_from_a_misbehaving_search(fake):
    fake.agents[AGENT].clear()  # the broken search then returns every look-alike's passage
    _seed_look_alikes(fake)
    backend = from_env(_env(fake.url))
    backend.write({"userId": "tenantx", "sessionId": "s", "messages": MESSAGES})
    fake.misbehave = True
    assert backend.purge_user("tenantx") == {"passages": 2}
    assert fake.of_user("tenantx") == [] and len(fake.of_user("TenantX")) == 1
    assert len(fake.agents[AGENT]) == 2
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert len(deletes) == 2 and all(r.path.startswith(PASSAGES + "/passage-") for r in deletes)


# ---- failure modes through the facade --------------------------------------------------------------
def _through_facade(env: dict[str, str], operation: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One call through the facade, and the status page after it."""
    facade = facade_from_env(env)
    request = {"userId": "alice", "sessionId": "s", "query": "cat", "limit": 5, "messages": MESSAGES}
    if operation != "write":
        request.pop("messages")
    try:
        return getattr(facade, operation)(request), facade.status()
    finally:
        facade.close()


def test_a_wrong_api_key_is_a_401_without_either_key(fake):
    result, _ = _through_facade(
        _facade_env(fake.url, "5000", MEMORY_LETTA_API_KEY="letta-wrong-key-9"), "resolve"
    )
    assert "HTTP 401" in result["reason"]
    assert "letta-wrong-key-9" not in result["reason"] and API_KEY not in result["reason"]


# ---- gates and CLI ---------------------------------------------------------------------------------
def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:1"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert not [v for v in report.violations if v.backend == "letta"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_key():
    runner = CliRunner()
    missing = runner.invoke(
        main, ["check", "config", "--backend", "letta", "--json"], env={"MEMORY_LETTA_API_KEY": API_KEY}
    )
    assert missing.exit_code == 1 and API_KEY not in missing.output
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_LETTA_ENABLED", "MEMORY_LETTA_AGENT_ID"]
    env = _env("http://127.0.0.1:1")
    ready = runner.invoke(main, ["check", "config", "--backend", "letta", "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    shell = runner.invoke(main, ["check", "config", "--backend", "letta", "--format", "shell"], env=env)
    assert "export MEMORY_LETTA_AGENT_ID=agent-memwork" in shell.output
    assert API_KEY not in ready.output + shell.output


@pytest.mark.parametrize("operation", ["resolve", "write", "compact"])
def test_smoke_external_not_configured_ok_and_failed(fake, operation):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "letta", "--operation", operation, "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    ok = runner.invoke(main, args, env=_env(fake.url))
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["status"] == "ok" and report["cleanup"] == "purged"
    assert fake.of_user(report["userId"]) == []
    fake.fault = Fault(status=500)
    failed = runner.invoke(main, args, env=_env(fake.url))
    assert failed.exit_code == 1 and "HTTP 500" in failed.output and API_KEY not in failed.output
    refused = runner.invoke(main, args, env=_env(refused_url(), MEMORY_BACKEND_TIMEOUT_MS="300"))
    assert refused.exit_code == 1 and "letta" in refused.output and API_KEY not in refused.output


# ---- the source ------------------------------------------------------------------------------------
def _source(fake: FakeLetta):
    return source_from_env(
        {"MEMORY_LETTA_API_KEY": API_KEY, "MEMORY_LETTA_AGENT_ID": AGENT, "MEMORY_LETTA_BASE_URL": fake.url}
    )


def test_source_lists_every_passage_with_the_after_cursor_to_the_end(fake):
    fake.insert("an agent-level note", [])  # no user tag: the agent's own memory
    records, cursors = [], []
    for page, cursor in iter_pages(_source(fake), None, 100):
        records.extend(page.records)
        cursors.append(cursor)
    assert len(records) == 1081 and len({r.id for r in records}) == 1081 and len(cursors) == 11
    lists = [r for r in fake.requests if r.method == "GET"]
    assert [r.arg("after") for r in lists[1:]] == [records[i * 100 - 1].id for i in range(1, 11)]
    assert all(r.arg("ascending") == "true" and r.arg("limit") == "100" for r in lists)
    counts = Counter(r.user_id for r in records)
    assert counts[AGENT] == 1 and len(counts) == 13 and all(counts[f"user-{u:02d}"] == 90 for u in range(12))
    first = records[0]
    stored = fake.agents[AGENT][0]
    assert first.id == stored["id"] and first.content == stored["text"] and first.agent_id == AGENT
    assert first.vector == stored["embedding"][:8] and len(stored["embedding"]) == 16  # padding removed
    assert first.model == EMBEDDING_MODEL and first.session_id == "s-00-0"
    assert first.metadata["tags"] == stored["tags"] and first.created_at.isoformat() == stored["created_at"]
    assert _source(fake).key == f"letta:{fake.url}/agents/{AGENT}"


def test_source_resumes_after_a_cursor_without_gaps_or_repeats(fake):
    source = _source(fake)
    first = source.read_page(None, 300)
    rest = []
    for page, _cursor in iter_pages(_source(fake), first.next_cursor, 300):
        rest.extend(page.records)
    assert [r.id for r in first.records + rest] == [p["id"] for p in fake.agents[AGENT]]


def test_source_needs_the_key_and_the_agent():
    with pytest.raises(UsageError, match="MEMORY_LETTA_API_KEY"):
        source_from_env({"MEMORY_LETTA_AGENT_ID": AGENT})
    with pytest.raises(UsageError, match="MEMORY_LETTA_AGENT_ID"):
        source_from_env({"MEMORY_LETTA_API_KEY": API_KEY})
