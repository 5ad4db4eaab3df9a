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
    return {
        "run_id": run_dir.name,
        "report": _text(manifest.get("report") or summary.get("report") or run_dir.name),
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


def build_index(root: Path | str | None = None) -> Path:
    """Write ``<root>/index.html`` (offline, no scripts) and return its path."""
    root = reports_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    rows, skipped = scan_runs(root)
    colours = {"PASS": "#1a7f37", "GO": "#1a7f37", "INFO": "#0969da", "INCONCLUSIVE": "#9a6700"}
    body = []
    for row in rows:
        verdict = html.escape(str(row["verdict"]))
        colour = colours.get(row["verdict"], "#cf222e")
        link = (
            f"<a href='{html.escape(row['html'])}'>{html.escape(row['run_id'])}</a>"
            if row["html"]
            else html.escape(row["run_id"])
        )
        reasons = "<br>".join(html.escape(str(r)) for r in row["reasons"][:5])
        duration = "" if row["duration_s"] is None else f"{row['duration_s']:.1f} s"
        body.append(
            f"<tr><td>{link}</td><td>{html.escape(str(row['report']))}</td>"
            f"<td><span class='v' style='background:{colour}'>{verdict}</span></td>"
            f"<td>{html.escape(str(row['started_at']))}</td><td>{duration}</td><td>{reasons}</td></tr>"
        )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>memwork reports</title>
<style>
body {{font-family: system-ui, sans-serif; margin: 24px;}}
table {{border-collapse: collapse;}} td, th {{border-bottom: 1px solid #d0d7de; padding: 6px 10px;
 text-align: left; vertical-align: top;}}
.v {{color: #fff; padding: 1px 8px; border-radius: 4px; font-weight: 600;}}
</style></head><body>
<h1>memwork reports</h1><p>{len(rows)} run(s) in {html.escape(str(root))}</p>
<table><tr><th>run</th><th>report</th><th>verdict</th><th>started (UTC)</th><th>duration</th>
<th>reasons</th></tr>
{"".join(body)}
</table>{_skipped_block(skipped)}</body></html>
"""
    path = root / INDEX_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _skipped_block(skipped: list[dict[str, str]]) -> str:
    if not skipped:
        return ""
    items = "".join(f"<li>{html.escape(s['run_id'])}: {html.escape(s['problem'])}</li>" for s in skipped)
    return f"\n<h2>Skipped run folders ({len(skipped)})</h2><ul class='skipped'>{items}</ul>"
