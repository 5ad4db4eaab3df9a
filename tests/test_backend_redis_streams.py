"""The Redis Streams adapter and source against the machine's real Redis (127.0.0.1:6379).

Dormant unless configured, write-only (resolve always stays on legacy), entries with the documented
fields, approximate MAXLEN trimming, a consumer group reading the entries back, every failure mode
failing open within the deadline, writes never retried, a URL password never shown, and the source
paging to the end from an exclusive cursor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from fakes.server import refused_url

from memwork.backends.base import supports_of
from memwork.backends.redis_streams import (
    DECLARATION,
    ENTRY_FIELDS,
    RedisStreamsSource,
    entry_record,
    from_env,
    source_from_env,
)
from memwork.cli import main
from memwork.errors import BackendError, UsageError
from memwork.facade.facade import facade_from_env
from memwork.migrate.source import iter_pages
from memwork.plugins import open_source

ERROR_DEADLINE_MS = 1000  #: the failures here: their own reason must win, even on a loaded machine
PASSWORD = "rs-pw-Kq7!never-shown"


def _env(url: str, stream: str, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_REDIS_STREAMS_ENABLED": "1",
        "MEMORY_REDIS_STREAMS_URL": url,
        "MEMORY_REDIS_STREAMS_STREAM": stream,
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


@pytest.fixture
def stream(redis_prefix: str) -> str:
    return f"{redis_prefix}memory-events"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    yield r
    r.close()


def _port_url(port: int, password: str | None = None) -> str:
    auth = f":{password}@" if password else ""
    return f"redis://{auth}127.0.0.1:{port}/0"


# ---- dormant unless configured ------------------------------------------------------------------
def test_empty_env_is_dormant_and_write_only():
    backend = from_env({})
    avail = backend.availability()
    assert avail.reason == (
        "disabled (MEMORY_REDIS_STREAMS_ENABLED is not 1); url_missing (MEMORY_REDIS_STREAMS_URL is not set)"
    )
    assert supports_of(backend) == {"resolve": False, "write": True, "compact": False}
    assert not backend.supports("resolve") and DECLARATION.capabilities == ("write",)
    assert backend.stream == "memind:memory-events" and backend.maxlen == 100_000


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("MEMORY_REDIS_STREAMS_MAXLEN", "0", "maxlen_invalid"),
        ("MEMORY_REDIS_STREAMS_MAXLEN", "~1000", "maxlen_invalid"),
        ("MEMORY_REDIS_STREAMS_URL", "http://127.0.0.1:6379", "url_invalid"),
        ("MEMORY_REDIS_STREAMS_ENABLED", "nope", "disabled"),
    ],
)
def test_bad_values_make_it_unavailable_naming_them(key, value, code):
    avail = from_env({**_env("redis://127.0.0.1:6379/0", "s"), key: value}).availability()
    assert not avail.available and avail.reason.startswith(code)
    assert code == "disabled" or repr(value) in avail.reason


def test_configured_is_available_without_importing_or_connecting():
    backend = from_env(_env(_port_url(1, PASSWORD), "s", MEMORY_REDIS_STREAMS_MAXLEN="500"))
    assert backend.availability().available and backend.maxlen == 500
    assert backend._redis is None
    assert PASSWORD not in repr(backend)


def test_the_module_does_not_import_redis_at_import_time():
    import subprocess
    import sys

    code = (
        "import sys; import memwork.backends.redis_streams as m; "
        "m.from_env({}).availability(); print('redis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- write against the real Redis ---------------------------------------------------------------
def test_entries_land_with_the_documented_fields(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    try:
        result = backend.write(_write("alice", "s-1", "first", "second", "third"))
    finally:
        backend.close()
    entries = client.xrange(stream)
    assert [entry_id for entry_id, _ in entries] == result["entryIds"] and result["events"] == 3
    for position, (_, fields) in enumerate(entries):
        assert list(fields) == list(ENTRY_FIELDS)
        assert fields["v"] == "1" and fields["type"] == "message"
        assert fields["userId"] == "alice" and fields["sessionId"] == "s-1"
        assert fields["position"] == str(position) and fields["count"] == "3"
        assert fields["eventId"] == result["eventIds"][position]
        assert fields["writeId"] == result["writeId"]
        assert fields["ts"].endswith("+00:00")
    assert [f["content"] for _, f in entries] == ["first", "second", "third"]
    assert [f["role"] for _, f in entries] == ["user", "assistant", "user"]


def test_hostile_and_unicode_values_are_stored_verbatim(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    value = "o'brien\"}) DETACH DELETE n // ユーザー🙂 \r\n*3\r\n$3\r\nDEL"
    backend.write({"userId": "TenantX", "sessionId": value, "messages": [{"role": "user", "content": value}]})
    backend.close()
    ((_, fields),) = client.xrange(stream)
    assert fields["content"] == value and fields["sessionId"] == value
    assert client.keys(f"{stream}*") == [stream]  # nothing but the one stream was touched


def test_trimming_holds_the_stream_near_maxlen(redis_url, stream, client):
    maxlen = 200
    backend = from_env(_env(redis_url, stream, MEMORY_REDIS_STREAMS_MAXLEN=str(maxlen)))
    first = None
    for i in range(20):  # 2,000 entries
        result = backend.write(_write(f"u{i % 10}", "s", *[f"m{i}-{j}" for j in range(100)]))
        first = first or result["entryIds"][0]
        length = client.xlen(stream)
        node = int(client.config_get("stream-node-max-entries")["stream-node-max-entries"])
        assert length <= maxlen + node, (i, length)  # approximate: at most about one node more
    backend.close()
    assert maxlen <= client.xlen(stream) <= maxlen + node
    assert client.xrange(stream, count=1)[0][0] != first  # the oldest entries were trimmed


def test_a_consumer_group_reads_them_back(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    backend.write(_write("alice", "s-1", "a1", "a2"))
    client.xgroup_create(stream, "analytics", id="0")
    backend.write(_write("bob", "s-2", "b1"))
    backend.close()
    read = client.xreadgroup("analytics", "worker-1", {stream: ">"}, count=10, block=500)
    ((name, entries),) = read
    assert name == stream
    assert [(f["userId"], f["content"]) for _, f in entries] == [
        ("alice", "a1"),
        ("alice", "a2"),
        ("bob", "b1"),
    ]
    assert client.xack(stream, "analytics", *[entry_id for entry_id, _ in entries]) == 3
    # a plain XREAD after the last id sees a later write
    last = entries[-1][0]
    backend = from_env(_env(redis_url, stream))
    backend.write(_write("carol", "s-3", "c1"))
    backend.close()
    ((_, later),) = client.xread({stream: last}, count=10, block=500)
    assert [f["content"] for _, f in later] == ["c1"]


def test_look_alike_users_stay_apart(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    for user in ("TenantX", "tenantx"):
        backend.write(_write(user, "shared", f"secret of {user}"))
    with pytest.raises(UsageError, match="whitespace"):
        backend.write(_write("tenantx ", "shared", "padded"))
    backend.close()
    by_user = {}
    for _, fields in client.xrange(stream):
        by_user.setdefault(fields["userId"], []).append(fields["content"])
    assert by_user == {"TenantX": ["secret of TenantX"], "tenantx": ["secret of tenantx"]}
    records = [
        r for page, _ in iter_pages(RedisStreamsSource(redis_url, stream), None, 1) for r in page.records
    ]
    assert {(r.user_id, r.content) for r in records} == {
        ("TenantX", "secret of TenantX"),
        ("tenantx", "secret of tenantx"),
    }


def test_purge_user_removes_only_that_users_entries(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    for i in range(12):
        backend.write(_write("alice" if i % 3 else "bob", "s", *[f"m{i}-{j}" for j in range(100)]))
    assert backend.purge_user("bob") == {"entries": 400}
    backend.close()
    users = {f["userId"] for _, f in client.xrange(stream)}
    assert users == {"alice"} and client.xlen(stream) == 800


# ---- the facade: write selected, resolve never ----------------------------------------------------
def test_facade_writes_to_the_stream_and_resolve_stays_on_legacy(redis_url, stream, client):
    env = _env(redis_url, stream, MEMORY_BACKEND="redis-streams")
    facade = facade_from_env(env)
    try:
        written = facade.write(_write())
        resolved = facade.resolve({"userId": "alice", "query": "tea"})
        status = facade.status()
    finally:
        facade.close()
    assert written["ok"] is True and written["source"] == "redis-streams" and written["events"] == 2
    assert resolved["ok"] is True and resolved["source"] == "legacy-conversation-memory"
    assert status["selectedBackends"] == {
        "resolve": "legacy-conversation-memory",
        "write": "redis-streams",
        "compact": "legacy-conversation-memory",
    }
    assert "does not support resolve" in status["fallbacks"]["resolve"]
    assert client.xlen(stream) == 2


def _degraded(env: dict[str, str], caplog) -> dict:
    """One write through the failing facade: degraded, no password anywhere, resolve still on legacy."""
    facade = facade_from_env(
        {**env, "MEMORY_BACKEND": "redis-streams", "MEMORY_BACKEND_TIMEOUT_MS": str(ERROR_DEADLINE_MS)}
    )
    try:
        with caplog.at_level(logging.DEBUG):
            payload = facade.write(_write())
        status = facade.status()
        resolved = facade.resolve({"userId": "alice", "query": "tea"})
    finally:
        facade.close()
    assert payload["ok"] is False and payload["source"] == "redis-streams"
    for text in (json.dumps(payload), json.dumps(status), caplog.text):
        assert PASSWORD not in text
    assert resolved["ok"] is True and resolved["source"] == "legacy-conversation-memory"
    return payload


def test_wrong_password_against_the_real_redis_is_not_shown(redis_url, stream, caplog):
    url = redis_url.replace("redis://", f"redis://nobody:{PASSWORD}@")  # no such ACL user: WRONGPASS
    payload = _degraded(_env(url, stream), caplog)
    assert "AuthenticationError" in payload["reason"] and "redis://nobody:***@" in payload["reason"]


def test_a_stream_key_of_another_type_fails_open(redis_url, stream, client, caplog):
    client.set(stream, "not a stream")
    payload = _degraded(_env(redis_url, stream), caplog)
    assert "WRONGTYPE" in payload["reason"]


# ---- the source ---------------------------------------------------------------------------------
def test_source_pages_to_the_end_from_an_exclusive_cursor(redis_url, stream, client):
    backend = from_env(_env(redis_url, stream))
    for i in range(5):
        backend.write(_write(f"user-{i}", f"s-{i}", *[f"m{i}-{j}" for j in range(5)]))
    backend.close()
    source = source_from_env({"MEMORY_REDIS_STREAMS_URL": redis_url, "MEMORY_REDIS_STREAMS_STREAM": stream})
    pages = list(iter_pages(source, None, 10))
    source.close()
    assert [len(p.records) for p, _ in pages] == [10, 10, 5]
    assert [cursor for _, cursor in pages][1:] == [pages[0][0].records[-1].id, pages[1][0].records[-1].id]
    ids = [r.id for p, _ in pages for r in p.records]
    assert ids == [entry_id for entry_id, _ in client.xrange(stream)]  # every entry, once, in order
    first = pages[0][0].records[0]
    assert first.user_id == "user-0" and first.content == "m0-0" and first.session_id == "s-0"
    assert (
        first.type == "event"
        and first.metadata["eventType"] == "message"
        and first.metadata["role"] == "user"
    )
    assert first.message_id and first.created_at is not None and first.created_at.tzinfo is not None
    assert first.vector is None and first.model is None


def test_source_exact_multiple_of_the_page_size_ends(redis_url, stream):
    backend = from_env(_env(redis_url, stream))
    backend.write(_write("alice", "s", *[f"m{j}" for j in range(20)]))
    backend.close()
    pages = list(iter_pages(RedisStreamsSource(redis_url, stream), None, 10))
    assert [len(p.records) for p, _ in pages] == [10, 10, 0] and pages[-1][0].next_cursor is None


def test_source_skips_foreign_entries_and_takes_the_time_from_the_id(redis_url, stream, client, caplog):
    client.xadd(stream, {"kind": "heartbeat"}, id="1700000000000-0")
    client.xadd(
        stream, {"userId": "alice", "content": "from another producer", "extra": "x"}, id="1700000000500-0"
    )
    with caplog.at_level(logging.WARNING):
        page = RedisStreamsSource(redis_url, stream).read_page(None, 10)
    (record,) = page.records
    assert record.id == "1700000000500-0" and record.created_at.timestamp() == 1700000000.5
    assert record.metadata["extra"] == "x" and record.message_id is None
    assert "1700000000000-0" in caplog.text


def test_source_needs_the_url_and_hides_its_password(redis_url, stream):
    with pytest.raises(UsageError, match="MEMORY_REDIS_STREAMS_URL"):
        open_source("redis-streams", {})
    with pytest.raises(UsageError, match="redis://"):
        source_from_env({"MEMORY_REDIS_STREAMS_URL": "http://x"})
    source = source_from_env({"MEMORY_REDIS_STREAMS_URL": _port_url(6379, PASSWORD)})
    assert source.key == "redis-streams:redis://:***@127.0.0.1:6379/0/memind:memory-events"
    with pytest.raises(UsageError, match="cursor"):
        source.read_page("not-an-id", 10)
    port = int(refused_url().rsplit(":", 1)[1])
    with pytest.raises(BackendError) as info:
        RedisStreamsSource(_port_url(port, PASSWORD), stream, timeout_s=0.5).read_page(None, 10)
    assert PASSWORD not in str(info.value)


def test_entry_record_maps_documented_fields():
    record = entry_record(
        "1700000000000-3",
        {
            b"userId": b"u",
            b"content": "caf\u00e9".encode(),
            b"type": b"preference",
            b"ts": b"2026-01-02T03:04:05Z",
        },
        "s",
    )
    assert record is not None and record.type == "preference" and record.content == "café"
    assert record.created_at.isoformat() == "2026-01-02T03:04:05+00:00"
    assert entry_record("1-0", {b"userId": b"u", b"content": b"  "}, "s") is None


# ---- gates and CLI ------------------------------------------------------------------------------
def test_contract_gate_passes():
    from memwork.facade.contract import check_all, validate_backend

    assert validate_backend(from_env({})) == []
    assert validate_backend(from_env(_env("redis://127.0.0.1:6379/0", "s"))) == []
    report = check_all({}, adapters=True, plugins=[])
    assert not [v for v in report.violations if v.backend == "redis-streams"], report.violations


def test_check_config_lists_what_is_missing_and_hides_the_password():
    runner = CliRunner()
    missing = runner.invoke(main, ["check", "config", "--backend", "redis-streams", "--json"], env={})
    assert missing.exit_code == 1
    report = json.loads(missing.stdout[: missing.stdout.rindex("}") + 1])
    assert report["missing"] == ["MEMORY_REDIS_STREAMS_ENABLED", "MEMORY_REDIS_STREAMS_URL"]
    env = _env(_port_url(6379, PASSWORD), "s")
    ready = runner.invoke(main, ["check", "config", "--backend", "redis-streams", "--json"], env=env)
    assert ready.exit_code == 0, ready.output
    assert json.loads(ready.stdout[: ready.stdout.rindex("}") + 1])["ready"] is True
    shell = runner.invoke(
        main, ["check", "config", "--backend", "redis-streams", "--format", "shell"], env=env
    )
    assert "# export MEMORY_REDIS_STREAMS_MAXLEN=100000  # optional" in shell.output
    assert PASSWORD not in ready.output + shell.output


def test_smoke_external(redis_url, stream, client):
    runner = CliRunner()
    args = ["smoke", "external", "--backend", "redis-streams", "--operation", "write", "--json"]
    dormant = runner.invoke(main, args, env={})
    assert dormant.exit_code == 0 and json.loads(dormant.stdout)["status"] == "not_configured"
    ok = runner.invoke(main, args, env=_env(redis_url, stream))
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["status"] == "ok" and report["cleanup"] == "purged" and report["returned"]["entryIds"] == 2
    assert client.xlen(stream) == 0  # the synthetic user's entries were removed
    port = int(refused_url().rsplit(":", 1)[1])
    failed = runner.invoke(
        main, args, env=_env(_port_url(port, PASSWORD), stream, MEMORY_BACKEND_TIMEOUT_MS="300")
    )
    assert failed.exit_code == 1 and "ConnectionError" in failed.output and PASSWORD not in failed.output
    resolve = runner.invoke(main, [*args[:-3], "--operation", "resolve"], env=_env(redis_url, stream))
    assert resolve.exit_code == 2  # redis-streams does not resolve: bad input, not a failure
