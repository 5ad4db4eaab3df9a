"""Shared set-up for the pgvector benchmarks: a scratch MariaDB database and an embedded PostgreSQL one."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def admin_connection(admin_url: str, *, autocommit: bool = False) -> Any:
    """A PyMySQL connection to the MariaDB server of ``admin_url`` (no database selected)."""
    import pymysql

    parts = urlsplit(admin_url)
    return pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        autocommit=autocommit,
    )


@contextmanager
def scratch_mysql(admin_url: str) -> Iterator[str]:
    """A fresh MariaDB database (dropped afterwards); yields its URL."""
    parts = urlsplit(admin_url)
    conn = admin_connection(admin_url)
    name = f"mwbench_{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    auth = parts.username or "root"
    if parts.password:
        auth += f":{parts.password}"
    try:
        yield f"mysql://{auth}@{parts.hostname or '127.0.0.1'}:{parts.port or 3306}/{name}"
    finally:
        from memwork.db import dispose_all

        dispose_all()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


@contextmanager
def scratch_pg(data_dir: str | None) -> Iterator[str]:
    """A fresh pgvector database on the embedded server (data dir: arg, $MEMWORK_PGDATA or a temp dir)."""
    import psycopg

    from memwork.db import embedded

    chosen = data_dir or os.environ.get("MEMWORK_PGDATA")
    own = not chosen  # a server in a temp dir of our own is stopped and deleted when we exit
    if not chosen:
        chosen = str(Path(tempfile.mkdtemp(prefix="mwpgbench-", dir="/tmp")) / "pgdata")
    os.environ["MEMWORK_PGDATA"] = chosen
    server = embedded.start(chosen, cleanup_mode="delete" if own else None)
    name = f"bench_{uuid.uuid4().hex[:8]}"
    url = embedded.server_url(name)
    try:
        yield url
    finally:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if own:
            embedded.stop(chosen)
            shutil.rmtree(Path(chosen).parent, ignore_errors=True)
