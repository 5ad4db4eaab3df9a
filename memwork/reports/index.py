"""``reports/index.html``: every run in a reports folder with its verdict, newest first."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from memwork.reports.runner import MANIFEST_FILE, reports_dir
from memwork.reports.summary import SUMMARY_FILE

INDEX_FILE = "index.html"


def collect_runs(root: Path | str | None = None) -> list[dict[str, Any]]:
    """One row per run folder (those holding a summary.json or manifest.json), newest first."""
    root = reports_dir(root)
    rows = []
    for run_dir in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True) if root.exists() else []:
        summary = _load(run_dir / SUMMARY_FILE)
        manifest = _load(run_dir / MANIFEST_FILE)
        if not summary and not manifest:
            continue
        name = manifest.get("report") or summary.get("report") or run_dir.name
        html_files = sorted(run_dir.glob("*.html"))
        rows.append(
            {
                "run_id": run_dir.name,
                "report": name,
                "verdict": summary.get("verdict") or manifest.get("verdict") or "UNKNOWN",
                "started_at": manifest.get("started_at", ""),
                "duration_s": manifest.get("duration_s"),
                "html": f"{run_dir.name}/{html_files[0].name}" if html_files else None,
                "reasons": summary.get("reasons") or ([summary["error"]] if summary.get("error") else []),
            }
        )
    return rows


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def build_index(root: Path | str | None = None) -> Path:
    """Write ``<root>/index.html`` (offline, no scripts) and return its path."""
    root = reports_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    rows = collect_runs(root)
    colours = {"PASS": "#1a7f37", "GO": "#1a7f37", "INFO": "#0969da"}
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
</table></body></html>
"""
    path = root / INDEX_FILE
    path.write_text(page, encoding="utf-8")
    return path
