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
