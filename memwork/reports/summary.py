"""How a notebook hands its machine-readable result to the runner: :func:`record`.

The runner sets ``MEMWORK_REPORT_DIR`` for the kernel; :func:`record` writes ``summary.json`` there.
Run by plain papermill (a scheduler), the notebook's validation cell opens a run folder of its own at
the documented default location (:mod:`memwork.reports.standalone`) and sets the variable. Opened in
JupyterLab, or with ``MEMWORK_REPORT_DIR=off`` (nbval), nothing is written. The last cell of every
notebook calls :func:`gate_on_verdict`, so a scheduler running papermill directly sees FAIL / NO-GO
as :class:`~memwork.errors.VerdictError` and INCONCLUSIVE as
:class:`~memwork.errors.VerdictInconclusive` (a distinct name to map to exit status 3).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from memwork.errors import UsageError, VerdictError, VerdictInconclusive

REPORT_DIR_ENV = "MEMWORK_REPORT_DIR"
SUMMARY_FILE = "summary.json"
VERDICTS = ("PASS", "FAIL", "GO", "NO-GO", "INCONCLUSIVE", "INFO", "ERROR")
FAILING_VERDICTS = ("FAIL", "NO-GO", "ERROR")
#: neither a pass nor a failure: too little data or a marginal result, a person decides (exit 3)
UNDECIDED_VERDICTS = ("INCONCLUSIVE",)
UNDECIDED_EXIT_CODE = 3


def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None, datetimes to ISO text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return _plain(value.to_dict())
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, TypeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return value


def record(summary: dict[str, Any]) -> dict[str, Any]:
    """Record a report's result (must hold ``verdict``); written to summary.json under the runner."""
    if "verdict" not in summary:
        raise ValueError("summary: needs a 'verdict' key")
    verdict = str(summary["verdict"]).upper()
    if verdict not in VERDICTS:
        raise ValueError(f"verdict={summary['verdict']!r}: must be one of {', '.join(VERDICTS)}")
    from memwork.reports.secrets import Scrubber

    data = Scrubber.from_env().data(_plain({**summary, "verdict": verdict}))
    target = os.environ.get(REPORT_DIR_ENV, "")
    if target and target.strip().lower() not in ("off", "none", "-"):
        path = Path(target) / SUMMARY_FILE
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False), encoding="utf-8")
    return data


def gate_on_verdict(summary: dict[str, Any], fail_on_verdict: bool = True) -> None:
    """Raise :class:`VerdictError` for a failing verdict (FAIL, NO-GO) and :class:`VerdictInconclusive`
    for INCONCLUSIVE when ``fail_on_verdict``.

    Called last. Run by plain papermill, it first writes the run's HTML, manifest and index
    (:func:`memwork.reports.standalone.finish`). ``memwork report`` passes ``fail_on_verdict=False``
    and derives its exit code (1, or 3 for INCONCLUSIVE) from summary.json instead.
    """
    from memwork.reports import standalone

    standalone.finish(summary)
    verdict = str(summary.get("verdict", "")).upper()
    reasons = [str(r) for r in summary.get("reasons") or []]
    if fail_on_verdict and verdict in UNDECIDED_VERDICTS:  # undecided never passes, nor fails
        raise VerdictInconclusive(verdict, reasons)
    if fail_on_verdict and verdict in FAILING_VERDICTS:
        raise VerdictError(verdict, reasons)


def load_summary(path: Path | str, *, name: str = "summary") -> dict[str, Any]:
    """A summary.json (or a run folder holding one) as a dict. A file that is not UTF-8 JSON text
    holding an object is a :class:`UsageError` naming ``name`` and the file."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(name, str(path), f"not a summary.json: not UTF-8 text (byte {exc.start})") from exc
    except ValueError as exc:
        raise UsageError(name, str(path), f"not a summary.json: not JSON ({exc})") from exc
    except RecursionError as exc:
        raise UsageError(name, str(path), "not a summary.json: nested too deeply") from exc
    if not isinstance(data, dict):
        raise UsageError(name, str(path), f"holds a JSON {type(data).__name__}, not an object")
    return data
