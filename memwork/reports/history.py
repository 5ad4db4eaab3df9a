"""A record across runs: each run's fingerprint, its key numbers, and the previous comparable run.

Two runs of a report are *comparable* when they were asked the same question of the same thing with
the same tools: the same report, the same parameters (``fail_on_verdict`` and
``previous_summary`` aside: they change how a run ends or what it shows, not what it measures), the
same memwork version, the same embedder, and the same input fingerprints a report records
(row counts, checksums of a source: ``summary["input_fingerprint"]``). A delta or a trend is shown only
between comparable runs; otherwise the page says which of these differs, and refuses.

A report's *group* is what it looked at (its store, source, log or service; see :func:`group_of`):
the index groups runs by report and group, and a run's previous run is searched in its group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memwork.reports.runner import ReportRun

#: parameters that do not change what a run measures (``base_url``: a restarted service gets a new port;
#: the log it writes, ``comparison_log``, names what was judged)
NOT_COMPARED = ("fail_on_verdict", "previous_summary", "approver", "review_file", "base_url")
#: parameters naming another run's summary.json: compared by what that run found (its verdict and key
#: numbers), not by its path -- every run has a new folder
SUMMARY_PARAMETERS = ("health_summary", "verification_summary", "certificate")
#: parameters naming what a report looked at, in order of preference
GROUP_PARAMETERS = ("comparison_log", "base_url", "store", "source_url", "pgvector_url")

#: the numbers each report is followed by across runs (dotted paths into summary.json)
KEY_NUMBERS: dict[str, tuple[tuple[str, str], ...]] = {
    "health_report": (
        ("health score", "health.score"),
        ("entries", "health.entries"),
        ("low-quality entries", "low_quality"),
        ("stubs", "stubs"),
    ),
    "duplicate_review": (("duplicate pairs", "pairs"), ("planned operations", "operations")),
    "backfill_verification": (
        ("source rows", "rows.source"),
        ("bad rows", "rows.bad"),
        ("missing rows", "rows.by_kind.missing"),
        ("changed rows", "rows.by_kind.changed"),
        ("bad vectors", "vectors.bad"),
    ),
    "canary_signoff": (("records judged", "records"), ("failed gates", "_failed_gates")),
}


def _dig(data: Mapping[str, Any], path: str) -> Any:
    value: Any = data
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def key_numbers(report: str, summary: Mapping[str, Any]) -> dict[str, float]:
    """The report's key numbers found in ``summary`` (only the numeric ones)."""
    found: dict[str, float] = {}
    for label, path in KEY_NUMBERS.get(report, ()):
        if path == "_failed_gates":
            from memwork.reports.gates import gates_of

            if summary.get("gates") or summary.get("metrics"):
                found[label] = sum(1 for g in gates_of(summary) if g["state"] == "fail")
            continue
        value = _dig(summary, path)
        if (
            value is None
            and path.startswith("rows.by_kind.")
            and isinstance(_dig(summary, "rows.by_kind"), Mapping)
        ):
            value = 0  # a kind the run found none of: 0, so its trend is drawn
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found[label] = value
    for kind, count in (_dig(summary, "rows.by_kind") or {}).items():  # every other bad-row kind found
        if f"{kind} rows" not in found and isinstance(count, int) and not isinstance(count, bool):
            found[f"{kind} rows"] = count
    for label, value in (summary.get("recall_per_bucket") or {}).items():
        if isinstance(value, (int, float)):
            found[f"recall {label}"] = value
    return found


def group_of(parameters: Mapping[str, Any]) -> str:
    """What a run looked at: its store, source, log or service parameter; ``sample`` when none."""
    for name in GROUP_PARAMETERS:
        if parameters.get(name):
            return f"{name}={parameters[name]}"
    return "sample data"


def fingerprint(report: str, parameters: Mapping[str, Any], summary: Mapping[str, Any], version: str) -> dict:
    """What must match for two runs to be comparable."""
    params = {
        k: v for k, v in sorted(parameters.items()) if k not in NOT_COMPARED and k not in SUMMARY_PARAMETERS
    }
    embedder = (
        summary.get("embedder")
        or _dig(summary, "health.embedding_model")
        or parameters.get("embedder")
        or parameters.get("expected_model")
        or ""
    )
    inputs = summary.get("input_fingerprint") if isinstance(summary.get("input_fingerprint"), Mapping) else {}
    inputs = dict(inputs or {})
    for name in SUMMARY_PARAMETERS:
        if parameters.get(name):
            inputs[name] = _found_by(str(parameters[name]))
    return {
        "report": report,
        "parameters": params,
        "memwork_version": version,
        "embedder": str(embedder),
        "inputs": inputs,
    }


def _found_by(path: str) -> Any:
    """What the run behind a summary.json found: its verdict and key numbers (else the path)."""
    folder = Path(path)
    data = _read(folder / "summary.json" if folder.is_dir() else folder)
    if not data:
        return path
    return {"verdict": data.get("verdict"), "key_numbers": data.get("key_numbers") or {}}


def differences(now: Mapping[str, Any], before: Mapping[str, Any]) -> list[str]:
    """Why two fingerprints are not comparable (empty when they are)."""
    why: list[str] = []
    if now.get("report") != before.get("report"):
        why.append(f"report {before.get('report')} → {now.get('report')}")
    for section, label in (("parameters", "parameter"), ("inputs", "input")):
        a, b = dict(before.get(section) or {}), dict(now.get(section) or {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                why.append(f"{label} {key}: {_short(a.get(key))} → {_short(b.get(key))}")
    for key in ("memwork_version", "embedder"):
        if now.get(key) != before.get(key):
            why.append(f"{key.replace('_', ' ')}: {_short(before.get(key))} → {_short(now.get(key))}")
    return why


def _short(value: Any) -> str:
    text = "unset" if value in (None, "") else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def earlier_runs(root: Path, report: str, group: str, before_run: str) -> list[dict[str, Any]]:
    """Earlier runs of ``report`` on ``group`` in the reports folder, newest first: each
    ``{run_id, summary, html}`` (a run without a fingerprint, from before they were recorded, is left
    out: nothing to compare it by)."""
    found = []
    for run_dir in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True) if root.exists() else []:
        if run_dir.name >= before_run:
            continue
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(summary, dict) or not isinstance(summary.get("fingerprint"), dict):
            continue
        fp = summary["fingerprint"]
        if fp.get("report") != report or summary.get("group") != group:
            continue
        html_files = sorted(run_dir.glob("*.html"))
        found.append(
            {"run_id": run_dir.name, "summary": summary, "html": html_files[0].name if html_files else None}
        )
    return found


def compare(
    report: str, group: str, run_id: str, fp: Mapping[str, Any], numbers: Mapping[str, float], root: Path
) -> dict[str, Any]:
    """The comparison a report shows first: is the previous run comparable, and the delta against the
    previous comparable one (``previous`` None when there is none)."""
    earlier = earlier_runs(root, report, group, run_id)
    if not earlier:
        return {"previous": None, "comparable": None, "why_not": [], "delta": [], "note": "first run"}
    last = earlier[0]
    why_not = differences(fp, last["summary"]["fingerprint"])
    target = (
        last
        if not why_not
        else next((r for r in earlier if not differences(fp, r["summary"]["fingerprint"])), None)
    )
    delta = []
    if target is not None:
        before = target["summary"].get("key_numbers") or {}
        for label, value in numbers.items():
            old = before.get(label)
            if isinstance(old, (int, float)):
                delta.append({"number": label, "previous": old, "now": value, "delta": _round(value - old)})
    return {
        "previous": last["run_id"],
        "previous_html": f"../{last['run_id']}/{last['html']}" if last["html"] else None,
        "comparable": not why_not,
        "why_not": why_not,
        "previous_comparable": target["run_id"] if target else None,
        "previous_comparable_html": (
            f"../{target['run_id']}/{target['html']}" if target and target["html"] else None
        ),
        "delta": delta,
    }


def _round(value: float) -> float:
    return round(value, 6) if isinstance(value, float) else value


def attach_comparison(run: ReportRun, meta: dict[str, Any]) -> dict[str, Any]:
    """Add ``fingerprint``, ``group``, ``key_numbers`` and ``comparison`` to the run's summary.json and
    to ``meta`` (the HTML header); returns the comparison."""
    summary = dict(run.summary or _read(run.summary_path))
    summary.setdefault("report", run.name)
    group = group_of(run.parameters)
    fp = fingerprint(run.name, run.parameters, summary, str(meta.get("memwork_version") or ""))
    numbers = key_numbers(run.name, summary)
    comparison = compare(run.name, group, run.run_id, fp, numbers, run.run_dir.parent)
    summary.update({"group": group, "fingerprint": fp, "key_numbers": numbers, "comparison": comparison})
    run.summary = summary
    run.summary_path.write_text(
        json.dumps(summary, indent=2, ensure_ascii=False, default=str), encoding="utf-8"
    )
    meta["comparison"] = comparison
    meta["key_numbers"] = numbers
    meta["summary"] = summary
    return comparison


def latest_summary(root: Path | str, report: str, parameters: Mapping[str, Any]) -> str:
    """The summary.json of the newest earlier run of ``report`` on the same data ('' when none):
    how a chain of runs (the demo, a scheduler) passes ``previous_summary`` on."""
    runs = earlier_runs(Path(root), report, group_of(parameters), "~")  # "~" sorts after every run id
    return str(Path(root) / runs[0]["run_id"] / "summary.json") if runs else ""


def since_text(summary: Mapping[str, Any]) -> str:
    """One line: is the previous run comparable, and how the key numbers moved since."""
    comparison = summary.get("comparison") or {}
    if not comparison or not comparison.get("previous"):
        return "first run of this report on this data" if comparison else ""
    moved = ", ".join(
        f"{d['number']} {d['previous']:g} → {d['now']:g}" for d in comparison.get("delta") or []
    )
    if comparison.get("comparable"):
        return f"since {comparison['previous']} (comparable): {moved or 'no key numbers'}"
    why = "; ".join(comparison.get("why_not") or [])[:160]
    against = comparison.get("previous_comparable")
    return f"not comparable with {comparison['previous']} ({why})" + (
        f"; since {against}: {moved}" if against else ""
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
