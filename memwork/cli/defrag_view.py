"""Rich tables for ``memwork defrag`` human output."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from memwork.defrag import ActionResult, Pair


def _console() -> Console:
    return Console()


def _health_table(title: str, health: dict[str, Any]) -> Table:
    table = Table(title=f"{title}: {health['score']}/100 ({health['band']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("entries", str(health["entries"]))
    table.add_row("stubs", str(health["stubs"]))
    table.add_row("total size (bytes)", str(health["total_size"]))
    for key, value in health["coverage"].items():
        table.add_row(key.replace("_pct", " %"), f"{value:.1f}")
    table.add_row("average quality", f"{health['average_quality']:.1f}")
    table.add_row("embedded out of model range", str(health.get("embedded_out_of_range", 0)))
    return table


def out_of_range_line(summary: dict[str, Any]) -> str | None:
    """The line saying how many vectors were set aside because their model could not read the text."""
    count = summary.get("embedded_out_of_range") or 0
    if not count:
        return None
    return (
        f"{count} entr{'y' if count == 1 else 'ies'} embedded out of the model's range (text it cannot "
        "read, e.g. Chinese for an English model): never compared by cosine; text similarity still applies."
    )


def show_result(result: ActionResult) -> None:
    console = _console()
    summary = result.summary
    if result.action == "analyze":
        console.print(_health_table("Health", summary["health"]))
        if len(summary["scopes"]) > 1:
            scopes = Table(title="By scope")
            for col in ("scope", "health", "band", "entries", "stubs"):
                scopes.add_column(col)
            for name, h in summary["scopes"].items():
                scopes.add_row(name, str(h["score"]), h["band"], str(h["entries"]), str(h["stubs"]))
            console.print(scopes)
        return
    if result.pairs:
        table = Table(title=f"{len(result.pairs)} pairs")
        for col in (
            "scope",
            "path a",
            "path b",
            "similarity",
            "text",
            "semantic",
            "matched by",
            "links",
            "flag",
        ):
            table.add_column(col)
        for p in result.pairs:
            table.add_row(
                p.scope,
                p.path_a,
                p.path_b,
                f"{p.similarity:.3f}",
                f"{p.text_similarity:.3f}",
                p.semantic_text(),
                f"policy {p.decision} ({p.policy_score or 0:.3f})"
                if p.decision
                else " + ".join(p.matched_by),
                p.link_status or "",
                _flag(p),
            )
        console.print(table)
    for summary_of_step in [summary, *summary.get("steps", [])]:
        line = out_of_range_line(summary_of_step)
        if line:
            console.print(line, markup=False)
    if "recall_check" in summary:
        console.print(recall_line(summary), markup=False)
    if result.entries:
        table = Table(title=f"{len(result.entries)} entries")
        for col in ("scope", "path", "quality", "age (days)", "hits", "issues"):
            table.add_column(col)
        for e in result.entries:
            table.add_row(
                e.scope, e.path, str(e.quality), f"{e.age_days:.0f}", str(e.hits), ", ".join(e.issues)
            )
        console.print(table)
    for e in result.skipped:
        console.print(f"kept {e.scope}:{e.path}: {e.note}")
    for line in review_lines(summary.get("clusters") or []):
        console.print(line, markup=False)
    if result.plan is not None:
        table = Table(title=f"{len(result.plan)} operations" + (" applied" if result.applied else " planned"))
        for col in ("step", "scope", "operation"):
            table.add_column(col)
        for op in result.plan:
            table.add_row(op.step or "", op.scope, op.describe())
        console.print(table)
    if "health_before" in summary:
        after = summary["health_after"]
        label = "predicted" if after.get("predicted") else "measured"
        console.print(
            f"Health {summary['health_before']['score']} ({summary['health_before']['band']}) -> "
            f"{after['score']} ({after['band']}, {label}); change {summary['health_change']:+d}"
        )
    if result.plan is None:
        if not result.pairs and not result.entries:
            console.print("Nothing found.")
        return
    freed = summary.get("bytes_freed", 0)
    if result.applied:
        console.print(
            f"Applied as run {result.run_id}; {freed} bytes freed. Undo: memwork defrag undo {result.run_id}"
        )
    elif len(result.plan):
        console.print(f"Dry run: {freed} bytes would be freed. Re-run with --apply to execute this plan.")
    else:
        console.print("Nothing to do.")


def recall_line(summary: dict) -> str:
    """The approximate stage's recall estimate, its interval and its sample, in one line."""
    check, estimate = summary["recall_check"], summary["recall_estimate"]
    low, high = check["interval_95"]
    value = (
        "n/a (no pair holds a sampled row)"
        if estimate is None
        else f"{estimate:.3f} (95% {low:.3f}-{high:.3f})"
    )
    return (
        f"Candidates from the HNSW index (k {summary['k']}, ef_search {summary['ef_search']}): "
        f"recall estimate {value}, from {check['sample_exact_pairs']} exact pairs of "
        f"{check['sample_rows']} random rows."
    )


def _flag(pair: Pair) -> str:
    """``exact`` / ``normalised`` copies, and a possible contradiction with its reason."""
    parts = [pair.kind] if pair.kind != "similar" else []
    if pair.contradiction is not None:
        parts.append(f"contradiction, never merged ({pair.contradiction.reason})")
    return "; ".join(parts)


def _pairs(pairs: list[list[str]]) -> str:
    return ", ".join(f"{a} - {b}" for a, b in pairs)


def review_lines(clusters: list[dict[str, Any]]) -> list[str]:
    """One line per reviewed cluster that held a rejected pair: what was rejected and what was done."""
    splits: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
    for cluster in clusters:
        if cluster.get("split_from"):
            splits.setdefault((cluster["scope"], tuple(cluster["split_from"])), []).append(cluster)
    lines = []
    for (scope, members), groups in splits.items():
        merged = [[g["survivor"], *g["merged"]] for g in groups if g.get("survivor")]
        apart = sorted(set(members) - {p for group in merged for p in group})
        done = "; ".join(f"merged {', '.join(g[1:])} into {g[0]}" for g in merged) or "nothing merged"
        held = ([f"rejected pair(s) {_pairs(groups[0]['rejected'])}"] if groups[0]["rejected"] else []) + [
            f"possible contradiction(s) {', '.join(f'{a} - {b} ({why})' for a, b, why in flagged)}"
            for flagged in [groups[0].get("contradictions") or []]
            if flagged
        ]
        lines.append(
            f"Review: cluster {', '.join(members)} (scope {scope}) holds {' and '.join(held)}, "
            f"so it was split: {done}"
            + (f"; kept apart: {', '.join(apart)}" if apart else "")
            + (
                f"; approved but not merged: {_pairs(groups[0]['not_merged'])}"
                if groups[0]["not_merged"]
                else ""
            )
        )
    return lines


def show_runs(runs: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(runs)} journaled runs")
    table.add_column("run id", no_wrap=True)
    for col in ("action", "started", "store", "changes", "status", "undone by"):
        table.add_column(col)
    for r in runs:
        action = r["action"] + (f" {r['undoes']}" if r.get("undoes") else "")
        status = r["status"] + (" (torn last line ignored)" if r.get("torn") else "")
        table.add_row(
            r["run_id"],
            action,
            str(r["started_at"]),
            str(r["store"]),
            str(r["changes"]),
            status,
            r.get("undone_by") or "",
        )
    _console().print(table)
