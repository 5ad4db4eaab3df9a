"""The review's flows stay straight: counted calls between memwork's units, and one server check.

A *unit* is a top-level module or subpackage of memwork (``memwork.db``, ``memwork.migrate``, ...).
The counter is a compact copy of the architecture review's ``trace_flow.py``: ``sys.setprofile`` on
every thread, a call counts when the function entered is in another unit than the memwork frame
running it on that thread (generator resumptions, comprehensions, lambdas and module code are
frames, not calls). The review traced 183 such calls for a 100-record Qdrant import (the backfill of
100 rows: 47); the issue asks for at most 60, and for none per record: a source builds its records
page-wise in its own unit, migrate maps the page, the writer and the checkpoint see it once.
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from qdrant_client import QdrantClient, models

from memwork.cli import main
from memwork.db import embedded
from memwork.stores import open_store

MAX_UNIT_CALLS = 60
COLLECTION = "memind_memory"
DIM = 8
_FRAMES = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>", "<module>"}
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # generator, coroutine, async generator


def _unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


class UnitCalls:
    """Calls from one memwork unit into another while a block runs (every thread, its own stack)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (caller unit, callee module.function)
        self._stacks: dict[int, list[str]] = {}

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("memwork"):
            return
        stack = self._stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            code = frame.f_code
            resumed = bool(code.co_flags & _GENERATOR_FLAGS) and frame.f_lasti > 0
            unit = _unit(module)
            if stack and stack[-1] != unit and code.co_name not in _FRAMES and not resumed:
                self.calls.append((stack[-1], f"{module}.{code.co_name}"))
            stack.append(unit)
        elif event == "return" and stack:
            stack.pop()

    def run(self, action: Callable[[], object]) -> UnitCalls:
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        try:
            action()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        return self

    def __len__(self) -> int:
        return len(self.calls)


def _cli(*args: str) -> Callable[[], object]:
    def run() -> object:
        try:
            return main(list(args), standalone_mode=False)
        except SystemExit as exc:  # pragma: no cover - a failing command shows its rc
            assert not exc.code, exc.code
            return None

    return run


def test_the_counter_counts_calls_between_units_only() -> None:
    from memwork.pgvector.schema import index_names

    counted = UnitCalls().run(lambda: index_names("memory_embeddings"))  # its inner name() is the same unit
    assert counted.calls == [("memwork.pgvector", "memwork.identifiers.check_identifier")]


# ---- the import: 100 Qdrant points (qdrant-client local mode) -> pgvector ------------------------
def _storage(path: Path, points: int) -> Path:
    client = QdrantClient(path=str(path))
    client.create_collection(
        COLLECTION, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT)
    )
    rng = np.random.default_rng(16)
    client.upsert(
        COLLECTION,
        [
            models.PointStruct(
                id=n + 1,
                vector=[float(x) for x in rng.normal(size=DIM)],
                payload={
                    "user_id": f"user-{n % 4}",
                    "content": f"memory {n}",
                    "created_at": 1767323045 + n,
                    "session_id": f"s{n % 7}",
                    "metadata": {"n": n},
                },
            )
            for n in range(points)
        ],
    )
    client.close()
    return path


@pytest.fixture
def qdrant_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Point the qdrant source at a fresh local storage of N points."""

    def use(points: int) -> None:
        path = _storage(tmp_path / f"qdrant-{points}-{uuid.uuid4().hex[:6]}", points)
        monkeypatch.setenv("MEMORY_QDRANT_URL", f"local:{path}")
        monkeypatch.setenv("MEMORY_QDRANT_COLLECTION", COLLECTION)
        monkeypatch.setenv("MEMORY_QDRANT_EMBEDDING_MODEL", "qdrant-test-8")

    yield use


def _import(pg_url: str, table: str, page_size: int) -> UnitCalls:
    args = ("import", "--from", "qdrant", "--apply", "--create-schema", "--to", pg_url)
    return UnitCalls().run(_cli(*args, "--table", table, "--page-size", str(page_size)))


def _rows(pg_url: str, table: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]


def test_a_100_record_import_makes_at_most_60_calls_between_units(pg_url, qdrant_env) -> None:
    qdrant_env(100)
    counted = _import(pg_url, "flow_a", 50)
    assert _rows(pg_url, "flow_a") == 100
    assert len(counted) <= MAX_UNIT_CALLS, "\n".join(f"{a} -> {b}" for a, b in counted.calls)
    # the page goes down, never back up: nothing below migrate calls into migrate (or the CLI)
    up = [
        (a, b)
        for a, b in counted.calls
        if a in _BELOW_MIGRATE and _unit(b) in ("memwork.migrate", "memwork.cli")
    ]
    assert not up, up


_BELOW_MIGRATE = {"memwork.backends", "memwork.contracts", "memwork.pgvector", "memwork.db", "memwork.embed"}
_ABOVE = ("memwork.migrate", "memwork.cli")


def test_calls_between_units_do_not_grow_with_the_records(pg_url, qdrant_env) -> None:
    """Twice the records in as many pages: no more calls (none is made per record)."""
    qdrant_env(100)
    small = _import(pg_url, "flow_small", 50)
    qdrant_env(200)
    large = _import(pg_url, "flow_large", 100)
    assert _rows(pg_url, "flow_large") == 200
    assert len(large) <= len(small), "\n".join(f"{a} -> {b}" for a, b in large.calls)


# ---- store info --store pg://embedded/NAME: one resolution, one check ----------------------------
@pytest.fixture
def embedded_store(pg_server) -> Iterator[str]:
    """``pg://embedded/NAME`` holding two entries; the database dropped afterwards."""
    from memwork.entry import Entry

    name = f"info_{uuid.uuid4().hex[:10]}"
    spec = f"pg://embedded/{name}"
    with open_store(spec, create=True) as store:
        for n in range(2):
            store.put(Entry(path=f"p{n}.md", content=f"memory {n}", scope="u1"))
    yield spec
    from memwork.db import dispose_all

    dispose_all()
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_store_info_resolves_and_checks_the_embedded_server_once(
    embedded_store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query if isinstance(query, str) else repr(query))
        return execute(self, query, *args, **kwargs)

    starts: list[object] = []
    start = embedded.start

    def counted_start(*args: Any, **kwargs: Any) -> Any:
        starts.append(args)
        return start(*args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    monkeypatch.setattr(embedded, "start", counted_start)
    capsys.readouterr()
    _cli("store", "info", "--store", embedded_store)()
    assert "entries: 2" in capsys.readouterr().out
    checks = [q for q in sent if "FROM pg_database" in q]
    assert len(checks) == 1, sent  # the database asked for once, on one admin connection
    assert len(starts) == 1  # the server joined once
    assert not [q for q in sent if "CREATE EXTENSION" in q]  # a read runs no DDL


# ---- every source builds its page in its own unit: no call per record -----------------------------
class _Answers:
    """A stand-in for a source's HTTP client (not memwork code: its calls are not counted)."""

    def __init__(self, answer: Callable[[str, int], Any]) -> None:
        self.answer = answer
        self.size = 0

    def get_json(self, path: str, params: Any = None) -> Any:
        return self.answer(path, self.size)

    def post_json(self, path: str, body: Any = None, **_: Any) -> Any:
        return self.answer(path, self.size)


def _weaviate(n: int) -> Any:
    from memwork.backends.weaviate import WeaviateSource

    objects = [
        {"id": str(uuid.UUID(int=k + 1)), "class": "Memory", "vector": [0.5] * DIM,
         "creationTimeUnix": 1767323045000 + k, "properties": {"userId": "u1", "content": f"memory {k}"}}
        for k in range(n)
    ]  # fmt: skip
    return WeaviateSource(_Answers(lambda path, size: {"objects": objects}), "http://weaviate:8080")  # type: ignore[arg-type]


def _letta(n: int) -> Any:
    from memwork.backends.letta import LettaSource

    passages = [
        {"id": f"passage-{k}", "text": f"memory {k}", "tags": ["user:u1"],
         "created_at": "2026-01-02T03:04:05Z", "embedding": [0.5] * DIM,
         "embedding_config": {"embedding_model": "m", "embedding_dim": DIM}}
        for k in range(n)
    ]  # fmt: skip
    return LettaSource(_Answers(lambda path, size: passages), "http://letta:8283", "agent-1")  # type: ignore[arg-type]


def _langgraph(n: int) -> Any:
    from memwork.backends.langgraph import LangGraphSource

    items = [
        {"key": f"k{k}", "namespace": ["memories", "u1"], "value": {"content": f"memory {k}"},
         "created_at": "2026-01-02T03:04:05+00:00", "updated_at": "2026-01-02T03:04:05+00:00"}
        for k in range(n)
    ]  # fmt: skip
    return LangGraphSource(
        _Answers(lambda path, size: {"items": items}), "http://langgraph:2024", prefix=["memories"]
    )  # type: ignore[arg-type]


def _mem0(n: int) -> Any:
    from memwork.backends.mem0 import ENTITIES_PATH, Mem0Source

    memories = [
        {"id": f"m{k}", "user_id": "u1", "memory": f"memory {k}", "created_at": "2026-01-02T03:04:05Z"}
        for k in range(n)
    ]
    users = [{"type": "user", "name": "u1"}]
    return Mem0Source(
        _Answers(lambda path, size: users if path == ENTITIES_PATH else memories), "http://mem0"
    )  # type: ignore[arg-type]


def _redis_streams(n: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    from memwork.backends import redis_streams

    entries = [
        (f"1767323045000-{k}", {"userId": "u1", "content": f"memory {k}", "type": "fact"}) for k in range(n)
    ]
    monkeypatch.setattr(redis_streams, "_xrange", lambda client, stream, start, count: entries)
    source = redis_streams.RedisStreamsSource("redis://127.0.0.1:6379/0")
    monkeypatch.setattr(source, "_client", lambda: None)
    return source


def _legacy_mysql(n: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    from memwork.migrate import legacy_mysql

    rows = [
        {"id": f"id-{k}", "user_id": "u1", "content": f"memory {k}", "type": "fact", "metadata": "{}",
         "created_at": "2026-01-02 03:04:05.000000", "updated_at": "2026-01-02 03:04:05.000000",
         "source_session_id": None, "source_message_id": None}
        for k in range(n)
    ]  # fmt: skip
    source = legacy_mysql.LegacyMySQLSource("mysql://root@127.0.0.1:3306/none")
    monkeypatch.setattr(source, "read_rows", lambda cursor, size: legacy_mysql.RowPage(rows, None))
    return source


@pytest.mark.parametrize("make", [_weaviate, _letta, _langgraph, _mem0, _redis_streams, _legacy_mysql])
def test_a_source_page_crosses_units_as_often_for_10_records_as_for_40(make, monkeypatch) -> None:
    """Records are built page-wise inside the source's unit: one call into the contract per page."""
    counts, pages = [], []
    for n in (10, 40):
        source = make(n, monkeypatch) if "monkeypatch" in make.__code__.co_varnames else make(n)
        counted = UnitCalls().run(partial(lambda s, n: pages.append(s.read_page(None, n)), source, n))
        counts.append(len(counted))
    assert [len(page.records) for page in pages] == [10, 40]
    assert counts[1] == counts[0], counts
