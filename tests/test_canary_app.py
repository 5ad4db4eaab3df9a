"""The app canary against a real ``memwork serve`` (uvicorn in a thread) over a real legacy store."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from memwork.cli import main
from memwork.db import get_engine
from memwork.legacy.schema import init_schema, memory_items, messages
from memwork.rollout.app_canary import CANARY_USER_PREFIX, run_app_canary

TOKEN = "canary-test-token-4f9a1c"


@pytest.fixture
def legacy_url(sqlite_url):
    init_schema(sqlite_url, apply=True)
    return sqlite_url


def service_env(legacy_url: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_ENABLED": "1",
        "MEMORY_BACKEND": "legacy",
        "MEMORY_LEGACY_DATABASE_URL": legacy_url,
        "MEMWORK_API_TOKEN": TOKEN,
        **extra,
    }


@pytest.fixture
def service(legacy_url):
    from memwork.service.app import create_app, running

    with running(create_app(service_env(legacy_url))) as base_url:
        yield base_url


def canary_rows(legacy_url: str) -> int:
    """Rows of any canary user left in the legacy tables."""
    total = 0
    with get_engine(legacy_url).connect() as conn:
        for table in (messages, memory_items):
            found = conn.execute(
                select(func.count()).select_from(table).where(table.c.user_id.like(CANARY_USER_PREFIX + "%"))
            )
            total += int(found.scalar() or 0)
    return total


def test_every_expectation_met_round_trip_then_the_user_is_gone(service, legacy_url):
    report = run_app_canary(
        service,
        token=TOKEN,
        require_enabled=True,
        require_target_healthy=True,
        expect_backend="legacy",
        expect_selected_backend="legacy-conversation-memory",
    )
    assert report.ok, report.failures
    names = [s.name for s in report.steps]
    assert names == [
        "status",
        "enabled",
        "backend",
        "selectedBackend",
        "targetHealthy",
        "write",
        "compact",
        "resolve",
        "tenant",
        "roundTrip",
        "forget",
        "resolve after forget",
        "forgotten",
    ]
    assert report.userId.startswith(CANARY_USER_PREFIX)
    assert canary_rows(legacy_url) == 0  # forgotten in the store itself, not only in the answer


def test_cli_ok_with_the_token_from_the_environment(service):
    out = CliRunner().invoke(
        main,
        ["canary", "app", "--base-url", service, "--require-enabled", "--expect-backend", "legacy", "--json"],
        env={"MEMWORK_API_TOKEN": TOKEN},
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["ok"] is True and data["failures"] == []
    assert TOKEN not in out.output


def test_every_failed_expectation_is_listed(service):
    out = CliRunner().invoke(
        main,
        [
            "canary",
            "app",
            "--base-url",
            service,
            "--token",
            TOKEN,
            "--require-target-healthy",
            "--expect-backend",
            "pgvector",
            "--expect-selected-backend",
            "pgvector",
        ],
    )
    assert out.exit_code == 1
    # all three, not only the first; the round trip still ran and passed
    for line in (
        "FAIL backend: configured backend 'legacy', expected 'pgvector'",
        "FAIL selectedBackend: selected backend 'legacy-conversation-memory', expected 'pgvector'",
        "FAIL targetHealthy: pgvector: available=False",
    ):
        assert line in out.output, out.output
    assert "ok   roundTrip: written memory resolved" in out.output
    error = out.output.strip().splitlines()[-1]
    assert error.startswith("Error: app canary failed: backend:") and "selectedBackend:" in error
    assert "targetHealthy:" in error


def test_memory_disabled_fails_require_enabled(legacy_url):
    from memwork.service.app import create_app, running

    with running(create_app(service_env(legacy_url, MEMORY_ENABLED="0"))) as base_url:
        report = run_app_canary(base_url, token=TOKEN, require_enabled=True)
    assert not report.ok
    assert report.failures[0] == "enabled: enabled=False"


def test_wrong_token_is_a_failed_status_without_the_token(service):
    out = CliRunner().invoke(main, ["canary", "app", "--base-url", service, "--token", "wrong-token-123456"])
    assert out.exit_code == 1
    assert "FAIL status:" in out.output and "401" in out.output
    assert "wrong-token-123456" not in out.output and TOKEN not in out.output


def test_unreachable_service_is_exit_1_with_the_reason_and_no_traceback():
    from fakes.server import refused_url

    url = refused_url()
    out = CliRunner().invoke(main, ["canary", "app", "--base-url", url, "--token", "sekrit-token-99"])
    assert out.exit_code == 1
    assert "FAIL status:" in out.output and "ConnectError" in out.output
    assert "Traceback" not in out.output and "sekrit-token-99" not in out.output


def test_a_base_url_that_is_not_http_is_a_usage_error():
    out = CliRunner().invoke(main, ["canary", "app", "--base-url", "ftp://x"])
    assert out.exit_code == 2 and "base_url" in out.output


class BrokenService:
    """A service that answers its status, then breaks the round trip in the ways production does."""

    @staticmethod
    def build():
        from fakes.server import FakeService, Response

        fake = FakeService()
        status = {
            "memory": {
                "enabled": True,
                "backend": "legacy",
                "selectedBackend": "legacy-conversation-memory",
                "selectedBackends": {"write": "legacy-conversation-memory"},
                "backends": [],
            }
        }
        fake.route("GET", "/api/runtime/status", lambda r: Response(200, status))
        fake.route(
            "POST", "/user-memory/v1/remember-recent", lambda r: Response(503, {"error": "overloaded"})
        )
        fake.route("POST", "/user-memory/v1/sync", lambda r: Response(200, raw=b'{"ok": tr'))

        def resolve(request):
            # a look-alike of the canary user (trailing space) is another user
            me = request.body["userId"]
            item = {"id": "m1", "userId": me + " ", "content": "someone else's"}
            return Response(200, {"ok": True, "source": "legacy-conversation-memory", "memories": [item]})

        fake.route("POST", "/user-memory/v1/resolve", resolve)
        fake.route("POST", "/user-memory/v1/forget", lambda r: Response(200, {"ok": True}))
        return fake


def test_a_broken_round_trip_lists_each_failure_and_a_look_alike_user_is_another_user():
    from fakes.server import serve

    fake = BrokenService.build()
    with serve(fake) as base_url:
        report = run_app_canary(base_url, token=TOKEN, expect_backend="legacy")
    steps = {s.name: s for s in report.steps}
    assert steps["backend"].ok and steps["forget"].ok
    assert not steps["write"].ok and "HTTP 503" in steps["write"].detail
    assert not steps["compact"].ok and "malformed JSON" in steps["compact"].detail
    assert not steps["tenant"].ok and f"{report.userId} " in steps["tenant"].detail
    assert [f.split(":", 1)[0] for f in report.failures] == ["write", "compact", "tenant", "forgotten"]
    # the writes were sent once each (never retried: not idempotent), with the bearer token
    posts = [r for r in fake.requests if r.method == "POST"]
    assert [r.path.rsplit("/", 1)[1] for r in posts].count("remember-recent") == 1
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in fake.requests)


def test_a_failed_purge_names_the_backend_and_its_error(legacy_url):
    """F-17: ``/forget`` answers ``ok: false`` with ``purged: {backend: {"error": ...}}`` when a backend
    cannot purge (here Mem0 unreachable); the step says which backend failed and why, never ``None``."""
    from fakes.server import refused_url

    from memwork.service.app import create_app, running

    mem0 = {
        "MEMORY_MEM0_ENABLED": "1",
        "MEMORY_MEM0_API_KEY": "m0-key-3c1d",
        "MEMORY_MEM0_BASE_URL": refused_url(),
    }
    with running(create_app(service_env(legacy_url, **mem0))) as base_url:
        report = run_app_canary(base_url, token=TOKEN)
        out = CliRunner().invoke(main, ["canary", "app", "--base-url", base_url, "--token", TOKEN])
    forget = next(s for s in report.steps if s.name == "forget")
    assert not forget.ok
    assert forget.detail.startswith("purge failed on mem0: ") and "ConnectError" in forget.detail
    assert "None" not in forget.detail
    assert out.exit_code == 1 and "FAIL forget: purge failed on mem0: " in out.output
    assert "m0-key-3c1d" not in out.output
    assert canary_rows(legacy_url) == 0  # legacy purged its part all the same


def test_forget_details_for_every_answer_shape():
    from memwork.rollout.app_canary import forget_detail

    assert forget_detail({"ok": True, "purged": {"legacy-conversation-memory": {"messages": 2}}}) == (
        "canary user removed (legacy-conversation-memory)"
    )
    failed = {"ok": False, "purged": {"mem0": {"error": {"code": "timeout", "reason": "no answer in 2 s"}}}}
    assert forget_detail(failed) == "purge failed on mem0: timeout: no answer in 2 s"
    assert (
        forget_detail({"ok": True, "skipped": True, "reason": "memory disabled"})
        == "skipped: memory disabled"
    )
    assert forget_detail({"ok": False}) == "forget answered ok=False"
    assert forget_detail({"ok": "true"}) == "forget answered ok='true'"  # a string is not true
    assert forget_detail([]) == "answer is not a JSON object: list"


def test_cross_user_probes_state_the_upper_bound_on_the_leak_rate(service, legacy_url):
    from memwork.rollout.app_canary import leak_upper_bound, probes_needed, run_leak_probes

    probes = run_leak_probes(service, 40, token=TOKEN, max_leak_rate=0.001)
    assert probes.answered == 40 and probes.leaks == 0 and probes.errors == 0
    # every answer held the asker's own planted memory: each probe is evidence
    assert probes.informative == 40 and probes.uninformative == 0 and probes.pairs == 20
    assert probes.verdict == "INCONCLUSIVE"  # 0 in 40 bounds the rate at ~7 %, not 0.1 %
    assert "upper bound on the leak rate 7.2" in probes.sentence() and "about 2995" in probes.sentence()
    assert "across 20 distinct user pairs" in probes.sentence()
    assert canary_rows(legacy_url) == 0  # every probe user forgotten
    assert run_leak_probes(service, 40, token=TOKEN, max_leak_rate=0.1).verdict == "GO"
    assert abs(leak_upper_bound(0, 3000) - 3 / 3000) < 2e-5 and probes_needed(0.001) == 2995
    assert leak_upper_bound(1, 3000) > 0.001

    result = CliRunner().invoke(
        main, ["canary", "app", "--base-url", service, "--token", TOKEN, "--probes", "30", "--json"]
    )
    assert result.exit_code == 3, result.output  # too few probes for the required bound: INCONCLUSIVE
    assert json.loads(result.output)["leakProbes"]["probes_needed"] == 2995
    assert json.loads(result.output)["leakProbes"]["max_leak_rate_origin"] == "default"
    bad = CliRunner().invoke(main, ["canary", "app", "--base-url", service, "--probes", "-1"])
    assert bad.exit_code == 2 and "probes=-1" in bad.output
    bad = CliRunner().invoke(main, ["canary", "app", "--base-url", service, "--max-uninformative", "1"])
    assert bad.exit_code == 2 and "max_uninformative=1" in bad.output


def test_a_leak_is_an_item_of_anyone_but_the_asker():
    from memwork.rollout.app_canary import LeakProbes, leaked

    answer = {"ok": True, "memories": [{"userId": "a", "content": "mine"}, {"userId": "b", "content": "x"}],
              "semanticMemories": [{"content": "code word cobalt-1"}]}  # fmt: skip
    assert leaked(answer, "a", "cobalt-1") == ["(no userId)", "b"]
    assert leaked({"memories": [{"userId": "a"}]}, "a", "cobalt-1") == []
    # another probe user's secret is a leak even in an item that claims the asker as its owner
    claimed = {"memories": [{"userId": "a", "content": "my code word is teal-0000beef"}]}
    assert leaked(claimed, "a", "amber-00000001", {"teal-0000beef": "c"}) == ["c"]
    assert LeakProbes(100, answered=100, informative=100, leaks=1).verdict == "NO-GO"


def test_after_the_flip_empty_answers_are_no_evidence(pg_url, legacy_url, tmp_path):
    """The audit's case: MEMORY_BACKEND=pgvector (read-only) answers every probe with nothing -- the
    probe users were written to legacy -- so 40 probes are 40 uninformative answers, never a GO."""
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.rollout.app_canary import run_leak_probes
    from memwork.service.app import create_app, running

    ensure_schema(pg_url, "memory_embeddings", 8)
    env = service_env(
        legacy_url,
        MEMORY_BACKEND="pgvector",
        MEMORY_VECTOR_ENABLED="1",
        MEMORY_PGVECTOR_DATABASE_URL=pg_url,
        MEMORY_PGVECTOR_EMBEDDING_MODULE=write_module(8, tmp_path),
        MEMORY_BACKEND_TIMEOUT_MS="10000",
    )
    with running(create_app(env)) as base_url:
        probes = run_leak_probes(base_url, 40, token=TOKEN, max_leak_rate=0.1)
        cli = CliRunner().invoke(
            main,
            ["canary", "app", "--base-url", base_url, "--token", TOKEN, "--probes", "40",
             "--max-leak-rate", "0.1", "--json"],
        )  # fmt: skip
    assert probes.answered == 40 and probes.leaks == 0
    assert probes.informative == 0 and probes.uninformative == 40
    assert probes.verdict == "INCONCLUSIVE", probes.sentence()
    assert "none of the asker's own memories" in probes.reason
    assert cli.exit_code == 3, cli.output
    assert json.loads(cli.output)["leakProbes"]["max_leak_rate_origin"] == "set"
    assert canary_rows(legacy_url) == 0


def plugin_service(env: dict[str, str]):
    """``memwork serve``'s app over a facade whose registry holds the shared-index test plugin,
    registered through the ``memwork.backends`` entry-point group as an installed plugin would be."""
    from importlib.metadata import EntryPoint

    from memwork.facade.facade import facade_from_env
    from memwork.plugins import BACKENDS, Registry
    from memwork.service.app import create_app

    plugin = EntryPoint("shared-index", "fakes.leaky:from_env", BACKENDS)
    registry = Registry(env, plugins=[plugin])
    return create_app(env, facade=facade_from_env(env, registry=registry)), registry


def test_probes_use_distinct_seeded_user_pairs_asked_once_each_way_and_purge_them():
    from memwork.rollout.app_canary import probe_pairs, run_leak_probes
    from memwork.service.app import running

    env = {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "shared-index", "MEMWORK_API_TOKEN": TOKEN}
    app, registry = plugin_service(env)
    backend = registry.get("shared-index")
    with running(app) as base_url:
        probes = run_leak_probes(base_url, 41, token=TOKEN, max_leak_rate=0.2, seed=7)
    assert probes.verdict == "GO" and probes.informative == 41 and probes.pairs == 21
    askers = [user for user, _ in backend.asked]
    assert len(askers) == len(set(askers)) == 41  # 41 distinct users, each asked once
    pairs = {u.rsplit("-", 1)[1][:-1] for u in askers}
    assert len(pairs) == 21
    for user, query in backend.asked:  # each asks with its partner's sentence: same topic, other secret
        partner = user[:-1] + ("b" if user.endswith("a") else "a")
        assert partner not in query and "my code word is" in query
    assert backend.rows == []  # every probe user purged through /forget
    same, other = probe_pairs("r", 3, seed=7), probe_pairs("r", 3, seed=8)
    assert same == probe_pairs("r", 3, seed=7) and same != other
    assert all(a.text.split(";")[0] == b.text.split(";")[0] and a.secret != b.secret for a, b in same)


def test_a_leaking_backend_is_no_go_naming_the_leak():
    from memwork.rollout.app_canary import run_leak_probes
    from memwork.service.app import running

    env = {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "shared-index", "MEMWORK_API_TOKEN": TOKEN,
           "MEMORY_SHARED_INDEX_LEAK_EVERY": "5"}  # fmt: skip
    app, registry = plugin_service(env)
    with running(app) as base_url:
        probes = run_leak_probes(base_url, 40, token=TOKEN, concurrency=1)
        cli = CliRunner().invoke(main, ["canary", "app", "--base-url", base_url, "--token", TOKEN,
                                        "--probes", "40", "--max-leak-rate", "0.2"])  # fmt: skip
    assert probes.leaks == 8 and probes.informative == 40  # every 5th resolve searched every user
    assert probes.upper_bound > probes.max_leak_rate and probes.verdict == "NO-GO"
    assert probes.reason.startswith("8 cross-user leak(s): probe 4: memory-v2-canary-")
    assert "other user(s)" in probes.reason
    assert cli.exit_code == 1 and "FAIL isolation: " in cli.output and "cross-user leak(s)" in cli.output
    assert registry.get("shared-index").rows == []


def pg_rows(pg_url: str, table: str, where: str = "true") -> list[tuple]:
    import psycopg

    from memwork.db.embedded import ensure

    with psycopg.connect(ensure(pg_url, create=False).text) as conn:
        return conn.execute(
            f"SELECT user_id, source_memory_id, metadata FROM {table} WHERE {where}"
        ).fetchall()


def insert_other_user(pg_url: str, table: str, user: str, content: str, module: str) -> None:
    """A real user's row (another source's), embedded with the same module: it must survive the probes."""
    import psycopg
    from pgvector.psycopg import register_vector

    from memwork.db.embedded import ensure
    from memwork.embed import QueryModuleEmbedder

    vector = QueryModuleEmbedder(module).embed_query(content)
    with psycopg.connect(ensure(pg_url, create=False).text, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(
            f"INSERT INTO {table} (user_id, content, embedding, embedding_model, source_memory_id) "
            "VALUES (%s, %s, %s, 'hash-8', %s)",
            (user, content, vector, f"{user}-row"),
        )


def test_probes_planted_in_pgvector_bound_the_pgvector_serving_instance(pg_url, legacy_url, tmp_path):
    """Issue 18 after the flip: the probe users planted straight into the table the served backend
    reads (embedded by the service's own query module) make every probe evidence: 0 leaks in 400, GO at
    1 %; exactly the planted rows are removed, another table and a real user's rows are untouched."""
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.rollout.app_canary import PROBE_OWNER, PgvectorPlanter, run_leak_probes
    from memwork.service.app import create_app, running

    module = write_module(8, tmp_path)
    ensure_schema(pg_url, "memory_embeddings", 8)
    ensure_schema(pg_url, "other_embeddings", 8)
    real = "memory-v2-canaryish-real-user"  # near the prefix, not a canary user
    text = "I am responsible for the on-call rotation; my code word is amber-0badc0de."
    insert_other_user(pg_url, "memory_embeddings", real, text, module)
    insert_other_user(pg_url, "other_embeddings", "memory-v2-canary-elsewhere", text, module)
    env = service_env(
        legacy_url,
        MEMORY_BACKEND="pgvector",
        MEMORY_VECTOR_ENABLED="1",
        MEMORY_PGVECTOR_DATABASE_URL=pg_url,
        MEMORY_PGVECTOR_EMBEDDING_MODULE=module,
        MEMORY_BACKEND_TIMEOUT_MS="10000",
    )
    planter = PgvectorPlanter(pg_url, embedding_module=module, env={})
    with running(create_app(env)) as base_url:
        probes = run_leak_probes(base_url, 400, token=TOKEN, max_leak_rate=0.01, planter=planter)
        cli = CliRunner().invoke(
            main,
            ["canary", "app", "--base-url", base_url, "--token", TOKEN, "--probes", "40",
             "--max-leak-rate", "0.1", "--plant-pgvector", pg_url, "--apply", "--json"],
            env={"MEMORY_PGVECTOR_EMBEDDING_MODULE": module},
        )  # fmt: skip
    assert probes.answered == 400 and probes.errors == 0, probes.sentence()
    assert probes.informative == 400 and probes.uninformative == 0 and probes.leaks == 0
    assert probes.upper_bound < 0.01 and probes.verdict == "GO", probes.sentence()
    assert probes.planted == probes.removed == 400 and probes.left == 0 and not probes.cleanup_failed
    assert probes.planted_in.startswith("pgvector ") and "table memory_embeddings model hash_query_8" in (
        probes.planted_in
    )
    assert "planted 400 probe rows in pgvector" in probes.sentence()
    assert cli.exit_code == 0, cli.output
    data = json.loads(cli.output)["leakProbes"]
    assert data["verdict"] == "GO" and data["planted"] == data["removed"] == 40
    assert data["planted_in"] == planter.where and data["cleanup_failed"] is False
    # no canary row left; the real user's row and the other table's row untouched
    assert pg_rows(pg_url, "memory_embeddings", f"user_id LIKE '{CANARY_USER_PREFIX}%'") == []
    assert [r[:2] for r in pg_rows(pg_url, "memory_embeddings")] == [(real, f"{real}-row")]
    assert [r[0] for r in pg_rows(pg_url, "other_embeddings")] == ["memory-v2-canary-elsewhere"]
    assert PROBE_OWNER not in json.dumps([r[2] for r in pg_rows(pg_url, "other_embeddings")])


def test_the_planter_deletes_only_canary_users_rows_it_planted(pg_url, tmp_path):
    """The delete guard: a user without the canary prefix is refused before any SQL runs, and a
    canary user's row another source owns is not deleted either."""
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.rollout.app_canary import PgvectorPlanter, PlantRefused, ProbeUser

    module = write_module(8, tmp_path)
    ensure_schema(pg_url, "memory_embeddings", 8)
    insert_other_user(pg_url, "memory_embeddings", "alice", "alice's memory", module)
    # another source's row under a canary-looking user and the id a probe would use
    insert_other_user(pg_url, "memory_embeddings", "memory-v2-canary-x-p0a", "not ours", module)
    planter = PgvectorPlanter(pg_url, embedding_module=module, env={})
    for users in (["alice"], [CANARY_USER_PREFIX], ["memory-v2-canary-ok", "Memory-v2-canary-x"]):
        with pytest.raises(PlantRefused, match="is not a synthetic memory-v2-canary-"):
            planter.remove(users)
    with pytest.raises(PlantRefused):
        planter.plant([ProbeUser("alice", "text", "amber-00000000")])
    assert planter.remove(["memory-v2-canary-x-p0a"]) == (0, 1)  # its id is not -m0, nor ours
    ours = ProbeUser("memory-v2-canary-y-p0a", "my code word is teal-00000001", "teal-00000001")
    assert planter.plant([ours]) == 1
    assert planter.remove([ours.user, "memory-v2-canary-x-p0a"]) == (1, 1)
    assert sorted(r[0] for r in pg_rows(pg_url, "memory_embeddings")) == ["alice", "memory-v2-canary-x-p0a"]


def test_planting_refuses_a_table_of_another_dimension_before_writing(pg_url, legacy_url, tmp_path):
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema

    ensure_schema(pg_url, "memory_embeddings", 4)
    args = ["canary", "app", "--base-url", "http://127.0.0.1:1", "--probes", "4", "--plant-pgvector", pg_url,
            "--plant-embedding-module", write_module(8, tmp_path)]  # fmt: skip
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2 and "embedding_module=" in out.output and "vector(4)" in out.output, out.output
    assert pg_rows(pg_url, "memory_embeddings") == []
    out = CliRunner().invoke(main, [*args[:4], "--plant-table", "t"])
    assert out.exit_code == 2 and "plant_pgvector" in out.output


def test_planting_without_apply_is_a_dry_run_that_writes_and_calls_nothing(pg_url, tmp_path):
    from fakes.server import refused_url

    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema

    ensure_schema(pg_url, "memory_embeddings", 8)
    out = CliRunner().invoke(
        main,
        ["canary", "app", "--base-url", refused_url(), "--probes", "7", "--plant-pgvector", pg_url,
         "--plant-embedding-module", write_module(8, tmp_path), "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output  # the service (refused) was never called
    plan = json.loads(out.output)
    assert (
        plan["dryRun"] is True and plan["wouldPlant"] == 8 and "table memory_embeddings" in plan["plantedIn"]
    )
    assert "leakProbes" not in plan
    assert pg_rows(pg_url, "memory_embeddings") == []


def test_planted_rows_are_removed_when_every_probe_failed_and_a_mismatch_is_no_go(pg_url, tmp_path):
    from fakes.server import refused_url

    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.rollout.app_canary import LeakProbes, PgvectorPlanter, run_leak_probes

    module = write_module(8, tmp_path)
    ensure_schema(pg_url, "memory_embeddings", 8)
    planter = PgvectorPlanter(pg_url, embedding_module=module, env={})
    probes = run_leak_probes(refused_url(), 10, token=TOKEN, planter=planter)
    assert probes.errors == 10 and probes.planted == probes.removed == 10 and probes.left == 0
    assert probes.verdict == "INCONCLUSIVE"
    assert pg_rows(pg_url, "memory_embeddings") == []
    where = planter.where
    short = LeakProbes(10, answered=10, informative=10, planted_in=where, planted=10, removed=9)
    assert short.verdict == "NO-GO" and short.reason.startswith("cleanup mismatch: planted 10 probe rows")
    assert LeakProbes(10, answered=10, informative=10, max_leak_rate=0.5, planted_in=where, planted=10,
                      removed=10).verdict == "GO"  # fmt: skip
