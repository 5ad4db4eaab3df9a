"""End-to-end harness for migration sources: import killed mid-run -> resume -> verify PASS; damage -> FAIL.

Every source test (qdrant, weaviate, mem0, letta, langgraph, redis-streams) uses the same two calls::

    from import_harness import damage_and_verify, kill_resume_verify

    def test_redis_streams_source_end_to_end(redis_url, redis_prefix, pg_url):
        ids = load_1000_memories_over_10_users(redis_url, redis_prefix)   # your fixture data
        env = {"MEMORY_REDIS_STREAMS_URL": redis_url, ...}                # the source's own variables
        run = kill_resume_verify(env, "redis-streams", pg_url, expected_ids=ids, kill_after_rows=300)
        assert run.verification["verdict"] == "PASS"                      # (already asserted)
        damage_and_verify(env, "redis-streams", pg_url)                   # asserts FAIL naming the ids

:func:`kill_resume_verify` runs ``memwork import --apply`` in a real subprocess (``sys.executable -m
memwork``, the given env on top of this process's), and once the committed checkpoint shows at least
``kill_after_rows`` rows it takes a row lock on that checkpoint (the import blocks in its next page's
transaction, rows inserted but not committed), checks the import is still running, SIGKILLs it, and
releases the lock. It then asserts that the destination holds exactly the committed rows (nothing
half-written), runs ``--resume`` to the end, asserts every expected id arrived exactly once, runs
``memwork import-verify`` and asserts PASS. ``vectors``/``embedder`` pass through (a source without
vectors needs ``embedder="hash:16"`` or similar); the table is created with ``--create-schema``.

:func:`damage_and_verify` then changes the content of one destination row, deletes another and
inserts a foreign row claiming to come from the source, runs ``import-verify`` and asserts FAIL with
exit 1 naming the changed, missing and extra ids.

:class:`FileSource` (``source_from_env``) is a test source a subprocess can load with
``--from module:tests/import_harness.py``: it pages through a JSON-lines file named by
``MEMWORK_TEST_SOURCE_FILE`` (the fields of :class:`~memwork.contracts.SourceRecord`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memwork.contracts import Page, SourceRecord

HARNESS_FILE = Path(__file__).resolve()
ROOT = HARNESS_FILE.parents[1]
TABLE = "memory_embeddings"


# ---- a file-backed test source (loadable in a subprocess) ---------------------------------------


def record_to_json(record: SourceRecord) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": record.id,
        "user_id": record.user_id,
        "content": record.content,
        "type": record.type,
        "metadata": dict(record.metadata),
        "session_id": record.session_id,
        "message_id": record.message_id,
        "agent_id": record.agent_id,
        "model": record.model,
        "vector": list(record.vector) if record.vector is not None else None,
    }
    for stamp in ("created_at", "updated_at"):
        value = getattr(record, stamp)
        data[stamp] = value.isoformat() if value is not None else None
    return data


def record_from_json(data: Mapping[str, Any]) -> SourceRecord:
    stamps = {
        k: datetime.fromisoformat(data[k]) if data.get(k) else None for k in ("created_at", "updated_at")
    }
    return SourceRecord(
        id=data["id"],
        user_id=data["user_id"],
        content=data["content"],
        type=data.get("type") or "fact",
        metadata=data.get("metadata") or {},
        session_id=data.get("session_id"),
        message_id=data.get("message_id"),
        agent_id=data.get("agent_id"),
        model=data.get("model"),
        vector=data.get("vector"),
        **stamps,
    )


def write_source_file(path: Path, records: Sequence[SourceRecord]) -> Path:
    path.write_text("".join(json.dumps(record_to_json(r)) + "\n" for r in records), encoding="utf-8")
    return path


class ListSource:
    """A list-backed source following the protocol; the cursor is the offset of the next record."""

    def __init__(
        self, records: Sequence[SourceRecord], *, name: str = "list", key: str = "list:test"
    ) -> None:
        self.name, self._key, self.records = name, key, list(records)
        self.reads: list[tuple[str | None, int]] = []
        self.closed = False

    @property
    def key(self) -> str:
        return self._key

    def read_page(self, cursor: str | None, size: int) -> Page:
        self.reads.append((cursor, size))
        start = int(cursor or 0)
        end = start + size
        return Page(self.records[start:end], str(end) if end < len(self.records) else None)

    def close(self) -> None:
        self.closed = True


class FileSource(ListSource):
    """:class:`ListSource` over a JSON-lines file (re-read on every open, so tests can change it)."""

    def __init__(self, path: Path, key: str) -> None:
        lines = path.read_text(encoding="utf-8").splitlines()
        super().__init__([record_from_json(json.loads(line)) for line in lines if line], name="file", key=key)


def source_from_env(env: Mapping[str, str]) -> FileSource:
    """``--from module:tests/import_harness.py``: ``MEMWORK_TEST_SOURCE_FILE`` (required) and
    ``MEMWORK_TEST_SOURCE_KEY`` (default ``file:<path>``)."""
    from memwork.contracts import require

    path = Path(require(env, "MEMWORK_TEST_SOURCE_FILE"))
    return FileSource(path, env.get("MEMWORK_TEST_SOURCE_KEY") or f"file:{path}")


FILE_SOURCE = f"module:{HARNESS_FILE}"


# ---- running the CLI ---------------------------------------------------------------------------


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def memwork_cli(env: Mapping[str, str], *args: str, timeout: float = 300) -> CliRun:
    """``python -m memwork ARGS`` with ``env`` on top of this process's environment."""
    proc = subprocess.run(
        [sys.executable, "-m", "memwork", *args],
        env=_full_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def _full_env(env: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, **env}


def import_args(
    source_name: str,
    pg_url: str,
    *,
    table: str = TABLE,
    page_size: int = 20,
    vectors: str = "auto",
    embedder: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    args = ["import", "--from", source_name, "--to", pg_url, "--table", table, "--apply", "--json"]
    args += ["--page-size", str(page_size), "--vectors", vectors, "--create-schema"]
    if embedder:
        args += ["--embedder", embedder]
    return [*args, *extra]


def verify_args(source_name: str, pg_url: str, *, table: str = TABLE) -> list[str]:
    return ["import-verify", "--from", source_name, "--to", pg_url, "--table", table, "--json"]


# ---- the checkpoint and the destination, read directly -----------------------------------------


def committed_rows(conn: Any, table: str = TABLE) -> int:
    """Rows written as committed with the import's checkpoints into ``table`` (0 before the first)."""
    if conn.execute("SELECT to_regclass('memwork_import_checkpoints')").fetchone()[0] is None:
        return 0
    row = conn.execute(
        "SELECT coalesce(sum(rows_written), 0) FROM memwork_import_checkpoints WHERE target_table = %s",
        (table,),
    ).fetchone()
    return int(row[0])


def destination_ids(pg_url: str, source_key: str | None = None, table: str = TABLE) -> list[str]:
    """Every source_memory_id in ``table`` (of one source when ``source_key`` is given), with repeats."""
    import psycopg

    with psycopg.connect(pg_url) as conn:
        if source_key is None:
            rows = conn.execute(f'SELECT source_memory_id FROM "{table}"').fetchall()
        else:
            rows = conn.execute(
                f"SELECT source_memory_id FROM \"{table}\" WHERE metadata->>'_memworkSource' = %s",
                (source_key,),
            ).fetchall()
    return [r[0] for r in rows]


def _kill_when_committed(
    proc: subprocess.Popen[str], pg_url: str, rows: int, table: str, deadline_s: float
) -> int:
    """Block the import at its next commit once ``rows`` are committed, SIGKILL it, release; returns
    the committed rows at the kill."""
    import psycopg

    deadline = time.monotonic() + deadline_s
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(
                    f"import ended before the kill (rc {proc.returncode}): {err[-2000:]}{out[-500:]}"
                )
            if committed_rows(conn, table) >= rows:
                with conn.transaction():
                    conn.execute(
                        "SELECT 1 FROM memwork_import_checkpoints WHERE target_table = %s FOR UPDATE",
                        (table,),
                    )
                    seen = committed_rows(conn, table)
                    time.sleep(0.2)  # the import reaches its next checkpoint upsert and waits on the lock
                    assert proc.poll() is None, "the import finished before it could be killed"
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
                return seen
            time.sleep(0.005)
    proc.kill()
    raise AssertionError(f"the import did not commit {rows} rows within {deadline_s} s")


def _wait_for_orphan_transactions(pg_url: str, timeout_s: float = 30) -> None:
    """The killed client's server backend rolls back (and drops the import's advisory lock) once it
    notices the closed socket; wait for that, or the resume would find the import still "running"."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state <> 'idle'"
            ).fetchone()[0]
            locks = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()[0]
            if busy == 0 and locks == 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"the killed import's server session did not end within {timeout_s} s")


@dataclass
class HarnessRun:
    """What :func:`kill_resume_verify` saw: committed rows at the kill, the resume's and the
    verification's JSON reports."""

    killed_at_rows: int
    resume: dict[str, Any]
    verification: dict[str, Any]
    source_key: str = ""


def kill_resume_verify(
    env: Mapping[str, str],
    source_name: str,
    pg_url: str,
    *,
    expected_ids: Sequence[str],
    kill_after_rows: int,
    table: str = TABLE,
    page_size: int = 20,
    vectors: str = "auto",
    embedder: str | None = None,
    deadline_s: float = 120,
) -> HarnessRun:
    """Import ``source_name`` into ``pg_url`` killed once (SIGKILL) mid-run, resume, verify PASS.

    ``expected_ids``: every id the source holds (each must arrive exactly once). ``kill_after_rows``
    must be well below ``len(expected_ids)`` (the kill needs pages still to go)."""
    import psycopg

    assert 0 < kill_after_rows < len(expected_ids) - page_size, "kill_after_rows leaves no page to kill in"
    args = import_args(
        source_name, pg_url, table=table, page_size=page_size, vectors=vectors, embedder=embedder
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "memwork", *args],
        env=_full_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    seen = _kill_when_committed(proc, pg_url, kill_after_rows, table, deadline_s)
    assert kill_after_rows <= seen < len(expected_ids), seen
    _wait_for_orphan_transactions(pg_url)
    with psycopg.connect(pg_url) as conn:
        in_table = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    assert in_table == seen, f"{in_table} rows in {table} but {seen} committed with the checkpoint"

    resumed = memwork_cli(env, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    report = resumed.json
    assert report["resumed"] is True and report["startCursor"] is not None, report
    assert report["checkpoint"]["finished"] is True, report["checkpoint"]
    assert report["checkpoint"]["rowsWritten"] == len(set(expected_ids)), report["checkpoint"]

    got = destination_ids(pg_url, report["sourceKey"], table)
    assert len(got) == len(set(got)), "an id arrived twice"
    assert sorted(got) == sorted(set(expected_ids)), "the destination ids are not the source's"

    verified = memwork_cli(env, *verify_args(source_name, pg_url, table=table))
    result = verified.json
    assert verified.returncode == 0 and result["verdict"] == "PASS", result["reasons"]
    return HarnessRun(seen, report, result, source_key=report["sourceKey"])


@dataclass
class Damage:
    """What :func:`damage_and_verify` did and what the verification said."""

    changed_id: str
    deleted_id: str
    extra_id: str
    verification: dict[str, Any]


def damage_and_verify(env: Mapping[str, str], source_name: str, pg_url: str, *, table: str = TABLE) -> Damage:
    """Change one imported row's content, delete another, add a foreign one claiming this source;
    assert ``import-verify`` exits 1 with FAIL naming all three ids (and the users whose counts moved)."""
    import psycopg

    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            f'SELECT source_memory_id FROM "{table}" '
            "WHERE metadata ? '_memworkSource' ORDER BY source_memory_id LIMIT 2"
        ).fetchall()
        assert len(rows) == 2, "damage_and_verify needs an imported table"
        (changed,), (deleted,) = rows
        extra = "zz-harness-extra-row"
        conn.execute(
            f'UPDATE "{table}" SET content = content || %s WHERE source_memory_id = %s',
            (" (damaged)", changed),
        )
        conn.execute(f'DELETE FROM "{table}" WHERE source_memory_id = %s', (deleted,))
        conn.execute(
            f'INSERT INTO "{table}" (user_id, content, embedding, embedding_model, source_memory_id, '
            f'metadata) SELECT user_id, content, embedding, embedding_model, %s, metadata FROM "{table}" '
            "WHERE source_memory_id = %s",
            (extra, changed),
        )
    verified = memwork_cli(env, *verify_args(source_name, pg_url, table=table))
    assert verified.returncode == 1, (verified.returncode, verified.stderr)
    result = verified.json
    assert result["verdict"] == "FAIL"
    reasons = "\n".join(result["reasons"])
    assert changed in named(result, "changed") and changed in reasons, reasons
    assert deleted in named(result, "missing") and deleted in reasons, reasons
    assert extra in named(result, "extra") and extra in reasons, reasons
    assert result["repair"].startswith(f"memwork import --from {source_name} --repair ")
    return Damage(changed, deleted, extra, result)


def named(summary: Mapping[str, Any], kind: str) -> list[str]:
    """The keys a verification's ``summary.json`` names as bad rows of ``kind`` (first 50)."""
    return [b["key"] for b in summary["rows"]["first_bad"] if b["kind"] == kind]
