"""The Weaviate adapter and source against the fake Weaviate (tests/fakes/weaviate.py, a real HTTP server).

Dormant unless configured (one reason per missing piece, the embedding module imported last), the
near-vector GraphQL query (names checked, values JSON-encoded, the user's ``where`` always there),
score mapping, GraphQL errors in a 200, tenant isolation against look-alike users, every failure mode
failing open within the deadline, the API key never shown, the gates and CLI, and the cursor source.
"""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
from click.testing import CliRunner
from fakes.server import Fault, Response, refused_url, serve
from fakes.weaviate import LOOKALIKES, FakeWeaviate, _Parser

from memwork.backends.base import supports_of
from memwork.backends.weaviate import (
    DECLARATION,
    WeaviateBackend,
    from_env,
    near_vector_query,
    score_of,
    source_from_env,
)
from memwork.cli import main
from memwork.embed import HashEmbedder
from memwork.errors import BackendError, UsageError
from memwork.facade.facade import facade_from_env
from memwork.migrate.source import iter_pages
from memwork.pgvector.local_hash import write_module
from memwork.plugins import open_source

API_KEY = "wv-key-Zq8!never-shown"
DIM = 8
CALL_DEADLINE_MS = 1500  #: every facade call here: its own reason, not a loaded machine, decides


@pytest.fixture(scope="module")
def module_file(tmp_path_factory):
    """An embedding module (the deterministic hash embedding) of the fake's dimension."""
    return write_module(DIM, tmp_path_factory.mktemp("embed"))


@pytest.fixture(scope="module")
def served():
    service = FakeWeaviate(dimension=DIM)
    service.seed()  # 10 users x 95 + 3 look-alikes x 95 = 1,235 objects
    with serve(service) as url:
        service.url = url
        yield service


@pytest.fixture
def fake(served):
    served.reset()
    yield served
    served.reset()


def _env(url: str, module: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_WEAVIATE_ENABLED": "1",
        "MEMORY_WEAVIATE_URL": url,
        "MEMORY_WEAVIATE_EMBEDDING_MODULE": module,
        **extra,
    }


@pytest.fixture
def facade_env(fake, module_file):
    return _env(
        fake.url, module_file, MEMORY_BACKEND="weaviate", MEMORY_BACKEND_TIMEOUT_MS=str(CALL_DEADLINE_MS)
    )


def _sent_query(fake: FakeWeaviate) -> dict:
    """The Get class field of the last GraphQL request, parsed the way the fake parses it."""
    graphql = [r for r in fake.requests if r.path == "/v1/graphql"]
    return _Parser(graphql[-1].body["query"]).document()[0]["fields"][0]


# ---- dormant unless configured ------------------------------------------------------------------
def test_empty_env_is_dormant_with_every_missing_piece_named():
    backend = from_env({})
    assert backend.availability().reason == (
        "disabled (MEMORY_WEAVIATE_ENABLED is not 1); url_missing (MEMORY_WEAVIATE_URL is not set); "
        "embedding_module_not_configured (MEMORY_WEAVIATE_EMBEDDING_MODULE is not set)"
    )
    assert supports_of(backend) == {"resolve": True, "write": False, "compact": False}
    assert DECLARATION.variable("MEMORY_WEAVIATE_API_KEY").secret
    assert DECLARATION.variable("MEMORY_WEAVIATE_COLLECTION").default == "MemindMemory"


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("MEMORY_WEAVIATE_ENABLED", "disabled"),
        ("MEMORY_WEAVIATE_URL", "url_missing"),
        ("MEMORY_WEAVIATE_EMBEDDING_MODULE", "embedding_module_not_configured"),
    ],
)
def test_each_missing_piece_is_its_own_reason(missing, code, module_file):
    env = {k: v for k, v in _env("http://127.0.0.1:8080", module_file).items() if k != missing}
    reason = from_env(env).availability().reason
    assert reason is not None and reason.startswith(f"{code} (") and ";" not in reason


def test_embedding_module_is_imported_only_when_everything_else_is_configured(tmp_path):
    marker = tmp_path / "imported"
    module = tmp_path / "noisy_embed.py"
    module.write_text(
        f"open({str(marker)!r}, 'a').write('x')\ndef embed_query(query, input=None):\n    return [1.0] * 8\n"
    )
    from_env(
        {"MEMORY_WEAVIATE_URL": "http://127.0.0.1:8080", "MEMORY_WEAVIATE_EMBEDDING_MODULE": str(module)}
    )
    from_env({"MEMORY_WEAVIATE_ENABLED": "1", "MEMORY_WEAVIATE_EMBEDDING_MODULE": str(module)})
    assert not marker.exists()
    backend = from_env(_env("http://127.0.0.1:8080", str(module)))
    assert backend.availability().available and marker.read_text() == "x"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("MEMORY_WEAVIATE_COLLECTION", "Memind) { x", "invalid_setting (MEMORY_WEAVIATE_COLLECTION="),
        ("MEMORY_WEAVIATE_COLLECTION", "memindMemory", "invalid_setting (MEMORY_WEAVIATE_COLLECTION="),
        ("MEMORY_WEAVIATE_USER_PROPERTY", "user-id", "invalid_setting (MEMORY_WEAVIATE_USER_PROPERTY="),
        ("MEMORY_WEAVIATE_CONTENT_PROPERTY", "a b", "invalid_setting (MEMORY_WEAVIATE_CONTENT_PROPERTY="),
        ("MEMORY_WEAVIATE_DISTANCE", "fuzzy", "invalid_setting (MEMORY_WEAVIATE_DISTANCE='fuzzy'"),
        ("MEMORY_WEAVIATE_EMBEDDING_MODULE", "./nope.py", "embedding_module_invalid"),
        ("MEMORY_WEAVIATE_URL", "ftp://u:pw-SEKRIT@host", "url_invalid (MEMORY_WEAVIATE_URL="),
        ("MEMORY_WEAVIATE_URL", "weaviate:8080", "url_invalid"),
    ],
)
def test_bad_values_make_it_unavailable_naming_them(key, value, expected, module_file):
    reason = from_env({**_env("http://127.0.0.1:8080", module_file), key: value}).availability().reason
    assert reason is not None and reason.startswith(expected), reason
    assert "SEKRIT" not in reason


def test_configured_is_available_without_building_a_client(module_file):
    backend = from_env(_env(refused_url(), module_file))  # nothing listens there
    assert backend.availability().available
    assert backend.client is not None and backend.client._client is None  # no httpx client yet


# ---- the query ----------------------------------------------------------------------------------
def test_resolve_sends_the_documented_near_vector_query_with_the_users_where(fake, module_file):
    backend = from_env(_env(fake.url, module_file))
    result = backend.resolve({"userId": "user-03", "embedding": [1, 0, 0, 0, 0, 0, 0, 0], "limit": 7})
    backend.close()
    sent = _sent_query(fake)
    assert sent["name"] == "MemindMemory"
    assert sent["args"]["nearVector"] == {"vector": [1.0, 0, 0, 0, 0, 0, 0, 0]}
    assert sent["args"]["where"] == {
        "path": ["userId"],
        "operator": ("enum", "Equal"),
        "valueText": "user-03",
    }
    assert sent["args"]["limit"] == 7
    assert [f["name"] for f in sent["fields"]] == ["content", "userId", "_additional"]
    assert len(result["semanticMemories"]) == 7
    assert fake.requests[-1].method == "POST" and fake.requests[-1].path == "/v1/graphql"


@pytest.mark.parametrize(
    "user",
    ['al"ice', "bob\\", 'x"}) { Get { MemindMemory { content } } } #', "名前\n\t", "a\u2028b", "😀 emoji"],
)
def test_user_ids_are_json_encoded_values_never_query_text(fake, user, module_file):
    backend = from_env(_env(fake.url, module_file))
    result = backend.resolve({"userId": user, "embedding": [0.5] * DIM})
    backend.close()
    sent = _sent_query(fake)
    assert sent["args"]["where"]["valueText"] == user  # the fake's parser read back exactly the value
    assert len(_Parser(fake.requests[-1].body["query"]).document()) == 1  # nothing injected
    assert all(m["userId"] == user for m in result["semanticMemories"])


def test_non_ascii_stays_literal_and_controls_are_escaped():
    query = near_vector_query("MemindMemory", [1.0], '😀 名前\n"x', 5)
    assert 'valueText: "😀 名前\\n\\"x"' in query  # no surrogate-pair escapes, a GraphQL-legal string
    assert "\n" not in query  # no raw newline inside the string literal


def test_names_are_checked_before_any_query_is_built():
    with pytest.raises(UsageError, match="MEMORY_WEAVIATE_COLLECTION"):
        near_vector_query("Memind(x", [1.0], "alice", 5)
    with pytest.raises(UsageError, match="MEMORY_WEAVIATE_USER_PROPERTY"):
        near_vector_query("MemindMemory", [1.0], "alice", 5, user_property='userId") {')
    with pytest.raises(ValueError):  # NaN is not JSON: refused, never sent
        near_vector_query("MemindMemory", [math.nan], "alice", 5)


def test_nearest_first_with_cosine_scores_of_the_users_objects_only(fake, module_file):
    backend = from_env(_env(fake.url, module_file))
    query = [0.3, -0.2, 0.9, 0.0, 0.1, 0.0, -0.4, 0.2]
    memories = backend.resolve({"userId": "user-05", "embedding": query, "limit": 200})["semanticMemories"]
    backend.close()
    mine = {oid: o for oid, o in fake.objects.items() if o["properties"]["userId"] == "user-05"}
    assert {m["id"] for m in memories} == set(mine)  # all 95, and only them
    norm_q = math.sqrt(sum(x * x for x in query))
    for memory in memories:
        stored = mine[memory["id"]]["vector"]
        cosine = (
            sum(a * b for a, b in zip(query, stored, strict=True))
            / norm_q
            / math.sqrt(sum(b * b for b in stored))
        )
        assert memory["score"] == pytest.approx(cosine, abs=1e-9)
        assert memory["distance"] == pytest.approx(1 - cosine, abs=1e-9)
        assert memory["content"] == mine[memory["id"]]["properties"]["content"]
        assert memory["source"] == "weaviate" and memory["createdAt"].startswith("2023-")
    assert [m["score"] for m in memories] == sorted((m["score"] for m in memories), reverse=True)


def test_the_query_text_goes_through_the_embedding_module(fake, module_file):
    backend = from_env(_env(fake.url, module_file, MEMORY_WEAVIATE_EMBEDDING_MODEL="hash-8"))
    memories = backend.resolve({"userId": "user-02", "query": "likes jazz", "limit": 3})["semanticMemories"]
    backend.close()
    expected = HashEmbedder(DIM).embed_one("likes jazz").tolist()
    assert _sent_query(fake)["args"]["nearVector"]["vector"] == pytest.approx(expected)
    assert len(memories) == 3 and {m["embeddingModel"] for m in memories} == {"hash-8"}


def test_score_mapping_per_metric():
    assert score_of(0.25, "cosine") == 0.75
    assert score_of(-3.0, "dot") == 3.0
    assert score_of(1.0, "l2-squared") == 0.5


def test_a_wrong_dimension_is_a_graphql_error_in_a_200(fake, module_file):
    backend = from_env(_env(fake.url, module_file))
    with pytest.raises(BackendError, match=r"graphql error.*vector lengths don.t match"):
        backend.resolve({"userId": "user-01", "embedding": [1.0, 0.0, 0.0]})
    backend.close()


def test_an_unknown_class_is_a_failure_not_an_empty_answer(facade_env, fake):
    facade = facade_from_env({**facade_env, "MEMORY_WEAVIATE_COLLECTION": "OtherMemory"})
    try:
        payload = facade.resolve({"userId": "user-01", "query": "tea"})
    finally:
        facade.close()
    assert payload["ok"] is False and payload["source"] == "weaviate"
    assert "graphql error" in payload["reason"] and 'Cannot query field "OtherMemory"' in payload["reason"]


def test_unavailable_backend_refuses_to_resolve():
    with pytest.raises(BackendError, match="url_missing"):
        WeaviateBackend(None).resolve({"userId": "alice", "embedding": [1.0]})


# ---- tenant isolation -----------------------------------------------------------------------------
@pytest.mark.parametrize("user", ["TenantX", "tenantx"])
def test_look_alike_users_never_see_each_other_through_the_facade(facade_env, fake, user, caplog):
    facade = facade_from_env(facade_env)
    try:
        payload = facade.resolve({"userId": user, "query": "likes coffee", "limit": 40})
    finally:
        facade.close()
    assert payload["ok"] is True and payload["source"] == "weaviate"
    assert payload["semanticMemories"] and {m["userId"] for m in payload["semanticMemories"]} == {user}
    # word tokenization: the where filter itself let every look-alike through; the guard dropped them
    assert fake.returned_users == set(LOOKALIKES)
    assert "of another user; dropped" in caplog.text


def test_a_trailing_space_user_is_its_own_tenant(fake, module_file):
    backend = from_env(_env(fake.url, module_file))
    memories = backend.resolve({"userId": "tenantx ", "query": "likes tea", "limit": 40})["semanticMemories"]
    backend.close()
    assert memories and {m["userId"] for m in memories} == {"tenantx "}


def test_field_tokenization_separates_look_alikes_in_the_filter_itself(fake, module_file):
    fake.reset(tokenization="field")
    backend = from_env(_env(fake.url, module_file))
    memories = backend.resolve({"userId": "tenantx", "query": "likes tea", "limit": 40})["semanticMemories"]
    backend.close()
    assert fake.returned_users == {"tenantx"} and {m["userId"] for m in memories} == {"tenantx"}


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
    assert payload["semanticMemories"] == [] and payload["policy"] is None  # the degraded payload
    row = next(b for b in status["backends"] if b["name"] == "weaviate")
    assert row["available"] is True and row["supports"]["resolve"] is True
    assert API_KEY not in json.dumps(status) + json.dumps(payload) + caplog.text
    return payload


def test_the_api_key_is_a_bearer_header_and_never_shown(facade_env, fake, caplog):
    fake.reset(api_key=API_KEY)
    ok_env = {**facade_env, "MEMORY_WEAVIATE_API_KEY": API_KEY}
    facade = facade_from_env(ok_env)
    try:
        assert facade.resolve({"userId": "user-01", "query": "tea"})["ok"] is True
    finally:
        facade.close()
    assert fake.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"
    fake.reset(api_key="the-server-wants-another")
    payload = _degraded(ok_env, caplog)
    assert (
        payload["ok"] is False and "HTTP 401" in payload["reason"] and "anonymous access" in payload["reason"]
    )


def test_a_graphql_error_echoing_the_api_key_never_shows_it(fake, module_file):
    echo = (
        "POST",
        re.compile(r"/v1/graphql\Z"),
        lambda request: Response(200, {"errors": [{"message": f"token {API_KEY} rejected"}]}),
    )
    fake.routes.insert(0, echo)
    try:
        backend = from_env({**_env(fake.url, module_file), "MEMORY_WEAVIATE_API_KEY": API_KEY})
        with pytest.raises(BackendError, match="graphql error") as info:
            backend.resolve({"userId": "user-01", "embedding": [1.0] * DIM})
        backend.close()
    finally:
        fake.routes.remove(echo)
    assert API_KEY not in str(info.value) and "***" in str(info.value)


def test_the_declaration_keeps_the_seed_variables():
    from seed_variables import SEED_REQUIRED, SEED_VARIABLES

    names = [v.name for v in DECLARATION.variables]
    assert names[: len(SEED_VARIABLES["weaviate"])] == SEED_VARIABLES["weaviate"]
    assert [v.name for v in DECLARATION.variables if v.required] == SEED_REQUIRED["weaviate"]
    assert DECLARATION.flag == "MEMORY_WEAVIATE_ENABLED" and DECLARATION.capabilities == ("resolve",)


# ---- gates and CLI --------------------------------------------------------------------------------
def test_contract_gate_passes(module_file):
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("http://127.0.0.1:8080", module_file))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert "weaviate adapter" in report.checked
    assert not [v for v in report.violations if v.backend == "weaviate"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_api_key(module_file):
    runner = CliRunner()
    args = ["check", "config", "--backend", "weaviate"]
    missing = runner.invoke(main, [*args, "--json"], env={"MEMORY_WEAVIATE_ENABLED": "1"})
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_WEAVIATE_URL", "MEMORY_WEAVIATE_EMBEDDING_MODULE"]
    env = {**_env("http://127.0.0.1:8080", module_file), "MEMORY_WEAVIATE_API_KEY": API_KEY}
    ready = runner.invoke(main, [*args, "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(main, [*args, "--format", "shell"], env=env)
    assert "export MEMORY_WEAVIATE_API_KEY='<secret>'" in shell.output
    assert "MEMORY_WEAVIATE_COLLECTION=MemindMemory" in shell.output
    assert API_KEY not in ready.output + shell.output


def test_smoke_external_not_configured_failed_and_ok(fake, module_file):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "weaviate", "--operation", "resolve", "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    fake.reset(api_key=API_KEY)
    env = {**_env(fake.url, module_file), "MEMORY_WEAVIATE_API_KEY": API_KEY}
    ok = runner.invoke(main, args, env=env)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["status"] == "ok"
    assert _sent_query(fake)["args"]["where"]["valueText"].startswith("memory-v2-smoke-")
    fake.fault = Fault(status=500)
    failed = runner.invoke(main, args, env=env)
    assert failed.exit_code == 1 and "HTTP 500" in failed.output and API_KEY not in failed.output
    refused = runner.invoke(main, args, env={**env, "MEMORY_WEAVIATE_URL": refused_url()})
    assert refused.exit_code == 1 and "ConnectError" in refused.output and API_KEY not in refused.output


# ---- the migration source -------------------------------------------------------------------------
def test_source_pages_through_every_object_with_the_cursor(fake):
    source = open_source("weaviate", {"MEMORY_WEAVIATE_URL": fake.url})  # no flag needed to read
    try:
        pages = list(iter_pages(source, None, 200))
    finally:
        source.close()
    records = [r for page, _ in pages for r in page.records]
    assert len(pages) == 7 and [len(p.records) for p, _ in pages] == [200] * 6 + [35]
    assert [r.id for r in records] == sorted(fake.objects)  # uuid order, each once
    listing = [r for r in fake.requests if r.path == "/v1/objects"]
    assert listing[0].arg("after") is None and listing[0].arg("class") == "MemindMemory"
    assert [r.arg("after") for r in listing[1:]] == [p.records[-1].id for p, _ in pages[:-1]]
    assert all(r.arg("include") == "vector" and r.arg("limit") == "200" for r in listing)
    users = {r.user_id for r in records}
    assert len(users) == 13 and set(LOOKALIKES) <= users
    one = records[0]
    stored = fake.objects[one.id]
    assert one.vector == stored["vector"] and one.model == "hash-8" and len(one.vector) == DIM
    assert one.content == stored["properties"]["content"] and one.user_id == stored["properties"]["userId"]
    assert one.created_at.timestamp() * 1000 == stored["creationTimeUnix"]
    assert one.updated_at.timestamp() * 1000 == stored["lastUpdateTimeUnix"]
    assert one.metadata["topic"] == stored["properties"]["topic"] and one.session_id.startswith("s-")


def test_source_a_full_last_page_ends_on_the_empty_one():
    fake = FakeWeaviate(dimension=DIM)
    for n in range(20):
        fake.add(f"user-{n % 4}", f"memory {n}")
    with serve(fake) as url:
        source = source_from_env({"MEMORY_WEAVIATE_URL": url, "MEMORY_WEAVIATE_EMBEDDING_MODEL": "hash-8"})
        pages = list(iter_pages(source, None, 10))
    assert [len(p.records) for p, _ in pages] == [10, 10, 0]
    assert {r.model for p, _ in pages for r in p.records} == {"hash-8"}  # no property: the variable


def test_source_key_and_variables(fake):
    source = source_from_env({"MEMORY_WEAVIATE_URL": "http://admin:pw-SEKRIT@weaviate:8080/"})
    assert "SEKRIT" not in source.key and source.key.startswith("weaviate:http://")
    assert source.key.endswith("weaviate:8080/MemindMemory")
    with pytest.raises(UsageError, match="MEMORY_WEAVIATE_URL"):
        source_from_env({})
    with pytest.raises(UsageError, match="MEMORY_WEAVIATE_COLLECTION"):
        source_from_env({"MEMORY_WEAVIATE_URL": fake.url, "MEMORY_WEAVIATE_COLLECTION": "x y"})


def test_source_failures_are_errors_never_a_short_listing(fake):
    source = source_from_env({"MEMORY_WEAVIATE_URL": fake.url, "MEMORY_WEAVIATE_API_KEY": API_KEY})
    fake.fault = Fault(status=500)
    with pytest.raises(BackendError, match="HTTP 500") as info:
        source.read_page(None, 100)
    assert API_KEY not in str(info.value)
    fake.fault = Fault(malformed=True)
    with pytest.raises(BackendError, match="malformed JSON"):
        source.read_page(None, 100)
    fake.fault = None
    bad = FakeWeaviate(dimension=DIM)
    bad.add("alice", "no user below")
    next(iter(bad.objects.values()))["properties"].pop("userId")
    with serve(bad) as url, pytest.raises(BackendError, match="has no 'userId' property"):
        source_from_env({"MEMORY_WEAVIATE_URL": url}).read_page(None, 10)
    source.close()
