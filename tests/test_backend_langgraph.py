"""The LangGraph policy adapter and Store source against the fake LangGraph server (tests/fakes/langgraph.py).

Dormant unless configured, one stateless ``POST /runs/wait`` per resolve (never retried: a run is not a
pure read), the final state mapped into policy/memories/activeGoals, a failed run (``__error__`` in a
200) is a failure, tenant isolation against look-alike users, every failure mode failing open within
the deadline, the API key never shown, the gates and CLI, and the Store source's offset paging.
"""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner
from fakes.langgraph import LOOKALIKES, FakeLangGraph
from fakes.server import Fault, refused_url, serve

from memwork.backends.base import supports_of
from memwork.backends.langgraph import (
    DECLARATION,
    LangGraphBackend,
    from_env,
    map_final_state,
    source_from_env,
)
from memwork.cli import main
from memwork.errors import BackendError, UsageError
from memwork.facade.facade import facade_from_env
from memwork.migrate.source import iter_pages
from memwork.plugins import open_source

API_KEY = "lg-key-Zq8!never-shown"
CALL_DEADLINE_MS = 1500  #: every facade call here: its own reason, not a loaded machine, decides


@pytest.fixture(scope="module")
def served():
    service = FakeLangGraph()
    service.seed()  # 10 users x 90 + 3 look-alikes x 90 = 1,170 store items
    with serve(service) as url:
        service.url = url
        yield service


@pytest.fixture
def fake(served):
    served.reset()
    served.api_key = None
    yield served
    served.reset()
    served.api_key = None


def _env(url: str, **extra: str) -> dict[str, str]:
    return {"MEMORY_LANGGRAPH_ENABLED": "1", "MEMORY_LANGGRAPH_URL": url, **extra}


@pytest.fixture
def facade_env(fake):
    return _env(fake.url, MEMORY_BACKEND="langgraph", MEMORY_BACKEND_TIMEOUT_MS=str(CALL_DEADLINE_MS))


def _runs(fake: FakeLangGraph) -> list:
    return [r for r in fake.requests if r.path == "/runs/wait"]


# ---- dormant unless configured ------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    assert backend.availability().reason == (
        "disabled (MEMORY_LANGGRAPH_ENABLED is not 1); url_missing (MEMORY_LANGGRAPH_URL is not set)"
    )
    assert supports_of(backend) == {"resolve": True, "write": False, "compact": False}
    assert DECLARATION.variable("MEMORY_LANGGRAPH_API_KEY").secret
    assert DECLARATION.variable("MEMORY_LANGGRAPH_POLICY_ID").default == "memory_policy"
    assert DECLARATION.category == "policy"


@pytest.mark.parametrize(
    ("missing", "code"), [("MEMORY_LANGGRAPH_ENABLED", "disabled"), ("MEMORY_LANGGRAPH_URL", "url_missing")]
)
def test_each_missing_piece_is_its_own_reason(missing, code):
    env = {k: v for k, v in _env("http://127.0.0.1:2024").items() if k != missing}
    reason = from_env(env).availability().reason
    assert reason is not None and reason.startswith(f"{code} (") and ";" not in reason


@pytest.mark.parametrize("url", ["ftp://u:pw-SEKRIT@host", "localhost:2024", "http://"])
def test_a_bad_url_is_its_own_reason_without_the_password(url):
    reason = from_env(_env(url)).availability().reason
    assert (
        reason is not None
        and reason.startswith("url_invalid (MEMORY_LANGGRAPH_URL=")
        and "SEKRIT" not in reason
    )


def test_configured_is_available_without_building_a_client():
    backend = from_env(_env(refused_url()))
    assert backend.availability().available
    assert backend.client is not None and backend.client._client is None


# ---- resolve: one stateless run ---------------------------------------------------------------------
def test_resolve_is_one_stateless_run_with_the_documented_body(fake):
    backend = from_env(_env(fake.url))
    request = {
        "userId": "user-04",
        "sessionId": "s-9",
        "query": "what about tennis",
        "limit": 4,
        "messages": [{"role": "user", "content": "tennis?"}],
    }
    result = backend.resolve(request)
    backend.close()
    (run,) = _runs(fake)
    assert run.method == "POST" and run.body == {
        "assistant_id": "memory_policy",
        "input": request,
        "on_disconnect": "cancel",
    }
    assert result["policy"] == {
        "userId": "user-04",
        "route": "semantic",
        "maxMemories": 4,
        "reason": "9 matching memories",
    }
    assert [m["id"] for m in result["memories"]] == ["m-005", "m-015", "m-025", "m-035"]
    assert all(m["userId"] == "user-04" and "tennis" in m["content"] for m in result["memories"])
    assert result["memories"][0]["source"] == "langgraph" and result["memories"][0]["type"] == "preference"
    assert result["activeGoals"] == [
        {"userId": "user-04", "goal": "keep answers short"},
        "learn the user's routine",
    ]


def test_the_policy_id_names_the_assistant(fake):
    fake.assistants.add("routing_v2")
    try:
        backend = from_env(_env(fake.url, MEMORY_LANGGRAPH_POLICY_ID="routing_v2"))
        assert backend.resolve({"userId": "user-01", "query": "tea"})["policy"]["userId"] == "user-01"
        assert _runs(fake)[-1].body["assistant_id"] == "routing_v2"
    finally:
        fake.assistants.discard("routing_v2")
    # the error keeps the start of the 404 body, but no value the request sent (the assistant id among them)
    with pytest.raises(BackendError, match=r"HTTP 404.*Assistant '<value>' not found"):
        backend.resolve({"userId": "user-01", "query": "tea"})
    backend.close()


def test_the_facade_fills_policy_memories_and_goals(facade_env, fake):
    facade = facade_from_env(facade_env)
    try:
        payload = facade.resolve({"userId": "user-02", "sessionId": "s-1", "query": "jazz"})
        status = facade.status()
    finally:
        facade.close()
    assert payload["ok"] is True and payload["source"] == "langgraph"
    assert payload["policy"]["route"] == "semantic" and payload["policy"]["userId"] == "user-02"
    assert payload["memories"] and {m["userId"] for m in payload["memories"]} == {"user-02"}
    assert len(payload["activeGoals"]) == 2 and payload["semanticMemories"] == []
    assert status["selectedBackends"]["resolve"] == "langgraph"


def test_a_failed_run_answers_200_with_error_and_is_a_failure(facade_env, fake):
    fake.run_error = ("ValueError", "the policy graph raised")
    facade = facade_from_env(facade_env)
    try:
        payload = facade.resolve({"userId": "user-02", "query": "jazz"})
    finally:
        facade.close()
    assert payload["ok"] is False and payload["policy"] is None
    assert "langgraph run failed: ValueError: the policy graph raised" in payload["reason"]


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ([1, 2], "expected the final state object"),
        ({"policy": "semantic"}, "policy is str, not an object"),
        ({"policy": {}, "memories": {"a": 1}}, "memories is not a list"),
        ({"policy": {}, "activeGoals": "x"}, "activeGoals is not a list"),
    ],
)
def test_a_final_state_of_the_wrong_shape_is_a_failure(state, problem):
    with pytest.raises(BackendError, match=problem):
        map_final_state(state, "alice")


def test_a_state_without_policy_is_an_empty_answer():
    assert map_final_state({"messages": []}, "alice") == {}


def test_unavailable_backend_refuses_to_run():
    with pytest.raises(BackendError, match="url_missing"):
        LangGraphBackend(None).resolve({"userId": "alice", "query": "x"})


# ---- tenant isolation -----------------------------------------------------------------------------
@pytest.mark.parametrize("user", ["TenantX", "tenantx"])
def test_a_look_alikes_memory_and_goal_never_reach_the_user(facade_env, fake, user, caplog):
    fake.misbehave = True  # the graph also returns a look-alike user's memory and goal
    facade = facade_from_env(facade_env)
    try:
        payload = facade.resolve({"userId": user, "query": "likes coffee"})
    finally:
        facade.close()
    assert payload["ok"] is True
    assert payload["memories"] and {m["userId"] for m in payload["memories"]} == {user}
    goals = [g for g in payload["activeGoals"] if isinstance(g, dict)]
    assert {g["userId"] for g in goals} == {user}
    assert "langgraph returned 1 memory item(s) of another user; dropped" in caplog.text
    assert "langgraph returned 1 goal(s) of another user; dropped" in caplog.text


def test_a_trailing_space_user_is_its_own_tenant(fake, caplog):
    fake.misbehave = True
    backend = from_env(_env(fake.url))
    result = backend.resolve({"userId": "tenantx ", "query": "likes tea"})
    backend.close()
    assert result["memories"] and {m["userId"] for m in result["memories"]} == {"tenantx "}
    assert "langgraph returned 1 memory item(s) of another user; dropped" in caplog.text  # TenantX's


def test_a_policy_of_another_user_is_dropped(facade_env, fake, caplog):
    fake.policy_user = "tenantx"
    facade = facade_from_env(facade_env)
    try:
        payload = facade.resolve({"userId": "TenantX", "query": "tea"})
    finally:
        facade.close()
    assert payload["ok"] is True and payload["policy"] is None
    assert "returned a policy of another user; dropped" in caplog.text


def test_memories_without_a_user_are_dropped():
    result = map_final_state(
        {"policy": {"route": "x"}, "memories": [{"id": "1", "content": "no owner"}]}, "alice"
    )
    assert result == {"policy": {"route": "x"}, "memories": []}


# ---- failure modes through the facade -------------------------------------------------------------
def _degraded(env: dict[str, str], caplog: pytest.LogCaptureFixture) -> dict:
    """One resolve through the failing facade: degraded, the adapter still listed, no key anywhere."""
    facade = facade_from_env(env)
    caplog.set_level(logging.DEBUG)
    try:
        payload = facade.resolve({"userId": "user-01", "query": "likes tea"})
        status = facade.status()
    finally:
        facade.close()
    assert payload["policy"] is None and payload["memories"] == [] and payload["activeGoals"] == []
    row = next(b for b in status["backends"] if b["name"] == "langgraph")
    assert row["available"] is True and row["supports"]["resolve"] is True
    assert API_KEY not in json.dumps(status) + json.dumps(payload) + caplog.text
    return payload


def test_the_api_key_is_the_x_api_key_header_and_never_shown(facade_env, fake, caplog):
    fake.api_key = API_KEY
    env = {**facade_env, "MEMORY_LANGGRAPH_API_KEY": API_KEY}
    facade = facade_from_env(env)
    try:
        assert facade.resolve({"userId": "user-01", "query": "tea"})["ok"] is True
    finally:
        facade.close()
    assert _runs(fake)[-1].headers["x-api-key"] == API_KEY
    fake.api_key = "the-server-wants-another"
    payload = _degraded(env, caplog)
    assert payload["ok"] is False and "HTTP 403" in payload["reason"] and "Forbidden" in payload["reason"]


def test_a_run_error_echoing_the_api_key_never_shows_it(facade_env, fake, caplog):
    fake.run_error = ("AuthError", f"upstream refused key {API_KEY}")
    payload = _degraded({**facade_env, "MEMORY_LANGGRAPH_API_KEY": API_KEY}, caplog)
    assert payload["ok"] is False and "AuthError: upstream refused key ***" in payload["reason"]


def test_the_declaration_keeps_the_seed_variables():
    from seed_variables import SEED_REQUIRED, SEED_VARIABLES

    names = [v.name for v in DECLARATION.variables]
    assert names[: len(SEED_VARIABLES["langgraph"])] == SEED_VARIABLES["langgraph"]
    assert [v.name for v in DECLARATION.variables if v.required] == SEED_REQUIRED["langgraph"]
    assert DECLARATION.flag == "MEMORY_LANGGRAPH_ENABLED" and DECLARATION.capabilities == ("resolve",)


# ---- gates and CLI --------------------------------------------------------------------------------
def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:2024"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert "langgraph adapter" in report.checked
    assert not [v for v in report.violations if v.backend == "langgraph"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_api_key():
    runner = CliRunner()
    args = ["check", "config", "--backend", "langgraph"]
    missing = runner.invoke(main, [*args, "--json"], env={"MEMORY_LANGGRAPH_ENABLED": "1"})
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_LANGGRAPH_URL"]
    env = _env("http://127.0.0.1:2024", MEMORY_LANGGRAPH_API_KEY=API_KEY)
    ready = runner.invoke(main, [*args, "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(main, [*args, "--format", "shell"], env=env)
    assert "export MEMORY_LANGGRAPH_API_KEY='<secret>'" in shell.output
    assert "MEMORY_LANGGRAPH_POLICY_ID=memory_policy" in shell.output
    assert API_KEY not in ready.output + shell.output


def test_smoke_external_not_configured_failed_and_ok(fake):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "langgraph", "--operation", "resolve", "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    fake.api_key = API_KEY
    env = _env(fake.url, MEMORY_LANGGRAPH_API_KEY=API_KEY)
    ok = runner.invoke(main, args, env=env)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["status"] == "ok"
    assert _runs(fake)[-1].body["input"]["userId"].startswith("memory-v2-smoke-")
    fake.run_error = ("RuntimeError", "graph broke")
    failed = runner.invoke(main, args, env=env)
    assert (
        failed.exit_code == 1
        and "RuntimeError: graph broke" in failed.output
        and API_KEY not in failed.output
    )
    refused = runner.invoke(main, args, env={**env, "MEMORY_LANGGRAPH_URL": refused_url()})
    assert refused.exit_code == 1 and "ConnectError" in refused.output and API_KEY not in refused.output


# ---- the migration source -------------------------------------------------------------------------
def test_source_pages_through_every_item_with_offsets(fake):
    source = open_source("langgraph", {"MEMORY_LANGGRAPH_URL": fake.url})  # no flag needed to read
    try:
        pages = list(iter_pages(source, None, 250))
    finally:
        source.close()
    assert [len(p.records) for p, _ in pages] == [250, 250, 250, 250, 170]
    searches = [r for r in fake.requests if r.path == "/store/items/search"]
    assert [r.body for r in searches] == [
        {"namespace_prefix": ["memories"], "limit": 250, "offset": offset}
        for offset in (0, 250, 500, 750, 1000)
    ]
    records = [r for p, _ in pages for r in p.records]
    expected = {f"{ns[1]}/{key}" for ns, key in fake.items}
    assert len(records) == len(expected) == 1170 and {r.id for r in records} == expected
    users = {r.user_id for r in records}
    assert len(users) == 13 and set(LOOKALIKES) <= users
    one = next(r for r in records if r.id == "tenantx /m-007")
    stored = fake.items[(("memories", "tenantx "), "m-007")]
    assert one.user_id == "tenantx " and one.content == stored["value"]["content"]
    assert one.type == "preference" and one.session_id == "s-3" and one.vector is None and one.model is None
    assert one.metadata == {"topic": "books", "namespace": ["memories", "tenantx "], "key": "m-007"}
    assert one.created_at.isoformat().replace("+00:00", "Z") == stored["created_at"]
    assert one.updated_at.isoformat().replace("+00:00", "Z") == stored["updated_at"]


def test_source_namespace_prefix_is_configurable():
    fake = FakeLangGraph()
    for n in range(12):
        fake.put(["app", "memories", f"u{n % 3}"], f"k{n}", {"content": {"fact": n}, "kind": "semantic"})
    fake.put(["app", "other", "u0"], "k-x", {"content": "not a memory"})
    fake.put(["memories", "u0"], "k-y", {"content": "another prefix"})
    with serve(fake) as url:
        source = source_from_env({"MEMORY_LANGGRAPH_URL": url, "MEMORY_LANGGRAPH_NAMESPACE": "app.memories"})
        pages = list(iter_pages(source, None, 5))
    records = [r for p, _ in pages for r in p.records]
    assert [len(p.records) for p, _ in pages] == [5, 5, 2]
    assert sorted(r.id for r in records) == sorted(f"u{n % 3}/k{n}" for n in range(12))
    assert {r.user_id for r in records} == {"u0", "u1", "u2"} and {r.type for r in records} == {"semantic"}
    assert json.loads(next(r for r in records if r.id == "u1/k4").content) == {"fact": 4}
    assert source.key.endswith("/store/app.memories")


def test_source_variables_and_failures(fake):
    with pytest.raises(UsageError, match="MEMORY_LANGGRAPH_URL"):
        source_from_env({})
    with pytest.raises(UsageError, match="MEMORY_LANGGRAPH_NAMESPACE"):
        source_from_env({"MEMORY_LANGGRAPH_URL": fake.url, "MEMORY_LANGGRAPH_NAMESPACE": "a..b"})
    source = source_from_env(
        {"MEMORY_LANGGRAPH_URL": "http://u:pw-SEKRIT@lg:2024", "MEMORY_LANGGRAPH_API_KEY": API_KEY}
    )
    assert "SEKRIT" not in source.key and source.key.endswith("lg:2024/store/memories")
    source = source_from_env({"MEMORY_LANGGRAPH_URL": fake.url, "MEMORY_LANGGRAPH_API_KEY": API_KEY})
    fake.fault = Fault(status=503)
    with pytest.raises(BackendError, match="HTTP 503") as info:
        source.read_page(None, 100)
    assert API_KEY not in str(info.value)
    assert len(fake.requests) == 3  # a store search is a read: retried, unlike a run
    fake.fault = Fault(malformed=True)
    with pytest.raises(BackendError, match="malformed JSON"):
        source.read_page("100", 100)
    fake.fault = None
    with pytest.raises(UsageError, match="cursor"):
        source.read_page("abc", 100)
    source.close()
    bad = FakeLangGraph()
    bad.put(["memories"], "k", {"content": "no user in the namespace"})
    with serve(bad) as url, pytest.raises(BackendError, match="names no user"):
        source_from_env({"MEMORY_LANGGRAPH_URL": url}).read_page(None, 10)
