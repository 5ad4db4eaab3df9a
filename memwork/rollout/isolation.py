"""Isolation as a bound in the sign-off: the result of ``memwork canary app --probes N --json`` read
back, and the gate and evidence it gives the ``canary_signoff`` report.

The probe result file (``leak_probes``) is the CLI's ``--json`` output (or its ``leakProbes`` object).
Its counts are read, and the bound and verdict recomputed from them (:class:`LeakProbes`), so a
verdict edited in the file decides nothing. The sign-off records the observed leaks, the probes sent
and informative, the distinct user pairs, the 95 % upper bound on the leak rate, the required bound
and whether that was the default, with the file's SHA-256. Any verdict of the probes but GO is a
NO-GO reason of the sign-off (a leak; or isolation not shown: the bound above the required one, or
too many uninformative probes); no file given is a NO-GO of the report's sign-off unless ``waive``
names ``leak_probes`` with a reason (``memwork canary judge``, which judges a log: a gate without data).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from memwork.errors import UsageError
from memwork.rollout.app_canary import LeakProbes
from memwork.workspace import read_json_input, sha256_file

FIELD = "leak_probes"
GATE = "isolation"
UNIT = "95% upper bound on the cross-user leak rate"
#: how the sign-off names the probes to run when none were given
HOW = "memwork canary app --base-url URL --probes 3000 --json > probes.json"
_COUNTS = ("probes", "pairs", "answered", "informative", "uninformative", "leaks", "errors")


def read_leak_probes(value: str, field_name: str = FIELD) -> tuple[LeakProbes, str] | None:
    """The probes the file ``value`` records and its SHA-256; None when empty. A missing or unreadable
    file, one without probe counts, or counts that do not add up is a :class:`UsageError`."""
    if not value:
        return None
    path = Path(value)
    missing = "no such file (the --json output of memwork canary app --probes)"
    data = read_json_input(field_name, value, path, missing)
    found = data.get("leakProbes", data) if isinstance(data, dict) else None
    if not isinstance(found, dict) or not all(k in found for k in _COUNTS):
        raise UsageError(
            field_name, value, "holds no probe result (run memwork canary app --probes N --json)"
        )
    known = {f.name for f in fields(LeakProbes)}
    try:
        probes = LeakProbes(**{k: v for k, v in found.items() if k in known})
        counts = [int(getattr(probes, k)) for k in _COUNTS]
    except (TypeError, ValueError) as exc:
        raise UsageError(field_name, value, f"unreadable probe counts ({exc})") from exc
    sent, _, answered, informative, uninformative, leaks, errors = counts
    if (
        min(counts) < 0
        or answered + errors != sent
        or informative + uninformative != answered
        or leaks > informative
    ):
        raise UsageError(field_name, value, "probe counts do not add up")
    if not 0 < float(probes.max_leak_rate) < 1:
        raise UsageError(field_name, value, f"max_leak_rate {probes.max_leak_rate} is not between 0 and 1")
    return probes, sha256_file(path)


def evidence(value: str, read: tuple[LeakProbes, str] | None) -> dict[str, Any]:
    """What the sign-off records of the probes (``{"given": False}`` when none)."""
    if read is None:
        return {"given": False, "how": HOW}
    probes, sha256 = read
    return {
        "given": True,
        "file": value,
        "file_sha256": sha256,
        "observed_leaks": probes.leaks,
        "probes": probes.probes,
        "informative": probes.informative,
        "uninformative": probes.uninformative,
        "errors": probes.errors,
        "distinct_pairs": probes.pairs,
        "upper_bound": probes.upper_bound,
        "confidence": probes.confidence,
        "required_bound": probes.max_leak_rate,
        "required_origin": probes.max_leak_rate_origin,
        "verdict": probes.verdict,
        "sentence": probes.sentence(),
        # where the probe users' memories were (the served backend must read them to be bounded)
        "planted_in": probes.planted_in,
        "planted": probes.planted,
        "removed": probes.removed,
        "left": probes.left,
    }


def reason(read: tuple[LeakProbes, str] | None, require_inputs: bool = False, waiver: str = "") -> str | None:
    """The sign-off's NO-GO reason from the probes (None: no reason). No file is a reason when the
    probes are required and not waived (``waiver``: why the run goes without them)."""
    if read is None:
        if not require_inputs or waiver:
            return None
        return f"{GATE}: no probe result given ({FIELD}; {HOW}; or waive '{FIELD}: <reason>')"
    probes, _ = read
    if probes.verdict == "GO":
        return None
    head = "cross-user leak" if probes.leaks else "not shown"
    return f"{GATE}: {head}: {probes.sentence()}"


def gate_row(
    read: tuple[LeakProbes, str] | None, require_inputs: bool = False, waiver: str = ""
) -> dict[str, Any]:
    """The isolation gate of the report's strip (:class:`memwork.reports.gates.Gate` as a dict): no
    file is ``fail`` when required, ``off`` with the reason when waived, else ``nodata``."""
    from memwork.reports.gates import Gate, Origin, State

    if read is None and waiver:
        return Gate(GATE, "off", None, None, "<=", "set", UNIT, f"waived: {waiver}").to_dict()
    if read is None:
        why = f"no probe result given ({FIELD}): isolation not shown; {HOW}"
        missing: State = "fail" if require_inputs else "nodata"
        return Gate(GATE, missing, None, None, "<=", "default", UNIT, why).to_dict()
    probes, _ = read
    state: State = "pass" if probes.verdict == "GO" else "fail"
    origin: Origin = "set" if probes.max_leak_rate_origin == "set" else "default"
    return Gate(
        GATE, state, probes.upper_bound, probes.max_leak_rate, "<=", origin, UNIT, probes.sentence()
    ).to_dict()
