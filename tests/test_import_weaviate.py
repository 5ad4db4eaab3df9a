"""End to end: the fake Weaviate with 1,235 objects over 13 users (look-alikes included) -> ``memwork import
--from weaviate --apply`` in a subprocess SIGKILLed mid-run -> ``--resume`` -> ``import-verify`` PASS, the
vectors and their model kept, the preserved gate measured against the fake's own nearVector search;
a damaged copy -> FAIL naming the ids. The subprocess pages the fake's
REST cursor API (``GET /v1/objects?class=..&after=<uuid>&include=vector``) over loopback."""

from __future__ import annotations

from collections import Counter

import psycopg
from fakes.server import serve
from fakes.weaviate import FakeWeaviate
from import_harness import damage_and_verify, kill_resume_verify

DIM = 8


def test_weaviate_import_killed_resumed_verified_then_damage_detected(pg_url):
    fake = FakeWeaviate(dimension=DIM)
    users = fake.seed()
    with serve(fake) as url:
        env = {"MEMORY_WEAVIATE_URL": url, "MEMORY_BACKEND_TIMEOUT_MS": "10000"}
        ids = sorted(fake.objects)
        run = kill_resume_verify(env, "weaviate", pg_url, expected_ids=ids, kill_after_rows=300, page_size=50)
        assert run.verification["verdict"] == "PASS"
        preserved = run.verification["preserved"]  # the fake's nearVector search against the copy's
        assert preserved["source_input"] == "vector" and len(preserved["users"]) == 13
        assert all(u["passed"] for u in preserved["users"])
        # hash-8 vectors tie often: a tie broken otherwise by the two searches is one answer, said so
        assert any("answered with a tie" in note for note in preserved["notes"]), preserved["notes"]
        assert run.source_key == f"weaviate:{url}/MemindMemory"
        with psycopg.connect(pg_url) as conn:
            per_user = dict(
                conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
            )
            models = conn.execute(
                "SELECT DISTINCT embedding_model, vector_dims(embedding) FROM memory_embeddings"
            ).fetchall()
            some_id = ids[17]
            row = conn.execute(
                "SELECT user_id, content, source_session_id, metadata->>'topic', created_at, "
                "embedding::text FROM memory_embeddings WHERE source_memory_id = %s",
                (some_id,),
            ).fetchone()
        expected = Counter(o["properties"]["userId"] for o in fake.objects.values())
        assert len(users) == 13 and per_user == dict(expected)
        assert models == [(f"hash-{DIM}", DIM)]
        stored = fake.objects[some_id]
        assert row[0] == stored["properties"]["userId"] and row[1] == stored["properties"]["content"]
        assert row[2] == stored["properties"]["sessionId"] and row[3] == stored["properties"]["topic"]
        assert row[4].timestamp() * 1000 == stored["creationTimeUnix"]
        vector = [float(x) for x in row[5].strip("[]").split(",")]
        assert len(vector) == DIM  # the source's own vector (float32 in pgvector), not a re-embedding
        assert all(abs(a - b) < 1e-6 for a, b in zip(vector, stored["vector"], strict=True))
        damage_and_verify(env, "weaviate", pg_url)
