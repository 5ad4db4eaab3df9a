"""Load on ``memwork serve``: concurrent resolves on loopback, then pgvector taken away and given back.

Starts ``memwork serve`` as a subprocess per phase and drives ``POST /user-memory/v1/resolve`` with
``--concurrency`` closed-loop clients (a minimal asyncio HTTP/1.1 client, a connection each) for
``--seconds``:

1. ``legacy``        MEMORY_BACKEND=legacy (MariaDB legacy tables)
2. ``pgvector``      MEMORY_BACKEND=pgvector (embedded PostgreSQL + pgvector, HNSW table)
3. ``shadow-100``    legacy answers, every resolve also shadow-read on pgvector (MEMORY_SHADOW_SAMPLE=1)
4. ``pg-outage``     pgvector selected; the PostgreSQL server is stopped at 1/3 of the phase and started
                     again at 2/3. Every request must still be answered (fail-open: HTTP 200 with the
                     degraded payload); the degraded answers' latency is reported, and the time from the
                     restart until pgvector answers again (without restarting the service).
5. ``hang``          legacy; another connection holds ``LOCK TABLES ... WRITE`` on both legacy tables for
                     ``--hang-seconds`` while every client alternates a write (remember-recent, unique
                     text) and a resolve. The service's thread count must stay within
                     ``MEMWORK_SERVICE_THREADS`` (+ a few fixed threads); after the lock is released, no
                     write answered ``failed`` may be in the table.

Per phase: requests, throughput, p50/p95/p99/max latency, errors (transport errors or a status other
than 200: must be 0), degraded answers (``ok: false``) split into shed (no worker free before the
deadline), timed out (still running at the deadline) and other (a backend error), the service's
maximum thread count, and its own status counters. The target (the reference printed beside the
figures): p99 <= ``MEMORY_BACKEND_TIMEOUT_MS`` + 10 % in every phase, 0 errors, no degraded answer
other than shed or timed out outside the outage. Prints a table, writes JSON to
``benchmarks/results/service_load-<UTC stamp>.json`` (``--out``), exits 1 on a miss.

    python benchmarks/service_load.py                          # 200 clients, 60 s per phase
    python benchmarks/service_load.py --seconds 10 --concurrency 50 --phases legacy,pg-outage

The load driver shares the machine's cores with the service (and MariaDB and PostgreSQL), so latency
includes client-side queueing; rerun before believing a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
PHASES = ("legacy", "pgvector", "shadow-100", "pg-outage", "hang")
DEFAULT_PHASES = ("legacy", "pgvector", "shadow-100", "pg-outage")
P99_SLACK = 0.10  #: the target: p99 <= MEMORY_BACKEND_TIMEOUT_MS * (1 + P99_SLACK)
#: threads of `memwork serve` besides its workers: the event loop, the admin routes' two, the shared pool
#: (shadow reads), the shadow worker, psycopg's pool workers -- the hang phase allows this many more
FIXED_THREADS = 16
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
    from memwork.migrate.backfill import legacy_apply_options, run_backfill
    from memwork.pgvector.local_hash import write_module
    from memwork.pgvector.schema import ensure_schema
    from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

    rows = generate_legacy_items(users, items, seed=11)
    load_legacy_rows(mysql_url, ITEMS, rows)
    embedded.start(pgdata, cleanup_mode=None)
    pg_url = embedded.server_url("load", pgdata)
    ensure_schema(pg_url, "memory_embeddings", dims)
    run_backfill(legacy_apply_options(mysql_url, pg_url, HashEmbedder(dims), batch_size=2000))
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


def phase_env(stack: Stack, phase: str, timeout_ms: int, threads: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "MEMWORK_SERVICE_"))}
    env.update(
        MEMWORK_HOME=str(stack.workdir / "home"),
        MEMORY_LEGACY_DATABASE_URL=stack.mysql_url,
        MEMORY_VECTOR_ENABLED="1",
        MEMORY_PGVECTOR_DATABASE_URL=stack.pg_url,
        MEMORY_PGVECTOR_EMBEDDING_MODULE=stack.query_module,
        MEMORY_BACKEND="legacy" if phase in ("legacy", "shadow-100", "hang") else "pgvector",
        MEMORY_BACKEND_TIMEOUT_MS=str(timeout_ms),
    )
    if threads is not None:
        env["MEMWORK_SERVICE_THREADS"] = str(threads)
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

    def threads(self) -> int:
        """The service process's thread count now (Linux: /proc)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return -1

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
    shed: bool = False  #: degraded because no worker was free before the deadline
    timed_out: bool = False  #: degraded because the call was still running at the deadline
    route: str = "resolve"
    write_status: str | None = None  #: a write's answered status (stored / failed / pending)
    content: str | None = None  #: a write's unique text (the hang phase checks the table for it)


def sample_of(t0: float, started: float, answer: Any, route: str = "resolve") -> Sample:
    """One answered request: latency from ``t0``, and what the payload says about how it ended."""
    ms = (time.perf_counter() - t0) * 1000
    payload = answer.json() if answer.status_code == 200 else {}
    reason = str(payload.get("reason") or "")
    return Sample(
        t0 - started,
        ms,
        answer.status_code,
        bool(payload.get("ok")),
        payload.get("source"),
        None if answer.status_code == 200 else answer.text[:200],
        shed=bool(payload.get("shed")),
        timed_out="timed out" in reason,
        route=route,
        write_status=payload.get("status") if route == "write" else None,
    )


class RawAnswer:
    """What the driver reads of an answer (the two attributes of an httpx response it uses)."""

    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code = status_code
        self._body = body

    def json(self) -> Any:
        return json.loads(self._body)

    @property
    def text(self) -> str:
        return self._body.decode("utf-8", "replace")


class RawClient:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection (JSON POST only).

    The load driver shares the two cores with the service: httpx's AsyncClient costs ~8 ms of CPU per
    request at 200 connections (its pool walks every connection), which made the driver -- not the
    service -- the bottleneck (a no-op route: 24 rps at 200 clients vs 485 with this client)."""

    def __init__(self, base_url: str) -> None:
        parts = base_url.split("://", 1)[1].split(":")
        self.host, self.port = parts[0], int(parts[1])
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, json_body: Any) -> RawAnswer:
        try:
            return await self._exchange(path, json_body)
        except BaseException:
            await self.close()
            raise

    async def _exchange(self, path: str, json_body: Any) -> RawAnswer:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        body = json.dumps(json_body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self._writer.write(head + body)
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("connection closed without a response")
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        payload = await self._reader.readexactly(length)
        if close:
            await self.close()
        return RawAnswer(status, payload)

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class ThreadWatch:
    """Samples the service's thread count every ``every`` seconds in a background thread."""

    def __init__(self, service: Service, every: float = 0.25) -> None:
        import threading

        self.service = service
        self.every = every
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.counts.append(self.service.threads())
            except OSError:
                return

    def __enter__(self) -> ThreadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int | None:
        return max(self.counts) if self.counts else None


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
    """``concurrency`` closed-loop clients (a :class:`RawClient` connection each) for ``seconds``;
    returns every sample and the wall time."""
    rng = random.Random(seed)
    samples: list[Sample] = []
    started = time.perf_counter()
    stop_at = started + seconds

    async def client_loop(n: int) -> None:
        client = RawClient(base_url)
        while time.perf_counter() < stop_at:
            body = {
                "userId": rng.choice(users),
                "sessionId": f"load-{n}",
                "query": rng.choice(QUERIES),
                "limit": 10,
            }
            t0 = time.perf_counter()
            try:
                answer = await asyncio.wait_for(client.post("/user-memory/v1/resolve", body), 30.0)
                samples.append(sample_of(t0, started, answer))
            except Exception as exc:  # a transport error is an error sample, never a crash of the driver
                ms = (time.perf_counter() - t0) * 1000
                error = f"{type(exc).__name__} {exc!r} at {t0 - started:.1f} s after {ms:.0f} ms"
                samples.append(Sample(t0 - started, ms, 0, False, None, error[:300]))
        await client.close()

    await asyncio.gather(*(client_loop(n) for n in range(concurrency)))
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


async def drive_writes_and_resolves(
    base_url: str, users: list[str], seconds: float, concurrency: int, seed: int = 0
) -> tuple[list[Sample], float]:
    """Each client alternates a write (remember-recent of a unique text) and a resolve."""
    rng = random.Random(seed)
    samples: list[Sample] = []
    started = time.perf_counter()
    stop_at = started + seconds

    async def client_loop(n: int) -> None:
        client = RawClient(base_url)
        turn = 0
        while time.perf_counter() < stop_at:
            turn += 1
            user = rng.choice(users)
            content: str | None = None
            if turn % 2:
                content = f"hang write {n}-{turn} {uuid.uuid4().hex}"
                message = {"role": "user", "content": content}
                route, body = "write", {"userId": user, "sessionId": f"hang-{n}", "messages": [message]}
            else:
                route, body = "resolve", {"userId": user, "query": rng.choice(QUERIES), "limit": 10}
            path = "/user-memory/v1/remember-recent" if route == "write" else "/user-memory/v1/resolve"
            t0 = time.perf_counter()
            try:
                answer = await asyncio.wait_for(client.post(path, body), 30.0)
                sample = sample_of(t0, started, answer, route)
            except Exception as exc:
                ms = (time.perf_counter() - t0) * 1000
                sample = Sample(t0 - started, ms, 0, False, None, f"{type(exc).__name__} {exc!r}"[:300])
                sample.route = route
            sample.content = content
            samples.append(sample)
        await client.close()

    await asyncio.gather(*(client_loop(n) for n in range(concurrency)))
    return samples, time.perf_counter() - started


def stored_contents(mysql_url: str, contents: list[str]) -> set[str]:
    """Which of ``contents`` are in the legacy messages table."""
    from sqlalchemy import select

    from memwork.db import get_engine
    from memwork.legacy.schema import messages

    found: set[str] = set()
    with get_engine(mysql_url).connect() as conn:
        for start in range(0, len(contents), 500):
            chunk = contents[start : start + 500]
            found.update(
                conn.execute(select(messages.c.content).where(messages.c.content.in_(chunk))).scalars()
            )
    return found


def run_hang(stack: Stack, service: Service, args: argparse.Namespace) -> dict[str, Any]:
    """The hang phase: both legacy tables locked by another connection while clients write and read."""
    from urllib.parse import urlsplit

    import pymysql

    parts = urlsplit(stack.mysql_url)
    locker = pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
    )
    before = service.threads()
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES h5_conversation_messages WRITE, h5_user_memory_items WRITE")
        with ThreadWatch(service) as watch:
            samples, wall = asyncio.run(
                drive_writes_and_resolves(service.base_url, stack.users, args.hang_seconds, args.concurrency)
            )
        with locker.cursor() as cur:
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()
    time.sleep(5)  # jobs abandoned at their deadline finish (or roll back) after the lock is gone
    after = service.threads()
    result = summarise(samples, wall, None)
    writes = [s for s in samples if s.route == "write" and s.content and s.status == 200]
    stored = stored_contents(stack.mysql_url, [s.content for s in writes if s.content])
    by_status: dict[str, dict[str, int]] = {}
    for s in writes:
        row = by_status.setdefault(s.write_status or "none", {"answered": 0, "in_table": 0})
        row["answered"] += 1
        row["in_table"] += s.content in stored
    result["hang"] = {
        "seconds": args.hang_seconds,
        "threads_before": before,
        "threads_peak": watch.peak,
        "threads_after": after,
        "threads_setting": args.threads,
        "writes_by_answer": by_status,
        "failed_but_stored": by_status.get("failed", {}).get("in_table", 0),
    }
    return result


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
        "ok_latency_ms": latency([s.ms for s in samples if s.ok]),
        "errors": len(errors),
        "error_examples": sorted({e.error or str(e.status) for e in errors})[:5],
        "degraded": len(degraded),
        "shed": sum(1 for s in degraded if s.shed),
        "timed_out": sum(1 for s in degraded if s.timed_out and not s.shed),
        "degraded_other": sum(1 for s in degraded if not s.shed and not s.timed_out),
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
    # sent after the restart, and not shed: a shed answer never reached a backend, so it says nothing of it
    after = sorted((s for s in samples if s.at >= up_at and not s.shed), key=lambda s: s.at)
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
    target = results["reference"]["p99_target_ms"]
    for phase, r in results["phases"].items():
        if r["errors"]:
            found.append(f"{phase}: {r['errors']} errors ({'; '.join(r['error_examples'])})")
        p99 = r["latency_ms"]["p99"]
        if p99 is not None and p99 > target:
            found.append(f"{phase}: p99 {p99:.0f} ms over the target {target:.0f} ms")
        if phase not in ("pg-outage", "hang") and (r["degraded_other"] or r["wrong_source"]):
            found.append(
                f"{phase}: {r['degraded_other']} degraded by a backend error, "
                f"{r['wrong_source']} from another backend"
            )
        if phase == "hang":
            hang = r["hang"]
            allowed = (hang["threads_setting"] or results["reference"]["threads"]) + FIXED_THREADS
            if hang["threads_peak"] is not None and hang["threads_peak"] > allowed:
                found.append(f"hang: {hang['threads_peak']} threads, more than {allowed}")
            if hang["failed_but_stored"]:
                found.append(f"hang: {hang['failed_but_stored']} writes answered failed are in the table")
        if phase == "pg-outage":
            rec = r["recovery"]
            if rec["during_outage"]["answered"] != rec["during_outage"]["requests"]:
                found.append("pg-outage: requests unanswered during the outage")
            if rec["recovery_stable_s"] is None:
                found.append("pg-outage: pgvector did not answer again after the restart")
        if phase == "shadow-100" and r.get("shadow", {}).get("dropped"):
            found.append(f"shadow-100: {r['shadow']['dropped']} shadow reads dropped (queue full)")
    return found


def _load(value: Any) -> str:
    return "-" if not value else " / ".join(f"{v:.1f}" for v in value)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_table(results: dict[str, Any]) -> None:
    ref = results["reference"]
    print(
        f"reference: MEMORY_BACKEND_TIMEOUT_MS={ref['timeout_ms']}, "
        f"MEMWORK_SERVICE_THREADS={ref['threads']}, "
        f"target p99 <= {ref['p99_target_ms']:.0f} ms, 0 errors; {results['settings']['concurrency']} "
        f"clients, {results['settings']['seconds']:g} s per phase; {results['cpus']} cpus, load average "
        f"{_load(results['load_average_before'])} before, {_load(results.get('load_average_after'))} after"
    )
    cols = (
        ("req", 7),
        ("rps", 7),
        ("p50", 7),
        ("p95", 7),
        ("p99", 7),
        ("max", 8),
        ("err", 4),
        ("degr", 6),
        ("shed", 6),
        ("t/o", 5),
        ("thr", 4),
    )
    print(f"{'phase':<11} " + " ".join(f"{name:>{width}}" for name, width in cols) + "   (latency ms)")
    for phase, r in results["phases"].items():
        lat = r["latency_ms"]
        print(
            f"{phase:<11} {r['requests']:>7} {r['throughput_rps']:>7.1f} {_fmt(lat['p50']):>7} "
            f"{_fmt(lat['p95']):>7} {_fmt(lat['p99']):>7} {_fmt(lat['max']):>8} {r['errors']:>4} "
            f"{r['degraded']:>6} {r['shed']:>6} {r['timed_out']:>5} {r.get('threads_peak') or '-':>4}"
        )
    hang = results["phases"].get("hang", {}).get("hang")
    if hang:
        print(
            f"hang: threads {hang['threads_before']} before, peak {hang['threads_peak']} during the "
            f"{hang['seconds']:g} s lock, {hang['threads_after']} 5 s after; writes by answer (answered / "
            f"in the table after the lock): {hang['writes_by_answer']}"
        )
    for phase, r in results["phases"].items():
        status = r.get("service_status") or {}
        print(f"{phase}: service status shed={status.get('shed')} workers={status.get('workers')}")
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
    env = phase_env(stack, phase, args.timeout_ms, args.threads)
    service = Service(env, stack.workdir / f"serve-{phase}.log")
    try:
        service.wait_ready()
        asyncio.run(drive(service.base_url, stack.users, 2.0, 10, seed=99))  # warm pools and caches
        if phase == "hang":
            result = run_hang(stack, service, args)
            result["threads_peak"] = result["hang"]["threads_peak"]
        elif phase == "pg-outage":
            with ThreadWatch(service) as watch:
                samples, wall, events = asyncio.run(
                    drive_with_outage(
                        service.base_url, stack.users, args.seconds, args.concurrency, stack.pgdata
                    )
                )
            result = summarise(samples, wall, None)
            result["recovery"] = recovery(samples, events)
            result["events"] = events.log
            result["threads_peak"] = watch.peak
        else:
            with ThreadWatch(service) as watch:
                samples, wall = asyncio.run(
                    drive(service.base_url, stack.users, args.seconds, args.concurrency)
                )
            expect = "pgvector" if phase == "pgvector" else "legacy-conversation-memory"
            result = summarise(samples, wall, expect)
            result["threads_peak"] = watch.peak
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
    parser.add_argument(
        "--phases", default=",".join(DEFAULT_PHASES), help=f"comma-separated subset of {PHASES}"
    )
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=int(os.environ.get("MEMORY_BACKEND_TIMEOUT_MS") or 2000),
        help="MEMORY_BACKEND_TIMEOUT_MS of the service (default: the environment's, else 2000)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="MEMWORK_SERVICE_THREADS (default: the service's own)"
    )
    parser.add_argument("--hang-seconds", type=float, default=20.0, help="the hang phase's lock (default 20)")
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

    from memwork.service.app import DEFAULT_THREADS

    workdir = Path(tempfile.mkdtemp(prefix="mwload-", dir="/tmp"))
    pgdata = workdir / "pgdata"
    threads = args.threads or DEFAULT_THREADS
    results: dict[str, Any] = {
        "benchmark": "service_load",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            k: getattr(args, k)
            for k in (
                "seconds",
                "concurrency",
                "users",
                "items",
                "dims",
                "timeout_ms",
                "threads",
                "hang_seconds",
            )
        },
        "reference": {
            "timeout_ms": args.timeout_ms,
            "threads": threads,
            "p99_target_ms": args.timeout_ms * (1 + P99_SLACK),
        },
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
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print_table(results)
    print(f"uptime after: {results['uptime']}")
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
