"""Shadow reads through the served app: sampling, off-path latency, the bounded queue, cross-user
detection, the comparison log (schema, rotation, secrets, two writers) and the metrics on known lists."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import httpx
import pytest

from memwork.contracts import BaseBackend
from memwork.facade.facade import facade_from_env
from memwork.plugins import BACKENDS as GROUP
from memwork.plugins import Registry
from memwork.service.app import create_app, running
from memwork.service.shadow import (
    ComparisonLog,
    ShadowReader,
    item_ids,
    overlap_at_k,
    rbo,
    read_comparisons,
    top1_agree,
    user_digest,
)

SECRET = "hunter2-shadow"
RELEASE = threading.Event()  #: holds the slow and the blocked shadow until the test has its answers
SLOW_DONE: list[str] = []  #: one entry per slow-shadow call that has finished
PRIMARY_IDS = ["a", "b", "c", "d"]
SHADOW_IDS = ["b", "a", "d", "c"]


def _items(ids: list[str], user_id: str) -> list[dict[str, Any]]:
    return [{"id": i, "userId": user_id, "content": f"memory {i}"} for i in ids]


class PrimaryList(BaseBackend):
    name = "primary-list"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"semanticMemories": _items(PRIMARY_IDS, request["userId"])}


class ShadowList(BaseBackend):
    name = "shadow-list"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"memories": _items(SHADOW_IDS, request["userId"])}


class SlowShadow(BaseBackend):
    name = "slow-shadow"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        RELEASE.wait(60)
        time.sleep(1.0)  # then a second of its own: its latency is measured, at least 1,000 ms
        SLOW_DONE.append(str(request["userId"]))
        return {"semanticMemories": _items(PRIMARY_IDS, request["userId"])}


class BlockedShadow(BaseBackend):
    name = "blocked-shadow"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        RELEASE.wait(60)
        return {"semanticMemories": []}


class LeakyShadow(BaseBackend):
    """Answers with the caller's memories plus one of a look-alike user."""

    name = "leaky-shadow"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        uid = request["userId"]
        return {
            "semanticMemories": [*_items(["a"], uid), *_items(["x"], uid.lower()), *_items(["y"], f"{uid} ")]
        }


class MismatchedShadow(BaseBackend):
    name = "mismatched-shadow"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        url = f"postgresql://app:{SECRET}@db.internal/mem"
        raise RuntimeError(f"{url}: expected 384 dimensions, not 768 (dimension mismatch)")


class WriteOnly(BaseBackend):
    name = "write-only"
    category = "behavior"

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {}


BACKENDS = [PrimaryList, ShadowList, SlowShadow, BlockedShadow, LeakyShadow, MismatchedShadow, WriteOnly]


def make(name: str) -> Any:
    return next(b for b in BACKENDS if b.name == name)()


def _factory(name: str) -> Any:
    return lambda env: make(name)


for _backend in BACKENDS:
    globals()[f"make_{_backend.name.replace('-', '_')}"] = _factory(_backend.name)

PLUGINS = [EntryPoint(b.name, f"{__name__}:make_{b.name.replace('-', '_')}", GROUP) for b in BACKENDS]


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    RELEASE.clear()
    SLOW_DONE.clear()
    yield
    RELEASE.set()


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "shadow" / "comparisons.jsonl"


def base_env(log_path: Path, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_LEGACY_DATABASE_URL": f"sqlite:///{log_path.parent.parent / 'legacy.db'}",
        "MEMORY_BACKEND": "primary-list",
        "MEMORY_BACKEND_TIMEOUT_MS": "3000",
        "MEMORY_SHADOW_LOG": str(log_path),
        **extra,
    }


@contextmanager
def served(env: Mapping[str, str]) -> Iterator[tuple[httpx.Client, ShadowReader]]:
    facade = facade_from_env(env, registry=Registry(env, plugins=PLUGINS))
    app = create_app(env, facade=facade)
    try:
        with running(app) as url, httpx.Client(base_url=url, timeout=10) as client:
            yield client, app.state.memwork.shadow
    finally:
        facade.close()


# ---- metrics on known lists ----------------------------------------------------------------------
def test_rbo_on_known_lists() -> None:
    assert rbo(["a", "b", "c"], ["a", "b", "c"]) == pytest.approx(1.0)
    assert rbo(["a", "b"], ["c", "d"]) == 0.0
    assert rbo([], []) is None
    assert rbo(["a"], []) == 0.0
    # swapped pair: (1-p)/p * (0/1 p + 2/2 p^2) + 1 * p^2 = 0.1/0.9 * 0.81 + 0.81
    assert rbo(["a", "b"], ["b", "a"]) == pytest.approx(0.09 + 0.81)
    # pairwise swaps of four: X = 0, 2, 2, 4 -> (1/9) * (0.81 + 2/3 * 0.729 + 0.6561) + 0.6561
    assert rbo(PRIMARY_IDS, SHADOW_IDS) == pytest.approx(0.1 / 0.9 * 1.9521 + 0.6561)
    # uneven lengths: the short list agrees on its prefix -> extrapolated to full agreement
    assert rbo(["a", "b", "c"], ["a"]) == pytest.approx(1.0)
    assert rbo(["a", "b", "c"], ["c"]) < rbo(["a", "b", "c"], ["a"])
    # top-weighted: disagreeing at the top costs more than at the bottom
    assert rbo(["a", "b", "c", "d"], ["x", "b", "c", "d"]) < rbo(["a", "b", "c", "d"], ["a", "b", "c", "x"])


def test_overlap_top1_and_ids_on_known_lists() -> None:
    assert overlap_at_k(["a", "b", "c"], ["a", "c", "x"], 2) == 0.5
    assert overlap_at_k(["a", "b", "c"], ["a", "c", "x"], 3) == pytest.approx(2 / 3)
    assert overlap_at_k(["a", "b", "c"], ["a", "b", "c"], 40) == 1.0  # short but identical
    assert overlap_at_k(["a"], ["a", "b", "c", "d"], 40) == 0.25
    assert overlap_at_k([], [], 5) is None
    assert top1_agree(["a", "b"], ["a"]) is True
    assert top1_agree(["a"], ["b"]) is False
    assert top1_agree([], ["b"]) is False
    assert top1_agree([], []) is None
    items = [{"id": 1}, {"id": "1"}, {"content": "no id"}, {"id": 2}, {"id": 3}]
    assert item_ids(items, 2) == ["1", "2"]


# ---- through the service -------------------------------------------------------------------------
def test_sample_zero_never_shadows(log_path: Path) -> None:
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="shadow-list", MEMORY_SHADOW_SAMPLE="0")
    with served(env) as (client, _shadow):
        for _ in range(5):
            assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["ok"]
        status = client.get("/api/runtime/status").json()["shadow"]
        assert status["enabled"] is False and status["counters"]["sampled"] == 0
    assert not log_path.exists()


def test_a_stage_that_sampled_nothing_yet_still_has_its_empty_log(log_path: Path) -> None:
    """1 % of a few resolves is often none: the log exists from the start, so the stage is not lost."""
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="shadow-list", MEMORY_SHADOW_SAMPLE="0.0001")
    with served(env) as (client, shadow):
        assert log_path.exists() and log_path.stat().st_size == 0  # before any request
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["ok"]
        assert shadow.counters["logErrors"] == 0


def test_a_synthetic_canary_user_is_never_shadowed(log_path: Path) -> None:
    """The app canary's and the leak probes' users exist only where the service writes (never in the
    backfilled shadow): their resolves are counted apart, never judged as traffic."""
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="shadow-list", MEMORY_SHADOW_SAMPLE="1")
    with served(env) as (client, shadow):
        for user in ("memory-v2-canary-probe-a1", "memory-v2-canary-0001", "u1"):
            assert client.post("/user-memory/v1/resolve", json={"userId": user}).json()["ok"]
        assert shadow.drain()
        counters = client.get("/api/runtime/status").json()["shadow"]["counters"]
    assert (counters["sampled"], counters["recorded"], counters["synthetic"]) == (1, 1, 2)
    assert [r["user"] for r in read_comparisons(log_path)] == [user_digest("u1")]


def test_sample_one_records_every_resolve_with_the_documented_schema(log_path: Path) -> None:
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="shadow-list", MEMORY_SHADOW_SAMPLE="1")
    with served(env) as (client, shadow):
        request_ids = []
        for limit, given in ((4, "caller-req-1"), (2, "not a token")):
            response = client.post(
                "/user-memory/v1/resolve",
                json={"userId": "TenantX", "limit": limit},
                headers={"X-Request-Id": given},
            )
            assert [m["id"] for m in response.json()["semanticMemories"]] == PRIMARY_IDS
            request_ids.append(response.headers["x-request-id"])
        assert request_ids[0] == "caller-req-1" and len(request_ids[1]) == 32  # a bad one is replaced
        client.post("/user-memory/v1/sync", json={"userId": "u"})  # only resolves are shadowed
        assert shadow.drain()
        status = client.get("/api/runtime/status").json()["shadow"]
    assert status["enabled"] is True and status["backend"] == "shadow-list" and status["sample"] == 1.0
    assert status["counters"] == {
        "sampled": 2, "recorded": 2, "dropped": 0, "errors": 0, "logErrors": 0, "synthetic": 0
    }  # fmt: skip
    records = read_comparisons(log_path)
    assert [r["requestId"] for r in records] == request_ids
    first, second = records
    assert set(first) == {
        "ts", "requestId", "user", "k", "primary", "shadow", "overlapAtK", "rbo", "top1Agree",
        "fewerThanK", "dimensionMismatch", "startedAt",
    }  # fmt: skip
    assert (
        first["user"] == user_digest("TenantX")
        and len(first["user"]) == 16
        and "TenantX" not in json.dumps(first)
    )
    assert first["k"] == 4
    assert first["primary"]["backend"] == "primary-list" and first["shadow"]["backend"] == "shadow-list"
    assert first["primary"]["ids"] == PRIMARY_IDS and first["shadow"]["ids"] == SHADOW_IDS
    assert first["primary"]["count"] == 4 and first["primary"]["crossUser"] == 0
    assert first["primary"]["ok"] is True and first["shadow"]["error"] is None
    assert first["primary"]["latencyMs"] >= 0 and first["shadow"]["latencyMs"] >= 0
    assert first["overlapAtK"] == 1.0 and first["top1Agree"] is False
    assert first["rbo"] == pytest.approx(0.1 / 0.9 * 1.9521 + 0.6561)
    assert first["fewerThanK"] == {"primary": False, "shadow": False}
    assert first["dimensionMismatch"] is None
    assert (
        second["k"] == 2 and second["primary"]["ids"] == ["a", "b"] and second["shadow"]["ids"] == ["b", "a"]
    )
    assert second["overlapAtK"] == 1.0 and second["rbo"] == pytest.approx(0.9)


def test_a_slow_shadow_adds_no_latency_to_the_caller(log_path: Path) -> None:
    """Every answer comes while the shadow is still held (so none waited for it), then the shadow's own
    time is measured and logged; no assertion on how long an answer took."""
    env = base_env(
        log_path,
        MEMORY_SHADOW_BACKEND="slow-shadow",
        MEMORY_SHADOW_SAMPLE="1",
        MEMORY_BACKEND_TIMEOUT_MS="30000",
    )
    with served(env) as (client, shadow):
        client.get("/healthz")
        timings = []
        for _ in range(3):
            started = time.monotonic()
            assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["ok"]
            timings.append(time.monotonic() - started)
        assert SLOW_DONE == []  # all three answered while the shadow was held: none waited for it
        RELEASE.set()
        assert shadow.drain(30)
    records = read_comparisons(log_path)
    assert len(records) == 3 and len(SLOW_DONE) == 3
    assert all(r["shadow"]["latencyMs"] >= 1000 for r in records)
    # the primary's latency is part of its caller's round trip, which never included the shadow's
    assert all(r["primary"]["latencyMs"] <= max(timings) * 1000 for r in records)


def test_a_full_queue_drops_and_counts(log_path: Path) -> None:
    # a long deadline: the shadow worker holds the first job until RELEASE, however slow the machine
    env = base_env(
        log_path,
        MEMORY_SHADOW_BACKEND="blocked-shadow",
        MEMORY_SHADOW_SAMPLE="1",
        MEMORY_SHADOW_QUEUE="2",
        MEMORY_BACKEND_TIMEOUT_MS="30000",
    )
    with served(env) as (client, shadow):
        for _ in range(8):  # all answered while the shadow is blocked: none waited for it
            assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).status_code == 200
        counters = client.get("/api/runtime/status").json()["shadow"]["counters"]
        assert counters["sampled"] == 8
        assert 5 <= counters["dropped"] <= 6  # one in the worker, up to two queued
        RELEASE.set()
        assert shadow.drain(10)
        counters = client.get("/api/runtime/status").json()["shadow"]["counters"]
    assert counters["recorded"] == 8 - counters["dropped"]
    assert len(read_comparisons(log_path)) == counters["recorded"]


def test_memories_of_another_user_are_counted_per_side(log_path: Path) -> None:
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="leaky-shadow", MEMORY_SHADOW_SAMPLE="1")
    with served(env) as (client, shadow):
        client.post("/user-memory/v1/resolve", json={"userId": "TenantX", "limit": 5})
        assert shadow.drain()
    (record,) = read_comparisons(log_path)
    assert record["shadow"]["crossUser"] == 2  # 'tenantx' and 'TenantX ' are other users
    assert record["primary"]["crossUser"] == 0
    assert record["shadow"]["count"] == 3


def test_errors_are_redacted_and_dimension_mismatch_is_flagged(log_path: Path) -> None:
    env = base_env(log_path, MEMORY_SHADOW_BACKEND="mismatched-shadow", MEMORY_SHADOW_SAMPLE="1")
    with served(env) as (client, shadow):
        client.post("/user-memory/v1/resolve", json={"userId": "u1"})
        assert shadow.drain()
        status = client.get("/api/runtime/status")
    assert status.json()["shadow"]["counters"]["errors"] == 1
    text = log_path.read_text()
    assert SECRET not in text and SECRET not in status.text
    (record,) = read_comparisons(log_path)
    assert record["shadow"]["ok"] is False and "dimensions" in record["shadow"]["error"]
    assert record["shadow"]["ids"] == [] and record["fewerThanK"]["shadow"] is True
    assert record["dimensionMismatch"] == {"side": "shadow", "dimensions": [384, 768]}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"MEMORY_SHADOW_BACKEND": "shadow-list", "MEMORY_SHADOW_SAMPLE": "1.5"}, "MEMORY_SHADOW_SAMPLE"),
        ({"MEMORY_SHADOW_BACKEND": "shadow-list", "MEMORY_SHADOW_SAMPLE": "nan"}, "MEMORY_SHADOW_SAMPLE"),
        ({"MEMORY_SHADOW_BACKEND": "shadow-list", "MEMORY_SHADOW_SAMPLE": "ten"}, "MEMORY_SHADOW_SAMPLE"),
        ({"MEMORY_SHADOW_SAMPLE": "0.5"}, "MEMORY_SHADOW_BACKEND"),
        ({"MEMORY_SHADOW_BACKEND": "no-such", "MEMORY_SHADOW_SAMPLE": "1"}, "MEMORY_SHADOW_BACKEND"),
        ({"MEMORY_SHADOW_BACKEND": "write-only", "MEMORY_SHADOW_SAMPLE": "1"}, "MEMORY_SHADOW_BACKEND"),
        (
            {
                "MEMORY_SHADOW_BACKEND": "shadow-list",
                "MEMORY_SHADOW_SAMPLE": "1",
                "MEMORY_SHADOW_LOG_MAX": "0",
            },
            "MEMORY_SHADOW_LOG_MAX",
        ),
    ],
)
def test_bad_shadow_settings_are_config_errors_and_turn_the_shadow_off(
    log_path: Path, extra: dict[str, str], field: str
) -> None:
    with served(base_env(log_path, **extra)) as (client, _shadow):
        assert client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()["ok"] is True
        status = client.get("/api/runtime/status").json()
    assert status["shadow"]["enabled"] is False
    assert field in {e["field"] for e in status["shadow"]["configErrors"]}
    assert field in {e["field"] for e in status["memory"]["configErrors"]}
    assert status["shadow"]["counters"]["sampled"] == 0
    assert not log_path.exists()


def test_the_log_rotates_past_its_bound(log_path: Path) -> None:
    env = base_env(
        log_path, MEMORY_SHADOW_BACKEND="shadow-list", MEMORY_SHADOW_SAMPLE="1", MEMORY_SHADOW_LOG_MAX="3"
    )
    with served(env) as (client, shadow):
        ids = [
            client.post("/user-memory/v1/resolve", json={"userId": "u1"}).headers["x-request-id"]
            for _ in range(8)
        ]
        assert shadow.drain()
    rotated = log_path.with_name(log_path.name + ".1")
    assert len(log_path.read_text().splitlines()) == 2  # 8 = 3 + 3 + 2
    assert len(rotated.read_text().splitlines()) == 3
    assert [r["requestId"] for r in read_comparisons(log_path)] == ids[3:]
    assert [r["requestId"] for r in read_comparisons(log_path, include_rotated=False)] == ids[6:]


def test_read_comparisons_skips_a_torn_last_line(tmp_path: Path) -> None:
    log = ComparisonLog(tmp_path / "c.jsonl", 100)
    log.append({"requestId": "one"})
    with log.path.open("a") as handle:
        handle.write('{"requestId": "tw')  # kill -9 mid-line
    assert [r["requestId"] for r in read_comparisons(log.path)] == ["one"]


APPEND_MANY = """
import sys
from pathlib import Path
from memwork.service.shadow import ComparisonLog
log = ComparisonLog(Path(sys.argv[1]), 50)
for i in range(60):
    log.append({"requestId": f"{sys.argv[2]}-{i}", "pad": "x" * 2000})
"""


def test_two_processes_share_one_bounded_log(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPEND_MANY, str(path), str(w)]) for w in (1, 2)]
    assert [proc.wait(60) for proc in procs] == [0, 0]
    lines = [*path.with_name("shared.jsonl.1").read_text().splitlines(), *path.read_text().splitlines()]
    assert all(json.loads(line)["pad"] for line in lines)  # no interleaved or torn line
    assert len(path.read_text().splitlines()) <= 50
    assert len(lines) == 120 - 50 * ((120 - 1) // 50 - 1)  # every rotation but the last is gone
