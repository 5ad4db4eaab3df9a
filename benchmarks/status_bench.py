"""``status()`` with nothing configured: all nine backends listed, the eight non-legacy ones unavailable with
a reason, and no network touched.

Target: the facade built from an empty environment and its ``status()`` in < 100 ms (median of repeated
fresh builds in one process, imports done), and the whole ``memwork status --json`` process reported for
context (Python start-up and imports dominate it). Exits 1 on a miss or when a backend is wrongly
available.

    python benchmarks/status_bench.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS = 100.0


def measure_in_process(repeat: int, env: dict[str, str]) -> tuple[list[float], dict]:
    from memwork.facade.facade import facade_from_env

    facade_from_env(env).status()  # imports, first load of every adapter module
    times, payload = [], {}
    for _ in range(repeat):
        started = time.perf_counter()
        facade = facade_from_env(env)
        payload = facade.status()
        times.append((time.perf_counter() - started) * 1000)
        facade.close()
    return times, payload


def measure_process(env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memwork", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return (time.perf_counter() - started) * 1000, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="memwork-status-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "MEMWORK_"))}
    env["MEMWORK_HOME"] = home
    os.environ.clear()
    os.environ.update(env)
    times, payload = measure_in_process(args.repeat, env)
    process_ms, cli_payload = measure_process(env)
    backends = payload["backends"]
    wrongly_available = [b["name"] for b in backends[1:] if b["available"]]
    without_reason = [b["name"] for b in backends if not b["available"] and not b["reason"]]
    median = statistics.median(times)
    print(f"backends listed: {len(backends)} ({', '.join(b['name'] for b in backends)})")
    for b in backends:
        print(f"  {b['name']:<28} {'available' if b['available'] else 'unavailable: ' + str(b['reason'])}")
    print(
        f"facade_from_env({{}}).status(): median {median:.2f} ms, max {max(times):.2f} ms, {args.repeat} runs"
    )
    print(f"`memwork status --json` process: {process_ms:.0f} ms (Python start-up and imports included)")
    ok = median < TARGET_MS and len(backends) == 9 and not wrongly_available and not without_reason
    ok = ok and len(cli_payload["backends"]) == 9
    verdict = "met" if ok else "MISSED"
    print(f"target < {TARGET_MS:.0f} ms, nine backends, eight unavailable with reasons: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
