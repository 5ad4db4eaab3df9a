"""Undo after kill -9 (issue 8 point 5), with real processes.

A ``merge-duplicates --apply`` killed mid-run is undone without --force (the write-ahead journal's
last change may never have reached the store), and a killed ``undo`` neither marks the run undone nor
blocks the retry. Every case ends with the store exactly as exported before the run.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memwork.defrag import list_runs, read_run, run_action, undo
from memwork.defrag.journal import journal_dir
from memwork.embed import HashEmbedder
from memwork.entry import Entry
from memwork.errors import CheckFailed, StoreLocked
from memwork.stores import open_store

EMB = HashEmbedder(384)
CLUSTERS = 100  # 300 entries -> 300 journaled changes
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "iota", "kappa", "lambda", "sigma"]


@pytest.fixture(params=["filesystem", "sqlite"])
def spec(request, tmp_path) -> str:
    return str(tmp_path / "fs") if request.param == "filesystem" else f"sqlite:///{tmp_path / 's.db'}"


def new_store(spec: str):
    """Open a store that may not exist yet (reading commands no longer create one)."""
    if "create" in inspect.signature(open_store).parameters:
        return open_store(spec, create=True)
    return open_store(spec)  # pragma: no cover - before open_store(create=)


def seed(spec: str) -> list[dict]:
    """CLUSTERS groups of three near-duplicates; returns the pre-run export."""
    entries = []
    for c in range(CLUSTERS):
        base = " ".join(f"{w}{c}" for w in WORDS)
        for k, extra in enumerate(("", " again", " once more")):  # no number: one/two would contradict
            text = base + extra
            entries.append(Entry(path=f"c{c}/e{k}.md", content=text, embedding=EMB.embed([text])[0]))
    with new_store(spec) as store:
        store.put_many(entries)
    return export(spec)


def export(spec: str) -> list[dict]:
    with open_store(spec) as store:
        return [e.to_record() for e in store.all_entries()]


def memwork(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwork", *args], capture_output=True, text=True, timeout=120, check=False
    )


def kill_when_journal_has(proc: subprocess.Popen[bytes], lines: int) -> tuple[str, int]:
    """SIGKILL ``proc`` as soon as the run file it creates has ``lines`` lines; (run id, lines seen)."""
    known = {p.name for p in journal_dir().glob("*.jsonl")}
    run_file: Path | None = None
    offset = seen = 0
    deadline = time.monotonic() + 90
    while proc.poll() is None and time.monotonic() < deadline:
        if run_file is None:
            new = [p for p in journal_dir().glob("*.jsonl") if p.name not in known]
            run_file = new[0] if new else None
        if run_file is not None:
            with run_file.open("rb") as fh:  # count only what was appended since the last look
                fh.seek(offset)
                chunk = fh.read()
            offset += len(chunk)
            seen += chunk.count(b"\n")
            if seen >= lines:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return run_file.stem, seen
        time.sleep(0.002)
    proc.kill()
    pytest.fail(f"the process ended (rc {proc.returncode}) before its journal had {lines} lines")


def start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "memwork", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def runs_by_id() -> dict[str, dict]:
    return {r["run_id"]: r for r in list_runs()}


@pytest.mark.parametrize("kill_at", [20, 150])
def test_killed_apply_is_undone_without_force(spec, kill_at):
    before = seed(spec)
    apply = start("defrag", "merge-duplicates", "--store", spec, "--apply")
    run_id, _ = kill_when_journal_has(apply, kill_at)
    assert apply.returncode == -signal.SIGKILL
    assert runs_by_id()[run_id]["status"] == "incomplete"
    assert export(spec) != before

    undone = memwork("defrag", "undo", run_id, "--store", spec, "--json")
    assert undone.returncode == 0, undone.stderr
    assert json.loads(undone.stdout)["undone"] == run_id
    assert export(spec) == before
    assert runs_by_id()[run_id]["undone_by"] == json.loads(undone.stdout)["run_id"]


# kill -9 exactly in the write-ahead gap: the change line is on disk, the store write never happened
GAP_KILL = textwrap.dedent(
    """
    import os, signal, sys
    from memwork.defrag import journal, run_action
    from memwork.stores import open_store

    record, kill_at = journal.Journal.record, int(sys.argv[2])

    def record_then_die(self, change):
        record(self, change)
        if self.count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    journal.Journal.record = record_then_die
    with open_store(sys.argv[1]) as store:
        if len(sys.argv) > 3:
            journal.undo(sys.argv[3], store)
        else:
            run_action(store, "merge_duplicates", apply=True)
    """
)


def gap_kill(spec: str, kill_at: int, undo_run: str | None = None) -> None:
    args = [sys.executable, "-c", GAP_KILL, spec, str(kill_at), *([undo_run] if undo_run else [])]
    done = subprocess.run(args, capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.mark.parametrize("kill_at", [1, 100, 250])  # merges, stubs (the plan writes survivors first)
def test_kill_between_journal_line_and_write_is_undone_without_force(spec, kill_at):
    before = seed(spec)
    gap_kill(spec, kill_at)
    (run_id,) = runs_by_id()
    last = read_run(run_id).changes[-1]
    assert last["seq"] == kill_at
    with open_store(spec) as store:  # the journaled change never reached the store
        current = store.get(last["path"], scope=last["scope"])
        assert current.to_record() == last["before"] != last["after"]

    undone = memwork("defrag", "undo", run_id, "--store", spec)
    assert undone.returncode == 0, undone.stderr  # before: "changed after run ... (use force)", rc 1
    assert export(spec) == before


def test_killed_undo_does_not_count_and_the_retry_works(spec):
    before = seed(spec)
    with open_store(spec) as store:
        run_id = run_action(store, "merge_duplicates", apply=True).run_id
    after_run = export(spec)

    undo = start("defrag", "undo", run_id, "--store", spec)
    undo_id, _ = kill_when_journal_has(undo, 60)
    runs = runs_by_id()
    assert runs[undo_id]["status"] == "incomplete" and runs[undo_id]["undoes"] == run_id
    assert runs[run_id]["undone_by"] is None  # before: the killed undo counted as done
    assert export(spec) not in (before, after_run)  # half restored

    retry = memwork("defrag", "undo", run_id, "--store", spec, "--json")
    assert retry.returncode == 0, retry.stderr  # before: "already undone by <killed undo> (use force)"
    assert export(spec) == before
    retry_id = json.loads(retry.stdout)["run_id"]
    assert runs_by_id()[run_id]["undone_by"] == retry_id
    again = memwork("defrag", "undo", run_id, "--store", spec)
    assert again.returncode == 1 and f"already undone by {retry_id}" in again.stderr


def test_undo_killed_in_its_write_ahead_gap_then_retry(spec):
    before = seed(spec)
    with open_store(spec) as store:
        run_id = run_action(store, "merge_duplicates", apply=True).run_id
    gap_kill(spec, 40, undo_run=run_id)
    retry = memwork("defrag", "undo", run_id, "--store", spec)
    assert retry.returncode == 0, retry.stderr
    assert export(spec) == before
    statuses = sorted(r["status"] for r in list_runs() if r.get("undoes") == run_id)
    assert statuses == ["incomplete", "ok"]


def test_postgresql_killed_apply_then_killed_undo_then_retry(pg_url):
    before = seed(pg_url)
    gap_kill(pg_url, 100)
    (run_id,) = runs_by_id()
    gap_kill(pg_url, 40, undo_run=run_id)
    assert runs_by_id()[run_id]["undone_by"] is None
    retry = memwork("defrag", "undo", run_id, "--store", pg_url)
    assert retry.returncode == 0, retry.stderr
    assert export(pg_url) == before


def test_real_concurrent_edit_is_still_refused(spec):
    before = seed(spec)
    gap_kill(spec, 80)
    (run_id,) = runs_by_id()
    edited = read_run(run_id).changes[10]
    with open_store(spec) as store:
        entry = store.get(edited["path"], scope=edited["scope"])
        entry.content += " edited by someone else"
        store.put(entry)
    refused = memwork("defrag", "undo", run_id, "--store", spec)
    assert refused.returncode == 1
    assert f"path={edited['path']!r}: changed after run {run_id}" in refused.stderr
    assert "nothing undone" in refused.stderr
    forced = memwork("defrag", "undo", run_id, "--store", spec, "--force")
    assert forced.returncode == 0, forced.stderr
    assert export(spec) == before


# ---- undo is safe against concurrent runs and writers (H3's run lock and compare-and-set) ----------
HOLD_LOCK = textwrap.dedent(
    """
    import sys
    from memwork.stores import open_store

    with open_store(sys.argv[1]) as store, store.run_lock(None):
        print("locked", flush=True)
        sys.stdin.readline()  # hold the lock until the test says so
    """
)


def test_undo_waits_for_another_runs_lock_and_gives_up_writing_nothing(spec):
    seed(spec)
    with open_store(spec) as store:
        run_id = run_action(store, "merge_duplicates", apply=True).run_id
    after_run = export(spec)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, spec], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with open_store(spec) as store, pytest.raises(StoreLocked):
            undo(run_id, store, lock_timeout=0.5)
        waited = memwork("defrag", "undo", run_id, "--store", spec, "--lock-timeout", "0.5")
        assert waited.returncode == 1 and "holds its lock; gave up after 0.5 s" in waited.stderr
        assert export(spec) == after_run
        assert [r["run_id"] for r in list_runs()] == [run_id]  # not even an undo journal
    finally:
        holder.communicate("release\n", timeout=30)
    bad = memwork("defrag", "undo", run_id, "--store", spec, "--lock-timeout", "-1")
    assert bad.returncode == 2 and "lock_timeout=-1.0" in bad.stderr
    with open_store(spec) as store:
        undo(run_id, store, lock_timeout=10)


class EditAfterFirstWrite:
    """A progress listener that, after undo's first write (the checks have passed), lets an ordinary
    writer edit an entry the undo has yet to write."""

    def __init__(self, spec: str, victim: dict) -> None:
        self.spec, self.victim, self.done = spec, victim, 0

    def start(self, description, total) -> None:
        pass

    def advance(self, n=1) -> None:
        self.done += n
        if self.done == 1:
            with open_store(self.spec) as other:
                entry = other.get(self.victim["path"], scope=self.victim["scope"])
                other.put(entry.copy(content=entry.content + " EDIT"))


def test_an_edit_between_check_and_write_stops_the_undo_and_is_kept(spec):
    before = seed(spec)
    with open_store(spec) as store:
        run_id = run_action(store, "merge_duplicates", apply=True).run_id
    victim = read_run(run_id).changes[-2]  # undo restores in reverse: this is its second write
    with open_store(spec) as store, pytest.raises(CheckFailed) as info:
        undo(run_id, store, progress=EditAfterFirstWrite(spec, victim))
    message = str(info.value)
    assert f"path={victim['path']!r}: changed by another writer" in message
    assert "stopped after restoring 1 of 300 entries" in message
    with open_store(spec) as store:
        assert store.get(victim["path"], scope=victim["scope"]).content.endswith(" EDIT")  # not lost
    runs = runs_by_id()
    assert runs[run_id]["undone_by"] is None
    assert [r["status"][:6] for r in runs.values() if r.get("undoes")] == ["failed"]
    with open_store(spec) as store:
        undo(run_id, store, force=True)
    assert export(spec) == before


if os.name != "posix":  # pragma: no cover - SIGKILL
    pytest.skip("needs POSIX signals", allow_module_level=True)
