"""The sign-off of a rollout verdict: its parameters, the reports it relies on, and one sign-off block.

Both ways to the verdict -- the in-process gates (:mod:`memwork.rollout.gates`) and the judge of
shadow reads (:mod:`memwork.rollout.judge`) -- take the same :class:`SignoffParameters` (the
``canary_signoff`` report's parameters, declared once) and sign with the same :func:`signoff_block`:
who signs, when, on which code, the SHA-256 of the parameters as given (passwords hidden), and each
input report by its run id, verdict and digest. Each adds its own evidence to the block (the judge:
its log, thresholds and metric classes).

Digests: :func:`sha256_json` for data (canonical JSON, sorted keys); files through
:func:`memwork.workspace.sha256_file`, the one every memwork artifact uses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwork.checks import both_or_neither
from memwork.errors import UsageError
from memwork.pgvector.schema import EMBEDDINGS_TABLE
from memwork.redaction import redact_url, redact_value
from memwork.reports.gates import Gate as ReportGate
from memwork.reports.gates import judged, needs_input, parse_waivers
from memwork.rollout.judge import Thresholds
from memwork.workspace import sha256_file

#: the reports a verdict may rely on, and the verdicts of each that let it pass
INPUT_REPORTS = {"verification_summary": ("PASS",), "health_summary": ("PASS", "INFO")}
#: what ``waive`` may name: the input reports and the cross-user probes' result (``leak_probes``)
WAIVABLE = (*INPUT_REPORTS, "leak_probes")


@dataclass(frozen=True)
class SignoffParameters:
    """What the ``canary_signoff`` report is asked: its parameters, with the notebook's names and
    defaults (a test keeps the two lists equal), built once and read by each part that needs them.

    With a ``comparison_log`` or a ``base_url`` the verdict is the judge's on shadow reads; without,
    the in-process gates measure the legacy and target databases (both URLs, or neither: a sample
    migration). ``approver`` and the two input reports are signed either way.
    """

    # the in-process gates: which databases, what to expect, what to allow
    legacy_url: str = ""
    pgvector_url: str = ""
    table: str = EMBEDDINGS_TABLE
    embedding_module: str = ""
    expected_backend: str = "pgvector"
    expected_selected: str = "pgvector"
    sample_size: int = 30
    max_p95_ms: float = 250.0
    max_p95_ratio: float = 0.0  # target p95 / legacy p95; 0 = not gated
    max_errors: int = 0
    # the reports the verdict relies on, and who signs
    health_summary: str = ""
    verification_summary: str = ""
    min_health_score: int = 60  # the health report's own default (the "good" band); 0: any score
    waive: str = ""  # input reports the sign-off goes without, each with its reason ("NAME: why; ...")
    approver: str = ""
    # the judge of shadow reads: which log (or service), its thresholds, which backend pair
    comparison_log: str = ""
    base_url: str = ""
    token: str = field(default="", repr=False)
    band: float = 0.25
    confidence: float = 0.95
    min_samples: int = 20
    max_error_rate: float = 0.01
    max_damaged_share: float = 0.01
    primary_backend: str = ""
    shadow_backend: str = ""
    # what decides by rollout kind (memwork.rollout.roles), the budgets, warm-up and the noise floor
    max_underfill_rate: float = 0.01
    max_p99_ms: float = 1000.0
    latency_band: float = 0.0  # 0: band when the backends rank alike, shown only when they differ
    warmup_s: float = 30.0
    primary_ranking: str = ""
    shadow_ranking: str = ""
    certificate: str = ""  # the migration certificate (default: verification_summary)
    certificate_waiver: str = ""  # the reason the certificate is waived (recorded in the sign-off)
    aa_log: str = ""  # a comparison log of the baseline against itself (A/A): the noise floor
    leak_probes: str = ""  # the --json output of memwork canary app --probes N: isolation as a bound

    @property
    def judges_shadow_reads(self) -> bool:
        """A log or a service given: the judge decides, not the in-process gates."""
        return bool(self.comparison_log or self.base_url)

    def thresholds(self) -> Thresholds:
        """The judge's thresholds, taken from the fields of the same names."""
        return Thresholds(**{f.name: getattr(self, f.name) for f in fields(Thresholds)})

    def as_given(self) -> dict[str, Any]:
        return asdict(self)

    def changed(self) -> dict[str, Any]:
        """The parameters whose value is not the documented default (a gate shows them as ``set``)."""
        defaults = SignoffParameters()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        }

    def waivers(self) -> dict[str, str]:
        """The inputs waived on purpose (``waive``), name -> reason: each must name one of
        :data:`WAIVABLE` and give its reason (else :class:`UsageError` on ``waive``)."""
        found = parse_waivers(self.waive)
        for name in found:
            if name not in WAIVABLE:
                raise UsageError("waive", name, f"not an input (inputs: {', '.join(WAIVABLE)})")
        return found

    def check(self) -> None:
        """Reject impossible settings (:class:`UsageError` naming the field) before anything is built,
        read or measured: the judge's when it judges, else the gates'."""
        self.waivers()
        if not 0 <= int(self.min_health_score) <= 100:
            raise UsageError("min_health_score", self.min_health_score, "must be from 0 to 100")
        if self.judges_shadow_reads:
            self.check_judge()
        else:
            self.check_gates()
        if self.leak_probes:
            from memwork.rollout.isolation import read_leak_probes

            read_leak_probes(self.leak_probes)

    def check_judge(self) -> None:
        from memwork.rollout.app_canary import check_base_url

        if self.judges_shadow_reads and (self.legacy_url or self.pgvector_url):
            name = "comparison_log" if self.comparison_log else "base_url"
            shown = self.comparison_log or redact_url(self.base_url)
            raise UsageError(name, shown, "judges shadow reads: leave legacy_url and pgvector_url empty")
        self.thresholds().check()
        if self.base_url:
            check_base_url(self.base_url)

    def check_gates(self) -> None:
        both_or_neither("legacy_url", self.legacy_url, "pgvector_url", self.pgvector_url)
        if not 1 <= int(self.sample_size) <= 10_000:
            raise UsageError("sample_size", self.sample_size, "must be from 1 to 10000")
        if float(self.max_p95_ms) <= 0:
            raise UsageError("max_p95_ms", self.max_p95_ms, "must be positive")
        if float(self.max_p95_ratio) < 0:
            raise UsageError("max_p95_ratio", self.max_p95_ratio, "must be 0 (off) or positive")
        if int(self.max_errors) < 0:
            raise UsageError("max_errors", self.max_errors, "must be 0 or more")
        for name in INPUT_REPORTS:
            value = getattr(self, name)
            if value and not summary_file(value).is_file():
                raise UsageError(name, value, "no such summary.json")


# ---- the reports a verdict relies on ---------------------------------------------------------------


def summary_file(value: str | Path) -> Path:
    """A report's summary.json: the file given, or the one in the run folder given."""
    path = Path(value)
    return path / "summary.json" if path.is_dir() else path


@dataclass(frozen=True)
class InputReport:
    """A report the verdict relies on (the health report, the backfill verification), as read once:
    its summary and the digest of the file."""

    name: str
    path: Path
    summary: dict[str, Any]
    sha256: str

    @property
    def verdict(self) -> str:
        return str(self.summary.get("verdict") or "UNKNOWN")

    @property
    def run_id(self) -> str:
        found = self.summary.get("run")
        run: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return str(run.get("run_id") or "(no run id: not written by memwork report)")

    @property
    def passed(self) -> bool:
        """Its verdict is one that lets a rollout pass."""
        return self.verdict in INPUT_REPORTS.get(self.name, ("PASS",))

    def shown(self) -> dict[str, Any]:
        """What the sign-off records of it."""
        return {
            "run_id": self.run_id,
            "report": self.summary.get("report"),
            "verdict": self.verdict,
            "summary_sha256": self.sha256,
        }


def read_input_report(name: str, value: str) -> InputReport | None:
    """The report ``value`` names (a summary.json or its run folder), None when not given; a missing or
    unreadable file is a :class:`UsageError` naming ``name``."""
    from memwork.reports.summary import load_summary

    if not value:
        return None
    path = summary_file(value)
    if not path.is_file():
        raise UsageError(name, value, "no such summary.json")
    return InputReport(name, path, load_summary(path, name=name), sha256_file(path))


def read_input_reports(parameters: SignoffParameters) -> dict[str, InputReport | None]:
    """Each input report of :data:`INPUT_REPORTS` the parameters name (None for one not given)."""
    return {name: read_input_report(name, getattr(parameters, name)) for name in INPUT_REPORTS}


def input_gates(
    parameters: SignoffParameters,
    inputs: Mapping[str, InputReport | None],
    *,
    required: bool = True,
    certificate: str = "",
) -> list[ReportGate]:
    """The gates on the input reports a verdict relies on, in the strip's shape: per input report one
    :func:`~memwork.reports.gates.needs_input` gate (given: ``pass``; missing: ``fail`` unless
    ``waive`` names it with a reason, then ``off`` with that reason), and for a health report given
    its score against ``min_health_score`` (``health score``; 0: off). ``required=False`` (``memwork
    canary judge``, which judges a log): a missing input shows no gate. ``certificate``: a migration
    certificate given apart (the judge's quality gate) stands in for the verification report."""
    waived = parameters.waivers()
    changed = parameters.changed()
    gates: list[ReportGate] = []
    for name in INPUT_REPORTS:
        report = inputs.get(name)
        stand_in = name == "verification_summary" and report is None and bool(certificate)
        if report is None and not stand_in and not required:
            continue
        what = "migration certificate (certificate)" if stand_in else f"{name} report"
        gates.append(needs_input(name, report is not None or stand_in, waived=waived, what=what))
    health = inputs.get("health_summary")
    if health is not None:
        score = (health.summary.get("health") or {}).get("score")
        minimum = int(parameters.min_health_score)
        gates.append(
            judged(
                "health score",
                score if isinstance(score, (int, float)) else None,
                minimum or None,
                ">=",
                origin="set" if "min_health_score" in changed else "default",
                why=f"health report {health.run_id}, verdict {health.verdict}"
                + ("" if minimum else "; min_health_score 0: any score"),
            )
        )
    return gates


def gate_failures(gates: list[ReportGate]) -> list[str]:
    """A NO-GO reason for each failed gate: ``health score: 40 below 60`` / ``health_summary: ...``."""
    reasons = []
    for gate in gates:
        if gate.state != "fail":
            continue
        if gate.threshold == "required":
            reasons.append(f"{gate.name}: {gate.why} (waive it on purpose: waive '{gate.name}: <reason>')")
        else:
            reasons.append(f"{gate.name}: {gate.observed} below {gate.threshold} ({gate.why})")
    return reasons


# ---- the sign-off block ----------------------------------------------------------------------------


def sha256_json(data: Any) -> str:
    """SHA-256 of canonical JSON (sorted keys): the fingerprint of the parameters."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def shown_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters as the sign-off may fingerprint them: passwords hidden (a digest of a password
    would let anyone holding the report test guesses against it)."""
    return {k: redact_value(k, v) if isinstance(v, str) else v for k, v in parameters.items()}


def signoff_block(
    verdict: str,
    *,
    approver: str,
    parameters: Mapping[str, Any],
    inputs: Mapping[str, InputReport | None],
    evidence: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Who signs, when, on which code, which parameters (their SHA-256, passwords hidden) and which
    input reports (run id, verdict, SHA-256); then the ``evidence`` of the way the verdict was
    reached."""
    from memwork.provenance import memwork_commit, memwork_version

    return {
        "verdict": verdict,
        "approver": approver or "(unsigned)",
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "memwork_version": memwork_version(),
        "git_commit": memwork_commit(),
        "parameters_sha256": sha256_json(shown_parameters(parameters)),
        "inputs": {name: None if report is None else report.shown() for name, report in inputs.items()},
        **(evidence or {}),
    }
