"""Load on ``memwork serve``: concurrent resolves on loopback, then pgvector taken away and given back.

Starts ``memwork serve`` as a subprocess per phase and drives ``POST /user-memory/v1/resolve`` with
``--concurrency`` closed-loop clients (httpx.AsyncClient, one connection each) for ``--seconds``:

1. ``legacy``        MEMORY_BACKEND=legacy (MariaDB legacy tables)
2. ``pgvector``      MEMORY_BACKEND=pgvector (embedded PostgreSQL + pgvector, HNSW table)
3. ``shadow-100``    legacy answers, every resolve also shadow-read on pgvector (MEMORY_SHADOW_SAMPLE=1)
4. ``pg-outage``     pgvector selected; the PostgreSQL server is stopped at 1/3 of the phase and started
                     again at 2/3. Every request must still be answered (fail-open: HTTP 200 with the
                     degraded payload); the degraded answers' latency is reported, and the time from the
                     restart until pgvector answers again (without restarting the service).

Per phase: requests, throughput, p50/p95/p99/max latency, errors (transport errors or a status other
than 200: must be 0), degraded answers (``ok: false``: must be 0 outside the outage). Prints a table,
writes JSON to ``benchmarks/results/service_load-<UTC stamp>.json`` (``--out``), exits 1 on a miss.

    python benchmarks/service_load.py                          # 200 clients, 60 s per phase
    python benchmarks/service_load.py --seconds 10 --concurrency 50 --phases legacy,pg-outage

The load driver shares the machine's cores with the service (and MariaDB and PostgreSQL), so latency
includes client-side queueing; rerun before believing a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_mysql

DEFAULT_MYSQL = "mysql://root@127.0.0.1:3306/test"
PHASES = ("legacy", "pgvector", "shadow-100", "pg-outage")
QUERIES = (
    "what does the user like?",
    "where does the user live",
    "the user's goals this year",
    "food allergies",
    "which languages does the user speak",
    "喜欢什么",
)


# ---- the data: legacy items in MariaDB, backfilled into a dedicated embedded PostgreSQL -----------------
@dataclass
class Stack:
    mysql_url: str
    pg_url: str
    pgdata: Path
    query_module: str
    users: list[str]
    workdir: Path


def build_data(mysql_url: str, pgdata: Path, users: int, items: int, dims: int, workdir: Path) -> Stack:
    from memwork.db import embedded
    from memwork.embed import HashEmbedder
    from memwork.pgvector.backfill import BackfillOptions, run_backfill
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

    rows = generate_legacy_items(users, items, seed=11)
    load_legacy_rows(mysql_url, ITEMS, rows)
    embedded.start(pgdata, cleanup_mode=None)
    pg_url = embedded.server_url("load", pgdata)
    ensure_schema(pg_url, "memory_embeddings", dims)
    run_backfill(BackfillOptions.one_off(mysql_url, pg_url, HashEmbedder(dims), batch_size=2000))
    ensure_schema(pg_url, "memory_embeddings", dims, create_vector_index=True)
    module = write_module(dims, workdir)
    return Stack(mysql_url, pg_url, pgdata, module, sorted({r["user_id"] for r in rows}), workdir)


def stop_pg(pgdata: Path) -> None:
    from memwork.db import embedded

    embedded.stop(pgdata)


def start_pg(pgdata: Path) -> None:
    """Start the stopped server again: pgserver hands back its cached handle, whose ``start`` runs
    ``pg_ctl start`` when the postmaster is not running."""
    from memwork.db import embedded

    embedded.start(pgdata, cleanup_mode=None).start()


# ---- the service ----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def phase_env(stack: Stack, phase: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        MEMWORK_HOME=str(stack.workdir / "home"),
        MEMORY_LEGACY_DATABASE_URL=stack.mysql_url,
        MEMORY_VECTOR_ENABLED="1",
        MEMORY_PGVECTOR_DATABASE_URL=stack.pg_url,
        MEMORY_PGVECTOR_EMBEDDING_MODULE=stack.query_module,
        MEMORY_BACKEND="legacy" if phase in ("legacy", "shadow-100") else "pgvector",
    )
    if phase == "shadow-100":
        env.update(
            MEMORY_SHADOW_BACKEND="pgvector",
            MEMORY_SHADOW_SAMPLE="1",
            MEMORY_SHADOW_LOG=str(stack.workdir / "shadow-100.jsonl"),
        )
    return env


class Service:
    """``memwork serve`` in a subprocess, its output in a log file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memwork", "serve", "--port", str(self.port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memwork serve exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("memwork serve did not become ready")

    def status(self) -> dict[str, Any]:
        import httpx

        return httpx.get(f"{self.base_url}/api/runtime/status", timeout=10).json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# ---- the load driver -----------------------------------------------------------------------------------
@dataclass
class Sample:
    at: float  # seconds since the phase started (request start)
    ms: float
    status: int  # 0: transport error
    ok: bool
    source: str | None
    error: str | None = None


@dataclass
class Events:
    """When the outage phase stopped and restarted PostgreSQL (seconds since the phase started)."""

    stop_called_at: float | None = None
    stopped_at: float | None = None
    restart_called_at: float | None = None
    restarted_at: float | None = None
    log: list[str] = field(default_factory=list)


async def drive(
    base_url: str, users: list[str], seconds: float, concurrency: int, seed: int = 0
) -> tuple[list[Sample], float]:
    """``concurrency`` closed-loop clients for ``seconds``; returns every sample and the wall time."""
    import httpx

    rng = random.Random(seed)
    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    started = time.perf_counter()
    stop_at = started + seconds

    async def client_loop(client: httpx.AsyncClient, n: int) -> None:
        while time.perf_counter() < stop_at:
            body = {
                "userId": rng.choice(users),
                "sessionId": f"load-{n}",
                "query": rng.choice(QUERIES),
                "limit": 10,
            }
            t0 = time.perf_counter()
            try:
                answer = await client.post("/user-memory/v1/resolve", json=body)
                ms = (time.perf_counter() - t0) * 1000
                payload = answer.json() if answer.status_code == 200 else {}
                samples.append(
                    Sample(
                        t0 - started,
                        ms,
                        answer.status_code,
                        bool(payload.get("ok")),
                        payload.get("source"),
                        None if answer.status_code == 200 else answer.text[:200],
                    )
                )
            except Exception as exc:  # a transport error is an error sample, never a crash of the driver
                ms = (time.perf_counter() - t0) * 1000
                error = f"{type(exc).__name__} {exc!r} at {t0 - started:.1f} s after {ms:.0f} ms"
                samples.append(Sample(t0 - started, ms, 0, False, None, error[:300]))

    timeout = httpx.Timeout(30.0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:
        await asyncio.gather(*(client_loop(client, n) for n in range(concurrency)))
    return samples, time.perf_counter() - started


async def drive_with_outage(
    base_url: str, users: list[str], seconds: float, concurrency: int, pgdata: Path
) -> tuple[list[Sample], float, Events]:
    """The load, with PostgreSQL stopped at 1/3 of ``seconds`` and started again at 2/3."""
    events = Events()
    started = time.perf_counter()

    async def outage() -> None:
        await asyncio.sleep(seconds / 3)
        events.stop_called_at = time.perf_counter() - started
        await asyncio.to_thread(stop_pg, pgdata)
        events.stopped_at = time.perf_counter() - started
        events.log.append(
            f"PostgreSQL stop called at {events.stop_called_at:.1f} s, down at {events.stopped_at:.1f} s"
        )
        await asyncio.sleep(max(0.0, started + 2 * seconds / 3 - time.perf_counter()))
        events.restart_called_at = time.perf_counter() - started
        await asyncio.to_thread(start_pg, pgdata)
        events.restarted_at = time.perf_counter() - started
        called, up = events.restart_called_at, events.restarted_at
        events.log.append(f"PostgreSQL restart called at {called:.1f} s, up at {up:.1f} s")

    (samples, wall), _ = await asyncio.gather(drive(base_url, users, seconds, concurrency), outage())
    return samples, wall, events


# ---- figures -------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def latency(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
        "mean": statistics.fmean(values) if values else None,
    }


def summarise(samples: list[Sample], wall: float, expect_source: str | None) -> dict[str, Any]:
    errors = [s for s in samples if s.status != 200]
    degraded = [s for s in samples if s.status == 200 and not s.ok]
    wrong_source = [s for s in samples if s.ok and expect_source and s.source != expect_source]
    return {
        "requests": len(samples),
        "seconds": round(wall, 2),
        "throughput_rps": round(len(samples) / wall, 1) if wall else 0.0,
        "latency_ms": latency([s.ms for s in samples]),
        "errors": len(errors),
        "error_examples": sorted({e.error or str(e.status) for e in errors})[:5],
        "degraded": len(degraded),
        "degraded_latency_ms": latency([s.ms for s in degraded]),
        "wrong_source": len(wrong_source),
        "sources": _count(s.source or "none" for s in samples if s.status == 200),
    }


def recovery(samples: list[Sample], events: Events, target: str = "pgvector") -> dict[str, Any]:
    """How the outage phase went: answered during the outage, and the time from the restart until
    pgvector answered again (first ok, and the start of the last run of ok answers)."""
    down_from = events.stopped_at or 0.0
    up_at = events.restarted_at or float("inf")
    down_until = events.restart_called_at or up_at
    during = [s for s in samples if down_from <= s.at + s.ms / 1000 < down_until]  # answered while down
    after = sorted((s for s in samples if s.at >= up_at), key=lambda s: s.at)  # sent after the restart
    first_ok = next((s.at for s in after if s.ok and s.source == target), None)
    stable_from = None
    for s in after:
        good = s.ok and s.source == target
        stable_from = None if not good else (s.at if stable_from is None else stable_from)
    return {
        "stop_called_at_s": events.stop_called_at,
        "stopped_at_s": events.stopped_at,
        "restart_called_at_s": events.restart_called_at,
        "restarted_at_s": events.restarted_at,
        "during_outage": {
            "requests": len(during),
            "answered": sum(1 for s in during if s.status == 200),
            "degraded": sum(1 for s in during if s.status == 200 and not s.ok),
            "ok": sum(1 for s in during if s.ok),
            "degraded_latency_ms": latency([s.ms for s in during if s.status == 200 and not s.ok]),
        },
        "after_restart": {"requests": len(after), "ok": sum(1 for s in after if s.ok)},
        "recovery_first_ok_s": None if first_ok is None else round(first_ok - up_at, 3),
        "recovery_stable_s": None if stable_from is None else round(stable_from - up_at, 3),
        "recovery_from_restart_call_s": None
        if stable_from is None or events.restart_called_at is None
        else round(stable_from - events.restart_called_at, 3),
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def misses(results: dict[str, Any]) -> list[str]:
    found = []
    for phase, r in results["phases"].items():
        if r["errors"]:
            found.append(f"{phase}: {r['errors']} errors ({'; '.join(r['error_examples'])})")
        if phase != "pg-outage" and (r["degraded"] or r["wrong_source"]):
            found.append(f"{phase}: {r['degraded']} degraded, {r['wrong_source']} from another backend")
        if phase == "pg-outage":
            rec = r["recovery"]
            if rec["during_outage"]["answered"] != rec["during_outage"]["requests"]:
                found.append("pg-outage: requests unanswered during the outage")
            if rec["recovery_stable_s"] is None:
                found.append("pg-outage: pgvector did not answer again after the restart")
        if phase == "shadow-100" and r.get("shadow", {}).get("dropped"):
            found.append(f"shadow-100: {r['shadow']['dropped']} shadow reads dropped (queue full)")
    return found


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_table(results: dict[str, Any]) -> None:
    cols = ("req", 7), ("rps", 7), ("p50", 7), ("p95", 7), ("p99", 7), ("max", 8), ("err", 4), ("degr", 6)
    print(f"{'phase':<11} " + " ".join(f"{name:>{width}}" for name, width in cols) + "   (latency ms)")
    for phase, r in results["phases"].items():
        lat = r["latency_ms"]
        print(
            f"{phase:<11} {r['requests']:>7} {r['throughput_rps']:>7.1f} {_fmt(lat['p50']):>7} "
            f"{_fmt(lat['p95']):>7} {_fmt(lat['p99']):>7} {_fmt(lat['max']):>8} {r['errors']:>4} "
            f"{r['degraded']:>6}"
        )
    outage = results["phases"].get("pg-outage")
    if outage:
        rec = outage["recovery"]
        d = rec["during_outage"]
        print(
            f"pg-outage: {d['answered']}/{d['requests']} answered while PostgreSQL was down, {d['degraded']} "
            f"degraded (p50 {_fmt(d['degraded_latency_ms']['p50'])} / p95 "
            f"{_fmt(d['degraded_latency_ms']['p95'])} / p99 {_fmt(d['degraded_latency_ms']['p99'])} ms); "
            f"after the restart pgvector answered again in {_fmt(rec['recovery_first_ok_s'])} s (first ok), "
            f"{_fmt(rec['recovery_stable_s'])} s (every answer ok from then on), "
            f"{_fmt(rec['recovery_from_restart_call_s'])} s counted from the restart call"
        )
    shadow = results["phases"].get("shadow-100", {}).get("shadow")
    if shadow:
        print(f"shadow-100: shadow counters {shadow}")


# ---- main ----------------------------------------------------------------------------------------------
def run_phase(stack: Stack, phase: str, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(phase_env(stack, phase), stack.workdir / f"serve-{phase}.log")
    try:
        service.wait_ready()
        asyncio.run(drive(service.base_url, stack.users, 2.0, 10, seed=99))  # warm pools and caches
        if phase == "pg-outage":
            samples, wall, events = asyncio.run(
                drive_with_outage(service.base_url, stack.users, args.seconds, args.concurrency, stack.pgdata)
            )
            result = summarise(samples, wall, None)
            result["recovery"] = recovery(samples, events)
            result["events"] = events.log
        else:
            samples, wall = asyncio.run(drive(service.base_url, stack.users, args.seconds, args.concurrency))
            expect = "pgvector" if phase == "pgvector" else "legacy-conversation-memory"
            result = summarise(samples, wall, expect)
            if phase == "shadow-100":
                time.sleep(2)  # let the shadow worker finish what is queued
                result["shadow"] = service.status().get("shadow", {}).get("counters")
        result["service_status"] = service.status().get("service")
        return result
    finally:
        service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="per phase (default 60)")
    parser.add_argument("--concurrency", type=int, default=200, help="concurrent clients (default 200)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {PHASES}")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--items", type=int, default=50, help="legacy items per user")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument(
        "--mysql-url", default=os.environ.get("MEMWORK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
    )
    parser.add_argument(
        "--out", default=None, help="JSON file (default benchmarks/results/service_load-<stamp>.json)"
    )
    parser.add_argument("--json", action="store_true", help="also print the JSON")
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"--phases: unknown {unknown}; choose from {PHASES}")

    workdir = Path(tempfile.mkdtemp(prefix="mwload-", dir="/tmp"))
    pgdata = workdir / "pgdata"
    results: dict[str, Any] = {
        "benchmark": "service_load",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {k: getattr(args, k) for k in ("seconds", "concurrency", "users", "items", "dims")},
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "phases": {},
    }
    try:
        with scratch_mysql(args.mysql_url) as mysql_url:
            t0 = time.perf_counter()
            stack = build_data(mysql_url, pgdata, args.users, args.items, args.dims, workdir)
            results["setup_s"] = round(time.perf_counter() - t0, 1)
            print(
                f"{len(stack.users)} users x {args.items} legacy items (MariaDB), backfilled to pgvector "
                f"({args.dims} dims, HNSW) in {results['setup_s']} s; {args.concurrency} clients, "
                f"{args.seconds:g} s per phase",
                flush=True,
            )
            for phase in phases:
                results["phases"][phase] = run_phase(stack, phase, args)
                r = results["phases"][phase]
                print(f"  {phase}: {r['requests']} requests, {r['throughput_rps']} rps", flush=True)
        results["misses"] = misses(results)
        out = Path(args.out) if args.out else _default_out()
        out.parent.mkdir(parents=True, exist_ok=True)
        if results["misses"]:  # keep the service logs of a run that missed, next to its JSON
            logs = out.with_name(out.stem + "-serve-logs")
            logs.mkdir(exist_ok=True)
            for log in workdir.glob("serve-*.log"):
                shutil.copy(log, logs / log.name)
            results["serve_logs"] = str(logs)
    finally:
        stop_pg(pgdata)
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_average_after"] = os.getloadavg()
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print_table(results)
    print(f"results: {out}")
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
    for miss in results["misses"]:
        print(f"MISS {miss}")
    return 1 if results["misses"] else 0


def _default_out() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(__file__).resolve().parent / "results" / f"service_load-{stamp}-{uuid.uuid4().hex[:4]}.json"


if __name__ == "__main__":
    sys.exit(main())
