"""The Mem0 extraction adapter against the protocol-faithful fake: dormant reasons, the documented write
and compact requests, tenant scoping with look-alike users, writes never retried, every failure mode
through the fail-open facade within the deadline, secrets, the gates, the CLI and the source's paging."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from fakes.mem0 import FakeMem0
from fakes.server import Fault, refused_url, serve

from memwork.backends.base import supports_of
from memwork.backends.mem0 import DECLARATION, from_env, source_from_env
from memwork.cli import main
from memwork.errors import UsageError
from memwork.facade import facade_from_env
from memwork.http import HttpError
from memwork.migrate.source import iter_pages

API_KEY = "m0-test-key"
LOOK_ALIKES = ["TenantX", "tenantx", "tenantx "]
MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "I moved to Austin last month."},
    {"role": "assistant", "content": "Noted, Austin."},
]


def _env(url: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_MEM0_ENABLED": "1",
        "MEMORY_MEM0_API_KEY": API_KEY,
        "MEMORY_MEM0_BASE_URL": url,
        **extra,
    }


def _facade_env(url: str, timeout_ms: str = "300", **extra: str) -> dict[str, str]:
    """The facade on mem0; 300 ms for the failure tests, ``timeout_ms="5000"`` where a call must succeed
    on a loaded machine."""
    return _env(url, MEMORY_BACKEND="mem0", MEMORY_BACKEND_TIMEOUT_MS=timeout_ms, **extra)


@pytest.fixture
def fake():
    service = FakeMem0().seed()
    with serve(service) as url:
        service.url = url  # type: ignore[attr-defined]
        yield service


def _posts(fake: FakeMem0) -> list[Any]:
    return [r for r in fake.requests if r.method == "POST" and r.path == "/v1/memories/"]


# ---- configuration ---------------------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    avail = backend.availability()
    assert not avail.available
    assert avail.reason == (
        "disabled (MEMORY_MEM0_ENABLED is not 1); api_key_missing (MEMORY_MEM0_API_KEY is not set)"
    )
    assert supports_of(backend) == {"resolve": False, "write": True, "compact": True}


@pytest.mark.parametrize(
    ("missing", "code"), [("MEMORY_MEM0_ENABLED", "disabled"), ("MEMORY_MEM0_API_KEY", "api_key_missing")]
)
def test_each_missing_piece_is_its_own_reason(missing, code):
    env = {k: v for k, v in _env("http://127.0.0.1:1").items() if k != missing}
    assert from_env(env).availability().reason.startswith(f"{code} ({missing} ")


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("MEMORY_MEM0_BASE_URL", "ftp://mem0", "invalid_url"),
        ("MEMORY_MEM0_WRITE_PATH", "v1/memories", "invalid_path"),
        ("MEMORY_MEM0_COMPACT_PATH", "/v1/memories/?x=1", "invalid_path"),
    ],
)
def test_bad_values_are_their_own_reason_naming_them(key, value, code):
    reason = from_env({**_env("http://127.0.0.1:1"), key: value}).availability().reason
    assert reason.startswith(f"{code} ({key}=")


def test_declaration_keeps_the_slot_variables_and_marks_the_key_secret():
    from seed_variables import SEED_VARIABLES

    assert [v.name for v in DECLARATION.variables] == SEED_VARIABLES["mem0"]
    assert DECLARATION.variable("MEMORY_MEM0_API_KEY").secret
    assert DECLARATION.variable("MEMORY_MEM0_BASE_URL").default == "https://api.mem0.ai"
    assert DECLARATION.variable("MEMORY_MEM0_WRITE_PATH").default == "/v1/memories/"


def test_configured_is_available_without_connecting(fake):
    backend = from_env(_env(fake.url))
    assert backend.availability().available and fake.requests == []
    assert from_env(_env(refused_url())).availability().available


def test_resolve_is_unaffected_by_memory_backend_mem0(fake):
    facade = facade_from_env(_facade_env(fake.url))
    status = facade.status()
    assert status["selectedBackends"]["write"] == "mem0"
    assert status["selectedBackends"]["compact"] == "mem0"
    assert status["selectedBackends"]["resolve"] != "mem0"
    facade.close()


# ---- write -----------------------------------------------------------------------------------------
def test_write_sends_the_documented_add_request_once(fake):
    backend = from_env(_env(fake.url, MEMORY_MEM0_PROJECT_ID="memind_project"))
    result = backend.write({"userId": "alice", "sessionId": "s-1", "messages": MESSAGES})
    (post,) = _posts(fake)
    assert post.headers["authorization"] == f"Token {API_KEY}"
    assert post.body == {
        "messages": [{"role": m["role"], "content": m["content"]} for m in MESSAGES],
        "user_id": "alice",
        "run_id": "s-1",
        "infer": False,
        "version": "v2",
        "metadata": {"memwork_kind": "turn", "source": "memwork", "memwork_session_id": "s-1"},
        "project_id": "memind_project",
    }
    assert result["written"] == 3 and len(result["eventIds"]) == 1
    stored = fake.of_user("alice")  # system messages are not stored (infer: false), roles are kept
    assert [(m["memory"], m["metadata"]["role"]) for m in stored] == [
        ("I moved to Austin last month.", "user"),
        ("Noted, Austin.", "assistant"),
    ]


def test_look_alike_users_each_write_under_their_exact_id(fake):
    facade = facade_from_env(_facade_env(fake.url, "5000"))
    for user in ["TenantX", "tenantx"]:
        result = facade.write({"userId": user, "sessionId": "s", "messages": MESSAGES[1:2]})
        assert result["ok"] is True and result["source"] == "mem0"
    padded = facade.write({"userId": "tenantx ", "sessionId": "s", "messages": MESSAGES[1:2]})
    assert padded["ok"] is False and padded["field"] == "userId"  # refused before anything is sent
    facade.close()
    assert [p.body["user_id"] for p in _posts(fake)] == ["TenantX", "tenantx"]
    assert len(fake.of_user("TenantX")) == 1 and len(fake.of_user("tenantx")) == 1
    assert fake.of_user("tenantx ") == []


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_write_is_never_retried(fake, status):
    fake.fault = Fault(status=status)
    facade = facade_from_env(_facade_env(fake.url, "5000"))  # the status, not a loaded machine, decides
    result = facade.write({"userId": "alice", "sessionId": "s", "messages": MESSAGES})
    facade.close()
    assert result["ok"] is False and f"HTTP {status}" in result["reason"]
    assert len(_posts(fake)) == 1


# ---- compact ---------------------------------------------------------------------------------------
def test_compact_reads_the_session_back_and_runs_extraction_once(fake):
    backend = from_env(_env(fake.url))
    backend.write({"userId": "alice", "sessionId": "s-1", "messages": MESSAGES})
    backend.write({"userId": "alice", "sessionId": "s-2", "messages": [{"role": "user", "content": "Other"}]})
    result = backend.compact({"userId": "alice", "sessionId": "s-1"})
    reads = [r for r in fake.requests if r.method == "GET"]
    assert [(r.arg("user_id"), r.arg("run_id"), r.arg("page")) for r in reads] == [("alice", "s-1", "1")]
    extraction = _posts(fake)[-1]
    assert extraction.body["infer"] is True and extraction.body["user_id"] == "alice"
    assert "run_id" not in extraction.body  # long-term memories of the user, not of the session
    assert extraction.body["messages"] == [
        {"role": "user", "content": "I moved to Austin last month."},
        {"role": "assistant", "content": "Noted, Austin."},
    ]
    assert result == {"compacted": 2, "eventIds": result["eventIds"]} and len(result["eventIds"]) == 1
    facts = [m["memory"] for m in fake.of_user("alice") if m["memory"].startswith("Fact: ")]
    assert facts == ["Fact: I moved to Austin last month."]


def test_compact_pages_through_a_long_session(fake):
    backend = from_env(_env(fake.url))
    for i in range(3):
        turns = [{"role": "user", "content": f"turn {i}-{j}"} for j in range(50)]
        backend.write({"userId": "bob", "sessionId": "long", "messages": turns})
    result = backend.compact({"userId": "bob", "sessionId": "long"})
    pages = [r.arg("page") for r in fake.requests if r.method == "GET"]
    assert pages == ["1", "2"]  # 150 turns, 100 per page
    sent = _posts(fake)[-1].body["messages"]
    assert (
        result["compacted"] == 100 and sent[0]["content"] == "turn 1-0" and sent[-1]["content"] == "turn 2-49"
    )


def test_compact_without_a_session_sends_nothing(fake):
    result = from_env(_env(fake.url)).compact({"userId": "alice"})
    assert result["compacted"] == 0 and "sessionId" in result["note"] and fake.requests == []


def test_compact_never_feeds_another_users_turns_to_the_extraction(fake, caplog):
    backend = from_env(_env(fake.url))
    for user in LOOK_ALIKES:
        fake.store(
            user,
            f"secret of {user!r}",
            run_id="s",
            metadata={"memwork_kind": "turn", "memwork_session_id": "s", "role": "user"},
        )
    fake.misbehave = True  # the listing ignores user_id: every user's turns of session "s" come back
    with caplog.at_level(logging.WARNING, logger="memwork.backends"):
        result = backend.compact({"userId": "tenantx", "sessionId": "s"})
    sent = _posts(fake)[-1].body
    assert sent["user_id"] == "tenantx" and sent["messages"] == [
        {"role": "user", "content": "secret of 'tenantx'"}
    ]
    assert result["compacted"] == 1 and "of another user; dropped" in caplog.text


def test_compact_is_never_retried(fake):
    backend = from_env(_env(fake.url))
    backend.write({"userId": "alice", "sessionId": "s", "messages": MESSAGES})
    before = len(_posts(fake))
    fake.add_status = 503  # the session's read succeeds, the extraction's add fails
    with pytest.raises(HttpError, match="HTTP 503") as caught:
        backend.compact({"userId": "alice", "sessionId": "s"})
    assert caught.value.status == 503 and len(_posts(fake)) == before + 1


# ---- failure modes through the facade --------------------------------------------------------------
def _through_facade(env: dict[str, str], operation: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One call through the facade, and the status page after it."""
    facade = facade_from_env(env)
    request = {"userId": "alice", "sessionId": "s", "messages": MESSAGES}
    try:
        return getattr(facade, operation)(request), facade.status()
    finally:
        facade.close()


def test_a_wrong_api_key_is_a_401_without_either_key(fake):
    result, _ = _through_facade(
        _facade_env(fake.url, "5000", MEMORY_MEM0_API_KEY="m0-wrong-key-123"), "write"
    )
    assert "HTTP 401" in result["reason"]
    assert "m0-wrong-key-123" not in result["reason"] and API_KEY not in result["reason"]


# ---- gates and CLI ---------------------------------------------------------------------------------
def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:1"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert not [v for v in report.violations if v.backend == "mem0"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_key():
    runner = CliRunner()
    missing = runner.invoke(main, ["check", "config", "--backend", "mem0", "--json"], env={})
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_MEM0_ENABLED", "MEMORY_MEM0_API_KEY"]
    env = _env("http://127.0.0.1:1")
    ready = runner.invoke(main, ["check", "config", "--backend", "mem0", "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(main, ["check", "config", "--backend", "mem0", "--format", "shell"], env=env)
    assert "MEMORY_MEM0_WRITE_PATH=/v1/memories/" in shell.output
    assert API_KEY not in ready.output + shell.output


@pytest.mark.parametrize("operation", ["write", "compact"])
def test_smoke_external_not_configured_ok_and_failed(fake, operation):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "mem0", "--operation", operation, "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    ok = runner.invoke(main, args, env=_env(fake.url))
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["status"] == "ok" and report["userId"].startswith("memory-v2-smoke-")
    assert report["cleanup"] == "purged" and fake.of_user(report["userId"]) == []
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert [r.arg("user_id") for r in deletes] == [report["userId"]]
    fake.fault = Fault(status=500)
    failed = runner.invoke(main, args, env=_env(fake.url))
    assert failed.exit_code == 1 and "HTTP 500" in failed.output and API_KEY not in failed.output
    refused = runner.invoke(main, args, env=_env(refused_url(), MEMORY_BACKEND_TIMEOUT_MS="300"))
    assert refused.exit_code == 1 and "mem0" in refused.output and API_KEY not in refused.output


def test_purge_user_deletes_exactly_that_user(fake):
    backend = from_env(_env(fake.url))
    for user in LOOK_ALIKES:
        fake.store(user, f"memory of {user!r}")
    assert backend.purge_user("tenantx") == {"users": 1}
    assert (
        fake.of_user("tenantx") == [] and len(fake.of_user("TenantX")) == len(fake.of_user("tenantx ")) == 1
    )
    with pytest.raises(UsageError):
        backend.purge_user("*")
    assert len(fake.memories) == 1080 + 2


def test_smoke_resolve_is_bad_input():
    result = CliRunner().invoke(main, ["smoke", "external", "--backend", "mem0", "--operation", "resolve"])
    assert result.exit_code == 2


# ---- the source ------------------------------------------------------------------------------------
def _read_all(source, size):
    records, cursors = [], []
    for page, cursor in iter_pages(source, None, size):
        records.extend(page.records)
        cursors.append(cursor)
    return records, cursors


def test_source_reads_every_memory_of_every_user_to_the_end(fake):
    fake.entity_page_size = 5  # the users' listing is paged too (12 users: 3 pages)
    source = source_from_env({"MEMORY_MEM0_API_KEY": API_KEY, "MEMORY_MEM0_BASE_URL": fake.url})
    records, cursors = _read_all(source, 40)
    assert len(records) == len(fake.memories) == 1080
    assert len({r.id for r in records}) == 1080 and len(cursors) > 12
    assert Counter(r.user_id for r in records) == Counter(m["user_id"] for m in fake.memories)
    assert len([r for r in fake.requests if r.path == "/v1/entities/"]) == 3
    first = next(r for r in records if r.id == fake.memories[0]["id"])
    assert first.content == fake.memories[0]["memory"] and first.metadata["seq"] == 0
    assert (
        first.metadata["categories"] == ["topic-0"]
        and first.created_at.isoformat() == fake.memories[0]["created_at"]
    )
    assert first.vector is None and first.model is None
    assert source.key == f"mem0:{fake.url}" and API_KEY not in source.key
    source.close()


def test_source_resumes_from_a_cursor_without_gaps_or_repeats(fake):
    env = {"MEMORY_MEM0_API_KEY": API_KEY, "MEMORY_MEM0_BASE_URL": fake.url}
    everything, cursors = _read_all(source_from_env(env), 50)
    middle = cursors[len(cursors) // 2]
    done = []
    for page, cursor in iter_pages(source_from_env(env), None, 50):
        if cursor == middle:
            break
        done.extend(page.records)
    rest, _ = [], None
    for page, _cursor in iter_pages(source_from_env(env), middle, 50):
        rest.extend(page.records)
    assert [r.id for r in done + rest] == [r.id for r in everything]


def test_source_drops_another_users_memory_from_a_misbehaving_listing(fake, caplog):
    fake.misbehave = True
    source = source_from_env({"MEMORY_MEM0_API_KEY": API_KEY, "MEMORY_MEM0_BASE_URL": fake.url})
    with caplog.at_level(logging.WARNING, logger="memwork.backends"):
        page = source.read_page(None, 100)
    assert {r.user_id for r in page.records} == {"user-00"} and len(page.records) == 90
    assert "foreign" in caplog.text


def test_source_needs_the_api_key_and_a_valid_url():
    with pytest.raises(UsageError, match="MEMORY_MEM0_API_KEY"):
        source_from_env({})
    with pytest.raises(UsageError, match="MEMORY_MEM0_BASE_URL"):
        source_from_env({"MEMORY_MEM0_API_KEY": API_KEY, "MEMORY_MEM0_BASE_URL": "mem0.local"})
