"""The gates a report's verdict stands on: what each checked, against what, and whether it was on.

A verdict is only as good as what it checked, so every report records, in ``summary.json`` under
``gates``, one :class:`Gate` per check it can make -- including the ones that are off. The report's
header draws them as a strip (observed value, threshold, whether the threshold is the documented
default or was set for this run), and a PASS or GO says how many of its gates passed ("9 of 9
gates"), so a green verdict can never hide that it checked nothing.

States:

* ``pass`` / ``fail`` -- the observed value met / missed the threshold;
* ``nodata`` -- the gate is on but had nothing to judge (a missing input it needs is a failure unless
  waived: the report decides which, and says so in ``why``);
* ``off`` -- the gate was switched off (its threshold disabled) or waived; ``why`` says by what.

This module is data only (no rendering, no I/O), so any feature can build gates without importing
the report machinery.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from memwork.errors import UsageError

State = Literal["pass", "fail", "nodata", "off"]
Origin = Literal["default", "set"]
STATES: tuple[State, ...] = ("pass", "fail", "nodata", "off")
#: how ``observed`` is compared with ``threshold``
COMPARISONS = (">=", "<=", "==", ">", "<")


@dataclass(frozen=True)
class Gate:
    """One check behind a verdict. ``origin``: the threshold is the documented default or was set."""

    name: str
    state: State
    observed: float | int | str | None = None
    threshold: float | int | str | None = None
    comparison: str = ">="
    origin: Origin = "default"
    unit: str = ""
    why: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise UsageError("gate.state", self.state, f"must be one of {', '.join(STATES)}")
        if self.comparison not in COMPARISONS:
            raise UsageError("gate.comparison", self.comparison, f"must be one of {', '.join(COMPARISONS)}")
        if self.origin not in ("default", "set"):
            raise UsageError("gate.origin", self.origin, "must be 'default' or 'set'")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judged(
    name: str,
    observed: float | int | None,
    threshold: float | int | None,
    comparison: str = ">=",
    *,
    origin: Origin = "default",
    unit: str = "",
    why: str = "",
) -> Gate:
    """A numeric gate: ``off`` when ``threshold`` is None, ``nodata`` when ``observed`` is None or not
    finite, else ``pass``/``fail`` by ``observed <comparison> threshold``."""
    if threshold is None:
        return Gate(name, "off", observed, None, comparison, origin, unit, why or "threshold not set")
    if observed is None or (isinstance(observed, float) and not math.isfinite(observed)):
        return Gate(name, "nodata", None, threshold, comparison, origin, unit, why or "nothing to judge")
    ok = {
        ">=": observed >= threshold,
        "<=": observed <= threshold,
        "==": observed == threshold,
        ">": observed > threshold,
        "<": observed < threshold,
    }[comparison]
    return Gate(name, "pass" if ok else "fail", observed, threshold, comparison, origin, unit, why)


def origin_of(name: str, given: Mapping[str, Any]) -> Origin:
    """``set`` when the run's parameters named ``name`` explicitly, else ``default``."""
    return "set" if name in given else "default"


def tally(gates: Iterable[Gate | Mapping[str, Any]]) -> dict[str, int]:
    """How many gates are in each state (``{"pass": 9, "fail": 0, "nodata": 0, "off": 1, "on": 9}``);
    ``on`` counts every gate that is not off."""
    counts: dict[str, int] = dict.fromkeys(STATES, 0)
    for gate in gates:
        state = gate.state if isinstance(gate, Gate) else str(gate.get("state"))
        if state in counts:
            counts[state] += 1
    counts["on"] = counts["pass"] + counts["fail"] + counts["nodata"]
    return counts


def passed_sentence(gates: Iterable[Gate | Mapping[str, Any]]) -> str:
    """What a verdict says it stands on: ``"9 of 9 gates passed (1 off)"``."""
    counts = tally(gates)
    text = f"{counts['pass']} of {counts['on']} gates passed"
    extra = [f"{counts[s]} {s}" for s in ("fail", "nodata", "off") if counts[s]]
    return f"{text} ({', '.join(extra)})" if extra else text


def needs_input(
    name: str, given: object, *, waived: Mapping[str, str] | None = None, what: str = "input"
) -> Gate:
    """A gate on an input another gate needs: ``pass`` when ``given``, else ``fail`` -- unless the run
    waived it on purpose (``waived[name]`` holds the reason), then ``off`` with that reason."""
    reason = (waived or {}).get(name, "").strip()
    if given:
        return Gate(name, "pass", "given", "required", "==", "default", "", f"{what} given")
    if reason:
        return Gate(name, "off", "missing", "required", "==", "set", "", f"waived: {reason}")
    return Gate(name, "fail", "missing", "required", "==", "default", "", f"{what} missing and not waived")


def parse_waivers(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"health_summary: no store yet; verification_summary: dry run"`` (or a dict) -> name -> reason.
    A waiver without a reason is refused: waiving a gate is a decision someone must explain."""
    if not text:
        return {}
    items = (
        list(text.items())
        if isinstance(text, Mapping)
        else [tuple(part.split(":", 1)) if ":" in part else (part, "") for part in str(text).split(";")]
    )
    waivers: dict[str, str] = {}
    for item in items:
        name, reason = (str(item[0]).strip(), str(item[1]).strip() if len(item) > 1 else "")
        if not name:
            continue
        if not reason:
            raise UsageError("waive", name, "needs a reason: NAME: why it is waived")
        waivers[name] = reason
    return waivers


_STATE_OF: dict[str, State] = {
    "PASS": "pass",
    "FAIL": "fail",
    "SKIP": "nodata",
    "NODATA": "nodata",
    "MARGINAL": "nodata",
    "OFF": "off",
}


def _status_row(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The in-process canary's ``{gate, status, detail}`` row as a gate; a numeric one (it carries
    ``comparison``) keeps its observed value, threshold, origin and unit, the detail as ``why``."""
    status = str(raw.get("status", "")).upper()
    state = _STATE_OF.get(status, "nodata") if status else "nodata"
    name, detail = str(raw.get("gate", "?")), str(raw.get("detail", ""))
    if raw.get("comparison") in COMPARISONS:
        origin: Origin = "set" if raw.get("origin") == "set" else "default"
        return Gate(
            name, state, _scalar(raw.get("observed")), _scalar(raw.get("threshold")),
            str(raw["comparison"]), origin, str(raw.get("unit") or ""), detail,
        ).to_dict()  # fmt: skip
    return Gate(
        name, state, observed=detail or None, why="input not given" if status == "SKIP" else ""
    ).to_dict()


def _scalar(value: Any) -> float | int | str | None:
    return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None


def gates_of(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every gate a summary.json records, in the :class:`Gate` shape, whichever way the report wrote
    them: ``gates`` as Gate dicts; the in-process canary's ``{gate, status, detail}`` rows; the
    shadow judge's ``metrics`` (a metric that is not required shows as ``off``: informational). A
    judgement that records its own strip (``gates`` in the Gate shape) keeps its ``metrics`` as the
    metric table only: read from both, every gate showed twice."""
    rows: list[dict[str, Any]] = []
    shaped = False
    for raw in summary.get("gates") or []:
        if not isinstance(raw, Mapping):
            continue
        if "state" in raw:
            shaped = True
            rows.append({**Gate(str(raw.get("name", "?")), "off").to_dict(), **dict(raw)})
            continue
        rows.append(_status_row(raw))
    for m in [] if shaped else summary.get("metrics") or []:
        if not isinstance(m, Mapping):
            continue
        label = str(m.get("metric", "?")) + (f" ({m['pair']})" if m.get("pair") else "")
        state: State = _STATE_OF.get(str(m.get("classification", "")).upper(), "nodata")
        if m.get("required") is False:
            state = "off"
        relative = m.get("relative") if m.get("kind") in ("two-sample", "tail") else None
        observed = relative if isinstance(relative, (int, float)) else m.get("estimate")
        direction = str(m.get("direction", ""))
        rows.append(
            Gate(
                label,
                state,
                observed=observed if isinstance(observed, (int, float, str)) else None,
                threshold=m.get("threshold") if isinstance(m.get("threshold"), (int, float, str)) else None,
                comparison=">=" if direction.startswith("decrease") else "<=",
                unit="relative change" if relative is not None else str(m.get("unit") or ""),
                why=("informational, does not decide: " if state == "off" else "")
                + str(m.get("detail") or ""),
            ).to_dict()
        )
    return rows
