"""End to end on the real Redis: a stream of 1,100 message events over 13 users (look-alikes included)
-> ``memwork import --from redis-streams --apply`` in a subprocess SIGKILLed mid-run -> ``--resume``
-> ``import-verify`` PASS; a damaged copy -> FAIL naming the ids. Entries without a user (heartbeats of
another producer) are not memories and are not imported."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import redis
from import_harness import damage_and_verify, kill_resume_verify

from memwork.backends.redis_streams import from_env

USERS = [f"user-{n:02d}" for n in range(10)] + ["TenantX", "tenantx"]
WRITES_PER_USER, MESSAGES_PER_WRITE = 9, 10
RAW_LOOKALIKE = "tenantx "  # the facade refuses padded ids; another producer may still XADD one
RAW_ENTRIES = 20


def _seed(redis_url: str, stream: str) -> tuple[list[str], dict[str, int], dict[str, dict[str, str]]]:
    """Write the events; returns every memory entry id, the count per user and each entry's fields."""
    backend = from_env(
        {
            "MEMORY_REDIS_STREAMS_ENABLED": "1",
            "MEMORY_REDIS_STREAMS_URL": redis_url,
            "MEMORY_REDIS_STREAMS_STREAM": stream,
        }
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for w in range(WRITES_PER_USER):
            for user in USERS:
                messages = [
                    {
                        "role": "user" if m % 2 == 0 else "assistant",
                        "content": f"{user!r} write {w} message {m}",
                    }
                    for m in range(MESSAGES_PER_WRITE)
                ]
                backend.write({"userId": user, "sessionId": f"{user}-s{w % 3}", "messages": messages})
            if w == 4:
                client.xadd(stream, {"kind": "heartbeat", "producer": "other"})
                for n in range(RAW_ENTRIES):
                    client.xadd(stream, {"userId": RAW_LOOKALIKE, "content": f"raw {n}", "source": "other"})
        entries = client.xrange(stream)
    finally:
        backend.close()
        client.close()
    memories = {entry_id: fields for entry_id, fields in entries if fields.get("userId")}
    per_user: dict[str, int] = {}
    for fields in memories.values():
        per_user[fields["userId"]] = per_user.get(fields["userId"], 0) + 1
    return list(memories), per_user, memories


def test_redis_streams_import_killed_resumed_verified_then_damage_detected(redis_url, redis_prefix, pg_url):
    stream = f"{redis_prefix}memory-events"
    ids, per_user, fields = _seed(redis_url, stream)
    assert len(ids) == len(USERS) * WRITES_PER_USER * MESSAGES_PER_WRITE + RAW_ENTRIES == 1100
    assert len(per_user) == 13
    env = {"MEMORY_REDIS_STREAMS_URL": redis_url, "MEMORY_REDIS_STREAMS_STREAM": stream}
    run = kill_resume_verify(
        env, "redis-streams", pg_url, expected_ids=ids, kill_after_rows=300, page_size=20, embedder="hash:16"
    )
    assert run.verification["verdict"] == "PASS"
    assert run.source_key == f"redis-streams:{redis_url}/{stream}"
    with psycopg.connect(pg_url) as conn:
        users = dict(
            conn.execute("SELECT user_id, count(*) FROM memory_embeddings GROUP BY user_id").fetchall()
        )
        written = ids[0]
        row = conn.execute(
            "SELECT user_id, content, type, source_session_id, source_message_id, created_at, "
            "metadata->>'role', metadata->>'entryId' FROM memory_embeddings WHERE source_memory_id = %s",
            (written,),
        ).fetchone()
        raw_id = next(i for i in ids if fields[i]["userId"] == RAW_LOOKALIKE)
        raw = conn.execute(
            "SELECT created_at, metadata->>'source' FROM memory_embeddings WHERE source_memory_id = %s",
            (raw_id,),
        ).fetchone()
    assert users == per_user  # TenantX, tenantx and 'tenantx ' each keep exactly their own events
    f = fields[written]
    assert row[:5] == (f["userId"], f["content"], "event", f["sessionId"], f["eventId"])
    assert row[5].replace(tzinfo=UTC) == datetime.fromisoformat(f["ts"]) and row[6:] == (f["role"], written)
    from_id = datetime.fromtimestamp(int(raw_id.split("-")[0]) / 1000, UTC)
    assert raw[0].replace(tzinfo=UTC) == from_id and raw[1] == "other"  # no ts: the entry id's time
    damage_and_verify(env, "redis-streams", pg_url)
