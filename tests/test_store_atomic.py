"""A filesystem entry's three files change together (issue 8, Low: D-15): kill -9 a real process
doing puts at random moments, read while another process writes, and finish a put killed after its
commit point."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from memwork.entry import Entry
from memwork.stores import open_store
from memwork.stores.filesystem import COMMIT_SUFFIX, _marker, _write_temp

#: puts two entries over and over, alternating a full entry (with a vector) and a stub (without)
PUTTER = r"""
import sys
from memwork.entry import Entry
from memwork.stores import open_store
store = open_store(sys.argv[1], create=True)
print("ready", flush=True)
n = 0
while True:
    n += 1
    for path in ("a.md", "deep/er/b.md"):
        if n % 2:
            store.put(Entry(path, f"version A {n} " + "body " * (n % 400), metadata={"v": "A", "n": n},
                            embedding=[float(n), 1.0, 2.0]))
        else:
            store.put(Entry(path, f"# merged -> t.md version B {n}",
                            metadata={"v": "B", "n": n, "stub": True, "redirect_to": "t.md"}))
"""


def start_putter(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PUTTER, str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    return proc


def torn(entry: Entry) -> str | None:
    """Why ``entry`` mixes two versions, or None when content, sidecar and vector agree."""
    v, n = entry.metadata.get("v"), entry.metadata.get("n")
    if v == "A":
        ok = entry.content.startswith(f"version A {n} ") and entry.embedding is not None
        ok = ok and float(entry.embedding[0]) == float(n) and not entry.is_stub
    else:
        ok = entry.content == f"# merged -> t.md version B {n}" and entry.embedding is None and entry.is_stub
    return None if ok else f"{entry.path}: sidecar {v} {n}, content {entry.content[:30]!r}"


def test_kill_9_during_puts_never_leaves_a_torn_entry(tmp_path):
    root = tmp_path / "fs"
    rng = random.Random(8)
    problems, checked = [], 0
    for _ in range(8):
        proc = start_putter(root)
        time.sleep(rng.uniform(0.02, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with open_store(str(root)) as store:
            entries = list(store.iter_entries())
        problems += [p for p in map(torn, entries) if p]
        checked += len(entries)
        assert not list(root.rglob(f"*{COMMIT_SUFFIX}"))  # any killed commit was rolled forward
    assert checked >= 8 and not problems, problems


def test_a_reader_never_sees_two_versions_while_another_process_writes(tmp_path):
    root = tmp_path / "fs"
    proc = start_putter(root)
    try:
        with open_store(str(root)) as store:
            problems, reads, deadline = [], 0, time.monotonic() + 3
            while time.monotonic() < deadline:
                for path in ("a.md", "deep/er/b.md"):
                    entry = store.get(path)
                    if entry is not None:
                        reads += 1
                        if problem := torn(entry):
                            problems.append(problem)
    finally:
        proc.kill()
        proc.wait()
    assert reads > 100 and not problems, problems[:5]


def test_a_put_killed_after_its_commit_point_is_completed_by_the_next_read(tmp_path):
    """The state a kill leaves between the renames of step 3: new sidecar, old content and vector."""
    root = tmp_path / "fs"
    with open_store(str(root), create=True) as store:
        store.put(Entry("a.md", "original", metadata={"v": 1}, embedding=[1.0, 2.0]))
        target = store.root / "a.md"
        new_side = target.with_name("a.md.yml").read_bytes().replace(b"v: 1", b"v: 2")
        temps = {
            ".yml": _write_temp(target.with_name("a.md.yml"), new_side),
            "": _write_temp(target, b"# merged -> b.md"),
        }
        marker = {"name": "a.md", "files": temps, "drop": [".emb"]}
        _marker(target).write_text(json.dumps(marker))
        (target.parent / temps[".yml"]).replace(target.with_name("a.md.yml"))  # killed right here

        entry = store.get("a.md")
        assert (entry.content, entry.metadata, entry.embedding) == ("# merged -> b.md", {"v": 2}, None)
        assert not _marker(target).exists() and not target.with_name("a.md.emb").exists()
        assert [e.path for e in store.iter_entries()] == ["a.md"]


def test_a_killed_put_of_a_new_entry_is_listed_once_completed(tmp_path):
    root = tmp_path / "fs"
    with open_store(str(root), create=True) as store:
        store.put(Entry("keep.md", "k"))
        target = store.root / "sub" / "new.md"
        target.parent.mkdir()
        temps = {"": _write_temp(target, b"fresh"), ".emb": _write_temp(target, np.ones(3, "<f4").tobytes())}
        _marker(target).write_text(json.dumps({"name": "new.md", "files": temps, "drop": [".yml"]}))
        assert not target.exists()
        assert store.count() == 2  # listing completes the killed put first
        listed = {e.path: e for e in store.iter_entries()}
        assert sorted(listed) == ["keep.md", "sub/new.md"]
        assert listed["sub/new.md"].content == "fresh" and listed["sub/new.md"].embedding.tolist() == [
            1,
            1,
            1,
        ]
