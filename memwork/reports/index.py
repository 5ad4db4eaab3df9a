"""``reports/index.html``: every run in a reports folder with its verdict, newest first.

A run folder whose summary.json or manifest.json is damaged (not JSON, or JSON of the wrong shape)
is skipped and named on the page, so one bad folder never breaks the index or a later report.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from memwork.errors import DamagedRun
from memwork.reports.history import key_numbers
from memwork.reports.runner import MANIFEST_FILE, reports_dir
from memwork.reports.summary import SUMMARY_FILE

INDEX_FILE = "index.html"


def collect_runs(root: Path | str | None = None) -> list[dict[str, Any]]:
    """One row per run folder (those holding a summary.json or manifest.json), newest first."""
    return scan_runs(root)[0]


def scan_runs(root: Path | str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(rows of the readable runs, ``{run_id, problem}`` of each damaged one), newest first."""
    root = reports_dir(root)
    rows, skipped = [], []
    for run_dir in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True) if root.exists() else []:
        try:
            row = _run_row(run_dir)
        except DamagedRun as exc:
            skipped.append({"run_id": run_dir.name, "problem": str(exc)})
            continue
        if row is not None:
            rows.append(row)
    return rows, skipped


def _run_row(run_dir: Path) -> dict[str, Any] | None:
    summary = _load(run_dir / SUMMARY_FILE)
    manifest = _load(run_dir / MANIFEST_FILE)
    if not summary and not manifest:
        return None
    html_files = sorted(run_dir.glob("*.html"))
    reasons = summary.get("reasons") or ([summary["error"]] if summary.get("error") else [])
    duration = manifest.get("duration_s")
    numbers = summary.get("key_numbers")
    report = _text(manifest.get("report") or summary.get("report") or run_dir.name)
    if isinstance(numbers, dict):  # and those read from summary.json a run recorded before they were followed
        numbers = key_numbers(report, summary) | numbers
    return {
        "run_id": run_dir.name,
        "group": str(summary.get("group") or "ungrouped (run before groups were recorded)"),
        "kind": _kind(summary),
        "key_numbers": numbers if isinstance(numbers, dict) else {},
        "fingerprint": summary.get("fingerprint") if isinstance(summary.get("fingerprint"), dict) else None,
        "comparison": summary.get("comparison") if isinstance(summary.get("comparison"), dict) else {},
        "report": report,
        "verdict": _text(summary.get("verdict") or manifest.get("verdict") or "UNKNOWN"),
        "started_at": _text(manifest.get("started_at", "")),
        "duration_s": duration if isinstance(duration, (int, float)) else None,
        "html": f"{run_dir.name}/{html_files[0].name}" if html_files else None,
        "reasons": [str(r) for r in reasons] if isinstance(reasons, list) else [str(reasons)],
    }


def _text(value: Any) -> str:
    """A field shown in the index: a string or number as text; anything else is a damaged run."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise DamagedRun(f"unexpected value {json.dumps(value)[:80]}")


def _load(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; {} when the file is missing or not JSON (an interrupted run)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        raise DamagedRun(f"{path.name} holds a JSON {type(data).__name__}, not an object")
    return data


def _kind(summary: dict[str, Any]) -> str:
    """What kind of run of its report (two canary sign-offs are told apart by how they judged)."""
    if summary.get("metrics"):
        return "shadow reads judged"
    if summary.get("report") == "canary_signoff" and summary.get("gates"):
        return "in-process canary"
    return ""


_COLOURS = {"PASS": "#1a7f37", "GO": "#1a7f37", "INFO": "#0969da", "INCONCLUSIVE": "#9a6700"}


def sparkline(values: list[float], width: int = 90, height: int = 22) -> str:
    """An inline SVG trend line (oldest left), the last point marked; empty for fewer than 2 values."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 4) / (len(values) - 1)
    points = [(2 + i * step, height - 2 - (v - low) / span * (height - 4)) for i, v in enumerate(values)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    x, y = points[-1]
    label = html.escape(" → ".join(f"{v:g}" for v in values), quote=True)
    return (
        f"<svg class='spark' width='{width}' height='{height}' role='img' aria-label='{label}'>"
        f"<title>{label}</title><polyline fill='none' stroke='#0969da' stroke-width='1.5' points='{path}'/>"
        f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='#0969da'/></svg>"
    )


def comparable_chain(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The newest run and the older runs comparable with it, newest first, up to the first that is
    not; and why the chain stops there ('' when it runs to the oldest)."""
    from memwork.reports.history import differences

    if not runs or runs[0]["fingerprint"] is None:
        return runs[:1], ""
    chain = [runs[0]]
    for row in runs[1:]:
        if row["fingerprint"] is None:
            return chain, f"{row['run_id']} recorded no fingerprint"
        why = differences(runs[0]["fingerprint"], row["fingerprint"])
        if why:
            return chain, f"{row['run_id']} is not comparable: " + "; ".join(why[:3])
        chain.append(row)
    return chain, ""


def _previous_cell(comparison: dict[str, Any]) -> str:
    """The link to a run's previous comparable run (its path is relative to the run's own folder)."""
    previous = comparison.get("previous_comparable")
    href = str(comparison.get("previous_comparable_html") or "").removeprefix("../")
    if previous and href:
        return f"<a href='{html.escape(href)}'>{html.escape(str(previous))}</a>"
    return "first run" if comparison.get("note") == "first run" else "none comparable"


def _group_section(report: str, group: str, runs: list[dict[str, Any]]) -> str:
    chain, stop = comparable_chain(runs)
    labels = list(runs[0]["key_numbers"])
    trend_cells = []
    for label in labels:
        values = [r["key_numbers"].get(label) for r in reversed(chain)]
        series = [float(v) for v in values if isinstance(v, (int, float))]
        now = runs[0]["key_numbers"].get(label)
        trend_cells.append(
            f"<tr><td>{html.escape(label)}</td><td class='num'>{html.escape(f'{now:g}')}</td>"
            f"<td>{sparkline(series) or '<span class=muted>one comparable run</span>'}</td></tr>"
        )
    trend = (
        "<table class='trend'><tr><th>key number</th><th>latest</th>"
        f"<th>trend over {len(chain)} comparable run(s)</th></tr>{''.join(trend_cells)}</table>"
        if trend_cells
        else ""
    )
    refused = f"<p class='muted'>trend stops: {html.escape(stop)}</p>" if stop else ""
    rows = []
    for row in runs:
        verdict = html.escape(str(row["verdict"]))
        colour = _COLOURS.get(row["verdict"], "#cf222e")
        link = (
            f"<a href='{html.escape(row['html'])}'>{html.escape(row['run_id'])}</a>"
            if row["html"]
            else html.escape(row["run_id"])
        )
        prev_cell = _previous_cell(row["comparison"] or {})
        numbers = "; ".join(
            f"{k} {v:g}" for k, v in row["key_numbers"].items() if isinstance(v, (int, float))
        )
        reasons = "<br>".join(html.escape(str(r)) for r in row["reasons"][:3])
        duration = "" if row["duration_s"] is None else f"{row['duration_s']:.1f} s"
        rows.append(
            f"<tr><td>{link}</td><td><span class='v' style='background:{colour}'>{verdict}</span></td>"
            f"<td>{html.escape(str(row['started_at']))}</td><td>{duration}</td>"
            f"<td>{html.escape(numbers)}</td><td>{prev_cell}</td><td>{reasons}</td></tr>"
        )
    kind = runs[0].get("kind")
    title = html.escape(report) + (f" <small>({html.escape(kind)})</small>" if kind else "")
    return (
        f"<section class='group'><h2>{title}</h2><p class='muted'>on {html.escape(group)}: "
        f"{len(runs)} run(s)</p>{trend}{refused}"
        "<table><tr><th>run</th><th>verdict</th><th>started (UTC)</th><th>duration</th><th>key numbers</th>"
        f"<th>previous comparable run</th><th>reasons</th></tr>{''.join(rows)}</table></section>"
    )


def build_index(root: Path | str | None = None) -> Path:
    """Write ``<root>/index.html`` (offline, no scripts) and return its path: runs grouped by report
    and by what they looked at (store, source, log), newest group first, each group with its key
    numbers' trend over the runs comparable with its newest, and every run linked to its previous
    comparable run."""
    root = reports_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    rows, skipped = scan_runs(root)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:  # newest first, so each group's runs are too, and groups follow their newest run
        groups.setdefault((str(row["report"]), str(row["kind"]), str(row["group"])), []).append(row)
    sections = "".join(_group_section(report, group, runs) for (report, _k, group), runs in groups.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>memwork reports</title>
<style>
body {{font-family: system-ui, sans-serif; margin: 24px;}}
table {{border-collapse: collapse; margin: 6px 0 10px 0;}} td, th {{border-bottom: 1px solid #d0d7de;
 padding: 5px 10px; text-align: left; vertical-align: top;}}
.v {{color: #fff; padding: 1px 8px; border-radius: 4px; font-weight: 600; white-space: nowrap;}}
.group {{border: 1px solid #d0d7de; border-radius: 6px; padding: 4px 16px; margin: 0 0 16px 0;}}
.group h2 {{font-size: 18px; margin: 8px 0 0 0;}} .muted {{color: #6e7781;}} .num {{text-align: right;}}
</style></head><body>
<h1>memwork reports</h1><p>{len(rows)} run(s) in {len(groups)} group(s) (report × what it looked at),
in {html.escape(str(root))}.{_rollout_link(root)} A trend and a delta are drawn only across comparable runs:
same parameters, memwork version, embedder and inputs.</p>
{sections}{_skipped_block(skipped)}</body></html>
"""
    path = root / INDEX_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _rollout_link(root: Path) -> str:
    """A link to the rollout page when one was built in this folder (``memwork report rollout``)."""
    from memwork.reports.rollout_page import ROLLOUT_PAGE

    if not (root / ROLLOUT_PAGE).is_file():
        return ""
    return f" The staged rollout: <a href='{ROLLOUT_PAGE}'>{ROLLOUT_PAGE}</a>."


def _skipped_block(skipped: list[dict[str, str]]) -> str:
    if not skipped:
        return ""
    items = "".join(f"<li>{html.escape(s['run_id'])}: {html.escape(s['problem'])}</li>" for s in skipped)
    return f"\n<h2>Skipped run folders ({len(skipped)})</h2><ul class='skipped'>{items}</ul>"
