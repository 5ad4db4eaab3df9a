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


def _lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_stop_is_one_clean_line_and_a_second_stop_too(pgdata, tmp_path):
    """`pgvector url --stop` stops the server once -- no second `pg_ctl stop` from an exit hook, no
    pgserver failure lines -- and a repeated `--stop` neither starts a server nor complains."""
    data_dir, env = pgdata
    url = _run(env, "-m", "memwork", "pgvector", "url", "--name", "t1").stdout.strip()
    assert _works(url)

    first = _run(env, "-m", "memwork", "pgvector", "url", "--stop")
    assert _lines(first) == ["stopped"] and first.stdout == ""
    assert not _works(url) and not (data_dir / "postmaster.pid").exists()

    second = _run(env, "-m", "memwork", "pgvector", "url", "--stop")
    assert _lines(second) == ["not running (nothing to stop)"]
    assert not (data_dir / "postmaster.pid").exists()  # it did not start one to stop it
    as_json = _run(env, "-m", "memwork", "pgvector", "url", "--stop", "--json")
    assert as_json.stderr == "" and '"wasRunning": false' in as_json.stdout

    # a workspace that never ran a server: one line, and no workspace or data directory made for it
    fresh = {k: v for k, v in env.items() if k != "MEMWORK_PGDATA"} | {
        "MEMWORK_HOME": str(tmp_path / "never")
    }
    never = _run(fresh, "-m", "memwork", "pgvector", "url", "--stop")
    assert _lines(never) == ["not running (nothing to stop)"]
    assert not (tmp_path / "never").exists()


def test_stop_in_the_process_that_started_the_server_leaves_nothing_for_exit(pgdata):
    """A process that started the server and stopped it itself runs no stop again at exit."""
    _data_dir, env = pgdata
    script = (
        "from memwork.db import embedded as embedded_pg\n"
        "embedded_pg.start()\n"
        "assert embedded_pg.stop() is True\n"
        "assert embedded_pg.stop() is False\n"
        "print('done')\n"
    )
    done = _run(env, "-c", script)
    assert _lines(done) == ["done"]
