"""End to end: the fake Letta agent with 1,111 archival passages over 16 users (look-alikes and the agent's
own untagged passage included) -> ``memwork import --from letta --apply`` in a subprocess SIGKILLed
mid-run -> ``--resume`` -> ``import-verify`` PASS, Letta's vectors (zero padding removed) kept with
``embedding_config.embedding_model``, and the preserved gate measured (the fake's archival search, sent
each sampled memory's text, ranks by the cosine of its model's embedding, as Letta does, so a faithful
copy answers alike); a damaged copy -> FAIL naming the ids. The subprocess pages
``GET /v1/agents/{agent_id}/archival-memory?ascending=true&limit=..&after=<last id>`` over loopback."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import psycopg
from fakes.letta import FakeLetta, SeededEmbedder
from fakes.server import serve
from import_harness import damage_and_verify, kill_resume_verify

LOOK_ALIKES = ["TenantX", "tenantx", "tenantx "]


def _user(passage: dict, agent: str) -> str:
    tags = [t for t in passage["tags"] if t.startswith("memwork-user:")]
    return tags[0][len("memwork-user:") :] if tags else agent


def test_letta_import_killed_resumed_verified_then_damage_detected(pg_url):
    fake = FakeLetta(pad_to=32, embedder=SeededEmbedder(8)).seed(users=12, per_user=90)
    for user in LOOK_ALIKES:
        for n in range(10):
            fake.insert(f"user: {user!r} passage {n}", [f"memwork-user:{user}", "memwork-session:look"])
    fake.insert("the agent's own note", [])
    passages = fake.agents[fake.agent_id]
    with serve(fake) as url:
        env = {
            "MEMORY_LETTA_API_KEY": fake.api_key,
            "MEMORY_LETTA_AGENT_ID": fake.agent_id,
            "MEMORY_LETTA_BASE_URL": url,
        }
        ids = [p["id"] for p in passages]
        assert len(ids) == 1111
        run = kill_resume_verify(env, "letta", pg_url, expected_ids=ids, kill_after_rows=300, page_size=50)
        assert run.verification["verdict"] == "PASS"
        preserved = run.verification["preserved"]
        assert preserved["source_input"] == "text" and len(preserved["users"]) == 15  # the agent's: no tag
        assert all(u["passed"] for u in preserved["users"])
        assert run.source_key == f"letta:{url}/agents/{fake.agent_id}"
        with psycopg.connect(pg_url) as conn:
            per_user = dict(
                conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
            )
            models = conn.execute(
                "SELECT DISTINCT embedding_model, vector_dims(embedding) FROM memory_embeddings"
            ).fetchall()
            stored = passages[-5]
            row = conn.execute(
                "SELECT user_id, content, source_session_id, created_at, embedding::text "
                "FROM memory_embeddings WHERE source_memory_id = %s",
                (stored["id"],),
            ).fetchone()
        assert per_user == dict(Counter(_user(p, fake.agent_id) for p in passages)) and len(per_user) == 16
        assert models == [("seeded-8", 8)]
        assert row[:3] == ("tenantx ", stored["text"], "look")
        assert row[3] == datetime.fromisoformat(stored["created_at"])
        vector = [float(x) for x in row[4].strip("[]").split(",")]
        assert all(abs(a - b) < 1e-6 for a, b in zip(vector, stored["embedding"][:8], strict=True))
        damage_and_verify(env, "letta", pg_url)
