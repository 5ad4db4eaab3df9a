"""End to end: the fake LangGraph Store with 1,170 items in ["memories", <userId>] namespaces over 13 users
(look-alikes included, the same keys in every namespace) -> ``memwork import --from langgraph --apply``
in a subprocess SIGKILLed mid-run -> ``--resume`` -> ``import-verify`` PASS; a damaged copy -> FAIL
naming the ids. The Store returns no embeddings, so the import embeds with ``--embedder hash:16``."""

from __future__ import annotations

from collections import Counter

import psycopg
from fakes.langgraph import FakeLangGraph
from fakes.server import serve
from import_harness import damage_and_verify, kill_resume_verify


def test_langgraph_import_killed_resumed_verified_then_damage_detected(pg_url):
    fake = FakeLangGraph()
    users = fake.seed()
    with serve(fake) as url:
        env = {"MEMORY_LANGGRAPH_URL": url, "MEMORY_BACKEND_TIMEOUT_MS": "10000"}
        ids = sorted(f"{ns[1]}/{key}" for ns, key in fake.items)
        run = kill_resume_verify(
            env, "langgraph", pg_url, expected_ids=ids, kill_after_rows=300, page_size=50, embedder="hash:16"
        )
        assert run.verification["verdict"] == "PASS"
        assert run.source_key == f"langgraph:{url}/store/memories"
        with psycopg.connect(pg_url) as conn:
            per_user = dict(
                conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
            )
            row = conn.execute(
                "SELECT user_id, content, source_session_id, metadata->>'key', vector_dims(embedding) "
                "FROM memory_embeddings WHERE source_memory_id = %s",
                ("tenantx /m-042",),
            ).fetchone()
        assert len(users) == 13 and per_user == dict(Counter(ns[1] for ns, _ in fake.items))
        stored = fake.items[(("memories", "tenantx "), "m-042")]["value"]
        assert row == ("tenantx ", stored["content"], stored["sessionId"], "m-042", 16)
        damage_and_verify(env, "langgraph", pg_url)
