"""The embedded server that ``memwork pgvector url`` started is never stopped by another command's exit
(issue 8, D-25), not even after a kill -9 tore pgserver's pid list. Real processes, a private server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

OTHER_COMMAND = (
    "from memwork.db import embedded; print(embedded.ensure('pg://embedded/other', create=True).text)"
)


@pytest.fixture
def pgdata(tmp_path):
    """A server of its own (short path: Unix socket limits), stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="mwkeep-", dir="/tmp"))
    env = {**os.environ, "MEMWORK_PGDATA": str(root / "pgdata"), "MEMWORK_HOME": str(tmp_path / "home")}
    yield root / "pgdata", env
    _run(env, "-m", "memwork", "pgvector", "url", "--stop", check=False)
    shutil.rmtree(root, ignore_errors=True)


def _run(env, *args, check=True):
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def _works(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def test_pgvector_url_survives_other_commands_and_a_torn_pid_list(pgdata):
    data_dir, env = pgdata
    url = _run(env, "-m", "memwork", "pgvector", "url", "--name", "keep").stdout.strip()
    assert _works(url)
    # another pg://embedded user starts (joins) and exits: the kept server goes on
    assert _run(env, "-c", OTHER_COMMAND).stdout.startswith("postgresql://")
    assert _works(url)

    # a kill -9 inside pgserver's non-atomic rewrite of its pid list leaves it torn ...
    pid_list = data_dir / ".handle_pids.json"
    pid_list.write_text("[4194301, ")
    _run(env, "-c", OTHER_COMMAND)  # ... which no longer fails every start
    assert _works(url)
    # ... or empty: the last user that exits now sees only itself, and must still not stop it
    pid_list.write_text("")
    _run(env, "-c", OTHER_COMMAND)
    assert _works(url)

    _run(env, "-m", "memwork", "pgvector", "url", "--stop")
    assert not _works(url)
    assert not (data_dir / ".memwork-keep-running").exists()


def test_without_pgvector_url_the_last_user_stops_the_server(pgdata):
    """The other half of the contract: nobody keeps it, so a command's exit stops what it started --
    also when a user killed with -9 (a kernel nbval killed) never took its pid off the list."""
    data_dir, env = pgdata
    url = _run(env, "-c", OTHER_COMMAND).stdout.strip()
    assert url.startswith("postgresql://") and not _works(url)
    (data_dir / ".handle_pids.json").write_text("[4194301]")  # no such process
    _run(env, "-c", OTHER_COMMAND)
    assert not _works(url)
