"""The import harness end to end on a real subprocess: 1,000 memories over 10 users, SIGKILL mid-run,
resume, verification PASS; then a damaged copy FAILs naming the ids (what every source test runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from import_harness import (
    FILE_SOURCE,
    FileSource,
    committed_rows,
    damage_and_verify,
    import_args,
    kill_resume_verify,
    write_source_file,
)

from memwork.certify import CertifyOptions, certify
from memwork.contracts import SourceRecord
from memwork.errors import ImportRunning
from memwork.migrate.run import ImportOptions, run_import

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _records(n: int = 1000, users: int = 10, dims: int = 8) -> list[SourceRecord]:
    start = datetime(2024, 3, 1, tzinfo=UTC)
    return [
        SourceRecord(
            id=f"mem-{i:05d}",
            user_id=f"user-{i % users}",
            content=f"memory {i} of user {i % users}",
            metadata={"n": i},
            created_at=start + timedelta(minutes=i),
            vector=[((i * 7 + k) % 11) / 10 + 0.1 for k in range(dims)],
            model="test-model-8",
        )
        for i in range(n)
    ]


def test_file_source_killed_mid_import_resumes_and_verifies(pg_url, tmp_path):
    records = _records()
    env = {
        "MEMWORK_TEST_SOURCE_FILE": str(write_source_file(tmp_path / "source.jsonl", records)),
        "MEMWORK_TEST_SOURCE_KEY": "file:harness-test",
    }
    ids = [r.id for r in records]
    run = kill_resume_verify(env, FILE_SOURCE, pg_url, expected_ids=ids, kill_after_rows=300)
    assert 300 <= run.killed_at_rows < 1000
    assert run.resume["rowsWritten"] == 1000 - run.killed_at_rows  # the resume wrote only the rest
    rows = run.verification["rows"]
    assert rows["source"] == rows["dest"] == 1000 and rows["by_kind"] == {}
    assert run.verification["vectors"]["models"] == {"test-model-8": 1000}

    damage = damage_and_verify(env, FILE_SOURCE, pg_url)
    assert damage.verification["rows"]["by_kind"] == {"changed": 1, "extra": 1, "missing": 1}


def test_a_second_import_of_the_same_source_is_refused_while_the_first_runs(pg_url, tmp_path):
    path = write_source_file(tmp_path / "source.jsonl", _records(200))
    env = {"MEMWORK_TEST_SOURCE_FILE": str(path), "MEMWORK_TEST_SOURCE_KEY": "file:two-at-once"}
    first = subprocess.Popen(
        [sys.executable, "-m", "memwork", *import_args(FILE_SOURCE, pg_url)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while committed_rows(conn) < 20:
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.005)
        with conn.transaction():  # hold the first run at its next commit
            conn.execute("SELECT 1 FROM memwork_import_checkpoints FOR UPDATE")
            second = ImportOptions(
                source=FileSource(path, "file:two-at-once"), database_url=pg_url, apply=True
            )
            with pytest.raises(ImportRunning, match="another import"):
                run_import(second)
            assert first.poll() is None
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    result = certify(CertifyOptions(dest_url=pg_url, source=FileSource(path, "file:two-at-once")))
    assert result.verdict == "PASS" and result.rows.dest_rows == 200, result.reasons()
