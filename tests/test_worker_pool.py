"""The fixed worker pool, per-call deadlines and the commit gate (issue 15, points 4 and 5).

Deadline decisions are tested on an injected clock (the pool and the scope read only it); where a real
thread has to block, it waits on an Event the test releases. The facade tests use in-test backends:
one that promises to ask the commit gate (like the legacy store) and one that does not (a plugin)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from memwork.backends.base import BaseBackend
from memwork.backends.requests import validate
from memwork.deadline import ABANDONED, COMMITTING, CallScope, Deadline, current_scope
from memwork.errors import BackendTimeout, CutOff, Shed, UsageError
from memwork.facade.facade import facade_from_env
from memwork.facade.safety import CUT_OFF, SHED, TIMED_OUT, WorkerPool, call_with_timeout

RELEASE = threading.Event()


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def blocked(started: threading.Event | None = None) -> Any:
    """A call that holds its worker until the test sets RELEASE."""

    def run() -> str:
        if started is not None:
            started.set()
        RELEASE.wait(30)
        return "released"

    return run


def wait_until(predicate: Any, seconds: float = 10.0) -> bool:
    """Poll ``predicate`` (a bound on a wait, never an assertion on how long it took)."""
    done = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        done.wait(0.01)
    return bool(predicate())


# ---- the pool, on an injected clock -------------------------------------------------------------
def test_a_call_whose_deadline_passes_in_the_queue_never_runs() -> None:
    clock = FakeClock()
    pool = WorkerPool(1, clock=clock)
    started = threading.Event()
    pool.submit(blocked(started), Deadline.after(10.0, clock=clock), "blocker")
    assert started.wait(10)
    ran: list[str] = []
    queued = pool.submit(lambda: ran.append("ran"), Deadline.after(1.0, clock=clock), "late")
    clock.now += 2.0  # its deadline passes while the one worker is busy
    RELEASE.set()
    assert queued.wait(10)
    assert queued.state == SHED and isinstance(queued.error, Shed) and ran == []
    with pytest.raises(Shed):
        queued.outcome()
    assert pool.stats()["shed"] == 1
    pool.close()


def test_a_queued_call_the_caller_gives_up_on_is_shed_and_never_runs() -> None:
    clock = FakeClock()
    pool = WorkerPool(1, clock=clock)
    started = threading.Event()
    pool.submit(blocked(started), Deadline.after(10.0, clock=clock), "blocker")
    assert started.wait(10)
    ran: list[str] = []
    queued = pool.submit(lambda: ran.append("ran"), Deadline.after(5.0, clock=clock), "queued")
    assert queued.give_up() == SHED
    assert pool.stats()["queued"] == 0
    RELEASE.set()
    follow = pool.submit(lambda: "next", Deadline.after(5.0, clock=clock), "next")
    assert follow.wait(10) and follow.result == "next" and ran == []
    pool.close()


def test_no_call_queues_behind_one_that_waited_a_quarter_of_its_budget() -> None:
    clock = FakeClock()
    pool = WorkerPool(1, clock=clock)
    started = threading.Event()
    pool.submit(blocked(started), Deadline.after(10.0, clock=clock), "blocker")
    assert started.wait(10)
    pool.submit(lambda: None, Deadline.after(1.0, clock=clock), "first in the queue")
    clock.now += 0.3  # the head of the queue has now waited 30 % of a 1 s budget
    with pytest.raises(Shed, match="oldest of 1 queued calls has waited 300 ms"):
        pool.submit(lambda: None, Deadline.after(1.0, clock=clock), "second")
    pool.close()


def test_a_call_that_cannot_get_a_worker_before_its_deadline_is_shed_at_once() -> None:
    clock = FakeClock()
    pool = WorkerPool(1, clock=clock)
    pool._run_s = 0.6  # the recent run time per call: a queued call waits at least that long
    started = threading.Event()
    pool.submit(blocked(started), Deadline.after(10.0, clock=clock), "blocker")
    assert started.wait(10)
    with pytest.raises(Shed, match="about 600 ms to wait"):
        pool.submit(lambda: None, Deadline.after(0.5, clock=clock), "hopeless")
    assert pool.submit(lambda: None, Deadline.after(5.0, clock=clock), "has time").state == "queued"
    pool.close()


def test_when_every_worker_is_held_by_an_abandoned_call_new_work_is_shed_not_queued() -> None:
    pool = WorkerPool(2)
    for n in range(2):
        with pytest.raises(BackendTimeout):
            call_with_timeout(blocked(), 0.05, f"hung-{n}", pool=pool)
    stats = pool.stats()
    assert stats["abandoned"] == 2 and stats["threads"] == 2
    with pytest.raises(Shed, match="all 2 workers are held by calls past their deadline"):
        pool.submit(lambda: None, Deadline.after(60.0), "new")
    RELEASE.set()  # the hung calls return; their workers serve again
    assert wait_until(lambda: pool.stats()["abandoned"] == 0)
    assert call_with_timeout(lambda: "served", 30.0, "after", pool=pool) == "served"
    assert pool.stats()["threads"] == 2  # never a thread per call
    pool.close()


def test_threads_never_exceed_the_pool_size_however_many_calls_hang() -> None:
    pool = WorkerPool(3, name="bounded-test")
    outcomes = []
    for n in range(40):
        try:
            call_with_timeout(blocked(), 0.01, f"hung-{n}", pool=pool)
        except (BackendTimeout, Shed) as exc:
            outcomes.append(type(exc))
    names = [t.name for t in threading.enumerate() if t.name.startswith("bounded-test-")]
    assert len(names) <= 3 and pool.stats()["threads"] == 3
    assert outcomes.count(Shed) >= 37  # the rest were shed at once
    pool.close()


# ---- the commit gate ----------------------------------------------------------------------------
def test_the_gate_refuses_the_commit_once_the_caller_gave_up() -> None:
    scope = CallScope(Deadline.after(60.0), "write")
    assert scope.abandon() == "running" and scope.state == ABANDONED
    assert not scope.may_commit()


def test_a_commit_under_way_when_the_caller_gives_up_stays_the_callees() -> None:
    scope = CallScope(Deadline.after(60.0), "write")
    assert scope.may_commit() and scope.state == COMMITTING
    assert scope.abandon() == COMMITTING  # the caller must answer "pending"


def test_the_gate_refuses_the_commit_after_the_deadline_on_the_injected_clock() -> None:
    clock = FakeClock()
    scope = CallScope(Deadline.after(1.0, clock=clock), "write")
    clock.now += 1.0
    assert not scope.may_commit()
    with pytest.raises(CutOff, match="no time left"):
        scope.check()


def test_statements_keep_a_reserve_of_the_budget_for_the_rollback_to_come_back() -> None:
    clock = FakeClock()
    deadline = Deadline.after(2.0, clock=clock)
    assert deadline.statement_budget() == pytest.approx(1.8)  # 10 % kept back
    long = Deadline.after(60.0, clock=clock)
    assert long.statement_budget() == pytest.approx(59.75)  # at most 250 ms kept back


# ---- the facade: a write's status says what is stored --------------------------------------------
class GuardedWriter(BaseBackend):
    """Writes like the legacy store: promises to ask the gate, and asks it before committing."""

    name = "guarded-writer"

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.finished = threading.Event()

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        scope = current_scope()
        assert scope is not None
        scope.guard_commits()
        RELEASE.wait(30)  # a lock held by someone else
        try:
            if not scope.may_commit():
                raise CutOff("rolled back")
            self.committed.append(request["messages"][0]["content"])
            scope.commit_done()
            return {"saved": 1}
        finally:
            self.finished.set()


class PlainWriter(BaseBackend):
    """A plugin that knows nothing of the gate: its outcome after the deadline is unknown."""

    name = "plain-writer"

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.finished = threading.Event()

    def write(self, request: Mapping[str, Any]) -> dict[str, Any]:
        RELEASE.wait(30)
        self.committed.append(request["messages"][0]["content"])
        self.finished.set()
        return {"saved": 1}


WRITE = {"userId": "u1", "sessionId": "s1", "messages": [{"role": "user", "content": "I live in Oslo."}]}


def facade_with(backend: BaseBackend, tmp_path: Any) -> Any:
    facade = facade_from_env(
        {
            "MEMORY_LEGACY_DATABASE_URL": f"sqlite:///{tmp_path / 'legacy.db'}",
            "MEMORY_BACKEND": backend.name,
            "MEMORY_BACKEND_TIMEOUT_MS": "150",
        }
    )
    facade.registry.register(backend)
    return facade


def test_a_write_cut_off_at_its_deadline_is_failed_and_never_commits_later(tmp_path: Any) -> None:
    backend = GuardedWriter()
    facade = facade_with(backend, tmp_path)
    answer = facade.write(WRITE)
    assert answer["ok"] is False and answer["status"] == "failed", answer
    assert "nothing stored" in answer["reason"]
    finals: list[str] = []
    call = facade.begin("write", WRITE)
    call.answer_when_due()
    call.on_final(finals.append)
    RELEASE.set()  # the lock goes away: both writes reach their commit, and are refused
    assert backend.finished.wait(10)
    assert call.call is not None and call.call.wait(10)
    assert backend.committed == [] and finals == ["notStored"]
    facade.close()


def test_a_write_whose_outcome_is_unknown_at_the_deadline_is_pending_never_failed(tmp_path: Any) -> None:
    backend = PlainWriter()
    facade = facade_with(backend, tmp_path)
    call = facade.begin("write", WRITE)
    answer = call.answer_when_due()
    assert answer["ok"] is False and answer["status"] == "pending", answer
    assert call.ended == TIMED_OUT
    finals: list[str] = []
    call.on_final(finals.append)
    RELEASE.set()
    assert backend.finished.wait(10) and call.call is not None and call.call.wait(10)
    assert backend.committed == ["I live in Oslo."] and finals == ["stored"]  # pending, then it landed
    facade.close()


def test_shed_writes_are_failed_and_say_they_were_shed(tmp_path: Any) -> None:
    backend = GuardedWriter()
    facade = facade_with(backend, tmp_path)
    answer = facade.begin("write", WRITE, overloaded="a test says so").answer()
    assert answer == {**answer, "ok": False, "status": "failed", "shed": True}
    assert backend.committed == []
    facade.close()


def test_the_facade_cuts_its_call_off_with_the_gates_verdict(tmp_path: Any) -> None:
    facade = facade_with(GuardedWriter(), tmp_path)
    call = facade.begin("write", WRITE)
    assert call.call is not None and not call.call.wait(0.3)
    assert call.call.give_up() == CUT_OFF
    facade.close()


# ---- the client's time of a message ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2025-06-01T10:00:00", "needs an offset"),
        ("yesterday", "not an ISO 8601 time"),
        ("0001-01-01T00:00:00+14:00", "between 1970 and 9998"),
        (1717236000, "must be ISO 8601 text"),
    ],
)
def test_a_bad_client_time_is_bad_input_naming_the_field(value: Any, problem: str) -> None:
    request = {**WRITE, "messages": [{"role": "user", "content": "x", "createdAt": value}]}
    with pytest.raises(UsageError, match=problem) as caught:
        validate("write", request)
    assert caught.value.field == "messages[0].createdAt"


def test_a_client_time_is_kept_exact_in_utc() -> None:
    request = {
        **WRITE,
        "messages": [{"role": "user", "content": "x", "createdAt": "2025-06-01T10:00:00.5+02:00"}],
    }
    assert validate("write", request)["messages"][0]["createdAt"] == "2025-06-01T08:00:00.500000+00:00"


def test_an_idle_worker_keeps_nothing_of_its_last_call_alive() -> None:
    """A persistent worker must not pin the last call's backend (a client, a file lock) after it ran."""
    import gc
    import weakref

    class Client:
        pass

    pool = WorkerPool(1, name="keeps-nothing")

    def use_a_client() -> weakref.ref[Client]:
        client = Client()
        assert call_with_timeout(lambda: id(client), 30.0, "uses the client", pool=pool) == id(client)
        return weakref.ref(client)

    alive = use_a_client()
    for _ in range(50):  # the worker drops it right after the call: a few collections at most
        gc.collect()
        if alive() is None:
            break
        threading.Event().wait(0.1)
    assert alive() is None
    pool.close()


class BlockingResolver(BaseBackend):
    """Resolve holds its worker until RELEASE (a backend that hangs)."""

    name = "blocking-resolver"
    category = "semantic"

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        RELEASE.wait(30)
        return {"semanticMemories": []}


def test_a_shed_resolve_is_answered_shed_counted_and_never_shadow_read(tmp_path: Any) -> None:
    """One worker, held by a hung resolve: the next resolve cannot get a worker before its deadline."""
    import httpx

    from memwork.legacy.schema import init_schema
    from memwork.service.app import create_app, running

    legacy = f"sqlite:///{tmp_path / 'legacy.db'}"
    init_schema(legacy, apply=True)
    env = {
        "MEMORY_LEGACY_DATABASE_URL": legacy,
        "MEMORY_BACKEND": "blocking-resolver",
        "MEMORY_BACKEND_TIMEOUT_MS": "300",
        "MEMORY_SHADOW_BACKEND": "legacy",
        "MEMORY_SHADOW_SAMPLE": "1",
        "MEMORY_SHADOW_LOG": str(tmp_path / "shadow.jsonl"),
    }
    facade = facade_from_env(env, pool=WorkerPool(1, name="one-worker"))
    facade.registry.register(BlockingResolver())
    with running(create_app(env, facade=facade)) as url, httpx.Client(base_url=url, timeout=30) as client:
        first = client.post("/user-memory/v1/resolve", json={"userId": "u1"}).json()  # holds the worker
        second = client.post("/user-memory/v1/resolve", json={"userId": "u2"}).json()
        status = client.get("/api/runtime/status").json()
    RELEASE.set()
    facade.close()
    assert first["ok"] is False and "timed out" in first["reason"] and not first.get("shed")
    assert second["ok"] is False and second["shed"] is True and second["memories"] == []
    assert status["service"]["shed"] == 1 and status["service"]["operations"]["resolve"]["shed"] == 1
    assert status["shadow"]["counters"]["sampled"] == 1  # only the request that ran
