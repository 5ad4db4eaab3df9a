"""End to end: the fake Mem0 with 1,110 memories over 15 users (look-alikes included) -> ``memwork import
--from mem0 --apply`` in a subprocess SIGKILLed mid-run -> ``--resume`` -> ``import-verify`` PASS; a
damaged copy -> FAIL naming the ids. The subprocess lists the users (``GET /v1/entities/``) and pages
each user's memories (``GET /v1/memories/?user_id=..&page=..&page_size=..``) over loopback. Mem0 returns
no vectors, so the import re-embeds with ``hash:16``."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import psycopg
from fakes.mem0 import FakeMem0
from fakes.server import serve
from import_harness import damage_and_verify, kill_resume_verify

LOOK_ALIKES = ["TenantX", "tenantx", "tenantx "]


def test_mem0_import_killed_resumed_verified_then_damage_detected(pg_url):
    fake = FakeMem0(entity_page_size=4).seed(users=12, per_user=90)
    for user in LOOK_ALIKES:
        for n in range(10):
            fake.store(user, f"{user!r} memory {n}", run_id="s-look", metadata={"n": n})
    with serve(fake) as url:
        env = {"MEMORY_MEM0_API_KEY": fake.api_key, "MEMORY_MEM0_BASE_URL": url}
        ids = [m["id"] for m in fake.memories]
        assert len(ids) == 1110
        run = kill_resume_verify(
            env, "mem0", pg_url, expected_ids=ids, kill_after_rows=300, page_size=50, embedder="hash:16"
        )
        assert run.verification["verdict"] == "PASS"
        assert run.source_key == f"mem0:{url}" and fake.api_key not in run.source_key
        with psycopg.connect(pg_url) as conn:
            per_user = dict(
                conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
            )
            stored = fake.of_user("tenantx ")[3]
            row = conn.execute(
                "SELECT user_id, content, metadata->>'n', created_at, embedding_model, "
                "vector_dims(embedding) FROM memory_embeddings WHERE source_memory_id = %s",
                (stored["id"],),
            ).fetchone()
        assert per_user == dict(Counter(m["user_id"] for m in fake.memories)) and len(per_user) == 15
        assert row[:3] == ("tenantx ", stored["memory"], "3")
        assert row[3] == datetime.fromisoformat(stored["created_at"]) and row[5] == 16
        damage_and_verify(env, "mem0", pg_url)
