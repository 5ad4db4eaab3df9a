"""No lost update during a defrag apply: real processes racing a run on filesystem, SQLite and
PostgreSQL stores (issue 8 point 3 and 7: the run lock, compare-and-set writes, ``full`` telling the
truth about what it applied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memwork.defrag import execute, run_action
from memwork.defrag.actions import stopped_run_dict
from memwork.defrag.apply import fingerprint
from memwork.defrag.plan import Operation, Plan
from memwork.entry import Entry, utcnow
from memwork.errors import PlanConflict, RunStopped, StoreLocked, WriteConflict
from memwork.stores import open_store

MW = [sys.executable, "-m", "memwork"]
OLD = datetime(2025, 1, 1, tzinfo=UTC)


# ---- helpers ------------------------------------------------------------------------------------
def mw(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MW, *args], capture_output=True, text=True, timeout=timeout)


def mw_start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*MW, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def python_start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def start_writer(spec: str, paths: list[str]) -> subprocess.Popen[str]:
    """The :data:`WRITER` process, returned once it is ready to pounce."""
    writer = python_start(WRITER, spec, str(journal_dir()), json.dumps(paths))
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    return writer


def journal_dir() -> Path:
    return Path(os.environ["MEMWORK_HOME"]) / "journal"


def journaled_changes(run_id: str) -> list[dict]:
    lines = (journal_dir() / f"{run_id}.jsonl").read_text(encoding="utf-8").splitlines()
    return [d for d in map(json.loads, filter(None, lines)) if d.get("type") == "change"]


def seed_duplicates(spec: str, pairs: int, *, junk: int = 0, metadata: dict | None = None) -> None:
    """``pairs`` exact-duplicate pairs (each a merge + a stub) and ``junk`` old, bare, unique entries."""
    entries = []
    for i in range(pairs):
        body = f"note {i} about the topic number {i} with some words alpha beta gamma delta {i * 7}"
        for k in range(2):
            stamp = OLD.replace(day=k + 1)
            meta = dict(metadata if metadata is not None else {"type": "fact", "tags": ["t"]})
            entries.append(
                Entry(f"dup/n{i:04d}-{k}.md", body, metadata=meta, created_at=OLD, updated_at=stamp)
            )
    for j in range(junk):
        text = f"junk {j} " + " ".join(f"w{j}x{n}" for n in range(12))
        entries.append(Entry(f"junk/j{j:03d}.md", text, created_at=OLD, updated_at=OLD))
    with open_store(spec, create=True) as store:
        store.put_many(entries)


def snapshot(spec: str) -> dict[tuple[str, str], dict]:
    """Every entry as a record, hits left out (reads may count hits)."""
    with open_store(spec) as store:
        return {e.key: e.to_record() | {"hits": 0} for e in store.iter_entries()}


def dangling_stubs(spec: str) -> list[str]:
    with open_store(spec) as store:
        entries = {e.key: e for e in store.iter_entries()}
    return [e.path for e in entries.values() if e.is_stub and (e.scope, e.redirect_to) not in entries]


#: waits for the run's first journaled change (its plan check has passed), then edits ``paths``
WRITER = r"""
import glob, json, os, sys, time
from memwork.stores import open_store
spec, jdir, paths = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = open_store(spec)
print("ready", flush=True)
deadline = time.time() + 60
while time.time() < deadline:
    files = glob.glob(os.path.join(jdir, "*.jsonl"))
    if files and sum(1 for _ in open(files[0])) >= 2:
        break
    time.sleep(0.002)
else:
    sys.exit("the run never journaled a change")
with store:
    for i, path in enumerate(paths):
        e = store.get(path)
        store.write(e.path, e.content + f" CONCURRENT-EDIT-{i}", title=e.title, metadata=e.metadata,
                    embedding=e.embedding, scope=e.scope)
print("edited", len(paths))
"""

#: holds the run lock of a store (argv: spec, scope or "-") until killed
HOLDER = r"""
import sys, time
from memwork.stores import open_store
with open_store(sys.argv[1]) as store, store.run_lock(None if sys.argv[2] == "-" else sys.argv[2]):
    print("held", flush=True)
    time.sleep(60)
"""


# ---- (a) a writer edits entries while merge-duplicates --apply runs ----------------------------------
def test_concurrent_edits_are_never_lost_during_merge_apply(store_spec):
    seed_duplicates(store_spec, 200)
    before = snapshot(store_spec)
    dry = json.loads(mw("defrag", "merge-duplicates", "--store", store_spec, "--json").stdout)
    targets = [c["path"] for c in dry["changes"]][-30:][::-1]  # written last by the run, edited first
    assert len(dry["changes"]) == 400 and len(targets) == 30

    writer = start_writer(store_spec, targets)
    run = mw("defrag", "merge-duplicates", "--store", store_spec, "--apply", "--json")
    rc, _, err = finish(writer)
    assert rc == 0, err

    with open_store(store_spec) as store:  # every edit is still there: none overwritten silently
        for i, path in enumerate(targets):
            assert f"CONCURRENT-EDIT-{i}" in store.get(path).content, path
    assert not dangling_stubs(store_spec)
    if run.returncode == 0:  # the writer only got in after the run had written its targets
        return
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["conflict"]["path"] in targets
    assert f"path={report['conflict']['path']!r}" in run.stderr
    assert f"memwork defrag undo {report['run_id']}" in run.stderr
    applied = journaled_changes(report["run_id"])
    assert report["changes_applied"] == len(applied) > 0
    assert f"applying {len(applied)} changes" in run.stderr
    if {c["path"] for c in applied} & set(targets):
        return  # the writer also edited an entry after the run wrote it: undo rightly refuses that one
    undo = mw("defrag", "undo", report["run_id"], "--store", store_spec)
    assert undo.returncode == 0, undo.stderr
    after = snapshot(store_spec)
    for key, record in before.items():  # undone exactly, and the user's edits kept
        if key[1] in targets:
            assert after[key]["content"].startswith(record["content"] + " CONCURRENT-EDIT-")
        else:
            assert after[key] == record, key


# ---- (b) merge-duplicates --apply and compact --apply at the same time -------------------------------
def test_merge_and_compact_at_once_serialise_and_leave_no_dangling_stub(store_spec):
    seed_duplicates(store_spec, 200, metadata={})  # every entry is also a compact target
    merge = mw_start("defrag", "merge-duplicates", "--store", store_spec, "--apply", "--json")
    compact = mw_start("defrag", "compact", "--store", store_spec, "--apply", "--json")
    results = [finish(merge), finish(compact)]
    for rc, _, err in results:
        assert rc == 0, err  # the second run waited for the first and planned on what it left
    merged, compacted = (json.loads(out)["changes"] for _, out, _ in results)
    assert not dangling_stubs(store_spec)
    # at most one of them changed entries: whichever ran second found nothing left to do
    assert not merged or not compacted, (len(merged), len(compacted))
    assert len(merged) == 400 or len(compacted) == 400


# ---- (c) two identical applies at once -------------------------------------------------------------
def test_two_identical_applies_at_once_apply_the_plan_once(store_spec):
    seed_duplicates(store_spec, 200)
    args = ("defrag", "merge-duplicates", "--store", store_spec, "--apply", "--json")
    first, second = mw_start(*args), mw_start(*args)
    results = [finish(first), finish(second)]
    for rc, _, err in results:
        assert rc == 0, err
    counts = sorted(len(json.loads(out)["changes"]) for _, out, _ in results)
    assert counts == [0, 400]  # the second re-planned under the lock and found nothing to merge
    runs = [json.loads(out)["run_id"] for _, out, _ in results]
    assert sorted(len(journaled_changes(r)) for r in runs) == [0, 400]


# ---- the lock: bounded wait, a clear error, scopes ------------------------------------------------
def test_an_apply_waits_a_bounded_time_for_another_run_then_fails_naming_the_store(store_spec):
    seed_duplicates(store_spec, 3)
    before = snapshot(store_spec)
    holder = python_start(HOLDER, store_spec, "-")
    try:
        assert holder.stdout.readline().strip() == "held"
        run = mw("defrag", "merge-duplicates", "--store", store_spec, "--apply", "--lock-timeout", "0.5")
        # the holder holds the lock until it is killed below: the run gave up while it was still held
        # (a bounded wait), not when it was released -- no figure of how long that took is asserted
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 1
    line = run.stderr.strip().splitlines()[-1]
    assert "another defrag run or undo holds its lock; gave up after 0.5 s" in line
    with open_store(store_spec) as store:
        assert f"store={store.describe()!r}" in line
    assert snapshot(store_spec) == before  # nothing written
    after_release = mw("defrag", "merge-duplicates", "--store", store_spec, "--apply", "--lock-timeout", "5")
    assert after_release.returncode == 0, after_release.stderr  # a dead holder's lock is released


def test_scoped_run_locks_exclude_the_same_scope_and_the_whole_store_only(store_spec):
    seed_duplicates(store_spec, 1)
    with open_store(store_spec) as a, open_store(store_spec) as b:
        with a.run_lock("alice"):
            with b.run_lock("bob", timeout=1):
                pass  # another scope runs in parallel
            for scope in ("alice", None):
                with (
                    pytest.raises(StoreLocked, match=r"gave up after 0\.2 s"),
                    b.run_lock(scope, timeout=0.2),
                ):
                    pass
        with (
            a.run_lock(None),
            pytest.raises(StoreLocked, match="scope='bob'"),
            b.run_lock("bob", timeout=0.2),
        ):
            pass
        with b.run_lock(None, timeout=1):
            pass  # released


def test_lock_timeout_must_be_a_number_of_seconds(tmp_path):
    spec = str(tmp_path / "s")
    seed_duplicates(spec, 1)
    run = mw("defrag", "compact", "--store", spec, "--apply", "--lock-timeout", "-1")
    assert run.returncode == 2 and "lock_timeout=-1.0: must be a number of seconds >= 0" in run.stderr


# ---- (d) the fingerprint compares the vector itself ------------------------------------------------
def test_fingerprint_notices_a_changed_vector_not_only_whether_there_is_one():
    entry = Entry("a.md", "text", embedding=[1.0, 0.0, 0.0])
    assert fingerprint(entry) == fingerprint(entry.copy())
    assert fingerprint(entry) != fingerprint(entry.copy(embedding=np.array([0.0, 1.0, 0.0], np.float32)))
    assert fingerprint(entry) != fingerprint(entry.copy(embedding=None))


REEMBED = r"""
import sys
import numpy as np
from memwork.stores import open_store
with open_store(sys.argv[1]) as store:
    e = store.get("a.md")
    store.put(e.copy(embedding=np.roll(e.embedding, 1)))   # same content, metadata and timestamps
"""


def test_a_concurrent_reembedding_is_a_conflict_not_silently_reverted(store_spec):
    vector = np.linspace(0.1, 1.0, 384, dtype=np.float32)
    now = utcnow()
    with open_store(store_spec, create=True) as store:
        store.put(Entry("a.md", "alpha", embedding=vector, created_at=now, updated_at=now))
        store.put(Entry("b.md", "alpha", embedding=vector, created_at=now, updated_at=now))
        read = store.get("a.md")
        snap = {e.key: e for e in store.iter_entries()}
    rc, _, err = finish(python_start(REEMBED, store_spec))
    assert rc == 0, err
    with open_store(store_spec) as store:
        with pytest.raises(WriteConflict, match=r"path='a\.md': changed by another writer"):
            store.put_if_unchanged(read, read.copy(content="overwritten"))
        plan = Plan("merge_duplicates", [Operation("stub", "default", "a.md", target="b.md")])
        with pytest.raises(PlanConflict, match=r"path='a\.md': changed since the plan was made"):
            execute(store, plan, now=utcnow(), expected=snap)
        kept = store.get("a.md")
    assert kept.content == "alpha" and np.array_equal(kept.embedding, np.roll(vector, 1))


def test_compare_and_set_creates_updates_and_deletes_only_from_the_expected_state(any_store):
    entry = Entry("x/a.md", "one")
    calls: list[str] = []
    any_store.put_if_unchanged(None, entry, before_write=lambda: calls.append("create"))
    with pytest.raises(WriteConflict, match="was created by another writer"):
        any_store.put_if_unchanged(None, entry.copy(content="two"), before_write=lambda: calls.append("no"))
    current = any_store.get("x/a.md")
    any_store.put_if_unchanged(current, current.copy(content="two"), before_write=lambda: calls.append("upd"))
    with pytest.raises(WriteConflict, match="changed by another writer"):
        any_store.put_if_unchanged(current, None)  # stale before-image: not deleted
    fresh = any_store.get("x/a.md")
    any_store.put_if_unchanged(fresh, None, before_write=lambda: calls.append("delete"))
    assert any_store.get("x/a.md") is None and calls == ["create", "upd", "delete"]
    with pytest.raises(WriteConflict, match="was deleted by another writer"):
        any_store.put_if_unchanged(fresh, fresh.copy(content="three"))
    assert any_store.get("x/a.md") is None


# ---- (e) full --apply: a conflict in step 3 reports what steps 1 and 2 applied ---------------------
class EditDuringTheFirstStep:
    """A :class:`~memwork.progress.Progress` that, once the run has written its first change, edits
    ``path`` through another connection to the store -- as a concurrent writer would, but at a point of
    the run fixed by the run itself, so a loaded machine cannot make the edit land too late."""

    def __init__(self, spec: str, path: str) -> None:
        self.spec, self.path, self.edited, self.applying = spec, path, False, False

    def start(self, description: str, total: int | None) -> None:
        self.applying = description.startswith("applying ")  # not loading or pairing: the plan is made

    def advance(self, n: int = 1) -> None:
        if self.edited or not self.applying:
            return
        with open_store(self.spec) as other:
            e = other.get(self.path)
            assert e is not None
            other.write(e.path, e.content + " CONCURRENT-EDIT-0", title=e.title, metadata=e.metadata,
                        embedding=e.embedding, scope=e.scope)  # fmt: skip
        self.edited = True


@pytest.mark.parametrize("kind", ["filesystem", "sqlite"])
def test_full_apply_conflict_in_a_later_step_reports_what_was_applied(kind, tmp_path):
    spec = str(tmp_path / "fs") if kind == "filesystem" else f"sqlite:///{tmp_path / 's.db'}"
    # another writer edits the last compact target right after the run's first change (merge step)
    seed_duplicates(spec, 500, junk=20)
    before = snapshot(spec)
    # notes 1, 7, 49 and 343 chain (each body holds the next one's number): merge them too, as before
    chains = ("--min-cluster-density", "0")
    dry = json.loads(mw("defrag", "full", "--store", spec, *chains, "--json").stdout)
    compacted = [o["path"] for o in dry["operations"] if o["op"] == "delete" and o.get("step") == "compact"]
    assert len(compacted) == 20 and dry["summary"]["steps"][0]["entries_updated"] == 1000
    target = compacted[-1]

    writer = EditDuringTheFirstStep(spec, target)
    with open_store(spec) as store, pytest.raises(RunStopped) as stopped:
        run_action(store, "full", apply=True, min_cluster_density=0, progress=writer)
    assert writer.edited

    line = str(stopped.value)  # what `memwork defrag full --apply` prints as its last line (exit 1)
    report = stopped_run_dict(stopped.value)  # and what it answers with --json
    run_id = report["run_id"]
    assert "nothing was written" not in line
    assert f"path={target!r}: changed since the plan was made (scope 'default')" in line
    assert (
        "the run stopped after applying 1000 changes "
        "(merge_duplicates 1000, supersede 0, cleanup_stubs 0, compact 0 of 20)" in line
    )
    assert f"`memwork defrag undo {run_id}`" in line
    assert report["applied"] is True and report["complete"] is False
    assert report["changes_applied"] == 1000 == len(journaled_changes(run_id))
    assert [(s["action"], s["status"], s["changes"]) for s in report["steps"]] == [
        ("merge_duplicates", "applied", 1000),
        ("supersede", "applied", 0),
        ("cleanup_stubs", "applied", 0),
        ("compact", "stopped", 0),
    ]
    assert report["conflict"] == {
        "path": target,
        "scope": "default",
        "problem": "changed since the plan was made",
    }
    assert report["undo"] == f"memwork defrag undo {run_id}"

    undo = mw("defrag", "undo", run_id, "--store", spec)
    assert undo.returncode == 0, undo.stderr
    after = snapshot(spec)
    for key, record in before.items():
        if key[1] == target:
            assert after[key]["content"] == record["content"] + " CONCURRENT-EDIT-0"
        else:
            assert after[key] == record, key


# ---- MySQL / MariaDB: GET_LOCK (store-wide) and the same compare-and-set -----------------------------
def test_mysql_store_run_lock_is_store_wide_and_identical_applies_apply_once(mysql_url):
    seed_duplicates(mysql_url, 50)
    with open_store(mysql_url) as a, open_store(mysql_url) as b:
        entry = a.get("dup/n0000-0.md")
        a.put_if_unchanged(entry, entry.copy(content="edited"))
        with pytest.raises(WriteConflict, match="changed by another writer"):
            a.put_if_unchanged(entry, entry.copy(content="lost"))
        with a.run_lock("alice"), pytest.raises(StoreLocked), b.run_lock("bob", timeout=0.2):
            pass  # MySQL has no shared locks: one run at a time per store
        with b.run_lock(None, timeout=1):
            pass
    args = ("defrag", "merge-duplicates", "--store", mysql_url, "--apply", "--json")
    results = [finish(p) for p in (mw_start(*args), mw_start(*args))]
    assert [rc for rc, _, _ in results] == [0, 0], [err for _, _, err in results]
    assert sorted(len(json.loads(out)["changes"]) for _, out, _ in results) == [0, 98]
    assert not dangling_stubs(mysql_url)
