"""The Neo4j behaviour-graph adapter against the fake transactional endpoint (tests/fakes/neo4j.py).

Dormant unless configured (one reason per missing piece), write-only, one begin-and-commit request
per write with constant statement texts and every request value in ``parameters``, per-user
scoping, every failure mode failing open within the deadline, and the password never shown.
"""

from __future__ import annotations

import base64
import json
import logging
import re

import pytest
from click.testing import CliRunner
from fakes.neo4j import FakeNeo4j
from fakes.server import Fault, Response, refused_url, serve

from memwork.backends.base import supports_of
from memwork.backends.neo4j import (
    DECLARATION,
    PURGE_STATEMENTS,
    STATEMENTS,
    Neo4jBackend,
    commit_path,
    from_env,
)
from memwork.cli import main
from memwork.errors import BackendError
from memwork.facade.facade import facade_from_env

PASSWORD = "pw-Zq8!never-shown"
ERROR_DEADLINE_MS = 1000  #: the failures here: their own reason must win, even on a loaded machine


def _env(url: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_NEO4J_ENABLED": "1",
        "MEMORY_NEO4J_HTTP_URL": url,
        "MEMORY_NEO4J_USER": "neo4j",
        "MEMORY_NEO4J_PASSWORD": PASSWORD,
        **extra,
    }


def _write(user: str = "alice", session: str = "s-1", *contents: str) -> dict:
    texts = contents or ("I prefer tea in the morning.", "Noted: tea, mornings.")
    roles = ["user", "assistant"]
    return {
        "userId": user,
        "sessionId": session,
        "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)],
    }


@pytest.fixture(scope="module")
def served():
    service = FakeNeo4j(password=PASSWORD, databases=("neo4j", "memory-graph"))
    with serve(service) as url:
        service.url = url
        yield service


@pytest.fixture
def fake(served):
    """The module's served fake, fresh for each test (no requests, no faults, the right password)."""
    served.reset(password=PASSWORD)
    served.routes[:] = served.routes[-1:]
    yield served
    served.reset(password=PASSWORD)


@pytest.fixture
def facade_env(fake):
    """The facade with MEMORY_BACKEND=neo4j and legacy on the test's workspace SQLite."""
    return _env(fake.url, MEMORY_BACKEND="neo4j")


# ---- dormant unless configured ------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    avail = backend.availability()
    assert not avail.available
    assert avail.reason == (
        "disabled (MEMORY_NEO4J_ENABLED is not 1); url_missing (MEMORY_NEO4J_HTTP_URL is not set); "
        "user_missing (MEMORY_NEO4J_USER is not set); password_missing (MEMORY_NEO4J_PASSWORD is not set)"
    )
    assert supports_of(backend) == {"resolve": False, "write": True, "compact": False}
    assert DECLARATION.capabilities == ("write",)


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("MEMORY_NEO4J_ENABLED", "disabled"),
        ("MEMORY_NEO4J_HTTP_URL", "url_missing"),
        ("MEMORY_NEO4J_USER", "user_missing"),
        ("MEMORY_NEO4J_PASSWORD", "password_missing"),
    ],
)
def test_each_missing_piece_is_its_own_reason(missing, code):
    env = {k: v for k, v in _env("http://127.0.0.1:7474").items() if k != missing}
    reason = from_env(env).availability().reason
    assert reason is not None and reason.startswith(f"{code} (") and ";" not in reason


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("MEMORY_NEO4J_DATABASE", "neo4j/../system", "database_invalid"),
        ("MEMORY_NEO4J_DATABASE", "a b", "database_invalid"),
        ("MEMORY_NEO4J_DATABASE", "system", "database_invalid"),
        ("MEMORY_NEO4J_DATABASE", "db?x=1", "database_invalid"),
        ("MEMORY_NEO4J_DATABASE", "ab", "database_invalid"),
        ("MEMORY_NEO4J_HTTP_URL", "bolt://127.0.0.1:7687", "url_invalid"),
        ("MEMORY_NEO4J_ENABLED", "maybe", "disabled"),
    ],
)
def test_bad_values_make_it_unavailable_naming_them(key, value, code):
    avail = from_env({**_env("http://127.0.0.1:7474"), key: value}).availability()
    assert not avail.available and avail.reason.startswith(code)
    assert repr(value) in avail.reason or code == "disabled"


def test_the_database_is_a_validated_path_segment():
    assert commit_path("memory-graph") == "/db/memory-graph/tx/commit"
    for bad in ("../x", "a/b", "system", "x" * 64, ""):
        with pytest.raises(BackendError):
            commit_path(bad)


def test_configured_is_available_without_building_a_client():
    backend = from_env(_env(refused_url()))
    assert backend.availability().available and backend.database == "neo4j"
    assert backend._client is None  # nothing built, nothing connected
    assert PASSWORD not in repr(backend)


# ---- write --------------------------------------------------------------------------------------
def test_write_is_one_transaction_with_the_documented_request(fake):
    backend = from_env(_env(fake.url))
    try:
        result = backend.write(_write("alice", "s-1", "first", "second", "third"))
    finally:
        backend.close()
    assert result["events"] == 3 and len(result["eventIds"]) == 3 and result["database"] == "neo4j"
    (request,) = fake.requests
    assert request.method == "POST" and request.path == "/db/neo4j/tx/commit"
    user, _, password = base64.b64decode(request.headers["authorization"].split()[1]).decode().partition(":")
    assert (user, password) == ("neo4j", PASSWORD)
    assert request.headers["content-type"].startswith("application/json")
    statements = request.body["statements"]
    assert [s["statement"] for s in statements] == list(STATEMENTS[:3])  # session, events, order
    assert all("\n" not in s["statement"] for s in statements)
    events = fake.events()
    assert [(e["role"], e["content"], e["position"]) for e in events] == [
        ("user", "first", 0),
        ("assistant", "second", 1),
        ("user", "third", 2),
    ]
    assert [e["id"] for e in events] == result["eventIds"]
    pairs = statements[2]["parameters"]["pairs"]
    assert pairs == [
        {"before": a, "after": b} for a, b in zip(result["eventIds"], result["eventIds"][1:], strict=False)
    ]
    assert statements[1]["parameters"]["writeId"] == result["writeId"]


def test_one_message_sends_no_order_statement(fake):
    backend = from_env(_env(fake.url))
    backend.write(_write("alice", "s-1", "only one"))
    assert [s["statement"] for s in fake.requests[0].body["statements"]] == list(STATEMENTS[:2])


def test_a_write_without_messages_sends_nothing(fake):
    backend = from_env(_env(fake.url))
    assert backend.write({"userId": "alice", "sessionId": "s", "messages": []})["events"] == 0
    assert fake.requests == []


def test_another_database_is_the_path_segment(fake):
    backend = from_env(_env(fake.url, MEMORY_NEO4J_DATABASE="memory-graph"))
    backend.write(_write())
    assert fake.requests[0].path == "/db/memory-graph/tx/commit"
    assert fake.commits[0]["database"] == "memory-graph"


HOSTILE = [
    'alice"}) DETACH DELETE n //',
    "o'brien",
    "}) DETACH DELETE n //",
    "$userId",
    "ユーザー🙂",
    "x`) MATCH (n) DETACH DELETE n; //",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_no_request_value_ever_appears_in_a_statement_text(fake, value):
    backend = from_env(_env(fake.url))
    backend.write({"userId": value, "sessionId": value, "messages": [{"role": "user", "content": value}] * 2})
    backend.purge_user(value)
    sent = [s for r in fake.requests for s in r.body["statements"]]
    assert len(sent) == 6
    for statement in sent:
        assert statement["statement"] in STATEMENTS  # the module's constants, byte for byte
        if value != "$userId":
            assert value not in statement["statement"]
    session, events, _order = sent[:3]
    assert session["parameters"]["userId"] == value and session["parameters"]["sessionId"] == value
    assert [e["content"] for e in events["parameters"]["events"]] == [value, value]
    assert all(s["parameters"] == {"userId": value} for s in sent[3:])


def test_look_alike_users_are_separate_parameters(fake):
    backend = from_env(_env(fake.url))
    users = ["TenantX", "tenantx", "tenantx "]
    for user in users:
        if user != user.strip():
            # the facade refuses padded ids; the adapter validates the same way
            with pytest.raises(Exception, match="whitespace"):
                backend.write(_write(user, "shared-session", f"secret of {user!r}"))
            continue
        backend.write(_write(user, "shared-session", f"secret of {user!r}"))
    by_user: dict[str, list[str]] = {}
    for event in fake.events():
        by_user.setdefault(event["userId"], []).append(event["content"])
    assert by_user == {"TenantX": ["secret of 'TenantX'"], "tenantx": ["secret of 'tenantx'"]}
    # every statement of a write carries exactly the writer's id, and sessions are keyed by user
    for commit, user in zip(fake.commits, ["TenantX", "tenantx"], strict=True):
        assert {s["parameters"]["userId"] for s in commit["statements"]} == {user}
    assert "Session {userId: $userId, id: $sessionId}" in STATEMENTS[0]


def test_purge_user_deletes_the_users_graph_in_one_transaction(fake):
    backend = from_env(_env(fake.url))
    backend.purge_user("alice")
    (request,) = fake.requests
    assert [s["statement"] for s in request.body["statements"]] == list(PURGE_STATEMENTS)
    assert all("DETACH DELETE" in s and "$userId" in s for s in PURGE_STATEMENTS)


def test_unavailable_backend_refuses_to_write(fake):
    backend = from_env({**_env(fake.url), "MEMORY_NEO4J_ENABLED": "0"})
    with pytest.raises(BackendError, match="disabled"):
        backend.write(_write())
    assert fake.requests == []


# ---- failure modes: the facade fails open within the deadline -----------------------------------
def _degraded_write(env: dict[str, str], caplog) -> dict:
    """One write through the failing facade: degraded, the adapter still listed, no password anywhere."""
    facade = facade_from_env({**env, "MEMORY_BACKEND_TIMEOUT_MS": str(ERROR_DEADLINE_MS)})
    try:
        with caplog.at_level(logging.DEBUG):
            payload = facade.write(_write())
        status = facade.status()
    finally:
        facade.close()
    assert PASSWORD not in json.dumps(status) and PASSWORD not in json.dumps(payload)
    assert PASSWORD not in caplog.text
    row = next(b for b in status["backends"] if b["name"] == "neo4j")
    assert row["available"] is True and row["supports"]["write"] is True
    return payload


def test_facade_writes_through_neo4j_and_resolve_stays_on_legacy(facade_env, fake):
    facade = facade_from_env(facade_env)
    try:
        written = facade.write(_write())
        resolved = facade.resolve({"userId": "alice", "query": "tea"})
        status = facade.status()
    finally:
        facade.close()
    assert written["ok"] is True and written["source"] == "neo4j" and written["events"] == 2
    assert resolved["ok"] is True and resolved["source"] == "legacy-conversation-memory"
    assert status["selectedBackends"]["write"] == "neo4j"
    assert status["selectedBackends"]["resolve"] == "legacy-conversation-memory"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("fault", [Fault(status=400), Fault(status=503), Fault(drop=True)])
def test_a_failed_write_commits_nothing(facade_env, fake, caplog, fault):
    """How each fault degrades (and that a write is sent once) is the conformance suite's; here: the
    transactional endpoint committed nothing."""
    fake.fault = fault
    payload = _degraded_write(facade_env, caplog)
    assert payload["ok"] is False and payload["source"] == "neo4j"
    assert fake.commits == []


def test_errors_in_a_200_are_a_failed_write(facade_env, fake, caplog):
    fake.statement_error = ("Neo.ClientError.Schema.ConstraintValidationFailed", "Node already exists\nmore")
    payload = _degraded_write(facade_env, caplog)
    assert payload["ok"] is False
    assert (
        "Neo.ClientError.Schema.ConstraintValidationFailed: server said: Node already exists"
        in payload["reason"]
    )
    assert "more" not in payload["reason"] and "rolled back" in payload["reason"]


def test_a_200_without_the_documented_shape_is_a_failed_write(fake):
    fake.routes.insert(0, ("POST", re.compile(r"/db/neo4j/tx/commit\Z"), lambda request: Response(200, [1])))
    backend = from_env(_env(fake.url))
    with pytest.raises(BackendError, match="not a transaction result"):
        backend.write(_write())


def test_wrong_password_is_a_401_without_the_password(facade_env, fake, caplog):
    fake.password = "the-server-wants-another"
    payload = _degraded_write(facade_env, caplog)
    assert payload["ok"] is False and "HTTP 401" in payload["reason"]
    assert "Unauthorized" in payload["reason"]


def test_unknown_database_is_a_404(facade_env, fake, caplog):
    payload = _degraded_write({**facade_env, "MEMORY_NEO4J_DATABASE": "nothere"}, caplog)
    assert (
        payload["ok"] is False and "HTTP 404" in payload["reason"] and "DatabaseNotFound" in payload["reason"]
    )


def test_error_text_from_the_server_never_shows_the_password(fake):
    fake.statement_error = ("Neo.ClientError.General.Echo", f"credentials neo4j:{PASSWORD} were used")
    backend = from_env(_env(fake.url))
    with pytest.raises(BackendError) as info:
        backend.write(_write())
    assert PASSWORD not in str(info.value) and "***" in str(info.value)


# ---- gates and CLI ------------------------------------------------------------------------------
def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:7474"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert not [v for v in report.violations if v.backend == "neo4j"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_password():
    runner = CliRunner()
    missing = runner.invoke(
        main, ["check", "config", "--backend", "neo4j", "--json"], env={"MEMORY_NEO4J_ENABLED": "1"}
    )
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_NEO4J_HTTP_URL", "MEMORY_NEO4J_USER", "MEMORY_NEO4J_PASSWORD"]
    ready = runner.invoke(
        main, ["check", "config", "--backend", "neo4j", "--json"], env=_env("http://127.0.0.1:7474")
    )
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(
        main, ["check", "config", "--backend", "neo4j", "--format", "shell"], env=_env("http://x:7474")
    )
    assert "export MEMORY_NEO4J_PASSWORD='<secret>'" in shell.output
    assert "# export MEMORY_NEO4J_DATABASE=neo4j  # optional" in shell.output
    assert PASSWORD not in ready.output + shell.output


def test_smoke_external_not_configured_failed_and_ok(fake):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "neo4j", "--operation", "write", "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    ok = runner.invoke(main, args, env=_env(fake.url))
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["status"] == "ok" and report["cleanup"] == "purged"
    smoke_user = report["userId"]
    assert {e["userId"] for e in fake.events()} == {smoke_user}
    assert [s["parameters"] for s in fake.commits[-1]["statements"]] == [{"userId": smoke_user}] * 3
    fake.fault = Fault(status=500)
    failed = runner.invoke(main, args, env=_env(fake.url))
    assert failed.exit_code == 1 and "HTTP 500" in failed.output and PASSWORD not in failed.output
    refused = runner.invoke(main, args, env=_env(refused_url(), MEMORY_BACKEND_TIMEOUT_MS="300"))
    assert refused.exit_code == 1 and PASSWORD not in refused.output
    with pytest.raises(BackendError):
        Neo4jBackend(None, None, None, unavailable=[("url_missing", "x")]).write(_write())


def test_the_fake_refuses_what_neo4j_refuses(fake):
    """The fake's validation is real: a missing $parameter or an undocumented key is an error in a 200."""
    from memwork.http import JsonHttpClient

    client = JsonHttpClient("neo4j", fake.url, auth=("neo4j", PASSWORD))
    try:
        missing = client.post_json(
            "/db/neo4j/tx/commit", {"statements": [{"statement": "MERGE (u:User {id: $userId})"}]}
        )
        odd = client.post_json("/db/neo4j/tx/commit", {"statements": [{"query": "RETURN 1"}]})
        fine = client.post_json(
            "/db/neo4j/tx/commit",
            {"statements": [{"statement": "RETURN $x AS x", "parameters": {"x": 1}}]},
        )
    finally:
        client.close()
    assert missing["errors"][0]["code"] == "Neo.ClientError.Statement.ParameterMissing"
    assert "userId" in missing["errors"][0]["message"]
    assert odd["errors"][0]["code"] == "Neo.ClientError.Request.InvalidFormat"
    assert fine == {"results": [{"columns": ["x"], "data": []}], "errors": []}
    assert len(fake.commits) == 1
