"""``memwork demo``: the main job on embedded defaults, end to end, safe to re-run.

Builds a workspace -- a SQLite legacy store (hundreds of users and sessions; exact and near
duplicates, paraphrases, some Chinese), a defrag entry store (low-quality, stale items, stubs) and
the embedded PostgreSQL + pgvector -- then runs the schema, the backfill and all four reports, and
ends with the rollout's canary: the data served by ``memwork serve`` with shadow reads of pgvector,
judged statistically (:mod:`memwork.samples.shadow_demo`), once on the generated data and once on real
human-written text (the standard library's docstrings, :mod:`memwork.samples.real_text`); then rebuilds
``reports/index.html``. Every step rebuilds its data, so a second run gives the same result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memwork.workspace import using_workspace

DEMO_USERS = 300
DEMO_ITEMS_PER_USER = 12
DEMO_SESSIONS_PER_USER = 2
DEMO_ENTRIES = 1500
DEMO_DATABASE = "pg://embedded/memwork_demo"
# the real model (onnxruntime, default install): the duplicate review and the backfill show semantic
# similarity, not the hash embedder's shared words. Its dimension (384) is the pgvector table's, and the
# canary embeds its runtime queries with the same model.
DEMO_EMBEDDER = "minilm"
DEMO_QUERY_MODULE = "memwork.pgvector.minilm"


@dataclass
class DemoResult:
    """Where everything is, what each report said, and how long it took."""

    workspace: str
    legacy_url: str
    store: str
    pgvector_url: str
    reports_dir: str
    index: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """The worst report exit code; the shadow canary's judged verdict (GO, NO-GO, INCONCLUSIVE) is the
        demo's finding, not a failure of the demo -- only its failing to run counts."""
        return max((_demo_exit_code(r) for r in self.runs), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "exit_code": self.exit_code}

    def describe(self) -> str:
        d = self.data
        lines = [
            f"memwork demo: workspace {self.workspace}",
            f"  data: {d.get('users')} users, {d.get('sessions')} sessions ({d.get('messages')} messages), "
            f"{d.get('items')} legacy items ({d.get('active_items')} active, {d.get('backfilled')} "
            f"backfilled), {d.get('entries')} store entries",
            *self._real_text_line(),
            f"  legacy store: {self.legacy_url}",
            f"  entry store:  {self.store}",
            f"  pgvector:     {self.pgvector_url}",
        ]
        for run in self.runs:
            lines.append(
                f"  {run['name']:<30} {run['verdict']:<12} {run['duration_s']:>6.1f} s  {run['html']}"
            )
            lines.extend(f"      - {reason}" for reason in run.get("reasons", [])[:5])
            if run.get("since"):
                lines.append(f"      {run['since']}")
        lines.extend(VERDICTS_MEANING)
        lines.append(f"  index: {self.index}")
        lines.append(f"  total {sum(self.timings.values()):.1f} s")
        return "\n".join(lines)

    def _real_text_line(self) -> list[str]:
        real = self.data.get("real_text")
        if not real:
            return []
        return [
            f"  real text: {real['items']} docstrings of {real['users']} standard-library modules "
            f"(Python {real['python']}; {real['active_items']} active, one module a user), "
            f"migrated the same way; certificate {real['certificate']}"
        ]


#: what the demo's verdicts mean, printed after them
VERDICTS_MEANING = (
    "  what the verdicts mean:",
    "    PASS / GO     every gate that decides passed: the report's gate strip names each, its threshold",
    "                  and whether that is the default, and says how many passed",
    "    FAIL / NO-GO  a gate failed: the reasons name it -- do not roll out",
    "    INCONCLUSIVE  too little data to decide (exit 3): let the shadow run longer, judge again",
    "    INFO          a finding to review (the duplicate review), not a gate",
    "  the shadow canary: legacy answers newest first, pgvector nearest first, so their agreement is",
    "    shown and never decides; the backfill verification (the migration certificate), errors,",
    '    cross-user memories, underfill and the latency SLO decide; "real text" is the same rollout',
    "    judged on human-written text (Python's own docstrings) with its migration certificate",
)


def _demo_exit_code(run: dict[str, Any]) -> int:
    if run.get("finding") and not run.get("error"):
        return 0
    return int(run["exit_code"])


def build_demo_data(
    folder: Path,
    *,
    seed: int = 2024,
    users: int = DEMO_USERS,
    items_per_user: int = DEMO_ITEMS_PER_USER,
    sessions_per_user: int = DEMO_SESSIONS_PER_USER,
    entries: int = DEMO_ENTRIES,
) -> dict[str, Any]:
    """The legacy SQLite store, the defrag entry store and the backfilled pgvector table."""
    from memwork.embed import load_embedder
    from memwork.samples.entries import generate_entries
    from memwork.samples.legacy import (
        ITEMS,
        MESSAGES,
        generate_conversations,
        generate_legacy_items,
        load_legacy_rows,
    )
    from memwork.samples.migration import build_migration
    from memwork.stores import open_store

    folder.mkdir(parents=True, exist_ok=True)
    embedder = load_embedder(DEMO_EMBEDDER)
    assert embedder is not None  # the spec names a model
    legacy_url = f"sqlite:///{folder / 'legacy.db'}"
    items = generate_legacy_items(users, items_per_user, seed=seed)
    load_legacy_rows(legacy_url, ITEMS, items, replace=True)
    messages = generate_conversations(users, sessions_per_user, seed=seed)
    load_legacy_rows(legacy_url, MESSAGES, messages, replace=True)
    store_path = folder / "entries.db"
    _remove_sqlite(store_path)
    store = f"sqlite:///{store_path}"
    opened = open_store(store, create=True)
    try:
        opened.put_many(
            generate_entries(
                entries, scopes=("alice", "bob", "support-bot", "ops"), seed=seed, embedder=embedder
            )
        )
    finally:
        opened.close()
    migration = build_migration(
        legacy_url, DEMO_DATABASE, rows=items, dimensions=embedder.dimension, seed=seed, embedder=embedder
    )
    return {
        "legacy_url": legacy_url,
        "store": store,
        "pgvector_url": DEMO_DATABASE,
        "embedding_model": embedder.model_id,
        "dimensions": embedder.dimension,
        "users": users,
        "items": len(items),
        "active_items": migration.active,
        "messages": len(messages),
        "sessions": len({m["session_id"] for m in messages}),
        "entries": entries,
        "backfilled": migration.backfill.get("rowsWritten", migration.backfill.get("rows_written")),
    }


def _remove_sqlite(path: Path) -> None:
    """Delete a SQLite file with its WAL and shared-memory files, closing cached engines first."""
    from memwork.db import dispose_all

    dispose_all()
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def run_demo(
    workspace: str | Path | None = None,
    *,
    reports: str | Path | None = None,
    quiet: bool = True,
    echo: Callable[[str], None] | None = None,
    users: int = DEMO_USERS,
    items_per_user: int = DEMO_ITEMS_PER_USER,
    sessions_per_user: int = DEMO_SESSIONS_PER_USER,
    entries: int = DEMO_ENTRIES,
) -> DemoResult:
    """The whole demo; returns where the HTML reports are.

    ``workspace`` (default: ``MEMWORK_HOME`` or ``./.memwork``) holds the demo data and the embedded
    server while the demo runs; the process's own workspace setting is restored afterwards. The sizes
    default to the demo's (a few hundred users, 20 s); tests pass smaller ones."""
    sizes = {
        "users": users,
        "items_per_user": items_per_user,
        "sessions_per_user": sessions_per_user,
        "entries": entries,
    }
    with using_workspace(workspace) as home:
        return _run_demo(home, reports, quiet, echo, sizes)


def _run_demo(
    home: Path,
    reports: str | Path | None,
    quiet: bool,
    echo: Callable[[str], None] | None,
    sizes: dict[str, int],
) -> DemoResult:
    from memwork.reports import build_index, reports_dir, run_report

    say = echo or (lambda _m: None) if quiet else (echo or print)
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    say("building demo data (legacy store, entry store, pgvector schema and backfill)…")
    data = build_demo_data(home / "demo", **sizes)
    timings["data"] = round(time.perf_counter() - clock, 2)
    out = reports_dir(reports)
    result = DemoResult(
        str(home), data["legacy_url"], data["store"], data["pgvector_url"], str(out), data=data
    )
    plans: list[tuple[str, dict[str, Any]]] = [
        ("health_report", {"store": data["store"]}),
        ("duplicate_review", {"store": data["store"]}),
        ("backfill_verification", {"source_url": data["legacy_url"], "pgvector_url": data["pgvector_url"],
                                   "expected_dimensions": data["dimensions"]}),
    ]  # fmt: skip
    summaries: dict[str, str] = {}
    from memwork.reports.history import latest_summary

    # the demo chains its runs: the health report's trend is against the previous demo's
    previous = latest_summary(out, "health_report", plans[0][1])
    if previous:
        plans[0][1]["previous_summary"] = previous
    for name, params in plans:
        say(f"running report {name}…")
        run = run_report(name, params, out, raise_on_error=False)
        summaries[name] = str(run.summary_path)
        result.runs.append(_run_row(run))
        timings[name] = round(run.duration_s, 2)
    canary_params = {
        "legacy_url": data["legacy_url"],
        "pgvector_url": data["pgvector_url"],
        "health_summary": summaries["health_report"],
        "verification_summary": summaries["backfill_verification"],
        "approver": "memwork demo",
        "embedding_module": DEMO_QUERY_MODULE,
        "waive": "leak_probes: this canary runs in process with no service to probe "
        "(the shadow canary below probes the served one)",
    }
    say("running report canary_signoff…")
    run = run_report("canary_signoff", canary_params, out, raise_on_error=False)
    result.runs.append(_run_row(run))
    timings["canary_signoff"] = round(run.duration_s, 2)
    say("serving the demo data with shadow reads of pgvector, then judging them (canary_signoff)…")
    from memwork.embed import load_embedder
    from memwork.samples.shadow_demo import run_real_text_canary, run_shadow_canary

    clock = time.perf_counter()
    run = run_shadow_canary(
        data,
        home / "demo",
        out,
        query_module=DEMO_QUERY_MODULE,
        health_summary=summaries["health_report"],
        verification_summary=summaries["backfill_verification"],
    )
    row = _run_row(run)
    row.update(name="canary_signoff (shadow reads)", finding=True)
    result.runs.append(row)
    timings["shadow_canary"] = round(time.perf_counter() - clock, 2)
    say("the same rollout on real text (the standard library's docstrings), judged the same way…")
    clock = time.perf_counter()
    run, about = run_real_text_canary(
        home / "demo" / "stdlib", out, embedder=load_embedder(DEMO_EMBEDDER), query_module=DEMO_QUERY_MODULE
    )
    row = _run_row(run)
    row.update(name="canary_signoff (real text)", finding=True)
    result.runs.append(row)
    result.data["real_text"] = about
    timings["real_text_canary"] = round(time.perf_counter() - clock, 2)
    result.index = str(build_index(out))
    result.timings = timings
    return result


def _run_row(run: Any) -> dict[str, Any]:
    from memwork.reports.history import since_text

    row = run.to_dict()
    row["reasons"] = list(run.summary.get("reasons") or ([run.error] if run.error else []))
    row["since"] = since_text(run.summary)
    return row


#: printed after the runs: what each verdict means (README's first screen says the same)
