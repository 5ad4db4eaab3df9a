"""The demo's shadow-read canary: the demo data served by ``memwork serve``, shadow reads judged.

Legacy answers the callers (phase 1 of the rollout: ``MEMORY_BACKEND=legacy``) and every resolve is
also sent to pgvector off the reply path (``MEMORY_SHADOW_BACKEND=pgvector``,
``MEMORY_SHADOW_SAMPLE=1``); the comparisons go to a log in the demo workspace, and the
``canary_signoff`` report judges that log against the running service (its status is recorded in the
sign-off). The traffic is what users send: a random memory of a user as the query, limit 10. Legacy
ranks a user's memories by recency and pgvector by meaning, so the rank-agreement metrics are shown
and never decide; the backfill verification (the migration certificate), shadow errors, cross-user
memories, underfill and the latency SLO do. A correct migration ends on GO; whatever the judge says
is the demo's finding, with its reasons.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

#: enough for a GO: 0 errors in n proves the 1 % error and underfill budgets at any look from n ~ 374
#: (memwork.rollout.sequential; no method proves 1 % at 95 % below 299)
DEMO_SHADOW_REQUESTS = 400
DEMO_SHADOW_LIMIT = 10


def shadow_env(data: dict[str, Any], log_path: Path, token: str, query_module: str) -> dict[str, str]:
    """The service's environment: legacy primary, pgvector shadow at 100 %, a bearer token."""
    return {
        "MEMORY_ENABLED": "1",
        "MEMORY_BACKEND": "legacy",
        "MEMORY_LEGACY_DATABASE_URL": data["legacy_url"],
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_PGVECTOR_DATABASE_URL": data["pgvector_url"],
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": query_module,
        "MEMORY_BACKEND_TIMEOUT_MS": "5000",
        "MEMORY_SHADOW_BACKEND": "pgvector",
        "MEMORY_SHADOW_SAMPLE": "1",
        "MEMORY_SHADOW_LOG": str(log_path),
        "MEMWORK_API_TOKEN": token,
    }


def send_resolves(base_url: str, token: str, requests: list[dict[str, Any]]) -> int:
    """POST each resolve to the service; returns how many answered 200."""
    import httpx

    answered = 0
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for request in requests:
            answered += http.post("/user-memory/v1/resolve", json=request).status_code == 200
    return answered


def run_shadow_canary(
    data: dict[str, Any],
    folder: Path,
    reports: Path,
    *,
    query_module: str,
    health_summary: str = "",
    verification_summary: str = "",
    certificate: str = "",
    waive: str = "",
    requests: int = DEMO_SHADOW_REQUESTS,
) -> Any:
    """Serve the demo data, send ``requests`` resolves of real users, judge the shadow log; the run.

    First an A/A stage: the same resolves with legacy shadowed by itself
    (:func:`memwork.service.shadow.aa_env`), whose log is the judge's ``aa_log`` -- the noise floor
    the sign-off shows measured. ``certificate``: a migration certificate's summary.json
    (:func:`memwork.certify.certify`), the quality gate when it is not the backfill verification's;
    ``waive``: the input reports signed off without, with their reasons. Returns the
    :func:`memwork.reports.run_report` result of ``canary_signoff`` (judge mode)."""
    from memwork.reports import run_report
    from memwork.rollout.gates import sample_requests
    from memwork.service.app import create_app, running
    from memwork.service.shadow import aa_env

    log_path = folder / "shadow" / "comparisons.jsonl"
    aa_path = folder / "shadow" / "aa.jsonl"
    for path in (log_path, aa_path):
        for part in (path, path.with_name(path.name + ".1")):
            part.unlink(missing_ok=True)  # a re-run judges its own traffic only
    token = secrets.token_urlsafe(24)
    batch = sample_requests(data["legacy_url"], requests, seed=7, limit=DEMO_SHADOW_LIMIT)
    # a small store has fewer memories than requests: users ask again, in the same order
    batch = (batch * -(-requests // max(len(batch), 1)))[:requests]
    baseline = create_app(aa_env(shadow_env(data, log_path, token, query_module), aa_path))
    with running(baseline) as base_url:
        send_resolves(base_url, token, batch)
        baseline.state.memwork.shadow.drain(timeout_s=60)
    app = create_app(shadow_env(data, log_path, token, query_module))
    with running(app) as base_url:
        send_resolves(base_url, token, batch)
        app.state.memwork.shadow.drain(timeout_s=60)
        probes = write_leak_probes(base_url, token, folder / "shadow" / "probes.json")
        params = {
            "base_url": base_url,
            "token": token,
            "comparison_log": str(log_path),
            "health_summary": health_summary,
            "verification_summary": verification_summary,
            "certificate": certificate,
            "aa_log": str(aa_path),
            "leak_probes": str(probes),
            "waive": waive,
            "approver": "memwork demo",
        }
        return run_report("canary_signoff", params, reports, raise_on_error=False)


#: the demo's cross-user probes: 400 (200 distinct user pairs) show a leak rate below 1 % at 95 %
#: (a production sign-off sends ~3,000 against the default 0.1 %)
DEMO_PROBES = 400
DEMO_MAX_LEAK_RATE = 0.01


def write_leak_probes(base_url: str, token: str, path: Path) -> Path:
    """Send the demo's cross-user probes through the served app and write their result file (what
    ``memwork canary app --probes N --json`` writes), the sign-off's ``leak_probes``."""
    from memwork.rollout.app_canary import run_leak_probes

    found = run_leak_probes(
        base_url, DEMO_PROBES, token=token, max_leak_rate=DEMO_MAX_LEAK_RATE, max_leak_rate_origin="set"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"leakProbes": found.to_dict()}, indent=2), encoding="utf-8")
    return path


#: the real-text migration of the demo: at most 24 standard-library modules (users) of at most 25
#: docstrings (memories) each -- about 360 rows, a few seconds to embed with the real model
REAL_TEXT_USERS = 24
REAL_TEXT_ITEMS_PER_USER = 25
REAL_TEXT_DATABASE = "pg://embedded/memwork_demo_stdlib"


def run_real_text_canary(
    folder: Path, reports: Path, *, embedder: Any, query_module: str, seed: int = 2024
) -> tuple[Any, dict[str, Any]]:
    """The same rollout judged on real human-written text: a legacy store of the standard library's
    docstrings (:mod:`memwork.samples.real_text`), backfilled by ``embedder``, certified
    (:func:`memwork.certify.certify`), served with shadow reads and judged with that certificate as
    the quality gate. Returns the ``canary_signoff`` run and what the data was."""
    import sys

    from memwork.certify import CertifyOptions, certify
    from memwork.samples.migration import build_migration

    folder.mkdir(parents=True, exist_ok=True)
    migration = build_migration(
        f"sqlite:///{folder / 'legacy.db'}",
        REAL_TEXT_DATABASE,
        dataset="stdlib",
        n_users=REAL_TEXT_USERS,
        items_per_user=REAL_TEXT_ITEMS_PER_USER,
        embedder=embedder,
        seed=seed,
    )
    cert_dir = folder / "certificate"
    cert = certify(CertifyOptions(migration.source_url, migration.dest_url, output_dir=cert_dir))
    data = {"legacy_url": migration.source_url, "pgvector_url": migration.dest_url}
    run = run_shadow_canary(
        data,
        folder,
        reports,
        query_module=query_module,
        certificate=str(cert_dir / "summary.json"),
        waive="health_summary: a legacy table of docstrings, no memwork entry store to report on",
    )
    users = _count_users(migration.source_url)
    about = {
        "items": migration.items,
        "active_items": migration.active,
        "users": users,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "certificate": cert.verdict,
    }
    return run, about


def _count_users(legacy_url: str) -> int:
    from sqlalchemy import func, select

    from memwork.db import get_engine
    from memwork.legacy.schema import memory_items

    with get_engine(legacy_url).connect() as conn:
        return int(conn.execute(select(func.count(func.distinct(memory_items.c.user_id)))).scalar_one())
