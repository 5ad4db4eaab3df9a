"""The import harness end to end on a real subprocess: 1,000 memories over 10 users, SIGKILL mid-run,
resume, verification PASS; then a damaged copy FAILs naming the ids (what every source test runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from import_harness import FILE_SOURCE, damage_and_verify, kill_resume_verify, write_source_file

from memwork.migrate.source import SourceRecord

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
    assert run.verification["sourceRows"] == run.verification["destRows"] == 1000
    assert run.verification["sourceUsers"] == 10 and run.verification["models"] == {"test-model-8": 1000}

    damage = damage_and_verify(env, FILE_SOURCE, pg_url)
    assert damage.verification["missingCount"] == 1 and damage.verification["extraCount"] == 1
    assert damage.verification["changedCount"] == 1
