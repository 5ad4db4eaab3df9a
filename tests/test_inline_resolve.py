"""Issue 20: the facade's resolve runs on the caller's thread when the backend bounds every wait by the
deadline (pgvector with an embedding) -- no worker hand-off -- and stays fail-open at the deadline
against a real PostgreSQL that stops answering (its backend process stopped with SIGSTOP, so no
server-side timeout can fire: only the watchdog's socket shutdown ends the call).

Deadlines are judged with :func:`deadlines.within_deadline` (derived from the configured deadline),
never against a constant."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deadlines import within_deadline

from memwork.backends import pgvector
from memwork.deadline import CallScope, Deadline, using_scope
from memwork.facade.facade import facade_from_env
from memwork.pgvector.local_hash import write_module
from memwork.pgvector.schema import ensure_schema

TIMEOUT_MS = 500
REQUEST = {"userId": "alice", "embedding": [1.0, 0.0, 0.0], "limit": 5}


def _facade(pg_url: str, tmp_path: Path, timeout_ms: int = TIMEOUT_MS) -> Any:
    ensure_schema(pg_url, "memory_embeddings", 3)
    with psycopg.connect(pgvector_libpq(pg_url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO memory_embeddings (user_id, content, embedding, source_memory_id) "
            "VALUES ('alice', 'hello', '[1,0,0]', 'm-1'), ('alice', 'other', '[0,1,0]', 'm-2')"
        )
    return facade_from_env(
        {
            "MEMORY_BACKEND": "pgvector",
            "MEMORY_VECTOR_ENABLED": "1",
            "MEMORY_PGVECTOR_DATABASE_URL": pg_url,
            "MEMORY_PGVECTOR_EMBEDDING_MODULE": write_module(3, tmp_path),
            "MEMORY_PGVECTOR_POOL_MAX": "1",  # one connection: the test knows its server process
            "MEMORY_BACKEND_TIMEOUT_MS": str(timeout_ms),
            "MEMORY_LEGACY_DATABASE_URL": f"sqlite:///{tmp_path / 'legacy.db'}",
        }
    )


def pgvector_libpq(pg_url: str) -> str:
    from memwork.db import embedded

    return embedded.ensure(pg_url, create=False).libpq or ""


def _backend_pid(facade: Any) -> int:
    backend = facade.registry.find("pgvector")
    with backend._get_pool().connection() as conn:
        return int(conn.info.backend_pid)


def test_resolve_with_an_embedding_runs_inline_without_a_worker(pg_url: str, tmp_path: Path) -> None:
    facade = _facade(pg_url, tmp_path, timeout_ms=20_000)
    try:
        first = facade.resolve(REQUEST)  # opens the pool (may start the embedded server): a worker
        assert facade.status()["workers"]["submitted"] == 1
        answer = facade.resolve(REQUEST)
        assert answer == first and answer["ok"] and answer["source"] == "pgvector"
        assert [m["id"] for m in answer["semanticMemories"]] == ["m-1", "m-2"]
        workers = facade.status()["workers"]
        assert workers["submitted"] == 1  # the second call was never handed to the pool
        assert workers["inline"] == {"calls": 1, "timedOut": 0}
        # a query to embed is user code (unbounded): the worker pool runs it, under the same deadline
        by_query = facade.resolve({"userId": "alice", "query": "hello", "limit": 5})
        assert by_query["ok"] and facade.status()["workers"]["submitted"] == 2
    finally:
        facade.close()


def test_a_stopped_server_is_answered_fail_open_by_the_deadline(pg_url: str, tmp_path: Path) -> None:
    """SIGSTOP the connection's server process: no statement_timeout can fire; the watchdog shuts the
    socket down at the deadline and the caller gets the degraded answer, then the pool recovers."""
    facade = _facade(pg_url, tmp_path)
    budget = TIMEOUT_MS / 1000
    try:
        assert facade.resolve(REQUEST)["ok"]  # the pool holds its one connection
        pid = _backend_pid(facade)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            answer = facade.resolve(REQUEST)
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert answer["ok"] is False and answer["source"] == "pgvector"
        assert f"timed out after {TIMEOUT_MS} ms" in answer["reason"], answer
        assert within_deadline(took, budget)  # the stopped server never answered: the deadline did
        status = facade.status()["workers"]
        assert status["inline"]["timedOut"] == 1 and status["submitted"] == 1  # only the opening call
        assert status["watchdog"]["abandoned"] >= 1
        for _ in range(50):  # the broken connection was discarded; a new one serves the next call
            if facade.resolve(REQUEST)["ok"]:
                break
            time.sleep(budget / 5)
        else:
            pytest.fail("the pool never recovered after the stopped server")
    finally:
        facade.close()


def test_a_worker_given_up_on_is_freed_at_once_not_at_the_servers_timeout(
    pg_url: str, tmp_path: Path
) -> None:
    """The pool path too: a caller that gives up aborts the running call's socket, so the worker is
    back without waiting for a server that may never answer (saturation by hung calls)."""
    facade = _facade(pg_url, tmp_path)
    budget = TIMEOUT_MS / 1000
    try:
        assert facade.resolve(REQUEST)["ok"]
        pid = _backend_pid(facade)
        os.kill(pid, signal.SIGSTOP)
        try:
            call = facade.begin("resolve", REQUEST)  # the service's path: always on the pool
            started = time.monotonic()
            answer = call.answer_when_due()
            assert answer["ok"] is False and "timed out" in answer["reason"]
            while facade.pool.stats()["busy"] and within_deadline(time.monotonic() - started, budget):
                time.sleep(budget / 20)
            assert facade.pool.stats()["busy"] == 0  # freed while the server is still stopped
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        facade.close()


def test_the_session_timeout_is_sent_once_for_a_steady_deadline_and_cleared_without_one(pg_url: str) -> None:
    ensure_schema(pg_url, "memory_embeddings", 3)
    backend = pgvector.PgvectorBackend(pg_url, pool_max=1)
    sent: list[str] = []
    try:
        budget = 2.0
        for _ in range(5):
            with using_scope(CallScope(Deadline.after(budget), "resolve")):
                backend.resolve(REQUEST)
            with backend._get_pool().connection() as conn:
                sent.append(conn.execute("SHOW statement_timeout").fetchone()[0])
                kept = getattr(conn, pgvector._TIMEOUT_ATTR)
        assert len(set(sent)) == 1 and 0 < kept <= budget * 1000  # set once, under the time left
        backend.resolve(REQUEST)  # no deadline: no leftover timeout may cut it
        with backend._get_pool().connection() as conn:
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"
    finally:
        backend.close()


def test_the_watchdog_aborts_a_running_call_at_its_deadline_and_never_a_finished_one() -> None:
    from deadlines import bound

    from memwork.facade.safety import Watchdog

    budget = 0.05
    dog = Watchdog(name="memwork-watchdog-test")
    hung, done = CallScope(Deadline.after(budget), "hung"), CallScope(Deadline.after(budget), "done")
    aborted = {"hung": threading.Event(), "done": threading.Event()}
    assert hung.on_abandon(aborted["hung"].set) and done.on_abandon(aborted["done"].set)
    dog.watch(done)
    dog.watch(hung)
    done.clear_abandon()  # finished in time: its resource may be reused, it must never be aborted
    done.finish()
    assert aborted["hung"].wait(bound(budget))  # the hung call's abort ran at its deadline
    assert not aborted["done"].is_set() and dog.stats()["abandoned"] == 1
    assert not hung.on_abandon(lambda: None)  # given up: nothing more may be registered


def test_the_watchdog_forgets_calls_that_finished_in_time_as_new_ones_arrive() -> None:
    """A steady stream of calls that finish in time keeps the watchdog's heap at about one entry
    (it held every call of the last deadline's span, and its thread drained them under the lock the
    callers need), and a running call behind them is still abandoned at its deadline."""
    from deadlines import bound

    from memwork.facade.safety import Watchdog

    dog = Watchdog(name="memwork-watchdog-test-stream")
    for _ in range(200):
        scope = CallScope(Deadline.after(60.0), "quick")
        dog.watch(scope)
        scope.finish()
    assert dog.stats() == {"watched": 200, "abandoned": 0, "pending": 1}
    budget = 0.05
    hung = CallScope(Deadline.after(budget), "hung")
    aborted = threading.Event()
    assert hung.on_abandon(aborted.set)
    dog.watch(hung)  # an earlier deadline than the one the thread sleeps until: it re-arms
    assert aborted.wait(bound(budget)) and dog.stats()["abandoned"] == 1
