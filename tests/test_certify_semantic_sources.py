"""The ``preserved`` gate for Weaviate and Letta sources, end to end through the CLI.

``memwork import --from weaviate|letta --apply`` from the protocol-level fakes (real HTTP servers on
loopback), then ``memwork verify --from ...``: PASS with the preserved gate measured (the fake's own
search against the destination's production path, per sampled user: the smallest, the median and the
largest included); the copy's vectors scrambled within two users (every row still equal) -> the
preserved gate FAILS naming them as the worst users. Weaviate is sent a vector (the fake ranks by
cosine, as a class with the cosine distance does); Letta is sent the query's *text* (the fake embeds it
with the agent's model, ``seeded-32``, and ranks by cosine: the rule written in ``tests/fakes/letta.py``),
and the certificate says so. Each source's search keeps the exact-user guard when the service lets
other users through.
"""

from __future__ import annotations

import json
import random

import psycopg
import pytest
from click.testing import CliRunner
from fakes.letta import FakeLetta, SeededEmbedder
from fakes.server import serve
from fakes.weaviate import FakeWeaviate

from memwork.cli import main

#: users of 1, 4, 9, 16 and 40 memories; the look-alikes pass Weaviate's word-tokenized filter of each other
SIZES = {"a-tiny": 1, "b-small": 4, "c-mid": 9, "d-16": 16, "e-big": 40}
LOOK_ALIKES = {"TenantX": 6, "tenantx": 6, "tenantx ": 6}
WORDS = ("coffee", "tea", "hiking", "python", "jazz", "tennis", "sushi", "books", "paris", "chess")
WORDS += ("dark", "mode", "berlin", "cats", "dogs", "blue")
SCRAMBLED = ("e-big", "d-16")
DIM = 32


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{' '.join(rng.sample(WORDS, 3))} {rng.choice(WORDS)} item{i}" for i in range(n)]


def _cli(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code in (0, 1) and result.stdout.startswith("{"), result.output
    return result.exit_code, json.loads(result.stdout)


def _import(name: str, pg_url: str, settings: dict[str, str]) -> dict:
    sets = [f"--set={k}={v}" for k, v in settings.items()]
    code, report = _cli(
        "import", "--from", name, "--to", pg_url, *sets, "--apply", "--create-schema", "--json"
    )
    assert code == 0, report
    return report


def _verify(name: str, pg_url: str, settings: dict[str, str], *extra: str) -> tuple[int, dict]:
    sets = [f"--set={k}={v}" for k, v in settings.items()]
    return _cli(
        "verify", "--from", name, "--to", pg_url, *sets, "--json", "-k", "5", "--leaf", "4",
        "--preserved-users", "12", *extra,
    )  # fmt: skip


def _scramble(pg_url: str, users: tuple[str, ...], table: str = "memory_embeddings") -> None:
    """Swap the vectors of neighbouring rows (by source id) within each of ``users``: every row's
    fields unchanged, the users' nearest neighbours no longer the source's."""
    from memwork.db.embedded import ensure

    with psycopg.connect(ensure(pg_url, create=True).libpq, autocommit=True) as conn:
        conn.execute(
            "WITH r AS (SELECT id, user_id, embedding, row_number() OVER (PARTITION BY user_id "
            f"ORDER BY source_memory_id) AS n FROM {table} WHERE user_id = ANY(%s)) "
            f"UPDATE {table} AS d SET embedding = s.embedding FROM r AS a JOIN r AS s "
            "ON s.user_id = a.user_id AND s.n = CASE WHEN a.n %% 2 = 0 THEN a.n - 1 ELSE a.n + 1 END "
            "WHERE d.id = a.id",
            (list(users),),
        )


def _gate(summary: dict, name: str) -> dict:
    return next(g for g in summary["gates"] if g["name"] == name)


def _assert_drift_named(summary: dict) -> None:
    assert summary["verdict"] == "FAIL"
    assert _gate(summary, "rows")["reasons"] == []  # every row still equal: only retrieval moved
    preserved = _gate(summary, "preserved")
    assert preserved["state"] == "fail" and preserved["observed"] < 1.0
    reason = preserved["reasons"][0]
    assert all(user in reason for user in SCRAMBLED), reason
    worst = [u["user"] for u in summary["preserved"]["worst_users"]]
    assert set(worst[:2]) == set(SCRAMBLED), worst
    failed = {u["user"] for u in summary["preserved"]["users"] if not u["passed"]}
    assert failed == set(SCRAMBLED)
    for user in summary["preserved"]["users"]:
        low, high = user["overlap_ci"]
        assert low <= user["overlap"] <= high


# ---- Weaviate ------------------------------------------------------------------------------------
def _weaviate() -> FakeWeaviate:
    fake = FakeWeaviate(dimension=DIM)  # word tokenization: the look-alikes match each other's filter
    rng = random.Random(7)
    for n, (user, size) in enumerate((SIZES | LOOK_ALIKES).items()):
        for text in _texts(n, size):
            vector = [rng.gauss(0, 1) for _ in range(DIM)]
            fake.add(user, text, vector=vector, embeddingModel="weaviate-test-32")
    return fake


def test_weaviate_copy_passes_the_preserved_gate_then_drift_fails_it_naming_the_users(pg_url):
    fake = _weaviate()
    with serve(fake) as url:
        settings = {"MEMORY_WEAVIATE_URL": url}
        assert _import("weaviate", pg_url, settings)["rowsWritten"] == len(fake.objects)
        fake.requests.clear()
        code, summary = _verify("weaviate", pg_url, settings)
        assert code == 0 and summary["verdict"] == "PASS", summary["reasons"]
        preserved = summary["preserved"]
        assert _gate(summary, "preserved")["state"] == "pass"
        sampled = {u["user"] for u in preserved["users"]}
        assert sampled == set(SIZES) | set(LOOK_ALIKES)  # the smallest, median and largest among them
        assert all(u["overlap"] == 1.0 for u in preserved["users"]) and preserved["source_input"] == "vector"
        assert "sampled passed" in summary["claim"] and "as text" not in summary["claim"]
        searched = [r for r in fake.requests if r.path == "/v1/graphql"]
        assert searched and all("nearVector" in r.body["query"] for r in searched)

        _scramble(pg_url, SCRAMBLED)
        code, summary = _verify("weaviate", pg_url, settings, "--vector-sample", "0")
        assert code == 1
        _assert_drift_named(summary)


def test_weaviate_search_keeps_only_the_exact_user(pg_url):
    from memwork.backends.weaviate import source_from_env

    fake = _weaviate()
    probe = fake.objects[next(i for i, o in fake.objects.items() if o["properties"]["userId"] == "tenantx")]
    own = {i for i, o in fake.objects.items() if o["properties"]["userId"] == "tenantx"}
    with serve(fake) as url:
        source = source_from_env({"MEMORY_WEAVIATE_URL": url})
        try:
            found = source.search("tenantx", probe["vector"], 5)
            assert len(found) == 5 and set(found) <= own and found[0] == probe["id"]
            assert fake.returned_users > {"tenantx"}  # the word filter let the look-alikes through
            fake.misbehave = True  # the service ignores the where filter altogether
            found = source.search("tenantx", probe["vector"], 5)
            assert len(found) == 5 and set(found) <= own
            assert len(fake.returned_users) > 1
        finally:
            source.close()


# ---- Letta ---------------------------------------------------------------------------------------
def _letta() -> FakeLetta:
    fake = FakeLetta(embedder=SeededEmbedder(DIM), pad_to=64)
    for n, (user, size) in enumerate(SIZES.items()):
        for text in _texts(100 + n, size):
            fake.insert(
                f"user: {text}", [f"memwork-user:{user}", f"memwork-session:s-{user}", "memwork-kind:turn"]
            )
    fake.insert("the agent's own note about paris", [])  # no user tag: the agent's, not searchable alone
    return fake


def _letta_env(fake: FakeLetta, url: str) -> dict[str, str]:
    return {
        "MEMORY_LETTA_API_KEY": fake.api_key,
        "MEMORY_LETTA_AGENT_ID": fake.agent_id,
        "MEMORY_LETTA_BASE_URL": url,
    }


def test_letta_copy_is_queried_by_text_passes_then_drift_fails_naming_the_users(pg_url):
    fake = _letta()
    texts = {p["text"] for p in fake.agents[fake.agent_id]}
    with serve(fake) as url:
        settings = _letta_env(fake, url)
        assert _import("letta", pg_url, settings)["rowsWritten"] == len(texts)
        fake.requests.clear()
        code, summary = _verify("letta", pg_url, settings)
        assert code == 0 and summary["verdict"] == "PASS", summary["reasons"]
        preserved = summary["preserved"]
        assert _gate(summary, "preserved")["state"] == "pass"
        assert {u["user"] for u in preserved["users"]} == set(SIZES)
        assert all(u["overlap"] == 1.0 for u in preserved["users"])
        assert preserved["source_input"] == "text"
        assert "each query sent to the source's search as text" in summary["claim"]
        assert any("searches by text" in note for note in preserved["notes"])
        assert any(fake.agent_id in note and "cannot search" in note for note in preserved["notes"])
        searched = [r for r in fake.requests if r.path.endswith("/archival-memory/search")]
        assert searched and all(r.query["query"][0] in texts for r in searched)  # the text, not a vector
        assert all(r.query["tag_match_mode"] == ["all"] for r in searched)

        _scramble(pg_url, SCRAMBLED)
        code, summary = _verify("letta", pg_url, settings, "--vector-sample", "0")
        assert code == 1
        _assert_drift_named(summary)


def test_letta_search_keeps_only_the_exact_user():
    from memwork.backends.letta import source_from_env

    fake = _letta()
    with serve(fake) as url:
        source = source_from_env(_letta_env(fake, url))
        try:
            own = {p["id"] for p in fake.of_user("e-big")}
            fake.misbehave = True  # the service ignores the tag filter: every user's passages ranked
            found = source.search("e-big", "user: coffee tea paris", 5)
            assert found and set(found) <= own
            assert source.search(fake.agent_id, "paris", 5) is None
        finally:
            source.close()


@pytest.mark.parametrize("takes", ["vector", "text"])
def test_a_text_query_reaches_a_text_source_as_text(takes):
    """The gate's own rule, without a server: a text-searching side gets the text, the destination
    the stored vector of the sampled row when it has no model to embed it with."""
    import numpy as np

    from memwork.certify.preserved import Query, Side, _inputs

    seen: list[object] = []
    side = Side(lambda user, q, k: seen.append(q) or [], takes=takes)
    query = Query("u", "hello world", (1.0, 0.0))
    source_input, dest_input = _inputs(query, side, Side(lambda user, q, k: []))  # type: ignore[misc]
    assert (isinstance(source_input, str) and source_input == "hello world") == (takes == "text")
    assert np.allclose(dest_input, [1.0, 0.0])
    assert isinstance(_inputs(Query("u", None, (1.0, 0.0)), side, Side(lambda u, q, k: [])), str) == (
        takes == "text"
    )


# ---- pgvector -> pgvector (a re-embedding) -------------------------------------------------------
def test_pgvector_reembedding_is_verified_against_the_old_tables_search(sqlite_url, pg_url):
    """``memwork import --from pgvector`` copies one table into a new one re-embedded; ``verify --from
    pgvector`` embeds each sampled memory's text by each side's model and queries both tables' own
    search: the same model agrees fully, scrambled vectors fail naming the users, another model is
    measured (each user's overlap in [0, 1], the gate failing exactly when a user is below)."""
    from memwork.db.embedded import ensure
    from memwork.samples.migration import build_migration

    build_migration(sqlite_url, pg_url, n_users=6, items_per_user=12, dimensions=16, table="mem_old")
    with psycopg.connect(ensure(pg_url, create=True).libpq) as conn:
        rows = conn.execute("SELECT count(*) FROM mem_old").fetchone()[0]
    settings = {"MEMORY_PGVECTOR_SOURCE_URL": pg_url, "MEMORY_PGVECTOR_SOURCE_TABLE": "mem_old"}
    sets = [f"--set={k}={v}" for k, v in settings.items()]

    def copy(table: str, embedder: str) -> None:
        code, report = _cli(
            "import", "--from", "pgvector", "--to", pg_url, "--table", table, *sets, "--vectors", "reembed",
            "--embedder", embedder, "--apply", "--create-schema", "--json",
        )  # fmt: skip
        assert code == 0 and report["rowsWritten"] == rows > 0, report

    def verify(table: str, *extra: str) -> tuple[int, dict]:
        return _cli(
            "verify", "--from", "pgvector", "--to", pg_url, "--table", table, *sets, "--json", "-k", "5",
            "--leaf", "4", "--preserved-users", "6", "--source-embedder", "hash:16", *extra,
        )  # fmt: skip

    copy("mem_same", "hash:16")
    code, summary = verify("mem_same")
    assert code == 0 and summary["verdict"] == "PASS", summary["reasons"]
    assert _gate(summary, "preserved")["state"] == "pass"
    assert len(summary["preserved"]["users"]) == 6
    assert all(u["overlap"] == 1.0 for u in summary["preserved"]["users"])
    _scramble(pg_url, ("user-000000", "user-000002"), "mem_same")
    code, summary = verify("mem_same", "--vector-sample", "0")
    assert code == 1 and _gate(summary, "rows")["reasons"] == []
    failed = {u["user"] for u in summary["preserved"]["users"] if not u["passed"]}
    assert failed == {"user-000000", "user-000002"}
    assert all(user in _gate(summary, "preserved")["reasons"][0] for user in failed)

    copy("mem_wide", "hash:32")
    code, summary = verify("mem_wide", "--min-overlap", "1.0")
    users = summary["preserved"]["users"]
    assert len(users) == 6 and all(0.0 <= u["overlap"] <= 1.0 for u in users)
    below = {u["user"] for u in users if u["overlap"] < 1.0}
    assert (code == 1) == bool(below) and {u["user"] for u in users if not u["passed"]} == below
