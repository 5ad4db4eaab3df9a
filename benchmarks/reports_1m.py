"""The four reports at scale (issue 20, "Reports at 1M"): health, duplicate review, verification and canary
together in <= 15 minutes at 1,000,000 entries.

    .venv/bin/python benchmarks/reports_1m.py --entries 200000              # build, then the four reports
    .venv/bin/python benchmarks/reports_1m.py --entries 1000000 --keep /tmp/mw1m
    .venv/bin/python benchmarks/reports_1m.py --reuse /tmp/mw1m             # the reports again, same inputs

Inputs, built first and timed apart (set-up, not a report):

* a SQLite defrag store of ``--entries`` entries (``memwork.samples.entries``: planted exact and near
  duplicates, paraphrases, junk, stale entries, stubs, 384-dim hash embeddings) in scopes of
  ``--scope-size`` entries (default 1,000: one agent's or user's memory; pairs never cross scopes, so the
  scope size sets the duplicate joins' work), generated and written scope batch by scope batch;
* ``--entries`` legacy items (100 per user) in MariaDB (127.0.0.1:3306, else a SQLite file) backfilled into
  the embedded PostgreSQL + pgvector with an HNSW index (``build_migration``), for the verification and
  the canary.

Then each report through ``run_report`` (what ``memwork report run`` calls), one after the other:
health, verification, the canary (signing off on those two summaries), and the duplicate review last (the
longest: a deadline that stops the run still leaves the other three timed). Per report: wall seconds, CPU
seconds (this process and the kernel), the slowest cells and the load average before and after; the total
against the 15-minute target. ``--reports`` runs a subset. Exit status 1 when missed.

The duplicate review reads a stated, seeded sample of whole scopes when the store holds more than its
``max_entries`` (default 50,000; ``--max-entries`` sets it, 0 reads every scope): the figures print the
sample it stood on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = 15 * 60
ITEMS_PER_USER = 100


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds() -> float:
    """CPU of this process and its reaped children (the kernels, ``git``), user + system."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def build_store(spec: str, entries: int, scope_size: int) -> int:
    """``entries`` generated entries in scopes of ``scope_size``, written a batch of scopes at a time (a
    million entries with their vectors never sit in memory at once)."""
    from memwork.samples.entries import generate_entries
    from memwork.stores import open_store

    batch_scopes = max(1, 50_000 // scope_size)
    opened = open_store(spec, create=True)
    written = 0
    try:
        while written < entries:
            first = written // scope_size
            count = min(batch_scopes * scope_size, entries - written)
            scopes = [f"agent-{first + i}" for i in range(-(-count // scope_size))]
            opened.put_many(generate_entries(count, scopes=scopes, seed=first))
            written += count
            print(f"  store: {written:,} of {entries:,} entries  (load {load()})", flush=True)
    finally:
        opened.close()
    return written


def legacy_url(folder: Path) -> str:
    """MariaDB at 127.0.0.1:3306 (the production shape) when reachable, else a SQLite file."""
    try:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", connect_timeout=3)
    except Exception:
        return f"sqlite:///{folder / 'legacy.db'}"
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS memwork_reports_1m")
        cur.execute("CREATE DATABASE memwork_reports_1m CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    conn.close()
    return "mysql://root@127.0.0.1:3306/memwork_reports_1m"


def build(folder: Path, entries: int, scope_size: int) -> dict[str, Any]:
    """The defrag store, then the legacy items backfilled into pgvector; seconds of each."""
    from memwork.samples.legacy import generate_legacy_items
    from memwork.samples.migration import build_migration

    data: dict[str, Any] = {"store": f"sqlite:///{folder / 'entries.db'}", "entries": entries}
    start = time.perf_counter()
    build_store(data["store"], entries, scope_size)
    data["store_build_s"] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()
    users = max(entries // ITEMS_PER_USER, 1)
    rows = generate_legacy_items(users, entries // users, seed=1)
    legacy = legacy_url(folder)
    m = build_migration(legacy, "pg://embedded/memwork_reports_1m", rows=rows, dimensions=384, seed=1)
    data.update(legacy=legacy, pgvector=m.dest_url, active=m.active)
    data["migration_build_s"] = round(time.perf_counter() - start, 1)
    print(f"  legacy: {len(rows):,} items, {m.active:,} active backfilled in {data['migration_build_s']} s")
    return data


def slowest_cells(notebook: Path, n: int = 3) -> list[str]:
    """The ``n`` slowest cells of an executed notebook: seconds and the cell's first line."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    timed = []
    for cell in nb.get("cells", []):
        duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if isinstance(duration, int | float) and cell.get("cell_type") == "code":
            source = "".join(cell.get("source", ""))
            line = next((x for x in source.splitlines() if x.strip() and not x.startswith("#")), "")
            timed.append((float(duration), line.strip()[:60]))
    return [f"{d:.1f} s {line}" for d, line in sorted(timed, reverse=True)[:n]]


def run_one(name: str, params: dict[str, Any], out: Path) -> tuple[dict[str, Any], Any]:
    from memwork.reports import run_report

    before, cpu, start = load(), cpu_seconds(), time.perf_counter()
    run = run_report(name, params, out, raise_on_error=False)
    wall, used = time.perf_counter() - start, cpu_seconds() - cpu
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    sample = (run.summary or {}).get("scope_sample")
    figures = {"report": name, "verdict": run.verdict, "scope_sample": sample,
               "wall_s": round(wall, 1), "cpu_s": round(used, 1),
               "kernel_peak_rss_mb_so_far": round(peak), "load_before": before, "load_after": load(),
               "slowest_cells": slowest_cells(run.notebook_path), "error": run.error}  # fmt: skip
    print(f"  {name:<22} {run.verdict:<6} {wall:7.1f} s  CPU {used:6.1f} s  load {before} -> {load()}"
          f"  {run.error or ''}", flush=True)  # fmt: skip
    for line in figures["slowest_cells"]:
        print(f"      {line}")
    if sample:
        print(
            f"      read {sample['scopes']:,} of {sample['total_scopes']:,} scopes, {sample['entries']:,} of "
            f"{sample['total_entries']:,} entries (seed {sample['seed']}, "
            f"max_entries {sample['max_entries']:,})"
        )
    return figures, run


REPORTS = ("health_report", "backfill_verification", "canary_signoff", "duplicate_review")


def run_reports(
    data: dict[str, Any],
    out: Path,
    names: tuple[str, ...] = REPORTS,
    health_summary: str = "",
    max_entries: int | None = None,
) -> list[dict[str, Any]]:
    """The reports in ``names``, in the order of :data:`REPORTS`: the canary signs off on the health and
    verification summaries of this run (when they ran); the duplicate review, the longest, comes last."""
    sides = {"source_url": data["legacy"], "pgvector_url": data["pgvector"], "expected_dimensions": 384}
    done: dict[str, Any] = {}
    figures = []
    for name in [n for n in REPORTS if n in names]:
        if name in ("health_report", "duplicate_review"):
            params: dict[str, Any] = {"store": data["store"]}
            if name == "duplicate_review" and max_entries is not None:
                params["max_entries"] = max_entries
        elif name == "backfill_verification":
            params = sides
        else:
            params = {"legacy_url": data["legacy"], "pgvector_url": data["pgvector"], "approver": "bench"}
            if health_summary:
                params["health_summary"] = health_summary
            for key, report in (
                ("verification_summary", "backfill_verification"),
                ("health_summary", "health_report"),
            ):
                if report in done:
                    params[key] = str(done[report].summary_path)
        result, done[name] = run_one(name, params, out)
        figures.append(result)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--scope-size", type=int, default=1_000, help="entries per scope (agent, user)")
    parser.add_argument("--keep", default="", help="build the inputs in this folder and keep them")
    parser.add_argument("--reuse", default="", help="a folder --keep built: run the reports only")
    parser.add_argument("--json", default="", help="write the figures to this file too")
    parser.add_argument("--reports", default=",".join(REPORTS), help="which reports (comma-separated)")
    parser.add_argument(
        "--health-summary", default="", help="the canary's health summary when health is not run"
    )
    parser.add_argument(
        "--max-entries", type=int, default=None,
        help="the duplicate review's max_entries (default: the report's, 50,000; 0: every scope)",
    )  # fmt: skip
    args = parser.parse_args()
    folder = Path(args.reuse or args.keep or tempfile.mkdtemp(prefix="mw1m-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["MEMWORK_HOME"] = str(folder)  # the embedded PostgreSQL lives with the inputs
    print(f"inputs in {folder}; load {load()}; {os.cpu_count()} CPUs", flush=True)
    inputs = folder / "inputs.json"
    if args.reuse:
        data = json.loads(inputs.read_text())
    else:
        print(f"building {args.entries:,} entries in scopes of {args.scope_size:,} ...", flush=True)
        data = build(folder, args.entries, args.scope_size)
        data["scope_size"] = args.scope_size
        inputs.write_text(json.dumps(data, indent=2))
    print(f"reports over {data['entries']:,} entries (scopes of {data.get('scope_size')}):", flush=True)
    reports = run_reports(
        data, folder / "reports", tuple(args.reports.split(",")), args.health_summary, args.max_entries
    )
    total = round(sum(r["wall_s"] for r in reports), 1)
    figures = {**data, "reports": reports, "total_s": total, "target_s": TARGET_S}
    print(f"four reports: {total} s (target {TARGET_S} s)  load {load()}")
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    if not (args.keep or args.reuse):
        from memwork.db.embedded import stop

        stop()  # the embedded PostgreSQL of this folder, before the folder goes
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if total <= TARGET_S and all(not r["error"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
