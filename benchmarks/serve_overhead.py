"""``memwork serve`` against the smallest FastAPI app calling the same backend object (issue 20, Service).

Target: ``memwork serve`` >= 0.9x the requests/s of ``serve_minimal_app.py`` (one sync FastAPI route
calling ``backend.resolve`` on the backend object the facade selects), legacy and pgvector, at 32
closed-loop clients -- printed in one run, the reference beside each figure.

Data as in ``service_load.py`` (``build_data``: 200 users x 50 legacy items in a scratch MariaDB
database, backfilled with the hash embedder into a dedicated embedded PostgreSQL with HNSW). Per
backend and repetition, both servers run in turn (the order alternates between repetitions), each as
its own process with the same environment: 2 s warm-up, then ``--seconds`` of load from a separate
load-generator process -- ``wrk`` when installed (a Lua script picks a random user and query per
request and counts any answer that is not HTTP 200 with ``"ok":true``), else a Python asyncio
driver (``service_load.drive``, a raw keep-alive connection per client) in a child process. The
ratio is taken per repetition (the two servers measured back to back, under about the same outside
load) and reported as median and min-max over the repetitions, with the load average.

    python benchmarks/serve_overhead.py                       # 3 reps x 15 s per server and backend
    python benchmarks/serve_overhead.py --reps 5 --seconds 20 --driver python

Exit status 1 when a backend's median ratio is below the target, or any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pgvector_common import scratch_mysql
from service_load import QUERIES, Service, build_data, drive, free_port, phase_env, stop_pg, summarise

TARGET = 0.9
ROUTE = "/user-memory/v1/resolve"
MINIMAL_APP = Path(__file__).resolve().parent / "serve_minimal_app.py"
SERVERS = ("memwork", "minimal")


class MinimalApp(Service):
    """``serve_minimal_app.py`` in a subprocess (the same start/ready/stop as ``memwork serve``)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(MINIMAL_APP), str(self.port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )


# ---- load generators (always another process than the server and than this script) ---------------------
WRK_LUA = """
local users = {%(users)s}
local queries = {%(queries)s}
local counter = 0
local threads = {}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
  math.randomseed(os.time() + counter)
  counter = counter + 1
end

function request()
  local body = string.format('{"userId":%%s,"sessionId":"wrk","query":%%s,"limit":10}',
    users[math.random(#users)], queries[math.random(#queries)])
  return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"ok":true', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local notok = 0
  for _, thread in ipairs(threads) do
    notok = notok + thread:get("bad")
  end
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests":%%d,"duration_us":%%d,"not_ok":%%d,"socket_errors":%%d,' ..
    '"p50_us":%%d,"p95_us":%%d,"p99_us":%%d,"max_us":%%d}\\n',
    summary.requests, summary.duration, notok, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
"""


def _lua_list(values: list[str]) -> str:
    """Each value as its JSON string literal (quotes included), inside a Lua long bracket (no escapes)."""
    return ",".join(f"[==[{json.dumps(v, ensure_ascii=False)}]==]" for v in values)


def write_wrk_script(workdir: Path, users: list[str]) -> Path:
    script = workdir / "resolve.lua"
    script.write_text(WRK_LUA % {"users": _lua_list(users), "queries": _lua_list(list(QUERIES))})
    return script


def run_wrk(url: str, script: Path, seconds: float, concurrency: int) -> dict[str, Any]:
    threads = max(1, min(2, concurrency))
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{concurrency}",
            f"-d{seconds:g}s",
            "--timeout",
            "30s",
            "-s",
            str(script),
            url + ROUTE,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    raw = json.loads(line.removeprefix("RESULT "))
    wall = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"],
        "seconds": round(wall, 2),
        "throughput_rps": round(raw["requests"] / wall, 1),
        "p50_ms": raw["p50_us"] / 1000,
        "p95_ms": raw["p95_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "not_ok": raw["not_ok"] + raw["socket_errors"],
    }


def run_python_driver(url: str, users_file: Path, seconds: float, concurrency: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--drive", url, "--users-file", str(users_file)]
    cmd += ["--seconds", str(seconds), "--concurrency", str(concurrency)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def drive_main(url: str, users_file: Path, seconds: float, concurrency: int) -> None:
    """The Python load generator's process: ``service_load.drive``, one JSON line on stdout."""
    users = json.loads(users_file.read_text())
    samples, wall = asyncio.run(drive(url, users, seconds, concurrency, seed=int(time.time())))
    s = summarise(samples, wall, None)
    result = {
        "requests": s["requests"],
        "seconds": s["seconds"],
        "throughput_rps": s["throughput_rps"],
        "p50_ms": s["latency_ms"]["p50"],
        "p95_ms": s["latency_ms"]["p95"],
        "p99_ms": s["latency_ms"]["p99"],
        "not_ok": s["errors"] + s["degraded"],
    }
    print(json.dumps(result))


# ---- one measurement ---------------------------------------------------------------------------------------
def measure(
    server: str, env: dict[str, str], args: argparse.Namespace, ctx: dict[str, Any]
) -> dict[str, Any]:
    log = ctx["workdir"] / f"{server}-{env['MEMORY_BACKEND']}-{uuid.uuid4().hex[:6]}.log"
    proc = Service(env, log) if server == "memwork" else MinimalApp(env, log)
    try:
        proc.wait_ready()
        load_before = os.getloadavg()[0]
        if ctx["driver"] == "wrk":
            run_wrk(proc.base_url, ctx["script"], 2.0, 8)  # warm pools and caches
            result = run_wrk(proc.base_url, ctx["script"], args.seconds, args.concurrency)
        else:
            run_python_driver(proc.base_url, ctx["users_file"], 2.0, 8)
            result = run_python_driver(proc.base_url, ctx["users_file"], args.seconds, args.concurrency)
        result["load_before"] = round(load_before, 2)
        result["load_after"] = round(os.getloadavg()[0], 2)
        if server == "memwork":  # what memwork itself counted (a shed answer would flatter its rps)
            counts = proc.status().get("service", {}).get("operations", {}).get("resolve", {})
            result["degraded"] = counts.get("degraded", 0)
            result["shed"] = counts.get("shed", 0)
        return result
    finally:
        proc.stop()


def settle(pg_url: str) -> None:
    """``VACUUM ANALYZE`` the freshly backfilled table, so no autovacuum runs during the first phase."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memory_embeddings")


def run(args: argparse.Namespace, stack: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    backends: dict[str, Any] = {}
    for backend in args.backends.split(","):
        env = phase_env(stack, backend, args.timeout_ms, None)
        if args.minimal_threads:
            env["MINIMAL_APP_THREADS"] = str(args.minimal_threads)
        reps = []
        for rep in range(args.reps):
            order = SERVERS if rep % 2 == 0 else SERVERS[::-1]
            row = {server: measure(server, env, args, ctx) for server in order}
            row["ratio"] = round(row["memwork"]["throughput_rps"] / row["minimal"]["throughput_rps"], 3)
            reps.append(row)
            m, r = row["memwork"], row["minimal"]
            print(
                f"  {backend} rep {rep + 1}: memwork {m['throughput_rps']} rps (p50 {m['p50_ms']:.0f} ms) / "
                f"minimal {r['throughput_rps']} rps (p50 {r['p50_ms']:.0f} ms) = {row['ratio']:.2f}  "
                f"load {m['load_before']}-{r['load_after']}",
                flush=True,
            )
        ratios = [row["ratio"] for row in reps]
        backends[backend] = {
            "reps": reps,
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return backends


def _median(reps: list[dict[str, Any]], server: str, key: str) -> float:
    return statistics.median(row[server][key] for row in reps)


def print_table(results: dict[str, Any]) -> None:
    s = results["settings"]
    print(
        f"\nmemwork serve vs minimal FastAPI app (same backend object), {s['concurrency']} clients, "
        f"{s['seconds']:g} s x {s['reps']} reps, driver {results['driver']}, minimal app's threads "
        f"{s['minimal_threads'] or 'FastAPI default (40)'}; target ratio >= {TARGET}"
    )
    head = (
        f"{'backend':<9} {'server':<8} {'req/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'not ok':>6}"
    )
    print(head + "   ratio median (min-max)")
    for backend, b in results["backends"].items():
        for server in SERVERS:
            rps = _median(b["reps"], server, "throughput_rps")
            p50, p95 = _median(b["reps"], server, "p50_ms"), _median(b["reps"], server, "p95_ms")
            p99 = _median(b["reps"], server, "p99_ms")
            bad = sum(row[server]["not_ok"] for row in b["reps"])
            line = f"{backend:<9} {server:<8} {rps:>8.1f} {p50:>7.1f} {p95:>7.1f} {p99:>7.1f} {bad:>6}"
            if server == "memwork":
                verdict = "ok" if b["ratio_median"] >= TARGET else "MISS"
                line += f"   {b['ratio_median']:.2f} ({b['ratio_min']:.2f}-{b['ratio_max']:.2f}) {verdict}"
            print(line)
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")


def misses(results: dict[str, Any]) -> list[str]:
    found = []
    for backend, b in results["backends"].items():
        if b["ratio_median"] < TARGET:
            found.append(f"{backend}: median ratio {b['ratio_median']} < {TARGET}")
        bad = sum(row[s]["not_ok"] for row in b["reps"] for s in SERVERS)
        if bad:
            found.append(f"{backend}: {bad} requests not answered 200 ok")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="per server, backend and rep (default 15)"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop clients (default 32)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per backend (default 3)")
    parser.add_argument(
        "--backends", default="legacy,pgvector", help="comma-separated (default legacy,pgvector)"
    )
    parser.add_argument(
        "--driver", choices=("auto", "wrk", "python"), default="auto", help="auto: wrk if installed"
    )
    parser.add_argument(
        "--minimal-threads",
        type=int,
        default=None,
        help="cap the minimal app's thread pool (default: FastAPI's, 40; memwork: MEMWORK_SERVICE_THREADS)",
    )
    parser.add_argument(
        "--timeout-ms", type=int, default=2000, help="MEMORY_BACKEND_TIMEOUT_MS (default 2000)"
    )
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--items", type=int, default=50, help="legacy items per user")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument(
        "--mysql-url", default=os.environ.get("MEMWORK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
    )
    parser.add_argument(
        "--out", default=None, help="JSON file (default benchmarks/results/serve_overhead-<stamp>.json)"
    )
    parser.add_argument(
        "--drive", default=None, help=argparse.SUPPRESS
    )  # the Python load generator's process
    parser.add_argument("--users-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive_main(args.drive, Path(args.users_file), args.seconds, args.concurrency)
        return 0
    driver = args.driver if args.driver != "auto" else ("wrk" if shutil.which("wrk") else "python")
    if driver == "wrk" and not shutil.which("wrk"):
        parser.error("--driver wrk: wrk is not installed (apt-get install wrk), or use --driver python")
    workdir = Path(tempfile.mkdtemp(prefix="mwserve-", dir="/tmp"))
    pgdata = workdir / "pgdata"
    results: dict[str, Any] = {
        "benchmark": "serve_overhead",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            k: getattr(args, k)
            for k in ("seconds", "concurrency", "reps", "timeout_ms", "users", "items", "minimal_threads")
        },
        "driver": driver,
        "target_ratio": TARGET,
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        with scratch_mysql(args.mysql_url) as mysql_url:
            stack = build_data(mysql_url, pgdata, args.users, args.items, args.dims, workdir)
            settle(stack.pg_url)
            users_file = workdir / "users.json"
            users_file.write_text(json.dumps(stack.users))
            ctx = {"workdir": workdir, "driver": driver, "users_file": users_file}
            if driver == "wrk":
                ctx["script"] = write_wrk_script(workdir, stack.users)
            print(f"{len(stack.users)} users x {args.items} items; driver {driver}", flush=True)
            results["backends"] = run(args, stack, ctx)
    finally:
        stop_pg(pgdata)
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results["misses"] = misses(results)
    out = Path(args.out) if args.out else _default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"uptime: {results['uptime']}\nresults: {out}")
    for miss in results["misses"]:
        print(f"MISS {miss}")
    return 1 if results["misses"] else 0


def _default_out() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(__file__).resolve().parent / "results" / f"serve_overhead-{stamp}-{uuid.uuid4().hex[:4]}.json"


if __name__ == "__main__":
    sys.exit(main())
