"""Benchmark ``--since``: new entries against the whole store, O(new x N) (issue 20, "Incremental").

Target: 10,000 new entries against 1,000,000 in <= 60 s each for ``find-duplicates`` and
``find-related`` (exactly the full run's pairs touching a new entry). The store is generated *in
memory* (Entry objects whose 384-d float32 unit vectors are rows of one array; no store I/O is timed):
one scope of 30 % of the entries (300,000 at 1M) and the rest in scopes of 1,000; ~6 % planted near
duplicates (a word changed, a nearby vector) of an earlier entry of their scope; 1 % of the entries,
drawn at random over all scopes, are "new" (changed after the cut). ``--new-in-big`` puts every new
entry in the big scope instead (the worst case: new x 300,000).

A full run at 1M is far too long to be the reference here, so each run also measures a smaller store
(default 100,000) both ways and prints the incremental time as a ratio of the full run's, with a check
that the pairs are exactly the full run's pairs touching a new entry. Each size runs in a fresh
subprocess so its peak RSS is its own; the machine's load (``uptime``) is printed beside the figures.

    .venv/bin/python benchmarks/incremental_defrag.py [--sizes 100000,1000000] [--full-upto 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from memwork.defrag.findings import Pair, changed_since, find_duplicates, find_related
from memwork.entry import Entry

DIM = 384
BIG_SHARE = 0.30
SMALL_SCOPE = 1000
NEW_SHARE = 0.01
DUP_SHARE = 0.06
TARGET_SECONDS = 60.0
OLD = datetime(2026, 1, 1, tzinfo=UTC)
CUT = OLD + timedelta(days=30)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load() -> str:
    return os.popen("uptime").read().strip()


def make_entries(n: int, seed: int = 0, new_in_big: bool = False) -> list[Entry]:
    """The store described in the module docstring."""
    rng = np.random.default_rng(seed)
    big = int(n * BIG_SHARE)
    scope_of = np.empty(n, dtype=np.int64)
    scope_of[:big] = 0
    scope_of[big:] = 1 + (np.arange(n - big) // SMALL_SCOPE)
    start = np.empty(n, dtype=np.int64)  # first row of each row's scope
    start[:big] = 0
    start[big:] = big + ((np.arange(n - big) // SMALL_SCOPE) * SMALL_SCOPE)
    vectors = np.empty((n, DIM), dtype=np.float32)
    for a in range(0, n, 65536):
        block = rng.standard_normal((min(65536, n - a), DIM), dtype=np.float32)
        vectors[a : a + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    vocab = np.array([f"w{k}" for k in range(20000)])
    weights = 1.0 / (np.arange(len(vocab)) + 20.0)
    weights /= weights.sum()
    words = vocab[rng.choice(len(vocab), size=(n, 8), p=weights)]
    texts = [" ".join(row) for row in words.tolist()]
    for k in np.flatnonzero(rng.random(n) < DUP_SHARE).tolist():
        if k == start[k]:
            continue
        src = int(rng.integers(start[k], k))
        edited = texts[src].split()
        edited[int(rng.integers(0, len(edited)))] = f"w{int(rng.integers(0, len(vocab)))}"
        texts[k] = " ".join(edited)
        noise = rng.standard_normal(DIM).astype(np.float32)
        row = vectors[src] + rng.uniform(0.1, 0.8) * noise / np.linalg.norm(noise)
        vectors[k] = row / np.linalg.norm(row)
    pool = np.arange(big) if new_in_big else np.arange(n)
    new = np.zeros(n, dtype=bool)
    new[rng.choice(pool, size=min(len(pool), int(n * NEW_SHARE)), replace=False)] = True
    later = CUT + timedelta(hours=1)
    return [
        Entry(
            path=f"fact/{k}.md",
            content=texts[k],
            scope=f"s{scope_of[k]}",
            embedding=vectors[k],
            created_at=OLD,
            updated_at=later if new[k] else OLD,
        )
        for k in range(n)
    ]


#: CPU seconds of the last :func:`_timed` call (every thread of the process): on a shared machine
#: the wall time depends on the load, the CPU time much less
_CPU: list[float] = [0.0]


def _timed(fn: Any) -> tuple[Any, float]:
    began, cpu = time.perf_counter(), time.process_time()
    out = fn()
    _CPU[0] = round(time.process_time() - cpu, 1)
    return out, round(time.perf_counter() - began, 2)


def _touching(pairs: list[Pair], changed: set[tuple[str, str]]) -> list[Pair]:
    return [p for p in pairs if (p.scope, p.path_a) in changed or (p.scope, p.path_b) in changed]


def child(n: int, full: bool, new_in_big: bool) -> dict[str, Any]:
    """One size: build, time the incremental searches (and the full ones with ``full``)."""
    entries, build = _timed(lambda: make_entries(n, new_in_big=new_in_big))
    changed = {e.key for e in entries if changed_since(e, CUT)}
    out: dict[str, Any] = {
        "entries": n,
        "new": len(changed),
        "scopes": len({e.scope for e in entries}),
        "big_scope": int(n * BIG_SHARE),
        "new_in_big_scope": sum(1 for s, _ in changed if s == "s0"),
        "build_s": round(build, 1),
    }
    dups, out["since_duplicates_s"] = _timed(lambda: find_duplicates(entries, 0.85, since=CUT))
    out["since_duplicates_cpu_s"] = _CPU[0]
    related, out["since_related_s"] = _timed(lambda: find_related(entries, 0.60, 0.85, since=CUT))
    out["since_related_cpu_s"] = _CPU[0]
    out["since_pairs"] = {"duplicates": len(dups), "related": len(related)}
    if full:
        all_dups, out["full_duplicates_s"] = _timed(lambda: find_duplicates(entries, 0.85))
        all_related, out["full_related_s"] = _timed(lambda: find_related(entries, 0.60, 0.85))
        out["exact"] = dups == _touching(all_dups, changed) and related == _touching(all_related, changed)
        out["ratio_duplicates"] = round(out["since_duplicates_s"] / out["full_duplicates_s"], 4)
        out["ratio_related"] = round(out["since_related_s"] / out["full_related_s"], 4)
    out["peak_rss_mb"] = round(_peak_mb())
    out["load"] = _load()
    return out


def run(n: int, full: bool, new_in_big: bool) -> dict[str, Any]:
    args = [sys.executable, __file__, "--child", str(n)] + (["--full"] if full else [])
    args += ["--new-in-big"] if new_in_big else []
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument(
        "--full-upto", type=int, default=100_000, help="Also run the full search up to this size."
    )
    parser.add_argument("--new-in-big", action="store_true", help="Every new entry in the big scope.")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.full, args.new_in_big)))
        return 0
    results = []
    missed = False
    for n in (int(s) for s in args.sizes.split(",")):
        result = run(n, n <= args.full_upto, args.new_in_big)
        results.append(result)
        line = (
            f"N={n:,} new={result['new']:,} (in the {result['big_scope']:,} scope: "
            f"{result['new_in_big_scope']:,}) scopes={result['scopes']:,}: --since find-duplicates "
            f"{result['since_duplicates_s']:.1f} s (CPU {result['since_duplicates_cpu_s']:.1f} s), "
            "find-related "
            f"{result['since_related_s']:.1f} s (CPU {result['since_related_cpu_s']:.1f} s); "
            f"peak RSS {result['peak_rss_mb']:,} MB (build {result['build_s']:.0f} s, not timed)"
        )
        if "full_duplicates_s" in result:
            line += (
                f"\n    full run: find-duplicates {result['full_duplicates_s']:.1f} s, find-related "
                f"{result['full_related_s']:.1f} s -> incremental/full = {result['ratio_duplicates']:.3f}, "
                f"{result['ratio_related']:.3f}; pairs exactly the full run's touching a new entry: "
                f"{result['exact']}"
            )
            missed |= not result["exact"]
        if n >= 1_000_000:
            ok = max(result["since_duplicates_s"], result["since_related_s"]) <= TARGET_SECONDS
            line += f"\n    target <= {TARGET_SECONDS:.0f} s each at 1M: {'met' if ok else 'MISSED'}"
            missed |= not ok
        print(line + f"\n    load: {result['load']}", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
