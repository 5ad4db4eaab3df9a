"""``reports/rollout.html``: the stages of a staged rollout, read from the artifacts its runbook names.

``runbooks/pgvector_rollout.md`` leaves, in the folder it runs in, one shadow log per stage
(``shadow-1pct.jsonl``, ``shadow-10pct.jsonl``, ``shadow-100pct.jsonl``), the judge's JSON of the
stages it judges (``judge-10pct.json``, ``judge-100pct.json``), and the ``--json`` output of the
verification and sign-off reports (``verification.json``, ``signoff.json``: their run folders). This
page puts them in order -- the verification the stages rest on, then each stage with its sample rate,
the comparisons its log holds, its verdict and reasons, and links to each artifact -- so an approver
reads the rollout as one record instead of a folder of files.

A page apart from ``index.html`` on purpose: the index is rebuilt from the run folders by every
report run and knows nothing of the shadow logs and judge files, which live beside the runbook's
other artifacts, outside any run folder. The index links the page when it exists.

Nothing is re-judged here: each verdict is the one its artifact recorded; a stage without a judge
file (the runbook's 1 % stage only proves the shadow costs the callers nothing) says so.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memwork.errors import UsageError
from memwork.reports.runner import reports_dir

ROLLOUT_PAGE = "rollout.html"
ROLLOUT_JSON = "rollout.json"
#: the runbook's names: a stage's shadow log and its judge's JSON, by percentage
SHADOW_LOG = re.compile(r"^shadow-(?P<pct>\d+(?:\.\d+)?)pct\.jsonl$")
JUDGE_FILE = "judge-{pct}pct.json"
VERIFICATION_FILE = "verification.json"
SIGNOFF_FILE = "signoff.json"
#: a stage's verdict when nothing judged it
NOT_JUDGED = "NOT JUDGED"


@dataclass
class Artifact:
    """One file a stage rests on: what it is, where it is (relative to the page), and its verdict."""

    label: str
    path: str
    verdict: str = ""


@dataclass
class Stage:
    """One stage of the rollout: its sample rate, the comparisons its log holds, the verdict its
    judge recorded (or :data:`NOT_JUDGED`) with the reasons, and the artifacts behind it."""

    name: str
    sample_rate: float | None
    records: int
    verdict: str
    reasons: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    #: a report run's: the comparison log it judged (the sign-off's belongs to that log's stage)
    judged_log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Rollout:
    """The rollout as the page shows it: the verification first, then the stages in rate order."""

    folder: str
    stages: list[Stage]
    verdict: str
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "stages": [s.to_dict() for s in self.stages],
        }


def read_rollout(folder: Path | str = ".") -> Rollout:
    """The rollout the runbook's artifacts in ``folder`` record (:class:`UsageError` when the folder
    holds no shadow log: nothing to show). Paths are kept relative to ``folder``."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise UsageError("folder", str(folder), "is not a folder")
    logs = sorted(
        (
            (float(m.group("pct")), m.group("pct"), p)
            for p in root.iterdir()
            if (m := SHADOW_LOG.match(p.name))
        ),
    )
    if not logs:
        raise UsageError("folder", str(folder), "holds no shadow-<N>pct.jsonl log (runbook step 6)")
    stages: list[Stage] = []
    verification = _report_stage("verification", root / VERIFICATION_FILE, "verification summary")
    if verification is not None:
        stages.append(verification)
    signoff = _report_stage("sign-off", root / SIGNOFF_FILE, "sign-off report")
    for pct, text, log in logs:
        stages.append(_shadow_stage(root, pct, text, log, signoff))
    if signoff is not None and signoff.judged_log not in {log.name for _p, _t, log in logs}:
        stages.append(signoff)  # it judged a service or another log: a row of its own, last
    return Rollout(str(root), stages, *_overall(stages, signoff))


def _shadow_stage(root: Path, pct: float, text: str, log: Path, signoff: Stage | None) -> Stage:
    records = _count_lines(log)
    stage = Stage(f"{text} %", pct / 100, records, NOT_JUDGED)
    stage.artifacts.append(Artifact("shadow log", log.name))
    judge = root / JUDGE_FILE.format(pct=text)
    data = _read_json(judge)
    if data is not None:
        stage.verdict = str(data.get("verdict") or "UNKNOWN")
        stage.reasons = [str(r) for r in data.get("reasons") or []]
        if isinstance(data.get("records"), int):
            stage.records = data["records"]
        stage.artifacts.append(Artifact("judge JSON", judge.name, stage.verdict))
    else:
        stage.reasons = [f"no {judge.name}: this stage only shows the shadow costs the callers nothing"]
    if signoff is not None and signoff.judged_log == log.name:
        stage.artifacts.extend(signoff.artifacts)
        if stage.verdict == NOT_JUDGED:
            stage.verdict, stage.reasons = signoff.verdict, signoff.reasons
    return stage


def _report_stage(name: str, json_file: Path, label: str) -> Stage | None:
    """A report run the runbook kept the ``--json`` output of: its summary's verdict and reasons."""
    data = _read_json(json_file)
    if data is None:
        return None
    run_dir = Path(str(data.get("run_dir") or ""))
    summary = _read_json(run_dir / "summary.json") or data.get("summary") or {}
    verdict = str(summary.get("verdict") or data.get("verdict") or "UNKNOWN")
    stage = Stage(name, None, 0, verdict, [str(r) for r in summary.get("reasons") or []])
    stage.artifacts.append(Artifact(f"{label} (--json)", json_file.name, verdict))
    if (run_dir / "summary.json").is_file():
        stage.artifacts.append(Artifact(f"{label} summary.json", str(run_dir / "summary.json"), verdict))
    if data.get("html") and Path(str(data["html"])).is_file():
        stage.artifacts.append(Artifact(f"{label} HTML", str(data["html"]), verdict))
    stage.judged_log = Path(str((data.get("parameters") or {}).get("comparison_log") or "")).name
    return stage


def _overall(stages: list[Stage], signoff: Stage | None) -> tuple[str, list[str]]:
    """The rollout's standing: the sign-off's verdict when there is one, else the last judged stage's;
    a failed verification or any NO-GO stage stops it."""
    for stage in stages:
        if stage.verdict in ("FAIL", "NO-GO"):
            return stage.verdict, [f"{stage.name}: {r}" for r in stage.reasons] or [f"{stage.name} failed"]
    if signoff is not None:
        return signoff.verdict, signoff.reasons
    judged = [s for s in stages if s.sample_rate is not None and s.verdict != NOT_JUDGED]
    if not judged:
        return NOT_JUDGED, ["no stage was judged yet"]
    last = judged[-1]
    return last.verdict, [f"{last.name}: {r}" for r in last.reasons]


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when missing; a damaged file is named, not skipped."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {"verdict": "UNREADABLE", "reasons": [f"{path.name} is not JSON"]}
    return (
        data
        if isinstance(data, dict)
        else {"verdict": "UNREADABLE", "reasons": [f"{path.name}: not an object"]}
    )


# ---- the page ------------------------------------------------------------------------------------
_COLOURS = {"PASS": "#1a7f37", "GO": "#1a7f37", "INCONCLUSIVE": "#9a6700", NOT_JUDGED: "#6e7781"}


def _badge(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#cf222e")
    return f"<span class='v' style='background:{colour}'>{html.escape(verdict)}</span>"


def _link(artifact: Artifact, page_dir: Path, root: Path) -> str:
    target = Path(artifact.path) if Path(artifact.path).is_absolute() else root / artifact.path
    href = os.path.relpath(target, page_dir)
    return f"<a href='{html.escape(href, quote=True)}'>{html.escape(artifact.label)}</a>"


def render_rollout(rollout: Rollout, page_dir: Path) -> str:
    """The page (offline, no scripts): the standing, then one row per stage with its artifacts."""
    root = Path(rollout.folder)
    rows = []
    for stage in rollout.stages:
        rate = "" if stage.sample_rate is None else f"{stage.sample_rate:.0%}"
        records = "" if stage.sample_rate is None else f"{stage.records:,}"
        reasons = "<br>".join(html.escape(r) for r in stage.reasons[:8]) or "<span class='muted'>none</span>"
        links = "<br>".join(_link(a, page_dir, root) for a in stage.artifacts)
        rows.append(
            f"<tr><td>{html.escape(stage.name)}</td><td class='num'>{rate}</td><td class='num'>{records}</td>"
            f"<td>{_badge(stage.verdict)}</td><td>{reasons}</td><td>{links}</td></tr>"
        )
    shadow = [s for s in rollout.stages if s.sample_rate is not None]
    judged = [s for s in shadow if s.verdict != NOT_JUDGED]
    standing = "".join(f"<li>{html.escape(r)}</li>" for r in rollout.reasons[:10]) or (
        f"<li>no reasons against: {len(judged)} of {len(shadow)} shadow stage(s) judged</li>"
    )
    index = "<p><a href='index.html'>all report runs</a></p>" if (page_dir / "index.html").is_file() else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>memwork rollout</title>
<style>
body {{font-family: system-ui, sans-serif; margin: 24px;}}
table {{border-collapse: collapse; margin: 6px 0 10px 0;}} td, th {{border-bottom: 1px solid #d0d7de;
 padding: 5px 10px; text-align: left; vertical-align: top;}}
.v {{color: #fff; padding: 1px 8px; border-radius: 4px; font-weight: 600; white-space: nowrap;}}
.muted {{color: #6e7781;}} .num {{text-align: right;}}
</style></head><body>
<h1>Rollout {_badge(rollout.verdict)}</h1>
<p>The staged rollout recorded in {html.escape(rollout.folder)} (runbooks/pgvector_rollout.md): the
verification the stages rest on, then each shadow stage by sample rate. Each verdict is the one its
artifact recorded; a stage without a judge file is {NOT_JUDGED}.</p>
<ul>{standing}</ul>
<table><tr><th>stage</th><th>sample rate</th><th>comparisons</th><th>verdict</th><th>reasons</th>
<th>artifacts</th></tr>{"".join(rows)}</table>
{index}
</body></html>
"""


def build_rollout_page(folder: Path | str = ".", out: Path | str | None = None) -> tuple[Path, Rollout]:
    """Write ``<reports>/rollout.html`` and ``rollout.json`` from the runbook's artifacts in ``folder``
    (the reports folder: ``out``, ``$MEMWORK_REPORTS_DIR`` or ``./reports``); returns the page's path
    and what it shows."""
    rollout = read_rollout(folder)
    page_dir = reports_dir(out)
    page_dir.mkdir(parents=True, exist_ok=True)
    page = page_dir / ROLLOUT_PAGE
    page.write_text(render_rollout(rollout, page_dir), encoding="utf-8")
    (page_dir / ROLLOUT_JSON).write_text(json.dumps(rollout.to_dict(), indent=2), encoding="utf-8")
    return page, rollout
